/* dt_comm_attach_device (src/comm/device_comm.c), run under dtrun with 2
 * or more ranks on the emu device: the refusals; with a native companion,
 * each call with a device buffer runs on the companion (its collective
 * count moves, the host communicator's does not) and gives the host call's
 * bits; host buffers stay on the host communicator; nonblocking and point
 * to point calls follow their buffers; a split carries a companion of the
 * same members (DT_UNDEFINED: none); destruction takes both down.
 * Exit 0 when every check passed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/comm_internal.h"
#include "dtrain/dtrain.h"
#include "tensor/backend.h"

static int failures;
static const dt_device *dev;

#define CHECK(cond, ...) \
    do { \
        if (!(cond)) { \
            failures++; \
            printf("FAIL line %d: ", __LINE__); \
            printf(__VA_ARGS__); \
            printf(" (last error: %s)\n", dt_last_error()); \
        } \
    } while (0)

static float *dev_copy(const float *h, size_t n)
{
    float *d = dev->alloc(n * sizeof *d);
    if (!d || dt_device_upload(dev, d, h, n * sizeof *d) != DT_OK) {
        printf("FAIL: emu allocation: %s\n", dt_last_error());
        exit(1);
    }
    return d;
}

static void fill(float *h, size_t n, int rank, int salt)
{
    for (size_t i = 0; i < n; i++)
        h[i] = (float)((int)((i * 7 + (size_t)rank * 13 + (size_t)salt) % 97) - 48) * 0.37f;
}

/* allreduce of a device buffer on c: on the companion, the host call's bits. */
static void allreduce_routed(dt_comm *c, const char *what)
{
    enum { N = 3001 };
    float h[N], want[N], got[N];
    fill(h, N, c->rank, 5);
    float *d = dev_copy(h, N);
    uint64_t host0 = c->coll_seq, dev0 = c->device_comm->coll_seq;
    CHECK(dt_allreduce(d, d, N, DT_F32, DT_SUM, c) == DT_OK, "%s: device allreduce", what);
    CHECK(c->coll_seq == host0 && c->device_comm->coll_seq == dev0 + 1,
          "%s: device allreduce ran on the host communicator (host %llu -> %llu, companion %llu -> %llu)", what,
          (unsigned long long)host0, (unsigned long long)c->coll_seq, (unsigned long long)dev0,
          (unsigned long long)c->device_comm->coll_seq);
    CHECK(dt_allreduce(h, want, N, DT_F32, DT_SUM, c) == DT_OK, "%s: host allreduce", what);
    CHECK(c->coll_seq == host0 + 1 && c->device_comm->coll_seq == dev0 + 1,
          "%s: host allreduce did not run on the host communicator", what);
    CHECK(dt_device_download(dev, got, d, sizeof got) == DT_OK, "%s: download", what);
    CHECK(!memcmp(got, want, sizeof got), "%s: device result differs from the host one", what);
    dev->free(d);
}

int main(void)
{
    setbuf(stdout, NULL);
    if (dt_device_open("emu", &dev) != DT_OK) {
        printf("SKIP: %s\n", dt_last_error());
        return 77;
    }
    dt_comm *w = NULL;
    if (dt_comm_init_env(&w) != DT_OK) {
        printf("FAIL: init: %s\n", dt_last_error());
        return 1;
    }
    int rank = dt_comm_rank(w), size = dt_comm_size(w);
    /* refusals */
    CHECK(dt_comm_attach_device(NULL, "native") == DT_ERR_INVALID, "NULL communicator accepted");
    CHECK(dt_comm_attach_device(w, "tpu") == DT_ERR_INVALID && strstr(dt_last_error(), "expected nccl or native"),
          "unknown backend accepted");
    if (!dt_comm_backend_built("nccl"))
        CHECK(dt_comm_attach_device(w, "nccl") == DT_ERR_INVALID && strstr(dt_last_error(), "no NCCL backend"),
              "nccl accepted by a build without it");
    CHECK(!strcmp(dt_comm_device_backend(w), "native") && !w->device_comm, "companion before attaching");
    CHECK(dt_comm_attach_device(w, "native") == DT_OK, "attach native");
    CHECK(w->device_comm && w->device_comm->size == size && w->device_comm->rank == rank,
          "the companion's members are not the world's");
    CHECK(dt_comm_attach_device(w, "native") == DT_ERR_INVALID && strstr(dt_last_error(), "already"),
          "a second attachment accepted");
    allreduce_routed(w, "world");

    /* nonblocking: the request is the companion's */
    float h[64], hr[64];
    fill(h, 64, rank, 9);
    float *d = dev_copy(h, 64);
    dt_request *req = NULL;
    CHECK(dt_iallreduce(d, d, 64, DT_F32, DT_MAX, w, &req) == DT_OK && req && req->comm == w->device_comm,
          "iallreduce of a device buffer not on the companion");
    CHECK(req && dt_wait(req, NULL) == DT_OK, "iallreduce wait");
    /* point to point: ring shift of a device buffer */
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    float *r = dev_copy(h, 64);
    dt_request *sr = NULL, *rr = NULL;
    CHECK(dt_isend(d, 64, DT_F32, next, 3, w, &sr) == DT_OK && sr && sr->comm == w->device_comm,
          "isend of a device buffer not on the companion");
    CHECK(dt_irecv(r, 64, DT_F32, prev, 3, w, &rr) == DT_OK && rr && rr->comm == w->device_comm,
          "irecv into a device buffer not on the companion");
    CHECK(rr && dt_wait(rr, NULL) == DT_OK && sr && dt_wait(sr, NULL) == DT_OK, "p2p wait");
    float max_all[64];
    CHECK(dt_allreduce(h, max_all, 64, DT_F32, DT_MAX, w) == DT_OK, "host max");
    CHECK(dt_device_download(dev, hr, r, sizeof hr) == DT_OK && !memcmp(hr, max_all, sizeof hr),
          "the received device buffer is not the neighbour's reduced one");
    dev->free(d);
    dev->free(r);

    /* splits carry a companion of the same members; DT_UNDEFINED gets none */
    dt_comm *half = NULL;
    int color = (size > 2 && rank == size - 1) ? DT_UNDEFINED : rank % 2;
    CHECK(dt_comm_split(w, color, -rank, &half) == DT_OK, "split");
    if (color == DT_UNDEFINED) {
        CHECK(!half, "DT_UNDEFINED got a communicator");
    } else if (half) {
        CHECK(half->device_comm && half->device_comm->size == half->size &&
                  half->device_comm->rank == half->rank &&
                  !memcmp(half->device_comm->ranks, half->ranks, (size_t)half->size * sizeof *half->ranks),
              "the split's companion does not have the split's members in its order");
        if (half->device_comm)
            allreduce_routed(half, "split");
        CHECK(dt_comm_destroy(half) == DT_OK, "destroy the split");
    }
    CHECK(dt_comm_destroy(w) == DT_OK, "destroy the world");
    printf("device_comm rank %d of %d: %s\n", rank, size, failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
