/* Multi-process collective checker, run under dtrun (tests/run_tests.sh) or
 * one dtrun node per network namespace.  Every op x dtype x redop x count x
 * in-place is compared bit for bit with a reference computed locally from
 * every rank's (deterministic) input.  Inputs are small integers, exact in
 * every dtype, so the reference does not depend on reduction order.
 *
 * With --device emu|cuda every buffer of every call is a device copy
 * (coll_device.h): the staging of device buffers gives the same bits.
 * With --attach native|nccl the world gets a communicator of that backend
 * for its device buffers (dt_comm_attach_device) before anything else: every
 * call with a device buffer runs there, and the splits carry theirs.
 *
 * usage: coll_check [--quick] [--big N] [--hashes] [--device emu|cuda] [--attach native|nccl]
 * (exit 0 when everything matched) */
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/redop.h"
#include "dtrain/dtrain.h"
#include "coll_device.h"
#include "comm/ipc.h"

static dt_comm *world;
static int failures, checks;
static size_t big_count = 512 * 1024;

static void set_elem(void *buf, dt_dtype t, size_t i, double v)
{
    switch (t) {
    case DT_F32: ((float *)buf)[i] = (float)v; break;
    case DT_F64: ((double *)buf)[i] = v; break;
    case DT_F16: ((uint16_t *)buf)[i] = dt_f32_to_f16((float)v); break;
    case DT_BF16: ((uint16_t *)buf)[i] = dt_f32_to_bf16((float)v); break;
    case DT_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case DT_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case DT_U8: ((uint8_t *)buf)[i] = (uint8_t)(int)v; break;
    default: break;
    }
}

static double get_elem(const void *buf, dt_dtype t, size_t i)
{
    switch (t) {
    case DT_F32: return ((const float *)buf)[i];
    case DT_F64: return ((const double *)buf)[i];
    case DT_F16: return dt_f16_to_f32(((const uint16_t *)buf)[i]);
    case DT_BF16: return dt_bf16_to_f32(((const uint16_t *)buf)[i]);
    case DT_I32: return ((const int32_t *)buf)[i];
    case DT_I64: return (double)((const int64_t *)buf)[i];
    case DT_U8: return ((const uint8_t *)buf)[i];
    default: return 0;
    }
}

/* Input of `rank` for element i of a buffer used with `op`. */
static double input(int rank, size_t i, dt_redop op, dt_dtype t, int salt)
{
    long k = (long)((size_t)rank * 7 + i * 3 + (size_t)salt * 5);
    double v;
    if (op == DT_PROD)
        v = (k % 3 == 0) ? 2 : (k % 5 == 1 ? -1 : 1);
    else if (op == DT_MIN || op == DT_MAX)
        v = (double)((rank * 13 + (long)i * 7 + salt) % 17) - 8;
    else
        v = (double)(k % 5) - 2;
    if (t == DT_U8 && v < 0)
        v = -v;
    return v;
}

/* input() repeats every PERIOD elements (lcm of its moduli 3, 5 and 17), so
 * buffers and references are computed for one period and then tiled. */
#define PERIOD 255

static void tile(void *buf, dt_dtype t, size_t n)
{
    size_t es = dt_dtype_size(t), have = PERIOD;
    while (have < n) {
        size_t take = have < n - have ? have : n - have;
        memcpy((char *)buf + have * es, buf, take * es);
        have += take;
    }
}

/* Elements [base, base+n) of rank's input, into buf[0..n). */
static void fill_at(void *buf, dt_dtype t, size_t n, size_t base, int rank, dt_redop op, int salt)
{
    for (size_t i = 0; i < n && i < PERIOD; i++)
        set_elem(buf, t, i, input(rank, base + i, op, t, salt));
    tile(buf, t, n);
}

static void fill(void *buf, dt_dtype t, size_t n, int rank, dt_redop op, int salt)
{
    fill_at(buf, t, n, 0, rank, op, salt);
}

/* Reference reduction over every rank of input elements [base, base+n). */
static void reference(void *out, dt_dtype t, size_t n, size_t base, dt_redop op, int size, int salt)
{
    size_t es = dt_dtype_size(t);
    size_t m = n < PERIOD ? n : PERIOD;
    void *tmp = malloc(m * es + 1);
    fill_at(out, t, m, base, 0, op, salt);
    for (int r = 1; r < size; r++) {
        fill_at(tmp, t, m, base, r, op, salt);
        dt__reduce(out, out, tmp, m, t, op);
    }
    dt__reduce_finish(out, n < PERIOD ? n : PERIOD, t, op, size);
    tile(out, t, n);
    free(tmp);
}

static void compare(const char *what, const void *got, const void *want, size_t n, dt_dtype t, dt_comm *c)
{
    checks++;
    size_t es = dt_dtype_size(t);
    if (!n || memcmp(got, want, n * es) == 0)
        return;
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)got + i * es, (const char *)want + i * es, es) != 0) {
            fprintf(stderr, "MISMATCH rank %d/%d %s: element %zu of %zu is %g, expected %g\n", dt_comm_rank(c),
                    dt_comm_size(c), what, i, n, get_elem(got, t, i), get_elem(want, t, i));
            break;
        }
    failures++;
}

#define CALL(expr)                                                                                \
    do {                                                                                          \
        dt_status s_ = (expr);                                                                    \
        if (s_ != DT_OK) {                                                                        \
            fprintf(stderr, "rank %d: %s failed: %s: %s\n", dt_comm_rank(world), #expr,           \
                    dt_status_name(s_), dt_last_error());                                         \
            exit(3);                                                                              \
        }                                                                                         \
    } while (0)

