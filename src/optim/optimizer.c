/* SGD (momentum, Nesterov, L2 weight decay), AdamW and Adagrad over a flat
 * shard, in the same operation order as PyTorch's single-tensor
 * implementations; and the update of chosen rows only (row-sparse
 * parameters), where that equals the dense update. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "base/trace.h"
#include "dtrain/optim.h"
#include "optim/offload.h"
#include "tensor/backend.h"
#include "tensor/cpu_kernels.h"
#include "tensor/threads.h"

typedef enum { SGD, ADAMW, ADAGRAD } kind;

struct dt_optimizer {
    kind kind;
    dt_sgd_config sgd;
    dt_adamw_config adam;
    dt_adagrad_config adagrad;
    int64_t numel, steps;
    float *state; /* SGD: momentum [numel]; AdamW: m [numel] then v [numel]; Adagrad: sum [numel] */
    int64_t state_len;
    /* Offloaded (dt_optimizer_offload): the state lives in this file, and
     * `state` is NULL, or a copy read for a checkpoint (written back
     * before the next update). */
    dt__offload *off;
    dt_optim_group *groups; /* sorted, disjoint; elements outside take the config's decay */
    int ngroups;
    /* On a device (dt_optimizer_set_device): the state lives in dstate there
     * and updates run there; `state` is the host's copy, current after
     * dt_optimizer_download, and sent back before the next update when
     * host_newer (a checkpoint was loaded into it). */
    const dt_compute_ops *dev;
    float *dstate;
    bool host_newer;
    /* dt_optimizer_set_guard's: run before any update changes the state */
    void (*guard)(void *user);
    void *guard_user;
    /* dt_optimizer_set_tee's: told of every piece an update wrote */
    dt_optim_tee tee;
    void *tee_user;
    int64_t tee_grid;
};

static dt_status create(kind k, int64_t numel, int64_t state_len, dt_optimizer **out)
{
    if (numel < 0)
        return dt__fail(DT_ERR_INVALID, "optimizer: %lld parameters", (long long)numel);
    dt_optimizer *o = calloc(1, sizeof *o);
    if (!o || !(o->state = calloc((size_t)(state_len ? state_len : 1), sizeof(float)))) {
        free(o);
        return dt__fail(DT_ERR_NOMEM, "out of memory for optimizer state of %lld floats", (long long)state_len);
    }
    o->kind = k;
    o->numel = numel;
    o->state_len = state_len;
    *out = o;
    return DT_OK;
}

dt_status dt_sgd_create(const dt_sgd_config *cfg, int64_t numel, dt_optimizer **out)
{
    if (!(cfg->momentum >= 0 && cfg->momentum < 1) || !(cfg->weight_decay >= 0) || (cfg->nesterov && cfg->momentum == 0))
        return dt__fail(DT_ERR_INVALID, "sgd: momentum %g must be in [0, 1), weight_decay %g >= 0, nesterov needs momentum",
                        cfg->momentum, cfg->weight_decay);
    DT_CHECK(create(SGD, numel, cfg->momentum > 0 ? numel : 0, out));
    (*out)->sgd = *cfg;
    return DT_OK;
}

dt_status dt_adamw_create(const dt_adamw_config *cfg, int64_t numel, dt_optimizer **out)
{
    if (!(cfg->beta1 >= 0 && cfg->beta1 < 1) || !(cfg->beta2 >= 0 && cfg->beta2 < 1) || !(cfg->eps > 0) ||
        !(cfg->weight_decay >= 0))
        return dt__fail(DT_ERR_INVALID, "adamw: betas (%g, %g) must be in [0, 1), eps %g > 0, weight_decay %g >= 0",
                        cfg->beta1, cfg->beta2, cfg->eps, cfg->weight_decay);
    DT_CHECK(create(ADAMW, numel, 2 * numel, out));
    (*out)->adam = *cfg;
    return DT_OK;
}

dt_status dt_adagrad_create(const dt_adagrad_config *cfg, int64_t numel, dt_optimizer **out)
{
    if (!(cfg->eps > 0) || !(cfg->lr_decay >= 0) || !(cfg->weight_decay >= 0) || !(cfg->initial_accumulator_value >= 0))
        return dt__fail(DT_ERR_INVALID, "adagrad: eps %g > 0, lr_decay %g >= 0, weight_decay %g >= 0, "
                        "initial_accumulator_value %g >= 0", cfg->eps, cfg->lr_decay, cfg->weight_decay,
                        cfg->initial_accumulator_value);
    DT_CHECK(create(ADAGRAD, numel, numel, out));
    (*out)->adagrad = *cfg;
    for (int64_t i = 0; cfg->initial_accumulator_value != 0 && i < numel; i++)
        (*out)->state[i] = cfg->initial_accumulator_value;
    return DT_OK;
}

