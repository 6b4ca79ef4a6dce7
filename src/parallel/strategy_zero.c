/* ZeRO as a strategy (see parallel.h).  The common micro-batch loop
 * (strategy.c) runs forward and backward; around it:
 *   stage 1: after the last backward each block's gradients are
 *            reduce-scattered into this rank's shard;
 *   stage 2: the registry holds no gradient buffer: a block's gradients go
 *            into a buffer of their own bound before its backward, and are
 *            reduce-scattered (nonblocking) as soon as the block is done,
 *            their sum added to the shard once it lands;
 *   stage 3: the registry holds no values either: a block's parameters are
 *            allgathered into a buffer bound before its forward (the next
 *            block's gather started as the current one ends) and again
 *            before its backward, and freed after.
 * Then the norm over the shards, clipping, the optimizer on the shard, and
 * for stages 1 and 2 the updated slices allgathered into the registry.
 * A tied parameter (GPT's wte) lives in the unit of its first holder (the
 * embedding); the head's hooks bind that unit too, and its gradient stays
 * bound until the embedding's backward, the unit's last, is done. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "parallel/strategy_internal.h"
#include "parallel/zero_internal.h"

#define MAX_UNITS_PER_BLOCK 4 /* its own and the tied ones it uses */
/* Reduce-scatters in flight at once: each holds its block's gradients, so
 * this bounds the gradient memory of stages 2 and 3 (the running block's and
 * this many), while still overlapping backward. */
#define MAX_REDUCES 2

typedef struct {
    float *values;       /* stage 3: the gathered unit (slice x ranks), NULL when not held */
    dt_request *gather;  /* a gather in flight into values */
    float *grads;        /* stages 2, 3: the unit's gradients during backward (padded), bound */
    float *sending;      /* the last micro-batch's, being reduce-scattered into `summed` */
    float *summed;
    dt_request *reduce;
} unit_state;

typedef struct {
    int stage, N, r;
    dt_comm *dp;
    dt__zero_layout L;
    /* The shard: values (stage 3; stages 1 and 2 update their slices in the
     * whole parameters) and gradients (stages 2, 3; stage 1 reduces into the
     * whole gradients), dt_zero_shard_numel each. */
    float *values, *grads;
    float *pad, *slice_buf; /* one padded unit, one slice: the collectives' staging */
    size_t shard, staging, held, held_peak; /* bytes: the shard, the staging buffers; the blocks' now and at most */
    int inflight[MAX_REDUCES], ninflight; /* units whose reduce-scatter is in flight, oldest first */
    /* timing (seconds): waits for communication this step, blocking
     * collectives' time, the progress thread's before the step; the last
     * step's communication and the part of it not hidden */
    double exposed, blocking, async_before, last_comm, last_exposed;
    unit_state *u;
} zero;

static double since(int64_t t0) { return (double)(dt__now_ns() - t0) / 1e9; }

/* The blocks' buffers come and go: count them (dt_strategy_memory_bytes). */
static void held(zero *Z, int64_t floats)
{
    Z->held = (size_t)((int64_t)Z->held + floats * (int64_t)sizeof(float));
    Z->held_peak = Z->held > Z->held_peak ? Z->held : Z->held_peak;
}

/* Units block b (local) uses: its own, then the tied parameters' units. */
static int units_of_block(const dt_strategy *s, const zero *Z, int b, int *out)
{
    int n = 0, lo, hi;
    dt_model_block_range(s->model, &lo, &hi);
    if (Z->L.unit_of_block[b] >= 0)
        out[n++] = Z->L.unit_of_block[b];
    const dt_shared_param *sh;
    int ns = dt_model_shared_params(s->model, &sh);
    for (int k = 0; k < ns && n < MAX_UNITS_PER_BLOCK; k++) {
        int u = Z->L.unit_of_param[sh[k].param];
        bool uses = sh[k].first_block == lo + b || sh[k].last_block == lo + b, have = false;
        for (int j = 0; j < n; j++)
            have |= out[j] == u;
        if (uses && !have)
            out[n++] = u;
    }
    return n;
}

