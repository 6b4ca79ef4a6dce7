/* ZeRO as a strategy (see parallel.h).  The common micro-batch loop
 * (common/strategy.c) runs forward and backward; the block hooks and the registry's
 * gradient-ready events (nn.h) move each block's unit (shard.c) while
 * the other blocks compute:
 *   stage 1: in the last micro-batch's backward, as the last of a unit's
 *            parameters becomes ready its gradients are reduce-scattered in
 *            place in the registry (this rank's sum lands at the unit's
 *            start);
 *   stage 2: the registry holds no gradient buffer: a block's gradients go
 *            into a buffer of their own (from a pool kept across steps)
 *            bound before its backward, and are reduce-scattered
 *            (nonblocking) as soon as they are all ready, their sum added to
 *            the shard once it lands;
 *   stage 3: the registry holds no values either: a block's parameters are
 *            allgathered into a buffer bound before its forward (the next
 *            block's gather started as the current one begins) and again
 *            before its backward (the block before's started likewise), and
 *            freed after.
 * The update: the norm over the shards, clipping, the optimizer on the
 * shard.  Stages 1 and 2 then allgather each unit's updated slices in place
 * into every rank's whole parameters, started unit by unit as the optimizer
 * goes and waited for only by the next forward of the block that reads them
 * (or dt_strategy_sync); stage 3 starts the first block's gather.
 * The strategy's collectives run on a communicator split from the dp group,
 * so the trainer's own calls on the group (the logged loss) do not wait
 * behind them.  A tied parameter (GPT's wte) lives in the unit of its first
 * holder (the embedding); the head's hooks bind that unit too, and its
 * gradient stays bound until the embedding's backward, the unit's last, is
 * done.
 *
 * Inside a mesh (stages 1 and 2): the model is this rank's part (its
 * tensor-parallel shards, its pipeline stage), the ZeRO units that part's
 * blocks and the group dp at its (pp, tp) coordinate.  A tensor-parallel
 * shard is a tensor of its own, so nothing changes but the update: the
 * sequence-parallel partial sums (dt_params_reduce_tp_partial) are summed
 * over tp on the reduced slices, and the norm adds each element once: the
 * slices over dp, then over tp (a replicated tensor's share 1/t), then over
 * the pipeline's stages (a tied copy on the stage of its first user only;
 * group_grads.c's weights).  A pipeline (dt__dp_sync_zero, common/dp_sync.h) runs
 * ZeRO "deferred": its hooks only wait for the gathers before a block's
 * forward, and the reduce-scatters all start after the schedule, once the
 * tied copies are summed over the stages (the stages' units differ, so that
 * sum cannot follow the reduce-scatter); stage 2 is then stage 1 (the
 * whole gradients held through the schedule).
 *
 * On a device: the registry's flat buffers are the device's
 * (dt_params_device_values/grads), the pools and the shard (stage 3's
 * values too) are device memory, and every copy, sum and scale goes through
 * the device's entries (Z->ops), the update through the device's optimizer;
 * the collectives take the device pointers (the communicator stages them).
 * Stage 3's gathered units come from a pool of the device's buffers
 * (val_pool): a device's free may wait for the device (cudaFree does), which
 * a gather per block and pass must not.  Checkpoints read the shard through
 * the device's download (dt_strategy_zero_shard_read). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "optim/clip.h"
#include "optim/offload.h"
#include "parallel/common/ready_groups.h"
#include "parallel/common/strategy.h"
#include "parallel/zero/buf_pool.h"
#include "parallel/zero/internal.h"
#include "tensor/backend.h"

#define MAX_UNITS_PER_BLOCK 4 /* its own and the tied ones it uses */
/* Reduce-scatters in flight at once for stages 2 and 3: each holds its
 * block's gradients, so this bounds their gradient memory (the running
 * block's and this many), while still overlapping backward.  Stage 1
 * reduces in place and needs no bound. */
#define MAX_REDUCES 2
/* (Also the bound on padded copies in flight, for units the ranks do not divide.) */

typedef struct {
    float *values;       /* stage 3: the gathered unit (slice x ranks), NULL when not held */
    dt_request *gather;  /* stage 3: a gather into values; stages 1, 2: the updated slices into the registry */
    float *staging;      /* stages 1, 2: a unit whose length the ranks do not divide goes through a padded copy */
    float *grads;        /* stages 2, 3: the unit's gradients during backward (padded), bound; pooled */
    float *sending;      /* stages 2, 3: the last micro-batch's, being reduce-scattered into `summed`;
                          * stage 1: a padded copy of the unit's gradients; pooled */
    float *summed;       /* pooled */
    dt_request *reduce;
    bool reduced;        /* its reduce-scatter started this step */
} unit_state;

