/* Helpers every collective algorithm is written against, and the algorithm
 * entry points (one file per collective or algorithm family). */
#ifndef DT_COMM_COLL_H
#define DT_COMM_COLL_H

#include <stdbool.h>
#include <stddef.h>

#include "comm/comm_internal.h"

/* State of one collective call: its sequence number and deadline. */
typedef struct {
    dt_comm *c;
    const char *op;
    uint64_t seq;
    int64_t deadline;
    /* Payloads the receiver reduces stay in the shared-memory rings, never
     * read from the sender's memory (DATA_REF): on this kind of VM
     * process_vm_readv copies at a third of memcpy's speed, which pays only
     * where it saves the ring's scheduler round trips on data that is just
     * moved (4 ranks on 2 cores, allreduce 1-4 MiB: 1.3x faster inline;
     * alltoall 16-64 MiB: 2x faster by reference). */
    bool reduces;
    /* The public call's signature (collsig.c), carried by its messages and
     * arena rounds and checked by their receivers; 0: not checked. */
    uint64_t sig;
} dt__coll;

/* c is set, its world alive and its engine healthy (point to point). */
dt_status dt__comm_usable(dt_comm *c, const char *op);
/* The same after c's queued nonblocking collectives finished (collectives). */
dt_status dt__comm_check(dt_comm *c, const char *op);
/* Signature of a public collective call named `op` (its k->op); redop and
 * root -1 when the call has none.  0 for an unknown name. */
uint64_t dt__coll_sig(const char *op, size_t count, dt_dtype t, int redop, int root);
/* "allreduce(7 x f64, sum)", "broadcast(16 x f32, root 2)" (the engine's namer). */
void dt__coll_sig_name(uint64_t sig, char *buf, size_t len);
/* Validate the communicator and take the next collective sequence number
 * (k->sig 0: dt__coll_trace sets a public call's). */
dt_status dt__coll_begin(dt__coll *k, dt_comm *c, const char *op);
/* The same for a collective that reduces what it receives (k->reduces). */
dt_status dt__coll_begin_reducing(dt__coll *k, dt_comm *c, const char *op);
/* Rooted collectives (broadcast, reduce, gather, scatter), after
 * dt__coll_trace and before any data moves: every rank learns every rank's
 * signature (agree.c), and a difference, such as another root, fails the
 * call on every rank with the mismatch naming both calls.  Nothing with one
 * rank, and with DT_DEBUG=coll (its descriptor exchange agrees already). */
dt_status dt__coll_agree(dt__coll *k);
/* Post a send / receive of `len` bytes to comm rank `peer` with a sub-tag. */
dt_status dt__coll_send(dt__coll *k, dt__req *r, int peer, uint32_t subtag, const void *buf, size_t len);
dt_status dt__coll_recv(dt__coll *k, dt__req *r, int peer, uint32_t subtag, void *buf, size_t len);
dt_status dt__coll_wait(dt__coll *k, dt__req *rs, size_t n);
dt_status dt__coll_progress(dt__coll *k);
/* Any failure inside a collective leaves peers mid-protocol: fail the engine
 * (cancelling every pending request) and prefix the message with the op. */
dt_status dt__coll_error(dt__coll *k, dt_status s);
/* Algorithm families; which one a call uses is chosen by dt__coll_pick. */
typedef enum {
    DT__ALG_RD,   /* latency-optimal: recursive doubling, binomial trees */
    DT__ALG_RHD,  /* recursive halving-doubling (Rabenseifner) */
    DT__ALG_RING, /* bandwidth-optimal: pipelined ring, pipelined chain */
    DT__ALG_DIRECT, /* allreduce, allgather, reduce-scatter: every rank sends to every rank, one step */
    DT__ALG_SHM,    /* one host: through the shared arena (shm_coll.c), no messages */
} dt__alg;
typedef enum {
    DT__COLL_ALLREDUCE,
    DT__COLL_REDUCE_SCATTER,
    DT__COLL_ALLGATHER,
    DT__COLL_BROADCAST,
    DT__COLL_REDUCE,
    DT__COLL_ALLTOALL
} dt__coll_kind;
/* The algorithm for a collective of `bytes` (the whole buffer, as dtbench
 * counts it) on c: DT_ALGO when set, else by size against the communicator's
 * thresholds (docs/algorithms.md).  Never returns one the collective lacks. */
