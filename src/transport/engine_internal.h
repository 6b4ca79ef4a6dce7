/* Engine state shared by the engine's files:
 *
 *   engine.c          queries and settings
 *   engine_connect.c  set-up (the TCP mesh) and orderly teardown
 *   engine_accept.c   accepting and authenticating the higher ranks
 *   engine_shm.c      shared-memory channels to the peers on this host
 *   engine_send.c     the send queues: frames out to the channels
 *   engine_recv.c     matching receives, and parsing the frames that arrive
 *   engine_poll.c     the poll loop: pumping, spinning, sleeping, waiting
 *   engine_fail.c     sticky failure: notices to peers, linger, close
 *   engine_ref.c      payloads sent by reference (DATA_REF)
 *   engine_sig.c      collective signatures (mismatch checks)
 *
 * and the byte channels under them (channel.h). */
#ifndef DT_TRANSPORT_ENGINE_INTERNAL_H
#define DT_TRANSPORT_ENGINE_INTERNAL_H

#include <poll.h>
#include <pthread.h>
#include <string.h>

#include "transport/bufcache.h"
#include "transport/channel.h"
#include "transport/engine.h"
#include "transport/shm.h"

/* Collectives remembered as this rank's current ones: a public call and the
 * pieces of a hierarchical one on two sub-communicators, for each of several
 * communicators running at once on their own threads. */
#define DT__SIG_ACTIVE 16

typedef struct unexpected {
    struct unexpected *next;
    dt__frame f;
    uint8_t *data;
    size_t cap; /* of data, from the engine's buffer cache */
    /* A DATA_REF payload not copied yet: still in the sender's memory. */
    bool in_sender;
    uint64_t ref_addr, ref_id;
    int64_t since; /* when its frame arrived */
} unexpected;

typedef struct {
    dt__chan *ch; /* the byte channel (channel.h); NULL: none (this rank) */
    char name[128];
    dt__req *sendq, *sendq_tail;
    dt__req *posted, *posted_tail;
    unexpected *unexp, *unexp_tail;
    /* receive state machine */
    uint8_t hdr[DT_FRAME_HDR];
    size_t hdr_got;
    bool in_payload;
    dt__frame cur;
    uint8_t *dst;       /* where the payload goes; NULL: discard */
    size_t got;
    dt__req *target;    /* matched receive, if any */
    unexpected *stash;  /* buffered message being filled, if any */
    uint8_t *control;   /* ABORT text being filled */
    bool bye_sent, bye_received;
    dt__req bye;
    /* DATA_REF (engine_ref.c), over channels that can read the peer's
     * memory (shared memory): */
    uint8_t ref[DT_FRAME_REF_BYTES]; /* address and id of the DATA_REF payload being received */
    uint64_t ref_next;    /* id of the next DATA_REF sent to the peer */
    dt__req *unacked, *unacked_tail; /* DATA_REF sends waiting for their ACK */
    uint64_t *acks;       /* ids of DATA_REF payloads read, ACK not yet written: */
    size_t acks_head, acks_owed, acks_cap; /* acks[head .. head+owed) */
    int64_t last_io;      /* when this rank last read from or wrote to the peer */
} peer;