typedef struct {
    int stage, N, r;
    const dt_compute_ops *ops; /* the registry's device (the cpu's: host memory) */
    dt_comm *dp; /* split from the group the strategy was made over */
    dt__zero_layout L;
    /* The shard: values (stage 3; stages 1 and 2 update their slices in the
     * whole parameters) and gradients (stages 2, 3; stage 1 reduces into the
     * whole gradients), dt_zero_shard_numel each. */
    float *values, *grads;
    /* Stage 3 with the values on disk (dt_strategy_zero_offload): values
     * is NULL, the file holds them; view: a copy read for a caller
     * (dt_strategy_zero_shard), dropped at the next update. */
    dt__offload *values_off;
    float *view;
    size_t shard, held, held_peak; /* bytes: the shard; the transient buffers now and at most (not the pools) */
    /* The gradient buffers of every unit and micro-batch (grads, sending:
     * slice x ranks; summed: slice), taken and given back, allocated once. */
    dt__buf_pool grad_pool, sum_pool;
    /* stage 3 on a device: the gathered units' buffers (slice x ranks), the
     * largest unit's size; on the host they are malloc'd per gather */
    dt__buf_pool val_pool;
    dt__ready_groups ready; /* units by parameter: a unit's gradients are final when its group is */
    dt_subscription hook_sub, ready_sub;
    int inflight[MAX_REDUCES], ninflight; /* units whose reduce-scatter is in flight, oldest first */
    int backwards; /* backward passes since the last update (the last micro-batch's is the one stage 1 reduces) */
    /* timing (seconds): waits for communication this step, blocking
     * collectives' time, the progress thread's before the step; the last
     * step's communication and the part of it not hidden */
    double exposed, blocking, async_before, last_comm, last_exposed;
    unit_state *u;
    /* Inside a mesh: the tensor-parallel group, the pipeline's stages (the
     * norm; NULL: none), each parameter's weight in the norm (NULL: all 1),
     * and deferred: a pipeline's, reducing after its schedule. */
    dt_comm *tp, *stages;
    float *weight;
    bool deferred;
} zero;

static double since(int64_t t0) { return (double)(dt__now_ns() - t0) / 1e9; }

/* The transient buffers come and go: count them (dt_strategy_memory_bytes). */
static void held(zero *Z, int64_t floats)
{
    Z->held = (size_t)((int64_t)Z->held + floats * (int64_t)sizeof(float));
    Z->held_peak = Z->held > Z->held_peak ? Z->held : Z->held_peak;
}

/* The registry's whole values and gradients, where the layers use them. */
static float *reg_values(dt_strategy *s) { return dt_params_device_values(dt_model_params(s->model)); }
static float *reg_grads(dt_strategy *s) { return dt_params_device_grads(dt_model_params(s->model)); }

static bool padded(const zero *Z, int u) { return Z->L.unit[u].slice * Z->N != Z->L.unit[u].numel; }

/* This rank's real part of unit u: [lo, lo + n) of the unit (n may be 0: all padding). */
static int64_t own_part(const zero *Z, int u, int64_t *lo)
{
    const dt__zero_unit *U = &Z->L.unit[u];
    *lo = (int64_t)Z->r * U->slice;
    int64_t n = U->numel - *lo;
    return n < 0 ? 0 : n < U->slice ? n : U->slice;
}

/* Wait for unit u's gather or reduce, counting the wait as exposed. */
static dt_status wait_for(zero *Z, dt_request **req, bool gather, int u)
{
    if (!*req)
        return DT_OK;
    int64_t t0 = dt__now_ns();
    dt_status s = dt_wait(*req, NULL);
    Z->exposed += since(t0);
    *req = NULL;
    return s == DT_OK ? s : dt__fail(s, "zero: %s block %d's %s: %s", gather ? "gathering" : "reducing",
                                     Z->L.unit[u].block, gather ? "parameters" : "gradients", dt_last_error());
}

