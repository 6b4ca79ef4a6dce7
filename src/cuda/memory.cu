/* The memory entries: cudaMalloc'd device memory (never managed memory, whose
 * page faults would hide every transfer), copies queued on the compute
 * stream. */
#include <cuda_runtime.h>

#include "cuda/common.cuh"
#include "cuda/ops.h"
#include "tensor/memtrack.h"

#define MIB(b) ((double)(b) / (1024.0 * 1024.0))

static dt_status begin(void);
static dt__memtrack held; /* mem_peak: the most bytes cudaMalloc'd here at once */

void *dt__cuda_alloc(size_t bytes)
{
    if (!dt__cuda_enter()) {
        (void)dt__cuda_take_error(); /* alloc reports through dt_last_error, not later */
        return NULL;
    }
    /* cudaMalloc aligns to 256 bytes at least; 0 bytes still gets a pointer,
     * since NULL means failure here. */
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e == cudaSuccess) {
        dt__memtrack_add(&held, p, bytes);
        return p;
    }
    (void)cudaGetLastError(); /* out of memory is not sticky: keep it from the next launch check */
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess)
        (void)cudaGetLastError();
    dt__fail(e == cudaErrorMemoryAllocation ? DT_ERR_NOMEM : DT_ERR_SYSTEM,
             "cuda: cannot allocate %zu bytes (%.1f MiB) of device memory: %s (%.1f MiB free of %.1f MiB)", bytes,
             MIB(bytes), cudaGetErrorString(e), MIB(free_b), MIB(total));
    return NULL;
}

void dt__cuda_free(void *p)
{
    if (!p || !dt__cuda_enter())
        return;
    /* cudaFree waits for the device anyway; waiting for our stream first
     * says so and keeps a kernel's failure from being blamed on the free. */
    dt__memtrack_remove(&held, p);
    if (DT_CUDA_CHECK(cudaStreamSynchronize(dt__stream())))
        DT_CUDA_CHECK(cudaFree(p));
}

size_t dt__cuda_mem_peak(void) { return dt__memtrack_peak(&held); }

dt_status dt__cuda_mem_info(size_t *total, size_t *free_bytes)
{
    DT_CHECK(begin());
    DT_CUDA_CHECK(cudaMemGetInfo(free_bytes, total));
    return dt__cuda_take_error();
}

/* The common start of the status-returning entries: the backend is ready
 * and no earlier asynchronous failure waits to be reported. */
static dt_status begin(void)
{
    (void)dt__cuda_enter(); /* records its own failure, which take_error returns */
    return dt__cuda_take_error();
}

dt_status dt__cuda_upload(void *dst, const void *host_src, size_t bytes)
{
    DT_CHECK(begin());
    if (bytes == 0)
        return DT_OK;
    /* Waits: the contract lets the caller reuse host_src at once, and a
     * pinned source would still be read after an asynchronous copy returned. */
    if (DT_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, dt__stream())))
        DT_CUDA_CHECK(cudaStreamSynchronize(dt__stream()));
    return dt__cuda_take_error();
}

dt_status dt__cuda_download(void *host_dst, const void *src, size_t bytes)
{
    DT_CHECK(begin());
    if (bytes == 0)
        return DT_OK;
    if (DT_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, dt__stream())))
        DT_CUDA_CHECK(cudaStreamSynchronize(dt__stream()));
    return dt__cuda_take_error();
}

dt_status dt__cuda_copy(void *dst, const void *src, size_t bytes)
{
    DT_CHECK(begin());
    const char *d = (const char *)dst, *s = (const char *)src;
    bool overlap = bytes != 0 && d != s && d < s + bytes && s < d + bytes;
    if (overlap) { /* memmove: cudaMemcpy leaves overlapping ranges undefined, so through a temporary */
        void *tmp = NULL;
        if (DT_CUDA_CHECK(cudaMalloc(&tmp, bytes))) {
            if (DT_CUDA_CHECK(cudaMemcpyAsync(tmp, src, bytes, cudaMemcpyDeviceToDevice, dt__stream())))
                DT_CUDA_CHECK(cudaMemcpyAsync(dst, tmp, bytes, cudaMemcpyDeviceToDevice, dt__stream()));
            DT_CUDA_CHECK(cudaStreamSynchronize(dt__stream()));
            DT_CUDA_CHECK(cudaFree(tmp));
        }
    } else if (bytes != 0 && d != s) {
        DT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, dt__stream()));
    }
    return dt__cuda_take_error();
}

dt_status dt__cuda_zero(void *dst, size_t bytes)
{
    DT_CHECK(begin());
    if (bytes != 0)
        DT_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, dt__stream()));
    return dt__cuda_take_error();
}

dt_status dt__cuda_sync(void)
{
    DT_CHECK(begin());
    DT_CUDA_CHECK(cudaStreamSynchronize(dt__stream()));
    return dt__cuda_take_error();
}
