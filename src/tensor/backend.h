/* The compute-backend table: every piece of arithmetic and memory the engine
 * asks of a device, in one struct of function pointers, the way
 * src/comm/backend.h is the table of the communication backends.
 *
 *     layers (src/nn), optimizers (src/optim)
 *            |  dt__ops(ctx)->layernorm_fwd(...)
 *     dt_compute_ops ── cpu   (src/tensor/cpu_*.c: OpenBLAS, own threaded loops)
 *                    └─ cuda  (src/cuda/: cuBLASLt, own kernels; DT_CUDA builds)
 *
 * Conventions for every entry:
 * - Pointers are the backend's memory (host memory for cpu, device memory
 *   for cuda), f32 unless said otherwise, row-major, packed unless a leading
 *   dimension is given.  Counts are elements, not bytes, except in the
 *   memory entries.
 * - Work is queued in order on the backend's compute stream; an entry may
 *   return before the work is done (cuda).  Only `sync`, `download`, `sumsq`
 *   and `xent` (which return a host value) wait.  A kernel's failure is
 *   reported by the next entry that returns dt_status, and by `sync`.
 * - The cpu entries are the engine's kernels as they were (bitwise the same
 *   results, the same threading); a new backend is checked against them
 *   (tests/gpu/).  Where a cuda entry's order of summation differs from the
 *   cpu one, its comment in src/cuda/ says so and gives the error bound.
 * - `compute` is the precision of a matrix product: DT_F32, or DT_BF16
 *   (operands rounded to bf16, products summed in f32).
 *
 * What a third backend needs: every entry below (none is optional but
 * gemm_bias, gemm_grad_bias and the bf16 GELU, which NULL replaces with the
 * entries they stand for), its
 * memory reachable by `upload`/`download`, and a row in dt_device_open. */
#ifndef DT_TENSOR_BACKEND_H
#define DT_TENSOR_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/base.h"
#include "dtrain/tensor.h"

