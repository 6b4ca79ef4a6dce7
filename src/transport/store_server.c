/* The rendezvous store server: the data, and one thread per client that
 * proved the job token (store_accept.c handshakes the arrivals).  A client
 * that sends garbage or stops mid-message is logged and dropped; the store
 * keeps serving. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "transport/socket.h"
#include "transport/store_internal.h"
#include "transport/store_limits.h"

static entry *find(dt_store_server *s, const char *key)
{
    for (size_t i = 0; i < s->nentries; i++)
        if (strcmp(s->entries[i].key, key) == 0)
            return &s->entries[i];
    return NULL;
}

/* Caller holds mu.  Takes ownership of val on success. */
static bool put(dt_store_server *s, const char *key, uint8_t *val, size_t len)
{
    entry *e = find(s, key);
    if (!e) {
        if (s->nentries == s->cap) {
            size_t ncap = s->cap ? s->cap * 2 : 64;
            entry *n = realloc(s->entries, ncap * sizeof *n);
            if (!n)
                return false;
            s->entries = n;
            s->cap = ncap;
        }
        char *k = strdup(key);
        if (!k)
            return false;
        e = &s->entries[s->nentries++];
        e->key = k;
        e->val = NULL;
    }
    free(e->val);
    e->val = val;
    e->len = len;
    pthread_cond_broadcast(&s->changed);
    return true;
}

static dt_status reply(client *c, int status, const void *val, size_t len)
{
    uint8_t hdr[DT_STORE_RESP_HDR] = {0};
    hdr[0] = (uint8_t)status;
    dt__put_u32(hdr + 4, (uint32_t)len);
    int64_t deadline = dt__deadline_after(30);
    DT_CHECK(dt__sock_send_all(c->fd, hdr, sizeof hdr, deadline, c->peer));
    if (len)
        DT_CHECK(dt__sock_send_all(c->fd, val, len, deadline, c->peer));
    return DT_OK;
}

static dt_status serve_get(client *c, const char *key, uint32_t timeout_ms)
{
    dt_store_server *s = c->srv;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&s->mu);
    entry *e;
    int rc = 0;
    while (!(e = find(s, key)) && !s->stopping && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&s->changed, &s->mu, &until);
    uint8_t *copy = NULL;
    size_t len = 0;
    int status = DT_STORE_MISSING;
    if (e) {
        len = e->len;
        copy = malloc(len ? len : 1);
        if (copy) {
            memcpy(copy, e->val, len);
            status = DT_STORE_OK;
        }
    }
    pthread_mutex_unlock(&s->mu);
    dt_status st = reply(c, status, copy, status == DT_STORE_OK ? len : 0);
    free(copy);
    return st;
}

static dt_status serve_one(client *c)
{
    uint8_t hdr[DT_STORE_REQ_HDR];
    DT_CHECK(dt__sock_recv_all(c->fd, hdr, sizeof hdr, INT64_MAX, c->peer));
    int op = hdr[0];
    uint32_t klen = dt__get_u32(hdr + 4), vlen = dt__get_u32(hdr + 8), tmo = dt__get_u32(hdr + 12);
    if (op < DT_STORE_SET || op > DT_STORE_ADD || hdr[1] || hdr[2] || hdr[3] || klen == 0 ||
        klen > DT_STORE_MAX_KEY || vlen > DT_STORE_MAX_VALUE || (op == DT_STORE_ADD && vlen != 8))
        return dt__fail(DT_ERR_PROTOCOL, "malformed request header (op %d, key %u bytes, value %u bytes)",
                        op, klen, vlen);
    char key[DT_STORE_MAX_KEY + 1];
    int64_t deadline = dt__deadline_after(30);
    DT_CHECK(dt__sock_recv_all(c->fd, key, klen, deadline, c->peer));
    key[klen] = '\0';
    if (strlen(key) != klen)
        return dt__fail(DT_ERR_PROTOCOL, "key contains a NUL byte");
    uint8_t *val = malloc(vlen ? vlen : 1);
    if (!val)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_status s = dt__sock_recv_all(c->fd, val, vlen, deadline, c->peer);
    if (s != DT_OK) {
        free(val);
        return s;
    }
    dt_store_server *srv = c->srv;
    if (op == DT_STORE_GET) {
        free(val);
        return serve_get(c, key, tmo);
    }
    if (op == DT_STORE_SET) {
        pthread_mutex_lock(&srv->mu);
        bool ok = put(srv, key, val, vlen);
        pthread_mutex_unlock(&srv->mu);
        if (!ok)
            free(val);
        return reply(c, ok ? DT_STORE_OK : DT_STORE_BAD, NULL, 0);
    }
    /* ADD: counters are stored as 8-byte little-endian values. */
    pthread_mutex_lock(&srv->mu);
    entry *e = find(srv, key);
    int64_t cur = (e && e->len == 8) ? (int64_t)dt__get_u64(e->val) : 0;
    int64_t next = (int64_t)((uint64_t)cur + dt__get_u64(val));
    dt__put_u64(val, (uint64_t)next);
    uint8_t out[8];
    memcpy(out, val, 8);
    bool ok = (!e || e->len == 8) && put(srv, key, val, 8);
    pthread_mutex_unlock(&srv->mu);
    if (!ok)
        free(val);
    return reply(c, ok ? DT_STORE_OK : DT_STORE_BAD, out, ok ? 8 : 0);
}

static void client_done(client *c)
{
    dt_store_server *s = c->srv;
    pthread_mutex_lock(&s->mu);
    for (client **p = &s->clients; *p; p = &(*p)->next)
        if (*p == c) {
            *p = c->next;
            break;
        }
    s->nclients--;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->mu);
    close(c->fd);
    free(c);
}

static void *client_main(void *arg)
{
    client *c = arg;
    dt_store_server *s = c->srv;
    dt_status st;
    while ((st = serve_one(c)) == DT_OK)
        ;
    pthread_mutex_lock(&s->mu);
    bool stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    /* A client closing after its requests is normal; anything else is logged. */
    if (!stopping && st != DT_ERR_PEER)
        DT_WARN("rendezvous store: dropped %s: %s", c->peer, dt_last_error());
    client_done(c);
    return NULL;
}

bool dt__store_serve_client(dt_store_server *s, int fd, const char *peer)
{
    client *c = calloc(1, sizeof *c);
    if (!c)
        return false;
    c->srv = s;
    c->fd = fd;
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    pthread_mutex_lock(&s->mu);
    c->next = s->clients;
    s->clients = c;
    s->nclients++;
    bool ok = pthread_create(&th, &attr, client_main, c) == 0;
    if (!ok) {
        s->clients = c->next;
        s->nclients--;
        free(c);
    }
    pthread_mutex_unlock(&s->mu);
    pthread_attr_destroy(&attr);
    return ok;
}

dt_status dt_store_server_start(const char *bind_ip, int port, const char *token,
                                 dt_store_server **out)
{
    dt_store_server *s = calloc(1, sizeof *s);
    if (!s || !(s->token = strdup(token))) {
        free(s);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    dt_status st = dt__sock_listen(bind_ip, port, &s->listen_fd, &s->port);
    if (st != DT_OK) {
        free(s->token);
        free(s);
        return dt__wrap(st, "rendezvous store: ");
    }
    s->max_auth = DT__STORE_MAX_CLIENTS;
    s->max_unauth = DT__STORE_MAX_UNAUTH;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->changed, NULL);
    if (pthread_create(&s->acceptor, NULL, dt__store_acceptor_main, s) != 0) {
        close(s->listen_fd);
        free(s->token);
        free(s);
        return dt__fail(DT_ERR_SYSTEM, "rendezvous store: cannot start its thread");
    }
    *out = s;
    return DT_OK;
}

int dt_store_server_port(const dt_store_server *s) { return s->port; }

void dt__store_server_set_limits(dt_store_server *s, int max_auth, int max_unauth)
{
    pthread_mutex_lock(&s->mu);
    s->max_auth = max_auth;
    s->max_unauth = max_unauth < DT__STORE_MAX_UNAUTH ? max_unauth : DT__STORE_MAX_UNAUTH;
    pthread_mutex_unlock(&s->mu);
}

int dt_store_server_refused(const dt_store_server *s)
{
    pthread_mutex_lock((pthread_mutex_t *)&s->mu);
    int n = s->refused;
    pthread_mutex_unlock((pthread_mutex_t *)&s->mu);
    return n;
}

void dt_store_server_stop(dt_store_server *s)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    for (client *c = s->clients; c; c = c->next)
        shutdown(c->fd, SHUT_RDWR);
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->acceptor, NULL);
    close(s->listen_fd);
    pthread_mutex_lock(&s->mu);
    while (s->nclients > 0)
        pthread_cond_wait(&s->changed, &s->mu);
    pthread_mutex_unlock(&s->mu);
    for (size_t i = 0; i < s->nentries; i++) {
        free(s->entries[i].key);
        free(s->entries[i].val);
    }
    free(s->entries);
    free(s->token);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->changed);
    free(s);
}
