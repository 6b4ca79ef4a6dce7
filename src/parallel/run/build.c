/* dt_strategy_create: a run from a layout, a model recipe and a world.  The
 * steps, in the order their dependencies fix:
 *
 *   roles      the parameter servers split off the world (dt_ps_split)
 *   mesh       dp x pp x tp over the workers, tp innermost (a tensor-parallel
 *              group on one host), then pp
 *   model      this rank's stage of tensor-parallel shards, initialised from
 *              the seed; precision and recomputation
 *   optimizer  over what this rank updates: the whole registry, its ZeRO shard
 *              over dp, or nothing of its own (a parameter server's worker)
 *   resume     this rank's part of a checkpoint (run/load.c)
 *   storage    offload of the optimizer state to disk; the move to the device
 *   strategy   composed: the schedule (the common micro-batch loop, or the
 *              pipeline's) with the gradients' synchronisation (none, DDP's
 *              allreduce, ZeRO's reduce-scatter, the servers' push and pull)
 *   writer     the lead's whole model for a mesh's or a server's checkpoints
 *
 * Every strategy constructor stays callable on its own (a user's loop); what
 * this file adds is that nobody above src/parallel chooses between them. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "parallel/common/strategy.h"
#include "parallel/layout/layout_internal.h"

/* The recipe's description split over r->tp, and this rank's part of it. */
static dt_status build_model(const dt__run *r, dt_model **m)
{
    dt_model_desc *d = NULL;
    dt_status s = r->recipe.describe(r->recipe.user, r->tp, &d);
    if (s != DT_OK)
        return dt__fail(s, "cannot build the model: %s", dt_last_error());
    if (!r->pp) {
        if ((s = dt_model_instantiate(d, 0, dt_model_desc_blocks(d), m)) != DT_OK)
            s = dt__fail(s, "cannot build the model: %s", dt_last_error());
    } else if ((s = dt_layout_check_model(&r->layout, d)) == DT_OK &&
               (s = dt_pipeline_stage_create(d, r->layout.pp, dt_layout_chunks(&r->layout), dt_comm_rank(r->pp), m)) !=
                   DT_OK)
        s = dt__fail(s, "pp = %d: %s", r->layout.pp, dt_last_error());
    dt_model_desc_destroy(d);
    return s;
}

/* The whole model, unsplit (the lead's copy for checkpoints, a server's layout). */
dt_status dt__run_whole_model(const dt__run *r, dt_model **m)
{
    dt_model_desc *d = NULL;
    dt_status s = r->recipe.describe(r->recipe.user, NULL, &d);
    if (s == DT_OK)
        s = dt_model_instantiate(d, 0, dt_model_desc_blocks(d), m);
    if (s != DT_OK)
        s = dt__fail(s, "cannot build the model: %s", dt_last_error());
    dt_model_desc_destroy(d);
    return s;
}

/* Stage `stage` of the pipeline, unsplit by tp (a mesh checkpoint's layout of that stage). */
dt_status dt__run_stage_model(const dt__run *r, int stage, dt_model **m)
{
    dt_model_desc *d = NULL;
    dt_status s = r->recipe.describe(r->recipe.user, NULL, &d);
    if (s == DT_OK)
        s = dt_pipeline_stage_create(d, r->layout.pp, dt_layout_chunks(&r->layout), stage, m);
    if (s != DT_OK)
        s = dt__fail(s, "pp = %d: %s", r->layout.pp, dt_last_error());
    dt_model_desc_destroy(d);
    return s;
}

/* recompute blocks: every transformer block where the model has them, else
 * every block (an mlp's, a cnn's); all: every block, embedding and head too. */
static dt_status set_recompute(dt_recompute how, dt_model *m)
{
    if (how == DT_RECOMPUTE_OFF)
        return DT_OK;
    bool transformer = false;
    for (int i = 0; i < dt_model_num_layers(m); i++)
        transformer |= !strcmp(dt_model_block(m, i)->kind, "gpt-block");
    for (int i = 0; i < dt_model_num_layers(m); i++)
        if ((how == DT_RECOMPUTE_ALL || !transformer || !strcmp(dt_model_block(m, i)->kind, "gpt-block")) &&
            dt_model_set_recompute(m, i, true) != DT_OK)
            return dt__fail(DT_ERR_INVALID, "recompute: %s", dt_last_error());
    return DT_OK;
}

