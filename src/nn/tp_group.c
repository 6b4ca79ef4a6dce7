/* The tensor-parallel group's contract checked where a layer, a loss or a
 * description takes one (dt_tp_group in dtrain/nn.h): a group supplied by a
 * test or a future backend fails here, naming the fault, rather than at its
 * first exchange. */
#include "base/status.h"
#include "nn/copies.h"
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
    int nonblocking = !!g->iallreduce_sum + !!g->iallgather + !!g->ireduce_scatter_sum + !!g->wait;
    if (nonblocking != 0 && nonblocking != 4)
        return dt__fail(DT_ERR_INVALID, "%s: the tensor-parallel group has %d of the 4 nonblocking entries "
                        "(iallreduce_sum, iallgather, ireduce_scatter_sum, wait: all or none)", who, nonblocking);
    return DT_OK;
}

/* In a copy (nn/copies.h) with the nonblocking entries: start, let the next
 * copy compute while it travels, come back when it is done and it is this
 * copy's turn.  Elsewhere the blocking entry. */
dt_status dt__tp_allreduce_sum(const dt_tp_group *g, float *buf, int64_t n)
{
    if (!g->iallreduce_sum || !dt__copies_inside())
        return g->allreduce_sum(g->user, buf, n);
    void *req = NULL;
    DT_CHECK(g->iallreduce_sum(g->user, buf, n, &req));
    return dt__copies_await(g->wait, g->user, req);
}

dt_status dt__tp_allgather(const dt_tp_group *g, const float *mine, float *all, int64_t n_each)
{
    if (!g->iallgather || !dt__copies_inside())
        return g->allgather(g->user, mine, all, n_each);
    void *req = NULL;
    DT_CHECK(g->iallgather(g->user, mine, all, n_each, &req));
    return dt__copies_await(g->wait, g->user, req);
}

dt_status dt__tp_reduce_scatter_sum(const dt_tp_group *g, const float *all, float *mine, int64_t n_each)
{
    if (!g->ireduce_scatter_sum || !dt__copies_inside())
        return g->reduce_scatter_sum(g->user, all, mine, n_each);
    void *req = NULL;
    DT_CHECK(g->ireduce_scatter_sum(g->user, all, mine, n_each, &req));
    return dt__copies_await(g->wait, g->user, req);
}
