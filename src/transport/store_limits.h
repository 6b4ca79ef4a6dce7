/* Internal knobs of the rendezvous store server, for tests. */
#ifndef DT_TRANSPORT_STORE_LIMITS_H
#define DT_TRANSPORT_STORE_LIMITS_H

#include "dtrain/store.h"

/* At most max_auth authenticated clients (more are told "too many
 * clients") and max_unauth connections still proving the job token (more:
 * the oldest is dropped).  Defaults: 4096 and 512. */
void dt__store_server_set_limits(dt_store_server *s, int max_auth, int max_unauth);

#endif
