/* dtrain train: the training loop.  The run (mesh, stages, shards,
 * optimizer, strategy) is the library's, built from the configuration's
 * layout (train_setup.c); here the steps are fed batches, logged, evaluated
 * and checkpointed. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train_run.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
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
    struct timespec ts = {(time_t)(ms / 1000), (long)(fmod(ms, 1000) * 1e6)};
    nanosleep(&ts, NULL);
}

static void format_eta(double seconds, char *buf, size_t len)
{
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, len, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else
        snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
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
    if (!(f->last = dt_prefetch_next(f->pf))) /* a device upload failed; dt_last_error() says why */
        return DT_ERR_SYSTEM;
    mb->x = dt_tensor_view(f->last->x, 2, (int64_t[]){f->last->n, f->features});
    mb->targets = f->last->y;
    mb->x_dev = f->last->x_dev;
    mb->targets_dev = f->last->y_dev;
    mb->ntargets = f->last->n * f->targets_per_sample;
    f->items += f->last->n * f->per_item;
    return DT_OK;
}

void train_metrics_flush(train_run *t)
{
    if (fflush(t->metrics) == 0 && !ferror(t->metrics))
        return;
    if (!t->metrics_lost) {
        t->metrics_lost = true;
        t->metrics_lost_at = t->pr.step;
        fprintf(stderr, "dtrain: cannot write metrics file %s at step %lld: %s; training continues, the run will end "
                        "with status 3\n", t->c->metrics_file, (long long)t->pr.step, strerror(errno));
    }
    clearerr(t->metrics);
}

/* The logging window: what the progress line, the metrics and the monitor report. */
typedef struct {
    double start, run_start, compute, comm, exposed, eval_s;
    int64_t items, mon_from;
    const char *unit;
} window;

static void log_step(train_run *t, window *w, float loss, float lr, float norm)
{
    const dtrain_config *c = t->c;
    double now = now_s(), rate = (double)w->items / (now - w->start);
    if (t->lead) {
        char eta[32];
        format_eta((double)(c->steps - t->pr.step) * (now - w->run_start) / (double)(t->pr.step - t->first_step), eta,
                   sizeof eta);
        dtrain_progress_line("step %lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f %s/s | ETA %s\n",
                             (long long)t->pr.step, (long long)c->steps, loss, lr, norm, rate, w->unit, eta);
        if (t->metrics) {
            fprintf(t->metrics, "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.6g, \"grad_norm\": %.6g, \"%s_per_s\": %.1f, "
                    "\"compute_s\": %.4f, \"comm_s\": %.4f, \"exposed_comm_s\": %.4f, \"elapsed_s\": %.3f}\n",
                    (long long)t->pr.step, loss, lr, norm, w->unit, rate, w->compute, w->comm, w->exposed,
                    now - w->run_start);
            train_metrics_flush(t);
        }
    }
    if (t->mon) { /* every rank: dtrun's per-rank table; the times are per step over the window */
        double n = (double)(t->pr.step - w->mon_from > 0 ? t->pr.step - w->mon_from : 1);
        dtrain_monitor_record(t->mon, "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.6g, \"grad_norm\": %.6g, "
                              "\"%s_per_s\": %.1f, \"step_s\": %.6f, \"compute_s\": %.6f, \"comm_s\": %.6f, "
                              "\"exposed_comm_s\": %.6f, \"bytes_sent\": %llu, \"elapsed_s\": %.3f}\n",
                              (long long)t->pr.step, loss, lr, norm, w->unit, rate, (now - w->start) / n,
                              w->compute / n, w->comm / n, w->exposed / n,
                              (unsigned long long)dt_comm_bytes_sent(t->job), now - w->run_start);
        w->mon_from = t->pr.step;
    }
    *w = (window){now_s(), w->run_start, 0, 0, 0, w->eval_s, 0, w->mon_from, w->unit};
}

/* Evaluate (every rank calls; the lead's replica runs it, the lead prints).
 * *stop: stop_at_accuracy reached (decided by the lead, told to all).  0;
 * 1 on a failure dt_last_error names; -1 when already said. */
