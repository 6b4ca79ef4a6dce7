/* The training command's set-up and teardown: the checks before joining the
 * job, the run built from the configuration's layout (dt_strategy_create),
 * a resume's progress, the checkpoint writer and the outputs. */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_run.h"

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

/* checkpoint_dir made (with its parents) before any step, so that a path
 * the run can never write to is its first error, not its last (after the
 * whole run, with nothing saved).  A directory it may not write now (a
 * read-only mount, permissions) is only warned about: that can change
 * while the run trains, and each checkpoint's failure is then reported as
 * it comes (exit 3 when the final one is missing).  0, or 2 with the reason. */
static int checkpoint_dir_ready(const char *dir)
{
    char path[4096];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1;; p++) { /* each parent, then the directory itself */
        bool end = *p == '\0';
        if (*p != '/' && !end)
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            if (errno == EROFS || errno == EACCES || errno == EPERM) {
                fprintf(stderr, "dtrain: warning: checkpoint_dir %s: cannot create %s now: %s (each checkpoint "
                                "will try again)\n", dir, path, strerror(errno));
                return 0;
            }
            fprintf(stderr, "dtrain: checkpoint_dir %s: cannot create %s: %s\n", dir, path, strerror(errno));
            return 2;
        }
        if (end)
            break;
        *p = '/';
    }
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        fprintf(stderr, "dtrain: checkpoint_dir %s is not a directory\n", dir);
        return 2;
    }
    if (access(dir, W_OK | X_OK) != 0)
        fprintf(stderr, "dtrain: warning: checkpoint_dir %s: cannot write there now: %s (each checkpoint will try "
                        "again)\n", dir, strerror(errno));
    return 0;
}

/* After a resume, this rank's weights and optimizer state (on the host) are
 * finite: a checkpoint's checksums match what was written, so a state that
 * went bad before it was saved, or an edit made with fresh checksums, is
 * refused here, naming the tensor, instead of training on NaN. */
static bool state_not_finite(const train_run *t, const char *step_dir)
{
    dt_model *m = dt_strategy_model(t->s);
    if (!dt_device_is_host(dt_model_device(m)))
        return false; /* (a device's state: its first step's loss says) */
    if (dtrain_params_not_finite(dt_model_params(m), step_dir))
        return true;
    int64_t count = 0;
    bool on_disk = false;
    dt_optimizer *o = dt_strategy_optimizer(t->s);
    if (o && dt_optimizer_state_floats(o, &on_disk) > 0 && on_disk)
        return false; /* (offloaded: reading it whole would hold it all in memory) */
    const float *state = o ? dt_optimizer_state(o, &count) : NULL;
    for (int64_t k = 0; state && k < count; k++)
        if (!isfinite(state[k])) {
            fprintf(stderr, "dtrain: %s: the optimizer state holds %g (element %lld of %lld): refused, training from "
                            "it would not be finite\n", step_dir, (double)state[k], (long long)k, (long long)count);
            return true;
        }
    return false;
}

int train_prepare(dtrain_config *c, const char *resume, bool overwrite, const char **thread_source)
{
    const char *env_servers = getenv("DT_PS_SERVERS"); /* dtrun --servers, when the config sets none */
    if (c->servers == 0 && env_servers && *env_servers) {
        c->servers = atoll(env_servers);
        if (dtrain_config_validate(c) != DT_OK)
            return 2;
    }
    /* keys given that do nothing here: refused on every rank, warned about by rank 0 once joined */
    if (dtrain_config_check_unused(c, false) != DT_OK || dtrain_check_world(c) != 0 ||
        choose_threads(c, thread_source) != DT_OK)
        return 2;
    /* A new run (not resuming) into a checkpoint_dir that holds another run's
     * checkpoints would mix the two runs' steps: refused, or with --overwrite
     * the old ones go first.  Every rank checks; rank 0 alone removes. */
    const char *rank_env = getenv("DT_RANK"), *restart = getenv("DT_RESTART");
    bool rank0 = !rank_env || !*rank_env || atoi(rank_env) == 0;
    bool restarted = restart && atoi(restart) > 0; /* this job's own, from before the restart */
    if (c->checkpoint_dir[0] && checkpoint_dir_ready(c->checkpoint_dir) != 0)
        return 2;
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
    return 0;
}

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

