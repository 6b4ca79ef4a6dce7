/* The IPC path of device buffers (src/comm/ipc.h) on the emu device, run
 * by tests/cases/coll_device.sh under DT_DEVICE_IPC=1 (or 0).
 *
 *  reuse: the same device buffers through allreduce (in and out of place,
 *    f32 sum, i32 max, bf16 avg), reduce_scatter (both), allgather (both)
 *    and broadcast, ITERS times: every result exact; with IPC on, every
 *    call taken by IPC and each peer buffer opened once (the cache), then a
 *    buffer freed and a new one allocated is opened afresh and read right,
 *    and a buffer one rank cannot export makes every rank stage that call;
 *    with DT_DEVICE_IPC=0 no call taken by IPC and the same results.
 *  mismatch: rank 0's allreduce has one element more: every rank fails
 *    naming the mismatch.
 *  dead DIR: the last rank SIGKILLs itself before an allreduce; every other
 *    rank's allreduce on device buffers fails (DT_ERR_PEER or
 *    DT_ERR_TIMEOUT) naming it; DIR/result.R holds status, message and the
 *    seconds it took.
 *
 * usage: device_ipc reuse | device_ipc mismatch | device_ipc dead DIR   (exit 0 when it behaved) */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "comm/ipc.h"
#include "dtrain/dtrain.h"
#include "tensor/backend.h"

#define N 1003 /* odd: blocks of every size */
#define ITERS 5

static int failures;
static const dt_device *dv;
static int rank, size;
static dt_comm *world;

#define CALL(x) \
    do { \
        dt_status s_ = (x); \
        if (s_ != DT_OK) { \
            fprintf(stderr, "rank %d: %s failed: %s\n", rank, #x, dt_last_error()); \
            exit(1); \
        } \
    } while (0)

static void *up(const void *h, size_t bytes)
{
    void *d = dv->alloc(bytes);
    if (!d || dt_device_upload(dv, d, h, bytes) != DT_OK) {
        fprintf(stderr, "rank %d: cannot upload: %s\n", rank, dt_last_error());
        exit(1);
    }
    return d;
}

static void expect_f32(const char *what, const void *dev, const float *want, size_t n)
{
    float *got = malloc(n * sizeof *got);
    CALL(dt_device_download(dv, got, dev, n * sizeof *got));
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof *got)) {
            fprintf(stderr, "MISMATCH rank %d: %s [%zu]: %g, expected %g\n", rank, what, i, got[i], want[i]);
            failures++;
            break;
        }
    free(got);
}

/* Integer-valued floats: every order of the sum gives the same bits. */
static float val(int r, size_t i) { return (float)((int)(i % 97) - 40 + 3 * r); }

static void round_trip(float *d_in, float *d_out, float *d_all, int iter)
{
    size_t blk = N / (size_t)size; /* reduce_scatter's and allgather's share */
    float *want = malloc((size_t)size * N * sizeof *want), *h = malloc((size_t)size * N * sizeof *h);
    /* allreduce, out of place and in place */
    for (size_t i = 0; i < N; i++) {
        h[i] = val(rank, i);
        want[i] = 0;
        for (int r = 0; r < size; r++)
            want[i] += val(r, i);
    }
    CALL(dt_device_upload(dv, d_in, h, N * sizeof *h));
    CALL(dt_allreduce(d_in, d_out, N, DT_F32, DT_SUM, world));
    expect_f32("allreduce", d_out, want, N);
    CALL(dt_allreduce(d_in, d_in, N, DT_F32, DT_SUM, world));
    expect_f32("allreduce in place", d_in, want, N);
    /* reduce_scatter of size blocks of blk */
    for (size_t i = 0; i < (size_t)size * blk; i++)
        h[i] = val(rank, i + (size_t)iter);
    for (size_t i = 0; i < blk; i++) {
        want[i] = 0;
        for (int r = 0; r < size; r++)
            want[i] += val(r, (size_t)rank * blk + i + (size_t)iter);
    }
    CALL(dt_device_upload(dv, d_all, h, (size_t)size * blk * sizeof *h));
    CALL(dt_reduce_scatter(d_all, d_out, blk, DT_F32, DT_SUM, world));
    expect_f32("reduce_scatter", d_out, want, blk);
    CALL(dt_reduce_scatter(d_all, d_all, blk, DT_F32, DT_SUM, world));
    expect_f32("reduce_scatter in place", d_all, want, blk);
    /* allgather, out of place and in place */
    for (size_t i = 0; i < blk; i++)
        h[i] = val(rank, i * 7 + (size_t)iter);
    for (int r = 0; r < size; r++)
        for (size_t i = 0; i < blk; i++)
            want[(size_t)r * blk + i] = val(r, i * 7 + (size_t)iter);
    CALL(dt_device_upload(dv, d_in, h, blk * sizeof *h));
    CALL(dt_allgather(d_in, d_all, blk, DT_F32, world));
    expect_f32("allgather", d_all, want, (size_t)size * blk);
    CALL(dt_device_upload(dv, (float *)d_out + (size_t)rank * blk, h, blk * sizeof *h));
    CALL(dt_allgather(d_out, d_out, blk, DT_F32, world));
    expect_f32("allgather in place", d_out, want, (size_t)size * blk);
    /* broadcast from every root */
    for (int root = 0; root < size; root++) {
        for (size_t i = 0; i < N; i++) {
            h[i] = val(rank, i + 11);
            want[i] = val(root, i + 11);
        }
        CALL(dt_device_upload(dv, d_in, h, N * sizeof *h));
        CALL(dt_broadcast(d_in, N, DT_F32, root, world));
        expect_f32("broadcast", d_in, want, N);
    }
    free(want);
    free(h);
}

