/* conv2d through oneDNN's convolution primitives (src/nn/conv_dnnl.c), used
 * by src/nn/conv.c when the build found oneDNN (DT_HAVE_DNNL) and DT_CONV
 * does not ask for im2col.  Plain NCHW / OIHW f32 tensors throughout. */
#ifndef DT_NN_CONV_DNNL_H
#define DT_NN_CONV_DNNL_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/base.h"
#include "dtrain/tensor.h"

/* One layer's primitives, cached by input shape (a few entries). */
typedef struct dt__conv_dnnl dt__conv_dnnl;

typedef struct {
    int64_t n, cin, cout, k, pad, h, w; /* stride 1; output h + 2 pad - k + 1 */
    bool bf16; /* mixed precision: bf16 inputs and weights, f32 results (f32 where the CPU has no bf16 kernels) */
} dt__conv_shape;

/* Whether conv2d runs through oneDNN: compiled in and DT_CONV is not
 * "im2col" (read on every call, so a test can switch). */
bool dt__conv_dnnl_enabled(void);

/* y = conv(x, w) + b.  *cache is created on first use; name is the layer's,
 * for error messages.  The activations in oneDNN's own layouts (reordered
 * x, y, dy, dx) are temporaries of `tmp`, freed again before the call
 * returns: nothing activation-sized stays with the cache. */
dt_status dt__conv_dnnl_forward(dt__conv_dnnl **cache, const char *name, const dt__conv_shape *s, dt_arena *tmp,
                                const float *x, const float *w, const float *b, float *y);

/* dw and db are overwritten with this batch's weight and bias gradients
 * (the caller adds them to the accumulated ones); dx, when not NULL, with
 * the input gradient. */
dt_status dt__conv_dnnl_backward(dt__conv_dnnl **cache, const char *name, const dt__conv_shape *s, dt_arena *tmp,
                                 const float *x, const float *w, const float *dy, float *dx, float *dw, float *db);

void dt__conv_dnnl_free(dt__conv_dnnl *cache);

#endif