/* The run: the layout's strategy, a resume's weights and state in it. */
static int build(train_run *t, dtrain_config *c, char *step_dir, size_t len)
{
    dt_layout l;
    dt_run_recipe r;
    dtrain_layout_of(c, &l);
    int dpn = 1, job_rank = dt_comm_rank(t->job);
    if (dt_layout_check(&l, dt_comm_size(t->job), &dpn) != DT_OK) {
        fprintf(stderr, "dtrain: rank %d: %s\n", job_rank, dt_last_error());
        return 2;
    }
    if (dtrain_snapshot_choose(t, c, t->snap_resume, sizeof t->snap_resume) != 0)
        return 1;
    dtrain_phase("snapshot chosen");
    if (t->snap_resume[0]) /* a restart: the memory snapshot is newer than the disk's checkpoint */
        t->resume = t->snap_resume;
    if (t->resume) { /* every rank reads the checkpoint: it must be on a path they all see */
        dtrain_config saved;
        if (t->snap_resume[0]) { /* verified already, once per node */
            snprintf(step_dir, len, "%s", t->snap_resume);
            t->pr = t->snap_pr;
        } else if (dtrain_checkpoint_open(t->resume, t->d.train_samples, step_dir, len, &saved, &t->pr) != DT_OK) {
            return 1;
        } else if (strcmp(saved.optimizer, c->optimizer)) { /* its state would load into another's slots */
            fprintf(stderr, "dtrain: %s holds the state of optimizer %s, and this run's optimizer is %s: resume with "
                            "optimizer %s (a state does not carry over between optimizers)\n", step_dir,
                    saved.optimizer, c->optimizer, saved.optimizer);
            return 2;
        }
        if (t->pr.step > c->steps) {
            fprintf(stderr, "dtrain: %s is at step %lld, past steps = %lld of this run (raise steps)\n", step_dir,
                    (long long)t->pr.step, (long long)c->steps);
            return 2;
        }
        keep_global_batch(c, &t->pr, dpn, job_rank == 0);
        dtrain_layout_of(c, &l); /* the accumulation it keeps */
    }
    dtrain_recipe_of(c, &t->recipe, &r); /* (the run keeps calling the recipe: t outlives it) */
    r.resume = t->resume ? step_dir : NULL;
    r.resume_optimizer_steps = t->pr.optimizer_steps;
    dt_status st = dt_strategy_create(&l, &r, t->job, &t->s);
    if (st != DT_OK && !t->recipe.memory_refused) /* (the memory plan printed its own refusal) */
        fprintf(stderr, "dtrain: rank %d: %s\n", job_rank, dt_last_error());
    if (st != DT_OK)
        return st == DT_ERR_INVALID ? 2 : 1;
    dtrain_phase("run built and loaded");
    return 0;
}

/* A parameter server's rank: serve until every worker has left. */
static int serve(train_run *t)
{
    int64_t lo, n, total;
    int k = dt_strategy_server_range(t->s, &lo, &n, &total), S = dt_strategy_layout(t->s)->servers;
    int workers = dt_comm_size(t->job) - S;
    dtrain_progress_line("parameter server %d of %d: parameters [%lld, %lld) of %lld, %s, sync %s, for %d worker%s\n",
                         k, S, (long long)lo, (long long)(lo + n), (long long)total, t->c->optimizer, t->c->sync,
                         workers, workers == 1 ? "" : "s");
    if (dt_strategy_serve(t->s) != DT_OK) {
        fprintf(stderr, "dtrain: rank %d: %s\n", dt_comm_rank(t->job), dt_last_error());
        return 1;
    }
    dtrain_progress_line("parameter server %d: every worker has left\n", k);
    return -1; /* done: no training loop */
}

