/* Which algorithm a collective uses.  The thresholds and the measurements
 * behind them are in docs/algorithms.md. */
#include <stdbool.h>
#include <stdint.h>

#include "comm/coll.h"

/* Across hosts, broadcast and reduce-scatter leave their trees above these:
 * reduce-scatter early where recursive halving can take over (a power of
 * two), later where only the ring can. */
#define CROSS_HOST_SMALL_BROADCAST 128
#define CROSS_HOST_SMALL_REDUCE_SCATTER_POW2 128
#define CROSS_HOST_SMALL_REDUCE_SCATTER 2048
/* Across hosts, allgather's recursive doubling (a power of two of ranks)
 * puts the same bytes on each link as the ring in log2(n) steps instead of
 * n-1: it runs up to this many bytes. */
#define CROSS_HOST_SMALL_ALLGATHER 131072
/* Across hosts, alltoall pieces of at least this many bytes (per pair of
 * ranks) go pairwise, one exchange at a time, instead of all at once. */
#define CROSS_HOST_PAIRWISE_ALLTOALL 32768

static bool pow2(int n) { return (n & (n - 1)) == 0; }

size_t dt__coll_small_bytes(const dt_comm *c)
{
    /* Measured defaults (docs/algorithms.md): through shared memory a step
     * costs microseconds, so recursive doubling pays longer; over TCP the
     * extra bytes it sends cost more than the ring's extra steps sooner. */
    return c->small_bytes != SIZE_MAX ? c->small_bytes : c->one_host ? 65536 : 16384;
}

size_t dt__coll_allreduce_small_bytes(const dt_comm *c)
{
    return c->small_bytes == SIZE_MAX && c->small_tuned ? c->small_tuned : dt__coll_small_bytes(c);
}

size_t dt__coll_direct_bytes(const dt_comm *c)
{
    if (c->direct_bytes != SIZE_MAX)
        return c->direct_bytes;
    /* Measured: only where recursive doubling would run otherwise, whose
     * bits direct reproduces, so the timing never changes a result. */
    size_t small = dt__coll_allreduce_small_bytes(c);
    return c->direct_tuned < small ? c->direct_tuned : small;
}

/* Up to this many bytes `kind` uses recursive doubling / trees. */
static size_t small_bytes_for(const dt_comm *c, dt__coll_kind kind)
{
    if (kind == DT__COLL_ALLREDUCE)
        return dt__coll_allreduce_small_bytes(c);
    /* 8 hosts at 1000mbit, allgather of 32 KiB: 241 us against the ring's
     * 343-348; from 64 KiB to 512 KiB the two within 1% (4 hosts: from 16
     * KiB), at 1 MiB the ring faster (7651 us against 8513-9347).  With 100
     * us per hop (4 hosts) doubling's fewer steps win to 128 KiB (819
     * against 940-962 us), within 0.1% from 256 KiB. */
    if (kind == DT__COLL_ALLGATHER && !c->one_host && c->small_bytes == SIZE_MAX)
        return CROSS_HOST_SMALL_ALLGATHER;
    size_t small = dt__coll_small_bytes(c);
    /* Across hosts the binomial broadcast puts log2(n) copies on the root's
     * link and the small reduce-scatter its whole input on every link
     * (docs/algorithms.md; 4 hosts, each size timed 0.2 s).  Broadcast, tree
     * against chain: 512 B-4 KiB 15-68 us against 12-35 at 1000mbit, 10-69
     * against 6-36 with 100 us per hop, the chain faster at every size at
     * 200mbit; up to 128 B both within noise, and the tree keeps a lone call
     * at log2(n) hops instead of n-1.  Reduce-scatter, tree against halving:
     * 2-4 KiB 55-70 us against 42-51 at 1000mbit, 256 B-4 KiB 47-352 against
     * 38-137 at 200mbit, even up to 1 KiB with 100 us per hop.  Tree against
     * ring (3 hosts, 1000mbit): 192-768 B 26 us against 40, 1.5 KiB 36
     * against 41, 3-24 KiB 54-413 against 41-139. */
    size_t cross = SIZE_MAX;
    if (kind == DT__COLL_BROADCAST)
        cross = CROSS_HOST_SMALL_BROADCAST;
    else if (kind == DT__COLL_REDUCE_SCATTER)
        cross = pow2(c->size) ? CROSS_HOST_SMALL_REDUCE_SCATTER_POW2 : CROSS_HOST_SMALL_REDUCE_SCATTER;
    if (!c->one_host && c->small_bytes == SIZE_MAX && small > cross)
        return cross;
    return small;
}

/* The size rule: recursive doubling / trees up to the small threshold,
 * halving-doubling (where the collective has it) up to the ring threshold,
 * the ring above.  Nothing in it comes from the start-up timing except
 * allreduce's small threshold, which only moves the line between recursive
 * doubling and halving-doubling, two algorithms with the same bits. */
