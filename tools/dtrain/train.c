/* dtrain train: the single-process training loop. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "data_source.h"
#include "dtrain_cli.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The optimizer, with weight decay only where the no_decay patterns allow
 * (dt_decay_groups: not on biases, LayerNorm or embeddings by default). */
static dt_status make_optimizer_n(const dtrain_config *c, int64_t n, dt_optimizer **o)
{
    if (strcmp(c->optimizer, "adagrad") == 0)
        return dt_adagrad_create(&(dt_adagrad_config){(float)c->lr_decay, (float)c->weight_decay,
                                                      (float)c->initial_accumulator_value, (float)c->adagrad_eps}, n, o);
    return strcmp(c->optimizer, "sgd") == 0
                      ? dt_sgd_create(&(dt_sgd_config){(float)c->momentum, (float)c->weight_decay, c->nesterov}, n, o)
                      : dt_adamw_create(&(dt_adamw_config){(float)c->beta1, (float)c->beta2, (float)c->eps,
                                                           (float)c->weight_decay}, n, o);
}

dt_status dtrain_make_optimizer_range(const dtrain_config *c, dt_params *p, int64_t offset, int64_t n,
                                      dt_optimizer **o)
{
    dt_status s = make_optimizer_n(c, n, o);
    dt_optim_group *groups = NULL;
    int ngroups = 0;
    if (s == DT_OK && c->weight_decay > 0) {
        s = dt_decay_groups(p, c->no_decay, (float)c->weight_decay, offset, n, &groups, &ngroups);
        if (s == DT_OK)
            s = dt_optimizer_set_groups(*o, groups, ngroups);
    }
    free(groups);
    return s;
}

/* The optimizer for n elements, with the weight-decay groups that `m` (the
 * whole model's registry, or with zero_ranks > 0 ZeRO's shard of rank
 * zero_rank) gives them. */
static dt_status make_optimizer_for(const dtrain_config *c, dt_model *m, dt_params *p, int zero_ranks, int zero_rank,
                                    dt_optimizer **o)
{
    int64_t n = zero_ranks ? dt_zero_shard_numel(m, zero_ranks) : dt_params_numel(p);
    dt_status s = make_optimizer_n(c, n, o);
    dt_optim_group *groups = NULL;
    int ngroups = 0;
    if (s == DT_OK && c->weight_decay > 0) {
        float wd = (float)c->weight_decay;
        s = zero_ranks ? dt_zero_decay_groups(m, zero_ranks, zero_rank, c->no_decay, wd, &groups, &ngroups)
                       : dt_decay_groups(p, c->no_decay, wd, 0, n, &groups, &ngroups);
        if (s == DT_OK)
            s = dt_optimizer_set_groups(*o, groups, ngroups);
    }
    free(groups);
    if (s != DT_OK)
        fprintf(stderr, "dtrain: optimizer: %s\n", dt_last_error());
    return s;
}

static dt_status make_optimizer(const dtrain_config *c, dt_params *p, dt_optimizer **o)
{
    return make_optimizer_for(c, NULL, p, 0, 0, o);
}

/* A split run's resume from an unsplit checkpoint (or, for a mesh, a
 * sharded one put together whole by dt_ckpt_load): the whole model and
 * optimizer, then this rank's part of them: ZeRO (zero_ranks > 0) the
 * whole values into m (still whole: the strategy takes its shard later) and
 * its shard of the optimizer state; a mesh its stage's and shards' slices,
 * by name.  A ZeRO run resumes from shard files with dtrain_zero_resume. */
static dt_status load_split(const dtrain_config *c, const char *step_dir, dt_model *m, dt_optimizer *o,
                            int zero_ranks, int zero_rank)
{
    dt_model *wm = NULL;
    dt_optimizer *wo = NULL;
    dt_status s = dtrain_build_model_tp(c, NULL, &wm);
    if (s == DT_OK)
        s = make_optimizer(c, dt_model_params(wm), &wo);
    if (s == DT_OK && (s = dt_ckpt_load(step_dir, dt_model_params(wm), wo)) != DT_OK)
        fprintf(stderr, "dtrain: %s\n", dt_last_error());
    dt_params *p = dt_model_params(m), *wp = wm ? dt_model_params(wm) : NULL;
    if (s == DT_OK && zero_ranks && (c->tp > 1 || c->pp > 1)) /* ZeRO inside a mesh */
        s = dtrain_zero_mesh_slice(c, wp, wo, m, zero_ranks, zero_rank, o);
    else if (s == DT_OK && zero_ranks) {
        dt_vec_copy(dt_params_values(p), dt_params_values(wp), dt_params_numel(p));
        s = dtrain_zero_slice(m, zero_ranks, zero_rank, wo, o);
    } else if (s == DT_OK)
        s = dtrain_tp_slice(wp, wo, p, o);
    dt_optimizer_destroy(wo);
    dt_model_destroy(wm);
    return s;
}

/* One checkpoint at pr->step, collective over the ranks that hold a part:
 * ZeRO's ranks each write their shard file (zero_ckpt.c; at stage 3 rank 0
 * also model.safetensors, block by block); a mesh gathers
 * the whole model onto the writer (rank 0) from the shards, over dp rank
 * 0's pipeline and tensor-parallel groups; a run that is not split hands
 * its state to the writer as it is.  The writer (rank 0's; NULL on the
 * others) writes in the background; *stall: the time it held us up. */