int train_setup(train_run *t, dtrain_config *c, const char *resume)
{
    char step_dir[2048];
    t->c = c;
    t->resume = resume;
    /* DT_BACKEND=nccl names NCCL for the device's buffers: the job joins on
     * the native backend, which carries its host traffic (NCCL refuses host
     * buffers), and NCCL is attached once it is up (dtrain_device_comm).
     * Set before any thread starts. */
    const char *backend = getenv("DT_BACKEND");
    bool nccl_asked = backend && !strcmp(backend, "nccl");
    if (nccl_asked)
        setenv("DT_BACKEND", "native", 1);
    if (data_open(c, &t->d) != DT_OK) /* a configuration error: data_path, vocab */
        return 2;
    dtrain_phase("data opened");
    dtrain_snapshot_verify_start(t, c); /* while this rank joins */
    if (dt_comm_init_env(&t->job) != DT_OK) {
        fprintf(stderr, "dtrain: cannot join the job: %s\n", dt_last_error());
        t->job = NULL;
        return 1;
    }
    dtrain_phase("joined the job");
    int dcode = dtrain_device_comm(c, t->job, nccl_asked);
    if (dcode != 0)
        return dcode;
    if (!strcmp(c->layout, "auto")) {
        int code = dtrain_plan_auto(c, t->job, &t->predicted_step_s);
        if (code != 0)
            return code;
    }
    if (dt_comm_rank(t->job) == 0)
        dtrain_config_check_unused(c, true);
    int code = build(t, c, step_dir, sizeof step_dir);
    if (code != 0)
        return code;
    if (dt_strategy_serves(t->s))
        return serve(t);
    resume = t->resume; /* a memory snapshot's step directory, when a restart takes one */
    const dt_layout *l = dt_strategy_layout(t->s);
    dt_comm *dp = dt_strategy_data_comm(t->s);
    t->world = dt_strategy_train_comm(t->s);
    t->rank = dt_comm_rank(t->world);
    t->nranks = dt_comm_size(t->world);
    t->dpn = dt_comm_size(dp);
    t->dpr = dt_comm_rank(dp);
    t->lead = dt_strategy_lead(t->s);
    if (dt_dist_sampler_init(&t->sampler, t->d.train_samples, (uint64_t)c->seed, dp) != DT_OK ||
        (resume && dt_sampler_seek(&t->sampler, t->pr.epoch, t->pr.position, t->dpr, t->dpn) != DT_OK)) {
        fprintf(stderr, "dtrain: %s%s%s\n", resume ? step_dir : "", resume ? ": " : "", dt_last_error());
        return 1;
    }
    if (resume && state_not_finite(t, step_dir))
        return 1;
    if (resume) {
        snprintf(t->resumed_dir, sizeof t->resumed_dir, "%s", step_dir);
        if (t->lead)
            dtrain_progress_line("resumed from %s at step %lld\n", step_dir, (long long)t->pr.step);
    }
    if (strcmp(c->device, "cpu") && t->lead)
        dtrain_device_line(c);
    t->pr.world_size = t->dpn; /* the data-parallel width: what the global batch is made of */
    dt_rng_seed(&t->pr.rng, dt_rng_key_stream(&(dt_rng_key){(uint64_t)c->seed, (uint64_t)t->pr.step, 0, 0}, 0));
    t->pr.global_batch = c->batch_size * t->dpn * c->grad_accumulation;
    dt_params *wp;
    dt_optimizer *wo;
    bool stream;
    dt_strategy_checkpoint_state(t->s, &wp, &wo, &stream);
    int64_t kept = resume ? t->pr.step : -1; /* the disk's newest, when a restart resumed from memory */
    char kept_dir[2048];
    snprintf(kept_dir, sizeof kept_dir, "%s", t->resumed_dir);
    if (t->snap_resume[0] && c->checkpoint_dir[0] && (kept = dt_ckpt_newest(c->checkpoint_dir)) >= 0 &&
        dt_ckpt_step_dir(c->checkpoint_dir, kept, kept_dir, sizeof kept_dir) != DT_OK)
        kept = -1;
    if (t->lead && c->checkpoint_dir[0] &&
        dtrain_checkpoint_writer_start(c, wp, wo, stream, kept, kept_dir, &t->writer) != DT_OK)
        return 1;
    if (dtrain_snapshot_start(t) != 0)
        return 1;
    if (t->lead && c->metrics_file[0] && !(t->metrics = fopen(c->metrics_file, resume ? "a" : "w"))) {
        fprintf(stderr, "dtrain: cannot write metrics file %s: %s\n", c->metrics_file, strerror(errno));
        return 1;
    }
    /* Under a restarting dtrun the initial weights are a checkpoint too: a
     * restart before the first periodic one then still knows the job's global
     * batch (and world size) and keeps it. */
    const char *restartable = getenv("DT_RESTARTABLE");
    if (c->checkpoint_dir[0] && !resume && (c->checkpoint_initial || (restartable && !strcmp(restartable, "1")))) {
        if (train_checkpoint(t, " (initial weights)", NULL) != 0)
            return 1;
        if (t->writer && dt_ckpt_writer_flush(t->writer) != DT_OK) /* the writer printed why */
            return 1;
    }
    /* lockstep ranks only: not the servers' asynchronous workers, not a pipeline's unequal stages */
    if (t->nranks > 1 && l->servers == 0 && l->pp == 1 && dt_straggler_create(t->world, &t->strag) != DT_OK) {
        fprintf(stderr, "dtrain: rank %d: straggler detection: %s\n", t->rank, dt_last_error());
        return 1;
    }
    /* the prefetcher hands out micro-batches: batch_size / micro_batches samples each, already in the memory of
     * the model's device (copied in by its thread) */
    if (dt_prefetch_start_on(dt_model_device(dt_strategy_model(t->s)), &t->sampler, c->batch_size / c->micro_batches,
                             t->d.features, t->d.gpt ? t->d.features : 1, data_fill, &t->d, &t->pf) != DT_OK) {
        fprintf(stderr, "dtrain: %s\n", dt_last_error());
        return 1;
    }
    dtrain_phase("set up");
    return 0;
}

