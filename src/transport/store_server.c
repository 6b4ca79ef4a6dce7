/* The rendezvous store server: one acceptor thread plus one thread per
 * client.  A client that fails the job-token handshake, sends garbage or
 * stops mid-message is logged and dropped; the store keeps serving.
 *
 * Strangers must not crowd out the job's own processes (issue 29):
 * - a connection has AUTH_SECONDS to prove the job token;
 * - unauthenticated connections are capped apart from authenticated ones
 *   (MAX_UNAUTH): at the cap the oldest one is dropped, never the new one,
 *   so a rank arriving behind a flood of idle connections still gets in;
 * - with MAX_CLIENTS authenticated clients a newcomer is told "too many
 *   clients" (a DTNO greeting the client reports) before being closed;
 * - out of file descriptors, the acceptor drops the oldest unauthenticated
 *   connection and stops polling the listener for ACCEPT_BACKOFF_MS instead
 *   of spinning on the failing accept;
 * - lines strangers can provoke are rate limited (LOG_BURST per LOG_WINDOW_S,
 *   then one line with the number suppressed). */
#include <errno.h>
#include <poll.h>
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
#include "transport/auth.h"
#include "transport/socket.h"
#include "transport/store_limits.h"
#include "dtrain/store.h"

#define AUTH_SECONDS 3.0
#define MAX_CLIENTS 4096
#define MAX_UNAUTH 512
#define ACCEPT_BACKOFF_MS 100
#define LOG_BURST 5
#define LOG_WINDOW_S 10.0

typedef struct {
    char *key;
    uint8_t *val;
    size_t len;
} entry;

typedef struct client {
    struct client *next; /* newest first */
    dt_store_server *srv;
    int fd;
    bool authed;  /* proved the job token; guarded by mu */
    bool dropped; /* shut down to make room; guarded by mu */
    char peer[96];
} client;

struct dt_store_server {
    int listen_fd, port;
    char *token;
    pthread_t acceptor;
    pthread_mutex_t mu;
    pthread_cond_t changed; /* a key was set, a client ended, or stop */
    bool stopping;
    int nclients, nunauth, refused; /* nclients: every thread; nunauth: of them, not yet authenticated */
    int max_auth, max_unauth;
    long dropped; /* unauthenticated connections dropped to make room */
    dt__log_limit refusals, accept_failures; /* guarded by mu */
    client *clients;
    entry *entries;
    size_t nentries, cap;
};

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
    if (!c->authed)
        s->nunauth--;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->mu);
    close(c->fd);
    free(c);
}

/* Log a refused or dropped connection, at most LOG_BURST lines a window. */
static void log_refusal(dt_store_server *s, const char *why)
{
    long suppressed = 0;
    pthread_mutex_lock(&s->mu);
    bool pass = !s->stopping && dt__log_limit_pass(&s->refusals, &suppressed);
    pthread_mutex_unlock(&s->mu);
    if (!pass)
        return;
    if (suppressed)
        DT_WARN("rendezvous store: refused a connection: %s (and %ld more since the last such line)", why,
                suppressed);
    else
        DT_WARN("rendezvous store: refused a connection: %s", why);
}

/* Tell the client why it is turned away, in place of the challenge. */
static void send_refusal(client *c, const char *why)
{
    uint8_t msg[DT_AUTH_CHALLENGE_LEN] = {0};
    memcpy(msg, DT_AUTH_REFUSAL, 4);
    size_t n = strlen(why);
    memcpy(msg + 4, why, n < sizeof msg - 5 ? n : sizeof msg - 5); /* NUL-padded */
    dt__sock_send_all(c->fd, msg, sizeof msg, dt__deadline_after(1), c->peer);
}

static void *client_main(void *arg)
{
    client *c = arg;
    dt_store_server *s = c->srv;
    pthread_mutex_lock(&s->mu);
    int max_auth = s->max_auth;
    bool full = s->nclients - s->nunauth >= max_auth;
    pthread_mutex_unlock(&s->mu);
    dt_status st;
    if (full) {
        char why[64];
        snprintf(why, sizeof why, "too many clients (%d)", max_auth);
        send_refusal(c, why);
        st = dt__fail(DT_ERR_PEER, "%s: %s", c->peer, why);
    } else {
        st = dt__auth_accept(c->fd, s->token, "dtrain-store", dt__deadline_after(AUTH_SECONDS), c->peer, NULL);
    }
    pthread_mutex_lock(&s->mu);
    bool dropped = c->dropped;
    if (st == DT_OK && !dropped) {
        c->authed = true;
        s->nunauth--;
    }
    if (st != DT_OK)
        s->refused++;
    pthread_mutex_unlock(&s->mu);
    if (st != DT_OK || dropped) {
        if (dropped) /* already logged by the acceptor */
            st = st == DT_OK ? DT_ERR_PEER : st;
        else
            log_refusal(s, dt_last_error());
        client_done(c);
        return NULL;
    }
    for (;;) {
        st = serve_one(c);
        if (st != DT_OK)
            break;
    }
    pthread_mutex_lock(&s->mu);
    bool stopping = s->stopping;
    pthread_mutex_unlock(&s->mu);
    /* A client closing after its requests is normal; anything else is logged. */
    if (!stopping && st != DT_ERR_PEER)
        DT_WARN("rendezvous store: dropped %s: %s", c->peer, dt_last_error());
    client_done(c);
    return NULL;
}

