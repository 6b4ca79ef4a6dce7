/* Alltoall over messages (a communicator on one host uses its shared arena
 * unless DT_SHM_COLL=off).  Rank r sends to r+i and receives from r-i in step i.
 * Small pieces go all at once (DT__ALG_RD), or across hosts in Bruck's
 * ceil(log2 n) steps (DT__ALG_RHD); large ones (DT__ALG_RING,
 * docs/algorithms.md) pairwise, step i+1 once step i is done, so that each
 * link carries one flow each way; large pieces with the receivers pacing
 * the steps, so that it still does when ranks drift apart. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "comm/coll.h"
#include "comm/colltrace.h"

/* Every receive is posted first, so that nothing waits in an unexpected
 * buffer; then the sends, step i to rank r+i.  Pairwise, step i's send goes
 * once step i-1's send and receive are done.  rq: 2(n-1) requests, step i's
 * receive at rq[2(i-1)] and its send after it. */
static dt_status exchange(dt__coll *k, const uint8_t *src, uint8_t *dst, size_t bytes, dt__req *rq, bool pairwise)
{
    int n = k->c->size, r = k->c->rank;
    memcpy(dst + (size_t)r * bytes, src + (size_t)r * bytes, bytes);
    for (int i = 1; i < n; i++) {
        int from = (r - i + n) % n;
        DT_CHECK(dt__coll_recv(k, &rq[2 * (i - 1)], from, 0, dst + (size_t)from * bytes, bytes));
    }
    for (int i = 1; i < n; i++) {
        if (pairwise && i > 1)
            DT_CHECK(dt__coll_wait(k, &rq[2 * (i - 2)], 2));
        int to = (r + i) % n;
        DT_CHECK(dt__coll_send(k, &rq[2 * (i - 1) + 1], to, 0, src + (size_t)to * bytes, bytes));
    }
    int first = pairwise && n > 2 ? n - 2 : 0; /* the first step not waited for yet */
    return dt__coll_wait(k, &rq[2 * first], 2 * (size_t)(n - 1 - first));
}

/* Pieces of at least this many bytes go paced.  Pacing cost nothing from
 * 32 KiB pieces at 1000mbit (4 and 8 hosts) and from 64 KiB with 100 us per
 * hop, where 32 KiB pieces took 1281-1304 us against 780-785 unpaced; the
 * losses it prevents were seen at 8 and 16 MiB pieces (200mbit). */
#define PACED_PIECE_BYTES 262144

/* Pairwise steps paced by the receivers.  Unpaced, a rank that finishes
 * step i early (or the last step of one call) starts its next send into a
 * rank still receiving the step before, two flows share that rank's link,
 * and its queue overflows: 4 hosts at 200mbit, 64 MiB, every host's link
 * queue dropped packets, tail losses waited out TCP's 200 ms retransmit
 * timer, and a call took 3.4-4.0 s against the 2.0 the link allows.  Here a
 * rank asks for step i's piece (an empty message on sub-tag 1) only once
 * step i-1's piece is in, and sends its own step i piece only once asked:
 * each link carries one flow each way, whatever the ranks' skew.  The cost
 * is a one-way latency per step while a rank waits to be asked.
 * rq: 4(n-1) requests; step i's at rq[4(i-1)]: data receive, data send,
 * request receive (from r+i), request send (to r-i). */
static dt_status exchange_paced(dt__coll *k, const uint8_t *src, uint8_t *dst, size_t bytes, dt__req *rq)
{
    int n = k->c->size, r = k->c->rank;
    memcpy(dst + (size_t)r * bytes, src + (size_t)r * bytes, bytes);
    for (int i = 1; i < n; i++)
        DT_CHECK(dt__coll_recv(k, &rq[4 * (i - 1) + 2], (r + i) % n, 1, NULL, 0));
    for (int i = 1; i < n; i++) {
        dt__req *step = &rq[4 * (i - 1)];
        int to = (r + i) % n, from = (r - i + n) % n;
        DT_CHECK(dt__coll_recv(k, &step[0], from, 0, dst + (size_t)from * bytes, bytes));
        DT_CHECK(dt__coll_send(k, &step[3], from, 1, NULL, 0));
        if (i > 1) /* this rank's step i-1 send is out of its hands */
            DT_CHECK(dt__coll_wait(k, &step[-3], 1));
        DT_CHECK(dt__coll_wait(k, &step[2], 1));
        DT_CHECK(dt__coll_send(k, &step[1], to, 0, src + (size_t)to * bytes, bytes));
        DT_CHECK(dt__coll_wait(k, &step[0], 1));
    }
    /* The last data send and every request send. */
    DT_CHECK(dt__coll_wait(k, &rq[4 * (n - 2) + 1], 1));
    for (int i = 1; i < n; i++)
        DT_CHECK(dt__coll_wait(k, &rq[4 * (i - 1) + 3], 1));
    return DT_OK;
}