/* Other dtypes and ops, exact: i32 max, bf16 avg of small integers. */
static void other_types(void)
{
    int32_t hi[N], wi[N], gi[N];
    uint16_t hb[N], wb[N], gb[N];
    for (size_t i = 0; i < N; i++) {
        hi[i] = (int32_t)((i * 31 + (size_t)rank * 17) % 1000) - 500;
        wi[i] = INT32_MIN;
        for (int r = 0; r < size; r++) {
            int32_t v = (int32_t)((i * 31 + (size_t)r * 17) % 1000) - 500;
            wi[i] = v > wi[i] ? v : wi[i];
        }
        hb[i] = dt_f32_to_bf16((float)(2 * size * (int)(i % 5)));
        wb[i] = hb[i]; /* every rank the same value: the average is it */
    }
    void *di = up(hi, sizeof hi), *db = up(hb, sizeof hb);
    CALL(dt_allreduce(di, di, N, DT_I32, DT_MAX, world));
    CALL(dt_allreduce(db, db, N, DT_BF16, DT_AVG, world));
    CALL(dt_device_download(dv, gi, di, sizeof gi));
    CALL(dt_device_download(dv, gb, db, sizeof gb));
    if (memcmp(gi, wi, sizeof gi) || memcmp(gb, wb, sizeof gb)) {
        fprintf(stderr, "MISMATCH rank %d: i32 max or bf16 avg\n", rank);
        failures++;
    }
    dv->free(di);
    dv->free(db);
}

