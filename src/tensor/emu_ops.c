/* The "emu" device: the cpu backend's kernels behind device-style memory
 * that the host cannot touch.  Its allocations are host memory handed out
 * as non-canonical addresses (bit 62 set), which every entry clears before
 * calling the cpu kernel; a dereference of such a pointer anywhere else (a
 * layer, the optimizer, the trainer reading device memory as if it were
 * the host's) faults at once.  Its results are bitwise the cpu's, so a run
 * with device=emu must equal the cpu run: that tests every piece of the
 * device plumbing (uploads, downloads, the host side of the arena, the
 * loss's targets, checkpoints from device memory) on machines without a GPU.
 * x86-64 and AArch64 (48-bit user addresses) only; elsewhere dt_device_open
 * refuses it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/devmem.h"
#include "base/status.h"
#include "tensor/backend.h"
#include "tensor/cpu_kernels.h"
#include "tensor/memtrack.h"

#define TAG (1ULL << 62)

/* A device entry handed host memory is a bug a GPU reports (an invalid
 * argument, or a fault in a kernel): the emu device stops on it too. */
static void *untag(const void *p)
{
    if (!p)
        return NULL;
    if (!((uintptr_t)p & (uintptr_t)TAG)) {
        fprintf(stderr, "emu device: a device entry was handed host memory (%p); on a GPU this is an invalid "
                        "argument or a fault\n", p);
        abort();
    }
    return (void *)((uintptr_t)p & ~(uintptr_t)TAG);
}
static void *tag(void *p) { return p ? (void *)((uintptr_t)p | (uintptr_t)TAG) : NULL; }
#define F(p) ((float *)untag(p))

static dt__memtrack held; /* mem_peak */
static _Thread_local int64_t uploads; /* dt__emu_uploads_on_this_thread */

static void *emu_alloc(size_t bytes)
{
    void *h = dt__emu_heap_alloc(bytes); /* exportable (DT_DEVICE_IPC=1, emu_ipc.c), else NULL */
    void *p = tag(h ? h : dt__cpu_ops.alloc(bytes));
    dt__memtrack_add(&held, p, bytes);
    return p;
}
static void emu_free(void *p)
{
    dt__memtrack_remove(&held, p);
    if (p && !dt__emu_heap_free(untag(p)))
        dt__cpu_ops.free(untag(p));
}
static size_t emu_mem_peak(void) { return dt__memtrack_peak(&held); }
static dt_status emu_upload(void *dst, const void *src, size_t n)
{
    uploads++;
    return dt__cpu_ops.upload(untag(dst), src, n);
}
static dt_status emu_upload_async(void *dst, const void *src, size_t n, void *stream)
{
    (void)stream;
    return emu_upload(dst, src, n);
}
int64_t dt__emu_uploads_on_this_thread(void) { return uploads; }
static dt_status emu_download(void *dst, const void *src, size_t n) { return dt__cpu_ops.download(dst, untag(src), n); }
static dt_status emu_copy(void *dst, const void *src, size_t n) { return dt__cpu_ops.copy(untag(dst), untag(src), n); }
static dt_status emu_zero(void *dst, size_t n) { return dt__cpu_ops.zero(untag(dst), n); }

static void emu_gemm(dt_dtype c, int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                     int64_t lda, const float *b, int64_t ldb, float beta, float *cc, int64_t ldc)
{
    dt__cpu_ops.gemm(c, ta, tb, m, n, k, alpha, F(a), lda, F(b), ldb, beta, F(cc), ldc);
}

static void emu_gemm_bias(dt_dtype c, int ta, int tb, int64_t m, int64_t n, int64_t k, const float *a, int64_t lda,
                          const float *b, int64_t ldb, const float *bias, float *cc)
{
    dt__cpu_ops.gemm_bias(c, ta, tb, m, n, k, F(a), lda, F(b), ldb, F(bias), F(cc));
}
static void emu_gemm_grad_bias(dt_dtype c, int64_t m, int64_t n, int64_t k, const float *dy, const float *x, float *dw,
                               float *db)
{
    dt__cpu_ops.gemm_grad_bias(c, m, n, k, F(dy), F(x), F(dw), F(db));
}

/* The fallback's calls (backend.h), so that the layers' linear_grads path
 * is checked against the cpu without a GPU. */
static void emu_linear_grads(dt_dtype c, int64_t m, int64_t n, int64_t k, const float *dy, const float *x,
                             const float *w, float *dw, float *db, float *dx)
{
    if (db)
        dt__cpu_ops.gemm_grad_bias(c, m, n, k, F(dy), F(x), F(dw), F(db));
    else
        dt__cpu_ops.gemm(c, 1, 0, m, n, k, 1.0f, F(dy), m, F(x), n, 1.0f, F(dw), n);
    if (dx)
        dt__cpu_ops.gemm(c, 0, 0, k, n, m, 1.0f, F(dy), m, F(w), n, 0.0f, F(dx), n);
}