static void check_reducing(dt_comm *c, dt_dtype t, dt_redop op, size_t n, int inplace, int salt)
{
    int rank = dt_comm_rank(c), size = dt_comm_size(c);
    size_t es = dt_dtype_size(t), total = n * (size_t)size;
    char what[160];
    uint8_t *send = malloc(total * es + 1), *recv = malloc(total * es + 1), *want = malloc(total * es + 1);
    /* allreduce */
    fill(send, t, n, rank, op, salt);
    reference(want, t, n, 0, op, size, salt);
    if (inplace) {
        memcpy(recv, send, n * es);
        CALL(dt_allreduce(recv, recv, n, t, op, c));
    } else {
        CALL(dt_allreduce(send, recv, n, t, op, c));
    }
    snprintf(what, sizeof what, "allreduce %s %s count %zu%s", dt_dtype_name(t), dt_redop_name(op), n,
             inplace ? " in place" : "");
    compare(what, recv, want, n, t, c);
    /* reduce to a rotating root */
    int root = (int)((n + (size_t)salt) % (size_t)size);
    memset(recv, 0xee, n * es);
    if (inplace && rank == root) {
        memcpy(recv, send, n * es);
        CALL(dt_reduce(recv, recv, n, t, op, root, c));
    } else {
        CALL(dt_reduce(send, recv, n, t, op, root, c));
    }
    snprintf(what, sizeof what, "reduce root %d %s %s count %zu%s", root, dt_dtype_name(t), dt_redop_name(op), n,
             inplace ? " in place" : "");
    if (rank == root)
        compare(what, recv, want, n, t, c);
    /* reduce_scatter: rank r gets block r of a size*n reduction */
    fill(send, t, total, rank, op, salt + 1);
    reference(want, t, n, (size_t)rank * n, op, size, salt + 1);
    if (inplace) {
        memcpy(recv, send, total * es);
        CALL(dt_reduce_scatter(recv, recv, n, t, op, c));
    } else {
        CALL(dt_reduce_scatter(send, recv, n, t, op, c));
    }
    snprintf(what, sizeof what, "reduce_scatter %s %s recvcount %zu%s", dt_dtype_name(t), dt_redop_name(op), n,
             inplace ? " in place" : "");
    compare(what, recv, want, n, t, c);
    free(send);
    free(recv);
    free(want);
}

static void check_moving(dt_comm *c, dt_dtype t, size_t n, int inplace, int salt)
{
    int rank = dt_comm_rank(c), size = dt_comm_size(c);
    size_t es = dt_dtype_size(t), total = n * (size_t)size;
    char what[160];
    const char *ip = inplace ? " in place" : "";
    uint8_t *send = malloc(total * es + 1), *recv = malloc(total * es + 1), *want = malloc(total * es + 1);
    int root = (int)((n + (size_t)salt) % (size_t)size);
    /* broadcast */
    fill(recv, t, n, rank == root ? root : rank + 100, DT_SUM, salt);
    fill(want, t, n, root, DT_SUM, salt);
    CALL(dt_broadcast(recv, n, t, root, c));
    snprintf(what, sizeof what, "broadcast root %d %s count %zu", root, dt_dtype_name(t), n);
    compare(what, recv, want, n, t, c);
    /* allgather: block r from rank r */
    for (int r = 0; r < size; r++)
        fill(want + (size_t)r * n * es, t, n, r, DT_MIN, salt);
    fill(send, t, n, rank, DT_MIN, salt);
    memset(recv, 0xee, total * es);
    if (inplace) {
        memcpy(recv + (size_t)rank * n * es, send, n * es);
        CALL(dt_allgather(recv, recv, n, t, c));
    } else {
        CALL(dt_allgather(send, recv, n, t, c));
    }
    snprintf(what, sizeof what, "allgather %s sendcount %zu%s", dt_dtype_name(t), n, ip);
    compare(what, recv, want, total, t, c);
    /* gather */
    memset(recv, 0xee, total * es);
    if (inplace && rank == root) {
        memcpy(recv + (size_t)rank * n * es, send, n * es);
        CALL(dt_gather(recv, recv, n, t, root, c));
    } else {
        CALL(dt_gather(send, recv, n, t, root, c));
    }
    snprintf(what, sizeof what, "gather root %d %s sendcount %zu%s", root, dt_dtype_name(t), n, ip);
    if (rank == root)
        compare(what, recv, want, total, t, c);
    /* scatter: root's block r goes to rank r */
    if (rank == root)
        memcpy(send, want, total * es);
    memset(recv, 0xee, total * es);
    if (inplace && rank == root) {
        CALL(dt_scatter(send, send, n, t, root, c));
        memcpy(recv, send + (size_t)root * n * es, n * es);
    } else {
        CALL(dt_scatter(send, recv, n, t, root, c));
    }
    snprintf(what, sizeof what, "scatter root %d %s recvcount %zu%s", root, dt_dtype_name(t), n, ip);
    compare(what, recv, want + (size_t)rank * n * es, n, t, c);
    /* alltoall: block j of rank r is input(r*size+j); rank r receives block r of each j */
    for (int j = 0; j < size; j++) {
        fill(send + (size_t)j * n * es, t, n, rank * size + j, DT_MAX, salt);
        fill(want + (size_t)j * n * es, t, n, j * size + rank, DT_MAX, salt);
    }
    if (inplace) {
        memcpy(recv, send, total * es);
        CALL(dt_alltoall(recv, recv, n, t, c));
    } else {
        CALL(dt_alltoall(send, recv, n, t, c));
    }
    snprintf(what, sizeof what, "alltoall %s count %zu%s", dt_dtype_name(t), n, ip);
    compare(what, recv, want, total, t, c);
    free(send);
    free(recv);
    free(want);
}

/* Ring shift with blocking and nonblocking p2p, several tags in flight. */
/* dt_waitany: rank 0 waits for one message from every other rank, each
 * index reported once, with its data; then nothing left gives -1, and a
 * nonblocking collective is refused. */
static void check_waitany(dt_comm *c, size_t n)
{
    int rank = dt_comm_rank(c), size = dt_comm_size(c);
    float *a = malloc(n * 4 + 4);
    fill(a, DT_F32, n, rank, DT_SUM, 3);
    if (rank == 0) {
        float *got = malloc((size_t)size * (n * 4 + 4)), *want = malloc(n * 4 + 4);
        dt_request *rq[64] = {0};
        int seen[64] = {0}, idx = 0;
        for (int p = 1; p < size && p < 64; p++)
            CALL(dt_irecv(got + (size_t)p * (n + 1), n, DT_F32, p, 8, c, &rq[p]));
        for (int k = 1; k < size && k < 64; k++) {
            size_t count = 0;
            CALL(dt_waitany(rq, size < 64 ? size : 64, &idx, &count));
            if (idx < 1 || idx >= size || seen[idx]++ || rq[idx] || count != n) {
                fprintf(stderr, "MISMATCH rank 0: waitany gave index %d (count %zu) twice or out of range\n", idx, count);
                failures++;
                break;
            }
            fill(want, DT_F32, n, idx, DT_SUM, 3);
            compare("waitany's message", got + (size_t)idx * (n + 1), want, n, DT_F32, c);
        }
        CALL(dt_waitany(rq, size < 64 ? size : 64, &idx, NULL));
        if (idx != -1) {
            fprintf(stderr, "MISMATCH rank 0: waitany with nothing pending gave index %d, not -1\n", idx);
            failures++;
        }
        free(got);
        free(want);
    } else
        CALL(dt_send(a, n, DT_F32, 0, 8, c));
    /* a receive nobody answers is withdrawn; a send is not */
    dt_request *never = NULL;
    CALL(dt_irecv(a, n, DT_F32, (rank + 1) % size, 10, c, &never));
    CALL(dt_cancel(never));
    dt_request *coll = NULL;
    float x = 1;
    int idx = 0;
    CALL(dt_iallreduce(&x, &x, 1, DT_F32, DT_SUM, c, &coll));
    if (dt_waitany(&coll, 1, &idx, NULL) != DT_ERR_INVALID || !strstr(dt_last_error(), "collective")) {
        fprintf(stderr, "MISMATCH rank %d: waitany accepted a nonblocking collective\n", rank);
        failures++;
    }
    CALL(dt_wait(coll, NULL));
    free(a);
}

