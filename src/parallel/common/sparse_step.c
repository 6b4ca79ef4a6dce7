/* The update of a whole registry, visiting row-sparse parameters at their
 * touched rows only.  A step of the text classifier touches a few thousand
 * of the table's 2^20 rows: scaling, measuring and updating the whole
 * 33.5 M-element table would cost three passes over 128 MiB (and over the
 * optimizer's state) for rows whose gradient is zero. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "optim/clip.h"
#include "dtrain/parallel.h"

/* A parameter visited by rows (rows != NULL), or a run of parameters
 * visited whole. */
typedef struct {
    int64_t offset, numel, row, total_rows, nrows;
    const int64_t *rows;
} part;

static void scale_parts(float *g, const part *parts, int n, float alpha)
{
    for (int i = 0; i < n; i++) {
        const part *q = &parts[i];
        if (!q->rows) {
            dt_vec_scale(g + q->offset, alpha, q->numel);
            continue;
        }
        for (int64_t k = 0; k < q->nrows; k++) {
            float *r = g + q->offset + q->rows[k] * q->row;
            for (int64_t j = 0; j < q->row; j++)
                r[j] *= alpha;
        }
    }
}

static double sumsq_parts(const float *g, const part *parts, int n)
{
    double s = 0;
    for (int i = 0; i < n; i++) {
        const part *q = &parts[i];
        if (!q->rows) {
            s += dt_vec_sumsq(g + q->offset, q->numel);
            continue;
        }
        for (int64_t k = 0; k < q->nrows; k++) {
            const float *r = g + q->offset + q->rows[k] * q->row;
            for (int64_t j = 0; j < q->row; j++)
                s += (double)r[j] * r[j];
        }
    }
    return s;
}

dt_status dt_params_optimizer_step(dt_params *p, dt_optimizer *o, float lr, float grad_scale, float max_norm,
                                   float *norm)
{
    if (!p || !o)
        return dt__fail(DT_ERR_INVALID, "params_optimizer_step: %s is NULL",
                        p ? "the optimizer" : "the registry");
    float *values = dt_params_values(p), *grads = dt_params_grads(p), dummy;
    int64_t numel = dt_params_numel(p);
    norm = norm ? norm : &dummy;
    const dt_device *dev = dt_params_device(p);
    if (!dt_device_is_host(dev)) { /* dense on the device: scale, clip and update there */
        float *dv = dt_params_device_values(p), *dg = dt_params_device_grads(p);
        if (dt_optimizer_device(o) != dev)
            return dt__fail(DT_ERR_INVALID, "params_optimizer_step: the parameters are on %s, the optimizer on %s "
                            "(dt_optimizer_set_device)", dt_device_name(dev), dt_device_name(dt_optimizer_device(o)));
        if (grad_scale != 1.0f)
            dev->scale(dg, grad_scale, numel);
        *norm = dt__clip_grad_norm_on(dev, dg, numel, max_norm);
        return dt_optimizer_step(o, dv, dg, numel, lr);
    }
    if (!values || !grads)
        return dt__fail(DT_ERR_INVALID, "params_optimizer_step: the registry has no flat buffers");
    int count = dt_params_count(p);
    part *parts = malloc((size_t)(count ? count : 1) * sizeof *parts);
    if (!parts)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    int n = 0;
    bool sparse = false;
    for (int i = 0; i < count; i++) {
        const dt_param_info *info = dt_params_info(p, i);
        const int64_t *rows = NULL;
        int64_t touched = dt_param_touched_rows(p, i, &rows);
        if (rows && dt_optimizer_rows_exact(o, info->offset, info->numel)) {
            parts[n++] = (part){info->offset,   info->numel, info->numel / info->shape[0],
                                info->shape[0], touched,     rows};
            sparse = true;
        } else if (n > 0 && !parts[n - 1].rows && parts[n - 1].offset + parts[n - 1].numel == info->offset) {
            parts[n - 1].numel += info->numel; /* one run of whole parameters */
        } else {
            parts[n++] = (part){info->offset, info->numel, 0, 0, 0, NULL};
        }
    }
    dt_status s = DT_OK;
    if (!sparse) { /* the dense update over the flat buffers */
        if (grad_scale != 1.0f)
            dt_vec_scale(grads, grad_scale, numel);
        *norm = dt_clip_grad_norm(grads, numel, max_norm);
        s = dt_optimizer_step(o, values, grads, numel, lr);
        free(parts);
        return s;
    }
    if (grad_scale != 1.0f)
        scale_parts(grads, parts, n, grad_scale);
    /* untouched rows are zero: they add nothing to the norm, and clipping leaves them zero */
    *norm = (float)sqrt(sumsq_parts(grads, parts, n));
    float c = dt__clip_coefficient(*norm, max_norm); /* as dt_clip_grad_norm (torch's clip_grad_norm_) */
    if (c != 1.0f)
        scale_parts(grads, parts, n, c);
    for (int i = 0; s == DT_OK && i < n; i++) {
        const part *q = &parts[i];
        s = q->rows ? dt_optimizer_update_rows(o, values, grads, q->offset, q->row, q->rows, q->nrows,
                                               q->total_rows, lr)
                    : dt_optimizer_update_range(o, values, grads, q->offset, q->numel, lr);
    }
    if (s == DT_OK)
        dt_optimizer_end_step(o);
    free(parts);
    return s;
}