/* tp_copies: every transformer block runs its rows as copies. */
static dt_status set_copies(int copies, dt_model *m)
{
    for (int i = 0; copies > 1 && i < dt_model_num_layers(m); i++)
        if (!strcmp(dt_model_block(m, i)->kind, "gpt-block") && dt_model_set_copies(m, i, copies) != DT_OK)
            return dt__fail(DT_ERR_INVALID, "tp_copies: %s", dt_last_error());
    return DT_OK;
}

/* The run's optimizer over [offset, offset + n) of p's flat buffer, with the
 * weight-decay groups the names give. */
dt_status dt__run_optimizer_range(const dt__run *r, dt_params *p, int64_t offset, int64_t n, dt_optimizer **o)
{
    dt_status s = r->recipe.make_optimizer(r->recipe.user, n, o);
    dt_optim_group *groups = NULL;
    int ngroups = 0;
    if (s == DT_OK && r->recipe.weight_decay > 0) {
        s = dt_decay_groups(p, r->recipe.no_decay, r->recipe.weight_decay, offset, n, &groups, &ngroups);
        if (s == DT_OK)
            s = dt_optimizer_set_groups(*o, groups, ngroups);
    }
    free(groups);
    return s != DT_OK ? dt__fail(s, "optimizer: %s", dt_last_error()) : DT_OK;
}

/* What this rank updates: its ZeRO shard of m over dp, or the whole registry. */
static dt_status make_optimizer(const dt__run *r, dt_model *m, dt_optimizer **o)
{
    dt_params *p = dt_model_params(m);
    if (r->layout.zero_stage == 0)
        return dt__run_optimizer_range(r, p, 0, dt_params_numel(p), o);
    int N = dt_comm_size(r->dp), rank = dt_comm_rank(r->dp);
    dt_status s = r->recipe.make_optimizer(r->recipe.user, dt_zero_shard_numel(m, N), o);
    dt_optim_group *groups = NULL;
    int ngroups = 0;
    if (s == DT_OK && r->recipe.weight_decay > 0) {
        s = dt_zero_decay_groups(m, N, rank, r->recipe.no_decay, r->recipe.weight_decay, &groups, &ngroups);
        if (s == DT_OK)
            s = dt_optimizer_set_groups(*o, groups, ngroups);
    }
    free(groups);
    return s != DT_OK ? dt__fail(s, "optimizer: %s", dt_last_error()) : DT_OK;
}

/* device != cpu: the model and its optimizer move there, on every rank
 * (cuda: the GPU of DT_LOCAL_RANK; ranks may share one).  The strategies
 * then communicate the device's buffers (the communicator stages them). */
static dt_status to_device(const dt__run *r, dt_model *m, dt_optimizer *o)
{
    const dt_layout *l = &r->layout;
    if (!strcmp(l->device, "cpu"))
        return DT_OK;
    const dt_device *dev = NULL;
    dt_status s = dt_device_open(l->device, &dev);
    if (s == DT_OK)
        s = dt_device_set_tf32(dev, l->tf32);
    if (s == DT_OK)
        s = dt_model_to_device(m, dev);
    if (s == DT_OK)
        s = dt_optimizer_set_device(o, dev);
    return s != DT_OK ? dt__fail(s, "device %s: %s", l->device, dt_last_error()) : DT_OK;
}

/* The layout's gradient keys as data parallelism's bucket configuration. */
static dt_ddp_config ddp_config(const dt_layout *l)
{
    bool psgd = l->grad_wire == DT_GRAD_POWERSGD, topk = l->grad_wire == DT_GRAD_TOPK;
    return (dt_ddp_config){.bucket_bytes = (size_t)(l->bucket_mb * 1048576.0),
                           .wire = psgd || topk ? DT_F32 : l->grad_wire,
                           .compressor = psgd ? DT_DDP_POWERSGD : topk ? DT_DDP_TOPK : DT_DDP_UNCOMPRESSED,
                           .powersgd_rank = l->powersgd_rank,
                           .compress_start = l->compress_start_step,
                           .topk_fraction = l->topk_fraction};
}

/* The composition: the servers' push and pull; the pipeline's schedule with
 * its gradients synchronised over dp by allreduce or by ZeRO (pipe/dp_sync);
 * ZeRO over dp (its norm over tp too when the model is split); one process;
 * or DDP (over tp's shards too). */
