/* The CUDA backend's runtime: one GPU per process, one compute stream, one
 * cuBLASLt handle and its workspace, and the error recorder that turns an
 * asynchronous failure into the dt_status of a later call.
 *
 * C-callable (dt_device_open and src/cuda/backend_cuda.c include it); it
 * names no CUDA type.  These sources make the CUDA module
 * (libdtrain_cuda.so, module.h); in the library, src/tensor/cuda_loader.c
 * defines the entry points dt_device_open calls: it loads the module on
 * the first call and forwards, or answers why it cannot ("built without
 * CUDA", or the module's loading error).
 *
 * Rules for every kernel file of src/cuda/ (attention.cu included):
 *
 * - Stream.  All work goes on the stream of dt__cuda_stream() (cast it back:
 *   `cudaStream_t s = (cudaStream_t)dt__cuda_stream();`), never on the
 *   legacy default stream 0 and never on a stream of its own: the table's
 *   contract is that work runs in the order the engine queued it, which one
 *   stream gives for free.  (The stream is a blocking one, so stray work on
 *   stream 0 is still ordered, but slower.)
 *
 * - Entry.  A table entry starts with `if (!dt__cuda_enter()) return;`: it
 *   makes the backend's GPU current on the calling thread (cudaSetDevice is
 *   per host thread, and the engine may call from any thread) and records an
 *   error when dt__cuda_init was never called.
 *
 * - Errors.  Wrap every CUDA runtime call in DT_CUDA_CHECK(call) and every
 *   cuBLAS/cuBLASLt call in DT_CUBLAS_CHECK(call); after every kernel launch
 *   write DT_CUDA_LAUNCHED().  Each evaluates to true on success; on failure
 *   it records the first error (file:line, the call, cudaGetErrorName and
 *   cudaGetErrorString) and evaluates to false, and the caller returns
 *   early.  Nothing aborts and nothing prints.  The next table entry that
 *   returns dt_status (upload, download, copy, zero, sync, xent) returns the
 *   recorded error (through dt__fail, so dt_last_error() has the text) and
 *   clears it.  An error inside a kernel shows at the next synchronisation,
 *   which is where CUDA reports it.
 *
 * - Arguments.  Entries are trusted like the cpu ones (the layers check
 *   shapes); a count <= 0 is a no-op, since a launch of zero blocks is an
 *   error in CUDA. */
#ifndef DT_CUDA_CUDA_H
#define DT_CUDA_CUDA_H

#include <stdbool.h>
#include <stddef.h>

#include "dtrain/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Select GPU `device` for this process and create the compute stream, the
 * cuBLASLt handle and its workspace.  Idempotent for the same device;
 * DT_ERR_INVALID for another one once initialised, for an index out of
 * range (naming the count), or when no GPU or driver is visible. */
dt_status dt__cuda_init(int device);
/* "NVIDIA H200, 139.8 GiB, sm_90, 132 SMs, driver 13.0, runtime 13.0" for the
 * initialised device. */
dt_status dt__cuda_describe(char *buf, size_t n);
/* The compute stream (a cudaStream_t); NULL before dt__cuda_init. */
void *dt__cuda_stream(void);
/* Free bytes on the device (cudaMemGetInfo); 0 when unknown. */
size_t dt__cuda_free_bytes(void);
/* f32 matrix products on tensor cores with TF32 operands (10-bit mantissa)
 * when on; off (the default), they are full f32 (CUBLAS_COMPUTE_32F). */
void dt__cuda_set_tf32(bool on);
bool dt__cuda_tf32(void);
/* Its memory resolver (base/devmem.h: device buffers in communication);
 * NULL in a build without CUDA. */
struct dt__devmem;
const struct dt__devmem *dt__cuda_devmem(void);
/* Its IPC entries (base/devmem_ipc.h, src/cuda/ipc.cu: CUDA IPC, a stream per
 * communicator, the rank-order reduce kernel); NULL without CUDA. */
struct dt__devmem_ipc;
const struct dt__devmem_ipc *dt__cuda_ipc(void);

/* ---- for the kernel files ---- */

/* See "Entry" above: false (and an error recorded) when not initialised. */
bool dt__cuda_enter(void);
/* The device's multiprocessor count (132 on an H100 SXM), for grid sizes. */
int dt__cuda_sm_count(void);
/* GPUs visible to this process (0 when none is, or without a driver). */
int dt__cuda_device_count(void);
/* The cuBLASLt handle (a cublasLtHandle_t) and its workspace, to be used on
 * the compute stream only (the workspace is shared by every matmul queued
 * there, which the stream's order makes safe). */
void *dt__cuda_lt(void);
void *dt__cuda_workspace(size_t *bytes);

/* The recorders behind the macros: true when `err` (a cudaError_t or a
 * cublasStatus_t) is success, else record the first error and return false.
 * A failed runtime call's error is also cleared from cudaGetLastError, so
 * that the next launch check does not report it a second time. */
bool dt__cuda_check(int err, const char *file, int line, const char *expr);
bool dt__cublas_check(int status, const char *file, int line, const char *expr);
/* Record an error of our own (an unsupported shape, say): code and text. */
void dt__cuda_record(dt_status code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* DT_OK, or the recorded error (dt__fail'ed on this thread) and clear it. */
dt_status dt__cuda_take_error(void);

#define DT_CUDA_CHECK(call) dt__cuda_check((int)(call), __FILE__, __LINE__, #call)
#define DT_CUBLAS_CHECK(call) dt__cublas_check((int)(call), __FILE__, __LINE__, #call)
/* After a <<<...>>> launch: a bad configuration shows here at once. */
#define DT_CUDA_LAUNCHED() dt__cuda_check((int)cudaGetLastError(), __FILE__, __LINE__, "kernel launch")
#define DT_CUDA_RECORD(code, ...) dt__cuda_record((code), __FILE__, __LINE__, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif
