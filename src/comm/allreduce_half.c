/* Allreduce of f32 data carried as f16 or bf16 on the wire (gradient
 * compression): half the bytes of an f32 ring, with every sum taken in f32.
 *
 *  1. each rank rounds its input to the wire format once;
 *  2. reduce-scatter by direct exchange: rank r receives block r of every
 *     other rank's rounded input and adds all n of them in f32, in rank order
 *     (one rounding per input, none per hop as a half-precision ring would);
 *  3. rank r rounds its f32 result (divided by n for avg) to the wire format;
 *  4. a ring allgather of the rounded blocks, which every rank widens to f32.
 *
 * Bytes sent per rank: 2 (n-1)/n x count x 2, as a ring over half values.
 * Every rank ends with the same bits: block r is computed once, by rank r. */
#include <stdlib.h>
#include <string.h>

#include "base/half_convert.h"
#include "base/redop.h"
#include "base/status.h"
#include "comm/coll.h"
#include "comm/colltrace.h"

#define SUBTAG_EXCHANGE 0x3ffffff0u

static dt_status exchange_and_sum(dt__coll *k, const uint16_t *wire, uint16_t *in, float *acc, const size_t *off,
                                  const size_t *len, bool bf16)
{
    dt_comm *c = k->c;
    int n = c->size, r = c->rank;
    size_t mine = len[r];
    dt__req *reqs = calloc(2 * (size_t)n, sizeof *reqs);
    if (!reqs)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_status s = DT_OK;
    size_t nreq = 0;
    for (int j = 0; j < n && s == DT_OK; j++) {
        if (j == r)
            continue;
        s = dt__coll_recv(k, &reqs[nreq++], j, SUBTAG_EXCHANGE, in + (size_t)j * mine, mine * 2);
        if (s == DT_OK)
            s = dt__coll_send(k, &reqs[nreq++], j, SUBTAG_EXCHANGE, wire + off[j], len[j] * 2);
    }
    if (s == DT_OK)
        s = dt__coll_wait(k, reqs, nreq);
    free(reqs);
    DT_CHECK(s);
    memcpy(in + (size_t)r * mine, wire + off[r], mine * 2);
    memset(acc, 0, mine * sizeof *acc);
    for (int j = 0; j < n; j++) /* fixed order: the same bits on every run */
        dt__add_half_n(acc, in + (size_t)j * mine, mine, bf16);
    return DT_OK;
}

dt_status dt__native_allreduce_half(const float *send, float *recv, size_t count, dt_dtype wire, dt_redop op, dt_comm *c)
{
    const char *name = "allreduce_half";
    if (wire != DT_F16 && wire != DT_BF16)
        return dt__fail(DT_ERR_INVALID, "%s: the wire format must be f16 or bf16", name);
    if (op != DT_SUM && op != DT_AVG)
        return dt__fail(DT_ERR_INVALID, "%s: only sum and avg are supported", name);
    size_t bytes;
    DT_CHECK(dt__coll_bytes(name, count, DT_F32, 1, &bytes));
    DT_CHECK(dt__coll_check_buffers(name, send, bytes, recv, bytes));
    dt__coll k;
    DT_CHECK(dt__coll_begin_reducing(&k, c, name));
    DT_CHECK(dt__coll_trace(&k, count, wire, (int)op, -1));
    if (count == 0)
        return DT_OK;
    bool bf16 = wire == DT_BF16;
    if (dt__coll_pick(c, DT__COLL_ALLREDUCE, count * 2) == DT__ALG_SHM)
        return dt__shm_allreduce_half(&k, send, recv, count, bf16, op == DT_AVG);
    int n = c->size, r = c->rank;
    size_t *off = malloc(2 * (size_t)n * sizeof *off);
    if (!off)
        return dt__coll_error(&k, dt__fail(DT_ERR_NOMEM, "out of memory"));
    size_t *len = off + n;
    dt__split_blocks(count, n, off, len);
    size_t mine = len[r];
    uint16_t *h = dt__comm_scratch(c, DT__SCRATCH_WORK, count * 2);
    /* TMP: n incoming blocks of mine halves, then mine floats (4-byte aligned) */
    size_t in_bytes = ((size_t)n * mine * 2 + 3) & ~(size_t)3;
    uint8_t *tmp = dt__comm_scratch(c, DT__SCRATCH_TMP, in_bytes + mine * 4);
    if (!h || !tmp) {
        free(off);
        return dt__coll_error(&k, dt__fail(DT_ERR_NOMEM, "%s: out of memory for %zu elements", name, count));
    }
    dt__to_half_n(h, send, count, bf16);
    dt_status s = DT_OK;
    if (n > 1) {
        float *acc = (float *)(tmp + in_bytes);
        s = exchange_and_sum(&k, h, (uint16_t *)tmp, acc, off, len, bf16);
        if (s == DT_OK) {
            if (op == DT_AVG)
                for (size_t i = 0; i < mine; i++)
                    acc[i] /= (float)n;
            dt__to_half_n(h + off[r], acc, mine, bf16);
            s = dt__ring_run(&k, h, off, len, wire, DT_SUM, DT_RING_AG);
        }
    }
    free(off);
    if (s != DT_OK)
        return dt__coll_error(&k, s);
    dt__from_half_n(recv, h, count, bf16);
    if (n == 1) /* nothing summed: a NaN is still the input's */
        dt__reduce_finish(recv, count, DT_F32, op, 1);
    return DT_OK;
}