static dt_status compose(dt_strategy_config *sc, dt__run *r, dt_model *m, dt_optimizer *o, dt_strategy **out)
{
    const dt_layout *l = &r->layout;
    if (l->servers > 0)
        return dt_strategy_ps_create(m, r->job, &r->ps, sc, out);
    if (r->pp) {
        dt_pipeline_config pc = {l->schedule, dt_layout_chunks(l), r->pp, r->dp, l->zero_stage};
        return dt_strategy_pipeline_create(m, o, &pc, sc, out);
    }
    if (l->zero_stage > 0)
        return dt_strategy_zero_create(m, o, r->dp, l->zero_stage, sc, out);
    /* one process: the single strategy's update visits a row-sparse table's
     * touched rows only (data parallel's is dense, as its allreduce), and
     * runs on a device's buffers without a communicator */
    if (dt_comm_size(r->dp) == 1 && !r->tp &&
        (dt_params_any_row_sparse(dt_model_params(m)) || !dt_device_is_host(dt_model_device(m))))
        return dt_strategy_single_create(m, o, sc, out);
    return dt_strategy_ddp_create(m, o, r->dp, sc, out);
}

/* Roles and mesh: r->dp, tp, pp (and role, mesh) for this rank. */
static dt_status split_world(dt__run *r)
{
    const dt_layout *l = &r->layout;
    r->dp = r->job;
    if (l->servers > 0) {
        r->ps = (dt_ps_config){.servers = l->servers, .sync = l->sync, .staleness = l->staleness,
                               .clock_log = r->recipe.ps_clock_log};
        DT_CHECK(dt_ps_split(r->job, &r->ps, &r->role));
        r->server = dt_ps_server_index(&r->ps, r->job) >= 0;
        r->dp = r->role;
    }
    if (r->server || (l->tp == 1 && l->pp == 1))
        return DT_OK;
    dt_mesh_dim dims[3];
    if (dt_mesh_create(r->dp, dims, dt__layout_mesh_dims(l, dims), &r->mesh) != DT_OK)
        return dt__fail(DT_ERR_INVALID, "pp = %d, tp = %d: %s", l->pp, l->tp, dt_last_error());
    r->dp = dt_mesh_comm(r->mesh, "dp");
    r->tp = l->tp > 1 ? dt_mesh_comm(r->mesh, "tp") : NULL;
    r->pp = l->pp > 1 ? dt_mesh_comm(r->mesh, "pp") : NULL;
    return DT_OK;
}

static void run_free(dt__run *r)
{
    if (!r)
        return;
    dt_optimizer_destroy(r->whole_o);
    dt_model_destroy(r->whole);
    dt_mesh_destroy(r->mesh);
    if (r->role)
        (void)dt_comm_destroy(r->role);
    free(r);
}

/* The run with the model and optimizer it built (dt_strategy_destroy, through r->release). */
static void run_release(dt__run *r, dt_model *m, dt_optimizer *o)
{
    dt_optimizer_destroy(o);
    dt_model_destroy(m);
    run_free(r);
}

/* A server's strategy: no model of its own to train, only the run to serve. */
static const dt__strategy_ops serve_ops = {.name = "parameter server"};

