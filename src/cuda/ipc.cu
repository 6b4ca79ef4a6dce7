/* The cuda device between processes of one host (base/devmem_ipc.h), the
 * entries src/comm/ipc.c reads peers' device buffers with:
 *  - export: cudaIpcGetMemHandle of the allocation holding the pointer
 *    (its base and size from the driver's cuMemGetAddressRange), keyed
 *    with the exporter's pid, and its buffer id (CU_POINTER_ATTRIBUTE_
 *    BUFFER_ID, never reused in a process) as the generation, so that a
 *    freed and reallocated buffer is never read through a stale mapping;
 *  - open / close: cudaIpcOpenMemHandle / cudaIpcCloseMemHandle (in the
 *    exporting process itself, the pointer as it is: CUDA refuses to open
 *    a process's own handle);
 *  - a non-blocking stream per communicator for the copies and the reduce
 *    kernel, waited for before the closing barrier;
 *  - the reduce: one kernel folding up to DT__IPC_MAX_SRCS inputs in rank
 *    order with base/redop.c's combine, element by element, so its bits are
 *    the shared arena's (the same rounding: __fadd_rn and friends, never
 *    contracted into an fma; f16/bf16 widened, combined in f32 and rounded
 *    back after each combine with the bit-exact conversions of
 *    src/base/dtype.c; NaNs made the one quiet NaN; avg divided once).
 * The driver entry points come through cudaGetDriverEntryPointByVersion, so
 * the library still needs no libcuda at link time.
 *
 * Ran on an H200 (bench/gpu/logs/, docs/gpu.md), except the refusal of an
 * allocation inside another's mapping, written after the last GPU run. */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/devmem_ipc.h"
#include "cuda/common.cuh"
#include "cuda/ops.h"

/* ---- the driver's entry points ---- */

typedef CUresult (*range_fn)(CUdeviceptr *base, size_t *size, CUdeviceptr p);
typedef CUresult (*attr_fn)(void *data, CUpointer_attribute a, CUdeviceptr p);
static range_fn get_range;
static attr_fn get_attr;
static pthread_once_t driver_once = PTHREAD_ONCE_INIT;

static void driver_load(void)
{
    cudaDriverEntryPointQueryResult q;
    void *f = NULL;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        get_range = (range_fn)f;
    f = NULL;
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &f, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        get_attr = (attr_fn)f;
    (void)cudaGetLastError();
}

/* The key of a handle (dt__ipc_handle.key). */
typedef struct {
    cudaIpcMemHandle_t mh;
    int32_t pid, device;
    uint64_t base, size; /* the allocation in the exporter's address space */
} key_t_;

static_assert(sizeof(key_t_) <= DT__IPC_KEY_BYTES, "the cuda handle does not fit dt__ipc_handle");

static dt_status not_exportable(const void *p, const char *why)
{
    (void)cudaGetLastError();
    return dt__fail(DT_ERR_INVALID, "cuda: %p cannot be shared with other processes: %s", p, why);
}

