/* Export a seeded dtrain model for the PyTorch cross-check
 * (tests/torch_crosscheck.py): weights.safetensors, the batch, the loss and
 * every gradient (grads.safetensors), and the losses of 20 AdamW steps.
 *
 * usage: torch_ref mlp|gpt-mini OUTDIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/dtrain.h"

#define STEPS 20

static int die(const char *what)
{
    fprintf(stderr, "torch_ref: %s: %s\n", what, dt_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "mlp") && strcmp(argv[1], "gpt-mini"))) {
        fprintf(stderr, "usage: torch_ref mlp|gpt-mini OUTDIR\n");
        return 2;
    }
    int gpt = strcmp(argv[1], "gpt-mini") == 0;
    dt_set_threads(1);
    dt_model *m;
    dt_status s = gpt ? dt_gpt_create(&(dt_gpt_config){.vocab = 256, .context = 128, .layers = 4, .heads = 4, .dim = 256}, &m)
                      : dt_mlp_create((int64_t[]){784, 256, 256, 10}, 4, &m);
    if (s != DT_OK)
        return die("model");
    dt_model_init(m, 1234);
    dt_params *p = dt_model_params(m);
    char path[4096];
    snprintf(path, sizeof path, "%s/weights.safetensors", argv[2]);
    if (dt_safetensors_write(path, p, dt_params_values(p), NULL, NULL) != DT_OK)
        return die("weights");

    /* the batch: Fashion-MNIST images, or bytes of a fixed pseudo-random text */
    int64_t B = gpt ? 4 : 64, T = gpt ? 128 : 1, feat = gpt ? 1 : 784, n = B * T;
    float *x = malloc((size_t)(B * T * feat) * sizeof *x);
    int32_t *y = malloc((size_t)n * sizeof *y);
    if (gpt) {
        dt_rng rng;
        dt_rng_seed(&rng, 77);
        float *stream = malloc((size_t)(n + 1) * sizeof *stream);
        for (int64_t i = 0; i <= n; i++)
            stream[i] = (float)(32 + dt_rng_next(&rng) % 95);
        for (int64_t i = 0; i < n; i++) {
            x[i] = stream[i];
            y[i] = (int32_t)stream[i + 1];
        }
        free(stream);
    } else {
        dt_idx_set train;
        if (dt_idx_load_dir(DT_FASHION_MNIST_DIR, "train", &train) != DT_OK)
            return die("fashion-mnist");
        int64_t idx[64];
        for (int i = 0; i < 64; i++)
            idx[i] = i;
        dt_idx_batch(&train, idx, 64, x, y);
        dt_idx_free(&train);
    }
    snprintf(path, sizeof path, "%s/batch.txt", argv[2]);
    FILE *f = fopen(path, "w");
    fprintf(f, "%lld %lld %lld\n", (long long)B, (long long)T, (long long)feat);
    for (int64_t i = 0; i < B * T * feat; i++)
        fprintf(f, "%.9g\n", x[i]);
    for (int64_t i = 0; i < n; i++)
        fprintf(f, "%d\n", y[i]);
    fclose(f);

    dt_arena *arena;
    dt_arena_create(&arena);
    dt_optimizer *opt;
    dt_adamw_create(&(dt_adamw_config){0.9f, 0.999f, 1e-8f, 0.1f}, dt_params_numel(p), &opt);
    snprintf(path, sizeof path, "%s/losses.txt", argv[2]);
    FILE *lf = fopen(path, "w");
    for (int step = 0; step <= STEPS; step++) {
        dt_arena_reset(arena);
        dt_params_zero_grads(p);
        dt_ctx ctx = {.arena = arena, .training = true};
        dt_tensor in = gpt ? dt_tensor_view(x, 2, (int64_t[]){B, T}) : dt_tensor_view(x, 2, (int64_t[]){B, feat}), out;
        if (dt_model_forward(m, &ctx, &in, &out) != DT_OK)
            return die("forward");
        dt_tensor g = out;
        g.data = dt_arena_alloc(arena, dt_tensor_numel(&out));
        float loss;
        if (dt_softmax_cross_entropy(&out, y, &loss, &g) != DT_OK || dt_model_backward(m, &ctx, &g) != DT_OK)
            return die("backward");
        fprintf(lf, "%.9g\n", loss);
        if (step == 0) {
            snprintf(path, sizeof path, "%s/grads.safetensors", argv[2]);
            if (dt_safetensors_write(path, p, dt_params_grads(p), NULL, NULL) != DT_OK)
                return die("grads");
        }
        if (step < STEPS)
            dt_optimizer_step(opt, dt_params_values(p), dt_params_grads(p), dt_params_numel(p), 1e-3f);
    }
    fclose(lf);
    printf("torch_ref: %s exported to %s (%lld parameters)\n", argv[1], argv[2], (long long)dt_params_numel(p));
    dt_optimizer_destroy(opt);
    dt_arena_destroy(arena);
    dt_model_destroy(m);
    free(x);
    free(y);
    return 0;
}