static int evaluate(train_run *t, window *w, bool last, bool *stop)
{
    const dtrain_config *c = t->c;
    double e0 = now_s();
    eval_result er;
    int reached = 0;
    dtrain_evaluate_run(c, t->s, &t->d, &er);
    if (t->lead) {
        char what[256];
        w->eval_s += now_s() - e0;
        dtrain_eval_describe(c, &t->d, &er, what, sizeof what);
        dtrain_progress_line("eval at step %lld | loss %.4f | accuracy %.2f%% | %s (eval_batches %lld)\n",
                             (long long)t->pr.step, er.loss, 100 * er.accuracy, what, (long long)c->eval_batches);
        if (t->metrics) { /* train_s: wall time so far less the time spent evaluating; flushed as the steps */
            fprintf(t->metrics, "{\"step\": %lld, \"eval_loss\": %.9g, \"eval_accuracy\": %.6f, \"elapsed_s\": %.3f, "
                    "\"train_s\": %.3f}\n", (long long)t->pr.step, er.loss, er.accuracy, now_s() - w->run_start,
                    now_s() - w->run_start - w->eval_s);
            train_metrics_flush(t);
        }
        dtrain_monitor_record(t->mon, "{\"step\": %lld, \"eval_loss\": %.9g, \"eval_accuracy\": %.6f}\n",
                              (long long)t->pr.step, er.loss, er.accuracy);
        reached = c->stop_at_accuracy > 0 && er.accuracy >= c->stop_at_accuracy;
        if (!isfinite(er.loss)) { /* the last update made the weights so: no checkpoint of them follows */
            fprintf(stderr, "dtrain: the evaluation at step %lld is not finite: the weights are not (lower lr, or set "
                            "grad_clip); no checkpoint of them is written\n", (long long)t->pr.step);
            return -1; /* printed */
        }
    }
    if (c->stop_at_accuracy > 0 && !last) { /* the lead alone scored: it decides for all */
        if (t->nranks > 1 && dt_broadcast(&reached, 1, DT_I32, 0, t->world) != DT_OK)
            return 1;
        if (reached && t->lead)
            dtrain_progress_line("reached accuracy %.2f%% at step %lld: stopping\n", 100 * c->stop_at_accuracy,
                                 (long long)t->pr.step);
    }
    *stop = reached;
    return 0;
}

/* After a step: evaluation and checkpoint when due.  *stop: the run ends here. */
static int after_step(train_run *t, window *w, double *last_ckpt, bool *stop)
{
    const dtrain_config *c = t->c;
    bool last = t->pr.step == c->steps, reached = false;
    /* the previous snapshot's deferred copy done before a save below may
     * write the host's state (a device's download): the optimizer's update
     * has waited for it already, unless this step made none */
    dt_ckpt_writer_settle(t->snap_writer);
    int e = ((c->eval_interval && t->pr.step % c->eval_interval == 0) || last) ? evaluate(t, w, last, &reached) : 0;
    if (e != 0)
        return e;
    last |= reached;
    int by_time = c->checkpoint_seconds > 0 && now_s() - *last_ckpt >= c->checkpoint_seconds;
    if (c->checkpoint_seconds > 0 && t->nranks > 1 && dt_strategy_lockstep(t->s) && /* the writer's clock decides */
        dt_broadcast(&by_time, 1, DT_I32, 0, t->world) != DT_OK)
        return 1;
    bool ckpt_now = c->checkpoint_dir[0] &&
                    ((c->checkpoint_interval && t->pr.step % c->checkpoint_interval == 0) || by_time || last);
    double stall = 0;
    if (ckpt_now && dt_strategy_sync(t->s) != DT_OK) /* ZeRO's gathers of the updated parameters */
        return 1;
    if (ckpt_now && train_checkpoint(t, "", &stall) != 0)
        return -1; /* printed */
    if (ckpt_now) {
        *last_ckpt = now_s();
        if (t->lead) /* handed to the writer: on disk once its manifest is (docs/checkpoints.md) */
            dtrain_monitor_record(t->mon, "{\"event\": \"checkpoint\", \"step\": %lld}\n", (long long)t->pr.step);
        w->compute -= stall; /* not compute: time held up by the writer */
    }
    if (dtrain_snapshot_after_step(t, &stall) != 0)
        return -1; /* printed */
    w->compute -= stall;
    *stop = last;
    return 0;
}