static void check_p2p(dt_comm *c, size_t n)
{
    int rank = dt_comm_rank(c), size = dt_comm_size(c);
    int right = (rank + 1) % size, left = (rank - 1 + size) % size;
    float *a = malloc(n * 4 + 4), *b = malloc(n * 4 + 4), *want = malloc(n * 4 + 4);
    dt_request *rq[4];
    fill(a, DT_F32, n, rank, DT_SUM, 1);
    fill(want, DT_F32, n, left, DT_SUM, 1);
    CALL(dt_irecv(b, n, DT_F32, left, 7, c, &rq[0]));
    CALL(dt_isend(a, n, DT_F32, right, 7, c, &rq[1]));
    int done = 0;
    while (!done)
        CALL(dt_test(rq[1], &done, NULL));
    size_t got = 0;
    CALL(dt_wait(rq[0], &got));
    compare("isend/irecv ring shift", b, want, n, DT_F32, c);
    if (got != n) {
        fprintf(stderr, "MISMATCH rank %d: irecv reported %zu elements, expected %zu\n", rank, got, n);
        failures++;
    }
    /* blocking, ordered by parity to avoid a cycle of blocking sends */
    if (size > 1) {
        if (rank % 2 == 0) {
            CALL(dt_send(a, n, DT_F32, right, 3, c));
            CALL(dt_recv(b, n, DT_F32, left, 3, c, NULL));
        } else {
            CALL(dt_recv(b, n, DT_F32, left, 3, c, NULL));
            CALL(dt_send(a, n, DT_F32, right, 3, c));
        }
        compare("send/recv ring shift", b, want, n, DT_F32, c);
        /* A cycle of blocking sends still completes: a message whose
         * receive is not posted is buffered (over shared memory, after a
         * few milliseconds in the sender's memory). */
        memset(b, 0, n * 4);
        CALL(dt_send(a, n, DT_F32, right, 4, c));
        CALL(dt_recv(b, n, DT_F32, left, 4, c, NULL));
        compare("cycle of blocking sends", b, want, n, DT_F32, c);
        /* Received in the other order than sent: the first message waits
         * (unexpected) while the second is taken. */
        float *b2 = malloc(n * 4 + 4);
        memset(b, 0, n * 4);
        CALL(dt_isend(a, n, DT_F32, right, 5, c, &rq[0]));
        CALL(dt_isend(a, n, DT_F32, right, 6, c, &rq[1]));
        CALL(dt_irecv(b2, n, DT_F32, left, 6, c, &rq[2]));
        CALL(dt_wait(rq[2], NULL));
        CALL(dt_recv(b, n, DT_F32, left, 5, c, NULL));
        CALL(dt_wait(rq[0], NULL));
        CALL(dt_wait(rq[1], NULL));
        compare("received out of order, first", b, want, n, DT_F32, c);
        compare("received out of order, second", b2, want, n, DT_F32, c);
        free(b2);
        check_waitany(c, n);
    }
    free(a);
    free(b);
    free(want);
}

static uint64_t fnv(const void *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
    return h;
}

static int print_hashes; /* --hashes: rank 0 prints the bits' hashes (compared across runs) */

/* Inexact float data: every rank must still get the same bits, every time. */
static void check_determinism(dt_comm *c, size_t n)
{
    int rank = dt_comm_rank(c), size = dt_comm_size(c);
    float *x = malloc(n * 4 + 4), *y = malloc(n * 4 + 4);
    uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
    for (size_t i = 0; i < n; i++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        x[i] = (float)((double)(seed % 2000003) / 1000.0 - 1000.0) * 1.000123f;
    }
    uint64_t h[4];
    CALL(dt_allreduce(x, y, n, DT_F32, DT_SUM, c));
    h[0] = fnv(y, n * 4);
    CALL(dt_allreduce(x, y, n, DT_F32, DT_AVG, c));
    h[1] = fnv(y, n * 4);
    CALL(dt_allreduce_half(x, y, n, DT_F16, DT_SUM, c));
    h[2] = fnv(y, n * 4);
    CALL(dt_allreduce_half(x, y, n, DT_BF16, DT_AVG, c));
    h[3] = fnv(y, n * 4);
    uint64_t *all = malloc((size_t)size * sizeof h);
    CALL(dt_allgather(h, all, 4, DT_I64, c));
    if (print_hashes && rank == 0) {
        printf("hash count %zu: sum %016llx avg %016llx\n", n, (unsigned long long)h[0], (unsigned long long)h[1]);
        printf("hash half count %zu: f16 sum %016llx bf16 avg %016llx\n", n, (unsigned long long)h[2],
               (unsigned long long)h[3]);
    }
    for (int r = 0; r < size; r++)
        if (memcmp(all + 4 * r, h, sizeof h) != 0) {
            fprintf(stderr, "MISMATCH rank %d: allreduce of inexact f32 (count %zu) differs from rank %d's bits\n",
                    rank, n, r);
            failures++;
            break;
        }
    checks++;
    free(all);
    free(x);
    free(y);
}

/* Nonblocking collectives: several in flight at once (allreduce, half-wire
 * allreduce, broadcast, allgather, reduce_scatter) while the caller keeps
 * working, each result equal to the blocking call's; then a blocking call and
 * p2p after them (they wait for the queue). */
