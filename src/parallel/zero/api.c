/* ZeRO for a hand-written loop (parallel.h, dt_zero_*): the strategy of
 * strategy.c without its micro-batch loop.  The caller runs forward
 * and backward (the strategy's block hooks move the blocks' gradients and
 * parameters meanwhile); dt_zero_step makes the update and, unlike a
 * strategy step, returns with the parameters current, so the caller may
 * read them at once. */
#include <stdlib.h>

#include "base/status.h"
#include "parallel/common/strategy.h"

struct dt_zero {
    dt_strategy *s;
};

dt_status dt_zero_create(dt_comm *c, dt_model *m, dt_optimizer *o, int stage, dt_zero **out)
{
    if (!out)
        return dt__fail(DT_ERR_INVALID, "zero_create: out is NULL");
    dt_zero *z = calloc(1, sizeof *z);
    if (!z)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_strategy_config cfg = {.micro_batches = 1};
    dt_status st = dt_strategy_zero_create(m, o, c, stage, &cfg, &z->s);
    if (st != DT_OK) {
        free(z);
        return st;
    }
    *out = z;
    return DT_OK;
}

void dt_zero_set_accumulation(dt_zero *z, int micro_batches)
{
    if (z)
        z->s->cfg.micro_batches = micro_batches > 1 ? micro_batches : 1;
}

dt_status dt_zero_step(dt_zero *z, float lr, float max_norm, float *norm)
{
    if (!z)
        return dt__fail(DT_ERR_INVALID, "zero_step: the ZeRO object is NULL");
    float n = 0;
    dt_status st = z->s->ops->update(z->s, lr, max_norm, &n);
    if (st == DT_OK)
        st = dt_strategy_sync(z->s);
    if (norm)
        *norm = n;
    return st;
}

dt_strategy *dt_zero_strategy(dt_zero *z) { return z ? z->s : NULL; }

void dt_zero_destroy(dt_zero *z)
{
    if (!z)
        return;
    dt_strategy_destroy(z->s);
    free(z);
}