static void emu_axpy(float *y, float al, const float *x, int64_t n) { dt__cpu_ops.axpy(F(y), al, F(x), n); }
static void emu_add(float *y, const float *a, const float *b, int64_t n) { dt__cpu_ops.add(F(y), F(a), F(b), n); }
static void emu_mul(float *y, const float *a, const float *b, int64_t n) { dt__cpu_ops.mul(F(y), F(a), F(b), n); }
static void emu_scale(float *x, float al, int64_t n) { dt__cpu_ops.scale(F(x), al, n); }
static double emu_sumsq(const float *x, int64_t n) { return dt__cpu_ops.sumsq(F(x), n); }
static void emu_rows_fill(float *y, const float *r, int64_t rows, int64_t cols) { dt__cpu_ops.rows_fill(F(y), F(r), rows, cols); }
static void emu_rows_sum_add(float *s, const float *x, int64_t rows, int64_t cols) { dt__cpu_ops.rows_sum_add(F(s), F(x), rows, cols); }
static void emu_rows_add(float *y, const float *r, int64_t rows, int64_t cols) { dt__cpu_ops.rows_add(F(y), F(r), rows, cols); }
static void emu_rows_gather(float *o, const float *t, const float *ids, int64_t n, int64_t cols)
{
    dt__cpu_ops.rows_gather(F(o), F(t), F(ids), n, cols);
}
static void emu_rows_scatter_add(float *t, const float *ids, const float *x, int64_t n, int64_t cols)
{
    dt__cpu_ops.rows_scatter_add(F(t), F(ids), F(x), n, cols);
}
static void emu_ln_fwd(float *y, float *xh, float *rs, const float *x, const float *w, const float *b, int64_t rows,
                       int64_t cols, float eps)
{
    dt__cpu_ops.layernorm_fwd(F(y), F(xh), F(rs), F(x), F(w), F(b), rows, cols, eps);
}
static void emu_ln_bwd(float *dx, float *dw, float *db, const float *dy, const float *xh, const float *rs,
                       const float *w, int64_t rows, int64_t cols)
{
    dt__cpu_ops.layernorm_bwd(F(dx), F(dw), F(db), F(dy), F(xh), F(rs), F(w), rows, cols);
}
static void emu_gelu_fwd(float *y, float *t, const float *x, int64_t n) { dt__cpu_ops.gelu_fwd(F(y), F(t), F(x), n); }
static void emu_gelu_bwd(float *dx, const float *dy, const float *x, const float *t, int64_t n)
{
    dt__cpu_ops.gelu_bwd(F(dx), F(dy), F(x), F(t), n);
}
static bool emu_gelu_fwd_bf16(float *y, const float *x, int64_t n) { return dt__cpu_ops.gelu_fwd_bf16(F(y), F(x), n); }
static bool emu_gelu_bwd_bf16(float *dx, const float *dy, const float *x, int64_t n)
{
    return dt__cpu_ops.gelu_bwd_bf16(F(dx), F(dy), F(x), n);
}
static void emu_relu_fwd(float *y, const float *x, int64_t n) { dt__cpu_ops.relu_fwd(F(y), F(x), n); }
static void emu_relu_bwd(float *dx, const float *dy, const float *x, int64_t n) { dt__cpu_ops.relu_bwd(F(dx), F(dy), F(x), n); }
static void emu_dropout(float *y, float *mask, const float *x, int64_t n, uint64_t stream, float prob, float keep,
                        int64_t slice, int64_t whole, int64_t first)
{
    dt__cpu_ops.dropout_fwd(F(y), F(mask), F(x), n, stream, prob, keep, slice, whole, first);
}
static void emu_attn_fwd(dt_dtype c, float *out, float *saved, const float *qkv, int64_t B, int64_t T, int64_t H,
                         int64_t hd)
{
    dt__cpu_ops.attn_fwd(c, F(out), F(saved), F(qkv), B, T, H, hd);
}
static void emu_attn_bwd(dt_dtype c, float *dqkv, float *scratch, const float *dout, const float *qkv,
                         const float *out, const float *saved, int64_t B, int64_t T, int64_t H, int64_t hd)
{
    dt__cpu_ops.attn_bwd(c, F(dqkv), F(scratch), F(dout), F(qkv), F(out), F(saved), B, T, H, hd);
}
static dt_status emu_xent(float *loss, float *dl, const float *logits, const int32_t *targets, int64_t rows,
                          int64_t classes, int64_t counted)
{
    return dt__cpu_ops.xent(loss, F(dl), F(logits), (const int32_t *)untag(targets), rows, classes, counted);
}
static void emu_adamw(float *p, const float *g, float *m, float *v, int64_t n, float lr, float wd, float b1, float b2,
                      float eps, float bc1, float bc2)
{
    dt__cpu_ops.adamw(F(p), F(g), F(m), F(v), n, lr, wd, b1, b2, eps, bc1, bc2);
}
static void emu_sgd(float *p, const float *g, float *buf, int64_t n, float lr, float wd, float mu, bool nesterov,
                    bool first)
{
    dt__cpu_ops.sgd(F(p), F(g), F(buf), n, lr, wd, mu, nesterov, first);
}
static dt_status emu_sync(void) { return DT_OK; }

