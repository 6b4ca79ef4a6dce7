/* Job-token authentication: HMAC-SHA256 challenge-response in both directions.
 * The token never crosses the wire; each side proves it holds it by MACing
 * the other side's fresh random nonce.
 *
 *   acceptor  -> connector : "DTAU" version(1) nonce_a(32)
 *   connector -> acceptor  : nonce_c(32) info(8) HMAC(token, label|"c"|nonce_a|info)(32)
 *   acceptor  -> connector : HMAC(token, label|"a"|nonce_c|info)(32)
 *
 * `label` separates uses (store vs peer links); `info` is a 64-bit value the
 * connector asserts (its rank for peer links), covered by the MAC. */
#ifndef DT_TRANSPORT_AUTH_H
#define DT_TRANSPORT_AUTH_H

#include <stdint.h>

#include "dtrain/base.h"

#define DT_AUTH_VERSION 1
/* The acceptor's first message: the challenge, or, from a server turning the
 * connection away, "DTNO" and a NUL-padded reason ("too many clients") of
 * the same length, which the connector reports. */
#define DT_AUTH_CHALLENGE_LEN 37
#define DT_AUTH_REFUSAL "DTNO"

/* Acceptor side.  On success *info_out is the connector's asserted info. */
dt_status dt__auth_accept(int fd, const char *token, const char *label, int64_t deadline_ns,
                          const char *what, int64_t *info_out);
/* Connector side: proves the token and checks the acceptor's proof. */
dt_status dt__auth_connect(int fd, const char *token, const char *label, int64_t info,
                           int64_t deadline_ns, const char *what);
/* Fill `out` with cryptographically random bytes. */
dt_status dt__random_bytes(void *out, size_t len);

#endif
