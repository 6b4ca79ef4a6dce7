/* What every layer constructor does: allocate the layer object with its
 * operations and name, and register parameters under "<name>.<suffix>". */
#ifndef DT_NN_LAYER_H
#define DT_NN_LAYER_H

#include <stddef.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "tensor/backend.h"

/* A zeroed object of `size` bytes, which must begin with a dt_layer, with
 * ops and a printf-formatted name; NULL with the error set when out of memory. */
void *dt__layer_new(size_t size, const dt_layer_ops *ops, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Register parameter "<l->name>.<suffix>" with the given shape in p. */
dt_status dt__layer_param(dt_params *p, const dt_layer *l, const char *suffix, int ndim, const int64_t *shape,
                          int *index);

/* The compute backend the context runs on (cpu when none is set). */
static inline const dt_compute_ops *dt__ops(const dt_ctx *ctx) { return ctx->ops ? ctx->ops : &dt__cpu_ops; }

/* A matrix product in the context's precision (dt_ctx.compute) on its
 * backend: f32, or bf16 operands with f32 sums. */
static inline void dt__gemm(const dt_ctx *ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                            const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    dt__ops(ctx)->gemm(ctx->compute, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

/* The same on packed matrices (leading dimensions from the shapes). */
static inline void dt__gemm_packed(const dt_ctx *ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                   float alpha, const float *a, const float *b, float beta, float *c)
{
    dt__gemm(ctx, trans_a, trans_b, m, n, k, alpha, a, trans_a ? m : k, b, trans_b ? k : n, beta, c, n);
}

/* C[m, n] (packed) = bias added to every row of op(A) op(B), A and B
 * packed: the backend's gemm_bias where it has one (the bits of the fill
 * and product below), else the bias in C's rows, then the product. */
static inline void dt__gemm_bias_packed(const dt_ctx *ctx, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k,
                                        const float *a, const float *b, const float *bias, float *c)
{
    const dt_compute_ops *ops = dt__ops(ctx);
    if (ops->gemm_bias) {
        ops->gemm_bias(ctx->compute, trans_a, trans_b, m, n, k, a, trans_a ? m : k, b, trans_b ? k : n, bias, c);
        return;
    }
    ops->rows_fill(c, bias, m, n);
    dt__gemm_packed(ctx, trans_a, trans_b, m, n, k, 1.0f, a, b, 1.0f, c);
}

/* A linear layer's parameter gradients from dy [k, m] and its input x
 * [k, n]: dw[m, n] += dy^T x, db[m] += dy's rows summed: the backend's
 * gemm_grad_bias where it has one (the same bits), else the two. */
static inline void dt__gemm_grad_bias(const dt_ctx *ctx, int64_t m, int64_t n, int64_t k, const float *dy,
                                      const float *x, float *dw, float *db)
{
    const dt_compute_ops *ops = dt__ops(ctx);
    if (ops->gemm_grad_bias) {
        ops->gemm_grad_bias(ctx->compute, m, n, k, dy, x, dw, db);
        return;
    }
    dt__gemm_packed(ctx, 1, 0, m, n, k, 1.0f, dy, x, 1.0f, dw);
    ops->rows_sum_add(db, dy, k, m);
}

/* A linear layer's backward products from dy [k, m], x [k, n], w [m, n]:
 * dw += dy^T x, db += dy's rows summed (db NULL: none), dx = dy w (dx
 * NULL: none).  The backend's linear_grads when it has one (one
 * conversion of dy); otherwise the products one by one, dw first.
 * ready: {the parameter of dw, that of db or -1}, handed on
 * (dt_params_grad_ready) as soon as they are complete, before dx is
 * computed when the products run one by one, so that data parallelism
 * starts sending them; NULL: the caller hands them on. */
static inline void dt__linear_grads(const dt_ctx *ctx, int64_t m, int64_t n, int64_t k, const float *dy,
                                    const float *x, const float *w, float *dw, float *db, float *dx,
                                    const int *ready)
{
    const dt_compute_ops *ops = dt__ops(ctx);
    if (ops->linear_grads)
        ops->linear_grads(ctx->compute, m, n, k, dy, x, w, dw, db, dx);
    else if (db)
        dt__gemm_grad_bias(ctx, m, n, k, dy, x, dw, db);
    else
        dt__gemm_packed(ctx, 1, 0, m, n, k, 1.0f, dy, x, 1.0f, dw);
    if (ready) {
        dt_params_grad_ready(ctx->params, ready[0]);
        if (ready[1] >= 0)
            dt_params_grad_ready(ctx->params, ready[1]);
    }
    if (!ops->linear_grads && dx)
        dt__gemm_packed(ctx, 0, 0, k, n, m, 1.0f, dy, w, 0.0f, dx);
}

/* Layers with no device kernels yet (conv2d, max pooling, EmbeddingBag)
 * run on the cpu only: DT_ERR_INVALID naming the layer on another device. */
static inline dt_status dt__cpu_only(const dt_ctx *ctx, const dt_layer *l)
{
    const dt_compute_ops *ops = dt__ops(ctx);
    return ops->host ? DT_OK
                     : dt__fail(DT_ERR_INVALID, "%s: %s layers run on the cpu only (device %s)", l->name, l->ops->kind,
                                ops->name);
}

/* y = a + b on the context's backend (dt_residual_add's device form). */
void dt__residual_add(const dt_ctx *ctx, const dt_tensor *a, const dt_tensor *b, dt_tensor *y);

/* A ReLU (other layers: nothing) that overwrites its input with its output,
 * which its backward reads instead (positive exactly where the input was: the
 * same gradient bits).  Only for an input that nothing else reads after it:
 * dt_sequential_append sets it on a ReLU right after a linear or conv2d (whose
 * outputs nobody keeps). */
void dt__relu_set_in_place(dt_layer *l);
/* A GELU (other layers: nothing) whose output is read by the next layer's
 * forward and backward alone, both over before this backward: the backward
 * writes its input gradient over that output, which lies where the
 * sequence's reclaim would otherwise copy the gradient down to (the same
 * bits, one [rows, 4 dim] copy less per GPT block).  dt_sequential_append
 * sets it on a GELU followed by a linear. */
void dt__gelu_set_grad_over_output(dt_layer *l);

#endif