const dt_compute_ops dt__emu_ops = {
    .name = "emu",
    .host = false,
    .alloc = emu_alloc,
    .free = emu_free,
    .upload = emu_upload,
    .download = emu_download,
    .copy = emu_copy,
    .zero = emu_zero,
    .sync = emu_sync,
    .mem_info = dt__host_mem_info,
    .mem_peak = emu_mem_peak,
    .stream_create = dt__sync_token_create,
    .stream_destroy = dt__sync_token_destroy,
    .event_create = dt__sync_token_create,
    .event_destroy = dt__sync_token_destroy,
    .upload_async = emu_upload_async,
    .event_record = dt__sync_token_op,
    .stream_wait_event = dt__sync_token_op,
    .event_sync = dt__sync_token_wait,
    .host_alloc = malloc,
    .host_free = free,
    .gemm = emu_gemm,
    .gemm_bias = emu_gemm_bias,
    .gemm_grad_bias = emu_gemm_grad_bias,
    .linear_grads = emu_linear_grads,
    .axpy = emu_axpy,
    .add = emu_add,
    .mul = emu_mul,
    .scale = emu_scale,
    .sumsq = emu_sumsq,
    .rows_fill = emu_rows_fill,
    .rows_sum_add = emu_rows_sum_add,
    .rows_add = emu_rows_add,
    .rows_gather = emu_rows_gather,
    .rows_scatter_add = emu_rows_scatter_add,
    .layernorm_fwd = emu_ln_fwd,
    .layernorm_bwd = emu_ln_bwd,
    .gelu_fwd = emu_gelu_fwd,
    .gelu_bwd = emu_gelu_bwd,
    .gelu_fwd_bf16 = emu_gelu_fwd_bf16,
    .gelu_bwd_bf16 = emu_gelu_bwd_bf16,
    .relu_fwd = emu_relu_fwd,
    .relu_bwd = emu_relu_bwd,
    .dropout_fwd = emu_dropout,
    .attn_saved_floats = dt__cpu_attn_saved_floats,
    .attn_scratch_floats = dt__cpu_attn_scratch_floats,
    .attn_fwd = emu_attn_fwd,
    .attn_bwd = emu_attn_bwd,
    .xent = emu_xent,
    .adamw = emu_adamw,
    .sgd = emu_sgd,
};

/* Its memory resolver (base/devmem.h): a tagged address is emu memory;
 * staging memory is plain host memory. */
static bool emu_owns(const void *p) { return ((uintptr_t)p & (uintptr_t)TAG) != 0; }

/* Asynchronous copies that copy at the wait, the latest moment a device
 * may: a caller that reads a download's host bytes, or changes an upload's
 * source, before waiting gets wrong bits, and one that never waits leaks
 * the ticket (the sanitizer build reports it). */
typedef struct {
    bool to_host;
    void *dst;
    const void *src;
    size_t bytes;
} emu_ticket;

static dt_status emu_copy_later(bool to_host, void *dst, const void *src, size_t bytes, void **ticket)
{
    (void)(to_host ? untag(src) : untag(dst)); /* host memory as the device side stops here, as at once */
    emu_ticket *t = malloc(sizeof *t);
    if (!t)
        return dt__fail(DT_ERR_NOMEM, "emu device: out of memory for a copy's ticket");
    *t = (emu_ticket){to_host, dst, src, bytes};
    *ticket = t;
    return DT_OK;
}
static dt_status emu_download_async(void *dst, const void *src, size_t n, void **ticket)
{
    return emu_copy_later(true, dst, src, n, ticket);
}
static dt_status emu_upload_async_t(void *dst, const void *src, size_t n, void **ticket)
{
    return emu_copy_later(false, dst, src, n, ticket);
}
static dt_status emu_wait(void *ticket)
{
    emu_ticket *t = ticket;
    dt_status s = t->to_host ? emu_download(t->dst, t->src, t->bytes) : emu_upload(t->dst, t->src, t->bytes);
    free(t);
    return s;
}

const dt__devmem dt__emu_devmem = {
    .name = "emu",
    .owns = emu_owns,
    .to_host = emu_download,
    .to_device = emu_upload,
    .to_host_async = emu_download_async,
    .to_device_async = emu_upload_async_t,
    .wait = emu_wait,
};
