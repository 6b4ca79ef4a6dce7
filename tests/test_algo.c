/* Unit tests of the algorithm choice by size (src/comm/algo.c): the measured
 * thresholds of docs/algorithms.md, and that DT_SMALL_MSG, DT_RING_MSG and
 * DT_ALGO override them.  The communicators here are descriptions only: no
 * world, no peers. */
#include <stdint.h>
#include "check.h"
#include "comm/coll.h"
#include "comm/comm_internal.h"
#include "comm/stage.h"

/* A communicator of `size` ranks in world w with nothing forced and nothing
 * measured. */
static dt_comm comm_of(int size, bool one_host, dt__world *w)
{
    return (dt_comm){.world = w,
                     .size = size,
                     .one_host = one_host,
                     .algo = DT_ALGO_AUTO,
                     .direct_bytes = SIZE_MAX,
                     .small_bytes = SIZE_MAX,
                     .ring_bytes = SIZE_MAX};
}

static void test_cross_host_broadcast(void)
{
    dt__world w = {0};
    dt_comm c = comm_of(4, false, &w);
    /* Binomial tree up to 128 bytes, then the pipelined chain. */
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_BROADCAST, 8), DT__ALG_RD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_BROADCAST, 128), DT__ALG_RD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_BROADCAST, 256), DT__ALG_RING);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_BROADCAST, 8192), DT__ALG_RING);
    c.size = 8;
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_BROADCAST, 128), DT__ALG_RD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_BROADCAST, 129), DT__ALG_RING);
}

static void test_cross_host_reduce_scatter(void)
{
    dt__world w = {0};
    dt_comm c = comm_of(4, false, &w);
    /* A power of two: the tree up to 128 B, then recursive halving. */
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_REDUCE_SCATTER, 128), DT__ALG_RD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_REDUCE_SCATTER, 256), DT__ALG_RHD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_REDUCE_SCATTER, 65536), DT__ALG_RHD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_REDUCE_SCATTER, 262144 + 4), DT__ALG_RING);
    c.size = 3; /* no halving: the tree up to 2 KiB, then the ring */
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_REDUCE_SCATTER, 2048), DT__ALG_RD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_REDUCE_SCATTER, 2048 + 12), DT__ALG_RING);
}

static void test_alltoall(void)
{
    dt__world w = {0};
    dt_comm c = comm_of(8, false, &w);
    /* Across hosts: all at once below 32 KiB pieces, pairwise from there. */
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLTOALL, 8 * 32760), DT__ALG_RD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLTOALL, 8 * 32768), DT__ALG_RING);
    c.size = 3;
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLTOALL, 3 * 32768), DT__ALG_RING);
    /* Bruck's exchange for pieces up to what the start-up timing measured
     * (nothing measured: never); DT_ALGO=rhd forces it. */
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLTOALL, 3 * 64), DT__ALG_RD);
    c.bruck_piece = 256;
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLTOALL, 3 * 256), DT__ALG_RHD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLTOALL, 3 * 260), DT__ALG_RD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLTOALL, 3 * 32768), DT__ALG_RING);
    c.bruck_piece = 0;
    c.algo = DT_ALGO_RHD;
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLTOALL, 3 * 32768), DT__ALG_RHD);
    c.algo = DT_ALGO_AUTO;
    /* One host without an arena: all at once at every size. */
    dt_comm one = comm_of(4, true, &w);
    EXPECT_EQ(dt__coll_pick(&one, DT__COLL_ALLTOALL, 4 << 20), DT__ALG_RD);
    /* DT_ALGO=ring forces pairwise, rd all at once. */
    one.algo = DT_ALGO_RING;
    EXPECT_EQ(dt__coll_pick(&one, DT__COLL_ALLTOALL, 64), DT__ALG_RING);
    c.algo = DT_ALGO_RD;
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLTOALL, 4 << 20), DT__ALG_RD);
}

