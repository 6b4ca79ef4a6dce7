/* The MLP and the CNN as block descriptions: each layer is one block. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/model_internal.h"
#include "nn/tp.h"

/* ---- MLP: fc1, relu1, fc2, ..., fcN ----
 * Tensor parallel: fc1 column, fc2 row, fc3 column, fc4 row, ... (the ReLU
 * between a pair works on the split features), and a last layer without a
 * partner replicated on every rank. */
typedef struct {
    int n;
    dt_tp_group tp; /* size 0: not split */
    int64_t sizes[]; /* n entries */
} mlp_config;

static dt_status make_mlp_block(const dt_model_desc *d, int index, dt_params *p, dt_layer **out)
{
    const mlp_config *c = dt__desc_config(d);
    int layer = index / 2; /* blocks alternate linear, relu */
    char name[32];
    if (index % 2 == 1) {
        snprintf(name, sizeof name, "relu%d", layer + 1);
        return dt_relu_create(name, out);
    }
    snprintf(name, sizeof name, "fc%d", layer + 1);
    int linears = c->n - 1;
    if (c->tp.size && (layer % 2 == 1 || layer + 1 < linears))
        return dt_linear_parallel_create(p, name, c->sizes[layer], c->sizes[layer + 1], true,
                                         layer % 2 ? DT_TP_ROW : DT_TP_COLUMN, &c->tp, out);
    return dt_linear_create(p, name, c->sizes[layer], c->sizes[layer + 1], true, out);
}

dt_status dt_mlp_tp_check(const int64_t *sizes, int nsizes, int tp)
{
    int linears = nsizes - 1;
    /* make_mlp_block's split: linear l column-parallel when even and not the last (its outputs cut), row-parallel
     * when odd (its inputs, the column one's outputs, cut) */
    for (int l = 0; tp > 1 && sizes && l + 1 < linears; l += 2)
        if (sizes[l + 1] <= 0 || sizes[l + 1] % tp)
            return dt__fail(DT_ERR_INVALID,
                            "mlp: tp = %d must divide the hidden size %lld (mlp_sizes[%d]: fc%d's outputs, fc%d's "
                            "inputs, each split over the tensor-parallel ranks)",
                            tp, (long long)sizes[l + 1], l + 1, l + 1, l + 2);
    return DT_OK;
}

dt_status dt_mlp_describe(const int64_t *sizes, int nsizes, dt_model_desc **out)
{
    return dt_mlp_describe_tp(sizes, nsizes, NULL, out);
}

dt_status dt_mlp_describe_tp(const int64_t *sizes, int nsizes, const dt_tp_group *tp, dt_model_desc **out)
{
    if (!sizes || !out)
        return dt__fail(DT_ERR_INVALID, "mlp: %s is NULL", sizes ? "out" : "sizes");
    if (nsizes < 2)
        return dt__fail(DT_ERR_INVALID, "mlp: needs at least an input and an output size, got %d sizes", nsizes);
    for (int i = 0; i < nsizes; i++)
        if (sizes[i] <= 0)
            return dt__fail(DT_ERR_INVALID, "mlp: layer size %d is %lld", i, (long long)sizes[i]);
    if (tp && tp->size)
        DT_CHECK(dt__tp_check(tp, "mlp"));
    size_t bytes = sizeof(mlp_config) + (size_t)nsizes * sizeof(int64_t);
    mlp_config *c = malloc(bytes);
    if (!c)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    c->n = nsizes;
    c->tp = tp ? *tp : (dt_tp_group){0};
    memcpy(c->sizes, sizes, (size_t)nsizes * sizeof *sizes);
    dt_model_desc *d = NULL;
    dt_status s = dt__desc_new(c, bytes, &d);
    free(c);
    if (s == DT_OK)
        dt__desc_set_input(d, 1, &sizes[0], 0);
    for (int i = 0; s == DT_OK && i + 1 < nsizes; i++) {
        double in = (double)sizes[i], o = (double)sizes[i + 1];
        char name[32];
        snprintf(name, sizeof name, "fc%d", i + 1);
        /* forward keeps the input and makes the output */
        s = dt__desc_add(d, name, "linear", make_mlp_block, sizes[i + 1] * (sizes[i] + 1), 2 * in * o, 4 * (in + o));
        snprintf(name, sizeof name, "relu%d", i + 1);
        if (s == DT_OK && i + 2 < nsizes)
            s = dt__desc_add(d, name, "relu", make_mlp_block, 0, o, 4 * o);
    }
    if (s != DT_OK) {
        dt_model_desc_destroy(d);
        return s;
    }
    *out = d;
    return DT_OK;
}

