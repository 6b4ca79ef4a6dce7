/* dtrain tensors and compute kernels.
 *
 * Tensors are contiguous row-major f32 views (the data is owned elsewhere: a
 * parameter buffer, an activation arena, the caller).  Matrix products go to
 * OpenBLAS; element-wise kernels run on dtrain's compute threads.  The thread
 * count comes from dt_set_threads (the trainer's threads key), else DT_THREADS,
 * else the cores available to the process divided among the ranks on its host
 * (dt_threads_default).  Large matrix products are split
 * across those threads, each part one single-threaded OpenBLAS call, so
 * OpenBLAS's own pool never competes with dtrain's for the cores. */
#ifndef DTRAIN_TENSOR_H
#define DTRAIN_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dtrain/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_MAX_DIMS 4

typedef struct {
    float *data;
    int ndim;
    int64_t shape[DT_MAX_DIMS];
} dt_tensor;

/* A view of `data` with the given shape (ndim 1..DT_MAX_DIMS). */
dt_tensor dt_tensor_view(float *data, int ndim, const int64_t *shape);
int64_t dt_tensor_numel(const dt_tensor *t);

/* ---- devices: where tensors live and kernels run ----
 * A device is a compute backend (src/tensor/backend.h): "cpu" (the host:
 * OpenBLAS and dtrain's threaded kernels) or "cuda" (an NVIDIA GPU: cuBLASLt
 * and dtrain's CUDA kernels, in builds with DT_CUDA).  Every tensor, arena
 * and parameter buffer belongs to one device; layers run on the device of
 * the model they belong to (dt_model_to_device). */
typedef struct dt_compute_ops dt_device;
/* "cpu", "cuda" (DT_LOCAL_RANK's GPU modulo the GPUs visible, GPU 0 when
 * unset) or "cuda:N"; or "emu", a test device: the cpu kernels behind
 * memory the host cannot dereference, bitwise the cpu's results, so that
 * the device code paths are tested where there is no GPU.  DT_ERR_INVALID naming the problem: an unknown name, a build
 * without CUDA (configure with -DDT_CUDA=ON), no GPU or driver, an index out
 * of range.  The device lives as long as the process. */
dt_status dt_device_open(const char *spec, const dt_device **out);
/* "cpu" or "cuda". */
const char *dt_device_name(const dt_device *d);
/* True for the host (its memory is plain pointers). */
bool dt_device_is_host(const dt_device *d);
/* Devices of a kind this process can use: the GPUs visible for "cuda" (0
 * in a build without CUDA, or without a GPU); 1 for "cpu" and "emu". */
int dt_device_count(const char *kind);
/* One line naming the hardware: "NVIDIA H200, 139.8 GiB, sm_90, ..." or the CPU's BLAS kernels. */
dt_status dt_device_describe(const dt_device *d, char *buf, size_t n);
/* Wait for the device's queued work; the first error of an asynchronous kernel. */
dt_status dt_device_sync(const dt_device *d);
/* The device's memory: *total and *free_bytes now (cuda: cudaMemGetInfo;
 * cpu and emu: the host's), and *peak (may be NULL), the most bytes the
 * device's allocator held at once so far (0 on the cpu, which does not
 * count). */
dt_status dt_device_memory(const dt_device *d, size_t *total, size_t *free_bytes, size_t *peak);
/* cuda: let f32 matrix products use TF32 tensor cores (off by default:
 * f32 results then agree with the cpu to f32 rounding).  No-op on cpu. */
dt_status dt_device_set_tf32(const dt_device *d, bool on);
/* With DT_KERNEL_PROFILE=1 a device's entries (emu, cuda) are each timed
 * between waits for the device: print the `top` (0: all) costliest kinds of
 * call (a matrix product's precision and shape with its TFLOP/s) to f.
 * False when nothing was profiled. */
bool dt_device_profile_print(FILE *f, int top);
/* `bytes` of the device's memory (NULL device: the host's), 256-byte
 * aligned: what the communication calls take as device buffers.  NULL with
 * the error set, naming the bytes asked for and the memory free, when out
 * of it.  dt_device_free(d, NULL) is a no-op; it waits for queued work
 * using the buffer. */
void *dt_device_alloc(const dt_device *d, size_t bytes);
void dt_device_free(const dt_device *d, void *p);
/* Copies between host memory and the device's (plain memcpy on cpu). */
dt_status dt_device_upload(const dt_device *d, void *dst, const void *host_src, size_t bytes);
dt_status dt_device_download(const dt_device *d, void *host_dst, const void *src, size_t bytes);

/* ---- activation arena: a bump allocator reset once per step ---- */
typedef struct dt_arena dt_arena;
dt_status dt_arena_create(dt_arena **out);
/* An arena whose memory is the device's (NULL or cpu: the host's, as dt_arena_create). */
dt_status dt_arena_create_on(const dt_device *d, dt_arena **out);
/* Uninitialised floats valid until the next reset; NULL when out of memory.
 * Earlier allocations never move.  Most layers overwrite their whole output,
 * so the arena does not pay to clear it; dt_arena_calloc clears. */
