#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/status.h"
#include "transport/auth.h"
#include "transport/socket.h"
#include "dtrain/store.h"

struct dt_store_client {
    int fd;
    char what[96];
    char local_ip[64];
    double io_timeout;
};

void dt_store_set_io_timeout(dt_store_client *c, double seconds) { c->io_timeout = seconds > 0 ? seconds : 30; }

/* One attempt: connect and prove the token. */
static dt_status connect_once(dt_store_client *c, const char *host, int port, const char *token, int64_t deadline_ns)
{
    dt_status s = dt__sock_connect(host, port, deadline_ns, &c->fd);
    if (s != DT_OK)
        return dt__wrap(s, "rendezvous: ");
    s = dt__auth_connect(c->fd, token, "dtrain-store", 0, deadline_ns, c->what);
    if (s != DT_OK) {
        close(c->fd);
        c->fd = -1;
    }
    return s;
}

dt_status dt_store_connect(const char *host, int port, const char *token, double timeout_s,
                            dt_store_client **out)
{
    int64_t deadline_ns = dt__deadline_after(timeout_s);
    dt_store_client *c = calloc(1, sizeof *c);
    if (!c)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    snprintf(c->what, sizeof c->what, "rendezvous store %s:%d", host, port);
    c->io_timeout = 30;
    c->fd = -1;
    /* A server that dropped or turned this connection away (too many clients,
     * strangers crowding it) may take the next one: try again until the
     * deadline, and report what the server last said.  A wrong token or a
     * stranger's greeting is final.  An attempt keeps 100 ms after the
     * pause: one begun at the deadline times out before the server can
     * answer, and its timeout would hide what the server said. */
    dt_status s;
    while ((s = connect_once(c, host, port, token, deadline_ns)) != DT_OK) {
        if (s == DT_ERR_AUTH || s == DT_ERR_PROTOCOL || dt__now_ns() + 200000000 >= deadline_ns)
            break;
        struct timespec pause = {0, 100000000};
        nanosleep(&pause, NULL);
    }
    if (s != DT_OK) {
        free(c);
        return s;
    }
    dt__sock_local_ip(c->fd, c->local_ip, sizeof c->local_ip);
    *out = c;
    return DT_OK;
}

int dt_store_broken(const dt_store_client *c) { return !c || c->fd < 0; }

const char *dt_store_local_ip(const dt_store_client *c) { return c->local_ip; }

void dt_store_close(dt_store_client *c)
{
    if (!c)
        return;
    if (c->fd >= 0)
        close(c->fd);
    free(c);
}

static dt_status request(dt_store_client *c, int op, const char *key, const void *val, size_t vlen,
                         int timeout_ms, void **rval, size_t *rlen, int *rstatus)
{
    size_t klen = strlen(key);
    if (klen == 0 || klen > DT_STORE_MAX_KEY || vlen > DT_STORE_MAX_VALUE)
        return dt__fail(DT_ERR_INVALID, "store key '%s' or its value (%zu bytes) exceeds the limits", key, vlen);
    uint8_t hdr[DT_STORE_REQ_HDR] = {0};
    hdr[0] = (uint8_t)op;
    dt__put_u32(hdr + 4, (uint32_t)klen);
    dt__put_u32(hdr + 8, (uint32_t)vlen);
    dt__put_u32(hdr + 12, (uint32_t)timeout_ms);
    if (c->fd < 0)
        return dt__fail(DT_ERR_PEER, "%s: the connection was lost by an earlier request", c->what);
    /* The reply to GET may legitimately take timeout_ms; allow io_timeout more. */
    int64_t deadline = dt__deadline_after(timeout_ms / 1000.0 + c->io_timeout);
    uint8_t resp[DT_STORE_RESP_HDR] = {0};
    dt_status s = dt__sock_send_all(c->fd, hdr, sizeof hdr, deadline, c->what);
    if (s == DT_OK)
        s = dt__sock_send_all(c->fd, key, klen, deadline, c->what);
    if (s == DT_OK && vlen)
        s = dt__sock_send_all(c->fd, val, vlen, deadline, c->what);
    if (s == DT_OK)
        s = dt__sock_recv_all(c->fd, resp, sizeof resp, deadline, c->what);
    uint32_t len = dt__get_u32(resp + 4);
    if (s == DT_OK && (resp[0] > DT_STORE_BAD || len > DT_STORE_MAX_VALUE))
        s = dt__fail(DT_ERR_PROTOCOL, "%s sent a malformed reply", c->what);
    void *buf = s == DT_OK ? malloc(len + 1) : NULL;
    if (s == DT_OK && !buf)
        s = dt__fail(DT_ERR_NOMEM, "out of memory");
    if (s == DT_OK)
        s = dt__sock_recv_all(c->fd, buf, len, deadline, c->what);
    if (s != DT_OK) { /* a half-done exchange leaves the stream unusable */
        free(buf);
        close(c->fd);
        c->fd = -1;
        return s;
    }
    *rstatus = resp[0];
    ((char *)buf)[len] = '\0';
    if (rval) {
        *rval = buf;
        *rlen = len;
    } else {
        free(buf);
    }
    if (*rstatus == DT_STORE_BAD)
        return dt__fail(DT_ERR_PROTOCOL, "%s rejected the request for key '%s'", c->what, key);
    return DT_OK;
}

dt_status dt_store_set(dt_store_client *c, const char *key, const void *val, size_t len)
{
    int st;
    return request(c, DT_STORE_SET, key, val, len, 0, NULL, NULL, &st);
}

dt_status dt_store_get(dt_store_client *c, const char *key, double timeout_s, void **val, size_t *len)
{
    int st;
    double ms = timeout_s * 1000.0;
    int timeout_ms = ms > 2e9 ? 2000000000 : (int)ms;
    DT_CHECK(request(c, DT_STORE_GET, key, NULL, 0, timeout_ms, val, len, &st));
    if (st == DT_STORE_MISSING) {
        free(*val);
        *val = NULL;
        return dt__fail(DT_ERR_TIMEOUT, "key '%s' did not appear in the %s within %.0f s", key, c->what,
                        timeout_s);
    }
    return DT_OK;
}

dt_status dt_store_add(dt_store_client *c, const char *key, int64_t delta, int64_t *result)
{
    uint8_t v[8];
    dt__put_u64(v, (uint64_t)delta);
    void *r = NULL;
    size_t rl = 0;
    int st;
    DT_CHECK(request(c, DT_STORE_ADD, key, v, 8, 0, &r, &rl, &st));
    dt_status s = DT_OK;
    if (rl != 8)
        s = dt__fail(DT_ERR_PROTOCOL, "%s: ADD reply of %zu bytes", c->what, rl);
    else if (result)
        *result = (int64_t)dt__get_u64(r);
    free(r);
    return s;
}