dt_status dt_strategy_create(const dt_layout *l, const dt_run_recipe *rc, dt_comm *world, dt_strategy **out)
{
    if (!l || !rc || !world || !out || !rc->describe || !rc->make_optimizer)
        return dt__fail(DT_ERR_INVALID, "strategy_create: %s is NULL",
                        !l ? "the layout" : !rc ? "the recipe" : !world ? "the world" : !out ? "out"
                        : !rc->describe ? "the recipe's describe" : "the recipe's make_optimizer");
    *out = NULL;
    dt__run *r = calloc(1, sizeof *r);
    if (!r)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    r->layout = *l;
    r->recipe = *rc;
    r->job = world;
    r->release = run_release;
    dt_model *m = NULL;
    dt_optimizer *o = NULL;
    dt_strategy *s = NULL;
    dt_status st = dt_layout_check(l, dt_comm_size(world), &r->layout.dp);
    if (st == DT_OK)
        st = split_world(r);
    if (st == DT_OK && r->server) { /* the servers' side: dt_strategy_serve, over the whole model's layout */
        if ((st = dt__run_whole_model(r, &r->whole)) == DT_OK && !(s = calloc(1, sizeof *s)))
            st = dt__fail(DT_ERR_NOMEM, "out of memory");
        if (st != DT_OK) {
            run_free(r);
            return st;
        }
        s->ops = &serve_ops;
        s->run = r;
        *out = s;
        return DT_OK;
    }
    if (st == DT_OK && (st = build_model(r, &m)) == DT_OK) {
        dt_phase_mark("rank %d model built", dt_comm_rank(world));
        /* A resume overwrites every value (dt__run_load): the random
         * initialisation (0.7 s of a gpt-mini restart on a loaded host) is
         * for a fresh start.  Kept where a resume does not load every value
         * on every rank (a parameter server's workers after the first pull
         * theirs) and under bf16, whose copies are made from it below. */
        if (!rc->resume || l->servers > 0 || l->precision == DT_BF16)
            dt_model_init(m, rc->seed);
        dt_phase_mark("rank %d model initialised", dt_comm_rank(world));
        if (l->precision == DT_BF16 && (st = dt_model_set_precision(m, DT_BF16)) != DT_OK)
            st = dt__fail(st, "precision: %s", dt_last_error());
    }
    if (st == DT_OK)
        st = set_recompute(l->recompute, m);
    if (st == DT_OK)
        st = set_copies(l->tp_copies, m);
    if (st == DT_OK && rc->check_model) { /* before the optimizer and the strategy's buffers exist */
        bool lead = dt_comm_rank(r->dp) == 0 && (!r->tp || dt_comm_rank(r->tp) == 0) &&
                    (!r->pp || dt_comm_rank(r->pp) == 0);
        st = rc->check_model(rc->user, m, dt_comm_size(r->dp), lead);
    }
    if (st == DT_OK) /* a server's worker: the servers update, its own optimizer does nothing */
        st = l->servers > 0 ? dt_sgd_create(&(dt_sgd_config){0, 0, false}, dt_params_numel(dt_model_params(m)), &o)
                            : make_optimizer(r, m, &o);
    if (st == DT_OK && rc->resume) {
        dt_phase_mark("rank %d run built; loading", dt_comm_rank(world));
        st = dt__run_load(r, rc->resume, m, o);
        dt_phase_mark("rank %d loaded", dt_comm_rank(world));
    }
    if (st == DT_OK && l->offload == DT_OFFLOAD_DISK && (st = dt_optimizer_offload(o, rc->offload_dir)) != DT_OK)
        st = dt__fail(st, "offload: %s", dt_last_error());
    if (st == DT_OK)
        st = to_device(r, m, o);
    dt_strategy_config sc = {.micro_batches = dt_layout_step_micro_batches(l),
                             .grad_clip = rc->grad_clip,
                             .seed = rc->seed,
                             .ddp = ddp_config(l),
                             .tp = r->tp};
    if (l->bucket_mb > 0 && sc.ddp.bucket_bytes < sizeof(float))
        sc.ddp.bucket_bytes = sizeof(float);
    if (st == DT_OK && (st = compose(&sc, r, m, o, &s)) == DT_OK) {
        s->run = r; /* from here the strategy owns the run, the model and the optimizer */
        if (rc->resume && s->ops->resume) /* the strategy's own state (a compressor's error feedback) */
            st = s->ops->resume(s, rc->resume);
        if (!s->opt) /* a server's worker: its optimizer (which the servers' steps pass by) goes with the run */
            s->opt = o;
        r->recipe.resume = NULL;
        if (st == DT_OK && l->zero_stage == 3 && l->offload == DT_OFFLOAD_DISK &&
            (st = dt_strategy_zero_offload(s, rc->offload_dir)) != DT_OK)
            st = dt__fail(st, "offload: %s", dt_last_error());
        if (st == DT_OK)
            st = dt__run_prepare_writer(s);
        if (st != DT_OK) {
            dt_strategy_destroy(s);
            return st;
        }
        *out = s;
        return DT_OK;
    }
    dt_optimizer_destroy(o);
    dt_model_destroy(m);
    run_free(r);
    return st;
}

/* The lead's whole model and optimizer for a mesh's or a server's
 * checkpoints (gathered into at each save), allocated once here. */
dt_status dt__run_prepare_writer(dt_strategy *s)
{
    dt__run *r = s->run;
    bool gathers = r->mesh || r->layout.servers > 0;
    if (!gathers || !dt_strategy_lead(s))
        return DT_OK;
    DT_CHECK(dt__run_whole_model(r, &r->whole));
    dt_params *wp = dt_model_params(r->whole);
    if (!r->whole_o)
        DT_CHECK(dt__run_optimizer_range(r, wp, 0, dt_params_numel(wp), &r->whole_o));
    if (r->layout.servers > 0) /* a parameter server's snapshot: no gradients */
        dt_params_drop_storage(wp, false, true);
    return DT_OK;
}