static void test_generic_thresholds(void)
{
    dt__world w = {0};
    dt_comm c = comm_of(4, false, &w);
    /* Allgather's doubling runs up to 128 KiB across hosts. */
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLGATHER, 131072), DT__ALG_RD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLGATHER, 262144), DT__ALG_RING);
    /* Halving-doubling up to 256 KiB, then the ring. */
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLREDUCE, 262144), DT__ALG_RHD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLREDUCE, 262148), DT__ALG_RING);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_REDUCE_SCATTER, 262144), DT__ALG_RHD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_REDUCE_SCATTER, 262148), DT__ALG_RING);
    /* Under bbr (some rank's TCP connections) up to 4 ranks leave it above
     * 64 KiB; from 5 ranks on it still runs to 256 KiB. */
    w.tcp_probes_rtt = true;
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLREDUCE, 65536), DT__ALG_RHD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLREDUCE, 65540), DT__ALG_RING);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_REDUCE_SCATTER, 65540), DT__ALG_RING);
    c.size = 8;
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLREDUCE, 262144), DT__ALG_RHD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLREDUCE, 262148), DT__ALG_RING);
    w.tcp_probes_rtt = false;
    /* One host without an arena: 64 KiB and 2 MiB, broadcast included. */
    dt_comm one = comm_of(4, true, &w);
    EXPECT_EQ(dt__coll_pick(&one, DT__COLL_BROADCAST, 65536), DT__ALG_RD);
    EXPECT_EQ(dt__coll_pick(&one, DT__COLL_BROADCAST, 65540), DT__ALG_RING);
    EXPECT_EQ(dt__coll_pick(&one, DT__COLL_ALLREDUCE, 2097152), DT__ALG_RHD);
    EXPECT_EQ(dt__coll_pick(&one, DT__COLL_ALLREDUCE, 2097156), DT__ALG_RING);
}

/* Where the start-up timing found the direct allreduce faster (direct_tuned),
 * allgather and reduce-scatter go direct up to n times that many bytes: each
 * of their messages is one rank's block. */
static void test_direct(void)
{
    dt__world w = {0};
    dt_comm c = comm_of(4, false, &w);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLGATHER, 16), DT__ALG_RD); /* nothing timed: never */
    c.direct_tuned = 1024;
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLREDUCE, 1024), DT__ALG_DIRECT);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLREDUCE, 1028), DT__ALG_RD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLGATHER, 16), DT__ALG_DIRECT);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLGATHER, 4096), DT__ALG_DIRECT);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLGATHER, 4112), DT__ALG_RD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_REDUCE_SCATTER, 4096), DT__ALG_DIRECT);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_REDUCE_SCATTER, 4112), DT__ALG_RHD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_BROADCAST, 8), DT__ALG_RD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLTOALL, 64), DT__ALG_RD);
    c.direct_bytes = 0; /* DT_DIRECT_MSG=0 turns all three off */
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLGATHER, 16), DT__ALG_RD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_REDUCE_SCATTER, 16), DT__ALG_RD);
    c.direct_bytes = SIZE_MAX;
    c.size = 2; /* two ranks: one step anyway */
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLGATHER, 16), DT__ALG_RD);
    c.size = 4;
    c.algo = DT_ALGO_DIRECT; /* forced: at every size where it exists */
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLGATHER, 1 << 20), DT__ALG_DIRECT);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_REDUCE_SCATTER, 1 << 20), DT__ALG_DIRECT);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_BROADCAST, 1 << 20), DT__ALG_RD);
}

/* The direct allreduce and reduce-scatter combine their inputs in the order
 * of the algorithm that runs without them (issue 43: the start-up timing
 * must never change a bit): dt__coll_direct_order is the pick with the
 * direct threshold at 0, whatever was measured, set or forced. */