/* Units block b (local) uses: its own, then the tied parameters' units. */
static int units_of_block(const dt_strategy *s, const zero *Z, int b, int *out)
{
    int n = 0, lo, hi;
    dt_model_block_range(s->model, &lo, &hi);
    if (b < 0 || b >= dt_model_num_layers(s->model))
        return 0;
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

static bool has_unit(const int *us, int n, int u)
{
    for (int k = 0; k < n; k++)
        if (us[k] == u)
            return true;
    return false;
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

/* ---- stages 1 and 2: the updated slices back into the registry ---- */

static dt_status regather_wait(dt_strategy *s, zero *Z, int u)
{
    unit_state *us = &Z->u[u];
    DT_CHECK(wait_for(Z, &us->gather, true, u));
    if (us->staging) {
        const dt__zero_unit *U = &Z->L.unit[u];
        Z->ops->copy(reg_values(s) + U->flat_offset, us->staging, (size_t)U->numel * sizeof(float));
        Z->ops->free(us->staging);
        us->staging = NULL;
        held(Z, -U->slice * Z->N);
    }
    return DT_OK;
}

/* Start gathering unit u's updated slices into every rank's whole values:
 * in place where the ranks divide the unit, else through a padded copy. */
static dt_status regather_start(dt_strategy *s, zero *Z, int u)
{
    const dt__zero_unit *U = &Z->L.unit[u];
    unit_state *us = &Z->u[u];
    float *v = reg_values(s) + U->flat_offset;
    if (!padded(Z, u))
        return dt_iallgather(v, v, (size_t)U->slice, DT_F32, Z->dp, &us->gather);
    int staged = 0; /* at most MAX_REDUCES padded copies: wait for the oldest (started in unit order) */
    for (int k = 0; k < u; k++)
        staged += Z->u[k].staging != NULL;
    for (int k = 0; staged >= MAX_REDUCES && k < u; k++)
        if (Z->u[k].staging) {
            DT_CHECK(regather_wait(s, Z, k));
            staged--;
        }
    int64_t lo, n = own_part(Z, u, &lo);
    if (!(us->staging = Z->ops->alloc((size_t)(U->slice * Z->N) * sizeof(float))))
        return dt__fail(DT_ERR_NOMEM, "zero: out of memory gathering block %d's parameters", U->block);
    held(Z, U->slice * Z->N);
    Z->ops->copy(us->staging + lo, v + lo, (size_t)n * sizeof(float));
    Z->ops->zero(us->staging + lo + n, (size_t)(U->slice - n) * sizeof(float));
    return dt_iallgather(us->staging, us->staging, (size_t)U->slice, DT_F32, Z->dp, &us->gather);
}

/* ---- stage 3: gathering a unit's parameters ---- */

/* A buffer for unit u's gathered values: malloc'd on the host (counted as
 * held), from val_pool on a device (the pool counts itself). */
static dt_status values_take(zero *Z, int u)
{
    const dt__zero_unit *U = &Z->L.unit[u];
    unit_state *us = &Z->u[u];
    if (!Z->ops->host) {
        dt_status st = dt__pool_take(&Z->val_pool, U->slice * Z->N, false, &us->values);
        return st == DT_OK ? st : dt__wrap(st, "zero: gathering block %d's parameters: ", U->block);
    }
    if (!(us->values = malloc((size_t)(U->slice * Z->N) * sizeof(float))))
        return dt__fail(DT_ERR_NOMEM, "zero: out of memory gathering block %d's parameters", U->block);
    held(Z, U->slice * Z->N);
    return DT_OK;
}

/* Give unit u's gathered buffer back (none held: nothing); its gather must have landed. */
static void values_give(zero *Z, int u)
{
    unit_state *us = &Z->u[u];
    if (!us->values)
        return;
    if (!Z->ops->host)
        dt__pool_give(&Z->val_pool, us->values);
    else {
        held(Z, -Z->L.unit[u].slice * Z->N);
        free(us->values);
    }
    us->values = NULL;
}

static dt_status gather_start(zero *Z, int u)
{
    unit_state *us = &Z->u[u];
    if (us->values || us->gather)
        return DT_OK;
    const dt__zero_unit *U = &Z->L.unit[u];
    DT_CHECK(values_take(Z, u));
    dt_status s;
    if (Z->values_off) { /* this rank's slice from the file into its place, gathered in place */
        float *mine = us->values + (int64_t)Z->r * U->slice;
        s = dt__offload_read_range(Z->values_off, 0, U->shard_offset, U->slice, mine);
        if (s == DT_OK)
            s = dt_iallgather(us->values, us->values, (size_t)U->slice, DT_F32, Z->dp, &us->gather);
    } else
        s = dt_iallgather(Z->values + U->shard_offset, us->values, (size_t)U->slice, DT_F32, Z->dp, &us->gather);
    if (s != DT_OK)
        values_give(Z, u);
    return s;
}

static dt_status gather_wait(zero *Z, int u)
{
    DT_CHECK(gather_start(Z, u));
    return wait_for(Z, &Z->u[u].gather, true, u);
}

static dt_status release_values(dt_strategy *s, zero *Z, int u)
{
    unit_state *us = &Z->u[u];
    dt_status st = DT_OK;
    if (us->gather) { /* a prefetch nobody used: it must land before its buffer goes */
        st = dt_wait(us->gather, NULL);
        us->gather = NULL;
    }
    values_give(Z, u);
    bind_unit(s, Z, u);
    return st;
}

/* Start the gathers of block b's units (none when b is out of range). */
static dt_status prefetch(dt_strategy *s, zero *Z, int b)
{
    int us[MAX_UNITS_PER_BLOCK], n = units_of_block(s, Z, b, us);
    for (int k = 0; k < n; k++)
        DT_CHECK(gather_start(Z, us[k]));
    return DT_OK;
}

/* Free block b's gathered units except those block `keep_for` uses next. */
static dt_status release_block(dt_strategy *s, zero *Z, int b, int keep_for)
{
    int us[MAX_UNITS_PER_BLOCK], n = units_of_block(s, Z, b, us);
    int ks[MAX_UNITS_PER_BLOCK], nk = units_of_block(s, Z, keep_for, ks);
    for (int k = 0; k < n; k++)
        if (!has_unit(ks, nk, us[k]))
            DT_CHECK(release_values(s, Z, us[k]));
    return DT_OK;
}

/* ---- a unit's gradients, reduce-scattered into the shard ---- */

/* Unit u's reduce-scatter landed (wait: once it has): stages 2 and 3 add it
 * into the shard; stage 1's sum is already in the registry, or in its
 * padded copy, from which it goes to the unit's start. */
static dt_status collect_unit(zero *Z, dt_strategy *s, int u, bool wait)
{
    unit_state *us = &Z->u[u];
    if (!us->reduce)
        return DT_OK;
    int done = 1;
    if (wait)
        DT_CHECK(wait_for(Z, &us->reduce, false, u));
    else {
        dt_status st = dt_test(us->reduce, &done, NULL);
        if (st != DT_OK || done)
            us->reduce = NULL;
        if (st != DT_OK)
            return dt__fail(st, "zero: reducing block %d's gradients: %s", Z->L.unit[u].block, dt_last_error());
        if (!done)
            return DT_OK;
    }
    const dt__zero_unit *U = &Z->L.unit[u];
    if (Z->stage == 1) {
        if (us->sending) {
            int64_t lo, n = own_part(Z, u, &lo);
            Z->ops->copy(reg_grads(s) + U->flat_offset, us->sending, (size_t)n * sizeof(float));
            dt__pool_give(&Z->grad_pool, us->sending);
            us->sending = NULL;
        }
        return DT_OK;
    }
    Z->ops->axpy(Z->grads + U->shard_offset, 1.0f, us->summed, U->slice);
    dt__pool_give(&Z->sum_pool, us->summed);
    dt__pool_give(&Z->grad_pool, us->sending);
    us->summed = us->sending = NULL;
    return DT_OK;
}

/* Take in the landed reduce-scatters (all of them: wait). */
static dt_status collect(zero *Z, dt_strategy *s, bool wait)
{
    dt_status st = DT_OK;
    for (int u = 0; u < Z->L.nunits; u++) {
        dt_status r = collect_unit(Z, s, u, wait);
        st = st != DT_OK ? st : r;
    }
    return st;
}

static dt_status grads_bind(dt_strategy *s, zero *Z, int u)
{
    unit_state *us = &Z->u[u];
    if (!us->grads) {
        const dt__zero_unit *U = &Z->L.unit[u];
        dt_status st = dt__pool_take(&Z->grad_pool, U->slice * Z->N, true, &us->grads);
        if (st != DT_OK)
            return dt__wrap(st, "zero: block %d's gradients: ", U->block);
    }
    bind_unit(s, Z, u);
    return DT_OK;
}

/* Unit u's reduce, holding a buffer, joins those in flight: forget the
 * landed ones; at the bound, wait for the oldest first. */
static dt_status reduce_room(zero *Z, dt_strategy *s, int u)
{
    int keep = 0;
    for (int k = 0; k < Z->ninflight; k++)
        if (Z->u[Z->inflight[k]].reduce)
            Z->inflight[keep++] = Z->inflight[k];
    Z->ninflight = keep;
    if (Z->ninflight == MAX_REDUCES) {
        DT_CHECK(collect_unit(Z, s, Z->inflight[0], true));
        memmove(Z->inflight, Z->inflight + 1, (size_t)(--Z->ninflight) * sizeof(int));
    }
    Z->inflight[Z->ninflight++] = u;
    return DT_OK;
}

/* Stage 1: reduce-scatter unit u's whole gradients in the registry, in
 * place (this rank's sum lands at the unit's start), or through a padded
 * copy where the ranks do not divide it. */
static dt_status reduce_registry_start(dt_strategy *s, zero *Z, int u)
{
    const dt__zero_unit *U = &Z->L.unit[u];
    unit_state *us = &Z->u[u];
    float *g = reg_grads(s) + U->flat_offset;
    us->reduced = true;
    if (!padded(Z, u))
        return dt_ireduce_scatter(g, g, (size_t)U->slice, DT_F32, DT_SUM, Z->dp, &us->reduce);
    DT_CHECK(reduce_room(Z, s, u));
    dt_status st = dt__pool_take(&Z->grad_pool, U->slice * Z->N, false, &us->sending);
    if (st != DT_OK)
        return dt__wrap(st, "zero: reducing block %d's gradients: ", U->block);
    Z->ops->copy(us->sending, g, (size_t)U->numel * sizeof(float));
    Z->ops->zero(us->sending + U->numel, (size_t)(U->slice * Z->N - U->numel) * sizeof(float));
    return dt_ireduce_scatter(us->sending, us->sending, (size_t)U->slice, DT_F32, DT_SUM, Z->dp, &us->reduce);
}

/* Stages 2 and 3: the bound gradients of unit u leave for the shard. */
static dt_status reduce_bound_start(dt_strategy *s, zero *Z, int u)
{
    unit_state *us = &Z->u[u];
    const dt__zero_unit *U = &Z->L.unit[u];
    DT_CHECK(collect_unit(Z, s, u, true)); /* the micro-batch before's, if still in flight */
    if (!us->grads) /* its block's backward never ran: nothing to add, the shard keeps its sum */
        return DT_OK;
    DT_CHECK(reduce_room(Z, s, u));
    dt_status st = dt__pool_take(&Z->sum_pool, U->slice, false, &us->summed);
    if (st != DT_OK)
        return dt__wrap(st, "zero: reducing block %d's gradients: ", U->block);
    us->sending = us->grads; /* the parameters let go of it; it lives until the reduce lands */
    us->grads = NULL;
    us->reduced = true;
    bind_unit(s, Z, u);
    return dt_ireduce_scatter(us->sending, us->summed, (size_t)U->slice, DT_F32, DT_SUM, Z->dp, &us->reduce);
}

static dt_status zero_hook(void *user, dt_hook_point at, int b, dt_ctx *ctx)
{
    dt_strategy *s = user;
    zero *Z = s->impl;
    int us[MAX_UNITS_PER_BLOCK], n = units_of_block(s, Z, b, us), nb = dt_model_num_layers(s->model);
    DT_CHECK(collect(Z, s, false));
    if (Z->deferred && at != DT_BEFORE_FORWARD) /* a pipeline reduces after its schedule */
        return DT_OK;
    switch (at) {
    case DT_BEFORE_FORWARD:
        for (int k = 0; k < n; k++) {
            if (Z->stage < 3) { /* the slices updated by the other ranks */
                DT_CHECK(regather_wait(s, Z, us[k]));
                continue;
            }
            DT_CHECK(gather_wait(Z, us[k]));
            bind_unit(s, Z, us[k]);
        }
        return Z->stage == 3 ? prefetch(s, Z, b + 1) : DT_OK; /* the next block's while this one computes */
    case DT_AFTER_FORWARD:
        /* stage 3: the last block's backward follows at once: keep it */
        if (Z->stage == 3 && !(ctx->training && b == nb - 1))
            DT_CHECK(release_block(s, Z, b, b + 1));
        return DT_OK;
    case DT_BEFORE_BACKWARD:
        if (b == nb - 1) { /* a backward pass begins */
            Z->backwards++;
            dt__ready_groups_reset(&Z->ready);
        }
        for (int k = 0; Z->stage >= 2 && k < n; k++) {
            if (Z->stage == 3)
                DT_CHECK(gather_wait(Z, us[k]));
            DT_CHECK(grads_bind(s, Z, us[k]));
        }
        return Z->stage == 3 ? prefetch(s, Z, b - 1) : DT_OK; /* the block before's, for its backward */
    case DT_AFTER_BACKWARD:
        /* (the block's unit left from zero_ready as its last gradient became final) */
        /* stage 3: block 0 with another micro-batch to come keeps its parameters for that forward */
        if (Z->stage == 3 && !(b == 0 && Z->backwards < s->cfg.micro_batches))
            DT_CHECK(release_block(s, Z, b, b - 1));
        return DT_OK;
    }
    return DT_OK;
}

/* A gradient-ready event: when it completes a unit (its last parameter,
 * in its owner block's backward: the unit's other users ran before), the
 * unit's gradients leave, stage 1's in the last micro-batch only. */
static dt_status zero_ready(void *user, int param)
{
    dt_strategy *s = user;
    zero *Z = s->impl;
    int u = dt__ready_groups_mark(&Z->ready, param);
    if (u < 0)
        return DT_OK;
    DT_CHECK(collect(Z, s, false));
    if (Z->stage == 1)
        return Z->backwards >= s->cfg.micro_batches ? reduce_registry_start(s, Z, u) : DT_OK;
    return reduce_bound_start(s, Z, u);
}

/* ---- the update ---- */

/* Where this rank's gradient slice of unit u is: at the unit's start in the
 * registry's whole gradients (stage 1, reduced in place) or in the shard
 * (stages 2, 3). */
static float *grad_slice(dt_strategy *s, zero *Z, int u)
{
    return Z->stage == 1 ? reg_grads(s) + Z->L.unit[u].flat_offset
                         : Z->grads + Z->L.unit[u].shard_offset;
}

/* Wait for everything in flight: gathers (the parameters current) and reduces. */
static dt_status settle(dt_strategy *s, zero *Z)
{
    dt_status st = collect(Z, s, true);
    for (int u = 0; u < Z->L.nunits; u++) {
        dt_status r = Z->stage < 3 ? regather_wait(s, Z, u) : wait_for(Z, &Z->u[u].gather, true, u);
        st = st != DT_OK ? st : r;
    }
    return st;
}

static dt_status zero_sync(dt_strategy *s) { return settle(s, s->impl); }

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

/* Stage 3 with the values on disk: the optimizer walks them window by
 * window (the next one read, the last one written, while it computes). */
static dt_status update_offloaded(dt_strategy *s, zero *Z, float lr)
{
    for (int64_t w = 0; w * DT__OFFLOAD_WINDOW < Z->L.shard_numel; w++) {
        float *v[DT__OFFLOAD_MAX_ARRAYS];
        int64_t n, at = w * DT__OFFLOAD_WINDOW;
        DT_CHECK(dt__offload_acquire(Z->values_off, w, v, &n));
        DT_CHECK(dt_optimizer_update_slice(s->opt, v[0], Z->grads + at, at, n, lr));
        DT_CHECK(dt__offload_release(Z->values_off, w));
    }
    dt_optimizer_end_step(s->opt);
    return dt__offload_flush(Z->values_off); /* the next gathers read the file */
}

/* Parameter k's elements among unit u's [lo, lo + n): [*a, *b) of the unit (empty: *a >= *b). */
static void piece(dt_strategy *s, const zero *Z, int u, int k, int64_t lo, int64_t n, int64_t *a, int64_t *b)
{
    const dt_param_info *in = dt_params_info(dt_model_params(s->model), k);
    int64_t at = in->offset - Z->L.unit[u].flat_offset;
    *a = at > lo ? at : lo;
    *b = at + in->numel < lo + n ? at + in->numel : lo + n;
}

/* Inside tp: a sequence-parallel parameter's slice holds this rank's part
 * of the sum over tp: add the other parts (every tp rank has the same
 * units and slices, its shards having the same shapes). */
static dt_status reduce_tp_partial(dt_strategy *s, zero *Z, int u, float *g, int64_t lo, int64_t n)
{
    const dt__zero_unit *U = &Z->L.unit[u];
    dt_params *p = dt_model_params(s->model);
    for (int k = U->first_param; Z->tp && k < U->first_param + U->nparams; k++) {
        int64_t a, b;
        piece(s, Z, u, k, lo, n, &a, &b);
        if (dt_params_info(p, k)->tp_partial && a < b)
            DT_CHECK(dt_allreduce(g + (a - lo), g + (a - lo), (size_t)(b - a), DT_F32, DT_SUM, Z->tp));
    }
    return DT_OK;
}

/* The squares of this rank's slice of unit u, each parameter's by its
 * weight in the norm (one pass where every weight is 1). */
static double slice_sumsq(dt_strategy *s, const zero *Z, int u, const float *g, int64_t lo, int64_t n)
{
    if (!Z->weight)
        return Z->ops->sumsq(g, n);
    const dt__zero_unit *U = &Z->L.unit[u];
    double sq = 0;
    for (int k = U->first_param; k < U->first_param + U->nparams; k++) {
        int64_t a, b;
        piece(s, Z, u, k, lo, n, &a, &b);
        if (a < b && Z->weight[k] != 0)
            sq += Z->weight[k] * Z->ops->sumsq(g + (a - lo), b - a);
    }
    return sq;
}

static dt_status zero_update(dt_strategy *s, float lr, float max_norm, float *norm)
{
    zero *Z = s->impl;
    free(Z->view); /* a caller's copy of the shard goes stale */
    Z->view = NULL;
    /* units whose reduce did not start in a backward (a block that did not
     * run one, or stage 1 with fewer backwards than micro-batches) go now */
    for (int u = 0; u < Z->L.nunits; u++)
        if (!Z->u[u].reduced)
            DT_CHECK(Z->stage == 1 ? reduce_registry_start(s, Z, u) : reduce_bound_start(s, Z, u));
    DT_CHECK(settle(s, Z));
    Z->backwards = 0;
    for (int u = 0; u < Z->L.nunits; u++)
        Z->u[u].reduced = false;
    /* the mean over ranks and micro-batches, its norm over every rank's slices, clipped */
    float mean = 1.0f / (float)(Z->N * s->cfg.micro_batches);
    double sumsq = 0;
    int64_t t0 = dt__now_ns();
    for (int u = 0; u < Z->L.nunits; u++) {
        int64_t lo, n = own_part(Z, u, &lo);
        float *g = grad_slice(s, Z, u);
        DT_CHECK(reduce_tp_partial(s, Z, u, g, lo, n));
        Z->ops->scale(g, mean, n);
        sumsq += slice_sumsq(s, Z, u, g, lo, n);
    }
    DT_CHECK(dt_allreduce(&sumsq, &sumsq, 1, DT_F64, DT_SUM, Z->dp));
    if (Z->tp) /* each tensor-parallel shard once, a replicated tensor's share 1/t */
        DT_CHECK(dt_allreduce(&sumsq, &sumsq, 1, DT_F64, DT_SUM, Z->tp));
    if (Z->stages) /* every stage's */
        DT_CHECK(dt_allreduce(&sumsq, &sumsq, 1, DT_F64, DT_SUM, Z->stages));
    Z->blocking += since(t0);
    Z->exposed += since(t0);
    float total = (float)sqrt(sumsq);
    if (norm)
        *norm = total;
    float clip = dt__clip_coefficient(total, max_norm); /* torch's clip_grad_norm_ */
    if (Z->stage == 3) {
        if (clip != 1.0f)
            Z->ops->scale(Z->grads, clip, Z->L.shard_numel);
        DT_CHECK(Z->values_off ? update_offloaded(s, Z, lr)
                               : dt_optimizer_step(s->opt, Z->values, Z->grads, Z->L.shard_numel, lr));
        DT_CHECK(Z->ops->zero(Z->grads, (size_t)Z->L.shard_numel * sizeof(float)));
        end_timing(Z);
        return prefetch(s, Z, 0); /* the next forward's first block */
    }
    /* stages 1 and 2: each slice updated where it sits in the whole
     * parameters, its gather started at once */
    float *v = reg_values(s);
    for (int u = 0; u < Z->L.nunits; u++) {
        const dt__zero_unit *U = &Z->L.unit[u];
        int64_t lo, n = own_part(Z, u, &lo);
        float *g = grad_slice(s, Z, u);
        if (clip != 1.0f)
            Z->ops->scale(g, clip, n);
        DT_CHECK(dt_optimizer_update_slice(s->opt, v + U->flat_offset + lo, g, U->shard_offset, n, lr));
        DT_CHECK(regather_start(s, Z, u));
    }
    dt_optimizer_end_step(s->opt);
    if (Z->stage == 2)
        DT_CHECK(Z->ops->zero(Z->grads, (size_t)Z->L.shard_numel * sizeof(float)));
    end_timing(Z);
    return DT_OK;
}

static void zero_destroy(dt_strategy *s)
{
    zero *Z = s->impl;
    if (!Z)
        return;
    if (Z->u) {
        collect(Z, s, true);
        for (int u = 0; u < Z->L.nunits; u++) {
            if (Z->u[u].gather)
                dt_wait(Z->u[u].gather, NULL);
            values_give(Z, u);
            Z->ops->free(Z->u[u].staging);
        }
    }
    if (s->model) {
        dt_model_remove_hook(s->model, Z->hook_sub);
        dt_params_unsubscribe(dt_model_params(s->model), Z->ready_sub);
    }
    dt__pool_free(&Z->grad_pool);
    dt__pool_free(&Z->sum_pool);
    dt__pool_free(&Z->val_pool);
    dt__ready_groups_free(&Z->ready);
    if (Z->dp)
        dt_comm_destroy(Z->dp);
    dt__offload_close(Z->values_off);
    free(Z->weight);
    free(Z->view);
    free(Z->u);
    if (Z->ops && !Z->ops->host) {
        Z->ops->free(Z->values);
        Z->ops->free(Z->grads);
    } else {
        free(Z->values);
        free(Z->grads);
    }
    dt__zero_layout_free(&Z->L);
    free(Z);
}

/* The gradient pools, of the largest unit's size.  Stages 2 and 3 reserve
 * what a backward holds at once: the units bound while a block runs (its
 * own, the tied ones bound since their first user in backward order) and
 * MAX_REDUCES leaving, each holding one buffer (and one slice for its sum).
 * Stage 1 takes one only for a padded unit's copy, at the update. */
static dt_status reserve_pools(dt_strategy *s, zero *Z)
{
    int64_t max_slice = 0;
    for (int u = 0; u < Z->L.nunits; u++)
        max_slice = Z->L.unit[u].slice > max_slice ? Z->L.unit[u].slice : max_slice;
    int nb = dt_model_num_layers(s->model), most = 0, nbound = 0;
    bool *bound = calloc((size_t)(Z->L.nunits ? Z->L.nunits : 1), sizeof *bound);
    if (!bound)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int b = nb - 1; b >= 0; b--) { /* backward's order, as zero_hook binds and zero_ready lets go */
        int us[MAX_UNITS_PER_BLOCK], n = units_of_block(s, Z, b, us), own = Z->L.unit_of_block[b];
        for (int k = 0; k < n; k++)
            if (!bound[us[k]]) {
                bound[us[k]] = true;
                nbound++;
            }
        most = nbound > most ? nbound : most;
        if (own >= 0 && bound[own]) {
            bound[own] = false;
            nbound--;
        }
    }
    free(bound);
    bool backward = Z->stage >= 2;
    if (Z->stage == 3 && !Z->ops->host) /* the gathered units: what a pass holds at once, settled in the first step */
        DT_CHECK(dt__pool_reserve(&Z->val_pool, Z->L.max_padded, 0));
    DT_CHECK(dt__pool_reserve(&Z->grad_pool, Z->L.max_padded, backward ? most + MAX_REDUCES : 0));
    return dt__pool_reserve(&Z->sum_pool, max_slice, backward ? MAX_REDUCES : 0);
}

static size_t zero_memory(const dt_strategy *s, size_t *buffers)
{
    const zero *Z = s->impl;
    *buffers = Z->held_peak + Z->grad_pool.bytes + Z->sum_pool.bytes + Z->val_pool.bytes;
    return Z->shard + *buffers;
}

dt_status dt__zero_save(dt_strategy *s, const dt__save_args *a); /* zero/checkpoint.c */

static void zero_io(const dt_strategy *s, dt_strategy_io *out)
{
    if (((const zero *)s->impl)->values_off)
        dt__offload_io(((const zero *)s->impl)->values_off, &out->disk_read, &out->disk_written);
}

static const dt__strategy_ops zero_ops = {.name = "zero",
                                          .update = zero_update,
                                          .save = dt__zero_save,
                                          .io = zero_io,
                                          .sync = zero_sync,
                                          .timing = zero_timing,
                                          .memory = zero_memory,
                                          .destroy = zero_destroy};

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
    if (!Z->values_off || Z->view)
        return Z->values ? Z->values : Z->view;
    if (!(Z->view = malloc((size_t)(Z->L.shard_numel ? Z->L.shard_numel : 1) * sizeof(float))) ||
        dt__offload_read_all(Z->values_off, Z->view) != DT_OK) {
        if (!Z->view)
            dt__fail(DT_ERR_NOMEM, "zero: out of memory reading the parameter shard from disk");
        free(Z->view);
        Z->view = NULL;
        if (numel)
            *numel = 0;
    }
    return Z->view;
}

