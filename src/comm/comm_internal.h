/* Communicator internals shared by the files of src/comm. */
#ifndef DT_COMM_INTERNAL_H
#define DT_COMM_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "dtrain/comm.h"
#include "transport/engine.h"

struct dt_store_server;
struct dt_store_client;
struct dt__arena;
typedef struct dt__progress dt__progress;
typedef struct dt__job dt__job;
typedef struct dt__colltrace dt__colltrace;
typedef struct dt__stall dt__stall;

/* State shared by the world communicator and everything split from it. */
typedef struct {
    dt__engine *eng;
    struct dt_store_server *server; /* when this rank serves the store */
    struct dt_store_client *store;
    struct dt__heartbeat *heartbeat; /* NULL with one rank or DT_HEARTBEAT_TIMEOUT=0 */
    dt__colltrace *trace;            /* DT_DEBUG=coll, else NULL */
    dt__stall *stall;                /* the stall inspector (stall.c), else NULL */
    int refs;                 /* communicators alive (atomic: splits may run on several threads) */
    bool engine_closed;
    /* Every communicator's progress queue (nonblocking.c), so that
     * destroying the world first lets each finish what it started. */
    pthread_mutex_t queues_mu;
    dt__progress *queues;
    /* Some rank's TCP peer connections run bbr, agreed by every rank at
     * start-up (dt__tune_collectives): dt__coll_pick keeps halving-doubling
     * off the sizes where bbr's round-trip probes stalled it. */
    bool tcp_probes_rtt;
    /* dt_comm_abort under a backend without an engine (MPI): later calls fail. */
    bool aborted;
} dt__world;

/* Communicator id of the world's start-up timing (src/comm/tune.c): its
 * messages and sequence numbers never meet the user's collectives. */
#define DT__TUNE_COMM_ID 2u

typedef enum { DT_ALGO_AUTO = 0, DT_ALGO_RING, DT_ALGO_RD, DT_ALGO_RHD, DT_ALGO_DIRECT, DT_ALGO_SHM } dt__algo;
#define DT__ALGO_NAMES "auto, ring, rd, rhd, direct or shm"
/* DT_ALGO's and dt_comm_set_algorithm's names (options.c); false: unknown. */
bool dt__algo_parse(const char *name, dt__algo *out);
const char *dt__algo_name(dt__algo a);

struct dt_comm {
    dt__world *world;
    const struct dt__backend *backend; /* how its operations run (backend.h) */
    void *impl;             /* that backend's own state (NULL for native) */
    dt__progress *progress; /* its nonblocking collectives' thread, started on first use */
    /* Signature of the public collective running on it (dt__coll_trace),
     * which the pieces of a hierarchical one carry on the sub-communicators. */
    uint64_t coll_sig;
    int rank, size;
    int local_rank, local_size;
    int *ranks; /* comm rank -> world rank */
    uint32_t id;
    uint64_t coll_seq;  /* collectives issued on this communicator */
    uint64_t split_seq; /* splits issued (derives child ids) */
    uint64_t p2p_seq;
    char tag[32];       /* dt_comm_set_tag: recorded with collectives under DT_DEBUG=coll */
    void *stall_slot;   /* its record in the stall inspector (stall.c), set at its first collective */
    struct dt__ipcstate *ipc; /* device buffers read by IPC (ipc.c): its stream, temporary; NULL until used */
    double timeout_s;
    dt__algo algo;
    size_t segment_bytes; /* ring pipeline segment */
    size_t direct_bytes;  /* at or below: direct (one-shot) allreduce (DT_DIRECT_MSG) */
    size_t direct_tuned;  /* the same, measured at start-up when DT_DIRECT_MSG is unset */
    size_t small_bytes;   /* at or below: latency-optimal algorithms (DT_SMALL_MSG) */
    size_t small_tuned;   /* allreduce's recursive doubling limit, measured at start-up (0: not) */
    size_t ring_bytes;    /* above: ring; between the two: halving-doubling (DT_RING_MSG) */
    size_t bruck_piece;   /* alltoall across hosts: Bruck's exchange for pieces up to this many
                           * bytes, measured at start-up (0: all at once) */
    bool one_host;        /* every member shares memory with every other */
    /* Shared-memory collectives (src/comm/shm_coll.c) on a one-host
     * communicator: the arena is made with the communicator. */
    bool shm_coll_on;      /* DT_SHM_COLL=auto */
    size_t shm_coll_slot;  /* bytes per rank and round (DT_SHM_COLL_SLOT) */
    struct dt__arena *arena; /* NULL: collectives go as messages */
    uint32_t arena_round;  /* rounds run on the arena, the same count on every rank */
    /* Hierarchy (src/comm/hier.c), world communicator only: NULL local when
     * the flat algorithms run. */
    bool hier_auto;       /* DT_HIER=auto */
    dt_comm *local, *cross; /* this host's ranks; the ranks of my local index on every host */
    int nhosts;
    int *members;         /* nhosts x L comm ranks, host h's in local order */
    /* Grow-only scratch buffers reused across calls: fresh large allocations
     * cost a page fault per 4 KiB, which measured as half the time of a
     * 64 MiB reduce_scatter. */
    void *scratch[2];
    size_t scratch_size[2];
    /* Host staging of device buffers (stage.c), grown as needed; NULL until
     * a collective is called with one. */
    struct dt__stagebuf *stage;
    size_t stage_chunk; /* bytes per chunk of that staging (DT_STAGE_CHUNK) */
    /* The communicator that carries c's device buffers, with c's members in
     * c's order (dt_comm_attach_device, device_comm.c); NULL: c's own
     * backend takes them (staged, refused or passed: backend.h). */
    dt_comm *device_comm;
};

