#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/row_set.h"
#include "nn/subs.h"
#include "tensor/backend.h"

/* values and grads are the flat buffers (owned unless supplied from
 * outside); vptr/gptr give each parameter's storage, by default its place in
 * the flat buffers, or whatever dt_param_bind put there. */
struct dt_params {
    dt_param_info *info;
    int count, cap;
    int64_t numel;
    float *values, *grads;
    float **vptr, **gptr;
    bool finalized, owned;
    /* Gradient-ready subscribers, the first failure one returned (until
     * dt_params_grad_ready_status takes it), and the single callback of old
     * (dt_params_on_grad_ready) with its subscription. */
    dt__subs ready;
    dt_status ready_failed;
    dt_grad_ready_fn legacy;
    void *legacy_user;
    dt_subscription legacy_token;
    /* Row-sparse parameters' touched rows (NULL: a dense parameter), cap
     * entries; nsparse of them are set. */
    dt__row_set **sparse;
    int nsparse;
    /* On a device (dt_params_to_device): the flat buffers there, which the
     * layers and the optimizer use; values/grads stay as the host's copies. */
    const dt_compute_ops *dev;
    float *dvalues, *dgrads;
};

dt_status dt_params_create(dt_params **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? DT_OK : dt__fail(DT_ERR_NOMEM, "out of memory");
}

dt_status dt_params_add(dt_params *p, const char *name, int ndim, const int64_t *shape, int *index)
{
    if (p->finalized)
        return dt__fail(DT_ERR_INVALID, "parameter '%s' added after the registry was finalized", name);
    if (ndim < 1 || ndim > DT_MAX_DIMS || strlen(name) >= sizeof p->info[0].name)
        return dt__fail(DT_ERR_INVALID, "parameter '%s': bad rank %d or name too long", name, ndim);
    if (dt_params_find(p, name) >= 0)
        return dt__fail(DT_ERR_INVALID, "parameter '%s' registered twice", name);
    if (p->count == p->cap) {
        int cap = p->cap ? p->cap * 2 : 16;
        dt_param_info *n = realloc(p->info, (size_t)cap * sizeof *n);
        if (n)
            p->info = n;
        dt__row_set **sp = n ? realloc(p->sparse, (size_t)cap * sizeof *sp) : NULL;
        if (!sp)
            return dt__fail(DT_ERR_NOMEM, "out of memory");
        memset(sp + p->cap, 0, (size_t)(cap - p->cap) * sizeof *sp);
        p->sparse = sp;
        p->cap = cap;
    }
    dt_param_info *pi = &p->info[p->count];
    memset(pi, 0, sizeof *pi);
    snprintf(pi->name, sizeof pi->name, "%s", name);
    pi->ndim = ndim;
    pi->numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] <= 0)
            return dt__fail(DT_ERR_INVALID, "parameter '%s': dimension %d is %lld", name, i, (long long)shape[i]);
        pi->shape[i] = shape[i];
        pi->numel *= shape[i];
    }
    pi->offset = p->numel;
    p->numel += pi->numel;
    pi->parts = pi->groups = 1;
    memcpy(pi->whole, pi->shape, sizeof pi->whole);
    *index = p->count++;
    return DT_OK;
}

dt_status dt_param_set_shard(dt_params *p, int index, int parts, int part, int split_dim, int groups)
{
    if (!p)
        return dt__fail(DT_ERR_INVALID, "param_set_shard: the registry is NULL");
    if (index < 0 || index >= p->count)
        return dt__fail(DT_ERR_INVALID, "parameter index %d outside 0..%d", index, p->count - 1);
    dt_param_info *pi = &p->info[index];
    if (parts < 1 || part < 0 || part >= parts || split_dim < 0 || split_dim >= pi->ndim || groups < 1 ||
        pi->shape[split_dim] % groups)
        return dt__fail(DT_ERR_INVALID, "parameter '%s': part %d of %d along dimension %d in %d groups", pi->name, part,
                        parts, split_dim, groups);
    pi->parts = parts;
    pi->part = part;
    pi->split_dim = split_dim;
    pi->groups = groups;
    memcpy(pi->whole, pi->shape, sizeof pi->whole);
    pi->whole[split_dim] = pi->shape[split_dim] * parts;
    return DT_OK;
}

