/* Devices: opening a compute backend by name, and the few calls a user
 * needs on it (describe, sync, copies).  The table itself is in
 * tensor/backend.h; the cuda runtime in src/cuda/cuda.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/devmem.h"
#include "base/devmem_ipc.h"
#include "base/status.h"
#include "cuda/cuda.h"
#include "tensor/profile.h"
#include "tensor/backend.h"

/* "cuda" alone picks GPU DT_LOCAL_RANK modulo the GPUs visible (one GPU per
 * rank, several ranks sharing a GPU when there are fewer); cuda_init
 * checks the range of an explicit index. */
static dt_status cuda_index(const char *spec, int *index)
{
    if (spec[4] == ':') {
        char *end = NULL;
        long v = strtol(spec + 5, &end, 10);
        if (!spec[5] || *end || v < 0 || v > 1024)
            return dt__fail(DT_ERR_INVALID, "device %s: the GPU index must be a whole number (cuda:0, cuda:1, ...)",
                            spec);
        *index = (int)v;
        return DT_OK;
    }
    *index = -1; /* the backend takes DT_LOCAL_RANK modulo its count */
    return DT_OK;
}

dt_status dt_device_open(const char *spec, const dt_device **out)
{
    if (!spec || !out)
        return dt__fail(DT_ERR_INVALID, "device_open: %s is NULL", spec ? "out" : "the device name");
    if (!strcmp(spec, "cpu")) {
        *out = &dt__cpu_ops;
        return DT_OK;
    }
    if (!strcmp(spec, "emu")) {
#if defined(__x86_64__) || defined(__aarch64__)
        DT_CHECK(dt__devmem_register(&dt__emu_devmem)); /* communication learns its buffers here */
        dt__devmem_ipc_register(&dt__emu_devmem, &dt__emu_ipc); /* used under DT_DEVICE_IPC=1 */
        *out = dt__profile_on() ? dt__profile_wrap(&dt__emu_ops) : &dt__emu_ops;
        return DT_OK;
#else
        return dt__fail(DT_ERR_INVALID, "device emu: needs 48-bit user addresses (x86-64, AArch64)");
#endif
    }
    if (strncmp(spec, "cuda", 4) || (spec[4] && spec[4] != ':'))
        return dt__fail(DT_ERR_INVALID, "device '%s': expected cpu, cuda, cuda:N or emu", spec);
    int index = -1;
    DT_CHECK(cuda_index(spec, &index));
    DT_CHECK(dt__cuda_init(index));
    const dt_compute_ops *ops = dt__cuda_ops();
    if (!ops)
        return dt__fail(DT_ERR_INVALID, "device %s: this dtrain was built without CUDA (configure with -DDT_CUDA=ON "
                                        "and the CUDA toolkit installed)", spec);
    DT_CHECK(dt__devmem_register(dt__cuda_devmem()));
    if (dt__cuda_ipc())
        dt__devmem_ipc_register(dt__cuda_devmem(), dt__cuda_ipc());
    *out = dt__profile_on() ? dt__profile_wrap(ops) : ops;
    return DT_OK;
}

const char *dt_device_name(const dt_device *d) { return d ? d->name : "cpu"; }

bool dt_device_is_host(const dt_device *d) { return !d || d->host; }

int dt_device_count(const char *kind)
{
    if (kind && !strncmp(kind, "cuda", 4))
        return dt__cuda_device_count();
    return 1;
}

dt_status dt_device_describe(const dt_device *d, char *buf, size_t n)
{
    if (!buf || n == 0)
        return dt__fail(DT_ERR_INVALID, "device_describe: no buffer");
    if (dt__profile_inner(d) == &dt__emu_ops) {
        snprintf(buf, n, "emu: the cpu kernels behind memory the host cannot touch (a test device)");
        return DT_OK;
    }
    if (dt_device_is_host(d)) {
        const char *core = NULL, *config = NULL;
        int threads = 0;
        dt_blas_describe(&core, &threads, &config);
        snprintf(buf, n, "cpu, %d compute threads, OpenBLAS %s kernels", dt_get_threads(), core ? core : "?");
        return DT_OK;
    }
    return dt__cuda_describe(buf, n);
}

dt_status dt_device_sync(const dt_device *d) { return d ? d->sync() : DT_OK; }

dt_status dt_device_memory(const dt_device *d, size_t *total, size_t *free_bytes, size_t *peak)
{
    if (!total || !free_bytes)
        return dt__fail(DT_ERR_INVALID, "device_memory: %s is NULL", total ? "free_bytes" : "total");
    d = d ? d : &dt__cpu_ops;
    if (peak)
        *peak = d->mem_peak();
    return d->mem_info(total, free_bytes);
}

dt_status dt_device_set_tf32(const dt_device *d, bool on)
{
    if (!dt_device_is_host(d) && dt__profile_inner(d) != &dt__emu_ops)
        dt__cuda_set_tf32(on);
    return DT_OK;
}

void *dt_device_alloc(const dt_device *d, size_t bytes)
{
    return (d ? d : &dt__cpu_ops)->alloc(bytes);
}

void dt_device_free(const dt_device *d, void *p)
{
    (d ? d : &dt__cpu_ops)->free(p);
}

dt_status dt_device_upload(const dt_device *d, void *dst, const void *host_src, size_t bytes)
{
    return (d ? d : &dt__cpu_ops)->upload(dst, host_src, bytes);
}

dt_status dt_device_download(const dt_device *d, void *host_dst, const void *src, size_t bytes)
{
    return (d ? d : &dt__cpu_ops)->download(host_dst, src, bytes);
}