typedef struct dt_compute_ops {
    const char *name; /* "cpu", "cuda" */
    bool host;        /* its memory is the host's (cpu): a layer may read it directly */

    /* ---- memory ---- */
    /* `bytes` of the backend's memory, 256-byte aligned; NULL with the error
     * set (naming the bytes asked for and the free memory) when out of it. */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p); /* NULL is a no-op; waits for queued work using p */
    dt_status (*upload)(void *dst, const void *host_src, size_t bytes);   /* host -> backend; returns when src may be reused */
    dt_status (*download)(void *host_dst, const void *src, size_t bytes); /* backend -> host; waits */
    dt_status (*copy)(void *dst, const void *src, size_t bytes);          /* within the backend; the two may overlap (memmove) */
    dt_status (*zero)(void *dst, size_t bytes);
    /* Wait for all queued work; the first error of an asynchronous kernel. */
    dt_status (*sync)(void);
    /* The device's memory: *total and *free_bytes now (cudaMemGetInfo; cpu
     * and emu: the host's), and the most bytes `alloc` held at once. */
    dt_status (*mem_info)(size_t *total, size_t *free_bytes);
    size_t (*mem_peak)(void);

    /* ---- copy streams: uploads beside the compute stream (the prefetcher's batches) ----
     * Streams and events are opaque handles; NULL as a stream is the compute
     * stream.  cuda: a non-blocking stream, cudaMemcpyAsync and events; cpu
     * and emu: the copy is done when upload_async returns, so their streams
     * and events are tokens and the waits return at once. */
    void *(*stream_create)(void); /* NULL with the error set */
    void (*stream_destroy)(void *stream);
    void *(*event_create)(void);
    void (*event_destroy)(void *event);
    /* Queued on `stream`: host_src must be host_alloc memory (page-locked:
     * truly asynchronous on cuda) and stay unchanged until an event recorded
     * after it completes (event_sync). */
    dt_status (*upload_async)(void *dst, const void *host_src, size_t bytes, void *stream);
    dt_status (*event_record)(void *event, void *stream);      /* the event completes after stream's work so far */
    dt_status (*stream_wait_event)(void *stream, void *event); /* stream's later work waits for it; the host does not */
    dt_status (*event_sync)(void *event);                      /* the host waits for it */
    void *(*host_alloc)(size_t bytes); /* page-locked host memory (cudaHostAlloc); malloc on cpu and emu */
    void (*host_free)(void *p);

    /* ---- matrix products ----
     * C[m,n] = alpha op(A) op(B) + beta C, as dt_sgemm_ld (row major, op
     * transposes when trans_* != 0, leading dimensions = row strides as
     * stored); beta = 0 ignores C's old contents. */
    void (*gemm)(dt_dtype compute, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                 const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc);
    /* Optional (NULL: the caller runs rows_fill, then gemm with alpha 1 and
     * beta 1, which this must equal bitwise): C[m, n] (packed) = bias[n]
     * added to every row of op(A) op(B) (a linear layer's forward). */
    void (*gemm_bias)(dt_dtype compute, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, const float *a,
                      int64_t lda, const float *b, int64_t ldb, const float *bias, float *c);
    /* Optional (NULL: gemm, then rows_sum_add, which this must equal
     * bitwise): a linear layer's gradients from dy [k, m] and x [k, n]
     * (packed): dw[m, n] += dy^T x, db[m] += sum over the k rows of dy. */
    void (*gemm_grad_bias)(dt_dtype compute, int64_t m, int64_t n, int64_t k, const float *dy, const float *x,
                           float *dw, float *db);
    /* Optional (NULL: the layer runs gemm_grad_bias or gemm for dw, then
     * gemm for dx, which this must equal bitwise): a linear layer's
     * backward products from dy [k, m], x [k, n] and w [m, n] (packed):
     * dw[m, n] += dy^T x; db[m] += dy's rows summed (db NULL: no bias);
     * dx[k, n] = dy w (dx NULL: not wanted).  Lets a backend that converts
     * operands (cuda's bf16) convert dy once for both products. */
    void (*linear_grads)(dt_dtype compute, int64_t m, int64_t n, int64_t k, const float *dy, const float *x,
                         const float *w, float *dw, float *db, float *dx);

    /* ---- vectors ---- */
    void (*axpy)(float *y, float alpha, const float *x, int64_t n);      /* y += alpha x */
    void (*add)(float *y, const float *a, const float *b, int64_t n);    /* y = a + b (no overlap) */
    void (*mul)(float *y, const float *a, const float *b, int64_t n);    /* y = a * b element-wise */
    void (*scale)(float *x, float alpha, int64_t n);                     /* x *= alpha */
    /* Sum of squares, summed in double (a host value: waits). */
    double (*sumsq)(const float *x, int64_t n);

    /* ---- rows of [rows, cols] matrices ---- */
    void (*rows_fill)(float *y, const float *row, int64_t rows, int64_t cols);    /* y[r,:] = row */
    void (*rows_sum_add)(float *sum, const float *x, int64_t rows, int64_t cols); /* sum[j] += sum_r x[r,j] */
    /* y[r, :] += row for every r (a position table added to each sequence). */
    void (*rows_add)(float *y, const float *row, int64_t rows, int64_t cols);
    /* out[r,:] = table[ids[r],:]; ids are whole numbers stored as floats, checked by the caller. */
    void (*rows_gather)(float *out, const float *table, const float *ids, int64_t n, int64_t cols);
    /* table[ids[r],:] += x[r,:] (rows with the same id add in r order on cpu). */
    void (*rows_scatter_add)(float *table, const float *ids, const float *x, int64_t n, int64_t cols);

    /* ---- layers ---- */
    /* LayerNorm over the last dimension (biased variance):
     * xhat = (x - mean) * rstd, y = xhat * w + b; keeps xhat and rstd[rows]. */
    void (*layernorm_fwd)(float *y, float *xhat, float *rstd, const float *x, const float *w, const float *b,
                          int64_t rows, int64_t cols, float eps);
    /* dx (may be NULL: not needed) = rstd (dy w - mean(dy w) - xhat mean(dy w xhat)) per row;
     * dw += sum_r dy xhat, db += sum_r dy. */
    void (*layernorm_bwd)(float *dx, float *dw, float *db, const float *dy, const float *xhat, const float *rstd,
                          const float *w, int64_t rows, int64_t cols);
    /* GELU, tanh approximation; t keeps tanh(sqrt(2/pi)(x + 0.044715 x^3)) for the backward. */
    void (*gelu_fwd)(float *y, float *t, const float *x, int64_t n);
    void (*gelu_bwd)(float *dx, const float *dy, const float *x, const float *t, int64_t n);
    /* Optional, for bf16 training (NULL, or false: the two above): GELU with
     * nothing kept but x, tanh recomputed in the backward, within 2e-7 of
     * the f32 entries' tanh (the next product rounds to bf16 anyway). */
    bool (*gelu_fwd_bf16)(float *y, const float *x, int64_t n);
    bool (*gelu_bwd_bf16)(float *dx, const float *dy, const float *x, int64_t n);
    void (*relu_fwd)(float *y, const float *x, int64_t n); /* y may be x (in place) */
    void (*relu_bwd)(float *dx, const float *dy, const float *x, int64_t n);
    /* Dropout's keyed mask: element i (of a [.., slice] view of a tensor whose
     * whole rows are `whole` long, this part starting at `first`; slice =
     * whole, first = 0 for a whole tensor) draws u = dt_rng_key_uniform(stream,
     * at(i)) with at(i) = (i / slice) * whole + first + i % slice; mask[i] =
     * u < prob ? 0 : keep, y[i] = x[i] * mask[i]. */
    void (*dropout_fwd)(float *y, float *mask, const float *x, int64_t n, uint64_t stream, float prob, float keep,
                        int64_t slice, int64_t whole, int64_t first);

    /* Causal multi-head attention over qkv [B, T, 3 D] (q, k, v side by side,
     * head h at columns h*hd of each; D = H hd):
     * out[B, T, D] = merge_h(softmax(Q_h K_h^T / sqrt(hd) + causal) V_h).
     * `saved` (attn_saved_floats of them) keeps what the backward needs: the
     * cpu backend the probabilities [B, H, T, T], the cuda one the row
     * log-sum-exp [B, H, T] (flash attention: no T x T matrix in memory).
     * The backward writes dqkv [B, T, 3 D] whole, using `scratch`
     * (attn_scratch_floats of them) and out (the forward's output). */
    int64_t (*attn_saved_floats)(int64_t B, int64_t H, int64_t T);
    int64_t (*attn_scratch_floats)(int64_t B, int64_t H, int64_t T, int64_t hd);
    void (*attn_fwd)(dt_dtype compute, float *out, float *saved, const float *qkv, int64_t B, int64_t T, int64_t H,
                     int64_t hd);
    void (*attn_bwd)(dt_dtype compute, float *dqkv, float *scratch, const float *dout, const float *qkv,
                     const float *out, const float *saved, int64_t B, int64_t T, int64_t H, int64_t hd);

    /* Mean softmax cross-entropy of logits [rows, classes] against targets
     * (int32, the backend's memory, checked by the caller: -1 = ignore, else
     * 0..classes-1), `counted` of them not -1.  *loss (host) = mean over the
     * counted rows of lse - z[target], summed in double in row order on cpu;
     * dlogits (NULL: loss only) = (softmax - onehot) / counted, rows of -1
     * zero.  Waits (the loss is a host value). */
    dt_status (*xent)(float *loss, float *dlogits, const float *logits, const int32_t *targets, int64_t rows,
                      int64_t classes, int64_t counted);

    /* ---- optimizer updates over flat ranges (src/optim/optimizer.c's formulas) ---- */
    /* AdamW: p *= 1 - lr wd; m += (g - m)(1 - b1); v = v b2 + (1 - b2) g^2;
     * p -= (lr / bc1) m / (sqrt(v) / bc2_sqrt + eps). */
    void (*adamw)(float *p, const float *g, float *m, float *v, int64_t n, float lr, float weight_decay, float beta1,
                  float beta2, float eps, float bc1, float bc2_sqrt);
    /* SGD as torch.optim.SGD: d = g + wd p; buf = first ? d : mu buf + d (mu > 0);
     * p -= lr (nesterov ? d + mu buf : buf), or p -= lr d when mu = 0 (buf unused). */
    void (*sgd)(float *p, const float *g, float *buf, int64_t n, float lr, float weight_decay, float momentum,
                bool nesterov, bool first);
} dt_compute_ops;

