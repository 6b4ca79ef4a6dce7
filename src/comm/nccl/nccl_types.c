/* The NCCL backend's dtype and reduction mapping, and the buffer check:
 * NCCL reads and writes device memory of the communicator's GPU only, so
 * any other kind of pointer is refused by name before NCCL sees it (NCCL
 * itself would fault on the GPU or fail without saying which buffer). */
#include <stdio.h>

#include "base/status.h"
#include "comm/nccl/nccl_internal.h"

bool dt__nccl_type(dt_dtype t, ncclDataType_t *out)
{
    switch (t) {
    case DT_F32: *out = ncclFloat32; return true;
    case DT_F64: *out = ncclFloat64; return true;
    case DT_F16: *out = ncclFloat16; return true;
    case DT_BF16: *out = ncclBfloat16; return true;
    case DT_I32: *out = ncclInt32; return true;
    case DT_I64: *out = ncclInt64; return true;
    case DT_U8: *out = ncclUint8; return true;
    default: return false;
    }
}

/* ncclAvg: NCCL sums and divides by the number of ranks (floats: each
 * contribution pre-multiplied by 1/n, so the last bits may differ from
 * dtrain's sum then divide; integers: the sum divided, as dtrain's). */
ncclRedOp_t dt__nccl_op(dt_redop op)
{
    switch (op) {
    case DT_PROD: return ncclProd;
    case DT_MIN: return ncclMin;
    case DT_MAX: return ncclMax;
    case DT_AVG: return ncclAvg;
    default: return ncclSum;
    }
}

dt_status dt__nccl_check_type(const char *op, dt_dtype t)
{
    ncclDataType_t nt;
    if (!dt__nccl_type(t, &nt))
        return dt__fail(DT_ERR_INVALID, "%s: DT_BACKEND=nccl: dtype %s (%d) has no NCCL type", op,
                        dt_dtype_name(t) ? dt_dtype_name(t) : "invalid", (int)t);
    return DT_OK;
}

dt_status dt__nccl_check_buffer(dt_comm *c, const char *op, const char *what, const void *p, size_t bytes)
{
    if (!p || !bytes)
        return DT_OK;
    struct cudaPointerAttributes a;
    cudaError_t e = cudaPointerGetAttributes(&a, p);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: clear it for the next call */
        return dt__fail(DT_ERR_INVALID, "DT_BACKEND=nccl: the %s of %s is not memory CUDA knows (%s); NCCL needs "
                                        "device buffers",
                        what, op, cudaGetErrorString(e));
    }
    switch (a.type) {
    case cudaMemoryTypeDevice: break;
    case cudaMemoryTypeManaged: /* dtrain allocates none (docs/gpu.md): one kind of buffer to reason about */
        return dt__fail(DT_ERR_INVALID, "DT_BACKEND=nccl: the %s of %s is managed (unified) memory; dtrain's NCCL "
                                        "backend needs device buffers (cudaMalloc)",
                        what, op);
    case cudaMemoryTypeHost:
    case cudaMemoryTypeUnregistered:
    default:
        return dt__fail(DT_ERR_INVALID, "DT_BACKEND=nccl: the %s of %s is host memory; NCCL needs device buffers",
                        what, op);
    }
    int dev = dt__nccl_of(c)->device;
    if (a.device != dev)
        return dt__fail(DT_ERR_INVALID, "DT_BACKEND=nccl: the %s of %s is on GPU %d; the communicator's GPU is %d", what,
                        op, a.device, dev);
    return DT_OK;
}
