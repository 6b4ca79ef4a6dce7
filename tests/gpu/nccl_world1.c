/* The NCCL backend (DT_BACKEND=nccl) at world size 1, on one GPU: every
 * collective and point-to-point call on cudaMalloc'd buffers, compared with
 * the result computed on the host, at coll_check's kinds of sizes, in place
 * and not; a split; a nonblocking collective; and the refusals (a host
 * buffer named, allreduce_half).  One machine has one GPU and NCCL refuses
 * two ranks on one GPU, so more ranks are not tried here.  At world size 1
 * every reduction of one contribution is that contribution, and every move
 * a copy: the host's expected values are the inputs themselves, bitwise;
 * each output buffer is filled with 0xA5 bytes first, so a call that writes
 * nothing fails.
 *
 *   nccl_world1 [--quick]      (run alone or under dtrun -n 1)
 *
 * Exit 0 when every check passed, 1 otherwise, 77 ("SKIP: <why>") without a
 * GPU or without the NCCL backend in this build. */
#include <cuda_runtime.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/half_convert.h"
#include "dtrain/comm.h"

static int n_checks, n_failed;

static void check(bool ok, const char *what, size_t count, dt_dtype t)
{
    n_checks++;
    if (!ok) {
        n_failed++;
        printf("FAIL %s count %zu dtype %s (last error: %s)\n", what, count, dt_dtype_name(t), dt_last_error());
    }
}

static void cuda_or_die(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        printf("FAIL %s: CUDA: %s\n", what, cudaGetErrorString(e));
        exit(1);
    }
}

/* count elements of t with small values (exact in every type, no NaN). */
static void fill(void *host, size_t count, dt_dtype t, unsigned salt)
{
    for (size_t i = 0; i < count; i++) {
        int v = (int)((i * 7 + salt) % 100) - 50;
        switch (t) {
        case DT_F32: ((float *)host)[i] = (float)v * 0.5f; break;
        case DT_F64: ((double *)host)[i] = v * 0.25; break;
        case DT_F16:
        case DT_BF16: {
            float f = (float)v;
            dt__to_half_n((uint16_t *)host + i, &f, 1, t == DT_BF16);
            break;
        }
        case DT_I32: ((int32_t *)host)[i] = v * 1000; break;
        case DT_I64: ((int64_t *)host)[i] = (int64_t)v * ((int64_t)1 << 33); break;
        case DT_U8: ((uint8_t *)host)[i] = (uint8_t)(v + 50); break;
        default: break;
        }
    }
}

/* Device buffers of the current case: send/recv of `bytes` each, and the
 * host's copies. */
typedef struct {
    void *d_send, *d_recv;
    unsigned char *h_in, *h_out;
    size_t bytes;
} bufs;

static void prepare(bufs *b, size_t count, dt_dtype t, unsigned salt)
{
    b->bytes = count * dt_dtype_size(t);
    fill(b->h_in, count, t, salt);
    cuda_or_die(cudaMemcpy(b->d_send, b->h_in, b->bytes, cudaMemcpyHostToDevice), "upload");
    cuda_or_die(cudaMemset(b->d_recv, 0xA5, b->bytes ? b->bytes : 1), "memset");
}

/* The device buffer `d` holds h_in (bitwise). */
static bool holds_input(bufs *b, const void *d)
{
    cuda_or_die(cudaMemcpy(b->h_out, d, b->bytes, cudaMemcpyDeviceToHost), "download");
    if (memcmp(b->h_out, b->h_in, b->bytes) == 0)
        return true;
    /* where: the first differing byte, and how many differ (a stale buffer,
     * the 0xA5 fill, or a partial write read differently) */
    size_t first = b->bytes, ndiff = 0;
    for (size_t i = 0; i < b->bytes; i++)
        if (b->h_out[i] != b->h_in[i]) {
            first = i < first ? i : first;
            ndiff++;
        }
    printf("  mismatch: %zu of %zu bytes differ, the first at byte %zu (got 0x%02x, expected 0x%02x)\n", ndiff,
           b->bytes, first, b->h_out[first], b->h_in[first]);
    return false;
}

