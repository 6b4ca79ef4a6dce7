/* Engine set-up (full mesh through the rendezvous store) and orderly teardown.
 *
 * Each rank listens, publishes "ip:port" under <prefix>/addr/<rank>, connects
 * to every lower rank and accepts every higher one.  Lower ranks finish their
 * own connects before accepting, and the kernel's listen backlog holds the
 * early arrivals, so the order cannot deadlock.  Every link is authenticated
 * with the job token; the connector's rank is covered by the MAC.  The
 * listener handshakes every arrival at once (engine_accept.c); a connector
 * whose handshake fails tries again until the job's deadline.
 *
 * A rank issues its connects to all lower ranks before it waits for any
 * handshake, then finishes them in order: each lower rank answers once it
 * has finished its own connects, and those answers come in side by side, so
 * the mesh takes the slowest lower rank's time, not the sum of them. */
#include <errno.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/boot_id.h"
#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "transport/auth.h"
#include "transport/engine_internal.h"
#include "transport/socket.h"
#include "dtrain/store.h"

#define HANDSHAKE_SECONDS 10.0

/* This process's host: ranks with equal ids can share memory.  The network
 * and mount namespaces count, so namespace "hosts" of one machine (the test
 * cluster) stay apart, as do containers.  "-": never share (DT_TRANSPORT=tcp). */
static void host_id(int transport, char *out, size_t len)
{
    if (transport == DT__TRANSPORT_TCP) {
        snprintf(out, len, "-");
        return;
    }
    char boot[64];
    dt__boot_id(boot, sizeof boot);
    if (!boot[0])
        gethostname(boot, sizeof boot - 1);
    struct stat net = {0}, mnt = {0};
    stat("/proc/self/ns/net", &net);
    stat("/proc/self/ns/mnt", &mnt);
    snprintf(out, len, "%s/%llu/%llu", boot, (unsigned long long)net.st_ino, (unsigned long long)mnt.st_ino);
}

/* Rank r's published "ip:port host-id": the address into out, the host id
 * into host ("" for "-"). */
static dt_status peer_address(dt_store_client *store, const dt__engine_config *cfg, int r,
                              int64_t deadline, char *out, size_t outlen, char *host)
{
    char key[128];
    snprintf(key, sizeof key, "%s/addr/%d", cfg->key_prefix, r);
    void *val = NULL;
    size_t len = 0;
    double left = (double)(deadline - dt__now_ns()) / 1e9;
    dt_status s = dt_store_get(store, key, left > 0 ? left : 0.001, &val, &len);
    if (s != DT_OK)
        return dt__wrap(s, "rank %d never published its address: ", r);
    char *text = val, *sp = strchr(text, ' ');
    if (sp)
        *sp = '\0';
    snprintf(out, outlen, "%s", text);
    snprintf(host, 128, "%s", sp && strcmp(sp + 1, "-") != 0 ? sp + 1 : "");
    free(val);
    return DT_OK;
}

/* A link to a lower rank under way: where it listens and the connect issued
 * for it before any handshake is awaited (-1: none, or taken). */
typedef struct {
    char host[64];
    int port, fd;
} dial;

/* One attempt at a link to lower rank r at host:port (d's early connect
 * first, when there is one). */
static dt_status connect_once(dt__engine *e, const dt__engine_config *cfg, const char *label, peer *p, dial *d,
                              int64_t deadline, int *fd)
{
    dt_status s;
    *fd = d->fd;
    d->fd = -1;
    if (*fd < 0 || !dt__sock_connect_wait(*fd, deadline)) /* (a failed early one is tried again here) */
        s = dt__sock_connect(d->host, d->port, deadline, fd);
    else
        s = DT_OK;
    if (s != DT_OK)
        return dt__wrap(s, "connecting to %s: ", p->name);
    s = dt__sock_tune(*fd, cfg->sock_buffer, cfg->tcp_congestion);
    int64_t hs = dt__deadline_after(HANDSHAKE_SECONDS);
    if (s == DT_OK)
        s = dt__auth_connect(*fd, cfg->token, label, e->rank, hs < deadline ? hs : deadline, p->name);
    if (s != DT_OK)
        close(*fd);
    return s;
}

/* Look up lower rank r's address and start connecting to it. */
static dt_status dial_lower(dt__engine *e, const dt__engine_config *cfg, dt_store_client *store, int r,
                            int64_t deadline, char *peer_host, dial *d)
{
    char addr[80];
    DT_CHECK(peer_address(store, cfg, r, deadline, addr, sizeof addr, peer_host));
    DT_CHECK(dt__parse_hostport(addr, d->host, sizeof d->host, &d->port));
    snprintf(e->peers[r].name, sizeof e->peers[r].name, "rank %d (%s)", r, addr);
    dt_phase_mark("rank %d has rank %d's address", e->rank, r);
    d->fd = dt__sock_connect_start(d->host, d->port);
    return DT_OK;
}

