#include "transport/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/random.h>

#include "base/status.h"
#include "transport/socket.h"

enum { NONCE = 32, MAC = 32, CHALLENGE = 4 + 1 + NONCE, RESPONSE = NONCE + 8 + MAC };
_Static_assert(CHALLENGE == DT_AUTH_CHALLENGE_LEN && RESPONSE == DT_AUTH_RESPONSE_LEN && MAC == DT_AUTH_PROOF_LEN,
               "the lengths auth.h publishes");

dt_status dt__random_bytes(void *out, size_t len)
{
    uint8_t *p = out;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0)
            return dt__fail_errno(DT_ERR_SYSTEM, "getrandom");
        p += n;
        len -= (size_t)n;
    }
    return DT_OK;
}

static void mac(const char *token, const char *label, char role, const uint8_t nonce[NONCE],
                const uint8_t info[8], uint8_t out[MAC])
{
    uint8_t msg[256 + 1 + NONCE + 8];
    size_t ll = strlen(label);
    if (ll > 256)
        ll = 256;
    memcpy(msg, label, ll);
    msg[ll] = (uint8_t)role;
    memcpy(msg + ll + 1, nonce, NONCE);
    memcpy(msg + ll + 1 + NONCE, info, 8);
    unsigned int outlen = MAC;
    HMAC(EVP_sha256(), token, (int)strlen(token), msg, ll + 1 + NONCE + 8, out, &outlen);
}

dt_status dt__auth_challenge(uint8_t challenge[DT_AUTH_CHALLENGE_LEN])
{
    memcpy(challenge, "DTAU", 4);
    challenge[4] = DT_AUTH_VERSION;
    return dt__random_bytes(challenge + 5, NONCE);
}

dt_status dt__auth_check(const char *token, const char *label, const uint8_t challenge[DT_AUTH_CHALLENGE_LEN],
                         const uint8_t response[DT_AUTH_RESPONSE_LEN], const char *what,
                         uint8_t proof[DT_AUTH_PROOF_LEN], int64_t *info_out)
{
    uint8_t expect[MAC];
    const uint8_t *nonce_c = response, *info = response + NONCE, *their_mac = response + NONCE + 8;
    mac(token, label, 'c', challenge + 5, info, expect);
    if (CRYPTO_memcmp(expect, their_mac, MAC) != 0)
        return dt__fail(DT_ERR_AUTH, "%s failed the job-token check (wrong DT_JOB_TOKEN or not a dtrain client)", what);
    mac(token, label, 'a', nonce_c, info, proof);
    if (info_out)
        *info_out = (int64_t)dt__get_u64(info);
    return DT_OK;
}

static void refusal_proof(uint8_t out[MAC])
{
    memset(out, 0, MAC);
    memcpy(out, DT_AUTH_REFUSAL "wrong job token", 4 + 15);
}

void dt__auth_refuse_token(int fd)
{
    uint8_t msg[MAC];
    refusal_proof(msg);
    if (send(fd, msg, sizeof msg, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* the connector is gone: nothing more to tell it */
    }
}

dt_status dt__auth_accept(int fd, const char *token, const char *label, int64_t deadline_ns,
                          const char *what, int64_t *info_out)
{
    uint8_t challenge[CHALLENGE], response[RESPONSE], proof[MAC];
    DT_CHECK(dt__auth_challenge(challenge));
    DT_CHECK(dt__sock_send_all(fd, challenge, sizeof challenge, deadline_ns, what));
    DT_CHECK(dt__sock_recv_all(fd, response, sizeof response, deadline_ns, what));
    dt_status s = dt__auth_check(token, label, challenge, response, what, proof, info_out);
    if (s != DT_OK) {
        dt__auth_refuse_token(fd);
        return s;
    }
    return dt__sock_send_all(fd, proof, sizeof proof, deadline_ns, what);
}

dt_status dt__auth_connect(int fd, const char *token, const char *label, int64_t info,
                           int64_t deadline_ns, const char *what)
{
    uint8_t challenge[CHALLENGE], response[RESPONSE], proof[MAC], expect[MAC];
    DT_CHECK(dt__sock_recv_all(fd, challenge, sizeof challenge, deadline_ns, what));
    if (memcmp(challenge, DT_AUTH_REFUSAL, 4) == 0) {
        char why[CHALLENGE - 4 + 1]; /* untrusted: printable characters only */
        size_t n = 0;
        for (; n < CHALLENGE - 4 && challenge[4 + n]; n++)
            why[n] = challenge[4 + n] >= 32 && challenge[4 + n] < 127 ? (char)challenge[4 + n] : '?';
        why[n] = '\0';
        return dt__fail(DT_ERR_PEER, "%s refused the connection: %s", what, why);
    }
    if (memcmp(challenge, "DTAU", 4) != 0)
        return dt__fail(DT_ERR_PROTOCOL, "%s is not a dtrain endpoint (bad greeting)", what);
    if (challenge[4] != DT_AUTH_VERSION)
        return dt__fail(DT_ERR_PROTOCOL, "%s speaks auth version %d, this build speaks %d", what,
                        challenge[4], DT_AUTH_VERSION);
    DT_CHECK(dt__random_bytes(response, NONCE));
    dt__put_u64(response + NONCE, (uint64_t)info);
    mac(token, label, 'c', challenge + 5, response + NONCE, response + NONCE + 8);
    DT_CHECK(dt__sock_send_all(fd, response, sizeof response, deadline_ns, what));
    dt_status s = dt__sock_recv_all(fd, proof, sizeof proof, deadline_ns, what);
    if (s == DT_ERR_PEER) /* dropped, not refused: a flood of connections or a timed-out handshake */
        return dt__fail(DT_ERR_PEER, "%s closed the connection during the job-token handshake (it may be "
                                     "crowded with connections; trying again)", what);
    DT_CHECK(s);
    uint8_t refused[MAC];
    refusal_proof(refused);
    if (memcmp(proof, refused, MAC) == 0)
        return dt__fail(DT_ERR_AUTH, "%s refused this process's job token (check DT_JOB_TOKEN)", what);
    mac(token, label, 'a', response, response + NONCE, expect);
    if (CRYPTO_memcmp(expect, proof, MAC) != 0)
        return dt__fail(DT_ERR_AUTH, "%s does not hold the job token (impostor or another job)", what);
    return DT_OK;
}