static dt__alg by_size(const dt_comm *c, dt__coll_kind kind, size_t bytes, bool has_log_steps)
{
    size_t small = small_bytes_for(c, kind);
    /* Across hosts with 4 ranks or fewer halving-doubling saves at most 2
     * steps: with 100 us per hop 128 KiB took 1641-1651 us against the
     * ring's 1949-1967, level with it at 512 KiB.  Under bbr its exchanges
     * of 128 and 256 KiB stalled for 10-200 ms in most runs (round-trip
     * probes) while the ring's did not; up to 64 KiB they did not
     * (docs/algorithms.md). */
    size_t ring = c->ring_bytes != SIZE_MAX             ? c->ring_bytes
                  : c->one_host                           ? 2097152
                  : c->size <= 4 && c->world->tcp_probes_rtt ? 65536
                                                          : 262144;
    if (bytes <= small)
        return DT__ALG_RD;
    if (bytes <= ring && has_log_steps)
        return DT__ALG_RHD;
    return DT__ALG_RING;
}

static dt__alg pick(const dt_comm *c, dt__coll_kind kind, size_t bytes)
{
    /* DT__ALG_RHD names the log2(n)-step exchange where a collective has
     * one besides recursive doubling: halving-doubling for allreduce (any
     * size of world) and reduce-scatter (a power of two), Bruck's exchange
     * for alltoall.  Allgather's doubling is the RD one. */
    bool has_log_steps = kind == DT__COLL_ALLREDUCE || (kind == DT__COLL_REDUCE_SCATTER && pow2(c->size)) ||
                         kind == DT__COLL_ALLTOALL;
    bool has_direct = kind == DT__COLL_ALLREDUCE || kind == DT__COLL_ALLGATHER || kind == DT__COLL_REDUCE_SCATTER;
    bool has_shm = c->arena && kind != DT__COLL_REDUCE;
    switch (c->algo) {
    case DT_ALGO_RING:
        return DT__ALG_RING;
    case DT_ALGO_RD:
        return DT__ALG_RD;
    case DT_ALGO_RHD:
        return has_log_steps ? DT__ALG_RHD : DT__ALG_RING;
    case DT_ALGO_DIRECT:
        return has_direct ? DT__ALG_DIRECT : DT__ALG_RD;
    case DT_ALGO_SHM: /* where the arena cannot serve: the flat choice by size */
    case DT_ALGO_AUTO:
        break;
    }
    if (has_shm)
        return DT__ALG_SHM;
    /* All at once, every link of every rank is busy; but n-1 senders that
     * start together on one receiver's link overflow the queue in front of
     * it (8 hosts at 1000mbit, 64-128 KiB pieces: 0.65 of the link, 0.95
     * pairwise), and in pairwise steps each link carries one flow each way.
     * Below 32 KiB pieces the steps' latencies cost more (8 hosts, pieces of
     * 8 B-1 KiB: 275-295 us against 250-255; 2-4 KiB: 395-420 against
     * 341-346).  Small pieces take Bruck's ceil(log2 n) messages where the
     * start-up timing found them faster (tune.c). */
    if (kind == DT__COLL_ALLTOALL) {
        size_t piece = bytes / (size_t)c->size;
        if (c->one_host)
            return DT__ALG_RD;
        if (piece >= CROSS_HOST_PAIRWISE_ALLTOALL)
            return DT__ALG_RING;
        return piece <= c->bruck_piece ? DT__ALG_RHD : DT__ALG_RD;
    }
    /* The direct threshold bounds one message: allreduce sends the whole
     * buffer to each peer, allgather and reduce-scatter one block of
     * bytes/n, where recursive doubling or halving sends blocks as large or
     * larger in log2(n) steps.  So wherever the direct allreduce won the
     * start-up timing at some size, blocks of that size win too (4 hosts
     * with 100 us per hop, 16 B-16 KiB: see docs/algorithms.md). */
    if (has_direct && c->size > 2) {
        size_t message = kind == DT__COLL_ALLREDUCE ? bytes : bytes / (size_t)c->size;
        if (message <= dt__coll_direct_bytes(c))
            return DT__ALG_DIRECT;
    }
    return by_size(c, kind, bytes, has_log_steps);
}

dt__alg dt__coll_direct_order(const dt_comm *c, dt__coll_kind kind, size_t bytes)
{
    bool has_log_steps = kind == DT__COLL_ALLREDUCE || (kind == DT__COLL_REDUCE_SCATTER && pow2(c->size));
    return by_size(c, kind, bytes, has_log_steps);
}

_Thread_local int dt__coll_last_alg = -1;

dt__alg dt__coll_pick(const dt_comm *c, dt__coll_kind kind, size_t bytes)
{
    dt__alg a = pick(c, kind, bytes);
    dt__coll_last_alg = (int)a;
    return a;
}

const char *dt__coll_alg_name(int alg)
{
    switch (alg) {
    case DT__ALG_RD: return "rd";
    case DT__ALG_RHD: return "rhd";
    case DT__ALG_RING: return "ring";
    case DT__ALG_DIRECT: return "direct";
    case DT__ALG_SHM: return "shm";
    }
    return "-";
}