static dt_status cuda_export(const void *p, size_t bytes, dt__ipc_handle *h, uint64_t *off)
{
    if (!dt__cuda_enter())
        return dt__cuda_take_error();
    pthread_once(&driver_once, driver_load);
    if (!get_range)
        return not_exportable(p, "the driver has no cuMemGetAddressRange");
    CUdeviceptr base = 0;
    size_t size = 0;
    if (get_range(&base, &size, (CUdeviceptr)p) != CUDA_SUCCESS)
        return not_exportable(p, "not memory of cudaMalloc");
    uint64_t at = (uint64_t)((uintptr_t)p - (uintptr_t)base);
    if (bytes > size || at > size - bytes)
        return not_exportable(p, "the buffer runs past its allocation");
    /* The driver serves small cudaMallocs from a shared mapping, and a
     * peer's cudaIpcOpenMemHandle maps the whole of it: opening a second
     * allocation of one mapping fails ("resource already mapped").  So only
     * the allocation at a mapping's start is exported; the rest stage. */
    unsigned long long mbase = 0;
    if (get_attr && get_attr(&mbase, CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR, base) == CUDA_SUCCESS && mbase &&
        mbase != (unsigned long long)base) {
        char why[160];
        snprintf(why, sizeof why,
                 "its %zu-byte allocation shares the driver's mapping at 0x%llx with one before it (CUDA IPC opens a "
                 "mapping once per process)",
                 size, mbase);
        return not_exportable(p, why);
    }
    key_t_ k;
    memset(&k, 0, sizeof k);
    cudaError_t e = cudaIpcGetMemHandle(&k.mh, (void *)base);
    if (e != cudaSuccess)
        return not_exportable(p, cudaGetErrorString(e));
    int dev = 0;
    (void)cudaGetDevice(&dev);
    k.pid = (int32_t)getpid();
    k.device = dev;
    k.base = (uint64_t)base;
    k.size = (uint64_t)size;
    unsigned long long id = 0;
    if (!get_attr || get_attr(&id, CU_POINTER_ATTRIBUTE_BUFFER_ID, base) != CUDA_SUCCESS)
        return not_exportable(p, "no buffer id from the driver");
    memset(h, 0, sizeof *h);
    memcpy(h->key, &k, sizeof k);
    h->place[0] = (uint64_t)k.pid, h->place[1] = (uint64_t)k.device, h->place[2] = k.base;
    h->gen = id;
    *off = at;
    return DT_OK;
}

static dt_status cuda_open(const dt__ipc_handle *h, void **base)
{
    if (!dt__cuda_enter())
        return dt__cuda_take_error();
    key_t_ k;
    memcpy(&k, h->key, sizeof k);
    if (k.pid == (int32_t)getpid()) { /* ranks as threads of one process: its own memory */
        *base = (void *)(uintptr_t)k.base;
        return DT_OK;
    }
    void *p = NULL;
    cudaError_t e = cudaIpcOpenMemHandle(&p, k.mh, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return dt__fail(DT_ERR_SYSTEM, "cuda: cudaIpcOpenMemHandle of a %llu-byte buffer of process %d (GPU %d): %s",
                        (unsigned long long)k.size, (int)k.pid, (int)k.device, cudaGetErrorString(e));
    }
    *base = p;
    return DT_OK;
}

static void cuda_close(const dt__ipc_handle *h, void *base)
{
    key_t_ k;
    memcpy(&k, h->key, sizeof k);
    if (k.pid == (int32_t)getpid() || !dt__cuda_enter())
        return;
    if (cudaIpcCloseMemHandle(base) != cudaSuccess)
        (void)cudaGetLastError();
}

static dt_status cuda_ready(void)
{
    if (dt__cuda_enter())
        DT_CUDA_CHECK(cudaStreamSynchronize(dt__stream()));
    return dt__cuda_take_error();
}

static dt_status cuda_stream_create(void **stream)
{
    cudaStream_t s = NULL;
    if (dt__cuda_enter() && DT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)))
        *stream = (void *)s;
    return dt__cuda_take_error();
}

static void cuda_stream_destroy(void *stream)
{
    if (stream && dt__cuda_enter() && cudaStreamDestroy((cudaStream_t)stream) != cudaSuccess)
        (void)cudaGetLastError();
}

static dt_status cuda_copy(void *stream, void *dst, const void *src, size_t bytes)
{
    if (bytes && dt__cuda_enter())
        DT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream));
    return dt__cuda_take_error();
}

static dt_status cuda_wait(void *stream)
{
    if (dt__cuda_enter())
        DT_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)stream));
    return dt__cuda_take_error();
}

static void *cuda_dev_alloc(size_t bytes) { return dt__cuda_alloc(bytes); }
static void cuda_dev_free(void *p) { dt__cuda_free(p); }

/* ---- the reduce kernel ---- */

/* base/dtype.c's conversions, bit for bit (a NaN keeps its quiet top
 * payload bits; round to nearest even). */
