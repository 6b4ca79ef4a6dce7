/* Rendezvous key-value store: a TCP server (run by dtrun, or by rank 0) and a
 * client.  Every connection first proves it holds the job token with an
 * HMAC-SHA256 challenge-response in both directions; the token itself never
 * crosses the wire.  Launchers use this to coordinate nodes; ranks use it to
 * publish their addresses.
 *
 * Wire format after the handshake (little endian):
 *   request : op(1) 0(3) keylen(4) vallen(4) timeout_ms(4) key value
 *   response: status(1) 0(3) vallen(4) value
 * ops: SET stores value under key; GET waits up to timeout_ms for the key to
 * exist and returns its value; ADD adds the i64 in value to the counter under
 * key and returns the new value.  Keys are at most DT_STORE_MAX_KEY bytes,
 * values DT_STORE_MAX_VALUE; anything else closes the connection. */
#ifndef DTRAIN_STORE_H
#define DTRAIN_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_STORE_MAX_KEY 512
#define DT_STORE_MAX_VALUE (1u << 20)
#define DT_STORE_REQ_HDR 16
#define DT_STORE_RESP_HDR 8

enum { DT_STORE_SET = 1, DT_STORE_GET = 2, DT_STORE_ADD = 3 };
enum { DT_STORE_OK = 0, DT_STORE_MISSING = 1, DT_STORE_BAD = 2 };

typedef struct dt_store_server dt_store_server;
typedef struct dt_store_client dt_store_client;

/* Start serving on bind_ip:port (port 0 = any) in a background thread. */
dt_status dt_store_server_start(const char *bind_ip, int port, const char *token,
                                 dt_store_server **out);
int dt_store_server_port(const dt_store_server *s);
/* Number of connections refused so far (bad token, garbage, truncation). */
int dt_store_server_refused(const dt_store_server *s);
void dt_store_server_stop(dt_store_server *s);

/* Connect (retrying for up to timeout_s: the server may start later) and
 * authenticate; DT_ERR_AUTH when either side lacks the token. */
dt_status dt_store_connect(const char *host, int port, const char *token, double timeout_s,
                            dt_store_client **out);
dt_status dt_store_set(dt_store_client *c, const char *key, const void *val, size_t len);
/* Wait up to timeout_s for key; *val is malloc'd (caller frees). */
dt_status dt_store_get(dt_store_client *c, const char *key, double timeout_s, void **val, size_t *len);
dt_status dt_store_add(dt_store_client *c, const char *key, int64_t delta, int64_t *result);
/* Seconds a request may take beyond its own wait (default 30). */
void dt_store_set_io_timeout(dt_store_client *c, double seconds);
/* True when a request failed and closed this client's connection: every
 * later request fails at once; connect again. */
int dt_store_broken(const dt_store_client *c);
/* The local IPv4 address this client uses to reach the store. */
const char *dt_store_local_ip(const dt_store_client *c);
void dt_store_close(dt_store_client *c);

/* The job token from a file: its first line without the line end ("\n" or
 * "\r\n") into out (len bytes: a token of at most len - 1).  `what` (may be
 * NULL) says where the path came from, e.g. "--token-file", for the
 * messages.  DT_ERR_INVALID naming the file when it cannot be read, its
 * first line is empty or the token does not fit; a file other users can
 * read is used, with a warning (chmod 600).  What dtrun's --token-file,
 * DT_TOKEN_FILE and, under srun, dtrain.token in the submit directory go
 * through. */
dt_status dt_read_token_file(const char *path, const char *what, char *out, size_t len);

#ifdef __cplusplus
}
#endif
#endif