static void check_nonblocking(dt_comm *c, size_t n)
{
    int rank = dt_comm_rank(c), size = dt_comm_size(c);
    float *x = malloc(n * 4 + 4), *a = malloc(n * 4 + 4), *a_ref = malloc(n * 4 + 4);
    float *h = malloc(n * 4 + 4), *h_ref = malloc(n * 4 + 4), *hb = malloc(n * 4 + 4), *hb_ref = malloc(n * 4 + 4);
    float *bc = malloc(n * 4 + 4), *ag = malloc((size_t)size * n * 4 + 4), *rs = malloc(n * 4 + 4);
    float *ag_ref = malloc((size_t)size * n * 4 + 4), *rs_in = malloc((size_t)size * n * 4 + 4);
    float *rs_ref = malloc(n * 4 + 4);
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)((int)((i * 7 + (size_t)rank * 13) % 1001) - 500) / 64.0f; /* exact in f16 and bf16 sums */
        bc[i] = rank == 0 ? x[i] : -1.0f;
    }
    for (size_t i = 0; i < (size_t)size * n; i++)
        rs_in[i] = (float)((i + (size_t)rank) % 17);
    CALL(dt_allreduce(x, a_ref, n, DT_F32, DT_AVG, c));
    CALL(dt_allreduce_half(x, h_ref, n, DT_F16, DT_SUM, c));
    CALL(dt_allreduce_half(x, hb_ref, n, DT_BF16, DT_AVG, c));
    CALL(dt_allgather(x, ag_ref, n, DT_F32, c));
    CALL(dt_reduce_scatter(rs_in, rs_ref, n, DT_F32, DT_SUM, c));
    dt_request *r[5];
    CALL(dt_iallreduce(x, a, n, DT_F32, DT_AVG, c, &r[0]));
    CALL(dt_iallreduce_half(x, h, n, DT_F16, DT_SUM, c, &r[1]));
    CALL(dt_ibroadcast(bc, n, DT_F32, 0, c, &r[2]));
    CALL(dt_iallgather(x, ag, n, DT_F32, c, &r[3]));
    CALL(dt_ireduce_scatter(rs_in, rs, n, DT_F32, DT_SUM, c, &r[4]));
    volatile double busy = 0; /* the caller computes meanwhile */
    for (int i = 0; i < 100000; i++)
        busy += i * 0.5;
    int done = 0;
    CALL(dt_test(r[0], &done, NULL));
    if (!done)
        CALL(dt_wait(r[0], NULL));
    for (int i = 1; i < 5; i++)
        CALL(dt_wait(r[i], NULL));
    dt_request *rb;
    CALL(dt_iallreduce_half(x, hb, n, DT_BF16, DT_AVG, c, &rb));
    CALL(dt_barrier(c)); /* waits for rb's collective first */
    CALL(dt_wait(rb, NULL));
    compare("iallreduce", a, a_ref, n, DT_F32, c);
    compare("iallreduce_half f16", h, h_ref, n, DT_F32, c);
    compare("iallreduce_half bf16", hb, hb_ref, n, DT_F32, c);
    compare("ibroadcast", bc, x, rank == 0 ? n : 0, DT_F32, c);
    compare("iallgather", ag, ag_ref, (size_t)size * n, DT_F32, c);
    compare("ireduce_scatter", rs, rs_ref, n, DT_F32, c);
    /* the half-wire sum of values whose sums stay exact in f16 (11 bits, so up
     * to 4 ranks here) equals the f32 sum */
    for (size_t i = 0; i < n; i++)
        a_ref[i] *= (float)size;
    if (size <= 4)
        compare("allreduce_half f16 vs f32", h_ref, a_ref, n, DT_F32, c);
    if (rank != 0) { /* broadcast result checked against rank 0's input, rebuilt here */
        for (size_t i = 0; i < n; i++)
            x[i] = (float)((int)((i * 7) % 1001) - 500) / 64.0f;
        compare("ibroadcast", bc, x, n, DT_F32, c);
    }
    dt_request *bad;
    CALL(dt_iallreduce_half(x, h, n, DT_F32, DT_SUM, c, &bad));
    if (dt_wait(bad, NULL) != DT_ERR_INVALID || !strstr(dt_last_error(), "f16 or bf16")) {
        fprintf(stderr, "MISMATCH rank %d: a bad wire format was not reported at dt_wait (%s)\n", rank,
                dt_last_error());
        failures++;
    }
    checks++;
    /* a message above the frame's limit (2^40 bytes) or whose byte count
     * overflows is refused before any byte is read */
    size_t too_many[] = {((size_t)1 << 38) + 1, SIZE_MAX / 2};
    for (int i = 0; i < 2 && size > 1; i++, checks++) {
        if (dt_send(x, too_many[i], DT_F32, (rank + 1) % size, 3, c) != DT_ERR_INVALID ||
            !strstr(dt_last_error(), "one message carries at most")) {
            fprintf(stderr, "MISMATCH rank %d: a send of %zu floats was not refused (%s)\n", rank, too_many[i],
                    dt_last_error());
            failures++;
        }
    }
    free(x), free(a), free(a_ref), free(h), free(h_ref), free(hb), free(hb_ref), free(bc), free(ag), free(rs);
    free(ag_ref), free(rs_in), free(rs_ref);
}

/* Byte j of broadcast i from `root` in check_broadcast_stream. */
static uint8_t stream_byte(int i, size_t j, int root) { return (uint8_t)(i * 31 + (int)j * 7 + root * 101); }

/* Broadcasts back to back from rotating roots, some nonblocking and several
 * outstanding, one rank now and then late: on one host the root may run up to
 * 64 rounds ahead of its readers (the arena's ring of small entries), and no
 * round may be overwritten before every rank has read it.  Sizes cross the
 * ring's entry size (4 KiB) so both paths take turns. */
static void check_broadcast_stream(dt_comm *c)
{
    int rank = dt_comm_rank(c), size = dt_comm_size(c);
    enum { ROUNDS = 600, MAX_BYTES = 6000, BATCH = 5 };
    uint8_t *buf = malloc((size_t)BATCH * MAX_BYTES);
    for (int i = 0; i < ROUNDS;) {
        int batch = i % 7 == 3 ? BATCH : 1; /* nonblocking, several outstanding */
        dt_request *req[BATCH];
        size_t bytes[BATCH];
        int roots[BATCH];
        if (rank == size - 1 && i % 64 < batch)
            usleep(2000);
        for (int b = 0; b < batch; b++) {
            int r = i + b;
            bytes[b] = r % 50 == 49 ? (size_t)3096 + (size_t)(r % 3) * 1000 : (size_t)(r * 37 % 300) + 1;
            roots[b] = (r / 100) % size; /* long runs of one root: room to run ahead */
            uint8_t *p = buf + (size_t)b * MAX_BYTES;
            for (size_t j = 0; j < bytes[b]; j++)
                p[j] = rank == roots[b] ? stream_byte(r, j, roots[b]) : 0xEE;
            if (batch == 1)
                CALL(dt_broadcast(p, bytes[b], DT_U8, roots[b], c));
            else
                CALL(dt_ibroadcast(p, bytes[b], DT_U8, roots[b], c, &req[b]));
        }
        for (int b = 0; b < batch; b++) {
            if (batch > 1)
                CALL(dt_wait(req[b], NULL));
            const uint8_t *p = buf + (size_t)b * MAX_BYTES;
            checks++;
            for (size_t j = 0; j < bytes[b]; j++)
                if (p[j] != stream_byte(i + b, j, roots[b])) {
                    fprintf(stderr, "MISMATCH rank %d: broadcast %d of %zu bytes from %d, byte %zu: %u, expected %u\n",
                            rank, i + b, bytes[b], roots[b], j, p[j], stream_byte(i + b, j, roots[b]));
                    failures++;
                    break;
                }
        }
        i += batch;
        if (i % 150 < batch) { /* another collective between the broadcasts */
            int32_t one = 1, total = 0;
            CALL(dt_allreduce(&one, &total, 1, DT_I32, DT_SUM, c));
            checks++;
            if (total != size) {
                fprintf(stderr, "MISMATCH rank %d: allreduce between broadcasts gave %d\n", rank, (int)total);
                failures++;
            }
        }
    }
    free(buf);
}