/* Bruck's exchange: blocks rotated so that block i is bound for rank r+i;
 * at step d (1, 2, 4, ...) every block whose index has bit d goes, packed in
 * one message, d ranks on, and the same positions come in from d ranks
 * back, so block i has moved i ranks when the bits run out.  ceil(log2 n)
 * messages per rank instead of n-1, each with about n/2 blocks.  Reads src
 * whole before writing dst, so the two may be one buffer. */
static dt_status bruck(dt__coll *k, const uint8_t *src, uint8_t *dst, size_t bytes)
{
    int n = k->c->size, r = k->c->rank;
    size_t nb = (size_t)n, half = nb / 2 + 1;
    uint8_t *tmp = dt__comm_scratch(k->c, DT__SCRATCH_TMP, (nb + 2 * half) * bytes);
    if (!tmp)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    uint8_t *out = tmp + nb * bytes, *in = out + half * bytes;
    for (int i = 0; i < n; i++)
        memcpy(tmp + (size_t)i * bytes, src + (size_t)((r + i) % n) * bytes, bytes);
    uint32_t step = 0;
    for (int d = 1; d < n; d <<= 1, step++) {
        size_t m = 0;
        for (int i = d; i < n; i++)
            if (i & d)
                memcpy(out + m++ * bytes, tmp + (size_t)i * bytes, bytes);
        dt__req rq[2];
        DT_CHECK(dt__coll_recv(k, &rq[0], (r - d + n) % n, step, in, m * bytes));
        DT_CHECK(dt__coll_send(k, &rq[1], (r + d) % n, step, out, m * bytes));
        DT_CHECK(dt__coll_wait(k, rq, 2));
        m = 0;
        for (int i = d; i < n; i++)
            if (i & d)
                memcpy(tmp + (size_t)i * bytes, in + m++ * bytes, bytes);
    }
    for (int i = 0; i < n; i++)
        memcpy(dst + (size_t)((r - i + n) % n) * bytes, tmp + (size_t)i * bytes, bytes);
    return DT_OK;
}

dt_status dt__alltoall_alg(dt__coll *k, const void *src, void *dst, size_t bytes, dt__alg alg)
{
    if (alg == DT__ALG_RHD)
        return bruck(k, src, dst, bytes);
    size_t n = (size_t)k->c->size;
    if (src == dst) {
        uint8_t *copy = dt__comm_scratch(k->c, DT__SCRATCH_WORK, n * bytes);
        if (!copy)
            return dt__fail(DT_ERR_NOMEM, "out of memory");
        memcpy(copy, src, n * bytes);
        src = copy;
    }
    bool paced = alg == DT__ALG_RING && n > 2 && bytes >= PACED_PIECE_BYTES;
    dt__req *rq = calloc(4 * n, sizeof *rq);
    if (!rq)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_status s = paced ? exchange_paced(k, src, dst, bytes, rq) : exchange(k, src, dst, bytes, rq, alg == DT__ALG_RING);
    free(rq);
    return s;
}

dt_status dt__native_alltoall(const void *send, void *recv, size_t count, dt_dtype t, dt_comm *c)
{
    if (!c)
        return dt__fail(DT_ERR_INVALID, "alltoall: communicator is NULL");
    size_t n = (size_t)c->size, bytes;
    DT_CHECK(dt__coll_bytes("alltoall", count, t, n, &bytes));
    DT_CHECK(dt__coll_check_buffers("alltoall", send, n * bytes, recv, n * bytes));
    dt__coll k;
    DT_CHECK(dt__coll_begin(&k, c, "alltoall"));
    DT_CHECK(dt__coll_trace(&k, count, t, -1, -1));
    if (bytes == 0)
        return DT_OK;
    dt__alg alg = dt__coll_pick(c, DT__COLL_ALLTOALL, n * bytes);
    if (alg == DT__ALG_SHM)
        return dt__shm_alltoall(&k, send, recv, bytes);
    return dt__coll_error(&k, dt__alltoall_alg(&k, send, recv, bytes, alg));
}