/* One update over elements [begin, end) of a range; p, g and the state are
 * indexed from the range's start `at`.  Every element is independent, so the
 * update splits across threads with the same bits for any thread count. */
typedef struct {
    dt_optimizer *o;
    float *p;
    const float *g;
    float *s0, *s1; /* the range's state: momentum, or m and v */
    int64_t at;
    float lr, weight_decay;
    float bc1, bc2_sqrt; /* AdamW bias corrections */
} update_args;

/* The update loops read every setting into a local first and mark the
 * arrays restrict: a float store could otherwise alias the settings, which
 * would be reloaded every element and keep the loop from vectorising. */
static void sgd_range(int64_t begin, int64_t end, void *arg)
{
    update_args *a = arg;
    const dt_sgd_config *c = &a->o->sgd;
    dt__cpu_sgd(a->p + begin, a->g + begin, a->s0 ? a->s0 + begin : NULL, end - begin, a->lr, a->weight_decay,
                c->momentum, c->nesterov, a->o->steps == 0);
}

static void adamw_range(int64_t begin, int64_t end, void *arg)
{
    update_args *a = arg;
    const dt_adamw_config *c = &a->o->adam;
    dt__cpu_adamw(a->p + begin, a->g + begin, a->s0 + begin, a->s1 + begin, end - begin, a->lr, a->weight_decay,
                  c->beta1, c->beta2, c->eps, a->bc1, a->bc2_sqrt);
}

/* torch.optim.Adagrad: clr = lr / (1 + (t - 1) lr_decay) at step t (from 1),
 * sum += g^2, p -= clr g / (sqrt(sum) + eps); a.lr is clr already. */
static void adagrad_range(int64_t begin, int64_t end, void *arg)
{
    update_args *a = arg;
    float *restrict p = a->p, *restrict sum = a->s0, eps = a->o->adagrad.eps, lr = a->lr, wd = a->weight_decay;
    const float *restrict g = a->g;
    if (wd != 0) {
        for (int64_t i = begin; i < end; i++) {
            float d = g[i] + wd * p[i];
            sum[i] += d * d;
            p[i] += -lr * (d / (sqrtf(sum[i]) + eps));
        }
        return;
    }
    for (int64_t i = begin; i < end; i++) { /* vectorised (-O3, and sqrtf without errno: CMakeLists.txt) */
        float d = g[i];
        sum[i] += d * d;
        p[i] += -lr * (d / (sqrtf(sum[i]) + eps));
    }
}

static const dt__range_fn kernels[] = {[SGD] = sgd_range, [ADAMW] = adamw_range, [ADAGRAD] = adagrad_range};

/* The kernel in pieces of the tee's grid (absolute element offsets), the
 * tee told of each right after it is written.  (The update is element-wise:
 * where a range is cut changes no bit, as with the threads' chunks.) */
static void teed_range(int64_t begin, int64_t end, void *arg)
{
    update_args *a = arg;
    const dt_optimizer *o = a->o;
    for (int64_t b = begin; b < end;) {
        int64_t stop = ((a->at + b) / o->tee_grid + 1) * o->tee_grid - a->at;
        stop = stop < end ? stop : end;
        kernels[o->kind](b, stop, a);
        const float *written[3] = {a->p + b, a->s0 ? a->s0 + b : NULL, a->s1 ? a->s1 + b : NULL};
        o->tee(o->tee_user, a->at + b, stop - b, written);
        b = stop;
    }
}

static float base_decay(const dt_optimizer *o)
{
    return o->kind == SGD ? o->sgd.weight_decay : o->kind == ADAMW ? o->adam.weight_decay : o->adagrad.weight_decay;
}

/* The learning rate of this step's update (Adagrad's decayed one). */
static float step_lr(const dt_optimizer *o, float lr)
{
    return o->kind == ADAGRAD ? lr / (1.0f + (float)o->steps * o->adagrad.lr_decay) : lr;
}

#define UPDATE_GRAIN 16384

static dt_status check_lr(float lr)
{
    if (!isfinite(lr) || lr < 0)
        return dt__fail(DT_ERR_INVALID, "optimizer step with learning rate %g", lr);
    return DT_OK;
}

