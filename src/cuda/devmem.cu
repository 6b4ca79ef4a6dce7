/* The cuda device's memory resolver (base/devmem.h), through which the
 * communication layer learns that a buffer is device memory and stages it:
 * ownership from cudaPointerGetAttributes, copies by the memory entries (on
 * the compute stream, so after the kernels that produced the data), staging
 * memory page-locked (cudaHostAlloc), which the copies reach at full speed.
 * The asynchronous copies of the chunked staging (comm/stage.c) go on a
 * copy stream of the resolver's own, after an event recorded on the compute
 * stream (so after the kernels queued before them), and their ticket is an
 * event recorded after the copy, which the wait synchronizes and destroys:
 * the host thread drives the transport while the copy engine moves the
 * next chunk. */
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdlib.h>

#include "base/devmem.h"
#include "cuda/common.cuh"
#include "cuda/cuda.h"
#include "cuda/ops.h"

static bool cuda_owns(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* a plain host pointer on an old driver: not an error to keep */
        return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

static void *pinned_alloc(size_t bytes)
{
    if (!dt__cuda_enter()) {
        (void)dt__cuda_take_error();
        return malloc(bytes); /* staging still works, unpinned */
    }
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();
        return malloc(bytes);
    }
    return p;
}

static void pinned_free(void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeHost) {
        if (cudaFreeHost(p) != cudaSuccess)
            (void)cudaGetLastError();
        return;
    }
    (void)cudaGetLastError();
    free(p); /* the malloc fallback above */
}

/* The copy stream, made at the first asynchronous copy (one GPU per
 * process: cuda/cuda.h); non-blocking, so not behind stray work on stream 0. */
static pthread_mutex_t copy_mu = PTHREAD_MUTEX_INITIALIZER;
static cudaStream_t copy_stream;

static dt_status copy_async(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, void **ticket)
{
    *ticket = NULL;
    if (!dt__cuda_enter())
        return dt__cuda_take_error();
    DT_CHECK(dt__cuda_take_error());
    pthread_mutex_lock(&copy_mu);
    if (!copy_stream)
        DT_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
    cudaStream_t cs = copy_stream;
    pthread_mutex_unlock(&copy_mu);
    if (!cs)
        return dt__cuda_take_error();
    cudaEvent_t after = NULL, done = NULL;
    /* Both directions wait for the compute stream: a download reads what
     * its kernels wrote, an upload overwrites what they may still read. */
    bool ok = DT_CUDA_CHECK(cudaEventCreateWithFlags(&after, cudaEventDisableTiming)) &&
              DT_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming)) &&
              DT_CUDA_CHECK(cudaEventRecord(after, dt__stream())) &&
              DT_CUDA_CHECK(cudaStreamWaitEvent(cs, after, 0)) &&
              DT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, cs)) && DT_CUDA_CHECK(cudaEventRecord(done, cs));
    if (after)
        DT_CUDA_CHECK(cudaEventDestroy(after)); /* released once the copy stream has passed it */
    if (!ok) {
        DT_CUDA_CHECK(cudaStreamSynchronize(cs)); /* nothing of this copy left running on the buffers */
        if (done)
            DT_CUDA_CHECK(cudaEventDestroy(done));
        return dt__cuda_take_error();
    }
    *ticket = (void *)done;
    return DT_OK;
}

static dt_status cuda_to_host_async(void *host_dst, const void *dev_src, size_t bytes, void **ticket)
{
    return copy_async(host_dst, dev_src, bytes, cudaMemcpyDeviceToHost, ticket);
}

static dt_status cuda_to_device_async(void *dev_dst, const void *host_src, size_t bytes, void **ticket)
{
    return copy_async(dev_dst, host_src, bytes, cudaMemcpyHostToDevice, ticket);
}

static dt_status cuda_copy_wait(void *ticket)
{
    cudaEvent_t e = (cudaEvent_t)ticket;
    (void)dt__cuda_enter();
    DT_CUDA_CHECK(cudaEventSynchronize(e));
    DT_CUDA_CHECK(cudaEventDestroy(e));
    return dt__cuda_take_error();
}

static const dt__devmem cuda_devmem = {
    "cuda",       cuda_owns,          dt__cuda_download,    dt__cuda_upload, pinned_alloc,
    pinned_free,  cuda_to_host_async, cuda_to_device_async, cuda_copy_wait,
};

extern "C" const dt__devmem *dt__cuda_devmem(void) { return &cuda_devmem; }
