/* The progress engine: one connection per peer, driven by poll().
 *
 * Peers on the same host (same host id, both allowing it) are reached through
 * shared memory instead (transport/shm.h): the same frames, through a ring.
 *
 * Requests are owned by the caller and linked into the engine while pending.
 * Sends are queued per peer and written header+payload with one sendmsg;
 * receives are matched on (communicator id, tag, sequence) in posting order,
 * and the payload of a matched frame is read straight into the caller's
 * buffer.  Frames that arrive before their receive is posted are buffered
 * ("unexpected").
 *
 * Failure is sticky: a dead or misbehaving peer, a deadline, or an abort puts
 * the engine into a failed state, completes every pending request with that
 * status, closes all connections (so the other ranks notice at once) and makes
 * every later call return the same error. */
#ifndef DT_TRANSPORT_ENGINE_H
#define DT_TRANSPORT_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/base.h"
#include "transport/frame.h"

typedef struct dt__engine dt__engine;
struct dt_store_client;
struct dt__heartbeat;

enum { DT_REQ_SEND = 1, DT_REQ_RECV = 2 };
enum { DT_REQ_IDLE = 0, DT_REQ_PENDING = 1, DT_REQ_DONE = 2 };

typedef struct dt__req {
    struct dt__req *next;
    int kind, state, peer;
    uint32_t comm_id;
    int32_t tag;
    uint64_t seq;    /* recv with any_seq: once done, the matched message's (its low 32 bits) */
    uint64_t sig;    /* the collective call's signature (frame.h); 0: none, no check */
    bool any_seq;
    uint8_t *buf;
    size_t len;      /* send: payload bytes; recv: capacity */
    size_t received; /* recv: bytes of the matched message */
    size_t off;      /* send: header+payload bytes written */
    uint8_t hdr[DT_FRAME_HDR];
    bool by_ref;     /* send: DATA_REF, the payload's address follows hdr */
    uint8_t ref[DT_FRAME_REF_BYTES];
    dt_status status;
} dt__req;

/* Whether r has completed.  The engine completes requests on whichever
 * thread is progressing it (a release store of state after status and
 * received), so the owner reads state with this acquire load. */
static inline bool dt__req_done(const dt__req *r)
{
    return __atomic_load_n(&r->state, __ATOMIC_ACQUIRE) == DT_REQ_DONE;
}

typedef struct {
    int rank, size;
    const char *token;
    const char *key_prefix; /* namespace of this job's keys in the store */
    double timeout_s;
    int sock_buffer;
    const char *tcp_congestion; /* congestion control of peer connections; NULL: the system's */
    const char *listen_ip; /* NULL: the address that reaches the store */
    int transport;         /* DT__TRANSPORT_*: how to reach peers on this host */
    size_t shm_ring;       /* bytes per direction of a shared-memory ring; 0: auto */
    size_t shm_copy_min;   /* shared memory: payloads from this size are read from the sender;
                              DT__SHM_COPY_AUTO: decided by the host (engine_shm.c) */
    int shm_spin_us;       /* shared memory: poll before sleeping */
    int poll_spin_us;      /* sockets: poll without blocking (yielding) this long before sleeping */
} dt__engine_config;

enum { DT__TRANSPORT_AUTO = 0, DT__TRANSPORT_TCP = 1, DT__TRANSPORT_SHM = 2 };
#define DT__SHM_COPY_AUTO SIZE_MAX

/* Listen, publish this rank's address in the store, connect to every peer. */
dt_status dt__engine_create(const dt__engine_config *cfg, struct dt_store_client *store,
                            dt__engine **out);
/* Say goodbye to every peer (waits for their goodbye up to the deadline),
 * close all connections and free the engine. */
dt_status dt__engine_destroy(dt__engine *e);

int dt__engine_rank(const dt__engine *e);
int dt__engine_size(const dt__engine *e);
/* Whether progress may look at the sockets without blocking (DT_POLL_SPIN_US)
 * before sleeping: on by default; the nonblocking collectives' thread turns
 * it off so that it never takes cycles from the computation it overlaps. */
void dt__engine_allow_poll_spin(dt__engine *e, bool allow);
/* How long a rank waiting on its local peers polls before sleeping, and
 * whether it yields the core between looks (the host's ranks outnumber its
 * cores); the shared-memory collectives wait the way the engine does. */
void dt__engine_shm_spin_policy(const dt__engine *e, int64_t *spin_ns, bool *yields);
/* Waits longer than the heartbeat period check the awaited peer's heartbeat
 * (transport/heartbeat.h) and fail when it stopped; NULL: deadlines only. */
void dt__engine_set_heartbeat(dt__engine *e, struct dt__heartbeat *h);
/* Called once, at the engine's first failure, in the failing thread (e.g.
 * to print what the collectives were doing); NULL: nothing. */