/* One piece of an update on the optimizer's device (SGD and AdamW: the
 * formulas of the cpu loops above, in tensor/backend.h). */
static void device_part(dt_optimizer *o, const update_args *a, int64_t n)
{
    if (o->kind == ADAMW)
        o->dev->adamw(a->p, a->g, a->s0, a->s1, n, a->lr, a->weight_decay, o->adam.beta1, o->adam.beta2, o->adam.eps,
                      a->bc1, a->bc2_sqrt);
    else
        o->dev->sgd(a->p, a->g, a->s0, n, a->lr, a->weight_decay, o->sgd.momentum, o->sgd.nesterov, o->steps == 0);
}

/* Update [offset, offset + n) with the state at s0 / s1 (element offset's);
 * param and grad point at element offset. */
static void update_part(dt_optimizer *o, float *param, const float *grad, float *s0, float *s1, int64_t offset,
                        int64_t n, float lr)
{
    float bc1 = 1, bc2_sqrt = 1, decay = base_decay(o);
    lr = step_lr(o, lr);
    if (o->kind == ADAMW) {
        double t = (double)(o->steps + 1);
        bc1 = (float)(1.0 - pow(o->adam.beta1, t));
        bc2_sqrt = (float)sqrt(1.0 - pow(o->adam.beta2, t));
    }
    /* walk [offset, offset + n) in pieces of one weight decay each */
    int g = 0;
    for (int64_t at = offset, end = offset + n; at < end;) {
        while (g < o->ngroups && o->groups[g].offset + o->groups[g].numel <= at)
            g++;
        bool inside = g < o->ngroups && o->groups[g].offset <= at;
        int64_t stop = inside ? o->groups[g].offset + o->groups[g].numel : g < o->ngroups ? o->groups[g].offset : end;
        stop = stop < end ? stop : end;
        int64_t d = at - offset;
        update_args a = {o,      param + d,        grad + d, s0 ? s0 + d : NULL, s1 ? s1 + d : NULL,
                         at,     lr,               inside ? o->groups[g].weight_decay : decay,
                         bc1,    bc2_sqrt};
        if (o->dev)
            device_part(o, &a, stop - at);
        else
            dt__parallel_for(stop - at, UPDATE_GRAIN, o->tee ? teed_range : kernels[o->kind], &a);
        at = stop;
    }
}

/* State buffers of an offloaded optimizer read for a checkpoint go back
 * to the file before the state changes. */
static dt_status settle(dt_optimizer *o)
{
    if (!o->off || !o->state)
        return DT_OK;
    dt_status s = dt__offload_write_all(o->off, o->state);
    free(o->state);
    o->state = NULL;
    return s;
}

/* The update of [offset, offset + n): param and grad point at element offset. */
static dt_status update_body(dt_optimizer *o, float *param, const float *grad, int64_t offset, int64_t n, float lr)
{
    if (offset < 0 || n < 0 || offset + n > o->numel)
        return dt__fail(DT_ERR_INVALID, "optimizer update of [%lld, %lld) outside its %lld parameters",
                        (long long)offset, (long long)(offset + n), (long long)o->numel);
    DT_CHECK(check_lr(lr));
    if (o->guard)
        o->guard(o->guard_user);
    DT_CHECK(settle(o));
    bool two = o->kind == ADAMW, has = o->state_len > 0;
    if (o->dev) {
        if (o->host_newer && has)
            DT_CHECK(o->dev->upload(o->dstate, o->state, (size_t)o->state_len * sizeof(float)));
        o->host_newer = false;
        update_part(o, param, grad, has ? o->dstate + offset : NULL, two ? o->dstate + o->numel + offset : NULL, offset,
                    n, lr);
        return DT_OK;
    }
    if (!o->off) {
        update_part(o, param, grad, has ? o->state + offset : NULL, two ? o->state + o->numel + offset : NULL, offset,
                    n, lr);
        return DT_OK;
    }
    /* offloaded: window by window, the next one read while this one computes */
    for (int64_t at = offset, end = offset + n; at < end;) {
        int64_t w = at / DT__OFFLOAD_WINDOW, w0 = w * DT__OFFLOAD_WINDOW, count;
        float *st[DT__OFFLOAD_MAX_ARRAYS] = {0};
        DT_CHECK(dt__offload_acquire(o->off, w, st, &count));
        int64_t stop = w0 + count < end ? w0 + count : end;
        update_part(o, param + (at - offset), grad + (at - offset), st[0] + (at - w0), two ? st[1] + (at - w0) : NULL,
                    at, stop - at, lr);
        DT_CHECK(dt__offload_release(o->off, w));
        at = stop;
    }
    return DT_OK;
}

