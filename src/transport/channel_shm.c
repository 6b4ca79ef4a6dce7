/* The shared-memory channel (channel.h): the same frames as over TCP, through
 * a pair of rings (transport/shm.h, set up by engine_shm.c); the peer's TCP
 * connection only carries doorbell bytes and the end of the connection. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/status.h"
#include "transport/channel.h"

typedef struct {
    dt__chan base;
    dt__shm_pair *pair;
    dt__shm_ring *tx, *rx;
    pid_t pid; /* the peer's process, to read DATA_REF payloads */
} shm_chan;

/* Wake a shared-memory peer sleeping in poll (a full socket buffer means
 * it has wake-ups pending already). */
static void ring_doorbell(const dt__chan *c)
{
    const uint8_t bell = 0;
    if (c->fd >= 0)
        (void)send(c->fd, &bell, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static ssize_t shm_send(dt__chan *c, struct iovec *iov, int n)
{
    shm_chan *s = (shm_chan *)c;
    size_t w = dt__shm_write(s->tx, iov, n);
    if (w == 0) {
        errno = EAGAIN;
        return -1;
    }
    if (dt__shm_wake_consumer(s->tx))
        ring_doorbell(c);
    return (ssize_t)w;
}

/* A ring never reports EOF: the end of a shared-memory peer shows on its
 * socket. */
static ssize_t shm_recv(dt__chan *c, void *dst, size_t len)
{
    shm_chan *s = (shm_chan *)c;
    size_t r = dt__shm_read(s->rx, dst, len);
    if (r == 0) {
        errno = EAGAIN;
        return -1;
    }
    if (dt__shm_wake_producer(s->rx))
        ring_doorbell(c);
    return (ssize_t)r;
}

static size_t shm_readable(const dt__chan *c) { return dt__shm_readable(((const shm_chan *)c)->rx); }
static size_t shm_writable(const dt__chan *c) { return dt__shm_writable(((const shm_chan *)c)->tx); }

static bool shm_arm(dt__chan *c, size_t need_tx)
{
    shm_chan *s = (shm_chan *)c;
    if (!dt__shm_sleep_rx(s->rx))
        return false;
    return need_tx == 0 || dt__shm_sleep_tx(s->tx, need_tx);
}

static void shm_disarm(dt__chan *c)
{
    shm_chan *s = (shm_chan *)c;
    dt__shm_awake_rx(s->rx);
    dt__shm_awake_tx(s->tx);
}

/* Doorbell bytes (dropped) or the end of the connection on the socket. */
static bool shm_doorbells(dt__chan *c, int *err)
{
    uint8_t sink[256];
    for (;;) {
        ssize_t n = recv(c->fd, sink, sizeof sink, MSG_DONTWAIT);
        if (n > 0)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return true;
        if (n < 0 && errno == EINTR)
            continue;
        *err = n < 0 ? errno : 0;
        return false;
    }
}

static dt_status shm_read_remote(dt__chan *c, uint64_t addr, void *dst, size_t len)
{
    return dt__shm_read_remote(((shm_chan *)c)->pid, addr, dst, len);
}

static bool shm_gone(const dt__chan *c)
{
    pid_t pid = ((const shm_chan *)c)->pid;
    return pid > 0 && kill(pid, 0) != 0;
}

static void shm_close(dt__chan *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

static void shm_free(dt__chan *c)
{
    shm_close(c);
    dt__shm_close(((shm_chan *)c)->pair);
    free(c);
}

static const dt__chan_ops shm_ops = {
    .name = "shm",
    .pumped = true,
    .local = true,
    .send = shm_send,
    .recv = shm_recv,
    .readable = shm_readable,
    .writable = shm_writable,
    .arm = shm_arm,
    .disarm = shm_disarm,
    .doorbells = shm_doorbells,
    .read_remote = shm_read_remote,
    .gone = shm_gone,
    .close = shm_close,
    .free = shm_free,
};

dt_status dt__chan_shm_open(dt__chan **c, dt__shm_pair *pair, int side, bool send_refs)
{
    shm_chan *s = calloc(1, sizeof *s);
    if (!s)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt__chan *tcp = *c;
    s->base = (dt__chan){.ops = &shm_ops, .fd = tcp->fd, .send_refs = send_refs};
    s->pair = pair;
    s->tx = dt__shm_tx(pair, side);
    s->rx = dt__shm_rx(pair, side);
    s->pid = dt__shm_peer_pid(pair, side);
    tcp->fd = -1; /* the socket is ours now */
    dt__chan_free(tcp);
    *c = &s->base;
    return DT_OK;
}