struct dt__engine {
    /* Threads (engine_poll.c): every entry point of engine.h takes mu
     * (recursive: failure paths re-enter dt__engine_fail and _status); one
     * thread at a time is the poller, which sleeps in poll() with mu
     * released and signals `progressed` after each pass; the others wait on
     * it.  wake_fd (an eventfd in the poller's poll set) wakes it when a
     * thread queues bytes it is not watching for. */
    pthread_mutex_t mu;
    pthread_cond_t progressed;
    bool polling;
    int wake_fd;
    int rank, size;
    double timeout_s;
    peer *peers;
    struct pollfd *pfds;
    int *pfd_peer;
    dt_status failed;
    char fail_msg[1024];
    int nshm;              /* peers reached through shared memory: pumped channels */
    size_t shm_copy_min;   /* DATA_REF from this many payload bytes */
    int refs_waiting;      /* unexpected DATA_REF payloads still in their senders' memory */
    /* DATA_REF payloads copied: in all, after waiting for their receive, and
     * into a buffer after DT__REF_WAIT_NS (reported at destroy, DT_DEBUG=info) */
    uint64_t refs_copied, refs_deferred, refs_buffered;
    uint64_t bytes_sent; /* payload bytes queued to other ranks (atomic: read without mu) */
    int64_t shm_spin_ns;   /* poll the rings this long before sleeping */
    bool shm_spin_yields;  /* oversubscribed host: sched_yield between polls */
    int64_t poll_spin_ns;  /* sockets: non-blocking polls (with sched_yield) before sleeping */
    int64_t sockets_seen_ns; /* shm-only ranks: last non-blocking look at the sockets */
    dt__bufcache early;    /* payload buffers of messages that beat their receive */
    struct dt__heartbeat *heartbeat; /* NULL: no liveness checks while waiting */
    int64_t heartbeat_period_ns, last_watch_ns;
    void (*fail_hook)(void *arg, dt_status code, const char *why);
    void *fail_hook_arg;
    dt__sig_namer sig_namer;
    /* The collectives this rank is in (or was in last): communicator,
     * sequence and signature, newest at active_next - 1 (engine_sig.c). */
    struct {
        uint32_t comm_id, seq;
        uint64_t sig;
    } active[DT__SIG_ACTIVE];
    unsigned active_next;
};

/* Set up the shared-memory channels to the peers on this host (after the TCP
 * mesh is built); peer_host[i] is rank i's host id ("" for no shm). */
dt_status dt__engine_shm_setup(dt__engine *e, const dt__engine_config *cfg, struct dt_store_client *store,
                               char (*peer_host)[128], int64_t deadline);

/* Accept and authenticate every higher rank on listener lfd, handshakes side
 * by side (engine_accept.c); each finished one is handed to joined(arg, rank,
 * fd), which takes the descriptor.  Strangers and bad tokens are logged
 * (rate limited) and dropped. */
dt_status dt__engine_accept_peers(dt__engine *e, const dt__engine_config *cfg, const char *label, int lfd,
                                  int64_t deadline, dt_status (*joined)(void *arg, int rank, int fd), void *arg);

/* True when p's channel is open (never for this rank). */
static inline bool dt__peer_open(const peer *p) { return p->ch && p->ch->fd >= 0; }

/* A request about to be posted: kind, peer, matching key, buffer; pending. */
static inline void dt__req_init(dt__req *r, int kind, int peer, uint32_t comm_id, int32_t tag, uint64_t seq,
                                uint64_t sig, void *buf, size_t len)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->state = DT_REQ_PENDING;
    r->peer = peer;
    r->comm_id = comm_id;
    r->tag = tag;
    r->seq = seq;
    r->sig = sig;
    r->buf = buf;
    r->len = len;
}

/* r is done, with status s (the caller has unlinked it from its queue).
 * The release store pairs with dt__req_done's acquire load by the request's
 * owner, which may look without the lock. */
static inline void dt__req_complete(dt__req *r, dt_status s)
{
    r->status = s;
    r->next = NULL;
    __atomic_store_n(&r->state, DT_REQ_DONE, __ATOMIC_RELEASE);
}

/* Set on a thread that must not poll without blocking (dt__engine_allow_poll_spin). */
extern _Thread_local bool dt__poll_spin_off;

static inline void dt__engine_lock(dt__engine *e) { pthread_mutex_lock(&e->mu); }
static inline void dt__engine_unlock(dt__engine *e) { pthread_mutex_unlock(&e->mu); }
/* After a thread that is not the poller queued work on peer pi: wake a
 * sleeping poller if that work needs it to watch something new (a send or
 * an ACK waiting for room).  Called with mu held. */
void dt__engine_wake_for(dt__engine *e, int pi);
/* Wake the poller unconditionally (a failure: it must stop at once). */
void dt__engine_wake(dt__engine *e);

/* Append r to a request queue. */
static inline void dt__req_enqueue(dt__req **head, dt__req **tail, dt__req *r)
{
    r->next = NULL;
    if (*tail)
        (*tail)->next = r;
    else
        *head = r;
    *tail = r;
}

