/* The stall inspector (stall.c): a collective waiting longer than
 * DT_STALL_S names the ranks that have not arrived at it. */
#ifndef DT_COMM_STALL_H
#define DT_COMM_STALL_H

#include <stddef.h>

#include "comm/comm_internal.h"

struct dt__heartbeat;

/* w->stall: NULL without a heartbeat (one rank, DT_HEARTBEAT_TIMEOUT=0) or
 * with DT_STALL_S=0; else the inspector, hooked into the heartbeat thread. */
dt_status dt__stall_create(dt__world *w);
/* After the heartbeat stopped; NULL is a no-op. */
void dt__stall_destroy(dt__stall *st);
/* Around every public collective on c (api.c); no-ops when w->stall is NULL. */
void dt__stall_enter(dt_comm *c, const char *op, size_t bytes);
void dt__stall_leave(dt_comm *c);
/* The heartbeat hook: publish this rank's counts, inspect long waits. */
void dt__stall_beat(void *arg, struct dt__heartbeat *h);

#endif