static dt_status checkpoint(const dtrain_config *c, dt_strategy *s, dt_model *m, dt_optimizer *o, dt_comm *dp,
                            dt_comm *tp, dt_comm *pp, dt_model *whole, dt_optimizer *whole_o,
                            dt_ckpt_writer *w, const dt_ckpt_progress *pr, const char *label, double *stall)
{
    dt_params *wp = whole ? dt_model_params(whole) : NULL;
    if (c->servers > 0) { /* the servers' parameters and optimizer state, onto the writer */
        if (dt_comm_rank(dp) != 0 || !whole)
            return DT_OK;
        if (dt_strategy_ps_snapshot(s, dt_params_values(wp), whole_o) != DT_OK) {
            fprintf(stderr, "dtrain: checkpoint at step %lld: %s\n", (long long)pr->step, dt_last_error());
            return DT_ERR_INVALID;
        }
        dt_ckpt_progress q = *pr;
        q.optimizer_steps = dt_optimizer_steps(whole_o); /* the servers' optimizer made the steps */
        if (w)
            dt_ckpt_writer_submit(w, &q, label, stall);
        return DT_OK;
    }
    if (c->zero_stage > 0 && !tp && !pp)
        return dtrain_zero_checkpoint(c, s, m, o, dp, w, pr, label, stall);
    dt_status r = DT_OK;
    if (!dt_device_is_host(dt_model_device(m)) && w && /* the host's copies of the values and the state */
        ((r = dt_params_download(dt_model_params(m))) != DT_OK || (r = dt_optimizer_download(o)) != DT_OK)) {
        fprintf(stderr, "dtrain: checkpoint at step %lld: %s\n", (long long)pr->step, dt_last_error());
        return r;
    }
    if (c->zero_stage > 0) { /* inside a mesh: the optimizer state over dp first, then the mesh gather */
        if ((r = dtrain_zero_mesh_gather(c, s, m, o, dp, tp, pp, wp, whole_o)) != DT_OK)
            return r;
    } else if ((tp || pp) && dt_comm_rank(dp) == 0 &&
        (r = dtrain_split_gather(c, dt_model_params(m), o, tp, pp, wp, whole_o)) != DT_OK)
        return r;
    if (w)
        dt_ckpt_writer_submit(w, pr, label, stall);
    return DT_OK;
}

/* recompute = blocks: every transformer block (every block of mlp and cnn,
 * which have no others); all: every block, embedding and head included. */
static dt_status set_recompute(const dtrain_config *c, dt_model *m)
{
    if (!strcmp(c->recompute, "off"))
        return DT_OK;
    bool all = !strcmp(c->recompute, "all"), gpt = !strcmp(c->model, "gpt");
    for (int i = 0; i < dt_model_num_layers(m); i++)
        if ((all || !gpt || !strcmp(dt_model_block(m, i)->kind, "gpt-block")) &&
            dt_model_set_recompute(m, i, true) != DT_OK) {
            fprintf(stderr, "dtrain: recompute: %s\n", dt_last_error());
            return DT_ERR_INVALID;
        }
    return DT_OK;
}

/* Benchmarks' straggler: in a straggler_prob share of the steps, sleep a
 * random share of straggler_ms, keyed by the step. */
static void straggle(const dtrain_config *c, int64_t step)
{
    dt_rng g;
    dt_rng_seed(&g, dt_rng_key_stream(&(dt_rng_key){(uint64_t)c->seed, (uint64_t)step, 0, 0x5106}, 7));
    if (dt_rng_uniform(&g) >= c->straggler_prob)
        return;
    double ms = c->straggler_ms * dt_rng_uniform(&g);
    struct timespec t = {(time_t)(ms / 1000), (long)(fmod(ms, 1000) * 1e6)};
    nanosleep(&t, NULL);
}

static void format_eta(double seconds, char *buf, size_t len)
{
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, len, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else
        snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
}

/* The whole model's parameter count from a stage's shards: each shard counts
 * for its whole tensor, a tied copy only on the stage of its first user,
 * the stages summed over pp.  Collective over pp (NULL: this model alone). */
static int64_t whole_parameters(dt_model *m, dt_comm *pp)
{
    dt_params *p = dt_model_params(m);
    const dt_shared_param *sh;
    int nsh = dt_model_shared_params(m, &sh);
    int64_t n = 0;
    for (int i = 0; i < dt_params_count(p); i++) {
        bool copy = false;
        for (int k = 0; k < nsh; k++)
            if (sh[k].param == i) {
                int lo, hi;
                copy = true;
                for (int ch = 0; ch < dt_model_chunks(m); ch++) {
                    dt_model_chunk_range(m, ch, &lo, &hi);
                    copy &= !(sh[k].first_block >= lo && sh[k].first_block < hi);
                }
            }
        if (!copy)
            n += dt_params_info(p, i)->numel * dt_params_info(p, i)->parts;
    }
    if (pp && dt_allreduce(&n, &n, 1, DT_I64, DT_SUM, pp) != DT_OK)
        return -1;
    return n;
}

/* The pipeline's stages as the partition cut them, with each one's share of
 * the cost hints (printed once by the lead). */
static void describe_stages(const dtrain_config *c)
{
    dt_model_desc *d = NULL;
    int parts = (int)c->pp * dtrain_chunks(c), bounds[4096 + 1];
    if (parts > 4096 || dtrain_describe_model(c, NULL, &d) != DT_OK || dt_pipeline_partition(d, parts, bounds) != DT_OK) {
        dt_model_desc_destroy(d);
        return;
    }
    double total = 0, cost[4096];
    for (int k = 0; k < parts; k++) {
        cost[k] = 0;
        for (int b = bounds[k]; b < bounds[k + 1]; b++) {
            const dt_block_info *bi = dt_model_desc_block(d, b);
            cost[k] += bi->flops > 0 ? bi->flops : (double)bi->params;
        }
        total += cost[k];
    }
    char line[1024];
    int n = snprintf(line, sizeof line, "pipeline: %lld stages%s, %s schedule, %lld micro-batches of %lld per step; "
                     "blocks by cost hints (forward FLOPs):", (long long)c->pp,
                     parts > c->pp ? " x virtual stages" : "", c->pipeline_schedule,
                     (long long)(c->micro_batches * c->grad_accumulation), (long long)(c->batch_size / c->micro_batches));
    for (int k = 0; k < parts && n > 0 && (size_t)n < sizeof line; k++)
        n += snprintf(line + n, sizeof line - (size_t)n, " %s%d [%d, %d) %.0f%%", parts > c->pp ? "v" : "", k,
                      bounds[k], bounds[k + 1], 100 * cost[k] / total);
    dtrain_progress_line("%s\n", line);
    dt_model_desc_destroy(d);
}

/* The step belongs to a strategy: data parallel over the world (also with
 * one rank, where it only averages micro-batches), dropout keyed by (seed,
 * step, micro-batch, rank) so that a resumed run, on any number of ranks,
 * draws the masks of the uninterrupted one. */