/* Unlink r, which follows prev (NULL: r is the head), from a request queue. */
static inline dt__req *dt__req_unlink(dt__req **head, dt__req **tail, dt__req *prev, dt__req *r)
{
    if (prev)
        prev->next = r->next;
    else
        *head = r->next;
    if (*tail == r)
        *tail = prev;
    return r;
}

/* ---- collective signatures (engine_sig.c) ---- */

/* A signed frame f arrived from peer pi: if this rank is in the collective
 * of f's communicator and sequence, f must carry its signature (else the
 * engine fails with the mismatch).  One it is not in yet is checked when it
 * gets there (dt__engine_sig_enter). */
dt_status dt__sig_check_arrival(dt__engine *e, int pi, const dt__frame *f);
/* r matched f: their signatures must agree. */
static inline bool dt__sig_differs(uint64_t a, uint64_t b) { return a && b && a != b; }

/* ---- DATA_REF bookkeeping (engine_ref.c) ---- */

/* How long an unexpected DATA_REF payload may wait for its receive before it
 * is copied into a buffer of this rank's own. */
#define DT__REF_WAIT_NS 4000000
/* The single-copy threshold when the host's ranks outnumber its cores and
 * DT_SHM_COPY_MIN is not set. */
#define DT__SHM_COPY_SHARED_CORES 262144

/* Copy len bytes at addr in p's memory to dst (none when dst is NULL: a
 * truncated message) and owe p the ACK of id.  Fails the engine on error. */
dt_status dt__ref_copy(dt__engine *e, peer *p, uint64_t addr, uint64_t id, void *dst, size_t len);
/* The oldest owed ACK's id, now written (acks_owed > 0). */
uint64_t dt__ref_ack_taken(peer *p);
/* Unlink and return this rank's DATA_REF send to p with that id (NULL: none). */
dt__req *dt__ref_take_unacked(peer *p, uint64_t id);
/* Unexpected message u is a DATA_REF whose payload stays at addr in the
 * sender's memory until its receive is posted (or DT__REF_WAIT_NS pass). */
void dt__ref_defer(dt__engine *e, unexpected *u, uint64_t addr, uint64_t id);
/* Copy waiting payload u to dst (NULL: truncated) and owe its ACK. */
dt_status dt__ref_fetch(dt__engine *e, peer *p, unexpected *u, void *dst);
/* Copy out every unexpected DATA_REF payload older than DT__REF_WAIT_NS. */
dt_status dt__ref_fetch_stale(dt__engine *e);

/* ---- sending (engine_send.c) ---- */

/* Queue an empty BYE frame behind everything already queued to peer pi. */
dt_status dt__engine_queue_bye(dt__engine *e, int pi);
/* Write what pi's channel takes: owed ACKs between frames, then the queue. */
dt_status dt__peer_write(dt__engine *e, int pi);
/* Header and payload (or address) bytes of r's frame. */
static inline size_t dt__frame_bytes(const dt__req *r) { return DT_FRAME_HDR + (r->by_ref ? sizeof r->ref : r->len); }
/* Send what is left of r's frame (header, then payload or address): the
 * channel's send contract. */
ssize_t dt__send_rest(peer *p, dt__req *r);

/* ---- receiving (engine_recv.c) ---- */

/* Read and parse what pi's channel holds (a bounded amount per call). */
dt_status dt__peer_read(dt__engine *e, int pi);
/* pi's connection ended (err: its errno, 0 when closed): an orderly goodbye
 * closes the channel, anything else fails the engine. */
dt_status dt__peer_eof(dt__engine *e, int pi, int err);
/* A message from this rank to itself, delivered at once. */
dt_status dt__deliver_local(dt__engine *e, const dt__frame *f, const void *buf);

/* ---- failure (engine_fail.c) ---- */

/* Fail the engine with msg (first failure wins; notify: tell every peer). */
dt_status dt__engine_fail_with(dt__engine *e, dt_status code, bool notify, const char *msg);

#endif