/* ---- issue 29: NaN bits, overflowing counts, NULL arguments, dtype
 * disagreement in p2p ---- */

/* The one NaN every float reduction returns (src/base/redop.c). */
static void put_canonical_nan(void *buf, dt_dtype t, size_t i)
{
    switch (t) {
    case DT_F32: { uint32_t v = 0x7fc00000u; memcpy((uint32_t *)buf + i, &v, 4); break; }
    case DT_F64: { uint64_t v = 0x7ff8000000000000ull; memcpy((uint64_t *)buf + i, &v, 8); break; }
    case DT_F16: ((uint16_t *)buf)[i] = 0x7e00u; break;
    case DT_BF16: ((uint16_t *)buf)[i] = 0x7fc0u; break;
    default: break;
    }
}

/* Element i of rank r: +NaN, -NaN (payloads that differ by rank) or 1.5, so
 * that with 2 or more ranks every element meets NaNs, of both signs from 3
 * ranks on; or (inf) +inf on even ranks and -inf on odd ones, whose sum is
 * the hardware's -NaN. */
static void put_nan_input(void *buf, dt_dtype t, size_t i, int r, int inf)
{
    int k = (int)((i + (size_t)r) % 3);
    double v = inf ? (r % 2 ? -INFINITY : INFINITY) : k == 2 ? 1.5 : 0;
    if (inf || k == 2) {
        set_elem(buf, t, i, v);
        return;
    }
    uint64_t sign = k == 1;
    switch (t) {
    case DT_F32: { uint32_t b = (uint32_t)(sign << 31) | 0x7fc00000u | (uint32_t)(r + 1); memcpy((uint32_t *)buf + i, &b, 4); break; }
    case DT_F64: { uint64_t b = sign << 63 | 0x7ff8000000000000ull | (uint64_t)(r + 1); memcpy((uint64_t *)buf + i, &b, 8); break; }
    case DT_F16: ((uint16_t *)buf)[i] = (uint16_t)(sign << 15 | 0x7e00u | (uint64_t)(r + 1)); break;
    case DT_BF16: ((uint16_t *)buf)[i] = (uint16_t)(sign << 15 | 0x7fc0u | (uint64_t)(r + 1)); break;
    default: break;
    }
}

static void compare_bits(const char *what, const void *got, const void *want, size_t n, dt_dtype t,
                         size_t count, dt_redop op, dt_comm *c)
{
    checks++;
    size_t es = dt_dtype_size(t);
    for (size_t i = 0; i < n; i++) {
        uint64_t g = 0, w = 0;
        memcpy(&g, (const char *)got + i * es, es);
        memcpy(&w, (const char *)want + i * es, es);
        if (g != w) {
            fprintf(stderr, "MISMATCH rank %d/%d %s %s %s count %zu: element %zu has bits %0*llx, expected %0*llx\n",
                    dt_comm_rank(c), dt_comm_size(c), what, dt_dtype_name(t), dt_redop_name(op), count, i,
                    (int)es * 2, (unsigned long long)g, (int)es * 2, (unsigned long long)w);
            failures++;
            return;
        }
    }
}

/* What a one-rank reduction of put_nan_input's element i returns: the
 * canonical NaN for a NaN, the value itself otherwise (issue 43: it used to
 * return the NaN unchanged, sign and payload). */
static void put_one_rank_result(void *buf, dt_dtype t, size_t i, int inf)
{
    put_nan_input(buf, t, i, 0, inf);
    if (get_elem(buf, t, i) != get_elem(buf, t, i))
        put_canonical_nan(buf, t, i);
}

/* NaN results are one fixed NaN on every rank, for every count, op and
 * algorithm (the run under each DT_ALGO): allreduce, reduce and
 * reduce_scatter, f16/bf16/f32/f64.  With one rank (a world of one, a
 * one-rank split) nothing is combined, and a NaN input still comes back as
 * that NaN. */
