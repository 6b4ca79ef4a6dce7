/* ZeRO in your own loop: Fashion-MNIST with each rank keeping 1/N of the
 * optimizer state (stage 1), also of the gradients (2) and of the parameters
 * (3), through the Horovod-style calls of dtrain/parallel.h.
 *   dtrun -n 2 build/bin/zero_fashion_mnist [STAGE=3] [EPOCHS=1] */
#include <stdio.h>
#include <stdlib.h>

#include "dtrain/dtrain.h"

#define CHECK(call)                                                                           \
    do {                                                                                      \
        if ((call) != DT_OK) {                                                                \
            fprintf(stderr, "rank %d: %s: %s\n", rank, #call, dt_last_error());             \
            exit(1);                                                                          \
        }                                                                                     \
    } while (0)

int main(int argc, char **argv)
{
    int rank = 0, stage = argc > 1 ? atoi(argv[1]) : 3, epochs = argc > 2 ? atoi(argv[2]) : 1;
    dt_comm *world;
    CHECK(dt_comm_init_env(&world));
    rank = dt_comm_rank(world);
    dt_set_threads(1);
    dt_idx_set train, test;
    CHECK(dt_idx_load_dir(DT_FASHION_MNIST_DIR, "train", &train));
    CHECK(dt_idx_load_dir(DT_FASHION_MNIST_DIR, "t10k", &test));

    dt_model *model;
    CHECK(dt_mlp_create((int64_t[]){784, 256, 256, 10}, 4, &model));
    dt_model_init(model, 1);
    dt_params *params = dt_model_params(model);
    /* the optimizer holds only this rank's shard of the state */
    int64_t shard = dt_zero_shard_numel(model, dt_comm_size(world));
    dt_optimizer *adamw;
    CHECK(dt_adamw_create(&(dt_adamw_config){0.9f, 0.999f, 1e-8f, 0.0f}, shard, &adamw));
    dt_zero *zero; /* rank 0's weights everywhere; from here on each rank keeps its shard */
    CHECK(dt_zero_create(world, model, adamw, stage, &zero));
    dt_sampler sampler;
    CHECK(dt_dist_sampler_init(&sampler, train.count, 1, world));
    if (rank == 0)
        printf("ZeRO stage %d over %d ranks: each keeps %lld of the %lld parameters' optimizer state%s\n", stage,
               dt_comm_size(world), (long long)shard, (long long)dt_params_numel(params),
               stage == 1 ? "" : stage == 2 ? " and gradients" : ", gradients and values");

    enum { B = 64 };
    static float x[B * 784];
    static int32_t y[B];
    int64_t idx[B];
    dt_arena *arena;
    dt_arena_create(&arena);
    for (int epoch = 0; epoch < epochs; epoch++) {
        int64_t n;
        float loss = 0;
        while ((n = dt_sampler_next(&sampler, B, idx)) > 0) {
            dt_idx_batch(&train, idx, n, x, y);
            dt_arena_reset(arena);
            dt_params_zero_grads(params); /* stages 2 and 3 keep no whole gradients: nothing to clear */
            dt_ctx ctx = {.arena = arena, .training = true};
            dt_tensor in = dt_tensor_view(x, 2, (int64_t[]){n, 784}), out;
            CHECK(dt_model_forward(model, &ctx, &in, &out)); /* stage 3 gathers each block's parameters */
            dt_tensor grad = out;
            grad.data = dt_arena_alloc(arena, dt_tensor_numel(&out));
            CHECK(dt_softmax_cross_entropy(&out, y, &loss, &grad));
            CHECK(dt_model_backward(model, &ctx, &grad)); /* stage 2 and 3 reduce each block's gradients */
            CHECK(dt_zero_step(zero, 1e-3f, 1.0f, NULL));
            if (n < B)
                break;
        }
        /* accuracy on the test set: every rank runs it (stage 3's forward gathers from all) */
        int64_t correct = 0;
        for (int64_t s = 0; s < test.count; s += B) {
            int64_t m = test.count - s < B ? test.count - s : B;
            for (int64_t i = 0; i < m; i++)
                idx[i] = s + i;
            dt_idx_batch(&test, idx, m, x, y);
            dt_arena_reset(arena);
            dt_ctx ctx = {.arena = arena};
            dt_tensor in = dt_tensor_view(x, 2, (int64_t[]){m, 784}), out;
            CHECK(dt_model_forward(model, &ctx, &in, &out));
            for (int64_t i = 0; i < m; i++) {
                int best = 0;
                for (int k = 1; k < 10; k++)
                    best = out.data[i * 10 + k] > out.data[i * 10 + best] ? k : best;
                correct += best == y[i];
            }
        }
        if (rank == 0)
            printf("epoch %d: last loss %.4f, test accuracy %.2f%%\n", epoch + 1, loss, 100.0 * correct / test.count);
    }
    dt_zero_destroy(zero);
    dt_optimizer_destroy(adamw);
    dt_model_destroy(model);
    dt_arena_destroy(arena);
    dt_sampler_free(&sampler);
    dt_idx_free(&train);
    dt_idx_free(&test);
    return dt_comm_destroy(world) == DT_OK ? 0 : 1;
}
