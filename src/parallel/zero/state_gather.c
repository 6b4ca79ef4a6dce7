/* A ZeRO optimizer's state put together over the dp group: each rank's
 * shard (its slice of every unit, shard.c) gathered onto rank 0 and
 * placed into a whole-sized optimizer's state, so that a mesh's checkpoint
 * (whose tp and pp gathers read whole state) is written as without ZeRO.
 * The way back needs no communication: every rank reads the whole state
 * from the checkpoint and keeps its shard (dt_zero_shard_take). */
#include <stdlib.h>

#include "base/status.h"
#include "dtrain/parallel.h"

dt_status dt_zero_state_gather(dt_model *m, dt_optimizer *shard, dt_comm *dp, dt_optimizer *whole)
{
    if (!m || !shard || !dp)
        return dt__fail(DT_ERR_INVALID, "zero_state_gather: %s is NULL", !m ? "the model" : !shard ? "the optimizer"
                                                                                                    : "the group");
    int N = dt_comm_size(dp), root = dt_comm_rank(dp) == 0;
    int64_t S = dt_zero_shard_numel(m, N), P = dt_params_numel(dt_model_params(m));
    dt_optim_state st[4], ws[4];
    int n = dt_optimizer_state_buffers(shard, st, 4), nw = root && whole ? dt_optimizer_state_buffers(whole, ws, 4) : n;
    if (root && (!whole || nw != n))
        return dt__fail(DT_ERR_INVALID, "zero_state_gather: rank 0 needs a whole optimizer of the same kind (%s)",
                        whole ? "it keeps other state" : "NULL");
    for (int i = 0; i < n; i++)
        if (st[i].numel != S || (root && ws[i].numel != P))
            return dt__fail(DT_ERR_INVALID, "zero_state_gather: state %d holds %lld and %lld elements; the shard of "
                            "%d ranks is %lld, the model %lld", i, (long long)st[i].numel,
                            (long long)(root ? ws[i].numel : 0), N, (long long)S, (long long)P);
    float *all = root ? malloc((size_t)(N * S > 0 ? N * S : 1) * sizeof *all) : NULL;
    if (root && !all)
        return dt__fail(DT_ERR_NOMEM, "zero_state_gather: out of memory for %lld elements", (long long)(N * S));
    dt_status s = DT_OK;
    for (int i = 0; s == DT_OK && i < n; i++) {
        s = dt_gather(st[i].data, all, (size_t)S, DT_F32, 0, dp);
        for (int q = 0; s == DT_OK && root && q < N; q++)
            s = dt_zero_shard_put(m, N, q, all + (int64_t)q * S, ws[i].data);
    }
    free(all);
    if (s == DT_OK && root)
        dt_optimizer_set_steps(whole, dt_optimizer_steps(shard));
    return s;
}