static void run_size(dt_comm *w, bufs *b, size_t count, dt_dtype t)
{
    char what[64];
    /* allreduce, every op, out of place and in place */
    for (int op = DT_SUM; op < DT_REDOP_COUNT; op++) {
        prepare(b, count, t, 3u + (unsigned)op);
        snprintf(what, sizeof what, "allreduce %s", dt_redop_name((dt_redop)op));
        check(dt_allreduce(b->d_send, b->d_recv, count, t, (dt_redop)op, w) == DT_OK && holds_input(b, b->d_recv),
              what, count, t);
        snprintf(what, sizeof what, "allreduce %s in place", dt_redop_name((dt_redop)op));
        check(dt_allreduce(b->d_send, b->d_send, count, t, (dt_redop)op, w) == DT_OK && holds_input(b, b->d_send),
              what, count, t);
    }
    prepare(b, count, t, 11);
    check(dt_reduce(b->d_send, b->d_recv, count, t, DT_SUM, 0, w) == DT_OK && holds_input(b, b->d_recv), "reduce",
          count, t);
    check(dt_reduce(b->d_send, b->d_send, count, t, DT_MAX, 0, w) == DT_OK && holds_input(b, b->d_send),
          "reduce in place", count, t);
    check(dt_broadcast(b->d_send, count, t, 0, w) == DT_OK && holds_input(b, b->d_send), "broadcast", count, t);
    prepare(b, count, t, 13);
    check(dt_reduce_scatter(b->d_send, b->d_recv, count, t, DT_SUM, w) == DT_OK && holds_input(b, b->d_recv),
          "reduce_scatter", count, t);
    check(dt_reduce_scatter(b->d_send, b->d_send, count, t, DT_MIN, w) == DT_OK && holds_input(b, b->d_send),
          "reduce_scatter in place", count, t);
    prepare(b, count, t, 17);
    check(dt_allgather(b->d_send, b->d_recv, count, t, w) == DT_OK && holds_input(b, b->d_recv), "allgather", count,
          t);
    check(dt_allgather(b->d_send, b->d_send, count, t, w) == DT_OK && holds_input(b, b->d_send),
          "allgather in place", count, t);
    prepare(b, count, t, 19);
    check(dt_gather(b->d_send, b->d_recv, count, t, 0, w) == DT_OK && holds_input(b, b->d_recv), "gather", count, t);
    cuda_or_die(cudaMemset(b->d_recv, 0xA5, b->bytes ? b->bytes : 1), "memset");
    check(dt_scatter(b->d_send, b->d_recv, count, t, 0, w) == DT_OK && holds_input(b, b->d_recv), "scatter", count,
          t);
    check(dt_gather(b->d_send, b->d_send, count, t, 0, w) == DT_OK && holds_input(b, b->d_send), "gather in place",
          count, t);
    check(dt_scatter(b->d_send, b->d_send, count, t, 0, w) == DT_OK && holds_input(b, b->d_send),
          "scatter in place", count, t);
    prepare(b, count, t, 23);
    check(dt_alltoall(b->d_send, b->d_recv, count, t, w) == DT_OK && holds_input(b, b->d_recv), "alltoall", count, t);
    check(dt_alltoall(b->d_send, b->d_send, count, t, w) == DT_OK && holds_input(b, b->d_send), "alltoall in place",
          count, t);
    /* nonblocking: the progress thread runs the blocking entry */
    prepare(b, count, t, 29);
    dt_request *req = NULL;
    check(dt_iallreduce(b->d_send, b->d_recv, count, t, DT_SUM, w, &req) == DT_OK && dt_wait(req, NULL) == DT_OK &&
              holds_input(b, b->d_recv),
          "iallreduce + wait", count, t);
    /* point to point with itself: two tags, received in the other order */
    prepare(b, count, t, 31);
    dt_request *s1 = NULL, *s2 = NULL, *r2 = NULL;
    size_t got = 0;
    void *d_other = NULL;
    cuda_or_die(cudaMalloc(&d_other, b->bytes ? b->bytes : 1), "cudaMalloc");
    cuda_or_die(cudaMemset(d_other, 0xA5, b->bytes ? b->bytes : 1), "memset");
    bool ok = dt_isend(b->d_send, count, t, 0, 5, w, &s1) == DT_OK && dt_isend(b->d_send, count, t, 0, 6, w, &s2) == DT_OK &&
              dt_irecv(d_other, count, t, 0, 6, w, &r2) == DT_OK && dt_recv(b->d_recv, count, t, 0, 5, w, &got) == DT_OK &&
              got == count && dt_wait(r2, NULL) == DT_OK && dt_wait(s1, NULL) == DT_OK && dt_wait(s2, NULL) == DT_OK;
    check(ok && holds_input(b, b->d_recv) && holds_input(b, d_other), "isend/irecv/recv to itself", count, t);
    cudaFree(d_other);
}

/* A refusal: status DT_ERR_INVALID and `expect` in the message. */
static void refused(dt_status s, const char *expect, const char *what)
{
    bool ok = s == DT_ERR_INVALID && strstr(dt_last_error(), expect);
    n_checks++;
    if (!ok) {
        n_failed++;
        printf("FAIL %s: status %s, message '%s' (expected '%s')\n", what, dt_status_name(s), dt_last_error(), expect);
    }
}