static void check_nan(dt_comm *c)
{
    int rank = dt_comm_rank(c), size = dt_comm_size(c);
    static const size_t counts[] = {1, 2, 7, 27};
    static const dt_dtype types[] = {DT_F16, DT_BF16, DT_F32, DT_F64};
    size_t most = 27 * (size_t)size;
    double *in = malloc(most * 8), *out = malloc(most * 8), *want = malloc(most * 8);
    for (int ti = 0; ti < 4; ti++) {
        dt_dtype t = types[ti];
        for (int ci = 0; ci < 4; ci++) {
            size_t n = counts[ci];
            for (int op = 0; op < DT_REDOP_COUNT; op++) {
                for (int inf = 0; inf < 2; inf++) {
                    if (inf && op != DT_SUM && op != DT_AVG)
                        continue; /* inf - inf is NaN only in a sum */
                    for (size_t i = 0; i < most; i++) {
                        if (size == 1)
                            put_one_rank_result(want, t, i, inf);
                        else
                            put_canonical_nan(want, t, i);
                    }
                    for (size_t i = 0; i < most; i++)
                        put_nan_input(in, t, i, rank, inf);
                    CALL(dt_allreduce(in, out, n, t, (dt_redop)op, c));
                    compare_bits(inf ? "allreduce inf-inf" : "allreduce NaN", out, want, n, t, n, op, c);
                    CALL(dt_allreduce(in, in, n, t, (dt_redop)op, c));
                    compare_bits(inf ? "allreduce in place inf-inf" : "allreduce in place NaN", in, want, n, t,
                                 n, op, c);
                    for (size_t i = 0; i < most; i++)
                        put_nan_input(in, t, i, rank, inf);
                    CALL(dt_reduce(in, out, n, t, (dt_redop)op, size - 1, c));
                    if (rank == size - 1)
                        compare_bits(inf ? "reduce inf-inf" : "reduce NaN", out, want, n, t, n, op, c);
                    CALL(dt_reduce_scatter(in, out, n, t, (dt_redop)op, c));
                    compare_bits(inf ? "reduce_scatter inf-inf" : "reduce_scatter NaN", out, want, n, t, n, op, c);
                }
            }
        }
    }
    /* The f16/bf16-wire allreduce sums in f32: the same NaN, widened (with
     * one rank the other values rounded to the wire once). */
    float *f = (float *)in, *g = (float *)out;
    for (int wi = 0; wi < 2; wi++)
        for (int ci = 0; ci < 4; ci++) {
            size_t n = counts[ci];
            for (size_t i = 0; i < n; i++)
                put_nan_input(f, DT_F32, i, rank, 0);
            CALL(dt_allreduce_half(f, g, n, wi ? DT_BF16 : DT_F16, DT_SUM, c));
            for (size_t i = 0; i < n; i++) {
                if (size == 1)
                    put_one_rank_result(want, DT_F32, i, 0); /* 1.5 is exact on either wire */
                else
                    put_canonical_nan(want, DT_F32, i);
            }
            compare_bits(wi ? "allreduce_half bf16 NaN" : "allreduce_half f16 NaN", g, want, n, DT_F32, n, DT_SUM, c);
        }
    free(in);
    free(out);
    free(want);
}

/* A refused call: `want`, and a message containing every word of `words`
 * (separated by '|'). */
static void expect_refused(const char *what, dt_status got, dt_status want, const char *words)
{
    checks++;
    const char *msg = got == DT_OK ? "" : dt_last_error();
    bool ok = got == want;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", words);
    for (char *w = strtok(buf, "|"); w && ok; w = strtok(NULL, "|"))
        ok = strstr(msg, w) != NULL;
    if (!ok) {
        fprintf(stderr, "MISMATCH rank %d: %s returned %s (%s), expected %s naming \"%s\"\n", dt_comm_rank(world),
                what, dt_status_name(got), msg, dt_status_name(want), words);
        failures++;
    }
}

/* Counts whose byte size (count x element size, x ranks where a buffer holds
 * one block per rank) overflows: refused before anything is sent, on every
 * rank, for every collective and p2p call, naming the count. */
static void check_overflow(dt_comm *c)
{
    size_t size = (size_t)dt_comm_size(c);
    const size_t counts[] = {SIZE_MAX, (size_t)1 << 61, SIZE_MAX / size + 1};
    static double a[64], b[64 * 64];
    dt_request *rq;
    for (int ci = 0; ci < 3; ci++) {
        size_t n = counts[ci];
        if (n == 0)
            continue; /* SIZE_MAX / 1 + 1 */
        char words[64];
        snprintf(words, sizeof words, "count %zu|overflows", n);
        for (int ti = 0; ti < 2; ti++) {
            dt_dtype t = ti ? DT_F64 : DT_U8;
            expect_refused("allreduce", dt_allreduce(a, b, n, t, DT_SUM, c), DT_ERR_INVALID, words);
            expect_refused("allreduce in place", dt_allreduce(a, a, n, t, DT_MAX, c), DT_ERR_INVALID, words);
            expect_refused("reduce", dt_reduce(a, b, n, t, DT_SUM, 0, c), DT_ERR_INVALID, words);
            expect_refused("broadcast", dt_broadcast(a, n, t, 0, c), DT_ERR_INVALID, words);
            expect_refused("allgather", dt_allgather(a, b, n, t, c), DT_ERR_INVALID, words);
            expect_refused("gather", dt_gather(a, b, n, t, 0, c), DT_ERR_INVALID, words);
            expect_refused("scatter", dt_scatter(b, a, n, t, 0, c), DT_ERR_INVALID, words);
            expect_refused("reduce_scatter", dt_reduce_scatter(b, a, n, t, DT_SUM, c), DT_ERR_INVALID, words);
            expect_refused("alltoall", dt_alltoall(a, b, n, t, c), DT_ERR_INVALID, words);
            expect_refused("send", dt_send(a, n, t, 0, 1, c), DT_ERR_INVALID, words);
            expect_refused("recv", dt_recv(a, n, t, 0, 1, c, NULL), DT_ERR_INVALID, words);
            expect_refused("isend", dt_isend(a, n, t, 0, 1, c, &rq), DT_ERR_INVALID, words);
            expect_refused("irecv", dt_irecv(a, n, t, 0, 1, c, &rq), DT_ERR_INVALID, words);
            /* Nonblocking collectives report argument errors at dt_wait. */
            CALL(dt_iallreduce(a, b, n, t, DT_SUM, c, &rq));
            expect_refused("iallreduce", dt_wait(rq, NULL), DT_ERR_INVALID, words);
            CALL(dt_iallgather(a, b, n, t, c, &rq));
            expect_refused("iallgather", dt_wait(rq, NULL), DT_ERR_INVALID, words);
            CALL(dt_ireduce_scatter(b, a, n, t, DT_SUM, c, &rq));
            expect_refused("ireduce_scatter", dt_wait(rq, NULL), DT_ERR_INVALID, words);
            CALL(dt_ibroadcast(a, n, t, 0, c, &rq));
            expect_refused("ibroadcast", dt_wait(rq, NULL), DT_ERR_INVALID, words);
        }
        expect_refused("allreduce_half", dt_allreduce_half((float *)a, (float *)b, n, DT_F16, DT_SUM, c),
                       DT_ERR_INVALID, words);
    }
    CALL(dt_barrier(c)); /* nothing refused was sent: the next collective matches */
}

/* NULL where a pointer is needed: DT_ERR_INVALID naming the argument, no
 * crash, nothing sent. */