void dt_param_set_tp_partial(dt_params *p, int index)
{
    if (p && index >= 0 && index < p->count)
        p->info[index].tp_partial = true;
}

int64_t dt_param_shard_index(const dt_param_info *info, int64_t i)
{
    if (!info || i < 0)
        return -1;
    int64_t at = 0;
    for (int d = info->ndim - 1; d >= 0; d--) {
        int64_t c = i % info->whole[d], stride = 1;
        i /= info->whole[d];
        if (d == info->split_dim && info->parts > 1) {
            int64_t group = info->whole[d] / info->groups, cut = group / info->parts, g = c / group,
                    within = c % group;
            if (within / cut != info->part)
                return -1;
            c = g * cut + within % cut;
        }
        for (int e = d + 1; e < info->ndim; e++)
            stride *= info->shape[e];
        at += c * stride;
    }
    return at;
}

static dt_status make_pointers(dt_params *p)
{
    size_t n = (size_t)(p->count ? p->count : 1);
    if (!(p->vptr = calloc(n, sizeof *p->vptr)) || !(p->gptr = calloc(n, sizeof *p->gptr)))
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < p->count; i++)
        dt_param_bind(p, i, NULL, NULL);
    p->finalized = true;
    return DT_OK;
}

dt_status dt_params_finalize(dt_params *p)
{
    if (p->finalized)
        return DT_OK;
    size_t n = (size_t)(p->numel ? p->numel : 1);
    p->values = calloc(n, sizeof(float));
    p->grads = calloc(n, sizeof(float));
    p->owned = true;
    if (!p->values || !p->grads)
        return dt__fail(DT_ERR_NOMEM, "out of memory for %lld parameters", (long long)p->numel);
    return make_pointers(p);
}

dt_status dt_params_finalize_external(dt_params *p, float *values, float *grads)
{
    if (p->finalized)
        return dt__fail(DT_ERR_INVALID, "params_finalize_external: the registry is already finalized");
    p->values = values;
    p->grads = grads;
    p->owned = false;
    return make_pointers(p);
}

void dt_param_bind(dt_params *p, int i, float *value, float *grad)
{
    int64_t off = p->info[i].offset;
    float *values = p->dev ? p->dvalues : p->values, *grads = p->dev ? p->dgrads : p->grads;
    p->vptr[i] = value ? value : values ? values + off : NULL;
    p->gptr[i] = grad ? grad : grads ? grads + off : NULL;
}

dt_status dt_params_to_device(dt_params *p, const dt_device *d)
{
    if (!p || !p->finalized)
        return dt__fail(DT_ERR_INVALID, "params_to_device: the registry is %s", p ? "not finalized" : "NULL");
    if (!d || d->host || p->dev == d)
        return DT_OK;
    if (p->dev)
        return dt__fail(DT_ERR_INVALID, "params_to_device: the parameters are already on %s", p->dev->name);
    if (!p->values || !p->grads || p->nsparse)
        return dt__fail(DT_ERR_INVALID, "params_to_device: only whole, dense parameters move to %s (this registry %s)",
                        d->name, p->nsparse ? "has row-sparse parameters" : "has no flat buffers");
    for (int i = 0; i < p->count; i++)
        if (p->vptr[i] != p->values + p->info[i].offset || p->gptr[i] != p->grads + p->info[i].offset)
            return dt__fail(DT_ERR_INVALID, "params_to_device: parameter %s has storage of its own", p->info[i].name);
    size_t bytes = (size_t)(p->numel ? p->numel : 1) * sizeof(float);
    float *v = d->alloc(bytes), *g = v ? d->alloc(bytes) : NULL;
    dt_status s = v && g ? d->upload(v, p->values, bytes) : DT_ERR_NOMEM;
    if (s == DT_OK)
        s = d->zero(g, bytes);
    if (s != DT_OK) {
        d->free(v);
        d->free(g);
        return dt__wrap(s, "parameters to %s (%lld floats): ", d->name, (long long)p->numel);
    }
    p->dev = d;
    p->dvalues = v;
    p->dgrads = g;
    for (int i = 0; i < p->count; i++)
        dt_param_bind(p, i, NULL, NULL);
    return DT_OK;
}

const dt_device *dt_params_device(const dt_params *p) { return p && p->dev ? p->dev : &dt__cpu_ops; }

