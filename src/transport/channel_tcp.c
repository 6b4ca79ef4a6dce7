/* The TCP channel (channel.h): the peer's socket is the byte stream. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/status.h"
#include "transport/channel.h"

/* Size of a TCP peer's inbox, and the read from which the socket's bytes go
 * straight to their destination instead (a copy of more would cost more
 * than the recv it saves). */
#define INBOX_BYTES 8192
#define INBOX_DIRECT_MIN 4096

typedef struct {
    dt__chan base;
    /* Bytes read from the socket ahead of the parser, so that a small frame
     * (header and payload) costs one recv instead of two.  Bytes waiting
     * here do not show in poll: the engine looks at them first (readable). */
    uint8_t *inbox;
    size_t inbox_at, inbox_end;
} tcp_chan;

static ssize_t tcp_send(dt__chan *c, struct iovec *iov, int n)
{
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
    return sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static size_t tcp_readable(const dt__chan *c)
{
    const tcp_chan *t = (const tcp_chan *)c;
    return t->inbox_end - t->inbox_at;
}

static size_t tcp_writable(const dt__chan *c)
{
    (void)c;
    return SIZE_MAX;
}

static ssize_t socket_recv(int fd, void *dst, size_t len)
{
    uint8_t discard[65536];
    return dst ? recv(fd, dst, len, MSG_DONTWAIT)
               : recv(fd, discard, len < sizeof discard ? len : sizeof discard, MSG_DONTWAIT);
}

/* Up to len bytes of the TCP stream: from the inbox, else from the socket
 * (small reads fill the inbox with whatever has arrived). */
static ssize_t tcp_recv(dt__chan *c, void *dst, size_t len)
{
    tcp_chan *t = (tcp_chan *)c;
    if (t->inbox_at == t->inbox_end) {
        if (len >= INBOX_DIRECT_MIN)
            return socket_recv(c->fd, dst, len);
        if (!t->inbox && !(t->inbox = malloc(INBOX_BYTES)))
            return socket_recv(c->fd, dst, len); /* no memory for it: read exactly */
        ssize_t n = recv(c->fd, t->inbox, INBOX_BYTES, MSG_DONTWAIT);
        if (n <= 0)
            return n;
        t->inbox_at = 0;
        t->inbox_end = (size_t)n;
    }
    size_t k = t->inbox_end - t->inbox_at;
    if (k > len)
        k = len;
    if (dst)
        memcpy(dst, t->inbox + t->inbox_at, k);
    t->inbox_at += k;
    return (ssize_t)k;
}

static void tcp_close(dt__chan *c)
{
    tcp_chan *t = (tcp_chan *)c;
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    t->inbox_at = t->inbox_end = 0;
}

static void tcp_free(dt__chan *c)
{
    tcp_close(c);
    free(((tcp_chan *)c)->inbox);
    free(c);
}

static const dt__chan_ops tcp_ops = {
    .name = "tcp",
    .send = tcp_send,
    .recv = tcp_recv,
    .readable = tcp_readable,
    .writable = tcp_writable,
    .close = tcp_close,
    .free = tcp_free,
};

dt_status dt__chan_tcp_open(int fd, dt__chan **out)
{
    tcp_chan *t = calloc(1, sizeof *t);
    if (!t) {
        close(fd);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    t->base = (dt__chan){.ops = &tcp_ops, .fd = fd};
    *out = &t->base;
    return DT_OK;
}
