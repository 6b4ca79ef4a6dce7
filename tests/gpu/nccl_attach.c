/* NCCL as the companion for device buffers of a native communicator
 * (dt_comm_attach_device(c, "nccl")), at world size 1 on one GPU (NCCL
 * refuses two ranks on one GPU; the routing itself is tested on emu by
 * tests/device_comm.c): the companion is NCCL; a device allreduce runs on
 * it (the native communicator's count does not move) and a host one on the
 * native communicator; a nonblocking device allreduce's request is NCCL's;
 * a split carries an NCCL companion; everything is destroyed cleanly.
 *
 *   nccl_attach        (alone: world size 1, the native backend)
 *
 * Exit 0 when every check passed, 1 otherwise, 77 ("SKIP: <why>") without a
 * GPU or without the NCCL backend in this build. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "dtrain/dtrain.h"

static int failures;

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            failures++; \
            printf("FAIL line %d: ", __LINE__); \
            printf(__VA_ARGS__); \
            printf(" (last error: %s)\n", dt_last_error()); \
        } \
    } while (0)

/* A device allreduce (sum, in place) of n floats on c: runs on c's NCCL
 * companion and leaves the input (world size 1). */
static void device_allreduce(dt_comm *c, const char *what)
{
    enum { N = 65537 };
    static float h[N], got[N];
    for (int i = 0; i < N; i++)
        h[i] = (float)(i % 101 - 50) * 0.25f;
    float *d = NULL;
    if (cudaMalloc((void **)&d, sizeof h) != cudaSuccess || cudaMemcpy(d, h, sizeof h, cudaMemcpyHostToDevice)) {
        printf("FAIL: %s: cudaMalloc/upload\n", what);
        failures++;
        return;
    }
    uint64_t host0 = c->coll_seq;
    CHECK(dt_allreduce(d, d, N, DT_F32, DT_SUM, c) == DT_OK, "%s: device allreduce", what);
    CHECK(c->coll_seq == host0, "%s: the device allreduce ran on the native communicator", what);
    CHECK(cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost) == cudaSuccess && !memcmp(got, h, sizeof h),
          "%s: the device allreduce changed its input at world size 1", what);
    dt_request *req = NULL;
    CHECK(dt_iallreduce(d, d, N, DT_F32, DT_SUM, c, &req) == DT_OK && req && req->comm == c->device_comm,
          "%s: the nonblocking device allreduce is not the companion's", what);
    CHECK(req && dt_wait(req, NULL) == DT_OK, "%s: wait", what);
    float hs = 2.5f, hr = 0;
    CHECK(dt_allreduce(&hs, &hr, 1, DT_F32, DT_SUM, c) == DT_OK && hr == 2.5f && c->coll_seq == host0 + 1,
          "%s: the host allreduce did not run on the native communicator", what);
    cudaFree(d);
}

int main(void)
{
    setbuf(stdout, NULL);
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        printf("SKIP: no CUDA device is visible\n");
        return 77;
    }
    if (!dt_comm_backend_built("nccl")) {
        printf("SKIP: this build has no NCCL backend\n");
        return 77;
    }
    setenv("DT_BACKEND", "native", 1);
    const dt_device *dev = NULL;
    if (dt_device_open("cuda", &dev) != DT_OK) { /* registers the resolver that tells device pointers */
        printf("FAIL: dt_device_open(cuda): %s\n", dt_last_error());
        return 1;
    }
    dt_comm *w = NULL;
    if (dt_comm_init_env(&w) != DT_OK) {
        printf("FAIL: dt_comm_init_env: %s\n", dt_last_error());
        return 1;
    }
    CHECK(dt_comm_attach_device(w, "nccl") == DT_OK, "attach nccl");
    CHECK(!strcmp(dt_comm_device_backend(w), "nccl"), "the companion is %s, not nccl", dt_comm_device_backend(w));
    if (w->device_comm) {
        device_allreduce(w, "world");
        dt_comm *child = NULL;
        CHECK(dt_comm_split(w, 0, 0, &child) == DT_OK && child && child->device_comm &&
                  !strcmp(dt_comm_device_backend(child), "nccl"),
              "the split has no NCCL companion");
        if (child && child->device_comm)
            device_allreduce(child, "split");
        CHECK(dt_comm_destroy(child) == DT_OK, "destroying the split");
    }
    CHECK(dt_comm_destroy(w) == DT_OK, "destroying the world");
    printf("nccl_attach: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
