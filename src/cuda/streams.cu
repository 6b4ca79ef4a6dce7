/* The copy-stream entries (tensor/backend.h): a non-blocking stream of the
 * caller's own for uploads beside the compute stream, events between the
 * two, and page-locked host memory, without which cudaMemcpyAsync from the
 * host is staged by the driver and does not overlap.  NULL as a stream is
 * the compute stream. */
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "cuda/ops.h"

static cudaStream_t or_compute(void *stream) { return stream ? (cudaStream_t)stream : dt__stream(); }

/* Ready on this thread (the prefetch thread calls from its own), and no
 * earlier failure waiting to be reported. */
static dt_status begin(void)
{
    (void)dt__cuda_enter();
    return dt__cuda_take_error();
}

void *dt__cuda_stream_create(void)
{
    cudaStream_t s = NULL;
    if (begin() != DT_OK)
        return NULL;
    /* non-blocking: not ordered behind stray work on the legacy stream 0 */
    if (!DT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))) {
        (void)dt__cuda_take_error();
        return NULL;
    }
    return (void *)s;
}

void dt__cuda_stream_destroy(void *stream)
{
    if (!stream || !dt__cuda_enter())
        return;
    if (DT_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream)))
        DT_CUDA_CHECK(cudaStreamDestroy((cudaStream_t)stream));
}

void *dt__cuda_event_create(void)
{
    cudaEvent_t e = NULL;
    if (begin() != DT_OK)
        return NULL;
    if (!DT_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming))) {
        (void)dt__cuda_take_error();
        return NULL;
    }
    return (void *)e;
}

void dt__cuda_event_destroy(void *event)
{
    if (event && dt__cuda_enter())
        DT_CUDA_CHECK(cudaEventDestroy((cudaEvent_t)event));
}

dt_status dt__cuda_upload_async(void *dst, const void *host_src, size_t bytes, void *stream)
{
    DT_CHECK(begin());
    if (bytes != 0)
        DT_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, or_compute(stream)));
    return dt__cuda_take_error();
}

dt_status dt__cuda_event_record(void *event, void *stream)
{
    DT_CHECK(begin());
    DT_CUDA_CHECK(cudaEventRecord((cudaEvent_t)event, or_compute(stream)));
    return dt__cuda_take_error();
}

dt_status dt__cuda_stream_wait_event(void *stream, void *event)
{
    DT_CHECK(begin());
    DT_CUDA_CHECK(cudaStreamWaitEvent(or_compute(stream), (cudaEvent_t)event, 0));
    return dt__cuda_take_error();
}

dt_status dt__cuda_event_sync(void *event)
{
    DT_CHECK(begin());
    DT_CUDA_CHECK(cudaEventSynchronize((cudaEvent_t)event));
    return dt__cuda_take_error();
}

void *dt__cuda_host_alloc(size_t bytes)
{
    void *p = NULL;
    if (begin() != DT_OK)
        return NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        dt__fail(e == cudaErrorMemoryAllocation ? DT_ERR_NOMEM : DT_ERR_SYSTEM,
                 "cuda: cannot allocate %zu bytes of page-locked host memory: %s", bytes, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

void dt__cuda_host_free(void *p)
{
    if (p && dt__cuda_enter())
        DT_CUDA_CHECK(cudaFreeHost(p));
}