dt_status dt_strategy_zero_shard_read(dt_strategy *s, int64_t offset, int64_t n, float *out)
{
    if (!s || s->ops != &zero_ops || ((zero *)s->impl)->stage != 3)
        return dt__fail(DT_ERR_INVALID, "zero_shard_read: %s", !s ? "the strategy is NULL"
                                                             : s->ops != &zero_ops ? "the strategy is not ZeRO"
                                                                                   : "only stage 3 keeps a shard of the values");
    zero *Z = s->impl;
    if (offset < 0 || n < 0 || offset > Z->L.shard_numel - n || (n > 0 && !out))
        return dt__fail(DT_ERR_INVALID, "zero_shard_read: elements [%lld, %lld) of a shard of %lld", (long long)offset,
                        (long long)(offset + n), (long long)Z->L.shard_numel);
    const float *from = Z->values ? Z->values : Z->view;
    if (n == 0)
        return DT_OK;
    if (!from) /* on disk: the range alone (the update flushed what it wrote) */
        return dt__offload_read_range(Z->values_off, 0, offset, n, out);
    if (!Z->ops->host) /* the device's shard: the range alone comes down */
        return Z->ops->download(out, from + offset, (size_t)n * sizeof *out);
    memcpy(out, from + offset, (size_t)n * sizeof *out);
    return DT_OK;
}

