/* The cuda device's memory resolver (base/devmem.h), through which the
 * communication layer learns that a buffer is device memory and stages it:
 * ownership from cudaPointerGetAttributes, copies by the memory entries (on
 * the compute stream, so after the kernels that produced the data), staging
 * memory page-locked (cudaHostAlloc), which the copies reach at full speed. */
#include <cuda_runtime.h>
#include <stdlib.h>

#include "base/devmem.h"
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

static const dt__devmem cuda_devmem = {
    "cuda", cuda_owns, dt__cuda_download, dt__cuda_upload, pinned_alloc, pinned_free,
};

extern "C" const dt__devmem *dt__cuda_devmem(void) { return &cuda_devmem; }