/* Point unit u's parameters at its buffers (NULL: the registry's own, or none). */
static void bind_unit(dt_strategy *s, zero *Z, int u)
{
    const dt__zero_unit *U = &Z->L.unit[u];
    dt_params *p = dt_model_params(s->model);
    for (int k = U->first_param; k < U->first_param + U->nparams; k++) {
        int64_t at = dt_params_info(p, k)->offset - U->flat_offset;
        dt_param_bind(p, k, Z->u[u].values ? Z->u[u].values + at : NULL, Z->u[u].grads ? Z->u[u].grads + at : NULL);
    }
}

/* ---- stage 3: gathering a unit's parameters ---- */

static dt_status gather_start(zero *Z, int u)
{
    unit_state *us = &Z->u[u];
    if (us->values || us->gather)
        return DT_OK;
    const dt__zero_unit *U = &Z->L.unit[u];
    if (!(us->values = malloc((size_t)(U->slice * Z->N) * sizeof(float))))
        return dt__fail(DT_ERR_NOMEM, "zero: out of memory gathering block %d's parameters", U->block);
    held(Z, U->slice * Z->N);
    dt_status s = dt_iallgather(Z->values + U->shard_offset, us->values, (size_t)U->slice, DT_F32, Z->dp, &us->gather);
    if (s != DT_OK) {
        free(us->values);
        us->values = NULL;
        held(Z, -U->slice * Z->N);
    }
    return s;
}

static dt_status gather_wait(zero *Z, int u)
{
    DT_CHECK(gather_start(Z, u));
    unit_state *us = &Z->u[u];
    if (!us->gather)
        return DT_OK;
    int64_t t0 = dt__now_ns();
    dt_status s = dt_wait(us->gather, NULL);
    Z->exposed += since(t0);
    us->gather = NULL;
    return s == DT_OK ? s : dt__fail(s, "zero: gathering block %d's parameters: %s", Z->L.unit[u].block, dt_last_error());
}

static dt_status release_values(dt_strategy *s, zero *Z, int u)
{
    unit_state *us = &Z->u[u];
    dt_status st = DT_OK;
    if (us->gather) { /* a prefetch nobody used: it must land before its buffer goes */
        st = dt_wait(us->gather, NULL);
        us->gather = NULL;
    }
    if (us->values)
        held(Z, -Z->L.unit[u].slice * Z->N);
    free(us->values);
    us->values = NULL;
    bind_unit(s, Z, u);
    return st;
}

/* ---- stages 2 and 3: a unit's gradients, reduce-scattered into the shard ---- */

/* Add unit u's reduce-scatter into the shard if it landed (wait: once it has). */
static dt_status collect_unit(zero *Z, int u, bool wait)
{
    unit_state *us = &Z->u[u];
    if (!us->reduce)
        return DT_OK;
    int done = 1;
    int64_t t0 = dt__now_ns();
    dt_status s = wait ? dt_wait(us->reduce, NULL) : dt_test(us->reduce, &done, NULL);
    Z->exposed += wait ? since(t0) : 0;
    if (s != DT_OK || done)
        us->reduce = NULL;
    if (s != DT_OK)
        return dt__fail(s, "zero: reducing block %d's gradients: %s", Z->L.unit[u].block, dt_last_error());
    if (!done)
        return DT_OK;
    const dt__zero_unit *U = &Z->L.unit[u];
    dt_vec_axpy(Z->grads + U->shard_offset, 1.0f, us->summed, U->slice);
    free(us->summed);
    free(us->sending);
    us->summed = us->sending = NULL;
    held(Z, -U->slice * (Z->N + 1));
    return DT_OK;
}

/* Add the landed reduce-scatters into the shard (all of them: wait). */
static dt_status collect(zero *Z, bool wait)
{
    dt_status st = DT_OK;
    for (int u = 0; u < Z->L.nunits; u++) {
        dt_status s = collect_unit(Z, u, wait);
        st = st != DT_OK ? st : s;
    }
    return st;
}

static dt_status grads_bind(dt_strategy *s, zero *Z, int u)
{
    unit_state *us = &Z->u[u];
    if (!us->grads) {
        const dt__zero_unit *U = &Z->L.unit[u];
        if (!(us->grads = calloc((size_t)(U->slice * Z->N), sizeof(float))))
            return dt__fail(DT_ERR_NOMEM, "zero: out of memory for block %d's gradients", U->block);
        held(Z, U->slice * Z->N);
    }
    bind_unit(s, Z, u);
    return DT_OK;
}