dt_status dt_strategy_zero_offload(dt_strategy *s, const char *dir)
{
    if (!s || s->ops != &zero_ops)
        return dt__fail(DT_ERR_INVALID, "zero_offload: %s", s ? "the strategy is not ZeRO" : "the strategy is NULL");
    zero *Z = s->impl;
    if (Z->stage != 3)
        return dt__fail(DT_ERR_INVALID, "zero_offload: stage %d keeps the whole parameters on every rank; only stage 3's "
                                        "parameter shard can live on disk", Z->stage);
    if (Z->values_off)
        return DT_OK;
    if (!Z->ops->host)
        return dt__fail(DT_ERR_INVALID, "zero_offload: the parameter shard is in %s's memory: offload to disk is not "
                        "built on a device", Z->ops->name);
    DT_CHECK(dt__offload_open(dir, "ZeRO-3 parameter offload", 1, Z->L.shard_numel, Z->values, &Z->values_off));
    free(Z->values);
    Z->values = NULL;
    int64_t window = Z->L.shard_numel < DT__OFFLOAD_WINDOW ? Z->L.shard_numel : DT__OFFLOAD_WINDOW;
    Z->shard = sizeof(float) * (size_t)(Z->L.shard_numel + 2 * window); /* the gradients, two windows of values */
    return DT_OK;
}

