/* Sequential models: an ordered list of layers over one parameter registry
 * (pipeline stages will cut this list; recomputation re-runs a segment). */
#include <stdio.h>
#include <stdlib.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/model_internal.h"

struct dt_model {
    dt_params *params;
    dt_layer **layers;
    dt_tensor *inputs; /* each layer's input from the last forward */
    int n;
};

void dt__model_append(dt_model *m, dt_layer *l) { m->layers[m->n++] = l; }

dt_status dt__model_new(int cap, dt_model **out)
{
    dt_model *m = calloc(1, sizeof *m);
    if (!m || dt_params_create(&m->params) != DT_OK || !(m->layers = calloc((size_t)cap, sizeof *m->layers)) ||
        !(m->inputs = calloc((size_t)cap, sizeof *m->inputs))) {
        dt_model_destroy(m);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    *out = m;
    return DT_OK;
}

dt_status dt_mlp_create(const int64_t *sizes, int nsizes, dt_model **out)
{
    if (nsizes < 2)
        return dt__fail(DT_ERR_INVALID, "mlp: needs at least an input and an output size, got %d sizes", nsizes);
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] <= 0)
            return dt__fail(DT_ERR_INVALID, "mlp: layer size %d is %lld", i, (long long)sizes[i]);
    dt_model *m = NULL;
    DT_CHECK(dt__model_new(2 * nsizes, &m));
    dt_status s = DT_OK;
    for (int i = 0; s == DT_OK && i + 1 < nsizes; i++) {
        char name[32];
        snprintf(name, sizeof name, "fc%d", i + 1);
        s = dt_linear_create(m->params, name, sizes[i], sizes[i + 1], true, &m->layers[m->n]);
        if (s == DT_OK)
            m->n++;
        if (s == DT_OK && i + 2 < nsizes) {
            snprintf(name, sizeof name, "relu%d", i + 1);
            if ((s = dt_relu_create(name, &m->layers[m->n])) == DT_OK)
                m->n++;
        }
    }
    if (s == DT_OK)
        s = dt_params_finalize(m->params);
    if (s != DT_OK) {
        dt_model_destroy(m);
        return s;
    }
    *out = m;
    return DT_OK;
}

dt_status dt_cnn_create(int64_t size, int64_t c1, int64_t c2, int64_t classes, dt_model **out)
{
    if (size < 4 || c1 <= 0 || c2 <= 0 || classes <= 0)
        return dt__fail(DT_ERR_INVALID, "cnn: image size %lld (>= 4), channels %lld and %lld, classes %lld", (long long)size,
                        (long long)c1, (long long)c2, (long long)classes);
    dt_model *m = NULL;
    DT_CHECK(dt__model_new(10, &m));
    dt_params *p = m->params;
    int64_t after = size / 2 / 2;
    dt_layer *l[10] = {0};
    dt_status s = dt_reshape_create("image", 3, (int64_t[]){1, size, size}, &l[0]);
    if (s == DT_OK)
        s = dt_conv2d_create(p, "conv1", 1, c1, 5, 2, &l[1]);
    if (s == DT_OK)
        s = dt_relu_create("relu1", &l[2]);
    if (s == DT_OK)
        s = dt_maxpool2d_create("pool1", &l[3]);
    if (s == DT_OK)
        s = dt_conv2d_create(p, "conv2", c1, c2, 5, 2, &l[4]);
    if (s == DT_OK)
        s = dt_relu_create("relu2", &l[5]);
    if (s == DT_OK)
        s = dt_maxpool2d_create("pool2", &l[6]);
    if (s == DT_OK)
        s = dt_reshape_create("flatten", 1, (int64_t[]){c2 * after * after}, &l[7]);
    if (s == DT_OK)
        s = dt_linear_create(p, "fc", c2 * after * after, classes, true, &l[8]);
    for (int i = 0; i < 9; i++)
        if (l[i])
            dt__model_append(m, l[i]);
    if (s == DT_OK)
        s = dt_params_finalize(p);
    if (s != DT_OK) {
        dt_model_destroy(m);
        return s;
    }
    *out = m;
    return DT_OK;
}

dt_params *dt_model_params(dt_model *m) { return m->params; }
int dt_model_num_layers(const dt_model *m) { return m->n; }

void dt_model_init(dt_model *m, uint64_t seed)
{
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    for (int i = 0; i < m->n; i++)
        m->layers[i]->ops->init(m->layers[i], m->params, &rng);
}

dt_status dt_model_forward(dt_model *m, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    ctx->params = m->params;
    dt_tensor cur = *x;
    for (int i = 0; i < m->n; i++) {
        m->inputs[i] = cur;
        dt_tensor next;
        DT_CHECK(m->layers[i]->ops->forward(m->layers[i], ctx, &cur, &next));
        cur = next;
    }
    *y = cur;
    return DT_OK;
}

dt_status dt_model_backward(dt_model *m, dt_ctx *ctx, const dt_tensor *dy)
{
    ctx->params = m->params;
    dt_tensor g = *dy;
    for (int i = m->n - 1; i >= 0; i--) {
        dt_tensor dx = {0};
        DT_CHECK(m->layers[i]->ops->backward(m->layers[i], ctx, &g, &dx, i > 0));
        g = dx;
    }
    return DT_OK;
}

void dt_model_destroy(dt_model *m)
{
    if (!m)
        return;
    for (int i = 0; m->layers && i < m->n; i++)
        dt_layer_destroy(m->layers[i]);
    free(m->layers);
    free(m->inputs);
    dt_params_destroy(m->params);
    free(m);
}