dt_status dt_optimizer_set_device(dt_optimizer *o, const dt_device *d)
{
    if (!o)
        return dt__fail(DT_ERR_INVALID, "optimizer_set_device: no optimizer");
    if (!d || d->host || o->dev == d)
        return DT_OK;
    if (o->dev || o->off || o->kind == ADAGRAD)
        return dt__fail(DT_ERR_INVALID, "optimizer on %s: %s", d->name,
                        o->dev ? "it is on another device already" : o->off ? "its state is offloaded to disk"
                                                                        : "Adagrad runs on the cpu only");
    size_t bytes = (size_t)(o->state_len ? o->state_len : 1) * sizeof(float);
    float *st = d->alloc(bytes);
    if (!st)
        return dt__wrap(DT_ERR_NOMEM, "optimizer state on %s: ", d->name);
    dt_status s = d->upload(st, o->state, (size_t)o->state_len * sizeof(float));
    if (s != DT_OK) {
        d->free(st);
        return s;
    }
    o->dev = d;
    o->dstate = st;
    o->host_newer = false;
    return DT_OK;
}

const struct dt_compute_ops *dt_optimizer_device(const dt_optimizer *o) { return o && o->dev ? o->dev : &dt__cpu_ops; }

dt_status dt_optimizer_download(dt_optimizer *o)
{
    if (!o || !o->dev || !o->state_len)
        return DT_OK;
    return o->dev->download(o->state, o->dstate, (size_t)o->state_len * sizeof(float));
}

dt_status dt_optimizer_offload(dt_optimizer *o, const char *dir)
{
    if (!o)
        return dt__fail(DT_ERR_INVALID, "optimizer_offload: no optimizer");
    if (o->off || o->state_len == 0) /* already, or no state to keep (plain SGD) */
        return DT_OK;
    DT_CHECK(dt__offload_open(dir, "optimizer offload", o->kind == ADAMW ? 2 : 1, o->numel, o->state, &o->off));
    free(o->state);
    o->state = NULL;
    return DT_OK;
}

int64_t dt_optimizer_state_floats(const dt_optimizer *o, bool *on_disk)
{
    if (on_disk)
        *on_disk = o && o->off;
    return o ? o->state_len : 0;
}

void dt_optimizer_offload_io(const dt_optimizer *o, uint64_t *read, uint64_t *written)
{
    *read = *written = 0;
    if (o && o->off)
        dt__offload_io(o->off, read, written);
}

/* An offloaded optimizer's state, read into memory for a checkpoint. */
static float *materialize(dt_optimizer *o)
{
    if (o->dev) { /* the host's copy made current; whatever is written into it goes back before the next update */
        if (dt_optimizer_download(o) != DT_OK)
            return NULL;
        o->host_newer = true;
        return o->state;
    }
    if (!o->off || o->state)
        return o->state;
    float *buf = malloc((size_t)o->state_len * sizeof *buf);
    if (buf && dt__offload_read_all(o->off, buf) != DT_OK) {
        free(buf);
        buf = NULL;
    }
    return o->state = buf;
}

/* Every update of a range (a whole step, a DDP bucket, a ZeRO shard) is one
 * timeline span. */
static dt_status update_from(dt_optimizer *o, float *param, const float *grad, int64_t offset, int64_t n, float lr)
{
    int64_t t0 = dt__trace_begin();
    dt_status s = update_body(o, param, grad, offset, n, lr);
    if (t0)
        dt__trace_end("optimizer", "optimizer step", t0, "\"offset\":%lld,\"numel\":%lld", (long long)offset,
                      (long long)n);
    return s;
}

dt_status dt_optimizer_update_range(dt_optimizer *o, float *param, const float *grad, int64_t offset, int64_t n,
                                    float lr)
{
    return update_from(o, param + offset, grad + offset, offset, n, lr);
}

dt_status dt_optimizer_update_slice(dt_optimizer *o, float *param, const float *grad, int64_t offset, int64_t n,
                                    float lr)
{
    return update_from(o, param, grad, offset, n, lr);
}

static int by_offset(const void *a, const void *b)
{
    int64_t x = ((const dt_optim_group *)a)->offset, y = ((const dt_optim_group *)b)->offset;
    return (x > y) - (x < y);
}