dt__alg dt__coll_pick(const dt_comm *c, dt__coll_kind kind, size_t bytes);
/* The last algorithm dt__coll_pick chose on this thread (-1: none since it
 * was reset), for the timeline's collective spans; its name ("-": none). */
extern _Thread_local int dt__coll_last_alg;
const char *dt__coll_alg_name(int alg);
/* Allreduce on c's members with algorithm alg (no hierarchy): the result in
 * buf, the input in src (src == buf: in place). */
dt_status dt__allreduce_alg(dt__coll *k, const void *src, void *buf, size_t count, dt_dtype t, dt_redop op,
                            dt__alg alg);
/* Alltoall of `bytes` per piece on c's members over messages with algorithm
 * alg: DT__ALG_RD all at once, DT__ALG_RHD Bruck's, DT__ALG_RING pairwise.
 * src and dst may be one buffer. */
dt_status dt__alltoall_alg(dt__coll *k, const void *src, void *dst, size_t bytes, dt__alg alg);
/* The algorithm the size rule alone picks for `kind` at `bytes` (no
 * DT_ALGO, arena or direct threshold): RD, RHD or RING.  The direct
 * allreduce and reduce-scatter combine their inputs in its order, so the
 * measured direct threshold never changes a result. */
dt__alg dt__coll_direct_order(const dt_comm *c, dt__coll_kind kind, size_t bytes);
/* At or below this many bytes allreduce runs the direct algorithm (n > 2):
 * DT_DIRECT_MSG, else what dt__tune_collectives measured (0 when it did not
 * run), capped at allreduce's small threshold. */
size_t dt__coll_direct_bytes(const dt_comm *c);
/* Collective over c (world creation): times allreduce's direct against
 * recursive doubling, and across hosts recursive doubling against
 * halving-doubling and alltoall's Bruck against all at once, on the real
 * links, and sets c's measured thresholds.  The allreduces give the same
 * bits and alltoall moves them unchanged, so the verdicts never change a
 * result. */
dt_status dt__tune_collectives(dt_comm *c);
/* At or below this many bytes the latency-optimal algorithms run
 * (DT_SMALL_MSG, else the default for the topology). */
size_t dt__coll_small_bytes(const dt_comm *c);
/* The same for allreduce: there it may come from the start-up timing. */
size_t dt__coll_allreduce_small_bytes(const dt_comm *c);
/* Check a (send, recv) pair: same pointer (in place) or disjoint ranges. */
dt_status dt__coll_check_buffers(const char *op, const void *send, size_t send_bytes, const void *recv,
                                 size_t recv_bytes);
dt_status dt__check_dtype_op(const char *op, dt_dtype t, dt_redop r);
/* The largest buffer a call may name: 2^56 bytes, more than any address
 * space holds, so that count x element size x ranks is computed without
 * overflow and buffer ranges never wrap. */
#define DT__MAX_BUFFER_BYTES (1ull << 56)
/* *bytes = count x size of t (one block); DT_ERR_INVALID naming the count
 * when t is invalid or count x size x mult (mult blocks, e.g. one per rank;
 * 0 counts as 1) exceeds DT__MAX_BUFFER_BYTES.  Every collective checks its
 * count with it before anything else. */
dt_status dt__coll_bytes(const char *op, size_t count, dt_dtype t, size_t mult, size_t *bytes);

/* Pipelined ring over `n` blocks of buf (block b at offsets[b], lengths[b]
 * elements).  Phase RS: after it rank r holds the reduction of block r.
 * Phase AG: every rank ends with every block, block r taken from rank r. */
enum { DT_RING_RS = 1, DT_RING_AG = 2 };
dt_status dt__ring_run(dt__coll *k, void *buf, const size_t *offsets, const size_t *lengths, dt_dtype t,
                       dt_redop op, int phases);
/* The same with this rank's input in src (laid out as buf, not overlapping
 * it) when the phases include RS: the ring reads each block of src where
 * it first needs it, so buf needs no copy of the input beforehand.  With
 * AG only, src is not read (the input is buf's block r). */
dt_status dt__ring_run_from(dt__coll *k, const void *src, void *buf, const size_t *offsets,
                            const size_t *lengths, dt_dtype t, dt_redop op, int phases);
/* Equal-ish blocks of `count` (the first count % n get one more). */
void dt__split_blocks(size_t count, int n, size_t *offsets, size_t *lengths);