float *dt_params_device_values(dt_params *p) { return p->dev ? p->dvalues : p->values; }
float *dt_params_device_grads(dt_params *p) { return p->dev ? p->dgrads : p->grads; }

dt_status dt_params_download(dt_params *p)
{
    if (!p->dev)
        return DT_OK;
    return p->dev->download(p->values, p->dvalues, (size_t)p->numel * sizeof(float));
}

dt_status dt_params_upload(dt_params *p)
{
    if (!p->dev)
        return DT_OK;
    return p->dev->upload(p->dvalues, p->values, (size_t)p->numel * sizeof(float));
}

bool dt_param_has_storage(const dt_params *p, int i) { return p->vptr[i] && p->gptr[i]; }
bool dt_param_has_value(const dt_params *p, int i) { return p->vptr[i] != NULL; }

void dt_params_drop_storage(dt_params *p, bool values, bool grads)
{
    if (p->dev && values) { /* on a device: its buffers too */
        p->dev->free(p->dvalues);
        p->dvalues = NULL;
    }
    if (p->dev && grads) {
        p->dev->free(p->dgrads);
        p->dgrads = NULL;
    }
    if (values) {
        if (p->owned)
            free(p->values);
        p->values = NULL;
    }
    if (grads) {
        if (p->owned)
            free(p->grads);
        p->grads = NULL;
    }
    for (int i = 0; p->finalized && i < p->count; i++)
        dt_param_bind(p, i, NULL, NULL);
}
int dt_params_count(const dt_params *p) { return p->count; }
int64_t dt_params_numel(const dt_params *p) { return p->numel; }
const dt_param_info *dt_params_info(const dt_params *p, int i) { return (i >= 0 && i < p->count) ? &p->info[i] : NULL; }

int dt_params_find(const dt_params *p, const char *name)
{
    for (int i = 0; i < p->count; i++)
        if (strcmp(p->info[i].name, name) == 0)
            return i;
    return -1;
}

float *dt_params_values(dt_params *p) { return p->values; }
float *dt_params_grads(dt_params *p) { return p->grads; }
float *dt_param_value(dt_params *p, int i) { return p->vptr[i]; }
float *dt_param_grad(dt_params *p, int i) { return p->gptr[i]; }

/* ---- row-sparse parameters ---- */

dt_status dt_param_set_row_sparse(dt_params *p, int index)
{
    if (!p || index < 0 || index >= p->count)
        return dt__fail(DT_ERR_INVALID, "param_set_row_sparse: no parameter %d", index);
    dt_param_info *pi = &p->info[index];
    if (pi->ndim < 2)
        return dt__fail(DT_ERR_INVALID, "parameter '%s' cannot be row-sparse: it has %d dimension (rows x row needs 2 "
                        "or more)", pi->name, pi->ndim);
    if (p->sparse[index])
        return DT_OK;
    dt__row_set *s = malloc(sizeof *s);
    if (!s)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_status st = dt__row_set_init(s, pi->shape[0]);
    if (st != DT_OK) {
        free(s);
        return st;
    }
    p->sparse[index] = s;
    p->nsparse++;
    pi->row_sparse = true;
    return DT_OK;
}

bool dt_param_is_row_sparse(const dt_params *p, int index)
{
    return p && index >= 0 && index < p->count && p->sparse[index];
}

dt_status dt_param_touch_rows(dt_params *p, int index, const int64_t *rows, int64_t n)
{
    if (!dt_param_is_row_sparse(p, index))
        return dt__fail(DT_ERR_INVALID, "param_touch_rows: parameter %d is not row-sparse", index);
    dt__row_set *s = p->sparse[index];
    for (int64_t i = 0; i < n; i++)
        if (rows[i] < 0 || rows[i] >= s->rows)
            return dt__fail(DT_ERR_INVALID, "parameter '%s': touched row %lld is outside 0..%lld", p->info[index].name,
                            (long long)rows[i], (long long)s->rows - 1);
    return s->all ? DT_OK : dt__row_set_add(s, rows, n);
}

void dt_param_touch_all(dt_params *p, int index)
{
    if (dt_param_is_row_sparse(p, index))
        p->sparse[index]->all = true;
}