__device__ static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        if (m == 0)
            return __uint_as_float(sign);
        e = 113;
        while (!(m & 0x400u)) {
            m <<= 1;
            e--;
        }
        return __uint_as_float(sign | (e << 23) | ((m & 0x3ffu) << 13));
    }
    if (e == 31)
        return __uint_as_float(sign | 0x7f800000u | (m << 13));
    return __uint_as_float(sign | ((e + 112) << 23) | (m << 13));
}

__device__ static uint16_t f32_to_f16(float f)
{
    uint32_t x = __float_as_uint(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7fffffffu;
    if (absx >= 0x7f800000u)
        return (uint16_t)(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u | ((absx >> 13) & 0x3ffu) : 0));
    if (absx >= 0x477ff000u)
        return (uint16_t)(sign | 0x7c00u);
    if (absx < 0x38800000u) {
        if (absx < 0x33000000u)
            return (uint16_t)sign;
        uint32_t e = absx >> 23, m = (absx & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e;
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1)))
            r++;
        return (uint16_t)(sign | r);
    }
    uint32_t r = (absx - 0x38000000u) >> 13, rem = absx & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1)))
        r++;
    return (uint16_t)(sign | r);
}

__device__ static float bf16_to_f32(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }

/* base/redop.c's float combine: a the lower rank's. */
__device__ static float comb_f32(float a, float b, int op)
{
    const float qnan = __uint_as_float(0x7fc00000u);
    float r;
    switch (op) {
    case DT_SUM:
    case DT_AVG: r = __fadd_rn(a, b); return r != r ? qnan : r;
    case DT_PROD: r = __fmul_rn(a, b); return r != r ? qnan : r;
    case DT_MIN: r = b < a ? b : a; return a != a || b != b ? qnan : r;
    default: r = b > a ? b : a; return a != a || b != b ? qnan : r;
    }
}

__device__ static double comb_f64(double a, double b, int op)
{
    const double qnan = __longlong_as_double(0x7ff8000000000000ll);
    double r;
    switch (op) {
    case DT_SUM:
    case DT_AVG: r = __dadd_rn(a, b); return r != r ? qnan : r;
    case DT_PROD: r = __dmul_rn(a, b); return r != r ? qnan : r;
    case DT_MIN: r = b < a ? b : a; return a != a || b != b ? qnan : r;
    default: r = b > a ? b : a; return a != a || b != b ? qnan : r;
    }
}

/* avg's division as the host's: a NaN divided keeps its payload, quieted
 * (x86's), where the GPU's division returns its own NaN (0x7fffffff: seen
 * on an H200 as bf16 7fff against the host's 7fc0). */
__device__ static float div_f32(float a, int n)
{
    float r = __fdiv_rn(a, (float)n);
    return r != r ? __uint_as_float(__float_as_uint(a) | 0x400000u) : r;
}
__device__ static double div_f64(double a, int n)
{
    double r = __ddiv_rn(a, (double)n);
    return r != r ? __longlong_as_double(__double_as_longlong(a) | 0x8000000000000ll) : r;
}

/* Each storage type: combine two stored values, divide one by n (avg). */
struct F32 {
    typedef float S;
    __device__ static S comb(S a, S b, int op) { return comb_f32(a, b, op); }
    __device__ static S div(S a, int n) { return div_f32(a, n); }
};
struct F64 {
    typedef double S;
    __device__ static S comb(S a, S b, int op) { return comb_f64(a, b, op); }
    __device__ static S div(S a, int n) { return div_f64(a, n); }
};
struct F16 {
    typedef uint16_t S;
    __device__ static S comb(S a, S b, int op) { return f32_to_f16(comb_f32(f16_to_f32(a), f16_to_f32(b), op)); }
    __device__ static S div(S a, int n) { return f32_to_f16(div_f32(f16_to_f32(a), n)); }
};
struct BF16 {
    typedef uint16_t S;
    __device__ static S comb(S a, S b, int op)
    {
        return dt__dev_f32_to_bf16(comb_f32(bf16_to_f32(a), bf16_to_f32(b), op));
    }
    __device__ static S div(S a, int n) { return dt__dev_f32_to_bf16(div_f32(bf16_to_f32(a), n)); }
};
/* Integers wrap (two's complement, through the unsigned type); min and max
 * compare signed; avg truncates toward zero, as C's division. */
template <typename T, typename U> struct Int {
    typedef T S;
    __device__ static S comb(S a, S b, int op)
    {
        switch (op) {
        case DT_SUM:
        case DT_AVG: return (S)(U)((U)a + (U)b);
        case DT_PROD: return (S)(U)((U)a * (U)b);
        case DT_MIN: return b < a ? b : a;
        default: return b > a ? b : a;
        }
    }
    __device__ static S div(S a, int n) { return (S)(a / (S)n); }
};
typedef Int<int32_t, uint32_t> I32;
typedef Int<int64_t, uint64_t> I64;
struct U8 {
    typedef uint8_t S;
    __device__ static S comb(S a, S b, int op)
    {
        unsigned x = a, y = b;
        switch (op) {
        case DT_SUM:
        case DT_AVG: return (S)(x + y);
        case DT_PROD: return (S)(x * y);
        case DT_MIN: return (S)(y < x ? y : x);
        default: return (S)(y > x ? y : x);
        }
    }
    __device__ static S div(S a, int n) { return (S)(a / n); }
};

struct srcs_t {
    const void *p[DT__IPC_MAX_SRCS];
};

template <typename K>
__global__ void fold_kernel(typename K::S *dst, srcs_t s, int n, bool acc, int64_t count, int op, int finish)
{
    typedef typename K::S S;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        int j = 0;
        S v = acc ? dst[i] : ((const S *)s.p[j++])[i];
        for (; j < n; j++)
            v = K::comb(v, ((const S *)s.p[j])[i], op);
        if (finish > 1 && op == DT_AVG)
            v = K::div(v, finish);
        dst[i] = v;
    }
}

template <typename K>
static void launch(void *stream, void *dst, const srcs_t &s, int n, bool acc, int64_t count, int op, int finish)
{
    const int threads = 256;
    fold_kernel<K><<<dt__grid(count, threads), threads, 0, (cudaStream_t)stream>>>((typename K::S *)dst, s, n, acc,
                                                                                     count, op, finish);
    DT_CUDA_LAUNCHED();
}

static dt_status cuda_reduce(void *stream, void *dst, const void *const *src, int n, bool acc, size_t count,
                             dt_dtype t, dt_redop op, int finish)
{
    if (n < 1 || n > DT__IPC_MAX_SRCS)
        return dt__fail(DT_ERR_INTERNAL, "cuda: reduce of %d sources (1 to %d)", n, DT__IPC_MAX_SRCS);
    if (count == 0 || !dt__cuda_enter())
        return dt__cuda_take_error();
    srcs_t s;
    memset(&s, 0, sizeof s);
    for (int j = 0; j < n; j++)
        s.p[j] = src[j];
    int64_t c = (int64_t)count;
    switch (t) {
    case DT_F32: launch<F32>(stream, dst, s, n, acc, c, (int)op, finish); break;
    case DT_F64: launch<F64>(stream, dst, s, n, acc, c, (int)op, finish); break;
    case DT_F16: launch<F16>(stream, dst, s, n, acc, c, (int)op, finish); break;
    case DT_BF16: launch<BF16>(stream, dst, s, n, acc, c, (int)op, finish); break;
    case DT_I32: launch<I32>(stream, dst, s, n, acc, c, (int)op, finish); break;
    case DT_I64: launch<I64>(stream, dst, s, n, acc, c, (int)op, finish); break;
    case DT_U8: launch<U8>(stream, dst, s, n, acc, c, (int)op, finish); break;
    default: return dt__fail(DT_ERR_INVALID, "cuda: reduce of an unknown dtype %d", (int)t);
    }
    return dt__cuda_take_error();
}

static const dt__devmem_ipc cuda_ipc = {
    cuda_export, cuda_open, cuda_close, cuda_ready, cuda_stream_create, cuda_stream_destroy,
    cuda_copy, cuda_reduce, cuda_wait, cuda_dev_alloc, cuda_dev_free,
};

extern "C" const dt__devmem_ipc *dt__cuda_ipc(void) { return &cuda_ipc; }