static dt_status reduce_start(dt_strategy *s, zero *Z, int u)
{
    unit_state *us = &Z->u[u];
    const dt__zero_unit *U = &Z->L.unit[u];
    DT_CHECK(collect_unit(Z, u, true)); /* the micro-batch before's, if still in flight */
    int keep = 0; /* forget the landed ones; at the bound, wait for the oldest */
    for (int k = 0; k < Z->ninflight; k++)
        if (Z->u[Z->inflight[k]].reduce)
            Z->inflight[keep++] = Z->inflight[k];
    Z->ninflight = keep;
    if (Z->ninflight == MAX_REDUCES) {
        DT_CHECK(collect_unit(Z, Z->inflight[0], true));
        memmove(Z->inflight, Z->inflight + 1, (size_t)(--Z->ninflight) * sizeof(int));
    }
    Z->inflight[Z->ninflight++] = u;
    if (!(us->summed = malloc((size_t)U->slice * sizeof(float))))
        return dt__fail(DT_ERR_NOMEM, "zero: out of memory reducing block %d's gradients", U->block);
    held(Z, U->slice);
    us->sending = us->grads; /* the parameters let go of it; it lives until the reduce lands */
    us->grads = NULL;
    bind_unit(s, Z, u);
    return dt_ireduce_scatter(us->sending, us->summed, (size_t)U->slice, DT_F32, DT_SUM, Z->dp, &us->reduce);
}

static dt_status zero_hook(void *user, dt_hook_point at, int b, dt_ctx *ctx)
{
    (void)ctx;
    dt_strategy *s = user;
    zero *Z = s->impl;
    int us[MAX_UNITS_PER_BLOCK], n = units_of_block(s, Z, b, us), nb = dt_model_num_layers(s->model);
    DT_CHECK(collect(Z, false));
    switch (at) {
    case DT_BEFORE_FORWARD:
        for (int k = 0; Z->stage == 3 && k < n; k++) {
            DT_CHECK(gather_wait(Z, us[k]));
            bind_unit(s, Z, us[k]);
        }
        return DT_OK;
    case DT_AFTER_FORWARD:
        if (Z->stage != 3)
            return DT_OK;
        for (int k = 0; k < n; k++)
            DT_CHECK(release_values(s, Z, us[k]));
        if (b + 1 < nb) { /* the next block's parameters while this rank moves on */
            int next[MAX_UNITS_PER_BLOCK], nn = units_of_block(s, Z, b + 1, next);
            for (int k = 0; k < nn; k++)
                DT_CHECK(gather_start(Z, next[k]));
        }
        return DT_OK;
    case DT_BEFORE_BACKWARD:
        for (int k = 0; k < n; k++) {
            if (Z->stage == 3)
                DT_CHECK(gather_wait(Z, us[k]));
            DT_CHECK(grads_bind(s, Z, us[k]));
        }
        return DT_OK;
    case DT_AFTER_BACKWARD: {
        int own = Z->L.unit_of_block[b];
        for (int k = 0; k < n; k++) {
            if (us[k] == own) /* the unit's last user is its owner: its gradients are final */
                DT_CHECK(reduce_start(s, Z, own));
            if (Z->stage == 3)
                DT_CHECK(release_values(s, Z, us[k]));
        }
        if (Z->stage == 3 && b > 0) { /* the block before's parameters for its backward */
            int prev[MAX_UNITS_PER_BLOCK], np = units_of_block(s, Z, b - 1, prev);
            for (int k = 0; k < np; k++)
                DT_CHECK(gather_start(Z, prev[k]));
        }
        return DT_OK;
    }
    }
    return DT_OK;
}

/* ---- the update ---- */

/* This rank's real part of unit u: [lo, lo + n) of the unit (n may be 0: all padding). */
static int64_t own_part(const zero *Z, int u, int64_t *lo)
{
    const dt__zero_unit *U = &Z->L.unit[u];
    *lo = (int64_t)Z->r * U->slice;
    int64_t n = U->numel - *lo;
    return n < 0 ? 0 : n < U->slice ? n : U->slice;
}

