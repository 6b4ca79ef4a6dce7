/* The NCCL backend's errors and waits: every CUDA and NCCL return checked,
 * every wait polled up to the communicator's deadline (DT_TIMEOUT), and a
 * communicator that failed or timed out aborted (ncclCommAbort), so a dead
 * or silent peer is reported, never waited for without end. */
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/status.h"
#include "comm/coll.h"
#include "comm/nccl/nccl_internal.h"

dt_status dt__nccl_cuda_error(cudaError_t e, const char *op)
{
    if (e == cudaSuccess)
        return DT_OK;
    return dt__fail(DT_ERR_SYSTEM, "%s: DT_BACKEND=nccl: CUDA: %s (%s)", op, cudaGetErrorString(e),
                    cudaGetErrorName(e));
}

/* NCCL's own text, and the detail of its last error on this communicator. */
static void nccl_text(ncclResult_t r, const dt_comm *c, char *out, size_t len)
{
    const dt__nccl_comm *n = c ? dt__nccl_of(c) : NULL;
    const char *last = n && n->comm ? ncclGetLastError(n->comm) : ncclGetLastError(NULL);
    snprintf(out, len, "%s%s%s", ncclGetErrorString(r), last && *last ? ": " : "", last ? last : "");
}

dt_status dt__nccl_error(ncclResult_t r, const char *op, const dt_comm *c)
{
    if (r == ncclSuccess || r == ncclInProgress)
        return DT_OK;
    char text[200];
    nccl_text(r, c, text, sizeof text);
    /* A bad argument is the caller's; anything else (a system, internal or
     * remote error) leaves the communicator unusable. */
    dt_status s = r == ncclInvalidArgument || r == ncclInvalidUsage ? DT_ERR_INVALID : DT_ERR_PEER;
    if (c)
        return dt__fail(s, "%s: DT_BACKEND=nccl, rank %d of %d: NCCL: %s", op, c->rank, c->size, text);
    return dt__fail(s, "%s: DT_BACKEND=nccl: NCCL: %s", op, text);
}

dt_status dt__nccl_break(dt_comm *c, dt_status s)
{
    dt__nccl_comm *n = dt__nccl_of(c);
    if (n->broken)
        return s;
    n->broken = true;
    n->broken_status = s;
    snprintf(n->why, sizeof n->why, "%s", dt_last_error());
    if (n->comm) {
        ncclCommAbort(n->comm); /* frees it: ends its kernels, so the stream drains */
        n->comm = NULL;
    }
    return dt__fail(s, "%s; the NCCL communicator was aborted", n->why);
}

dt_status dt__nccl_begin(dt_comm *c, const char *op)
{
    DT_CHECK(dt__comm_usable(c, op));
    dt__nccl_comm *n = dt__nccl_of(c);
    if (n->broken)
        return dt__fail(n->broken_status, "%s: this communicator was aborted after an earlier failure: %s", op,
                        n->why);
    /* The current device is per thread: a progress thread runs calls too. */
    DT_CHECK(dt__nccl_cuda_error(cudaSetDevice(n->device), op));
    /* c's stream is non-blocking: without this fence NCCL could read a send
     * buffer before the caller's upload or kernel wrote it (seen on an H200:
     * a cudaMemset and a pageable cudaMemcpy still in flight). */
    dt_status s = dt__nccl_cuda_error(cudaEventRecord(n->ready, cudaStreamLegacy), op);
    if (s == DT_OK)
        s = dt__nccl_cuda_error(cudaStreamWaitEvent(n->stream, n->ready, 0), op);
    return s == DT_OK ? s : dt__nccl_break(c, s);
}

void dt__nccl_pause(int64_t spins)
{
    if (spins < 64) {
        sched_yield();
        return;
    }
    struct timespec ts = {0, spins < 1024 ? 20000 : 200000}; /* 20 us, then 200 us */
    nanosleep(&ts, NULL);
}

/* The deadline passed: abort with a message naming the call and rank. */
static dt_status timed_out(dt_comm *c, const char *op, const char *what)
{
    dt__fail(DT_ERR_TIMEOUT, "%s: DT_BACKEND=nccl, rank %d of %d: %s within %.0f s (DT_TIMEOUT): a peer is dead, "
                             "silent or calling something else",
             op, c->rank, c->size, what, c->timeout_s);
    return dt__nccl_break(c, DT_ERR_TIMEOUT);
}

/* An asynchronous NCCL error (a peer gone, a network failure): abort. */
static dt_status async_check(dt_comm *c, const char *op, ncclResult_t *state)
{
    dt__nccl_comm *n = dt__nccl_of(c);
    ncclResult_t r = ncclCommGetAsyncError(n->comm, state);
    if (r != ncclSuccess)
        *state = r;
    if (*state == ncclSuccess || *state == ncclInProgress)
        return DT_OK;
    return dt__nccl_break(c, dt__nccl_error(*state, op, c));
}

dt_status dt__nccl_settle(dt_comm *c, ncclResult_t r, const char *op, int64_t deadline)
{
    if (r != ncclSuccess && r != ncclInProgress) {
        dt_status s = dt__nccl_error(r, op, c);
        return s == DT_ERR_INVALID ? s : dt__nccl_break(c, s);
    }
    for (int64_t spins = 0;; spins++) {
        ncclResult_t state = ncclSuccess;
        DT_CHECK(async_check(c, op, &state));
        if (state == ncclSuccess)
            return DT_OK;
        if (dt__now_ns() > deadline)
            return timed_out(c, op, "NCCL did not finish setting up the call");
        dt__nccl_pause(spins);
    }
}

dt_status dt__nccl_record(dt_comm *c, cudaEvent_t ev, const char *op)
{
    dt_status s = dt__nccl_cuda_error(cudaEventRecord(ev, dt__nccl_of(c)->stream), op);
    return s == DT_OK ? s : dt__nccl_break(c, s);
}

dt_status dt__nccl_poll(dt_comm *c, cudaEvent_t ev, const char *op, int64_t deadline, bool *done)
{
    dt__nccl_comm *n = dt__nccl_of(c);
    *done = false;
    if (n->broken)
        return dt__fail(n->broken_status, "%s: this communicator was aborted after an earlier failure: %s", op,
                        n->why);
    cudaError_t e = cudaEventQuery(ev);
    if (e == cudaSuccess) {
        *done = true;
        return DT_OK;
    }
    if (e != cudaErrorNotReady)
        return dt__nccl_break(c, dt__nccl_cuda_error(e, op));
    ncclResult_t state = ncclSuccess;
    DT_CHECK(async_check(c, op, &state));
    if (dt__now_ns() > deadline)
        return timed_out(c, op, "the call did not complete on the GPU");
    return DT_OK;
}

dt_status dt__nccl_finish(dt_comm *c, const char *op, int64_t deadline)
{
    dt__nccl_comm *n = dt__nccl_of(c);
    DT_CHECK(dt__nccl_record(c, n->done, op));
    for (int64_t spins = 0;; spins++) {
        bool done = false;
        DT_CHECK(dt__nccl_poll(c, n->done, op, deadline, &done));
        if (done)
            return DT_OK;
        dt__nccl_pause(spins);
    }
}
