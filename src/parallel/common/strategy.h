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

/* Fill the common part; the strategy sets ops, key_group and impl. */
dt_status dt__strategy_init(dt_strategy *s, dt_model *m, dt_optimizer *o, const dt_strategy_config *cfg);

#endif
