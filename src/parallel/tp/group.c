/* The tensor-parallel group (dt_tp_group, dtrain/nn.h) over a communicator:
 * the engine's layers name no communicator, and this adapter gives them
 * one's collectives, called with the arguments the layers used to pass
 * themselves, so results are those of the collectives underneath. */
#include <stddef.h>

#include "dtrain/comm.h"
#include "dtrain/parallel.h"

static dt_status allreduce_sum(void *user, float *buf, int64_t n)
{
    return dt_allreduce(buf, buf, (size_t)n, DT_F32, DT_SUM, user);
}

static dt_status allreduce_sum_f64(void *user, double *buf, int64_t n)
{
    return dt_allreduce(buf, buf, (size_t)n, DT_F64, DT_SUM, user);
}

static dt_status allreduce_max_f64(void *user, double *buf, int64_t n)
{
    return dt_allreduce(buf, buf, (size_t)n, DT_F64, DT_MAX, user);
}

static dt_status allgather(void *user, const float *mine, float *all, int64_t n_each)
{
    return dt_allgather(mine, all, (size_t)n_each, DT_F32, user);
}

static dt_status reduce_scatter_sum(void *user, const float *all, float *mine, int64_t n_each)
{
    return dt_reduce_scatter(all, mine, (size_t)n_each, DT_F32, DT_SUM, user);
}

/* The nonblocking forms: the communicator's queue runs the same
 * collectives on its progress thread (comm/nonblocking.c). */
static dt_status iallreduce_sum(void *user, float *buf, int64_t n, void **req)
{
    return dt_iallreduce(buf, buf, (size_t)n, DT_F32, DT_SUM, user, (dt_request **)req);
}

static dt_status iallgather(void *user, const float *mine, float *all, int64_t n_each, void **req)
{
    return dt_iallgather(mine, all, (size_t)n_each, DT_F32, user, (dt_request **)req);
}

static dt_status ireduce_scatter_sum(void *user, const float *all, float *mine, int64_t n_each, void **req)
{
    return dt_ireduce_scatter(all, mine, (size_t)n_each, DT_F32, DT_SUM, user, (dt_request **)req);
}

static dt_status wait(void *user, void *req)
{
    (void)user;
    return dt_wait(req, NULL);
}

dt_tp_group dt_tp_group_of_comm(dt_comm *c)
{
    if (!c)
        return (dt_tp_group){0};
    return (dt_tp_group){.rank = dt_comm_rank(c),
                         .size = dt_comm_size(c),
                         .user = c,
                         .allreduce_sum = allreduce_sum,
                         .allreduce_sum_f64 = allreduce_sum_f64,
                         .allreduce_max_f64 = allreduce_max_f64,
                         .allgather = allgather,
                         .reduce_scatter_sum = reduce_scatter_sum,
                         .iallreduce_sum = iallreduce_sum,
                         .iallgather = iallgather,
                         .ireduce_scatter_sum = ireduce_scatter_sum,
                         .wait = wait};
}
