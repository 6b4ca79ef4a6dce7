/* The cpu backend's element-wise kernels: ReLU, GELU (tanh approximation),
 * and the product used by dropout's backward.  Compiled with -O3
 * -ffast-math (CMakeLists.txt) so that the GELU loops call glibc's
 * vectorised tanhf (libmvec): scalar tanhf was a quarter of gpt-mini's step
 * time.  The forward keeps tanh for the backward. */
#include <math.h>
#include <stddef.h>

#include "tensor/cpu_kernels.h"
#include "tensor/threads.h"

#define GRAIN 16384

typedef struct {
    const float *x, *dy, *t_in;
    float *out, *t;
} act_args;

static void relu_fwd(int64_t b, int64_t e, void *p) /* out may be x: no restrict */
{
    act_args *a = p;
    const float *x = a->x;
    float *out = a->out;
    for (int64_t i = b; i < e; i++)
        out[i] = x[i] > 0 ? x[i] : 0;
}

static void relu_bwd(int64_t b, int64_t e, void *p)
{
    act_args *a = p;
    const float *restrict x = a->x, *restrict dy = a->dy;
    float *restrict out = a->out;
    for (int64_t i = b; i < e; i++)
        out[i] = x[i] > 0 ? dy[i] : 0;
}

#define GELU_K 0.7978845608028654f /* sqrt(2/pi) */
#define GELU_C 0.044715f

static void gelu_fwd(int64_t b, int64_t e, void *p)
{
    act_args *a = p;
    const float *restrict x = a->x;
    float *restrict out = a->out, *restrict t = a->t;
    for (int64_t i = b; i < e; i++)
        t[i] = tanhf(GELU_K * (x[i] + GELU_C * x[i] * x[i] * x[i]));
    for (int64_t i = b; i < e; i++)
        out[i] = 0.5f * x[i] * (1.0f + t[i]);
}

static void gelu_bwd(int64_t b, int64_t e, void *p)
{
    act_args *a = p;
    const float *restrict x = a->x, *restrict t = a->t_in, *restrict dy = a->dy;
    float *restrict out = a->out;
    for (int64_t i = b; i < e; i++) {
        float du = GELU_K * (1.0f + 3.0f * GELU_C * x[i] * x[i]);
        out[i] = dy[i] * (0.5f * (1.0f + t[i]) + 0.5f * x[i] * (1.0f - t[i] * t[i]) * du);
    }
}

void dt__cpu_relu_fwd(float *y, const float *x, int64_t n)
{
    dt__parallel_for(n, GRAIN, relu_fwd, &(act_args){.x = x, .out = y});
}

void dt__cpu_relu_bwd(float *dx, const float *dy, const float *x, int64_t n)
{
    dt__parallel_for(n, GRAIN, relu_bwd, &(act_args){.x = x, .dy = dy, .out = dx});
}

void dt__cpu_gelu_fwd(float *y, float *t, const float *x, int64_t n)
{
    dt__parallel_for(n, GRAIN, gelu_fwd, &(act_args){.x = x, .out = y, .t = t});
}

void dt__cpu_gelu_bwd(float *dx, const float *dy, const float *x, const float *t, int64_t n)
{
    dt__parallel_for(n, GRAIN, gelu_bwd, &(act_args){.x = x, .dy = dy, .t_in = t, .out = dx});
}

void dt__cpu_mul(float *y, const float *a, const float *b, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = a[i] * b[i];
}