static void check_null(dt_comm *c)
{
    float a[4] = {0}, b[4 * 64] = {0};
    dt_request *rq = NULL;
    const char *req = "request";
    expect_refused("isend NULL req", dt_isend(a, 1, DT_F32, 0, 1, c, NULL), DT_ERR_INVALID, req);
    expect_refused("irecv NULL req", dt_irecv(a, 1, DT_F32, 0, 1, c, NULL), DT_ERR_INVALID, req);
    expect_refused("iallreduce NULL req", dt_iallreduce(a, b, 1, DT_F32, DT_SUM, c, NULL), DT_ERR_INVALID, req);
    expect_refused("iallreduce_half NULL req", dt_iallreduce_half(a, b, 1, DT_F16, DT_SUM, c, NULL), DT_ERR_INVALID, req);
    expect_refused("ibroadcast NULL req", dt_ibroadcast(a, 1, DT_F32, 0, c, NULL), DT_ERR_INVALID, req);
    expect_refused("iallgather NULL req", dt_iallgather(a, b, 1, DT_F32, c, NULL), DT_ERR_INVALID, req);
    expect_refused("ireduce_scatter NULL req", dt_ireduce_scatter(b, a, 1, DT_F32, DT_SUM, c, NULL), DT_ERR_INVALID, req);
    expect_refused("wait NULL", dt_wait(NULL, NULL), DT_ERR_INVALID, req);
    int done;
    expect_refused("test NULL", dt_test(NULL, &done, NULL), DT_ERR_INVALID, req);
    const char *comm = "communicator is NULL";
    expect_refused("isend NULL comm", dt_isend(a, 1, DT_F32, 0, 1, NULL, &rq), DT_ERR_INVALID, comm);
    expect_refused("irecv NULL comm", dt_irecv(a, 1, DT_F32, 0, 1, NULL, &rq), DT_ERR_INVALID, comm);
    expect_refused("send NULL comm", dt_send(a, 1, DT_F32, 0, 1, NULL), DT_ERR_INVALID, comm);
    expect_refused("recv NULL comm", dt_recv(a, 1, DT_F32, 0, 1, NULL, NULL), DT_ERR_INVALID, comm);
    expect_refused("barrier NULL comm", dt_barrier(NULL), DT_ERR_INVALID, comm);
    expect_refused("broadcast NULL comm", dt_broadcast(a, 1, DT_F32, 0, NULL), DT_ERR_INVALID, comm);
    expect_refused("reduce NULL comm", dt_reduce(a, b, 1, DT_F32, DT_SUM, 0, NULL), DT_ERR_INVALID, comm);
    expect_refused("allreduce NULL comm", dt_allreduce(a, b, 1, DT_F32, DT_SUM, NULL), DT_ERR_INVALID, comm);
    expect_refused("reduce_scatter NULL comm", dt_reduce_scatter(b, a, 1, DT_F32, DT_SUM, NULL), DT_ERR_INVALID, comm);
    expect_refused("allgather NULL comm", dt_allgather(a, b, 1, DT_F32, NULL), DT_ERR_INVALID, comm);
    expect_refused("gather NULL comm", dt_gather(a, b, 1, DT_F32, 0, NULL), DT_ERR_INVALID, comm);
    expect_refused("scatter NULL comm", dt_scatter(b, a, 1, DT_F32, 0, NULL), DT_ERR_INVALID, comm);
    expect_refused("alltoall NULL comm", dt_alltoall(a, b, 1, DT_F32, NULL), DT_ERR_INVALID, comm);
    expect_refused("allreduce_half NULL comm", dt_allreduce_half(a, b, 1, DT_F16, DT_SUM, NULL), DT_ERR_INVALID, comm);
    expect_refused("iallreduce NULL comm", dt_iallreduce(a, b, 1, DT_F32, DT_SUM, NULL, &rq), DT_ERR_INVALID, comm);
    expect_refused("ibroadcast NULL comm", dt_ibroadcast(a, 1, DT_F32, 0, NULL, &rq), DT_ERR_INVALID, comm);
    expect_refused("set_tag NULL comm", dt_comm_set_tag(NULL, "x"), DT_ERR_INVALID, comm);
    expect_refused("abort NULL comm", dt_comm_abort(NULL, "x"), DT_ERR_INVALID, comm);
    expect_refused("split NULL out", dt_comm_split(c, 0, 0, NULL), DT_ERR_INVALID, "out is NULL");
    expect_refused("init_env NULL out", dt_comm_init_env(NULL), DT_ERR_INVALID, "out is NULL");
    const char *buf = "NULL";
    expect_refused("send NULL buf", dt_send(NULL, 1, DT_F32, 0, 1, c), DT_ERR_INVALID, buf);
    expect_refused("irecv NULL buf", dt_irecv(NULL, 1, DT_F32, 0, 1, c, &rq), DT_ERR_INVALID, buf);
    expect_refused("broadcast NULL buf", dt_broadcast(NULL, 1, DT_F32, 0, c), DT_ERR_INVALID, buf);
    expect_refused("allreduce NULL send", dt_allreduce(NULL, b, 1, DT_F32, DT_SUM, c), DT_ERR_INVALID, buf);
    expect_refused("allreduce NULL recv", dt_allreduce(a, NULL, 1, DT_F32, DT_SUM, c), DT_ERR_INVALID, buf);
    expect_refused("reduce_scatter NULL recv", dt_reduce_scatter(b, NULL, 1, DT_F32, DT_SUM, c), DT_ERR_INVALID, buf);
    expect_refused("allgather NULL recv", dt_allgather(a, NULL, 1, DT_F32, c), DT_ERR_INVALID, buf);
    expect_refused("alltoall NULL send", dt_alltoall(NULL, b, 1, DT_F32, c), DT_ERR_INVALID, buf);
    expect_refused("allreduce_half NULL send", dt_allreduce_half(NULL, b, 1, DT_F16, DT_SUM, c), DT_ERR_INVALID, buf);
    expect_refused("iallreduce NULL recv", dt_iallreduce(a, NULL, 1, DT_F32, DT_SUM, c, &rq), DT_ERR_INVALID, buf);
    expect_refused("iallgather NULL send", dt_iallgather(NULL, b, 1, DT_F32, c, &rq), DT_ERR_INVALID, buf);
    expect_refused("ibroadcast NULL buf", dt_ibroadcast(NULL, 1, DT_F32, 0, c, &rq), DT_ERR_INVALID, buf);
    /* dt_test with a NULL `done` on a real request, which then completes. */
    CALL(dt_isend(a, 1, DT_F32, dt_comm_rank(c), 9, c, &rq));
    expect_refused("test NULL done", dt_test(rq, NULL, NULL), DT_ERR_INVALID, "done");
    CALL(dt_recv(b, 1, DT_F32, dt_comm_rank(c), 9, c, NULL));
    CALL(dt_wait(rq, NULL));
    CALL(dt_barrier(c));
}

/* A u8 message received as f32: 5 bytes are not whole 4-byte elements; the
 * receive says so, naming both byte counts, and drops nothing silently. */