dt_status dt_mlp_create(const int64_t *sizes, int nsizes, dt_model **out)
{
    dt_model_desc *d = NULL;
    return dt__build_whole(dt_mlp_describe(sizes, nsizes, &d), &d, out);
}

/* ---- CNN: image, conv1, relu1, pool1, conv2, relu2, pool2, flatten, fc ---- */
typedef struct {
    int64_t size, c1, c2, classes;
} cnn_config;

static dt_status make_cnn_block(const dt_model_desc *d, int index, dt_params *p, dt_layer **out)
{
    const cnn_config *c = dt__desc_config(d);
    int64_t after = c->size / 2 / 2;
    switch (index) {
    case 0: return dt_reshape_create("image", 3, (int64_t[]){1, c->size, c->size}, out);
    case 1: return dt_conv2d_create(p, "conv1", 1, c->c1, 5, 2, out);
    case 2: return dt_relu_create("relu1", out);
    case 3: return dt_maxpool2d_create("pool1", out);
    case 4: return dt_conv2d_create(p, "conv2", c->c1, c->c2, 5, 2, out);
    case 5: return dt_relu_create("relu2", out);
    case 6: return dt_maxpool2d_create("pool2", out);
    case 7: return dt_reshape_create("flatten", 1, (int64_t[]){c->c2 * after * after}, out);
    default: return dt_linear_create(p, "fc", c->c2 * after * after, c->classes, true, out);
    }
}

dt_status dt_cnn_describe(int64_t size, int64_t c1, int64_t c2, int64_t classes, dt_model_desc **out)
{
    if (!out)
        return dt__fail(DT_ERR_INVALID, "cnn: out is NULL");
    if (size < 4 || c1 <= 0 || c2 <= 0 || classes <= 0)
        return dt__fail(DT_ERR_INVALID, "cnn: image size %lld (>= 4), channels %lld and %lld, classes %lld", (long long)size,
                        (long long)c1, (long long)c2, (long long)classes);
    cnn_config c = {size, c1, c2, classes};
    dt_model_desc *d = NULL;
    DT_CHECK(dt__desc_new(&c, sizeof c, &d));
    dt__desc_set_input(d, 1, (int64_t[]){size * size}, 0);
    double px = (double)(size * size), half = (double)((size / 2) * (size / 2)), q = (double)((size / 4) * (size / 4));
    double flat = (double)c2 * q;
    struct {
        const char *name, *kind;
        int64_t params;
        double flops, act; /* act in floats */
    } b[] = {
        {"image", "reshape", 0, 0, 0},
        {"conv1", "conv2d", c1 * 25 + c1, 2.0 * c1 * 25 * px, px + c1 * px},
        {"relu1", "relu", 0, c1 * px, 2 * c1 * px},
        {"pool1", "maxpool2d", 0, c1 * px, 2 * c1 * half},
        {"conv2", "conv2d", c2 * c1 * 25 + c2, 2.0 * c2 * c1 * 25 * half, c2 * half},
        {"relu2", "relu", 0, c2 * half, 2 * c2 * half},
        {"pool2", "maxpool2d", 0, c2 * half, 2 * c2 * q},
        {"flatten", "reshape", 0, 0, 0},
        {"fc", "linear", classes * ((int64_t)flat + 1), 2 * flat * (double)classes, (double)classes},
    };
    dt_status s = DT_OK;
    for (size_t i = 0; s == DT_OK && i < sizeof b / sizeof b[0]; i++)
        s = dt__desc_add(d, b[i].name, b[i].kind, make_cnn_block, b[i].params, b[i].flops, 4 * b[i].act);
    if (s != DT_OK) {
        dt_model_desc_destroy(d);
        return s;
    }
    *out = d;
    return DT_OK;
}

dt_status dt_cnn_create(int64_t size, int64_t c1, int64_t c2, int64_t classes, dt_model **out)
{
    dt_model_desc *d = NULL;
    return dt__build_whole(dt_cnn_describe(size, c1, c2, classes, &d), &d, out);
}
