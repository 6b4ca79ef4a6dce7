/* The CUDA backend's runtime (cuda.h): device selection, the compute
 * stream, the cuBLASLt handle and workspace, and the first-error recorder. */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/common.cuh"

#define WORKSPACE_BYTES ((size_t)32 << 20) /* cuBLASLt's split-k and stream-k kernels want some */

/* Written once under `lock` by dt__cuda_init; ready_device is published
 * last (release), so a thread that reads it >= 0 (acquire) sees the rest. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int ready_device = -1; /* the device, once everything below exists */
static cudaStream_t stream;
static cublasLtHandle_t lt;
static void *workspace;
static int sm_count = 1;
static bool tf32; /* read and written with __atomic builtins */

/* The first unreported error. */
static pthread_mutex_t err_lock = PTHREAD_MUTEX_INITIALIZER;
static dt_status err_code = DT_OK;
static char err_text[DT__ERROR_LEN];

/* "src/cuda/gemm.cu" rather than the build machine's absolute path. */
static const char *short_path(const char *file)
{
    const char *s = strstr(file, "src/");
    return s ? s : file;
}

static void record_text(dt_status code, const char *text)
{
    pthread_mutex_lock(&err_lock);
    if (err_code == DT_OK) {
        err_code = code;
        snprintf(err_text, sizeof err_text, "%s", text);
    }
    pthread_mutex_unlock(&err_lock);
}

void dt__cuda_record(dt_status code, const char *file, int line, const char *fmt, ...)
{
    char what[DT__ERROR_LEN / 2], text[DT__ERROR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(text, sizeof text, "cuda: %s (%s:%d)", what, short_path(file), line);
    record_text(code, text);
}

static dt_status code_of(cudaError_t e)
{
    switch (e) {
    case cudaErrorMemoryAllocation: return DT_ERR_NOMEM;
    case cudaErrorInvalidValue:
    case cudaErrorInvalidConfiguration:
    case cudaErrorInvalidDevicePointer:
    case cudaErrorNoDevice:
    case cudaErrorInvalidDevice:
    case cudaErrorInsufficientDriver: return DT_ERR_INVALID;
    default: return DT_ERR_SYSTEM;
    }
}

bool dt__cuda_check(int err, const char *file, int line, const char *expr)
{
    cudaError_t e = (cudaError_t)err;
    if (e == cudaSuccess)
        return true;
    (void)cudaGetLastError(); /* a non-sticky error would otherwise show again at the next launch check */
    dt__cuda_record(code_of(e), file, line, "%s: %s: %s", expr, cudaGetErrorName(e), cudaGetErrorString(e));
    return false;
}

bool dt__cublas_check(int status, const char *file, int line, const char *expr)
{
    cublasStatus_t s = (cublasStatus_t)status;
    if (s == CUBLAS_STATUS_SUCCESS)
        return true;
    dt_status code = s == CUBLAS_STATUS_ALLOC_FAILED       ? DT_ERR_NOMEM
                     : s == CUBLAS_STATUS_INVALID_VALUE || s == CUBLAS_STATUS_NOT_SUPPORTED ? DT_ERR_INVALID
                                                                                            : DT_ERR_SYSTEM;
    (void)cudaGetLastError();
    dt__cuda_record(code, file, line, "%s: %s", expr, cublasLtGetStatusString(s));
    return false;
}

dt_status dt__cuda_take_error(void)
{
    pthread_mutex_lock(&err_lock);
    dt_status code = err_code;
    char text[DT__ERROR_LEN];
    memcpy(text, err_text, sizeof text);
    err_code = DT_OK;
    err_text[0] = '\0';
    pthread_mutex_unlock(&err_lock);
    return code == DT_OK ? DT_OK : dt__fail(code, "%s", text);
}

/* Which device this host thread has made current (cudaSetDevice is per
 * thread); -1 for none yet. */
static thread_local int thread_device = -1;

static int ready(void) { return __atomic_load_n(&ready_device, __ATOMIC_ACQUIRE); }

bool dt__cuda_enter(void)
{
    int d = ready();
    if (d < 0) {
        record_text(DT_ERR_INVALID, "cuda: the backend was used before dt__cuda_init");
        return false;
    }
    if (thread_device != d) {
        if (!DT_CUDA_CHECK(cudaSetDevice(d)))
            return false;
        thread_device = d;
    }
    return true;
}

static dt_status fail_rt(cudaError_t e, const char *what)
{
    (void)cudaGetLastError();
    return dt__fail(code_of(e), "cuda: %s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

/* Create what init owns, on `device`; on failure undo in reverse order. */
static dt_status init_locked(int device)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return dt__fail(DT_ERR_INVALID, "cuda: no GPU visible (cudaGetDeviceCount: %s: %s)", cudaGetErrorName(e),
                        cudaGetErrorString(e));
    }
    if (count == 0)
        return dt__fail(DT_ERR_INVALID, "cuda: no GPU visible (cudaGetDeviceCount: 0 devices)");
    if (device < 0) { /* "cuda": the GPU of this rank on its host, ranks sharing GPUs when they outnumber them */
        const char *lr = getenv("DT_LOCAL_RANK");
        long r = lr && *lr ? strtol(lr, NULL, 10) : 0;
        device = (int)((r > 0 ? r : 0) % count);
    }
    if (device < 0 || device >= count)
        return dt__fail(DT_ERR_INVALID, "cuda: device %d asked for, but %d GPU%s visible (0..%d)", device, count,
                        count == 1 ? " is" : "s are", count - 1);
    if ((e = cudaSetDevice(device)) != cudaSuccess)
        return fail_rt(e, "cudaSetDevice");
    int sms = 0;
    if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device)) != cudaSuccess)
        return fail_rt(e, "cudaDeviceGetAttribute");
    /* A blocking stream: work that strays onto the legacy stream 0 stays ordered with ours. */
    if ((e = cudaStreamCreate(&stream)) != cudaSuccess)
        return fail_rt(e, "cudaStreamCreate");
    cublasStatus_t s = cublasLtCreate(&lt);
    if (s != CUBLAS_STATUS_SUCCESS) {
        cudaStreamDestroy(stream);
        return dt__fail(s == CUBLAS_STATUS_ALLOC_FAILED ? DT_ERR_NOMEM : DT_ERR_SYSTEM, "cuda: cublasLtCreate: %s",
                        cublasLtGetStatusString(s));
    }
    if ((e = cudaMalloc(&workspace, WORKSPACE_BYTES)) != cudaSuccess) {
        dt_status st = fail_rt(e, "cudaMalloc of the 32 MiB cuBLASLt workspace");
        cublasLtDestroy(lt);
        cudaStreamDestroy(stream);
        return st;
    }
    sm_count = sms > 0 ? sms : 1;
    __atomic_store_n(&ready_device, device, __ATOMIC_RELEASE);
    return DT_OK;
}