static void check_p2p_dtype(dt_comm *c)
{
    int rank = dt_comm_rank(c), size = dt_comm_size(c);
    uint8_t bytes[5] = {1, 2, 3, 4, 5};
    float f[4] = {0};
    size_t got = 99;
    if (size < 2)
        return;
    if (rank == 0)
        CALL(dt_send(bytes, 5, DT_U8, 1, 11, c));
    else if (rank == 1)
        expect_refused("u8 message received as f32", dt_recv(f, 4, DT_F32, 0, 11, c, &got), DT_ERR_TRUNCATE,
                       "5 bytes|4-byte|16 bytes");
    /* An exact multiple is fine: 8 u8 as 2 f32. */
    uint8_t eight[8] = {0};
    if (rank == 0)
        CALL(dt_send(eight, 8, DT_U8, 1, 12, c));
    else if (rank == 1) {
        CALL(dt_recv(f, 4, DT_F32, 0, 12, c, &got));
        checks++;
        if (got != 2) {
            fprintf(stderr, "MISMATCH rank 1: 8 u8 received as f32 reported %zu elements, expected 2\n", got);
            failures++;
        }
    }
    CALL(dt_barrier(c));
}

static void run_suite(dt_comm *c, const size_t *counts, int ncounts, int quick)
{
    for (int ci = 0; ci < ncounts; ci++) {
        size_t n = counts[ci];
        for (int t = 0; t < DT_DTYPE_COUNT; t++) {
            for (int inplace = 0; inplace < 2; inplace++) {
                if (quick && inplace && n > 1000)
                    continue;
                for (int op = 0; op < DT_REDOP_COUNT; op++)
                    check_reducing(c, (dt_dtype)t, (dt_redop)op, n, inplace, ci + op);
                check_moving(c, (dt_dtype)t, n, inplace, ci);
            }
        }
        check_p2p(c, n);
        CALL(dt_barrier(c));
    }
}

int main(int argc, char **argv)
{
    int quick = 0;
    const char *attach = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = 1;
        else if (!strcmp(argv[i], "--hashes"))
            print_hashes = 1;
        else if (!strcmp(argv[i], "--big") && i + 1 < argc)
            big_count = (size_t)strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--device") && i + 1 < argc) {
            if (dt_device_open(argv[++i], &dv) != DT_OK) {
                fprintf(stderr, "coll_check: %s\n", dt_last_error());
                return 2;
            }
            if (dt_device_is_host(dv))
                dv = NULL;
        } else if (!strcmp(argv[i], "--attach") && i + 1 < argc) {
            attach = argv[++i];
        } else {
            fprintf(stderr, "usage: coll_check [--quick] [--big COUNT] [--hashes] [--device emu|cuda] "
                            "[--attach native|nccl]\n");
            return 2;
        }
    }
    CALL(dt_comm_init_env(&world));
    if (attach)
        CALL(dt_comm_attach_device(world, attach));
    int rank = dt_comm_rank(world), size = dt_comm_size(world);
    size_t counts[] = {0, 1, 7, 1000, big_count};
    check_nan(world);
    check_overflow(world);
    check_null(world);
    check_p2p_dtype(world);
    run_suite(world, counts, 5, quick);
    check_determinism(world, 2);
    check_determinism(world, 200);
    check_determinism(world, 1000);
    check_determinism(world, big_count);
    check_nonblocking(world, 1000);
    check_nonblocking(world, big_count);
    check_broadcast_stream(world);

    /* Sub-communicators: odd/even halves in reverse key order, one rank opted out. */
    dt_comm *half = NULL, *quarter = NULL;
    int color = (size > 2 && rank == size - 1) ? DT_UNDEFINED : rank % 2;
    CALL(dt_comm_split(world, color, -rank, &half));
    if (color == DT_UNDEFINED) {
        if (half) {
            fprintf(stderr, "MISMATCH rank %d: DT_UNDEFINED split returned a communicator\n", rank);
            failures++;
        }
    } else {
        int expect_size = 0;
        for (int r = 0; r < size; r++)
            if (!(size > 2 && r == size - 1) && r % 2 == color)
                expect_size++;
        if (dt_comm_size(half) != expect_size) {
            fprintf(stderr, "MISMATCH rank %d: split size %d, expected %d\n", rank, dt_comm_size(half), expect_size);
            failures++;
        }
        size_t sub_counts[] = {7, 4096};
        run_suite(half, sub_counts, 2, 1);
        check_nonblocking(half, 4096);
        CALL(dt_comm_split(half, dt_comm_rank(half) % 2, 0, &quarter));
        size_t q_counts[] = {1000};
        run_suite(quarter, q_counts, 1, 1);
        CALL(dt_comm_destroy(quarter));
        CALL(dt_comm_destroy(half));
    }
    /* A split spanning hosts: every host's ranks but the last host's (on the
     * namespace cluster, 3 hosts x 2 ranks: 2 hosts x 2 ranks, which keeps
     * the hierarchical algorithms; DT_DEBUG=info says so). */
    int local = dt_comm_local_size(world);
    if (local > 1 && size >= 3 * local && size % local == 0) {
        dt_comm *hosts = NULL;
        CALL(dt_comm_split(world, rank < size - local ? 0 : 1, rank, &hosts));
        size_t h_counts[] = {7, 4096, big_count};
        run_suite(hosts, h_counts, 3, 1);
        check_nonblocking(hosts, big_count);
        CALL(dt_comm_destroy(hosts));
    }
    /* A communicator of one rank: its reductions return their input, with
     * the canonical NaN (issue 43). */
    dt_comm *alone = NULL;
    CALL(dt_comm_split(world, rank, 0, &alone));
    if (alone) {
        check_nan(alone);
        CALL(dt_comm_destroy(alone));
    }
    /* The world still works after the sub-communicators are gone. */
    check_determinism(world, 4096);

    int totals[2] = {failures, checks}, sums[2];
    CALL(dt_allreduce(totals, sums, 2, DT_I32, DT_SUM, world));
    if (rank == 0)
        printf("coll_check: world %d: %d checks, %d mismatches\n", size, sums[1], sums[0]);
    /* Which path device buffers took, where DT_DEVICE_IPC is set (stderr:
     * the host run's stdout stays comparable): the collectives run by IPC
     * and the peer buffers opened. */
    if (dv && rank == 0 && getenv("DT_DEVICE_IPC"))
        fprintf(stderr, "coll_check: rank 0: %llu collectives by device IPC, %llu peer buffers opened\n",
                (unsigned long long)dt__ipc_calls(), (unsigned long long)dt__ipc_opens());
    CALL(dt_comm_destroy(world));
    return sums[0] == 0 ? 0 : 1;
}
