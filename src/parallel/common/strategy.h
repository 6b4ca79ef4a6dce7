/* What each strategy implements behind dt_strategy (parallel.h).  The common
 * micro-batch loop (strategy.c here) runs forward, loss and backward per
 * micro-batch; a strategy decides what happens around it: which micro-batch
 * communicates, how gradients are synchronised and how the update is made.
 * Pipeline, ZeRO, tensor-parallel and parameter-server strategies are further
 * tables of the same shape. */
#ifndef DT_PARALLEL_COMMON_STRATEGY_H
#define DT_PARALLEL_COMMON_STRATEGY_H

#include "dtrain/parallel.h"

typedef struct {
    const char *name;
    /* The optimizer lives elsewhere (the parameter servers): creation takes
     * none. */
    bool no_optimizer;
    /* The whole step instead of the common micro-batch loop (a pipeline
     * runs its own schedule); NULL for the common loop. */
    dt_status (*step)(dt_strategy *s, int64_t step, float lr, dt_next_batch_fn next, void *user, dt_step_stats *out);
    /* Before micro-batch `micro` of `count` runs its backward. */
    void (*before_backward)(dt_strategy *s, int micro, int count);
    /* After the last backward: synchronise, clip, update. */
    dt_status (*update)(dt_strategy *s, float lr, float max_norm, float *norm);
    /* Wait for what the last step left in flight (ZeRO's gathers of the
     * updated parameters); NULL: nothing is ever left. */
    dt_status (*sync)(dt_strategy *s);
    /* Communication time of the last step (seconds), and the part not hidden. */
    void (*timing)(const dt_strategy *s, double *comm, double *exposed);
    /* Bytes the strategy holds beyond the model and the optimizer, of which
     * *buffers communication buffers (NULL: none). */
    size_t (*memory)(const dt_strategy *s, size_t *buffers);
    void (*destroy)(dt_strategy *s);
} dt__strategy_ops;

struct dt_strategy {
    const dt__strategy_ops *ops;
    dt_model *model;
    dt_optimizer *opt;
    dt_strategy_config cfg;
    uint32_t key_group; /* dropout keys differ across data-parallel ranks */
    dt_arena *arena;
    void *impl;
};

/* Every strategy's constructor: a strategy with the given table, its common
 * part checked and filled (the model, the optimizer, the config, the
 * activation arena on the model's device) and, when impl_size > 0, a zeroed
 * impl of that size.  The caller then sets key_group and fills impl, and
 * ends with dt__strategy_finish.  On failure nothing is left and *out is
 * untouched; ops->destroy must accept the zeroed impl (or NULL when
 * impl_size is 0), as it does a half-built one. */
dt_status dt__strategy_new(const dt__strategy_ops *ops, size_t impl_size, dt_model *m, dt_optimizer *o,
                           const dt_strategy_config *cfg, dt_strategy **out);

/* The end of a strategy's creation: st == DT_OK hands s out (*out), else s
 * is destroyed and *out untouched.  Returns st. */
dt_status dt__strategy_finish(dt_strategy *s, dt_status st, dt_strategy **out);

#endif
