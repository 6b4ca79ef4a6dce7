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
/* The acceptor side in steps, for a listener that handshakes many
 * connections at once without blocking: make the challenge (send it), then
 * once the connector's DT_AUTH_RESPONSE_LEN bytes are in, check them; on
 * success send `proof` (DT_AUTH_PROOF_LEN bytes) and *info_out is the
 * connector's asserted info. */
#define DT_AUTH_RESPONSE_LEN 72
#define DT_AUTH_PROOF_LEN 32
dt_status dt__auth_challenge(uint8_t challenge[DT_AUTH_CHALLENGE_LEN]);
dt_status dt__auth_check(const char *token, const char *label, const uint8_t challenge[DT_AUTH_CHALLENGE_LEN],
                         const uint8_t response[DT_AUTH_RESPONSE_LEN], const char *what,
                         uint8_t proof[DT_AUTH_PROOF_LEN], int64_t *info_out);
/* After a failed dt__auth_check: tell the connector its token was refused
 * (DT_AUTH_PROOF_LEN bytes, "DTNO" and "wrong job token" NUL-padded, in
 * place of the proof), best effort, without blocking.  A connector that
 * reads the connection's end instead of a proof was dropped for another
 * reason (a flood, a timed-out handshake) and may try again. */
void dt__auth_refuse_token(int fd);
/* Connector side: proves the token and checks the acceptor's proof. */
dt_status dt__auth_connect(int fd, const char *token, const char *label, int64_t info,
                           int64_t deadline_ns, const char *what);
/* Fill `out` with cryptographically random bytes. */
dt_status dt__random_bytes(void *out, size_t len);

#endif