/* Where this rank's gradient slice of unit u is: in the registry's whole
 * gradients (stage 1) or in the shard (stages 2, 3). */
static float *grad_slice(dt_strategy *s, zero *Z, int u)
{
    int64_t lo;
    own_part(Z, u, &lo);
    return Z->stage == 1 ? dt_params_grads(dt_model_params(s->model)) + Z->L.unit[u].flat_offset + lo
                         : Z->grads + Z->L.unit[u].shard_offset;
}

/* Stage 1: every unit's gradients (whole in the registry) reduce-scattered;
 * the sum of this rank's slice goes back where the slice sits. */
static dt_status reduce_registry(dt_strategy *s, zero *Z)
{
    const float *g = dt_params_grads(dt_model_params(s->model));
    for (int u = 0; u < Z->L.nunits; u++) {
        const dt__zero_unit *U = &Z->L.unit[u];
        memcpy(Z->pad, g + U->flat_offset, (size_t)U->numel * sizeof(float));
        memset(Z->pad + U->numel, 0, (size_t)(U->slice * Z->N - U->numel) * sizeof(float));
        dt_status st = dt_reduce_scatter(Z->pad, Z->slice_buf, (size_t)U->slice, DT_F32, DT_SUM, Z->dp);
        if (st != DT_OK)
            return dt__fail(st, "zero: reducing block %d's gradients: %s", U->block, dt_last_error());
        int64_t lo, n = own_part(Z, u, &lo);
        memcpy(grad_slice(s, Z, u), Z->slice_buf, (size_t)n * sizeof(float));
    }
    return DT_OK;
}

/* Stages 1 and 2: the updated slices into every rank's whole parameters. */
static dt_status gather_registry(dt_strategy *s, zero *Z)
{
    float *v = dt_params_values(dt_model_params(s->model));
    for (int u = 0; u < Z->L.nunits; u++) {
        const dt__zero_unit *U = &Z->L.unit[u];
        int64_t lo, n = own_part(Z, u, &lo);
        memcpy(Z->slice_buf, v + U->flat_offset + lo, (size_t)n * sizeof(float));
        memset(Z->slice_buf + n, 0, (size_t)(U->slice - n) * sizeof(float));
        dt_status st = dt_allgather(Z->slice_buf, Z->pad, (size_t)U->slice, DT_F32, Z->dp);
        if (st != DT_OK)
            return dt__fail(st, "zero: gathering block %d's parameters: %s", U->block, dt_last_error());
        memcpy(v + U->flat_offset, Z->pad, (size_t)U->numel * sizeof(float));
    }
    return DT_OK;
}

/* The step's communication: the progress thread's time in its collectives
 * and the blocking ones; exposed: what the step waited for. */
static void end_timing(zero *Z)
{
    double now = dt_comm_async_seconds(Z->dp);
    Z->last_comm = now - Z->async_before + Z->blocking;
    Z->last_exposed = Z->exposed;
    Z->async_before = now;
    Z->exposed = Z->blocking = 0;
}

static void zero_timing(const dt_strategy *s, double *comm, double *exposed)
{
    const zero *Z = s->impl;
    *comm = Z->last_comm;
    *exposed = Z->last_exposed;
}