static dt_status make_strategy(const dtrain_config *c, dt_comm *world, dt_model *m, dt_optimizer *o, dt_comm *tp,
                               dt_comm *pp, dt_comm *job, const dt_ps_config *psc, dt_strategy **out)
{
    dt_strategy_config sc = {.micro_batches = (int)(c->micro_batches * c->grad_accumulation),
                             .grad_clip = (float)c->grad_clip,
                             .seed = (uint64_t)c->seed,
                             .ddp = {(size_t)(c->bucket_mb * 1048576.0), DT_F32}, .tp = tp};
    if (!strcmp(c->grad_compression, "f16"))
        sc.ddp.wire = DT_F16;
    else if (!strcmp(c->grad_compression, "bf16"))
        sc.ddp.wire = DT_BF16;
    if (c->bucket_mb > 0 && sc.ddp.bucket_bytes < sizeof(float))
        sc.ddp.bucket_bytes = sizeof(float);
    dt_status s;
    if (job) /* a parameter server's worker: the servers are in the job, the workers in world */
        s = dt_strategy_ps_create(m, job, psc, &sc, out);
    else if (pp) { /* a pipeline over pp, data parallel over world (the mesh's dp group) */
        dt_pipeline_config pc = {DT_PIPE_1F1B, dtrain_chunks(c), pp, world, (int)c->zero_stage};
        s = dt_pipe_schedule_parse(c->pipeline_schedule, &pc.schedule);
        if (s == DT_OK)
            s = dt_strategy_pipeline_create(m, o, &pc, &sc, out);
    } else if (c->zero_stage > 0)
        s = dt_strategy_zero_create(m, o, world, (int)c->zero_stage, &sc, out);
    else if (dt_comm_size(world) == 1 && !tp &&
             (dt_params_any_row_sparse(dt_model_params(m)) || !dt_device_is_host(dt_model_device(m))))
        /* one process: the single strategy's update visits a row-sparse
         * table's touched rows only (data parallel's is dense, as its
         * allreduce), and runs on a GPU's buffers (data parallel's buckets
         * are host memory) */
        s = dt_strategy_single_create(m, o, &sc, out);
    else
        s = dt_strategy_ddp_create(m, o, world, &sc, out);
    if (s != DT_OK)
        fprintf(stderr, "dtrain: rank %d: %s\n", dt_comm_rank(world), dt_last_error());
    return s;
}

/* The strategy's batch source: the prefetcher's next batch. */
typedef struct {
    dt_prefetcher *pf;
    int64_t features, per_item, items, targets_per_sample;
    const dt_batch *last;
} feed;

static dt_status next_batch(void *user, dt_micro_batch *mb)
{
    feed *f = user;
    f->last = dt_prefetch_next(f->pf);
    mb->x = dt_tensor_view(f->last->x, 2, (int64_t[]){f->last->n, f->features});
    mb->targets = f->last->y;
    mb->ntargets = f->last->n * f->targets_per_sample;
    f->items += f->last->n * f->per_item;
    return DT_OK;
}

typedef struct {
    double compute, comm, exposed;
    int64_t items;
} window_totals;

/* A run resumed on a different number of ranks keeps the global batch of the
 * run that wrote the checkpoint: per-rank batch unchanged, the accumulation
 * adjusted.  When no whole accumulation gives it, the nearest smaller global
 * batch that does is used, and the run says so. */
static void keep_global_batch(dtrain_config *c, const dt_ckpt_progress *pr, int nranks, bool lead)
{
    int64_t want = pr->global_batch, per = c->batch_size * nranks;
    if (want <= 0 || pr->world_size == nranks)
        return;
    int64_t k = want / per > 0 ? want / per : 1;
    int64_t before = pr->world_size > 0 ? want / (c->batch_size * pr->world_size) : c->grad_accumulation;
    if (lead) {
        if (k * per == want)
            printf("elastic: %lld ranks now (the checkpoint was written by %lld): gradient accumulation %lld -> %lld "
                   "keeps the global batch at %lld\n", (long long)nranks, (long long)pr->world_size,
                   (long long)before, (long long)k, (long long)want);
        else
            printf("elastic: %lld ranks now (the checkpoint was written by %lld): the global batch %lld is not a "
                   "multiple of %lld ranks x batch %lld; using accumulation %lld, global batch %lld\n",
                   (long long)nranks, (long long)pr->world_size, (long long)want, (long long)nranks,
                   (long long)c->batch_size, (long long)k, (long long)(k * per));
        fflush(stdout);
    }
    c->grad_accumulation = k;
}

/* Compute threads: the threads key, else DT_THREADS, else the cores divided
 * among this host's ranks (dt_threads_default).  One warning per host (local
 * rank 0) when the ranks' threads together outnumber the cores. */
static dt_status choose_threads(const dtrain_config *c, const char **source)
{
    int n = (int)c->threads;
    *source = "the threads key";
    if (n == 0 && dt_threads_default(&n, source) != DT_OK) {
        fprintf(stderr, "dtrain: %s\n", dt_last_error());
        return DT_ERR_INVALID;
    }
    if (dt_set_threads(n) != DT_OK) {
        fprintf(stderr, "dtrain: threads: %s\n", dt_last_error());
        return DT_ERR_INVALID;
    }
    /* The host's first rank warns. */
    long local = dt_local_ranks(), cores = dt_cores_available();
    int mine = (int)cores;
    bool bound = dt_cpus_bound(); /* (dtrun --bind auto): its own CPUs; else this host's ranks share them */
    bool over = bound ? n > mine : (long)n * local > cores;
    if (over && dtrain_local_rank() == 0) {
        if (bound)
            fprintf(stderr, "dtrain: warning: %d compute threads per rank on the %d CPU%s it is bound to "
                            "(oversubscribed; set threads or DT_THREADS)\n", n, mine, mine == 1 ? "" : "s");
        else
            fprintf(stderr, "dtrain: warning: %ld local rank%s x %d compute thread%s = %ld threads on %ld cores "
                            "(oversubscribed; set threads or DT_THREADS)\n", local, local == 1 ? "" : "s", n,
                    n == 1 ? "" : "s", local * n, cores);
    }
    return DT_OK;
}