void dt_strategy_zero_offload_io(const dt_strategy *s, uint64_t *read, uint64_t *written)
{
    dt_strategy_io io;
    dt_strategy_io_bytes(s && s->ops == &zero_ops ? s : NULL, &io);
    *read = io.disk_read;
    *written = io.disk_written;
}

/* n zeroed floats of dev's memory (the host's: calloc). */
static float *alloc_zeroed(const dt_compute_ops *dev, int64_t n)
{
    size_t bytes = (size_t)(n ? n : 1) * sizeof(float);
    if (dev->host)
        return calloc(1, bytes);
    float *p = dev->alloc(bytes);
    if (p && dev->zero(p, bytes) != DT_OK) {
        dev->free(p);
        p = NULL;
    }
    return p;
}

/* Stage 3: this rank's slice of every unit of the whole values (the
 * registry's flat buffer, on the device where the model is) into the
 * shard, whose padding alloc_zeroed cleared (dt_zero_shard_take's layout,
 * copied by the device's entry). */
static dt_status take_shard(zero *Z, const float *whole)
{
    for (int u = 0; u < Z->L.nunits; u++) {
        int64_t lo, n = own_part(Z, u, &lo);
        const dt__zero_unit *U = &Z->L.unit[u];
        if (n > 0)
            DT_CHECK(Z->ops->copy(Z->values + U->shard_offset, whole + U->flat_offset + lo, (size_t)n * sizeof(float)));
    }
    return DT_OK;
}