int64_t dt_param_touched_rows(dt_params *p, int index, const int64_t **rows)
{
    *rows = NULL;
    if (!dt_param_is_row_sparse(p, index))
        return -1;
    dt__row_set *s = p->sparse[index];
    if (s->all)
        return s->rows;
    if (dt__row_set_sort(s) != DT_OK) { /* out of memory: every row, which is never wrong */
        s->all = true;
        return s->rows;
    }
    *rows = s->ids;
    return s->n;
}

bool dt_params_any_row_sparse(const dt_params *p) { return p && p->nsparse > 0; }

/* Dense parameters' gradients as runs between the row-sparse ones, which
 * clear their touched rows only (all of them after dt_param_touch_all). */
void dt_params_zero_grads(dt_params *p)
{
    if (p->dev) { /* dense only (dt_params_to_device); none after dt_params_drop_storage */
        if (p->dgrads)
            p->dev->zero(p->dgrads, (size_t)p->numel * sizeof(float));
        return;
    }
    if (!p->nsparse) {
        if (p->grads)
            dt_vec_zero(p->grads, p->numel);
        return;
    }
    int64_t dense_from = 0;
    for (int i = 0; i < p->count; i++) {
        dt__row_set *s = p->sparse[i];
        if (!s)
            continue;
        const dt_param_info *pi = &p->info[i];
        int64_t row = pi->numel / pi->shape[0];
        if (p->grads) {
            dt_vec_zero(p->grads + dense_from, pi->offset - dense_from);
            float *g = p->grads + pi->offset;
            if (s->all)
                dt_vec_zero(g, pi->numel);
            else
                for (int64_t k = 0; k < s->n; k++)
                    memset(g + s->ids[k] * row, 0, (size_t)row * sizeof *g);
        }
        dense_from = pi->offset + pi->numel;
        dt__row_set_clear(s);
    }
    if (p->grads)
        dt_vec_zero(p->grads + dense_from, p->numel - dense_from);
}

/* ---- gradient-ready events ---- */

dt_status dt_params_subscribe_grad_ready(dt_params *p, dt_grad_ready_cb fn, void *user, dt_subscription *token)
{
    if (!p) {
        if (token)
            *token = 0;
        return dt__fail(DT_ERR_INVALID, "params_subscribe_grad_ready: the registry is NULL");
    }
    return dt__subs_add(&p->ready, (dt__sub_fn)fn, user, token, "params_subscribe_grad_ready");
}

void dt_params_unsubscribe(dt_params *p, dt_subscription token)
{
    if (p)
        dt__subs_remove(&p->ready, token);
}

/* Set on a copy's thread whose gradients are not final (nn/copies_rows.c):
 * its layers' events are not passed on. */
static _Thread_local bool ready_quiet;

void dt__params_quiet(bool on) { ready_quiet = on; }

void dt_params_grad_ready(dt_params *p, int index)
{
    if (ready_quiet)
        return;
    for (int i = 0; i < p->ready.n; i++) {
        dt_status s = ((dt_grad_ready_cb)p->ready.at[i].fn)(p->ready.at[i].user, index);
        if (s != DT_OK && p->ready_failed == DT_OK)
            p->ready_failed = s;
    }
}

dt_status dt_params_grad_ready_status(dt_params *p)
{
    dt_status s = p ? p->ready_failed : DT_OK;
    if (p)
        p->ready_failed = DT_OK;
    return s;
}

static dt_status legacy_ready(void *user, int index)
{
    dt_params *p = user;
    p->legacy(index, p->legacy_user);
    return DT_OK;
}

void dt_params_on_grad_ready(dt_params *p, dt_grad_ready_fn fn, void *user)
{
    dt__subs_remove(&p->ready, p->legacy_token);
    p->legacy_token = 0;
    p->legacy = fn;
    p->legacy_user = user;
    if (fn)
        dt_params_subscribe_grad_ready(p, legacy_ready, p, &p->legacy_token);
}

void dt_params_destroy(dt_params *p)
{
    if (!p)
        return;
    for (int i = 0; p->sparse && i < p->count; i++)
        if (p->sparse[i]) {
            dt__row_set_free(p->sparse[i]);
            free(p->sparse[i]);
        }
    free(p->sparse);
    free(p->info);
    dt__subs_free(&p->ready);
    if (p->dev) {
        p->dev->free(p->dvalues);
        p->dev->free(p->dgrads);
    }
    if (p->owned) {
        free(p->values);
        free(p->grads);
    }
    free(p->vptr);
    free(p->gptr);
    free(p);
}