static int train_loop(train_run *t)
{
    const dtrain_config *c = t->c;
    dt_lr_schedule sched = {strcmp(c->schedule, "cosine") == 0 ? DT_LR_COSINE : DT_LR_CONSTANT, (float)c->lr,
                            (float)c->min_lr, c->warmup_steps, c->steps};
    window w = {now_s(), 0, 0, 0, 0, 0, 0, t->pr.step, t->d.gpt ? "tokens" : "samples"};
    w.run_start = w.start;
    double last_ckpt = w.start;
    feed fd = {t->pf, t->d.features, (t->d.gpt ? c->context : 1) * t->dpn, 0, t->d.gpt ? t->d.features : 1, NULL};
    for (int64_t step = t->pr.step; step < c->steps; step++) {
        double t0 = now_s();
        float lr = dt_lr_at(&sched, step);
        dt_step_stats st = {0};
        fd.items = 0;
        if (c->straggler_rank >= 0 && dt_comm_rank(t->job) == c->straggler_rank)
            straggle(c, step);
        dtrain_snapshot_before_step(t, step);
        dt_status s = dt_strategy_step(t->s, step, lr, next_batch, &fd, &st);
        float loss = st.loss;
        t->act_peak = st.activation_bytes > t->act_peak ? st.activation_bytes : t->act_peak;
        t->flight_peak = st.micro_in_flight > t->flight_peak ? st.micro_in_flight : t->flight_peak;
        w.items += fd.items;
        bool log_now = (step + 1) % c->log_interval == 0 || step + 1 == c->steps;
        /* the loss over every rank's batch (asp, ssp: worker 0's) */
        if (s == DT_OK && log_now && t->nranks > 1 && dt_strategy_lockstep(t->s))
            s = dt_allreduce(&loss, &loss, 1, DT_F32, DT_AVG, t->world);
        if (s == DT_OK && t->strag)
            s = dt_straggler_step(t->strag, step, now_s() - t0, st.exposed_s, NULL);
        if (s != DT_OK || !isfinite(loss)) {
            fprintf(stderr, "dtrain: rank %d: step %lld failed: %s\n", t->rank, (long long)step + 1,
                    s != DT_OK ? dt_last_error() : "the loss is not finite (lower lr, or set grad_clip)");
            return 1;
        }
        if (step - t->first_step >= 2) { /* the first steps warm caches and connections */
            t->steady_s += now_s() - t0;
            t->steady_steps++;
        }
        w.compute += now_s() - t0 - st.exposed_s;
        w.comm += st.comm_s;
        w.exposed += st.exposed_s;
        t->pr.step = step + 1;
        /* Dropout is keyed by (seed, step, micro-batch, rank) and needs no saved
         * state; the manifest's rng field (format 2) holds the next step's key
         * as a generator state, so a checkpoint still names where it stands. */
        dt_rng_seed(&t->pr.rng, dt_rng_key_stream(&(dt_rng_key){(uint64_t)c->seed, (uint64_t)t->pr.step, 0, 0}, 0));
        t->pr.epoch = fd.last->epoch;
        t->pr.position = fd.last->position;
        t->pr.optimizer_steps = dt_optimizer_steps(dt_strategy_optimizer(t->s));
        if (log_now)
            log_step(t, &w, loss, lr, st.grad_norm);
        if (step == t->first_step)
            dtrain_phase("first step done");
        bool stop = false;
        int r = after_step(t, &w, &last_ckpt, &stop);
        if (r > 0)
            fprintf(stderr, "dtrain: rank %d: step %lld failed: %s\n", t->rank, (long long)t->pr.step,
                    dt_last_error());
        if (r != 0)
            return 1;
        if (stop)
            break;
    }
    return 0;
}

int dtrain_train(const dtrain_config *config, const char *resume, bool overwrite)
{
    dtrain_config adjusted = *config, *c = &adjusted;
    train_run t = {0};
    int code = train_prepare(c, resume, overwrite, &t.thread_source);
    if (code != 0)
        return code;
    code = train_setup(&t, c, resume);
    if (code == 0) {
        t.first_step = t.pr.step;
        t.mon = dtrain_monitor_open(dt_comm_rank(t.job), dt_comm_size(t.job), c->steps, t.d.gpt ? "tokens" : "samples");
        int64_t nparams = dt_strategy_whole_parameters(t.s); /* collective over the pipeline */
        if (t.lead)
            train_report_start(&t, nparams);
        code = train_loop(&t);
        if (t.lead && code == 0)
            train_report_end(&t);
    }
    return train_teardown(&t, code < 0 ? 0 : code);
}