static int reuse(void)
{
    const char *mode = getenv("DT_DEVICE_IPC");
    int on = mode && !strcmp(mode, "1");
    size_t all = (size_t)size * N * sizeof(float);
    float *d_in = dv->alloc(N * sizeof(float)), *d_out = dv->alloc(all), *d_all = dv->alloc(all);
    uint64_t calls0 = dt__ipc_calls();
    round_trip(d_in, d_out, d_all, 0);
    uint64_t opens1 = dt__ipc_opens();
    for (int it = 1; it < ITERS; it++)
        round_trip(d_in, d_out, d_all, it);
    uint64_t opens2 = dt__ipc_opens(), per = 6 + (uint64_t)size; /* collectives per round trip */
    uint64_t calls = dt__ipc_calls() - calls0;
    if (on && (calls != ITERS * per || opens2 != opens1)) {
        fprintf(stderr, "FAIL rank %d: %llu of %llu collectives by IPC; %llu buffers opened after the first round, "
                        "expected none (the cache)\n", rank, (unsigned long long)calls,
                (unsigned long long)(ITERS * per), (unsigned long long)(opens2 - opens1));
        failures++;
    }
    if (!on && calls != 0) {
        fprintf(stderr, "FAIL rank %d: %llu collectives by IPC under DT_DEVICE_IPC=%s\n", rank,
                (unsigned long long)calls, mode ? mode : "(unset)");
        failures++;
    }
    /* A new buffer in place of a freed one: opened afresh, read right. */
    dv->free(d_in);
    d_in = dv->alloc(N * sizeof(float));
    round_trip(d_in, d_out, d_all, 7);
    if (on && dt__ipc_opens() == opens2) {
        fprintf(stderr, "FAIL rank %d: a new buffer was not opened\n", rank);
        failures++;
    }
    other_types();
    /* Rank 1's buffer not exportable (emu memory from outside its shared
     * heap): every rank learns it in round 1 and stages, results right. */
    if (on) {
        uint64_t before = dt__ipc_calls();
        float h[N], want[N];
        for (size_t i = 0; i < N; i++) {
            h[i] = val(rank, i);
            want[i] = 0;
            for (int r = 0; r < size; r++)
                want[i] += val(r, i);
        }
        void *odd = NULL;
        if (rank == 1) {
            odd = (void *)((uintptr_t)dt__cpu_ops.alloc(sizeof h) | (1ull << 62)); /* the emu tag */
            CALL(dt_device_upload(dv, odd, h, sizeof h));
        }
        float *src = rank == 1 ? odd : up(h, sizeof h);
        CALL(dt_allreduce(src, d_out, N, DT_F32, DT_SUM, world));
        expect_f32("allreduce, one rank not exportable", d_out, want, N);
        if (dt__ipc_calls() != before) {
            fprintf(stderr, "FAIL rank %d: a call with a buffer rank 1 cannot export went by IPC\n", rank);
            failures++;
        }
        if (rank == 1)
            dt__cpu_ops.free((void *)((uintptr_t)odd & ~(1ull << 62)));
        else
            dv->free(src);
    }
    dv->free(d_in);
    dv->free(d_out);
    dv->free(d_all);
    int f = failures, sum = 0;
    CALL(dt_allreduce(&f, &sum, 1, DT_I32, DT_SUM, world));
    if (rank == 0)
        printf("device_ipc reuse: %d ranks, %s, %llu collectives by IPC on rank 0, %d failures\n", size,
               on ? "IPC" : "staged", (unsigned long long)dt__ipc_calls(), sum);
    return sum == 0 ? 0 : 1;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int dead(const char *dir)
{
    float h[N];
    for (size_t i = 0; i < N; i++)
        h[i] = val(rank, i);
    signal(SIGTERM, SIG_IGN); /* report our own error before dtrun's SIGKILL (as fault_peer) */
    float *d = up(h, sizeof h), *e = dv->alloc(sizeof h);
    CALL(dt_allreduce(d, e, N, DT_F32, DT_SUM, world)); /* all alive: by IPC */
    /* The victim gives the others time to leave the barrier and enter the
     * allreduce (one slow to leave it sees the death there, which is
     * recorded the same way). */
    double t0 = now();
    dt_status s = dt_barrier(world);
    if (rank == size - 1) {
        usleep(300 * 1000);
        raise(SIGKILL);
    }
    if (s == DT_OK) {
        t0 = now();
        s = dt_allreduce(d, e, N, DT_F32, DT_SUM, world);
    }
    char path[512];
    snprintf(path, sizeof path, "%s/result.%d", dir, rank);
    FILE *f = fopen(path, "w");
    if (!f)
        return 1;
    fprintf(f, "status=%s\nseconds=%.3f\nipc_calls=%llu\nmessage=%s\n", dt_status_name(s), now() - t0,
            (unsigned long long)dt__ipc_calls(), s == DT_OK ? "" : dt_last_error());
    fclose(f);
    return s == DT_OK ? 1 : 0;
}

/* Rank 0 calls allreduce with one element more than the others: every
 * rank's call fails naming the mismatch, as on the host path. */
static int mismatch(void)
{
    float h[N + 1] = {0};
    float *d = up(h, sizeof h), *e = dv->alloc(sizeof h);
    /* Past start-up first; a rank slow to leave the barrier may see the
     * others' failure there, which names the mismatch too. */
    dt_status s = dt_barrier(world);
    if (s == DT_OK)
        s = dt_allreduce(d, e, rank == 0 ? N + 1 : N, DT_F32, DT_SUM, world);
    int ok = s != DT_OK && strstr(dt_last_error(), "mismatch") != NULL;
    printf("device_ipc mismatch: rank %d: %s: %s\n", rank, ok ? "ok" : "FAIL", s == DT_OK ? "no error" : dt_last_error());
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "reuse") && strcmp(argv[1], "mismatch") && (strcmp(argv[1], "dead") || argc != 3))) {
        fprintf(stderr, "usage: device_ipc reuse | device_ipc mismatch | device_ipc dead DIR\n");
        return 2;
    }
    if (dt_device_open("emu", &dv) != DT_OK) {
        fprintf(stderr, "device_ipc: %s\n", dt_last_error());
        return 2;
    }
    CALL(dt_comm_init_env(&world));
    rank = dt_comm_rank(world);
    size = dt_comm_size(world);
    if (!strcmp(argv[1], "mismatch"))
        return mismatch();
    int rc = !strcmp(argv[1], "reuse") ? reuse() : dead(argv[2]);
    if (strcmp(argv[1], "dead"))
        CALL(dt_comm_destroy(world));
    return rc;
}