void dt__engine_set_fail_hook(dt__engine *e, void (*hook)(void *arg, dt_status code, const char *why), void *arg);
/* True when world rank `peer` is this rank or reached through shared memory. */
bool dt__engine_is_local(const dt__engine *e, int peer);
/* Payload bytes this rank has sent to other ranks so far (every
 * communicator on the engine; frame headers and heartbeats not counted). */
uint64_t dt__engine_bytes_sent(const dt__engine *e);
/* Count bytes sent another way (the shared-memory collectives' arena). */
void dt__engine_count_sent(dt__engine *e, uint64_t bytes);
/* True when a TCP connection to some peer runs a bbr congestion control
 * (dt__sock_probes_rtt): its round-trip probes stall short exchanges. */
bool dt__engine_tcp_probes_rtt(const dt__engine *e);
/* "rank 3 (10.0.0.4:4242)" for messages. */
const char *dt__engine_peer_name(dt__engine *e, int peer);

/* by_ref_ok: a shared-memory payload of at least shm_copy_min bytes may be
 * read from this rank's memory by the receiver (DATA_REF) instead of passing
 * through the ring; false keeps every byte in the ring. */
dt_status dt__engine_isend(dt__engine *e, dt__req *r, int peer, uint32_t comm_id, int32_t tag,
                           uint64_t seq, uint64_t sig, const void *buf, size_t len, bool by_ref_ok);
/* A receive with a nonzero `sig` checks it against every message of the same
 * communicator and sequence number from that peer, matching or not (another
 * collective's tags): a difference fails the engine with DT_ERR_INVALID and
 * a message naming both calls (dt__engine_set_sig_namer) and both ranks,
 * which every peer receives. */
dt_status dt__engine_irecv(dt__engine *e, dt__req *r, int peer, uint32_t comm_id, int32_t tag,
                           uint64_t seq, uint64_t sig, bool any_seq, void *buf, size_t cap);
/* This rank enters collective `seq` of communicator comm_id, signed `sig`
 * (0: nothing to check): messages of it that arrived already, from any peer,
 * and those that arrive from now on must carry the same signature, whatever
 * their tag.  dt__engine_isend/irecv call it for their sig; a collective that
 * runs without messages (the shared arena) calls it itself, so that a peer
 * in a message-based collective of the same number is noticed. */
dt_status dt__engine_sig_enter(dt__engine *e, uint32_t comm_id, uint64_t seq, uint64_t sig);
/* How mismatch reports name a signature, e.g. "allreduce(7 x f64, sum)";
 * NULL: in hex. */
typedef void (*dt__sig_namer)(uint64_t sig, char *buf, size_t len);
void dt__engine_set_sig_namer(dt__engine *e, dt__sig_namer namer);
/* Fail the engine with the mismatch report: this rank's call `mine` against
 * world rank `peer`'s `theirs`, collective `seq` of communicator comm_id. */
dt_status dt__engine_sig_mismatch(dt__engine *e, int peer, uint32_t comm_id, uint64_t seq, uint64_t mine,
                                  uint64_t theirs);
/* Poll the sockets once, waiting at most timeout_ms for activity. */
dt_status dt__engine_progress(dt__engine *e, int timeout_ms);
/* Withdraw a posted receive that no message has matched yet: r completes
 * with DT_ERR_ABORTED.  DT_ERR_INVALID (nothing done) when r is a send,
 * already done, or being filled. */
dt_status dt__engine_cancel(dt__engine *e, dt__req *r);
/* Progress until r completes or deadline_ns passes (then the engine fails). */
dt_status dt__engine_wait(dt__engine *e, dt__req *r, int64_t deadline_ns);
/* Progress until every request in rs completes. */
dt_status dt__engine_wait_all(dt__engine *e, dt__req *rs, size_t n, int64_t deadline_ns);
/* Progress until one of rs (NULL entries skipped) completes; *which gets its
 * index.  At the deadline the engine fails naming the first pending one. */
dt_status dt__engine_wait_any(dt__engine *e, dt__req *const *rs, size_t n, int64_t deadline_ns, size_t *which);

/* Put the engine into the failed state (first failure wins) and return `code`. */
dt_status dt__engine_fail(dt__engine *e, dt_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Fail quietly with "the communicator was destroyed" (teardown; no notices). */
dt_status dt__engine_close(dt__engine *e);
/* The sticky failure, re-armed as this thread's last error; DT_OK when healthy. */
dt_status dt__engine_status(dt__engine *e);
/* Tell every peer this rank aborts (best effort), then fail locally. */
dt_status dt__engine_abort(dt__engine *e, const char *reason);

#endif