/* Whether all of c's members reach each other through shared memory: the
 * algorithm thresholds differ (docs/algorithms.md).  Collective, no messages:
 * each rank decides from what the engine knows of its own peers, and a host's
 * ranks share memory with each other or with none, so all ranks agree. */
bool dt__comm_one_host(const dt_comm *c);
/* dt_comm_split; hier false: no hierarchical set-up (the hierarchy's own
 * parts). */
dt_status dt__comm_split(dt_comm *c, int color, int key, bool hier, dt_comm **out);
/* Id of the communicator split from `parent` as its split number split_seq
 * with `color` (the same on every rank).  Internal twins of a communicator
 * take split number UINT64_MAX, which no split reaches. */
uint32_t dt__comm_child_id(uint32_t parent, uint64_t split_seq, int color);
/* A copy of c with its own id and sequence numbers and no scratch buffers,
 * for internal collectives (start-up timing, set-ups) that must not take the
 * numbers of the user's collectives (DT_DEBUG=coll names them).  Release its
 * scratch with dt__comm_twin_done. */
void dt__comm_twin(const dt_comm *c, uint32_t id, dt_comm *twin);
void dt__comm_twin_done(dt_comm *twin);
/* Scratch slots: TMP holds incoming partials, WORK a private copy of the input. */
enum { DT__SCRATCH_TMP = 0, DT__SCRATCH_WORK = 1 };
/* A buffer of at least `bytes` owned by the communicator; NULL when out of memory. */
void *dt__comm_scratch(dt_comm *c, int slot, size_t bytes);

struct dt_request {
    dt_comm *comm;
    size_t elem; /* bytes per element, to report counts */
    dt__job *job; /* a nonblocking collective; NULL for point to point */
    struct dt__p2pstage *stage; /* a device buffer's host copy (stage.c), else NULL */
    struct dt__p2pchunks *chunks; /* a message in chunks (p2p_chunk.h), else NULL */
    dt__req req;
};

/* Nonblocking collectives run, in the order they were started, on one
 * progress thread per communicator.  Any other call on that communicator
 * first waits until its thread has finished everything queued
 * (dt__progress_drain); other communicators are not held up: the engine
 * serves every thread at once (transport/engine.h). */
void dt__progress_drain(dt_comm *c);
/* Stop c's thread (after draining); called when c is destroyed. */
void dt__progress_stop(dt_comm *c);
/* Wait until every communicator's queue of w is empty (before the engine goes). */
void dt__progress_drain_all(dt__world *w);
/* Wait for / test a collective request (frees it when done). */
dt_status dt__job_wait(dt_request *r);
dt_status dt__job_test(dt_request *r, int *done);

/* c->device_comm when it is set and a or b (either may be NULL) is device
 * memory (base/devmem.h); NULL: the call stays on c. */
dt_comm *dt__comm_device_route(const dt_comm *c, const void *a, const void *b);
/* The device communicator of a new child of `parent` (split with the same
 * colour and key: collective over parent->device_comm, so every member of
 * parent calls it, DT_UNDEFINED ones too); child NULL for those. */
dt_status dt__device_comm_split(dt_comm *parent, int color, int key, dt_comm *child);

/* Tags of collective messages: bit 30 set, the low bits a sub-tag. */
#define DT__TAG_COLL 0x40000000
#define DT__SUBTAG_MAX 0x3fffffff

#endif