static dt_status zero_update(dt_strategy *s, float lr, float max_norm, float *norm)
{
    zero *Z = s->impl;
    int64_t t0 = dt__now_ns();
    DT_CHECK(Z->stage == 1 ? reduce_registry(s, Z) : collect(Z, true));
    if (Z->stage == 1) { /* blocking: all of it exposed */
        Z->blocking += since(t0);
        Z->exposed += since(t0);
    }
    /* the mean over ranks and micro-batches, its norm over every rank's slices, clipped */
    float mean = 1.0f / (float)(Z->N * s->cfg.micro_batches);
    double sumsq = 0;
    for (int u = 0; u < Z->L.nunits; u++) {
        int64_t lo, n = own_part(Z, u, &lo);
        float *g = grad_slice(s, Z, u);
        dt_vec_scale(g, mean, n);
        sumsq += dt_vec_sumsq(g, n);
    }
    t0 = dt__now_ns();
    DT_CHECK(dt_allreduce(&sumsq, &sumsq, 1, DT_F64, DT_SUM, Z->dp));
    Z->blocking += since(t0);
    Z->exposed += since(t0);
    float total = (float)sqrt(sumsq);
    if (norm)
        *norm = total;
    float clip = max_norm > 0 && total > max_norm ? max_norm / (total + 1e-6f) : 1.0f; /* torch's clip_grad_norm_ */
    if (Z->stage == 3) {
        if (clip != 1.0f)
            dt_vec_scale(Z->grads, clip, Z->L.shard_numel);
        DT_CHECK(dt_optimizer_step(s->opt, Z->values, Z->grads, Z->L.shard_numel, lr));
        dt_vec_zero(Z->grads, Z->L.shard_numel);
        end_timing(Z);
        return DT_OK;
    }
    /* stages 1 and 2: each slice updated where it sits in the whole parameters */
    float *v = dt_params_values(dt_model_params(s->model));
    for (int u = 0; u < Z->L.nunits; u++) {
        const dt__zero_unit *U = &Z->L.unit[u];
        int64_t lo, n = own_part(Z, u, &lo);
        float *g = grad_slice(s, Z, u);
        if (clip != 1.0f)
            dt_vec_scale(g, clip, n);
        DT_CHECK(dt_optimizer_update_slice(s->opt, v + U->flat_offset + lo, g, U->shard_offset, n, lr));
    }
    dt_optimizer_end_step(s->opt);
    if (Z->stage == 2)
        dt_vec_zero(Z->grads, Z->L.shard_numel);
    t0 = dt__now_ns();
    dt_status st = gather_registry(s, Z);
    Z->blocking += since(t0);
    Z->exposed += since(t0);
    end_timing(Z);
    return st;
}

static void zero_destroy(dt_strategy *s)
{
    zero *Z = s->impl;
    if (!Z)
        return;
    if (Z->u) {
        collect(Z, true);
        for (int u = 0; u < Z->L.nunits; u++) {
            if (Z->u[u].gather)
                dt_wait(Z->u[u].gather, NULL);
            free(Z->u[u].values);
            free(Z->u[u].grads);
            free(Z->u[u].sending);
            free(Z->u[u].summed);
        }
    }
    if (s->model)
        dt_model_set_hooks(s->model, NULL, NULL);
    free(Z->u);
    free(Z->values);
    free(Z->grads);
    free(Z->pad);
    free(Z->slice_buf);
    dt__zero_layout_free(&Z->L);
    free(Z);
}

static size_t zero_memory(const dt_strategy *s, size_t *buffers)
{
    const zero *Z = s->impl;
    *buffers = Z->staging + Z->held_peak;
    return Z->shard + *buffers;
}

static const dt__strategy_ops zero_ops = {
    .name = "zero", .update = zero_update, .timing = zero_timing, .memory = zero_memory, .destroy = zero_destroy};

float *dt_strategy_zero_shard(dt_strategy *s, int64_t *numel)
{
    if (!s || s->ops != &zero_ops) {
        if (numel)
            *numel = 0;
        return NULL;
    }
    zero *Z = s->impl;
    if (numel)
        *numel = Z->L.shard_numel;
    return Z->values;
}