static dt_status connect_lower(dt__engine *e, const dt__engine_config *cfg, const char *label, int r,
                               int64_t deadline, dial *d)
{
    peer *p = &e->peers[r];
    int fd;
    /* A handshake that fails (the listener busy with its own connects, or
     * dropping us among strangers) is tried again until the job's deadline;
     * a wrong token is final. */
    dt_status s;
    while ((s = connect_once(e, cfg, label, p, d, deadline, &fd)) != DT_OK) {
        if (s == DT_ERR_AUTH || dt__now_ns() + 100000000 >= deadline)
            return s;
        DT_INFO("connecting to %s: %s; trying again", p->name, dt_last_error());
        struct pollfd none;
        poll(&none, 0, 100);
    }
    return dt__chan_tcp_open(fd, &p->ch);
}

/* Every lower rank's connect issued, then each one's handshake. */
static dt_status connect_lowers(dt__engine *e, const dt__engine_config *cfg, dt_store_client *store,
                                const char *label, char (*hosts)[128], int64_t deadline)
{
    dial *d = calloc((size_t)e->rank, sizeof *d);
    if (!d)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int r = 0; r < e->rank; r++)
        d[r].fd = -1;
    dt_status s = DT_OK;
    for (int r = 0; s == DT_OK && r < e->rank; r++)
        s = dial_lower(e, cfg, store, r, deadline, hosts[r], &d[r]);
    for (int r = 0; s == DT_OK && r < e->rank; r++)
        s = connect_lower(e, cfg, label, r, deadline, &d[r]);
    for (int r = 0; r < e->rank; r++)
        if (d[r].fd >= 0)
            close(d[r].fd);
    free(d);
    return s;
}

typedef struct {
    dt__engine *e;
    const dt__engine_config *cfg;
    dt_store_client *store;
    int64_t deadline;
    char (*hosts)[128];
} joining;

/* A higher rank finished its handshake: look up its address, take its link. */
static dt_status joined(void *arg, int rank, int fd)
{
    joining *j = arg;
    peer *p = &j->e->peers[rank];
    char addr[80];
    dt_status s = peer_address(j->store, j->cfg, rank, j->deadline, addr, sizeof addr, j->hosts[rank]);
    if (s == DT_OK) {
        snprintf(p->name, sizeof p->name, "rank %d (%s)", rank, addr);
        s = dt__sock_tune(fd, j->cfg->sock_buffer, j->cfg->tcp_congestion);
    }
    if (s != DT_OK) {
        close(fd);
        return s;
    }
    return dt__chan_tcp_open(fd, &p->ch);
}

static dt_status build_mesh(dt__engine *e, const dt__engine_config *cfg, dt_store_client *store,
                            char (*hosts)[128], int64_t deadline)
{
    const char *ip = cfg->listen_ip ? cfg->listen_ip : dt_store_local_ip(store);
    int lfd, port;
    DT_CHECK(dt__sock_listen(ip, 0, &lfd, &port));
    char label[160], key[128], addr[240];
    snprintf(label, sizeof label, "dtrain-peer:%s", cfg->key_prefix);
    snprintf(key, sizeof key, "%s/addr/%d", cfg->key_prefix, e->rank);
    snprintf(e->peers[e->rank].name, sizeof e->peers[e->rank].name, "rank %d (%s:%d)", e->rank, ip, port);
    host_id(cfg->transport, hosts[e->rank], 128);
    snprintf(addr, sizeof addr, "%s:%d %s", ip, port, hosts[e->rank]);
    if (strcmp(hosts[e->rank], "-") == 0)
        hosts[e->rank][0] = '\0';
    dt_status s = dt_store_set(store, key, addr, strlen(addr) + 1);
    if (s == DT_OK)
        s = connect_lowers(e, cfg, store, label, hosts, deadline);
    joining j = {.e = e, .cfg = cfg, .store = store, .deadline = deadline, .hosts = hosts};
    if (s == DT_OK)
        s = dt__engine_accept_peers(e, cfg, label, lfd, deadline, joined, &j);
    close(lfd);
    return s;
}

