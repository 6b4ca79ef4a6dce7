/* The cpu backend's LayerNorm (moved unchanged from src/nn/layernorm.c).
 * Rows are independent, so forward and the input gradient split by rows;
 * the weight and bias gradients sum over rows, so they split by columns and
 * add rows in order (the same bits for any thread count). */
#include <math.h>
#include <stddef.h>

#include "tensor/cpu_kernels.h"
#include "tensor/threads.h"

typedef struct {
    const float *x, *dy, *w, *b, *xhat_in, *rstd_in;
    float *y, *dx, *dw, *db, *xhat, *rstd;
    int64_t rows, D;
    float eps;
} ln_args;

#define GRAIN_ROWS 16

/* Row sums in LANES independent f32 partial sums (a fixed order, so the same
 * bits every time; vectorised), added together in double. */
#define LANES 16

static double lane_sum(const float *x, int64_t n)
{
    float part[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++)
            part[l] += x[i + l];
    double s = 0;
    for (; i < n; i++)
        s += x[i];
    for (int l = 0; l < LANES; l++)
        s += part[l];
    return s;
}

static double lane_sqdev(const float *x, int64_t n, float mean)
{
    float part[LANES] = {0};
    int64_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++)
            part[l] += (x[i + l] - mean) * (x[i + l] - mean);
    double s = 0;
    for (; i < n; i++)
        s += (double)(x[i] - mean) * (x[i] - mean);
    for (int l = 0; l < LANES; l++)
        s += part[l];
    return s;
}

static void forward_rows(int64_t r0, int64_t r1, void *p)
{
    ln_args *a = p;
    int64_t D = a->D;
    const float *restrict w = a->w, *restrict b = a->b;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict xr = a->x + r * D;
        float mean = (float)(lane_sum(xr, D) / (double)D);
        double var = lane_sqdev(xr, D, mean) / (double)D;
        float rstd = (float)(1.0 / sqrt(var + a->eps));
        a->rstd[r] = rstd;
        float *restrict xh = a->xhat + r * D, *restrict y = a->y + r * D;
        for (int64_t i = 0; i < D; i++) {
            float h = (xr[i] - mean) * rstd;
            xh[i] = h;
            y[i] = h * w[i] + b[i];
        }
    }
}

void dt__cpu_layernorm_fwd(float *y, float *xhat, float *rstd, const float *x, const float *w, const float *b,
                           int64_t rows, int64_t cols, float eps)
{
    ln_args a = {.x = x, .w = w, .b = b, .y = y, .xhat = xhat, .rstd = rstd, .rows = rows, .D = cols, .eps = eps};
    dt__parallel_for(rows, GRAIN_ROWS, forward_rows, &a);
}

static void input_grad_rows(int64_t r0, int64_t r1, void *p)
{
    ln_args *a = p;
    int64_t D = a->D;
    const float *restrict w = a->w;
    for (int64_t r = r0; r < r1; r++) {
        const float *restrict g = a->dy + r * D, *restrict h = a->xhat_in + r * D;
        float pgw[LANES] = {0}, pgwh[LANES] = {0};
        int64_t i = 0;
        for (; i + LANES <= D; i += LANES)
            for (int l = 0; l < LANES; l++) {
                float gw = g[i + l] * w[i + l];
                pgw[l] += gw;
                pgwh[l] += gw * h[i + l];
            }
        double mean_gw = 0, mean_gwh = 0;
        for (; i < D; i++) {
            float gw = g[i] * w[i];
            mean_gw += gw;
            mean_gwh += gw * h[i];
        }
        for (int l = 0; l < LANES; l++) {
            mean_gw += pgw[l];
            mean_gwh += pgwh[l];
        }
        float mgw = (float)(mean_gw / (double)D), mgwh = (float)(mean_gwh / (double)D), rstd = a->rstd_in[r];
        float *restrict dx = a->dx + r * D;
        for (int64_t j = 0; j < D; j++)
            dx[j] = rstd * (g[j] * w[j] - mgw - h[j] * mgwh);
    }
}

static void param_grad_cols(int64_t c0, int64_t c1, void *p)
{
    ln_args *a = p;
    int64_t D = a->D;
    float *restrict dw = a->dw, *restrict db = a->db;
    for (int64_t r = 0; r < a->rows; r++) {
        const float *restrict g = a->dy + r * D, *restrict h = a->xhat_in + r * D;
        for (int64_t i = c0; i < c1; i++) {
            dw[i] += g[i] * h[i];
            db[i] += g[i];
        }
    }
}

void dt__cpu_layernorm_bwd(float *dx, float *dw, float *db, const float *dy, const float *xhat, const float *rstd,
                           const float *w, int64_t rows, int64_t cols)
{
    ln_args a = {.dy = dy, .xhat_in = xhat, .rstd_in = rstd, .w = w, .dx = dx, .dw = dw, .db = db, .rows = rows,
                 .D = cols};
    if (dx)
        dt__parallel_for(rows, GRAIN_ROWS, input_grad_rows, &a);
    dt__parallel_for(cols, rows >= 1024 ? 16 : cols, param_grad_cols, &a); /* split only when there are many rows */
}
