/* A byte channel to one peer: the seam under the progress engine.
 *
 * The engine (engine_*.c) runs one frame stream per peer (frame.h) and never
 * looks at how the bytes travel; a channel moves them.  Two exist:
 *
 *   channel_tcp.c  the peer's TCP connection is the stream;
 *   channel_shm.c  a pair of shared-memory rings (transport/shm.h) for a peer
 *                  on this host, the TCP connection kept as doorbell and
 *                  liveness signal.
 *
 * An RDMA or MPI channel would be a third file with its own ops table: bytes
 * out of an iovec, bytes into a buffer, and a way to sleep.
 *
 * Every channel holds the peer's socket (`fd`, built by engine_connect.c
 * before any other channel is set up): the TCP channel's stream, the other
 * channels' wake-up and end-of-connection signal (a dead process closes it).
 * The engine polls it, half-closes it when failing (so the peer reads the
 * failure notice before the end) and drains it before closing (closing a
 * socket with unread input sends RST).
 *
 * Two kinds of channel, told apart by `pumped`:
 *   - polled (TCP): the fd's readiness is the data's; the engine reads when
 *     poll says POLLIN and writes when it says POLLOUT.  Bytes a channel has
 *     read ahead of the parser do not show in poll: `readable` counts them,
 *     and the engine takes them before sleeping.
 *   - pumped (shared memory; an RDMA completion queue would be one too): the
 *     engine looks at the channel's memory between polls (`readable`,
 *     `writable`), spins on it before sleeping, and before sleeping announces
 *     the sleep (`arm`) so that the peer rings the doorbell, a byte on the fd
 *     (`doorbells` drops them).  send and recv ring the peer's doorbell
 *     themselves when it sleeps.
 *
 * The hot path costs one indirect call per send or receive of a frame part,
 * next to a system call (TCP) or a ring copy (shared memory).  Against the
 * code before the seam (291a086; 2 ranks, dtbench allreduce, 2 shared cores,
 * alternated pairs): new/old median 1.00, 0.87, 0.91 over TCP at 4 KiB,
 * 1 MiB, 64 MiB; 0.95, 0.92, 0.80 over the rings (DT_SHM_COLL=off), all
 * within this machine's noise; at 4 KiB over the rings the best times are
 * equal (1.94 against 1.96 us) and the median of 64 pairs is 1.08, so a cost
 * of a few percent there is not ruled out. */
#ifndef DT_TRANSPORT_CHANNEL_H
#define DT_TRANSPORT_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "dtrain/base.h"
#include "transport/shm.h"

typedef struct dt__chan dt__chan;

typedef struct {
    const char *name; /* "tcp", "shm": for messages */
    bool pumped;      /* see above; pumped channels implement arm, disarm and doorbells */
    bool local;       /* the peer shares this host's memory (dt__engine_is_local) */
    /* sendmsg's contract: bytes taken from iov (maybe fewer than all), or -1
     * with errno (EAGAIN when full). */
    ssize_t (*send)(dt__chan *c, struct iovec *iov, int n);
    /* recv's contract: up to len bytes into dst (NULL: drop them), 0 at the
     * end of the stream, or -1 with errno (EAGAIN when none).  A pumped
     * channel never reports the end: it shows on the fd. */
    ssize_t (*recv)(dt__chan *c, void *dst, size_t len);
    /* Bytes recv returns without a system call: read ahead (TCP), or waiting
     * in the channel's memory (pumped). */
    size_t (*readable)(const dt__chan *c);
    /* Bytes one send takes whole now; SIZE_MAX: no bound known (a socket
     * takes what it can).  A notice is written only whole (engine_fail.c). */
    size_t (*writable)(const dt__chan *c);
    /* Pumped: announce this rank's sleep, for incoming bytes and, when
     * need_tx > 0, for that much room to send; false (sleep not announced,
     * do not sleep) when work arrived meanwhile.  disarm withdraws it after
     * waking for any reason. */
    bool (*arm)(dt__chan *c, size_t need_tx);
    void (*disarm)(dt__chan *c);
    /* Pumped: the fd is readable: drop the doorbell bytes.  False when the
     * connection ended (*err: its errno, 0 when closed in order). */
    bool (*doorbells)(dt__chan *c, int *err);
    /* Copy len bytes at addr in the peer's memory (DATA_REF payloads, which
     * only such channels carry); NULL: the channel cannot. */
    dt_status (*read_remote)(dt__chan *c, uint64_t addr, void *dst, size_t len);
    /* True when the peer's process is known to be gone (no notice can reach
     * it); NULL: never known. */
    bool (*gone)(const dt__chan *c);
    /* Close the fd (if open) and drop bytes read ahead; the channel's memory
     * stays until free. */
    void (*close)(dt__chan *c);
    /* Close and release everything. */
    void (*free)(dt__chan *c);
} dt__chan_ops;

/* The part every channel shares; implementations put it first in theirs. */
struct dt__chan {
    const dt__chan_ops *ops;
    int fd;         /* the peer's socket; -1 once closed */
    bool send_refs; /* the peer can read our memory: send large payloads by address */
};

/* A TCP channel over connected socket fd (owned from now on, also on error). */
dt_status dt__chan_tcp_open(int fd, dt__chan **out);

/* A shared-memory channel over `pair` (this rank's side 0 = creator, 1 =
 * attacher), taking over the socket of `*c` (its TCP channel, freed) as
 * doorbell; send_refs: the peer's probe of our memory worked.  On error *c
 * and pair are unchanged. */
dt_status dt__chan_shm_open(dt__chan **c, dt__shm_pair *pair, int side, bool send_refs);

/* Release c and everything it holds (NULL: nothing). */
static inline void dt__chan_free(dt__chan *c)
{
    if (c)
        c->ops->free(c);
}

#endif
