/* dtrain eval and dtrain generate: commands that load a checkpoint. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_source.h"
#include "dtrain_cli.h"

static dt_status load(const char *checkpoint, dtrain_config *c, dt_model **m)
{
    char step_dir[2048];
    dt_ckpt_progress pr;
    if (dtrain_checkpoint_open(checkpoint, 0, step_dir, sizeof step_dir, c, &pr) != DT_OK)
        return DT_ERR_INVALID;
    int threads = (int)c->threads;
    if (threads == 0 && dt_threads_default(&threads, NULL) != DT_OK) {
        fprintf(stderr, "dtrain: %s\n", dt_last_error());
        return DT_ERR_INVALID;
    }
    dt_set_threads(threads);
    if (dtrain_build_model(c, m) != DT_OK)
        return DT_ERR_INVALID;
    if (dt_ckpt_load(step_dir, dt_model_params(*m), NULL) != DT_OK) {
        fprintf(stderr, "dtrain: %s\n", dt_last_error());
        dt_model_destroy(*m);
        return DT_ERR_INVALID;
    }
    if (dtrain_params_not_finite(dt_model_params(*m), step_dir)) { /* (it says which) */
        dt_model_destroy(*m);
        return DT_ERR_INVALID;
    }
    fprintf(stderr, "loaded %s (step %lld)\n", step_dir, (long long)pr.step);
    /* DT_DEVICE picks where it runs; not the manifest's device: a checkpoint
     * trained on a GPU is read where there may be none */
    const char *dev_name = getenv("DT_DEVICE");
    const dt_device *dev = NULL;
    char what[256];
    if (dev_name && *dev_name && strcmp(dev_name, "cpu")) {
        if (dt_device_open(dev_name, &dev) != DT_OK || dt_device_describe(dev, what, sizeof what) != DT_OK ||
            dt_model_to_device(*m, dev) != DT_OK) {
            fprintf(stderr, "dtrain: DT_DEVICE=%s: %s\n", dev_name, dt_last_error());
            dt_model_destroy(*m);
            return DT_ERR_INVALID;
        }
        fprintf(stderr, "device: %s\n", what);
    }
    return DT_OK;
}

int dtrain_eval(const char *checkpoint)
{
    dtrain_config c;
    dt_model *m;
    if (load(checkpoint, &c, &m) != DT_OK)
        return 1;
    data_source d;
    if (data_open(&c, &d) != DT_OK)
        return 1;
    c.eval_batches = 1LL << 40; /* the whole evaluation split */
    dt_arena *arena;
    dt_arena_create_on(dt_model_device(m), &arena);
    eval_result r;
    char what[256];
    dtrain_evaluate(&c, m, &d, arena, &r);
    if (r.rows == 0) {
        fprintf(stderr, "dtrain: evaluation failed: %s\n", dt_last_error());
        return 1;
    }
    /* The whole split, where training evaluates eval_batches of it: say which. */
    dtrain_eval_describe(&c, &d, &r, what, sizeof what);
    printf("eval: %lld %s, loss %.4f, accuracy %.2f%% | the whole split, %s (training's evaluations use its first "
           "eval_batches)\n", (long long)r.rows, d.gpt ? "tokens" : d.fortunes ? "fortunes" : "images", r.loss, 100.0 * r.accuracy, what);
    dt_arena_destroy(arena);
    data_close(&d);
    dt_model_destroy(m);
    return 0;
}

int dtrain_generate(const char *checkpoint, const char *prompt, int64_t tokens, double temperature, uint64_t seed)
{
    dtrain_config c;
    dt_model *m;
    if (load(checkpoint, &c, &m) != DT_OK)
        return 1;
    if (strcmp(c.model, "gpt") != 0) {
        fprintf(stderr, "dtrain: generate needs a gpt checkpoint, %s holds a %s\n", checkpoint, c.model);
        dt_model_destroy(m);
        return 2;
    }
    size_t plen = strlen(prompt);
    int64_t cap = (int64_t)plen + tokens + 1;
    float *seq = malloc((size_t)cap * sizeof *seq);
    float *prob = malloc((size_t)c.vocab * sizeof *prob), *last = malloc((size_t)c.vocab * sizeof *last);
    if (!seq || !prob || !last) {
        fprintf(stderr, "dtrain: generate: out of memory for %lld bytes of text\n", (long long)cap);
        free(seq), free(prob), free(last);
        dt_model_destroy(m);
        return 1;
    }
    for (size_t i = 0; i < plen; i++)
        seq[i] = (float)(unsigned char)prompt[i];
    int64_t len = (int64_t)plen;
    if (len == 0)
        seq[len++] = (float)'\n'; /* an empty prompt starts a new line */
    dt_arena *arena;
    dt_arena_create_on(dt_model_device(m), &arena);
    dt_rng rng;
    dt_rng_seed(&rng, seed);
    fwrite(prompt, 1, plen, stdout);
    for (int64_t t = 0; t < tokens; t++) {
        int64_t T = len < c.context ? len : c.context;
        dt_arena_reset(arena);
        dt_ctx ctx = {.arena = arena};
        dt_tensor in = dt_tensor_view(seq + len - T, 2, (int64_t[]){1, T}), out;
        if (dt_model_forward(m, &ctx, &in, &out) != DT_OK) {
            fprintf(stderr, "dtrain: generate: %s\n", dt_last_error());
            return 1;
        }
        /* the last position's logits, on the host */
        if (dt_device_download(dt_model_device(m), last, out.data + (T - 1) * c.vocab,
                               (size_t)c.vocab * sizeof *last) != DT_OK) {
            fprintf(stderr, "dtrain: generate: %s\n", dt_last_error());
            return 1;
        }
        const float *z = last;
        int64_t next = 0;
        if (temperature <= 0) { /* greedy */
            for (int64_t k = 1; k < c.vocab; k++)
                next = z[k] > z[next] ? k : next;
        } else {
            float mx = z[0];
            for (int64_t k = 1; k < c.vocab; k++)
                mx = z[k] > mx ? z[k] : mx;
            double sum = 0;
            for (int64_t k = 0; k < c.vocab; k++)
                sum += prob[k] = expf((float)((z[k] - mx) / temperature));
            double u = dt_rng_uniform(&rng) * sum, acc = 0;
            for (next = 0; next < c.vocab - 1; next++)
                if ((acc += prob[next]) > u)
                    break;
        }
        seq[len++] = (float)next;
        putchar((int)next);
        fflush(stdout);
    }
    putchar('\n');
    free(prob);
    free(last);
    free(seq);
    dt_arena_destroy(arena);
    dt_model_destroy(m);
    return 0;
}
