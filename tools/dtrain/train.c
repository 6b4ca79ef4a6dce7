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

dt_status dtrain_build_model(const dtrain_config *c, dt_model **m)
{
    dt_status s;
    if (strcmp(c->model, "gpt") == 0)
        s = dt_gpt_create(&(dt_gpt_config){c->vocab, c->context, c->layers, c->heads, c->dim, (float)c->dropout}, m);
    else if (strcmp(c->model, "cnn") == 0)
        s = dt_cnn_create(28, c->conv1_channels, c->conv2_channels, 10, m);
    else
        s = dt_mlp_create(c->mlp_sizes, c->mlp_nsizes, m);
    if (s != DT_OK)
        fprintf(stderr, "dtrain: cannot build the model: %s\n", dt_last_error());
    return s;
}

static dt_status make_optimizer(const dtrain_config *c, int64_t n, dt_optimizer **o)
{
    dt_status s = strcmp(c->optimizer, "sgd") == 0
                      ? dt_sgd_create(&(dt_sgd_config){(float)c->momentum, (float)c->weight_decay, c->nesterov}, n, o)
                      : dt_adamw_create(&(dt_adamw_config){(float)c->beta1, (float)c->beta2, (float)c->eps,
                                                           (float)c->weight_decay}, n, o);
    if (s != DT_OK)
        fprintf(stderr, "dtrain: optimizer: %s\n", dt_last_error());
    return s;
}

void dtrain_evaluate(const dtrain_config *c, dt_model *m, const data_source *d, dt_arena *arena, double *loss,
                     double *accuracy, int64_t *rows_out)
{
    int64_t B = c->batch_size, F = d->features, per = d->gpt ? c->context : 1;
    float *x = malloc((size_t)(B * F) * sizeof *x);
    int32_t *y = malloc((size_t)(B * per) * sizeof *y);
    int64_t *idx = malloc((size_t)B * sizeof *idx);
    double total = 0, correct = 0;
    int64_t rows = 0, batches = 0;
    for (int64_t start = 0; start < d->eval_samples && batches < c->eval_batches; start += B, batches++) {
        int64_t n = d->eval_samples - start < B ? d->eval_samples - start : B;
        for (int64_t i = 0; i < n; i++)
            idx[i] = start + i;
        data_batch(d, 1, idx, n, x, y);
        dt_arena_reset(arena);
        dt_ctx ctx = {.arena = arena};
        dt_tensor in = dt_tensor_view(x, 2, (int64_t[]){n, d->gpt ? c->context : F}), out;
        float l = 0;
        if (dt_model_forward(m, &ctx, &in, &out) != DT_OK || dt_softmax_cross_entropy(&out, y, &l, NULL) != DT_OK)
            break;
        total += (double)l * (double)(n * per);
        rows += n * per;
        int64_t C = out.shape[out.ndim - 1];
        for (int64_t r = 0; r < n * per; r++) {
            int64_t best = 0;
            for (int64_t k = 1; k < C; k++)
                best = out.data[r * C + k] > out.data[r * C + best] ? k : best;
            correct += best == y[r];
        }
    }
    *loss = rows ? total / (double)rows : NAN;
    *accuracy = rows ? correct / (double)rows : NAN;
    if (rows_out)
        *rows_out = rows;
    free(x);
    free(y);
    free(idx);
}

static void format_eta(double seconds, char *buf, size_t len)
{
    long s = (long)(seconds + 0.5);
    if (s >= 3600)
        snprintf(buf, len, "%ldh%02ldm", s / 3600, (s / 60) % 60);
    else
        snprintf(buf, len, "%ldm%02lds", s / 60, s % 60);
}

