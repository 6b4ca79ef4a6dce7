/* The model-state memory a layout gives each rank (dt_layout_memory_plan:
 * the formulas are in layout.h).  The trainer prints it at start and refuses
 * a layout above the memory limit, naming the ZeRO stage that fits. */
#include "base/status.h"
#include "parallel/common/strategy.h"
#include "parallel/run/memory_plan.h"

/* The largest block's parameters, padded to a multiple of n. */
static int64_t largest_block(dt_model *m, int n)
{
    dt_params *p = dt_model_params(m);
    int64_t best = 0;
    for (int b = 0; b < dt_model_num_layers(m); b++) {
        int first, count;
        dt_model_block_params(m, b, &first, &count);
        if (!count)
            continue;
        int64_t lo = dt_params_info(p, first)->offset;
        int64_t len = dt_params_info(p, first + count - 1)->offset + dt_params_info(p, first + count - 1)->numel - lo;
        len = (len + n - 1) / n * n;
        best = len > best ? len : best;
    }
    return best;
}

void dt__memory_plan_states(const dt_layout *l, double P, double S, double unit, int n, int state_floats,
                            dt_memory_plan *out)
{
    int stage = l->zero_stage;
    bool disk = l->offload == DT_OFFLOAD_DISK;
    double k = state_floats, window = 4 * 2 * 1048576.0;
    if (!stage)
        S = P;
    dt_memory_plan b = {4 * P, 4 * P, 4 * k * S, 0};
    if (disk && b.optimizer > k * window) /* on disk: two windows of 2^20 in memory */
        b.optimizer = k * window;
    if ((stage == 1 || stage == 2) && S * n != P) /* blocks the ranks do not divide: at most two padded copies */
        b.buffers = 4 * 2 * unit;
    if (stage == 3 || (stage == 2 && l->pp <= 1)) { /* a pipeline's stage 2 holds them whole through its schedule */
        b.grads = 4 * S;
        b.buffers += 4 * (3 * unit + 2 * unit / n); /* the running block's gradients, two blocks' being reduced */
    }
    if (stage == 3) {
        b.params = 4 * S;
        if (disk && b.params > window) /* the shard on disk too */
            b.params = window;
        b.buffers += 4 * 3 * unit; /* the block running, a tied block it uses, the next one prefetched */
    }
    *out = b;
}

dt_status dt_layout_memory_plan(const dt_layout *l, dt_model *m, int dp, int state_floats, dt_memory_plan *out)
{
    if (!l || !m || !out || dp < 1 || state_floats < 0)
        return dt__fail(DT_ERR_INVALID, "layout_memory_plan: %s", !l ? "the layout is NULL" : !m ? "the model is NULL"
                        : !out ? "out is NULL" : "dp < 1 or state_floats < 0");
    int n = dp;
    double P = (double)dt_params_numel(dt_model_params(m)), S = l->zero_stage ? (double)dt_zero_shard_numel(m, n) : P;
    dt__memory_plan_states(l, P, S, (double)largest_block(m, n), n, state_floats, out);
    return DT_OK;
}