dt_status dt_optimizer_set_groups(dt_optimizer *o, const dt_optim_group *groups, int n)
{
    if (!o || (n > 0 && !groups) || n < 0)
        return dt__fail(DT_ERR_INVALID, "optimizer_set_groups: %s", !o ? "no optimizer" : "no groups or a negative count");
    dt_optim_group *copy = n ? malloc((size_t)n * sizeof *copy) : NULL;
    if (n && !copy)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        copy[i] = groups[i];
    if (n)
        qsort(copy, (size_t)n, sizeof *copy, by_offset);
    for (int i = 0; i < n; i++) {
        const dt_optim_group *c = &copy[i];
        const char *bad = c->offset < 0 || c->numel < 0 || c->offset + c->numel > o->numel ? "outside the optimizer's range"
                          : !(c->weight_decay >= 0 && isfinite(c->weight_decay))       ? "has a weight decay that is not >= 0"
                          : i > 0 && copy[i - 1].offset + copy[i - 1].numel > c->offset ? "overlaps the one before it"
                                                                                          : NULL;
        if (bad) {
            dt_status s = dt__fail(DT_ERR_INVALID, "optimizer group [%lld, %lld) (weight decay %g) %s of %lld parameters",
                                   (long long)c->offset, (long long)(c->offset + c->numel), c->weight_decay, bad,
                                   (long long)o->numel);
            free(copy);
            return s;
        }
    }
    free(o->groups);
    o->groups = copy;
    o->ngroups = n;
    return DT_OK;
}

int dt_optimizer_state_buffers(dt_optimizer *o, dt_optim_state *out, int max)
{
    dt_optim_state all[2];
    int n = 0;
    materialize(o);
    if (o->kind == ADAMW) {
        all[n++] = (dt_optim_state){"exp_avg", o->state, o->numel};
        all[n++] = (dt_optim_state){"exp_avg_sq", o->state + o->numel, o->numel};
    } else if (o->kind == ADAGRAD) {
        all[n++] = (dt_optim_state){"sum", o->state, o->numel};
    } else if (o->sgd.momentum > 0) {
        all[n++] = (dt_optim_state){"momentum_buffer", o->state, o->numel};
    }
    for (int i = 0; i < n && i < max; i++)
        out[i] = all[i];
    return n;
}

int dt_optimizer_state_count(const dt_optimizer *o)
{
    return !o ? 0 : o->kind == ADAMW ? 2 : o->kind == ADAGRAD || o->sgd.momentum > 0 ? 1 : 0;
}

dt_status dt_optimizer_state_read(dt_optimizer *o, int i, int64_t offset, int64_t n, float *out)
{
    int count = dt_optimizer_state_count(o);
    if (!o || i < 0 || i >= count || offset < 0 || n < 0 || offset > o->numel - n || (n > 0 && !out))
        return dt__fail(DT_ERR_INVALID, "optimizer state read: buffer %d of %d, elements [%lld, %lld) of %lld", i,
                        count, (long long)offset, (long long)(offset + n), o ? (long long)o->numel : 0LL);
    int64_t at = (int64_t)i * o->numel + offset;
    if (n == 0)
        return DT_OK;
    if (o->off && !o->state) /* straight from the file: the rest stays on disk */
        return dt__offload_read_range(o->off, i, offset, n, out);
    if (o->dev && !o->host_newer) /* the range from the device */
        return o->dev->download(out, o->dstate + at, (size_t)n * sizeof *out);
    memcpy(out, o->state + at, (size_t)n * sizeof *out);
    return DT_OK;
}

void dt_optimizer_end_step(dt_optimizer *o) { o->steps++; }

dt_status dt_optimizer_step(dt_optimizer *o, float *param, const float *grad, int64_t n, float lr)
{
    if (n != o->numel)
        return dt__fail(DT_ERR_INVALID, "optimizer step over %lld parameters, but its state is for %lld", (long long)n,
                        (long long)o->numel);
    DT_CHECK(dt_optimizer_update_range(o, param, grad, 0, n, lr));
    dt_optimizer_end_step(o);
    return DT_OK;
}

/* ---- rows of a row-sparse parameter ---- */

/* No weight decay anywhere in [offset, offset + n). */
static bool decay_free(const dt_optimizer *o, int64_t offset, int64_t n)
{
    int64_t covered = 0;
    for (int g = 0; g < o->ngroups; g++) {
        int64_t lo = o->groups[g].offset > offset ? o->groups[g].offset : offset;
        int64_t hi = o->groups[g].offset + o->groups[g].numel;
        hi = hi < offset + n ? hi : offset + n;
        if (hi > lo) {
            if (o->groups[g].weight_decay != 0)
                return false;
            covered += hi - lo;
        }
    }
    return covered == n || base_decay(o) == 0;
}