float *dt_arena_alloc(dt_arena *a, int64_t count);
float *dt_arena_calloc(dt_arena *a, int64_t count);
void dt_arena_reset(dt_arena *a);
/* A position in the arena: rewinding to it frees everything allocated since
 * (recomputation frees a block's activations this way; a pipeline keeps one
 * arena per micro-batch in flight instead).  Marks nest like a stack. */
typedef struct {
    const void *chunk;
    size_t used;
} dt_arena_mark;
dt_arena_mark dt_arena_get_mark(const dt_arena *a);
void dt_arena_rewind(dt_arena *a, dt_arena_mark m);
/* True when p was allocated after mark m, so that a rewind to m frees it. */
bool dt_arena_since(const dt_arena *a, dt_arena_mark m, const void *p);
size_t dt_arena_bytes_in_use(const dt_arena *a);
/* The most bytes in use at once since creation or dt_arena_reset_peak: the
 * activation memory a step needed (what recomputation saves). */
size_t dt_arena_peak_bytes(const dt_arena *a);
void dt_arena_reset_peak(dt_arena *a);
/* Over every host arena of the process (device arenas not counted): the
 * bytes their chunks have ever handed out, which is what the arenas add to
 * the resident set (a chunk's pages stay once touched, through resets and
 * rewinds, until the arena is destroyed). */
size_t dt_arena_host_touched_bytes(void);
void dt_arena_destroy(dt_arena *a);
/* Companion k (0 <= k < DT_ARENA_COMPANIONS) of a: an arena on a's device,
 * created on the first call, reset and destroyed with a, whose bytes count
 * in a's bytes in use and peak.  Each call also records, at a's current
 * position, where the companion stands: rewinding a to a mark taken at or
 * before that position rewinds the companion back there, as if what it
 * allocated since had been allocated in a.  For work that interleaves
 * several stacks of allocations within one of a's (a micro-batch's rows run
 * as copies, dt_sequential_set_copies).  NULL with the error set for a bad
 * k, a companion as a, or no memory. */
#define DT_ARENA_COMPANIONS 64
dt_arena *dt_arena_link(dt_arena *a, int k);

/* ---- compute threads ---- */
/* 0 = the cores available to this process (sched_getaffinity). */
dt_status dt_set_threads(int n);
int dt_get_threads(void);
/* CPUs in this process's affinity mask, at least 1. */
int dt_cores_available(void);
/* 1 when this process may use fewer CPUs than its parent: its launcher bound
 * it (dtrun --bind auto, mpirun, srun), so those CPUs are this rank's own. */
int dt_cpus_bound(void);
/* The ranks on this host as the launcher says: DT_LOCAL_WORLD_SIZE (dtrun),
 * OMPI_COMM_WORLD_LOCAL_SIZE (mpirun), MPI_LOCALNRANKS (PMI) or, under srun,
 * the step's tasks on this node (SLURM_STEP_TASKS_PER_NODE and SLURM_NODEID);
 * 1 when none says (or DT_LOCAL_WORLD_SIZE is malformed). */
int dt_local_ranks(void);
/* The thread count when none is set: DT_THREADS when set above 0; else the
 * cores available divided by the ranks on this host (dt_local_ranks), at
 * least 1 (torchrun's rule); a process its launcher bound (dt_cpus_bound)
 * takes its CPUs.  DT_ERR_INVALID naming a malformed DT_THREADS or
 * DT_LOCAL_WORLD_SIZE.  *source (may be NULL) says which rule gave it. */
dt_status dt_threads_default(int *n, const char **source);

/* OpenBLAS 0.3.21 takes AMD Zen 4 for Haswell and runs AVX2 kernels (1.7x
 * slower on gpt-mini), and a CPU model it does not know (Intel Emerald
 * Rapids, model 207) for Prescott: SSE3 kernels, 4.9x slower.  It chooses
 * its kernels when it is loaded, from OPENBLAS_CORETYPE.  This returns the
 * value to set before the process starts ("SKYLAKEX" on a CPU with AVX-512
 * F/BW/DQ/VL while OpenBLAS picked kernels without AVX-512; "HASWELL" on a
 * CPU with AVX2 and FMA while it picked kernels without them), or NULL when
 * there is nothing to gain, OPENBLAS_CORETYPE
 * is set (the user's choice, whatever it names, stands) or DT_BLAS_REEXEC is
 * 0.  DT_BLAS_REEXEC_FORCE=1 (tests) returns the core OpenBLAS picked where
 * it would otherwise return NULL: the same kernels, through the same path. */
const char *dt_blas_coretype_hint(void);
/* What OpenBLAS runs, read back from it rather than assumed: its kernel set
 * (openblas_get_corename, e.g. "SkylakeX" or "Haswell"), its own thread
 * count and its build string (openblas_get_config).  Either pointer may be
 * NULL; the strings are OpenBLAS's own and live as long as the process. */
void dt_blas_describe(const char **core, int *threads, const char **config);

/* ---- kernels ---- */
/* C[m,n] = alpha * op(A) op(B) + beta * C, row major; op transposes when trans_* != 0.
 * A is m x k (k x m when transposed), B is k x n (n x k when transposed). */