dt_status dt__cuda_init(int device)
{
    pthread_mutex_lock(&lock);
    dt_status s = DT_OK;
    int d = ready();
    if (d >= 0 && device >= 0 && d != device)
        s = dt__fail(DT_ERR_INVALID, "cuda: already initialised on device %d (asked for %d)", d, device);
    else if (d < 0)
        s = init_locked(device);
    pthread_mutex_unlock(&lock);
    if (s == DT_OK && !dt__cuda_enter()) /* current on this thread too (a second init may come from another) */
        s = dt__cuda_take_error();
    return s;
}

dt_status dt__cuda_describe(char *buf, size_t n)
{
    int d = ready();
    if (d < 0)
        return dt__fail(DT_ERR_INVALID, "cuda: describe before dt__cuda_init");
    cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, d);
    if (e != cudaSuccess)
        return fail_rt(e, "cudaGetDeviceProperties");
    int driver = 0, runtime = 0;
    if ((e = cudaDriverGetVersion(&driver)) != cudaSuccess || (e = cudaRuntimeGetVersion(&runtime)) != cudaSuccess)
        return fail_rt(e, "cudaDriverGetVersion");
    snprintf(buf, n, "%s, %.1f GiB, sm_%d%d, %d SMs, driver %d.%d, runtime %d.%d", p.name,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), p.major, p.minor, p.multiProcessorCount,
             driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
    return DT_OK;
}

void *dt__cuda_stream(void) { return ready() >= 0 ? (void *)stream : NULL; }

size_t dt__cuda_free_bytes(void)
{
    size_t free_b = 0, total = 0;
    if (ready() < 0 || !dt__cuda_enter())
        return 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return free_b;
}

void dt__cuda_set_tf32(bool on) { __atomic_store_n(&tf32, on, __ATOMIC_RELAXED); }
bool dt__cuda_tf32(void) { return __atomic_load_n(&tf32, __ATOMIC_RELAXED); }
int dt__cuda_sm_count(void) { return sm_count; }

int dt__cuda_device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return count;
}
void *dt__cuda_lt(void) { return (void *)lt; }

void *dt__cuda_workspace(size_t *bytes)
{
    *bytes = WORKSPACE_BYTES;
    return workspace;
}
