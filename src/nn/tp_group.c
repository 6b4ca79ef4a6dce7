/* The tensor-parallel group's contract checked where a layer, a loss or a
 * description takes one (dt_tp_group in dtrain/nn.h): a group supplied by a
 * test or a future backend fails here, naming the fault, rather than at its
 * first exchange. */
#include "base/status.h"
#include "nn/tp.h"

dt_status dt__tp_check(const dt_tp_group *g, const char *who)
{
    if (!g)
        return dt__fail(DT_ERR_INVALID, "%s: the tensor-parallel group is NULL", who);
    if (g->size < 1 || g->rank < 0 || g->rank >= g->size)
        return dt__fail(DT_ERR_INVALID, "%s: tensor-parallel rank %d of %d ranks", who, g->rank, g->size);
    const char *missing = !g->allreduce_sum        ? "allreduce_sum"
                          : !g->allreduce_sum_f64  ? "allreduce_sum_f64"
                          : !g->allreduce_max_f64  ? "allreduce_max_f64"
                          : !g->allgather          ? "allgather"
                          : !g->reduce_scatter_sum ? "reduce_scatter_sum"
                                                   : NULL;
    if (missing)
        return dt__fail(DT_ERR_INVALID, "%s: the tensor-parallel group has no %s", who, missing);
    return DT_OK;
}