dt_status dt_strategy_zero_create(dt_model *m, dt_optimizer *o, dt_comm *c, int stage, const dt_strategy_config *cfg,
                                  dt_strategy **out)
{
    if (!c || !m || !out)
        return dt__fail(DT_ERR_INVALID, "strategy zero: %s is NULL", !c ? "the communicator" : !m ? "the model" : "out");
    if (stage < 1 || stage > 3)
        return dt__fail(DT_ERR_INVALID, "strategy zero: stage %d is not 1, 2 or 3 (stage 0 is data parallel)", stage);
    if (cfg && cfg->tp)
        return dt__fail(DT_ERR_INVALID, "strategy zero: tensor-parallel shards are not sharded further yet (tp)");
    dt_params *p = dt_model_params(m);
    if (!dt_params_values(p) || !dt_params_grads(p))
        return dt__fail(DT_ERR_INVALID, "strategy zero: the model must hold its whole parameters and gradients "
                                        "(dt_model_instantiate) when the strategy starts");
    dt_strategy *s = calloc(1, sizeof *s);
    zero *Z = calloc(1, sizeof *Z);
    if (!s || !Z) {
        free(s);
        free(Z);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    s->impl = Z;
    s->ops = &zero_ops;
    dt_status st = dt__strategy_init(s, m, o, cfg);
    Z->stage = stage;
    Z->dp = c;
    Z->N = dt_comm_size(c);
    Z->r = dt_comm_rank(c);
    s->key_group = (uint32_t)Z->r;
    if (st == DT_OK)
        st = dt__zero_layout_make(m, Z->N, Z->r, &Z->L);
    int64_t S = Z->L.shard_numel, slice = 1;
    for (int u = 0; u < Z->L.nunits; u++)
        slice = Z->L.unit[u].slice > slice ? Z->L.unit[u].slice : slice;
    if (st == DT_OK &&
        ((stage == 3 && !(Z->values = calloc((size_t)(S ? S : 1), sizeof(float)))) ||
         (stage >= 2 && !(Z->grads = calloc((size_t)(S ? S : 1), sizeof(float)))) ||
         (stage < 3 && !(Z->pad = malloc((size_t)(Z->L.max_padded ? Z->L.max_padded : 1) * sizeof(float)))) ||
         (stage < 3 && !(Z->slice_buf = malloc((size_t)slice * sizeof(float)))) ||
         !(Z->u = calloc((size_t)(Z->L.nunits ? Z->L.nunits : 1), sizeof *Z->u))))
        st = dt__fail(DT_ERR_NOMEM, "out of memory for the ZeRO shard (%lld elements)", (long long)S);
    Z->shard = sizeof(float) * (size_t)((stage == 3 ? S : 0) + (stage >= 2 ? S : 0));
    Z->staging = sizeof(float) * (size_t)(stage < 3 ? Z->L.max_padded + slice : 0);
    if (st == DT_OK) /* every rank starts from rank 0's weights */
        st = dt_broadcast(dt_params_values(p), (size_t)dt_params_numel(p), DT_F32, 0, c);
    if (st == DT_OK && stage == 3)
        st = dt_zero_shard_take(m, Z->N, Z->r, dt_params_values(p), Z->values);
    Z->async_before = dt_comm_async_seconds(c);
    if (st == DT_OK && stage >= 2) {
        dt_params_drop_storage(p, stage == 3, true);
        dt_model_set_hooks(m, zero_hook, s);
    }
    if (st != DT_OK) {
        dt_strategy_destroy(s);
        return st;
    }
    *out = s;
    return DT_OK;
}

/* ---- the same for a hand-written loop ---- */

struct dt_zero {
    dt_strategy *s;
};

dt_status dt_zero_create(dt_comm *c, dt_model *m, dt_optimizer *o, int stage, dt_zero **out)
{
    if (!out)
        return dt__fail(DT_ERR_INVALID, "zero_create: out is NULL");
    dt_zero *z = calloc(1, sizeof *z);
    if (!z)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_strategy_config cfg = {.micro_batches = 1};
    dt_status st = dt_strategy_zero_create(m, o, c, stage, &cfg, &z->s);
    if (st != DT_OK) {
        free(z);
        return st;
    }
    *out = z;
    return DT_OK;
}

void dt_zero_set_accumulation(dt_zero *z, int micro_batches)
{
    if (z)
        z->s->cfg.micro_batches = micro_batches > 1 ? micro_batches : 1;
}

dt_status dt_zero_step(dt_zero *z, float lr, float max_norm, float *norm)
{
    if (!z)
        return dt__fail(DT_ERR_INVALID, "zero_step: the ZeRO object is NULL");
    float n = 0;
    dt_status st = zero_update(z->s, lr, max_norm, &n);
    if (norm)
        *norm = n;
    return st;
}

dt_strategy *dt_zero_strategy(dt_zero *z) { return z ? z->s : NULL; }

void dt_zero_destroy(dt_zero *z)
{
    if (!z)
        return;
    dt_strategy_destroy(z->s);
    free(z);
}