void dt_sgemm(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
              const float *b, float beta, float *c);
/* The same with explicit leading dimensions (row strides of A, B and C as
 * stored), for operating on column slices of wider matrices. */
void dt_sgemm_ld(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* C = alpha * op(A) op(B) + beta * C like dt_sgemm_ld, with A and B rounded to
 * bf16 (round to nearest even, as dt_f32_to_bf16) and the products summed in
 * f32: the GEMM of bf16 mixed-precision training.  The conversion is fused
 * into packing, so the inputs stay f32 (activations, master weights).  Any
 * m, n, k (edges padded with zeros), all four transposes, strides; beta = 0
 * ignores C's old contents (NaN included), as BLAS does.
 * Kernels (dt_bf16_gemm_kernel): AMX tiles (TDPBF16PS) where the CPU has
 * AMX-BF16 and the kernel grants the tile state, else AVX512_BF16
 * (VDPBF16PS), else emulated; oneDNN's matmul primitive only when
 * DT_BF16_GEMM=onednn asks for it.  Numerics: each element's sum of exact
 * bf16 products runs over k with f32 fused multiply-adds (in order on the
 * own kernels, in blocks of k on oneDNN's), so |error| <= about k * 2^-24 * sum |a_i b_i|
 * beyond the inputs' rounding; subnormal bf16 inputs count as zero
 * (emulated: kept).  Results are bitwise the same for any thread count (the
 * split of m and n does not change a sum's order; oneDNN's parts are fixed
 * by the shape), though not across kernels. */
void dt_sgemm_bf16_ld(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                      int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
/* The kernel dt_sgemm_bf16_ld runs on this CPU: "amx", "avx512_bf16" or
 * "emulated" (inputs rounded to bf16, then dt_sgemm_ld: same numerics, no
 * speed-up), or "onednn" (oneDNN's matmul for every shape,
 * DT_BF16_GEMM=onednn).  Chosen once per process, the best this CPU allows
 * in that order (auto, native); DT_BF16_GEMM=onednn, amx, avx512_bf16 or
 * emulated forces one, and a forced kernel this machine or build cannot run
 * is refused with a warning naming the reason, the emulation running
 * instead. */
const char *dt_bf16_gemm_kernel(void);
void dt_vec_zero(float *x, int64_t n);
void dt_vec_copy(float *dst, const float *src, int64_t n);
/* y += alpha * x */
void dt_vec_axpy(float *y, float alpha, const float *x, int64_t n);
/* y = a + b in one pass; y must not overlap a or b. */
void dt_vec_add(float *y, const float *a, const float *b, int64_t n);
void dt_vec_scale(float *x, float alpha, int64_t n);
/* Sum of squares in double (for norms), summed over fixed blocks in block
 * order: bitwise the same for any thread count. */
double dt_vec_sumsq(const float *x, int64_t n);

/* Row kernels on row-major [rows, cols] matrices.  Each is threaded and gives
 * the same bits for any thread count (sums over rows add in row order). */
/* y[r, :] = row for every r (a bias broadcast). */
void dt_rows_fill(float *y, const float *row, int64_t rows, int64_t cols);
/* sum[j] += sum over r of x[r, j] (a bias gradient). */
void dt_rows_sum_add(float *sum, const float *x, int64_t rows, int64_t cols);
/* out[r, :] = table[ids[r], :]; ids are whole numbers stored as floats, which
 * the caller has checked against the table's row count. */
void dt_rows_gather(float *out, const float *table, const float *ids, int64_t n, int64_t cols);
/* table[ids[r], :] += x[r, :] for r in order. */
void dt_rows_scatter_add(float *table, const float *ids, const float *x, int64_t n, int64_t cols);

/* ---- half-precision storage (f16 or bf16) ----
 * Compact copies of f32 data for the wire (gradient compression) and for
 * storage; arithmetic stays in f32.  Conversions round to nearest even, keep
 * infinities and NaNs, and turn f32 values beyond the f16 range into
 * infinities.  `half` must be DT_F16 or DT_BF16 (else DT_ERR_INVALID). */
typedef struct {
    uint16_t *data;
    dt_dtype dtype; /* DT_F16 or DT_BF16 */
    int ndim;
    int64_t shape[DT_MAX_DIMS];
} dt_tensor_half;

dt_status dt_vec_to_half(uint16_t *dst, const float *src, int64_t n, dt_dtype half);
dt_status dt_vec_from_half(float *dst, const uint16_t *src, int64_t n, dt_dtype half);
/* dst += src, the sum in f32. */
dt_status dt_vec_add_half(float *dst, const uint16_t *src, int64_t n, dt_dtype half);
/* Convert a whole tensor; the destination's data must hold numel elements,
 * and it takes the source's shape. */
dt_status dt_tensor_to_half(const dt_tensor *src, dt_dtype half, dt_tensor_half *dst);
dt_status dt_tensor_from_half(const dt_tensor_half *src, dt_tensor *dst);

#ifdef __cplusplus
}
#endif
#endif