/* Caller holds mu.  Shut the oldest unauthenticated connection down (its
 * thread ends it); false when there is none. */
static bool drop_oldest_unauth(dt_store_server *s, const char *because)
{
    client *oldest = NULL;
    for (client *c = s->clients; c; c = c->next)
        if (!c->authed && !c->dropped)
            oldest = c;
    if (!oldest)
        return false;
    oldest->dropped = true;
    shutdown(oldest->fd, SHUT_RDWR);
    s->dropped++;
    long suppressed = 0;
    if (dt__log_limit_pass(&s->refusals, &suppressed))
        DT_WARN("rendezvous store: %s: dropped the oldest connection that had not proved the job token, %s "
                "(%ld dropped so far%s)",
                because, oldest->peer, s->dropped, suppressed ? "; similar lines suppressed" : "");
    return true;
}

/* accept() failed for want of file descriptors or memory: make room, say so
 * (rate limited), and do not look at the listener for a while: it stays
 * readable, and polling it again at once spins a core. */
static void accept_failed(dt_store_server *s, int err)
{
    pthread_mutex_lock(&s->mu);
    char because[160];
    snprintf(because, sizeof because, "accept failed: %s", strerror(err));
    bool made_room = drop_oldest_unauth(s, because);
    long suppressed = 0;
    if (!made_room && dt__log_limit_pass(&s->accept_failures, &suppressed))
        DT_WARN("rendezvous store: cannot accept connections: %s (%d clients); retrying every %d ms%s", strerror(err),
                s->nclients, ACCEPT_BACKOFF_MS, suppressed ? " (failures since the last such line not logged)" : "");
    pthread_mutex_unlock(&s->mu);
    struct timespec pause = {0, ACCEPT_BACKOFF_MS * 1000000L};
    nanosleep(&pause, NULL);
}

static void *acceptor_main(void *arg)
{
    dt_store_server *s = arg;
    for (;;) {
        struct pollfd p = {.fd = s->listen_fd, .events = POLLIN};
        poll(&p, 1, 200);
        pthread_mutex_lock(&s->mu);
        bool stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        if (stopping)
            return NULL;
        int fd;
        char peer[64];
        if (dt__sock_accept(s->listen_fd, &fd, peer, sizeof peer) != DT_OK) {
            int err = errno;
            if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
                accept_failed(s, err);
            continue;
        }
        if (fd < 0)
            continue;
        client *c = calloc(1, sizeof *c);
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_mutex_lock(&s->mu);
        pthread_t th;
        if (!c) {
            pthread_mutex_unlock(&s->mu);
            close(fd);
            pthread_attr_destroy(&attr);
            continue;
        }
        if (s->nunauth >= s->max_unauth)
            drop_oldest_unauth(s, "too many connections that have not proved the job token");
        c->srv = s;
        c->fd = fd;
        snprintf(c->peer, sizeof c->peer, "client %s", peer);
        c->next = s->clients;
        s->clients = c;
        s->nclients++;
        s->nunauth++;
        if (pthread_create(&th, &attr, client_main, c) != 0) {
            s->clients = c->next;
            s->nclients--;
            s->nunauth--;
            close(fd);
            free(c);
        }
        pthread_mutex_unlock(&s->mu);
        pthread_attr_destroy(&attr);
    }
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
    s->max_auth = MAX_CLIENTS;
    s->max_unauth = MAX_UNAUTH;
    s->refusals = (dt__log_limit){.window_s = LOG_WINDOW_S, .burst = LOG_BURST};
    s->accept_failures = (dt__log_limit){.window_s = LOG_WINDOW_S, .burst = 1};
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->changed, NULL);
    if (pthread_create(&s->acceptor, NULL, acceptor_main, s) != 0) {
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
    s->max_unauth = max_unauth;
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