/* TCP to every peer, then shared memory to those on this host. */
static dt_status connect_all(dt__engine *e, const dt__engine_config *cfg, dt_store_client *store)
{
    int64_t deadline = dt__deadline_after(cfg->timeout_s);
    char(*hosts)[128] = calloc((size_t)e->size, sizeof *hosts);
    if (!hosts)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_status s = build_mesh(e, cfg, store, hosts, deadline);
    dt_phase_mark("rank %d tcp mesh up", e->rank);
    for (int r = 0; s == DT_OK && cfg->transport == DT__TRANSPORT_SHM && r < e->size; r++)
        if (!hosts[r][0] || strcmp(hosts[r], hosts[e->rank]) != 0)
            s = dt__fail(DT_ERR_INVALID, "DT_TRANSPORT=shm, but %s is on another host or uses DT_TRANSPORT=tcp",
                         e->peers[r].name);
    if (s == DT_OK && cfg->transport != DT__TRANSPORT_TCP)
        s = dt__engine_shm_setup(e, cfg, store, hosts, deadline);
    free(hosts);
    return s;
}

dt_status dt__engine_create(const dt__engine_config *cfg, dt_store_client *store, dt__engine **out)
{
    if (cfg->size < 1 || cfg->rank < 0 || cfg->rank >= cfg->size)
        return dt__fail(DT_ERR_INVALID, "rank %d is outside a world of %d", cfg->rank, cfg->size);
    dt__engine *e = calloc(1, sizeof *e);
    if (!e)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    pthread_mutexattr_t ma;
    pthread_mutexattr_init(&ma);
    pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&e->mu, &ma);
    pthread_mutexattr_destroy(&ma);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->progressed, &ca);
    pthread_condattr_destroy(&ca);
    e->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    e->rank = cfg->rank;
    e->size = cfg->size;
    e->timeout_s = cfg->timeout_s;
    e->poll_spin_ns = (int64_t)cfg->poll_spin_us * 1000;
    e->peers = calloc((size_t)cfg->size, sizeof *e->peers);
    e->pfds = calloc((size_t)cfg->size + 1, sizeof *e->pfds); /* + the wake-up eventfd */
    e->pfd_peer = calloc((size_t)cfg->size + 1, sizeof *e->pfd_peer);
    if (!e->peers || !e->pfds || !e->pfd_peer || e->wake_fd < 0) {
        bool no_fd = e->wake_fd < 0;
        dt__engine_destroy(e);
        return no_fd ? dt__fail(DT_ERR_SYSTEM, "eventfd: %s", strerror(errno)) : dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < cfg->size; i++)
        snprintf(e->peers[i].name, sizeof e->peers[i].name, "rank %d", i);
    dt_status s = cfg->size > 1 ? connect_all(e, cfg, store) : DT_OK;
    if (s != DT_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", dt_last_error());
        e->failed = s; /* no goodbyes on a half-built mesh */
        dt__engine_destroy(e);
        return dt__fail(s, "rank %d: connecting the job failed: %s", cfg->rank, msg);
    }
    *out = e;
    return DT_OK;
}

static bool goodbyes_done(dt__engine *e)
{
    for (int i = 0; i < e->size; i++) {
        peer *p = &e->peers[i];
        if (dt__peer_open(p) && (p->bye.state == DT_REQ_PENDING || !p->bye_received || p->acks_owed || p->unacked))
            return false;
    }
    return true;
}

dt_status dt__engine_destroy(dt__engine *e)
{
    if (!e)
        return DT_OK;
    dt_status s = e->failed != DT_OK ? dt__engine_status(e) : DT_OK; /* report the earlier failure */
    if (e->failed == DT_OK && e->peers) {
        for (int i = 0; i < e->size; i++) {
            if (!dt__peer_open(&e->peers[i]))
                continue;
            s = dt__engine_queue_bye(e, i);
            if (s != DT_OK)
                break;
        }
        int64_t deadline = dt__deadline_after(e->timeout_s);
        while (s == DT_OK && !goodbyes_done(e)) {
            if (dt__now_ns() >= deadline) {
                s = dt__engine_fail(e, DT_ERR_TIMEOUT, "timed out after %.0f s waiting for every rank to destroy the communicator",
                                    e->timeout_s);
                break;
            }
            s = dt__engine_progress(e, dt__ms_left(deadline, 1000));
        }
    }
    if (e->refs_copied)
        DT_INFO("shared memory: %llu payloads copied from their senders' memory, %llu of them after waiting for their "
                "receive, %llu buffered after waiting %d ms",
                (unsigned long long)e->refs_copied, (unsigned long long)e->refs_deferred,
                (unsigned long long)e->refs_buffered, DT__REF_WAIT_NS / 1000000);
    dt__engine_close(e); /* completes what is pending, frees buffers, closes sockets */
    for (int i = 0; e->peers && i < e->size; i++) {
        dt__chan_free(e->peers[i].ch);
        free(e->peers[i].acks);
    }
    dt__bufcache_clear(&e->early);
    free(e->peers);
    free(e->pfds);
    free(e->pfd_peer);
    if (e->wake_fd >= 0)
        close(e->wake_fd);
    pthread_cond_destroy(&e->progressed);
    pthread_mutex_destroy(&e->mu);
    free(e);
    return s;
}
