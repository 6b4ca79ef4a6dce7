/* The bits of every reduction collective, printed so that two runs of the
 * same program under different settings can be compared (issue 43, item 2:
 * the direct threshold measured at start-up must never change a result).
 *
 * usage: coll_bits [--counts N,N,...]
 *
 * Inputs are inexact floats (so the order of the reduction shows in the
 * bits), the same in every run.  For every count, dtype (f32, bf16, f16) and
 * op (sum, avg, max): allreduce and iallreduce, reduce to rank 0 and to the
 * last rank, reduce_scatter and ireduce_scatter (also in place); for f16 and
 * bf16 with sum and avg also allreduce_half and iallreduce_half of f32 data
 * on that wire.  Then the same on a communicator split from the world
 * without its last rank (world 4: 3 ranks), which keeps the world's
 * thresholds.  Every rank prints one line per call:
 *
 *   bits COMM CALL DTYPE OP COUNT HASH ALG
 *
 * HASH is the FNV-1a hash of the rank's result (the root's for reduce), ALG
 * the algorithm the blocking call picked ("-" for the nonblocking ones, whose
 * pick runs on the progress thread).  Exit 0 when every call returned DT_OK. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/coll.h"
#include "dtrain/dtrain.h"

static int failures;

#define CALL(x)                                                                                                \
    do {                                                                                                       \
        dt_status s_ = (x);                                                                                    \
        if (s_ != DT_OK) {                                                                                     \
            fprintf(stderr, "coll_bits: %s failed: %s: %s\n", #x, dt_status_name(s_), dt_last_error());      \
            failures++;                                                                                        \
        }                                                                                                      \
    } while (0)

static uint64_t fnv(const void *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

/* n values in [-10, 10) with three decimals: no sum of them is exact in any
 * of the float types. */
static void fill(void *buf, dt_dtype t, size_t n, int rank, int salt)
{
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1) ^ (uint64_t)salt * 0xbf58476d1ce4e5b9ull;
    for (size_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        float v = (float)((double)(s % 20000) / 1000.0 - 10.0) * 1.000123f;
        if (t == DT_F32)
            ((float *)buf)[i] = v;
        else if (t == DT_F16)
            ((uint16_t *)buf)[i] = dt_f32_to_f16(v);
        else
            ((uint16_t *)buf)[i] = dt_f32_to_bf16(v);
    }
}

static void line(dt_comm *c, const char *comm, const char *call, dt_dtype t, dt_redop op, size_t count,
                 const void *result, size_t bytes, bool blocking)
{
    (void)c;
    printf("bits %s %s %s %s %zu %016llx %s\n", comm, call, dt_dtype_name(t), dt_redop_name(op), count,
           (unsigned long long)fnv(result, bytes), blocking ? dt__coll_alg_name(dt__coll_last_alg) : "-");
}

static void one_count(dt_comm *c, const char *comm, size_t count)
{
    static const dt_dtype types[] = {DT_F32, DT_BF16, DT_F16};
    static const dt_redop ops[] = {DT_SUM, DT_AVG, DT_MAX};
    int rank = dt_comm_rank(c), size = dt_comm_size(c);
    size_t all = count * (size_t)size;
    uint8_t *in = malloc(all * 4 + 4), *out = malloc(all * 4 + 4), *work = malloc(all * 4 + 4);
    float *fin = malloc(count * 4 + 4), *fout = malloc(count * 4 + 4);
    int salt = (int)count;
    for (int ti = 0; ti < 3; ti++) {
        dt_dtype t = types[ti];
        size_t es = dt_dtype_size(t), bytes = count * es;
        for (int oi = 0; oi < 3; oi++) {
            dt_redop op = ops[oi];
            dt_request *rq;
            salt++;
            fill(in, t, all, rank, salt);
            dt__coll_last_alg = -1;
            CALL(dt_allreduce(in, out, count, t, op, c));
            line(c, comm, "allreduce", t, op, count, out, bytes, true);
            memset(out, 0, bytes);
            CALL(dt_iallreduce(in, out, count, t, op, c, &rq));
            CALL(dt_wait(rq, NULL));
            line(c, comm, "iallreduce", t, op, count, out, bytes, false);
            for (int root = 0; root < size; root += size - 1 > 0 ? size - 1 : 1) {
                char name[32];
                snprintf(name, sizeof name, "reduce-root%d", root);
                dt__coll_last_alg = -1;
                memset(out, 0, bytes);
                CALL(dt_reduce(in, out, count, t, op, root, c));
                if (rank == root)
                    line(c, comm, name, t, op, count, out, bytes, true);
            }
            dt__coll_last_alg = -1;
            CALL(dt_reduce_scatter(in, out, count, t, op, c));
            line(c, comm, "reduce_scatter", t, op, count, out, bytes, true);
            memset(out, 0, bytes);
            CALL(dt_ireduce_scatter(in, out, count, t, op, c, &rq));
            CALL(dt_wait(rq, NULL));
            line(c, comm, "ireduce_scatter", t, op, count, out, bytes, false);
            memcpy(work, in, all * es);
            dt__coll_last_alg = -1;
            CALL(dt_reduce_scatter(work, work, count, t, op, c));
            line(c, comm, "reduce_scatter-in-place", t, op, count, work, bytes, true);
            if (t == DT_F32 || op == DT_MAX)
                continue;
            fill(fin, DT_F32, count, rank, salt);
            dt__coll_last_alg = -1;
            CALL(dt_allreduce_half(fin, fout, count, t, op, c));
            line(c, comm, "allreduce_half", t, op, count, fout, count * 4, true);
            memset(fout, 0, count * 4);
            CALL(dt_iallreduce_half(fin, fout, count, t, op, c, &rq));
            CALL(dt_wait(rq, NULL));
            line(c, comm, "iallreduce_half", t, op, count, fout, count * 4, false);
        }
    }
    free(in);
    free(out);
    free(work);
    free(fin);
    free(fout);
}

int main(int argc, char **argv)
{
    size_t counts[32] = {1, 7, 171, 388, 1000, 5000, 20000};
    int ncounts = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--counts") && i + 1 < argc) {
            ncounts = 0;
            for (char *p = argv[++i]; *p && ncounts < 32;) {
                counts[ncounts++] = (size_t)strtoull(p, &p, 10);
                if (*p == ',')
                    p++;
            }
        } else {
            fprintf(stderr, "usage: coll_bits [--counts N,N,...]\n");
            return 2;
        }
    }
    dt_comm *world;
    if (dt_comm_init_env(&world) != DT_OK) {
        fprintf(stderr, "coll_bits: init: %s\n", dt_last_error());
        return 1;
    }
    int rank = dt_comm_rank(world), size = dt_comm_size(world);
    for (int i = 0; i < ncounts; i++)
        one_count(world, "world", counts[i]);
    /* A split without the last rank keeps the world's thresholds. */
    dt_comm *sub = NULL;
    CALL(dt_comm_split(world, size > 3 && rank == size - 1 ? DT_UNDEFINED : 0, rank, &sub));
    if (sub) {
        for (int i = 0; i < ncounts; i++)
            one_count(sub, "split", counts[i]);
        CALL(dt_comm_destroy(sub));
    }
    fflush(stdout);
    int bad = failures, total = 0;
    CALL(dt_allreduce(&bad, &total, 1, DT_I32, DT_SUM, world));
    CALL(dt_comm_destroy(world));
    return failures || total ? 1 : 0;
}