int dtrain_train(const dtrain_config *c, const char *resume)
{
    if (dt_set_threads((int)c->threads) != DT_OK) {
        fprintf(stderr, "dtrain: threads: %s\n", dt_last_error());
        return 2;
    }
    data_source d;
    dt_model *m = NULL;
    dt_optimizer *o = NULL;
    if (data_open(c, &d) != DT_OK)
        return 1;
    if (dtrain_build_model(c, &m) != DT_OK)
        return 1;
    dt_params *p = dt_model_params(m);
    dt_model_init(m, (uint64_t)c->seed);
    if (make_optimizer(c, dt_params_numel(p), &o) != DT_OK)
        return 1;
    dt_sampler sampler;
    if (dt_sampler_init(&sampler, d.train_samples, (uint64_t)c->seed, 0, 1, true, true) != DT_OK) {
        fprintf(stderr, "dtrain: %s\n", dt_last_error());
        return 1;
    }
    dtrain_progress pr = {0};
    dt_rng_seed(&pr.rng, (uint64_t)c->seed ^ 0xd1ce5eedull);
    if (resume) {
        char step_dir[2048];
        dtrain_config saved;
        if (dtrain_checkpoint_open(resume, step_dir, sizeof step_dir, &saved, &pr) != DT_OK ||
            dtrain_checkpoint_load(step_dir, p, o) != DT_OK)
            return 1;
        dt_optimizer_set_steps(o, pr.optimizer_steps);
        dt_sampler_seek(&sampler, pr.epoch, pr.position, 0, 1);
        printf("resumed from %s at step %lld\n", step_dir, (long long)pr.step);
    }
    FILE *metrics = NULL;
    if (c->metrics_file[0] && !(metrics = fopen(c->metrics_file, resume ? "a" : "w"))) {
        fprintf(stderr, "dtrain: cannot write metrics file %s\n", c->metrics_file);
        return 1;
    }
    dt_lr_schedule sched = {strcmp(c->schedule, "cosine") == 0 ? DT_LR_COSINE : DT_LR_CONSTANT, (float)c->lr,
                            (float)c->min_lr, c->warmup_steps, c->steps};
    dt_arena *arena;
    dt_arena_create(&arena);
    prefetcher pf;
    if (prefetch_start(&pf, &d, &sampler, c->batch_size) != DT_OK)
        return 1;
    if (c->checkpoint_initial && !resume && c->checkpoint_dir[0]) {
        char where[2048];
        if (dtrain_checkpoint_save(c->checkpoint_dir, c, p, o, &pr, where, sizeof where) != DT_OK)
            return 1;
        printf("checkpoint %s (initial weights)\n", where);
    }
    const char *unit = d.gpt ? "tokens" : "samples";
    printf("training %s (%lld parameters) on %s: %lld steps, batch %lld, %d threads\n", c->model,
           (long long)dt_params_numel(p), d.gpt ? "text" : "fashion-mnist", (long long)c->steps,
           (long long)c->batch_size, dt_get_threads());
    fflush(stdout);
    int code = 0;
    double window_start = now_s(), run_start = window_start, compute = 0;
    int64_t window_items = 0, first_step = pr.step;
    for (int64_t step = pr.step; step < c->steps; step++) {
        const batch *b = prefetch_next(&pf);
        double t0 = now_s();
        dt_arena_reset(arena);
        dt_params_zero_grads(p);
        dt_ctx ctx = {.arena = arena, .rng = &pr.rng, .training = true};
        dt_tensor in = dt_tensor_view(b->x, 2, (int64_t[]){b->n, d.features}), out;
        float loss = 0;
        dt_status s = dt_model_forward(m, &ctx, &in, &out);
        dt_tensor g = out;
        if (s == DT_OK && !(g.data = dt_arena_alloc(arena, dt_tensor_numel(&out))))
            s = DT_ERR_NOMEM;
        if (s == DT_OK)
            s = dt_softmax_cross_entropy(&out, b->y, &loss, &g);
        if (s == DT_OK)
            s = dt_model_backward(m, &ctx, &g);
        float norm = dt_clip_grad_norm(dt_params_grads(p), dt_params_numel(p), (float)c->grad_clip);
        float lr = dt_lr_at(&sched, step);
        if (s == DT_OK)
            s = dt_optimizer_step(o, dt_params_values(p), dt_params_grads(p), dt_params_numel(p), lr);
        if (s != DT_OK || !isfinite(loss)) {
            fprintf(stderr, "dtrain: step %lld failed: %s\n", (long long)step + 1,
                    s != DT_OK ? dt_last_error() : "the loss is not finite (lower lr, or set grad_clip)");
            code = 1;
            break;
        }
        compute += now_s() - t0;
        window_items += b->n * (d.gpt ? c->context : 1);
        pr.step = step + 1;
        pr.epoch = b->epoch;
        pr.position = b->position;
        pr.optimizer_steps = dt_optimizer_steps(o);
        if (pr.step % c->log_interval == 0 || pr.step == c->steps) {
            double t = now_s(), rate = window_items / (t - window_start);
            char eta[32];
            format_eta((double)(c->steps - pr.step) * (t - run_start) / (double)(pr.step - first_step), eta, sizeof eta);
            printf("step %lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f %s/s | ETA %s\n", (long long)pr.step,
                   (long long)c->steps, loss, lr, norm, rate, unit, eta);
            fflush(stdout);
            if (metrics) {
                fprintf(metrics,
                        "{\"step\": %lld, \"loss\": %.9g, \"lr\": %.6g, \"grad_norm\": %.6g, \"%s_per_s\": %.1f, "
                        "\"compute_s\": %.4f, \"elapsed_s\": %.3f}\n",
                        (long long)pr.step, loss, lr, norm, unit, rate, compute, t - run_start);
                fflush(metrics);
            }
            window_start = t;
            window_items = 0;
            compute = 0;
        }
        int last = pr.step == c->steps;
        if ((c->eval_interval && pr.step % c->eval_interval == 0) || last) {
            double el, acc;
            dtrain_evaluate(c, m, &d, arena, &el, &acc, NULL);
            printf("eval at step %lld | loss %.4f | accuracy %.2f%%\n", (long long)pr.step, el, 100 * acc);
            if (metrics)
                fprintf(metrics, "{\"step\": %lld, \"eval_loss\": %.9g, \"eval_accuracy\": %.6f}\n", (long long)pr.step,
                        el, acc);
        }
        if (c->checkpoint_dir[0] && ((c->checkpoint_interval && pr.step % c->checkpoint_interval == 0) || last)) {
            char where[2048];
            if (dtrain_checkpoint_save(c->checkpoint_dir, c, p, o, &pr, where, sizeof where) == DT_OK)
                printf("checkpoint %s\n", where);
            else
                fprintf(stderr, "dtrain: checkpoint at step %lld failed; training continues\n", (long long)pr.step);
        }
    }
    prefetch_stop(&pf);
    if (metrics)
        fclose(metrics);
    dt_arena_destroy(arena);
    dt_sampler_free(&sampler);
    dt_optimizer_destroy(o);
    dt_model_destroy(m);
    data_close(&d);
    return code;
}