dt_status dt__strategy_zero_make(dt_model *m, dt_optimizer *o, dt_comm *c, int stage, const dt_strategy_config *cfg,
                                 dt_comm *stages, bool deferred, dt_strategy **out)
{
    if (!c || !m || !out)
        return dt__fail(DT_ERR_INVALID, "strategy zero: %s is NULL", !c ? "the communicator" : !m ? "the model" : "out");
    if (stage < 1 || stage > 3)
        return dt__fail(DT_ERR_INVALID, "strategy zero: stage %d is not 1, 2 or 3 (stage 0 is data parallel)", stage);
    dt_comm *tp = cfg && cfg->tp && dt_comm_size(cfg->tp) > 1 ? cfg->tp : NULL;
    stages = stages && dt_comm_size(stages) > 1 ? stages : NULL;
    if (stage == 3 && (tp || stages || deferred))
        return dt__fail(DT_ERR_INVALID, "strategy zero: zero_stage 3 with tp/pp is not built: use 1 or 2");
    dt_params *p = dt_model_params(m);
    const dt_compute_ops *dev = dt_params_device(p);
    if (!dt_params_device_values(p) || !dt_params_device_grads(p))
        return dt__fail(DT_ERR_INVALID, "strategy zero: the model must hold its whole parameters and gradients "
                                        "(dt_model_instantiate) when the strategy starts");
    if (!dev->host && o && dt_optimizer_device(o) != dev)
        return dt__fail(DT_ERR_INVALID, "strategy zero: the parameters are on %s, the optimizer on %s "
                        "(dt_optimizer_set_device)", dev->name, dt_optimizer_device(o)->name);
    dt_strategy *s = NULL;
    DT_CHECK(dt__strategy_new(&zero_ops, sizeof(zero), m, o, cfg, &s));
    zero *Z = s->impl;
    dt_status st = DT_OK;
    /* deferred: the whole gradients stay in the registry through the
     * schedule, so stage 2 runs as stage 1 (see the top of this file) */
    stage = deferred && stage == 2 ? 1 : stage;
    Z->stage = stage;
    Z->ops = dev;
    Z->grad_pool.ops = Z->sum_pool.ops = Z->val_pool.ops = dev;
    Z->N = dt_comm_size(c);
    Z->r = dt_comm_rank(c);
    Z->tp = tp;
    Z->stages = stages;
    Z->deferred = deferred;
    s->key_group = (uint32_t)Z->r;
    if (st == DT_OK && (tp || stages))
        st = dt__grad_norm_weights(m, tp ? dt_comm_size(tp) : 1, &Z->weight);
    if (st == DT_OK)
        st = dt__zero_layout_make(m, Z->N, Z->r, &Z->L);
    int64_t S = Z->L.shard_numel;
    if (st == DT_OK && ((stage == 3 && !(Z->values = alloc_zeroed(dev, S))) ||
                        (stage >= 2 && !(Z->grads = alloc_zeroed(dev, S))) ||
                        !(Z->u = calloc((size_t)(Z->L.nunits ? Z->L.nunits : 1), sizeof *Z->u))))
        st = dt__fail(DT_ERR_NOMEM, "out of memory for the ZeRO shard (%lld elements)", (long long)S);
    Z->shard = sizeof(float) * (size_t)((stage == 3 ? S : 0) + (stage >= 2 ? S : 0));
    if (st == DT_OK) /* every rank starts from rank 0's weights */
        st = dt_broadcast(dt_params_device_values(p), (size_t)dt_params_numel(p), DT_F32, 0, c);
    if (st == DT_OK) /* a communicator of its own: the caller's calls on c do not wait behind its gathers */
        st = dt_comm_split(c, 0, Z->r, &Z->dp);
    if (st == DT_OK && stage == 3)
        st = take_shard(Z, dt_params_device_values(p));
    if (st == DT_OK) {
        Z->async_before = dt_comm_async_seconds(Z->dp);
        if (stage >= 2)
            dt_params_drop_storage(p, stage == 3, true);
        st = dt__ready_groups_init(&Z->ready, dt_params_count(p), Z->L.nunits, Z->L.unit_of_param);
    }
    if (st == DT_OK)
        st = reserve_pools(s, Z);
    if (st == DT_OK)
        st = dt_model_add_hook(m, zero_hook, s, &Z->hook_sub);
    if (st == DT_OK)
        st = dt_params_subscribe_grad_ready(p, zero_ready, s, &Z->ready_sub);
    return dt__strategy_finish(s, st, out);
}

dt_status dt_strategy_zero_create(dt_model *m, dt_optimizer *o, dt_comm *c, int stage, const dt_strategy_config *cfg,
                                  dt_strategy **out)
{
    return dt__strategy_zero_make(m, o, c, stage, cfg, NULL, false, out);
}