int train_checkpoint(train_run *t, const char *label, double *stall)
{
    bool dropped = false;
    if (dt_strategy_save(t->s, t->writer, t->c->checkpoint_dir, &t->pr, label, stall, &dropped) != DT_OK) {
        fprintf(stderr, "dtrain: rank %d: %s\n", t->rank, dt_last_error());
        return 1;
    }
    if (dropped) /* this checkpoint is lost; training goes on with the earlier ones */
        fprintf(stderr, "dtrain: %s\n", dt_last_error());
    return 0;
}

int train_teardown(train_run *t, int code)
{
    int64_t unused_step;
    dt_ckpt_progress unused_pr;
    dtrain_snapshot_verify_take(t, &unused_step, &unused_pr); /* set-up failed before it was taken */
    dt_straggler_destroy(t->strag);
    dt_prefetch_stop(t->pf);
    dtrain_snapshot_stop(t); /* a snapshot in flight completes */
    if (t->writer) { /* the last checkpoint is on disk before the job reports success */
        char good[2048];
        int64_t last_good = dt_ckpt_writer_last_good(t->writer, good, sizeof good);
        if (code == 0 && last_good != t->pr.step) { /* the final model is missing: a scheduler must see it */
            if (last_good >= 0)
                fprintf(stderr, "dtrain: the final checkpoint (step %lld) could not be written (above); the newest "
                                "good checkpoint is %s (step %lld)\n", (long long)t->pr.step, good,
                        (long long)last_good);
            else
                fprintf(stderr, "dtrain: the final checkpoint (step %lld) could not be written (above), and no "
                                "earlier one exists in %s\n", (long long)t->pr.step, t->c->checkpoint_dir);
            code = 3;
        }
        dt_ckpt_writer_stop(t->writer);
    }
    if (t->metrics && fclose(t->metrics) != 0 && !t->metrics_lost) {
        t->metrics_lost = true;
        t->metrics_lost_at = t->pr.step;
        fprintf(stderr, "dtrain: cannot write metrics file %s: %s\n", t->c->metrics_file, strerror(errno));
    }
    if (t->metrics_lost) {
        fprintf(stderr, "dtrain: the metrics file %s lacks the records from step %lld on (above)\n",
                t->c->metrics_file, (long long)t->metrics_lost_at);
        code = code == 0 ? 3 : code;
    }
    if (t->mon) {
        dtrain_monitor_record(t->mon, "{\"event\": \"end\", \"step\": %lld, \"code\": %d}\n", (long long)t->pr.step,
                              code);
        fclose(t->mon);
    }
    if (t->job && code != 0 && code != 3) /* the other ranks stop at once, not at their timeout */
        dt_comm_abort(t->job, "dtrain: training failed on a rank");
    dt_strategy_destroy(t->s);
    if (t->job && dt_comm_destroy(t->job) != DT_OK && (code == 0 || code == 3)) {
        fprintf(stderr, "dtrain: rank %d: leaving the job: %s\n", t->rank, dt_last_error());
        code = 1;
    }
    dt_sampler_free(&t->sampler);
    data_close(&t->d);
    return code;
}