int main(int argc, char **argv)
{
    bool quick = (argc > 1 && !strcmp(argv[1], "--quick")) || (getenv("DT_TEST_QUICK") && !strcmp(getenv("DT_TEST_QUICK"), "1"));
    setbuf(stdout, NULL);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device is visible\n");
        return 77;
    }
    setenv("DT_BACKEND", "nccl", 0);
    dt_comm *w = NULL;
    dt_status s = dt_comm_init_env(&w);
    if (s != DT_OK) {
        printf("%s: dt_comm_init_env: %s\n", strstr(dt_last_error(), "no NCCL backend") ? "SKIP" : "FAIL",
               dt_last_error());
        return strstr(dt_last_error(), "no NCCL backend") ? 77 : 1;
    }
    if (dt_comm_size(w) != 1) {
        printf("FAIL: nccl_world1 runs at world size 1, not %d\n", dt_comm_size(w));
        return 1;
    }
    /* coll_check's kinds of sizes: empty, one, odd, a page and one, large */
    const size_t sizes[] = {0, 1, 7, 1025, 65537, (size_t)1 << 20};
    size_t nsizes = quick ? 5 : sizeof sizes / sizeof sizes[0];
    size_t max_bytes = sizes[nsizes - 1] * 8;
    bufs b = {0};
    cuda_or_die(cudaMalloc(&b.d_send, max_bytes), "cudaMalloc");
    cuda_or_die(cudaMalloc(&b.d_recv, max_bytes), "cudaMalloc");
    b.h_in = malloc(max_bytes);
    b.h_out = malloc(max_bytes);
    if (!b.h_in || !b.h_out) {
        printf("FAIL: out of host memory\n");
        return 1;
    }
    for (int t = 0; t < DT_DTYPE_COUNT; t++)
        for (size_t i = 0; i < nsizes; i++)
            run_size(w, &b, sizes[i], (dt_dtype)t);
    check(dt_barrier(w) == DT_OK, "barrier", 0, DT_F32);

    /* a split: one child with this rank, none for DT_UNDEFINED */
    dt_comm *child = NULL, *none = NULL;
    s = dt_comm_split(w, 3, 0, &child);
    check(s == DT_OK && child && dt_comm_size(child) == 1 && dt_comm_rank(child) == 0, "split", 0, DT_F32);
    if (child) {
        prepare(&b, 4096, DT_F32, 37);
        check(dt_allreduce(b.d_send, b.d_recv, 4096, DT_F32, DT_SUM, child) == DT_OK && holds_input(&b, b.d_recv),
              "allreduce on the split", 4096, DT_F32);
        check(dt_comm_destroy(child) == DT_OK, "destroying the split", 0, DT_F32);
    }
    check(dt_comm_split(w, DT_UNDEFINED, 0, &none) == DT_OK && !none, "split with DT_UNDEFINED", 0, DT_F32);

    /* host buffers are refused by name */
    float *host = calloc(1024, sizeof *host);
    refused(dt_allreduce(host, b.d_recv, 1024, DT_F32, DT_SUM, w),
            "DT_BACKEND=nccl: the send buffer of allreduce is host memory; NCCL needs device buffers", "host send");
    refused(dt_allreduce(b.d_send, host, 1024, DT_F32, DT_SUM, w), "the receive buffer of allreduce is host memory",
            "host recv");
    refused(dt_broadcast(host, 1024, DT_F32, 0, w), "the buffer of broadcast is host memory", "host broadcast");
    refused(dt_send(host, 16, DT_F32, 0, 1, w), "the send buffer of send is host memory", "host send (p2p)");
    float *pinned = NULL;
    cuda_or_die(cudaMallocHost((void **)&pinned, 4096), "cudaMallocHost");
    refused(dt_allreduce(pinned, b.d_recv, 1024, DT_F32, DT_SUM, w), "the send buffer of allreduce is host memory",
            "pinned host send");
    cudaFreeHost(pinned);
    refused(dt_allreduce_half(b.d_send, b.d_recv, 16, DT_BF16, DT_SUM, w), "DT_BACKEND=nccl has no half-precision wire",
            "allreduce_half");
    free(host);
    /* the communicator still works after the refusals */
    prepare(&b, 1000, DT_I32, 41);
    check(dt_allreduce(b.d_send, b.d_recv, 1000, DT_I32, DT_SUM, w) == DT_OK && holds_input(&b, b.d_recv),
          "allreduce after the refusals", 1000, DT_I32);

    check(dt_comm_destroy(w) == DT_OK, "dt_comm_destroy", 0, DT_F32);
    cudaFree(b.d_send);
    cudaFree(b.d_recv);
    free(b.h_in);
    free(b.h_out);
    printf("nccl_world1: %d checks, %d failed\n", n_checks, n_failed);
    return n_failed ? 1 : 0;
}