int dtrain_train(const dtrain_config *config, const char *resume, bool overwrite)
{
    dtrain_config adjusted = *config, *c = &adjusted;
    const char *env_servers = getenv("DT_PS_SERVERS"); /* dtrun --servers, when the config sets none */
    if (c->servers == 0 && env_servers && *env_servers) {
        c->servers = atoll(env_servers);
        if (dtrain_config_validate(c) != DT_OK)
            return 2;
    }
    /* keys given that do nothing here: refused on every rank, warned about by rank 0 once joined */
    if (dtrain_config_check_unused(c, false) != DT_OK)
        return 2;
    if (dtrain_check_world(c) != 0) /* before the communicator: every rank stops alike, with the reason */
        return 2;
    const char *thread_source;
    if (choose_threads(c, &thread_source) != DT_OK)
        return 2;
    /* A new run (not resuming) into a checkpoint_dir that holds another run's
     * checkpoints would mix the two runs' steps: refused, or with --overwrite
     * the old ones go first.  Every rank checks; rank 0 alone removes. */
    const char *rank_env = getenv("DT_RANK"), *restart = getenv("DT_RESTART");
    bool rank0 = !rank_env || !*rank_env || atoi(rank_env) == 0;
    bool restarted = restart && atoi(restart) > 0; /* this job's own, from before the restart */
    int old = !resume && !restarted && c->checkpoint_dir[0] ? dt_ckpt_count_any(c->checkpoint_dir) : 0;
    if (old > 0 && !overwrite) {
        fprintf(stderr, "dtrain: checkpoint_dir %s already holds %d checkpoint director%s of another run; "
                        "continue it with --resume %s (or --resume auto), write elsewhere, or give --overwrite to "
                        "delete them first\n", c->checkpoint_dir, old, old == 1 ? "y" : "ies", c->checkpoint_dir);
        return 2;
    }
    if (old > 0 && rank0) {
        if (dt_ckpt_clear(c->checkpoint_dir) != DT_OK) {
            fprintf(stderr, "dtrain: --overwrite: %s\n", dt_last_error());
            return 1;
        }
        printf("--overwrite: removed %d checkpoint director%s of an earlier run from %s\n", old,
               old == 1 ? "y" : "ies", c->checkpoint_dir);
        fflush(stdout);
    }
    /* Set-up; a failure jumps to `out`, which frees what exists (all NULL or zeroed first). */
    int code = 0, rank = 0, nranks = 1, lead = 1;
    /* dp: the data-parallel group (the world without tp and pp); tpc, ppc:
     * this rank's tensor-parallel and pipeline groups (NULL: not split so) */
    dt_comm *world = NULL, *dp = NULL, *tpc = NULL, *ppc = NULL;
    /* a parameter server: job is every rank, world this rank's role's (the workers, or the servers) */
    dt_comm *job = NULL;
    dt_ps_config psc = {0};
    dt_mesh *mesh = NULL;
    int dpn = 1, dpr = 0;
    dt_model *whole = NULL; /* a mesh's unsplit model, a parameter server's snapshot: what the writer saves */
    dt_optimizer *whole_o = NULL;
    data_source d;
    memset(&d, 0, sizeof d);
    dt_model *m = NULL;
    dt_optimizer *o = NULL;
    dt_strategy *strategy = NULL;
    dt_sampler sampler;
    memset(&sampler, 0, sizeof sampler);
    dt_ckpt_writer *writer = NULL;
    FILE *metrics = NULL;
    FILE *mon = NULL; /* dtrun --monitor: this rank's records (DT_MONITOR_DIR) */
    dt_arena *arena = NULL;
    dt_prefetcher *pf = NULL;
    dt_straggler *strag = NULL; /* lockstep ranks only: not the servers' asynchronous workers, not a pipeline's unequal stages */
    dt_ckpt_progress pr = {0};
    char resumed_dir[2048] = "";
    if (data_open(c, &d) != DT_OK) { /* a configuration error: data_path, vocab */
        code = 2;
        goto out;
    }
    if (dt_comm_init_env(&world) != DT_OK) {
        fprintf(stderr, "dtrain: cannot join the job: %s\n", dt_last_error());
        world = NULL;
        code = 1;
        goto out;
    }
    rank = dt_comm_rank(world);
    nranks = dt_comm_size(world);
    if (rank == 0)
        dtrain_config_check_unused(c, true);
    if (c->servers > 0) {
        if (dtrain_ps_config(c, &psc) != DT_OK || dt_ps_split(world, &psc, &job) != DT_OK) {
            fprintf(stderr, "dtrain: rank %d: %s\n", rank, dt_last_error());
            code = 2;
            goto out;
        }
        dt_comm *role = job;
        job = world;
        world = role;
        if (dt_ps_server_index(&psc, job) >= 0) {
            code = dtrain_ps_serve(c, job, world, &psc);
            goto out;
        }
        rank = dt_comm_rank(world);
        nranks = dt_comm_size(world);
    }
    lead = rank == 0;
    dp = world;
    if (c->tp > 1 || c->pp > 1) { /* dp x pp x tp, tp innermost: a tensor-parallel group on one host */
        dt_mesh_dim dims[3] = {{"dp", 0}};
        int nd = 1;
        if (c->pp > 1)
            dims[nd++] = (dt_mesh_dim){"pp", (int)c->pp};
        if (c->tp > 1)
            dims[nd++] = (dt_mesh_dim){"tp", (int)c->tp};
        if (dt_mesh_create(world, dims, nd, &mesh) != DT_OK) {
            fprintf(stderr, "dtrain: pp = %lld, tp = %lld: %s\n", (long long)c->pp, (long long)c->tp,
                    dt_last_error());
            code = 2;
            goto out;
        }
        dp = dt_mesh_comm(mesh, "dp");
        tpc = c->tp > 1 ? dt_mesh_comm(mesh, "tp") : NULL;
        ppc = c->pp > 1 ? dt_mesh_comm(mesh, "pp") : NULL;
    }
    dpn = dt_comm_size(dp);
    dpr = dt_comm_rank(dp);
    code = 1; /* for the failures below */
    if (ppc ? dtrain_build_stage(c, tpc, dt_comm_rank(ppc), &m) != DT_OK : dtrain_build_model_tp(c, tpc, &m) != DT_OK) {
        code = ppc ? 2 : 1; /* a pipeline that does not fit the model is a configuration error */
        goto out;
    }
    dt_params *p = dt_model_params(m);
    dt_model_init(m, (uint64_t)c->seed);
    bool zero = c->zero_stage > 0, split = mesh || zero; /* split: a resume takes this rank's part */
    if (!job && dtrain_memory_plan(c, m, dpn, lead) != 0) {
        code = 2;
        goto out;
    }
    if (!strcmp(c->precision, "bf16") && dt_model_set_precision(m, DT_BF16) != DT_OK) {
        fprintf(stderr, "dtrain: precision: %s\n", dt_last_error());
        goto out;
    }
    if (set_recompute(c, m) != DT_OK ||
        (job ? dt_sgd_create(&(dt_sgd_config){0, 0, false}, dt_params_numel(p), &o) != DT_OK /* the servers update */
             : make_optimizer_for(c, m, p, zero ? dpn : 0, dpr, &o) != DT_OK))
        goto out;
    if (dt_dist_sampler_init(&sampler, d.train_samples, (uint64_t)c->seed, dp) != DT_OK) {
        fprintf(stderr, "dtrain: %s\n", dt_last_error());
        goto out;
    }
    if (resume) { /* every rank reads the checkpoint: it must be on a path they all see */
        char step_dir[2048];
        dtrain_config saved;
        if (dtrain_checkpoint_open(resume, d.train_samples, step_dir, sizeof step_dir, &saved, &pr) != DT_OK)
            goto out;
        /* a ZeRO run takes its shard from shard files (written by any N at any stage), or from an unsplit
         * checkpoint (one without, or an older ZeRO one); any other run loads the whole state either way */
        int shards = 0;
        if (dt_ckpt_shards(step_dir, &shards, NULL, NULL) != DT_OK) {
            fprintf(stderr, "dtrain: %s\n", dt_last_error());
            goto out;
        }
        if (job) { /* worker 0 hands the values and the optimizer state to the servers; the others pull */
            if (lead && (make_optimizer(c, p, &whole_o) != DT_OK || dt_ckpt_load(step_dir, p, whole_o) != DT_OK)) {
                fprintf(stderr, "dtrain: %s\n", dt_last_error());
                goto out;
            }
            psc.resume_state = whole_o;
        } else if (zero && shards > 0) {
            if (dtrain_zero_resume(step_dir, m, o, dpn, dpr) != DT_OK) /* printed why */
                goto out;
        } else if (split ? load_split(c, step_dir, m, o, zero ? dpn : 0, dpr) != DT_OK
                         : dt_ckpt_load(step_dir, p, o) != DT_OK) {
            fprintf(stderr, "dtrain: %s\n", dt_last_error());
            goto out;
        }
        if (pr.step > c->steps) {
            fprintf(stderr, "dtrain: %s is at step %lld, past steps = %lld of this run (raise steps)\n", step_dir,
                    (long long)pr.step, (long long)c->steps);
            code = 2;
            goto out;
        }
        dt_optimizer_set_steps(o, pr.optimizer_steps);
        if (whole_o)
            dt_optimizer_set_steps(whole_o, pr.optimizer_steps);
        if (dt_sampler_seek(&sampler, pr.epoch, pr.position, dpr, dpn) != DT_OK) {
            fprintf(stderr, "dtrain: %s: %s\n", step_dir, dt_last_error());
            goto out;
        }
        snprintf(resumed_dir, sizeof resumed_dir, "%s", step_dir);
        if (lead)
            dtrain_progress_line("resumed from %s at step %lld\n", step_dir, (long long)pr.step);
        keep_global_batch(c, &pr, dpn, lead);
    }
    if (!strcmp(c->offload, "disk") && dt_optimizer_offload(o, c->offload_dir) != DT_OK) {
        fprintf(stderr, "dtrain: offload: %s\n", dt_last_error());
        goto out;
    }
    if (strcmp(c->device, "cpu") && dtrain_move_to_device(c, m, o, nranks, lead) != DT_OK) {
        code = 2;
        goto out;
    }
    pr.world_size = dpn; /* the data-parallel width: what the global batch is made of */
    dt_rng_seed(&pr.rng, dt_rng_key_stream(&(dt_rng_key){(uint64_t)c->seed, (uint64_t)pr.step, 0, 0}, 0));
    pr.global_batch = c->batch_size * dpn * c->grad_accumulation;
    /* The writer's registry and optimizer: a mesh's gathered whole model; ZeRO's values alone (the live
     * registry at stages 1-2, where every rank holds them whole; at stage 3 only its names and shapes: rank 0
     * writes model.safetensors block by block, stream_model), its optimizer state going into each rank's
     * shard file instead */
    dt_optimizer *writer_o = zero ? NULL : o;
    if (lead && c->checkpoint_dir[0] &&
        (((mesh || job) && dtrain_build_model_tp(c, NULL, &whole) != DT_OK) ||
         ((mesh || job) && !whole_o && make_optimizer(c, dt_model_params(whole), &whole_o) != DT_OK) ||
         dtrain_checkpoint_writer_start(c, whole ? dt_model_params(whole) : p, mesh || job ? whole_o : writer_o,
                                        c->zero_stage == 3, resume ? pr.step : -1, resumed_dir, &writer) != DT_OK))
        goto out;
    if (whole && job) /* a parameter server's snapshot: no gradients */
        dt_params_drop_storage(dt_model_params(whole), false, true);
    if (make_strategy(c, dp, m, o, tpc, ppc, job, &psc, &strategy) != DT_OK)
        goto out;
    if (c->zero_stage == 3 && !strcmp(c->offload, "disk") && dt_strategy_zero_offload(strategy, c->offload_dir) != DT_OK) {
        fprintf(stderr, "dtrain: offload: %s\n", dt_last_error());
        goto out;
    }
    if (lead && c->metrics_file[0] && !(metrics = fopen(c->metrics_file, resume ? "a" : "w"))) {
        fprintf(stderr, "dtrain: cannot write metrics file %s\n", c->metrics_file);
        goto out;
    }
    dt_lr_schedule sched = {strcmp(c->schedule, "cosine") == 0 ? DT_LR_COSINE : DT_LR_CONSTANT, (float)c->lr,
                            (float)c->min_lr, c->warmup_steps, c->steps};
    dt_arena_create_on(dt_model_device(m), &arena);
    /* Under a restarting dtrun the initial weights are a checkpoint too: a
     * restart before the first periodic one then still knows the job's global
     * batch (and world size) and keeps it. */
    const char *restartable = getenv("DT_RESTARTABLE");
    if (c->checkpoint_dir[0] && !resume && (c->checkpoint_initial || (restartable && !strcmp(restartable, "1")))) {
        if (checkpoint(c, strategy, m, o, dp, tpc, ppc, whole, whole_o, writer, &pr, " (initial weights)",
                       NULL) != DT_OK)
            goto out;
        if (writer && dt_ckpt_writer_flush(writer) != DT_OK) /* the writer printed why */
            goto out;
    }

    if (nranks > 1 && !job && !ppc && dt_straggler_create(world, &strag) != DT_OK) {
        fprintf(stderr, "dtrain: rank %d: straggler detection: %s\n", rank, dt_last_error());
        goto out;
    }
    /* the prefetcher hands out micro-batches: batch_size / micro_batches samples each */
    if (dt_prefetch_start(&sampler, c->batch_size / c->micro_batches, d.features, d.gpt ? d.features : 1, data_fill, &d,
                          &pf) != DT_OK) {
        fprintf(stderr, "dtrain: %s\n", dt_last_error());
        goto out;
    }
    code = 0;
    const char *unit = d.gpt ? "tokens" : "samples";
    mon = dtrain_monitor_open(dt_comm_rank(job ? job : world), dt_comm_size(job ? job : world), c->steps, unit);
    int64_t mon_from = pr.step; /* the first step of the logging window */
    int64_t k = c->grad_accumulation, per_item = d.gpt ? c->context : 1;
    int64_t nparams = whole_parameters(m, ppc);
    if (lead && ppc)
        describe_stages(c);
    if (lead) {
        int nt = dt_get_threads();
        char shape[256] = "";
        int n = 0;
        if (c->micro_batches > 1)
            n = snprintf(shape, sizeof shape, ", each batch cut into %lld micro-batches of %lld",
                         (long long)c->micro_batches, (long long)(c->batch_size / c->micro_batches));
        if (c->zero_stage > 0 && n >= 0 && (size_t)n < sizeof shape)
            n += snprintf(shape + n, sizeof shape - (size_t)n, ", ZeRO stage %lld (%lld of the parameters' optimizer "
                          "state%s on each rank)", (long long)c->zero_stage, (long long)dt_zero_shard_numel(m, dpn),
                          c->zero_stage == 1 ? "" : c->zero_stage == 2 ? " and gradients" : ", gradients and values");
        if (job && n >= 0 && (size_t)n < sizeof shape)
            n += snprintf(shape + n, sizeof shape - (size_t)n, ", parameter server: %lld server%s, sync %s",
                          (long long)c->servers, c->servers == 1 ? "" : "s", c->sync);
        if (job && !strcmp(c->sync, "ssp") && n >= 0 && (size_t)n < sizeof shape)
            n += snprintf(shape + n, sizeof shape - (size_t)n, " (staleness %lld)", (long long)c->staleness);
        if (mesh && n >= 0 && (size_t)n < sizeof shape) {
            char m_desc[96];
            snprintf(shape + n, sizeof shape - (size_t)n, ", mesh %s (%lld parameters on %s)",
                     dt_mesh_describe(mesh, 0, m_desc, sizeof m_desc), (long long)dt_params_numel(p),
                     ppc ? "rank 0, stage 0" : "each rank");
        }
        dtrain_progress_line("training %s (%lld parameters) on %s: %lld steps, batch %lld x %d rank%s x %lld "
                             "accumulation step%s = %lld, %d thread%s per rank (from %s)%s%s%s\n",
                             c->model, (long long)nparams, c->data,
                             (long long)c->steps, (long long)c->batch_size, dpn, dpn > 1 ? "s" : "",
                             (long long)k, k > 1 ? "s" : "", (long long)(c->batch_size * dpn * k), nt,
                             nt == 1 ? "" : "s", thread_source, shape,
                             strcmp(c->grad_compression, "none") ? ", gradients as " : "",
                             strcmp(c->grad_compression, "none") ? c->grad_compression : "");
        /* one line a benchmark can read back (bench/train/run.sh): the kernels OpenBLAS runs */
        const char *blas_core, *blas_config, *coretype = getenv("OPENBLAS_CORETYPE");
        int blas_threads;
        dt_blas_describe(&blas_core, &blas_threads, &blas_config);
        dtrain_progress_line("blas: core %s, OpenBLAS threads %d, OPENBLAS_CORETYPE %s, config %s; conv: %s\n",
                             blas_core ? blas_core : "?", blas_threads, coretype && *coretype ? coretype : "-",
                             blas_config ? blas_config : "?", dt_conv2d_backend());
        if (!strcmp(c->precision, "bf16") && !strcmp(c->device, "cpu")) { /* a device's start line says its own */
            const char *k = dt_bf16_gemm_kernel();
            if (!strcmp(k, "emulated"))
                dtrain_progress_line("precision: bf16 emulated: this CPU has neither AMX nor AVX512_BF16 (or the "
                                     "kernel refused them), so the matrix products round their operands to bf16 "
                                     "and run at f32 speed; weights, gradients and optimizer state stay f32\n");
            else
                dtrain_progress_line("precision: bf16 matrix products on %s (f32 sums); weights, gradients and "
                                     "optimizer state f32\n", !strcmp(k, "amx") ? "AMX tiles" : "AVX512_BF16");
        }
    }
    double window_start = now_s(), run_start = window_start, eval_s = 0, last_ckpt = window_start;
    window_totals win = {0};
    int64_t first_step = pr.step;
    feed fd = {pf, d.features, per_item * dpn, 0, d.gpt ? d.features : 1, NULL};
    size_t act_peak = 0;
    int flight_peak = 0;
    for (int64_t step = pr.step; step < c->steps; step++) {
        double t0 = now_s();
        float lr = dt_lr_at(&sched, step);
        dt_step_stats st = {0};
        fd.items = 0;
        if (c->straggler_rank >= 0 && dt_comm_rank(job ? job : world) == c->straggler_rank)
            straggle(c, step);
        dt_status s = dt_strategy_step(strategy, step, lr, next_batch, &fd, &st);
        float loss = st.loss, norm = st.grad_norm;
        act_peak = st.activation_bytes > act_peak ? st.activation_bytes : act_peak;
        flight_peak = st.micro_in_flight > flight_peak ? st.micro_in_flight : flight_peak;
        const dt_batch *b = fd.last;
        win.items += fd.items;
        int log_now = (step + 1) % c->log_interval == 0 || step + 1 == c->steps;
        /* the loss over every rank's batch; asynchronous workers (asp, ssp) do not wait for each other: worker 0's */
        if (s == DT_OK && log_now && nranks > 1 && !(job && psc.sync != DT_PS_BSP))
            s = dt_allreduce(&loss, &loss, 1, DT_F32, DT_AVG, world);
        if (s != DT_OK || !isfinite(loss)) {
            fprintf(stderr, "dtrain: rank %d: step %lld failed: %s\n", rank, (long long)step + 1,
                    s != DT_OK ? dt_last_error() : "the loss is not finite (lower lr, or set grad_clip)");
            code = 1;
            break;
        }
        if (strag && dt_straggler_step(strag, step, now_s() - t0, st.exposed_s, NULL) != DT_OK) {
            fprintf(stderr, "dtrain: rank %d: step %lld failed: %s\n", rank, (long long)step + 1, dt_last_error());
            code = 1;
            break;
        }
        win.compute += now_s() - t0 - st.exposed_s;
        win.comm += st.comm_s;
        win.exposed += st.exposed_s;
        pr.step = step + 1;
        /* Dropout is keyed by (seed, step, micro-batch, rank) and needs no saved
         * state; the manifest's rng field (format 2) holds the next step's key
         * as a generator state, so a checkpoint still names where it stands. */
        dt_rng_seed(&pr.rng, dt_rng_key_stream(&(dt_rng_key){(uint64_t)c->seed, (uint64_t)pr.step, 0, 0}, 0));
        pr.epoch = b->epoch;
        pr.position = b->position;
        pr.optimizer_steps = dt_optimizer_steps(o);
        if (log_now && lead) {
            double t = now_s(), rate = (double)win.items / (t - window_start);
            char eta[32];
            format_eta((double)(c->steps - pr.step) * (t - run_start) / (double)(pr.step - first_step), eta, sizeof eta);
            dtrain_progress_line("step %lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f %s/s | ETA %s\n",
                                 (long long)pr.step, (long long)c->steps, loss, lr, norm, rate, unit, eta);
            if (metrics) {
                fprintf(metrics,
                        "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.6g, \"grad_norm\": %.6g, \"%s_per_s\": %.1f, "
                        "\"compute_s\": %.4f, \"comm_s\": %.4f, \"exposed_comm_s\": %.4f, \"elapsed_s\": %.3f}\n",
                        (long long)pr.step, loss, lr, norm, unit, rate, win.compute, win.comm, win.exposed,
                        t - run_start);
                fflush(metrics);
            }
        }
        if (log_now && mon) { /* every rank: dtrun's per-rank table; the times are per step over the window */
            double t = now_s(), n = (double)(pr.step - mon_from > 0 ? pr.step - mon_from : 1);
            dtrain_monitor_record(mon,
                                  "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.6g, \"grad_norm\": %.6g, "
                                  "\"%s_per_s\": %.1f, \"step_s\": %.6f, \"compute_s\": %.6f, \"comm_s\": %.6f, "
                                  "\"exposed_comm_s\": %.6f, \"bytes_sent\": %llu, \"elapsed_s\": %.3f}\n",
                                  (long long)pr.step, loss, lr, norm, unit, (double)win.items / (t - window_start),
                                  (t - window_start) / n, win.compute / n, win.comm / n, win.exposed / n,
                                  (unsigned long long)dt_comm_bytes_sent(job ? job : world), t - run_start);
            mon_from = pr.step;
        }
        if (log_now) {
            window_start = now_s();
            win = (window_totals){0};
        }
        int last = pr.step == c->steps;
        int eval_now = (c->eval_interval && pr.step % c->eval_interval == 0) || last, reached = 0;
        /* the lead's tensor-parallel group and pipeline evaluate with it (under ZeRO-3 every rank: its
         * forward gathers each block's parameters from all) */
        if ((dpr == 0 || c->zero_stage == 3) && eval_now && !lead && (mesh || c->zero_stage == 3)) {
            eval_result er;
            dtrain_evaluate(c, m, &d, arena, tpc, ppc, &er);
        }
        if (lead && eval_now) {
            double e0 = now_s();
            eval_result er;
            char what[256];
            dtrain_evaluate(c, m, &d, arena, tpc, ppc, &er);
            double el = er.loss, acc = er.accuracy;
            eval_s += now_s() - e0;
            dtrain_eval_describe(c, &d, &er, what, sizeof what);
            dtrain_progress_line("eval at step %lld | loss %.4f | accuracy %.2f%% | %s (eval_batches %lld)\n", (long long)pr.step,
                     el, 100 * acc, what, (long long)c->eval_batches);
            if (metrics) /* train_s: wall time so far less the time spent evaluating */
                fprintf(metrics,
                        "{\"step\": %lld, \"eval_loss\": %.9g, \"eval_accuracy\": %.6f, \"elapsed_s\": %.3f, "
                        "\"train_s\": %.3f}\n",
                        (long long)pr.step, el, acc, now_s() - run_start, now_s() - run_start - eval_s);
            if (metrics) /* as the step records: a reader sees it now, and a killed run keeps it */
                fflush(metrics);
            dtrain_monitor_record(mon, "{\"step\": %lld, \"eval_loss\": %.9g, \"eval_accuracy\": %.6f}\n",
                                  (long long)pr.step, el, acc);
            reached = c->stop_at_accuracy > 0 && acc >= c->stop_at_accuracy;
        }
        if (eval_now && c->stop_at_accuracy > 0 && !last) { /* rank 0 alone evaluated: it decides for all */
            if (nranks > 1 && dt_broadcast(&reached, 1, DT_I32, 0, world) != DT_OK) {
                fprintf(stderr, "dtrain: rank %d: step %lld failed: %s\n", rank, (long long)pr.step, dt_last_error());
                code = 1;
                break;
            }
            if (reached && lead)
                dtrain_progress_line("reached accuracy %.2f%% at step %lld: stopping\n", 100 * c->stop_at_accuracy,
                                     (long long)pr.step);
            last = reached;
        }
        int by_time = c->checkpoint_seconds > 0 && now_s() - last_ckpt >= c->checkpoint_seconds;
        if (split && c->checkpoint_seconds > 0 && /* the writer's clock decides for the ranks that gather */
            dt_broadcast(&by_time, 1, DT_I32, 0, world) != DT_OK) {
            fprintf(stderr, "dtrain: rank %d: step %lld failed: %s\n", rank, (long long)pr.step, dt_last_error());
            code = 1;
            break;
        }
        bool ckpt_now = c->checkpoint_dir[0] &&
                        ((c->checkpoint_interval && pr.step % c->checkpoint_interval == 0) || by_time || last);
        if (ckpt_now && dt_strategy_sync(strategy) != DT_OK) { /* ZeRO's gathers of the updated parameters */
            fprintf(stderr, "dtrain: rank %d: step %lld failed: %s\n", rank, (long long)pr.step, dt_last_error());
            code = 1;
            break;
        }
        double stall = 0;
        if (ckpt_now &&
            checkpoint(c, strategy, m, o, dp, tpc, ppc, whole, whole_o, writer, &pr, "", &stall) != DT_OK) {
            code = 1;
            break;
        }
        if (ckpt_now) {
            last_ckpt = now_s();
            if (lead) /* handed to the writer: on disk once its manifest is (docs/checkpoints.md) */
                dtrain_monitor_record(mon, "{\"event\": \"checkpoint\", \"step\": %lld}\n", (long long)pr.step);
            win.compute -= stall; /* not compute: time held up by the writer */
        }
        if (last)
            break;
    }
    if (lead && code == 0 && job && pr.step > first_step) {
        uint64_t sent, received;
        dt_strategy_ps_traffic(strategy, &sent, &received);
        printf("parameter server: rank 0 sent %.2f MB and received %.2f MB per step\n",
               (double)sent / 1e6 / (double)(pr.step - first_step), (double)received / 1e6 / (double)(pr.step - first_step));
    }
    if (lead && code == 0) {
        if (writer) /* the peak below counts the final checkpoint's write: it is on disk first */
            (void)dt_ckpt_writer_flush(writer); /* (a failure is reported below, by dt_ckpt_writer_last_good) */
        dtrain_memory_report(m, o, strategy);
        uint64_t rd, wr, prd, pwr;
        dt_optimizer_offload_io(o, &rd, &wr);
        dt_strategy_zero_offload_io(strategy, &prd, &pwr);
        int64_t ran = pr.step - first_step;
        if (!strcmp(c->offload, "disk") && ran > 0)
            printf("offload: the optimizer state%s on disk (%s): %.1f MiB read and %.1f MiB written per step\n",
                   c->zero_stage == 3 ? " and the parameter shard" : "", c->offload_dir[0] ? c->offload_dir : "/var/tmp",
                   (double)(rd + prd) / 1048576.0 / (double)ran, (double)(wr + pwr) / 1048576.0 / (double)ran);
    }
    if (lead && act_peak && ppc && code == 0)
        printf("activation memory: at most %.1f MiB held at once, %d micro-batch%s in flight (stage 0, %s schedule, "
               "recompute %s)\n", (double)act_peak / 1048576.0, flight_peak, flight_peak == 1 ? "" : "es",
               c->pipeline_schedule, c->recompute);
    else if (lead && act_peak && code == 0)
        printf("activation memory: at most %.1f MiB per micro-batch (recompute %s)\n", (double)act_peak / 1048576.0,
               c->recompute);
out:
    dt_straggler_destroy(strag);
    dt_prefetch_stop(pf);
    if (writer) { /* the last checkpoint is on disk before the job reports success */
        char good[2048];
        int64_t last_good = dt_ckpt_writer_last_good(writer, good, sizeof good);
        if (code == 0 && last_good != pr.step) { /* the final model is missing: a scheduler must see it */
            if (last_good >= 0)
                fprintf(stderr, "dtrain: the final checkpoint (step %lld) could not be written (above); the newest "
                                "good checkpoint is %s (step %lld)\n", (long long)pr.step, good,
                        (long long)last_good);
            else
                fprintf(stderr, "dtrain: the final checkpoint (step %lld) could not be written (above), and no "
                                "earlier one exists in %s\n", (long long)pr.step, c->checkpoint_dir);
            code = 3;
        }
        dt_ckpt_writer_stop(writer);
    }
    if (metrics)
        fclose(metrics);
    if (mon) {
        dtrain_monitor_record(mon, "{\"event\": \"end\", \"step\": %lld, \"code\": %d}\n", (long long)pr.step, code);
        fclose(mon);
    }
    if (world && code != 0 && code != 3) /* the other ranks stop at once, not at their timeout */
        dt_comm_abort(world, "dtrain: training failed on a rank");
    dt_strategy_destroy(strategy);
    dt_mesh_destroy(mesh);
    dt_optimizer_destroy(whole_o);
    dt_model_destroy(whole);
    dt_status ds = dt_comm_destroy(world);
    if (job && ds == DT_OK)
        ds = dt_comm_destroy(job);
    if ((code == 0 || code == 3) && ds != DT_OK) {
        fprintf(stderr, "dtrain: rank %d: leaving the job: %s\n", rank, dt_last_error());
        code = 1;
    }
    dt_arena_destroy(arena);
    dt_sampler_free(&sampler);
    dt_optimizer_destroy(o);
    dt_model_destroy(m);
    data_close(&d);
    return code;
}