static void test_direct_order(void)
{
    dt__world w = {0};
    static const size_t sizes[] = {8, 128, 684, 2048, 2052, 4096, 4112, 16384, 65536, 65540, 262144, 262160, 1 << 22};
    static const dt__coll_kind kinds[] = {DT__COLL_ALLREDUCE, DT__COLL_REDUCE_SCATTER};
    for (int n = 3; n <= 8; n++)
        for (int one_host = 0; one_host < 2; one_host++)
            for (int bbr = 0; bbr < 2; bbr++)
                for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
                    for (int k = 0; k < 2; k++) {
                        w.tcp_probes_rtt = bbr;
                        dt_comm c = comm_of(n, one_host, &w);
                        c.small_tuned = n == 4 ? 4096 : 0;
                        c.direct_bytes = 0;
                        dt__alg want = dt__coll_pick(&c, kinds[k], sizes[i]);
                        EXPECT(want != DT__ALG_DIRECT);
                        c.direct_bytes = SIZE_MAX;
                        c.direct_tuned = 4096;
                        EXPECT_EQ(dt__coll_direct_order(&c, kinds[k], sizes[i]), want);
                        c.direct_bytes = 1 << 20; /* DT_DIRECT_MSG */
                        EXPECT_EQ(dt__coll_direct_order(&c, kinds[k], sizes[i]), want);
                        c.algo = DT_ALGO_DIRECT;
                        EXPECT_EQ(dt__coll_pick(&c, kinds[k], sizes[i]), DT__ALG_DIRECT);
                        EXPECT_EQ(dt__coll_direct_order(&c, kinds[k], sizes[i]), want);
                    }
}

static void test_overrides(void)
{
    dt__world w = {0};
    dt_comm c = comm_of(4, false, &w);
    c.small_bytes = 16384; /* DT_SMALL_MSG wins over the per-kind limits */
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_BROADCAST, 16384), DT__ALG_RD);
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_REDUCE_SCATTER, 16384), DT__ALG_RD);
    c.small_bytes = SIZE_MAX;
    c.ring_bytes = 4096; /* DT_RING_MSG */
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_ALLREDUCE, 1 << 20), DT__ALG_RING);
    c.ring_bytes = SIZE_MAX;
    c.algo = DT_ALGO_RD; /* DT_ALGO forces one at every size */
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_BROADCAST, 1 << 20), DT__ALG_RD);
    c.algo = DT_ALGO_RING;
    EXPECT_EQ(dt__coll_pick(&c, DT__COLL_BROADCAST, 8), DT__ALG_RING);
}

/* The chunking of staged device buffers (comm/stage.c): whole elements
 * per chunk, at least one; staged whole below two chunks; the last chunk
 * the remainder. */
static void test_stage_chunking(void)
{
    EXPECT_EQ(dt__stage_chunk_elems(2097152, 4), 524288);
    EXPECT_EQ(dt__stage_chunk_elems(100, 4), 25);
    EXPECT_EQ(dt__stage_chunk_elems(100, 8), 12); /* rounded down to whole elements */
    EXPECT_EQ(dt__stage_chunk_elems(3, 8), 1);    /* at least one */
    EXPECT_EQ(dt__stage_nchunks(0, 25), 0);
    EXPECT_EQ(dt__stage_nchunks(25, 25), 0);      /* one chunk: whole */
    EXPECT_EQ(dt__stage_nchunks(49, 25), 0);      /* one and a part: whole */
    EXPECT_EQ(dt__stage_nchunks(50, 25), 2);
    EXPECT_EQ(dt__stage_nchunks(51, 25), 3);      /* a partial last chunk */
    EXPECT_EQ(dt__stage_nchunks(1000, 25), 40);
    EXPECT_EQ(dt__stage_nchunks(4096, 25), 164);
    EXPECT_EQ(dt__stage_nchunks((size_t)1 << 40, 1), (size_t)1 << 40);
}

int main(void)
{
    test_stage_chunking();
    test_cross_host_broadcast();
    test_cross_host_reduce_scatter();
    test_alltoall();
    test_generic_thresholds();
    test_direct();
    test_direct_order();
    test_overrides();
    return CHECK_DONE("test_algo");
}
