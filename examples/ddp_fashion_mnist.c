/* Data-parallel Fashion-MNIST in your own loop, with the Horovod-style API of
 * dtrain/parallel.h.   dtrun -n 2 build/bin/ddp_fashion_mnist [EPOCHS] */
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
    int rank = 0, epochs = argc > 1 ? atoi(argv[1]) : 2;
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
    dt_ddp *ddp; /* rank 0's weights on every rank; gradients averaged during backward */
    CHECK(dt_ddp_create(world, params, NULL, &ddp));
    dt_optimizer *sgd;
    CHECK(dt_sgd_create(&(dt_sgd_config){.momentum = 0.9f}, dt_params_numel(params), &sgd));
    dt_sampler sampler; /* this rank's disjoint shard of every epoch */
    CHECK(dt_dist_sampler_init(&sampler, train.count, 1, world));

    enum { B = 64 }; /* per rank: the global batch is B x ranks */
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
            dt_params_zero_grads(params);
            dt_ctx ctx = {.arena = arena, .training = true};
            dt_tensor in = dt_tensor_view(x, 2, (int64_t[]){n, 784}), out;
            CHECK(dt_model_forward(model, &ctx, &in, &out));
            dt_tensor grad = out;
            grad.data = dt_arena_alloc(arena, dt_tensor_numel(&out));
            CHECK(dt_softmax_cross_entropy(&out, y, &loss, &grad));
            CHECK(dt_model_backward(model, &ctx, &grad));
            CHECK(dt_ddp_step(ddp, sgd, 0.05f, 0, NULL));
            if (n < B)
                break; /* a short batch ends the epoch (an exact end returns 0 next) */
        }
        /* accuracy on the test set (every rank has the same model) */
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
    dt_ddp_destroy(ddp);
    dt_optimizer_destroy(sgd);
    dt_model_destroy(model);
    dt_arena_destroy(arena);
    dt_sampler_free(&sampler);
    dt_idx_free(&train);
    dt_idx_free(&test);
    return dt_comm_destroy(world) == DT_OK ? 0 : 1;
}