/* `count` floats of host memory that live until the arena's next reset
 * (64-byte aligned): the layers' saved records, which the host reads and
 * writes, on an arena whose memory is a device's (dt_arena_create_on); the
 * arena itself (dt_arena_alloc) on the host's. */
void *dt__arena_host(dt_arena *a, int64_t count);
/* The later of two positions in the arena (a mark of {NULL, 0} is its start). */
dt_arena_mark dt__arena_later(const dt_arena *a, dt_arena_mark x, dt_arena_mark y);
/* The bytes between mark m and p when p lies in m's chunk at or after it,
 * else SIZE_MAX. */
size_t dt__arena_gap(const dt_arena *a, dt_arena_mark m, const void *p);
/* The mark right after [p, p + bytes) (bytes rounded up as the arena rounds
 * its allocations), when that lies in one chunk and was handed out. */
bool dt__arena_mark_after(const dt_arena *a, const void *p, size_t bytes, dt_arena_mark *out);

/* The cpu backend (always built) and the cuda backend (NULL in a build
 * without DT_CUDA). */
extern const dt_compute_ops dt__cpu_ops;
/* The test device "emu" (emu_ops.c): the cpu kernels behind memory the host
 * cannot dereference, to test the device plumbing without a GPU. */
extern const dt_compute_ops dt__emu_ops;
/* The emu device's memory resolver (base/devmem.h), registered by
 * dt_device_open("emu"). */
struct dt__devmem;
extern const struct dt__devmem dt__emu_devmem;
/* Its IPC entries (base/devmem_ipc.h, emu_ipc.c), and the shared heap its
 * allocations come from under DT_DEVICE_IPC=1: alloc returns NULL when the
 * heap is off or full (plain memory then); free says whether p was the
 * heap's (untagged pointers). */
struct dt__devmem_ipc;
extern const struct dt__devmem_ipc dt__emu_ipc;
void *dt__emu_heap_alloc(size_t bytes);
bool dt__emu_heap_free(void *p);
const dt_compute_ops *dt__cuda_ops(void);

/* Shared by the cpu and emu tables (cpu_ops.c): the host's memory, and the
 * stream and event entries of a backend whose copies are synchronous. */
dt_status dt__host_mem_info(size_t *total, size_t *free_bytes);
void *dt__sync_token_create(void);
void dt__sync_token_destroy(void *token);
dt_status dt__sync_token_op(void *a, void *b);
dt_status dt__sync_token_wait(void *token);
/* The uploads (upload and upload_async) the emu device ran on the calling
 * thread: the tests check on which thread a batch was copied in. */
int64_t dt__emu_uploads_on_this_thread(void);

#endif