/* Allreduce of buf in place with the flat algorithms of k's communicator
 * (no final division for DT_AVG). */
dt_status dt__allreduce_flat(dt__coll *k, void *buf, size_t count, dt_dtype t, dt_redop op);
/* The same with the input in src (src == buf: in place). */
dt_status dt__allreduce_flat_from(dt__coll *k, const void *src, void *buf, size_t count, dt_dtype t, dt_redop op);

/* Hierarchical collectives (hier.c).  Setup is collective over the world
 * communicator; dt__hier_use says whether a call of `bytes` takes the
 * hierarchical path.  The operations work in place on the full buffer and
 * leave DT_AVG's division to the caller. */
dt_status dt__hier_setup(dt_comm *c);
void dt__hier_destroy(dt_comm *c);
bool dt__hier_use(const dt_comm *c, size_t bytes);
dt_status dt__hier_allreduce(dt_comm *c, void *buf, size_t count, dt_dtype t, dt_redop op);
dt_status dt__hier_reduce_scatter(dt_comm *c, void *work, size_t recvcount, dt_dtype t, dt_redop op);
dt_status dt__hier_allgather(dt_comm *c, void *recv, size_t sendcount, dt_dtype t);

/* Shared-memory collectives (shm_coll.c).  Setup runs where a communicator
 * is made (collective over its ranks): with every rank on one host, DT_ALGO
 * auto or shm and DT_SHM_COLL=auto, it maps one arena for all of them; if
 * any rank cannot, each warns and c->arena stays NULL (messages, for good).
 * An error only when the set-up exchange itself fails. */
dt_status dt__shm_coll_setup(dt_comm *c);
/* For k's communicator when dt__coll_pick says DT__ALG_SHM (c->arena set).
 * Reductions combine contributions in rank order.  allgather: recv holds
 * this rank's block already; reduce_scatter and alltoall may run in place. */
dt_status dt__shm_allreduce(dt__coll *k, const void *src, void *buf, size_t count, dt_dtype t, dt_redop op);
/* f32 carried as f16/bf16 (bf16 true), summed in f32; avg divides once. */
dt_status dt__shm_allreduce_half(dt__coll *k, const float *send, float *recv, size_t count, bool bf16, bool avg);
dt_status dt__shm_broadcast(dt__coll *k, void *buf, size_t bytes, int root);
dt_status dt__shm_allgather(dt__coll *k, void *recv, size_t bytes);
dt_status dt__shm_reduce_scatter(dt__coll *k, const void *send, void *recv, size_t recvcount, dt_dtype t,
                                 dt_redop op);
dt_status dt__shm_alltoall(dt__coll *k, const void *send, void *recv, size_t bytes);
/* The arena round of dt__coll_agree: every rank publishes k->sig with READY
 * and checks every other rank's. */
dt_status dt__shm_agree(dt__coll *k);
/* Unmap the communicator's arena (NULL: nothing). */
void dt__shm_coll_destroy(dt_comm *c);

/* Latency-optimal building blocks. */
dt_status dt__direct_allreduce(dt__coll *k, void *buf, size_t count, dt_dtype t, dt_redop op);
dt_status dt__rd_allreduce(dt__coll *k, void *buf, size_t count, dt_dtype t, dt_redop op);
/* One step, every rank to every rank: recv holds this rank's block r of
 * `bytes` on entry, all n blocks on return. */
dt_status dt__direct_allgather(dt__coll *k, uint8_t *recv, size_t bytes);
/* One step: work holds this rank's n blocks of `count` elements; block r
 * comes back reduced over all ranks (in the order dt__coll_direct_order's
 * algorithm reduces it; DT_AVG not divided). */
dt_status dt__direct_reduce_scatter(dt__coll *k, uint8_t *work, size_t count, dt_dtype t, dt_redop op);
dt_status dt__tree_bcast(dt__coll *k, void *buf, size_t bytes, int root);
dt_status dt__chain_bcast(dt__coll *k, void *buf, size_t bytes, int root);
/* Recursive halving (phase RS: rank r ends with block r reduced) and/or
 * doubling (phase AG) over p blocks of buf.  Both phases together work on any
 * world size (extra ranks fold in); one phase alone needs a power of two. */
dt_status dt__rhd_run(dt__coll *k, void *buf, size_t count, const size_t *offsets, const size_t *lengths,
                      dt_dtype t, dt_redop op, int phases);

#endif