bool dt_optimizer_rows_exact(const dt_optimizer *o, int64_t offset, int64_t n)
{
    if (!o || o->off || offset < 0 || n < 0 || offset + n > o->numel)
        return false;
    bool stateless_zero = o->kind == ADAGRAD || (o->kind == SGD && o->sgd.momentum == 0);
    return stateless_zero && decay_free(o, offset, n);
}

typedef struct {
    dt_optimizer *o;
    float *param;
    const float *grad;
    int64_t offset, row;
    const int64_t *rows;
    float lr;
} rows_args;

static void rows_range(int64_t b, int64_t e, void *arg)
{
    const rows_args *r = arg;
    dt_optimizer *o = r->o;
    for (int64_t i = b; i < e; i++) {
        int64_t at = r->offset + r->rows[i] * r->row;
        update_args a = {o, r->param + at, r->grad + at, o->state ? o->state + at : NULL, NULL, at, r->lr, 0, 1, 1};
        kernels[o->kind](0, r->row, &a);
        if (o->tee) /* (a row's values are not worth the tee's while: told as changed) */
            for (int64_t b = at, end = at + r->row; b < end;) {
                int64_t stop = (b / o->tee_grid + 1) * o->tee_grid;
                stop = stop < end ? stop : end;
                o->tee(o->tee_user, b, stop - b, (const float *const[3]){NULL, NULL, NULL});
                b = stop;
            }
    }
}

dt_status dt_optimizer_update_rows(dt_optimizer *o, float *param, const float *grad, int64_t offset, int64_t row,
                                   const int64_t *rows, int64_t nrows, int64_t total_rows, float lr)
{
    if (!o || row < 1 || nrows < 0 || total_rows < 0)
        return dt__fail(DT_ERR_INVALID, "optimizer_update_rows: %s", !o ? "no optimizer" : "bad row size or count");
    if (!dt_optimizer_rows_exact(o, offset, row * total_rows))
        return dt__fail(DT_ERR_INVALID, "optimizer update of rows of [%lld, %lld): only SGD without momentum or "
                        "weight decay and Adagrad without weight decay (state in memory) leave a row with a zero "
                        "gradient unchanged; update the range whole", (long long)offset,
                        (long long)(offset + row * total_rows));
    DT_CHECK(check_lr(lr));
    for (int64_t i = 0; i < nrows; i++)
        if (rows[i] < 0 || rows[i] >= total_rows)
            return dt__fail(DT_ERR_INVALID, "optimizer update of row %lld of %lld", (long long)rows[i],
                            (long long)total_rows);
    if (o->guard)
        o->guard(o->guard_user);
    rows_args a = {o, param, grad, offset, row, rows, step_lr(o, lr)};
    /* scattered rows: as EmbeddingBag, a thread's share is worth a hand-off
     * from 2^18 elements on (a textclf step's ~2,400 rows of 32: inline) */
    dt__parallel_for(nrows, ((1 << 18) + row - 1) / row, rows_range, &a);
    return DT_OK;
}

int64_t dt_optimizer_steps(const dt_optimizer *o) { return o->steps; }
int64_t dt_optimizer_numel(const dt_optimizer *o) { return o ? o->numel : 0; }
void dt_optimizer_set_steps(dt_optimizer *o, int64_t steps) { o->steps = steps; }

float *dt_optimizer_state(dt_optimizer *o, int64_t *count)
{
    *count = o->state_len;
    return materialize(o);
}

void dt_optimizer_destroy(dt_optimizer *o)
{
    if (!o)
        return;
    settle(o);
    dt__offload_close(o->off);
    if (o->dev)
        o->dev->free(o->dstate);
    free(o->state);
    free(o->groups);
    free(o);
}

void dt_optimizer_set_guard(dt_optimizer *o, void (*guard)(void *user), void *user)
{
    o->guard = guard;
    o->guard_user = guard ? user : NULL;
}

void dt_optimizer_set_tee(dt_optimizer *o, int64_t grid, dt_optim_tee tee, void *user)
{
    o->tee = grid > 0 ? tee : NULL;
    o->tee_user = o->tee ? user : NULL;
    o->tee_grid = o->tee ? grid : 0;
}
