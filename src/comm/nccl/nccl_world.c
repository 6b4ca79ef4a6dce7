/* The NCCL backend's life cycle: the world's NCCL communicator made from a
 * unique id that rank 0 publishes through dtrain's authenticated store (the
 * store the native backend rendezvouses through: DT_MASTER_ADDR/PORT,
 * DT_JOB_TOKEN), ncclCommSplit for dt_comm_split, ncclCommFinalize and
 * ncclCommDestroy at a communicator's destruction, ncclCommAbort for
 * dt_comm_abort.
 *
 * One GPU per rank: each rank takes device (DT_LOCAL_RANK modulo the visible
 * devices); NCCL refuses two ranks on one GPU, so more ranks on a host than
 * it has visible GPUs are refused at start-up (ranks sharing a GPU use the
 * native backend).  A world of one rank needs no store. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/log.h"
#include "base/status.h"
#include "base/trace.h"
#include "comm/nccl/nccl_internal.h"
#include "dtrain/store.h"

/* Every NCCL communicator non-blocking: its set-up and calls are polled up
 * to a deadline (nccl_internal.h). */
static ncclConfig_t nonblocking_config(void)
{
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    return cfg;
}

static void release(dt__nccl_comm *n)
{
    if (!n)
        return;
    cudaSetDevice(n->device);
    if (n->stream)
        cudaStreamDestroy(n->stream);
    if (n->done)
        cudaEventDestroy(n->done);
    if (n->ready)
        cudaEventDestroy(n->ready);
    cudaFree(n->flag);
    pthread_mutex_destroy(&n->self_mu);
    free(n);
}

/* c->impl: the stream, event and barrier flag of a communicator on `device`
 * (its NCCL communicator comes next). */
static dt_status make_impl(dt_comm *c, int device, const char *op)
{
    dt__nccl_comm *n = calloc(1, sizeof *n);
    if (!n)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&n->self_mu, NULL);
    n->device = device;
    dt_status s = dt__nccl_cuda_error(cudaSetDevice(device), op);
    if (s == DT_OK)
        s = dt__nccl_cuda_error(cudaStreamCreateWithFlags(&n->stream, cudaStreamNonBlocking), op);
    if (s == DT_OK)
        s = dt__nccl_cuda_error(cudaEventCreateWithFlags(&n->done, cudaEventDisableTiming), op);
    if (s == DT_OK)
        s = dt__nccl_cuda_error(cudaEventCreateWithFlags(&n->ready, cudaEventDisableTiming), op);
    if (s == DT_OK)
        s = dt__nccl_cuda_error(cudaMalloc((void **)&n->flag, sizeof *n->flag), op);
    if (s == DT_OK)
        s = dt__nccl_cuda_error(cudaMemset(n->flag, 0, sizeof *n->flag), op);
    if (s != DT_OK) {
        release(n);
        return s;
    }
    c->impl = n;
    return DT_OK;
}

/* The device of this rank, refusing a host without enough GPUs. */
static dt_status pick_device(const dt__launch_env *env, int *device)
{
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count == 0) {
        (void)cudaGetLastError();
        return dt__fail(DT_ERR_SYSTEM, "DT_BACKEND=nccl: no CUDA device is visible (cudaGetDeviceCount: %s): NCCL "
                                       "needs one GPU per rank (check nvidia-smi and CUDA_VISIBLE_DEVICES, or use "
                                       "DT_BACKEND=native)",
                        e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
    }
    if (env->local_size > count)
        return dt__fail(DT_ERR_INVALID, "DT_BACKEND=nccl: %d ranks on this host but %d visible GPU%s: NCCL needs "
                                        "one GPU per rank (run at most %d ranks per host, or DT_BACKEND=native for "
                                        "ranks sharing a GPU)",
                        env->local_size, count, count == 1 ? "" : "s", count);
    *device = env->local_rank % count;
    return DT_OK;
}

/* The world's unique id: made by rank 0, published in the store, read by
 * the others (waiting up to the start-up deadline). */
static dt_status share_id(dt_comm *c, const dt__launch_env *env, ncclUniqueId *id)
{
    if (env->rank == 0) {
        DT_CHECK(dt__nccl_error(ncclGetUniqueId(id), "ncclGetUniqueId", NULL));
        if (env->size == 1)
            return DT_OK;
    }
    dt__world *w = c->world;
    if (env->serve_store)
        DT_CHECK(dt_store_server_start("0.0.0.0", env->master_port, env->token, &w->server));
    dt_status s = dt_store_connect(env->master_host, env->master_port, env->token, env->timeout_s, &w->store);
    if (s != DT_OK && env->master_source)
        return dt__wrap(s, "the store at %s:%d (%s): ", env->master_host, env->master_port, env->master_source);
    DT_CHECK(s);
    /* A job restarted by dtrun rendezvouses again: its generation's key. */
    int64_t restart = 0;
    if (dt__env_str("DT_RESTART"))
        DT_CHECK(dt__env_int("DT_RESTART", 0, 1LL << 30, &restart));
    char key[64];
    snprintf(key, sizeof key, "w%lld/nccl/unique_id", (long long)restart);
    if (env->rank == 0)
        return dt__wrap(dt_store_set(w->store, key, id, sizeof *id), "DT_BACKEND=nccl: publishing the unique id: ");
    void *val = NULL;
    size_t len = 0;
    DT_CHECK(dt__wrap(dt_store_get(w->store, key, env->timeout_s, &val, &len),
                      "DT_BACKEND=nccl: rank %d waiting for rank 0's unique id: ", env->rank));
    if (len != sizeof *id) {
        free(val);
        return dt__fail(DT_ERR_PROTOCOL, "DT_BACKEND=nccl: the store's unique id has %zu bytes, expected %zu", len,
                        sizeof *id);
    }
    memcpy(id, val, sizeof *id);
    free(val);
    return DT_OK;
}

static dt_status world_init(dt_comm *c, const dt__launch_env *env)
{
    int device = 0;
    DT_CHECK(pick_device(env, &device));
    DT_CHECK(dt__nccl_cuda_error(cudaSetDevice(device), "DT_BACKEND=nccl: cudaSetDevice"));
    DT_CHECK(dt__trace_from_env(env->rank)); /* dtrun --timeline's variables, if any */
    ncclUniqueId id;
    DT_CHECK(share_id(c, env, &id));
    DT_CHECK(make_impl(c, device, "DT_BACKEND=nccl: setting up the world communicator"));
    dt__nccl_comm *n = dt__nccl_of(c);
    ncclConfig_t cfg = nonblocking_config();
    int64_t deadline = dt__deadline_after(env->timeout_s);
    ncclResult_t r = ncclCommInitRankConfig(&n->comm, env->size, id, env->rank, &cfg);
    dt_status s = n->comm ? dt__nccl_settle(c, r, "ncclCommInitRank", deadline)
                          : dt__nccl_error(r == ncclSuccess ? ncclInternalError : r, "ncclCommInitRank", c);
    if (s != DT_OK) {
        char why[DT__ERROR_LEN];
        dt__error_save(why);
        if (n->comm && !n->broken)
            ncclCommAbort(n->comm);
        release(n);
        c->impl = NULL;
        return dt__error_restore(s, why);
    }
    c->one_host = c->local_size == c->size;
    DT_INFO("DT_BACKEND=nccl: rank %d of %d on GPU %d (NCCL %d.%d.%d)", c->rank, c->size, device, NCCL_MAJOR,
            NCCL_MINOR, NCCL_PATCH);
    return DT_OK;
}

/* The world ranks of d's members, gathered over d itself.  The copies to
 * and from the host are synchronous ones outside the stream: the one back
 * runs after the gather was waited for (by its deadline), so it cannot
 * block on a stalled stream. */
static dt_status member_ranks(dt_comm *d, int world_rank)
{
    int *dev = NULL;
    const char *op = "split: gathering the members' ranks";
    dt__nccl_comm *n = dt__nccl_of(d);
    int64_t deadline = dt__deadline_after(d->timeout_s);
    dt_status s = dt__nccl_cuda_error(cudaMalloc((void **)&dev, (size_t)d->size * sizeof *dev), op);
    if (s == DT_OK)
        s = dt__nccl_cuda_error(cudaMemcpy(dev + d->rank, &world_rank, sizeof world_rank, cudaMemcpyHostToDevice),
                                op);
    if (s == DT_OK)
        s = dt__nccl_settle(d, ncclAllGather(dev + d->rank, dev, 1, ncclInt32, n->comm, n->stream), op, deadline);
    if (s == DT_OK)
        s = dt__nccl_finish(d, op, deadline);
    if (s == DT_OK)
        s = dt__nccl_cuda_error(cudaMemcpy(d->ranks, dev, (size_t)d->size * sizeof *dev, cudaMemcpyDeviceToHost),
                                op);
    cudaFree(dev);
    return s;
}

static dt_status split(dt_comm *c, int color, int key, dt_comm **out)
{
    dt__nccl_comm *pn = dt__nccl_of(c);
    DT_CHECK(dt__nccl_begin(c, "split"));
    uint64_t seq = c->split_seq++;
    dt_comm *d = calloc(1, sizeof *d);
    if (!d)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    d->world = c->world;
    d->backend = c->backend;
    d->timeout_s = c->timeout_s;
    d->algo = c->algo;
    d->segment_bytes = c->segment_bytes;
    d->direct_bytes = c->direct_bytes;
    d->small_bytes = c->small_bytes;
    d->ring_bytes = c->ring_bytes;
    dt_status s = make_impl(d, pn->device, "split");
    if (s != DT_OK) {
        free(d);
        return s;
    }
    dt__nccl_comm *n = dt__nccl_of(d);
    ncclConfig_t cfg = nonblocking_config();
    int64_t deadline = dt__deadline_after(c->timeout_s);
    ncclResult_t r = ncclCommSplit(pn->comm, color == DT_UNDEFINED ? NCCL_SPLIT_NOCOLOR : color, key, &n->comm, &cfg);
    /* Until the child exists, the parent carries the split's state. */
    s = n->comm ? dt__nccl_settle(d, r, "ncclCommSplit", deadline) : dt__nccl_settle(c, r, "ncclCommSplit", deadline);
    if (s == DT_OK && n->comm) /* and the parent, which the split ran on, before its next call */
        s = dt__nccl_settle(c, ncclSuccess, "ncclCommSplit", deadline);
    if (s == DT_OK && !n->comm) { /* DT_UNDEFINED: no communicator for this rank */
        release(n);
        free(d);
        return DT_OK;
    }
    if (s == DT_OK)
        s = dt__nccl_error(ncclCommCount(n->comm, &d->size), "ncclCommCount", c);
    if (s == DT_OK)
        s = dt__nccl_error(ncclCommUserRank(n->comm, &d->rank), "ncclCommUserRank", c);
    if (s == DT_OK) {
        d->ranks = malloc((size_t)d->size * sizeof *d->ranks);
        s = d->ranks ? member_ranks(d, c->ranks[c->rank]) : dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    if (s != DT_OK) {
        char why[DT__ERROR_LEN];
        dt__error_save(why);
        if (n->comm)
            ncclCommAbort(n->comm);
        release(n);
        free(d->ranks);
        free(d);
        return dt__wrap(dt__error_restore(s, why), "split: ");
    }
    /* Hosts are not known here: a child of a one-host communicator is one host. */
    d->one_host = c->one_host;
    d->local_rank = c->one_host ? d->rank : 0;
    d->local_size = c->one_host ? d->size : 1;
    d->id = dt__comm_child_id(c->id, seq, color);
    __atomic_add_fetch(&c->world->refs, 1, __ATOMIC_ACQ_REL);
    *out = d;
    return DT_OK;
}

/* An NCCL communicator over host's members (dt_comm_attach_device): the
 * unique id made by host's rank 0 and broadcast over host itself (no store:
 * the host communicator is up), one GPU per rank on each host. */
dt_status dt__nccl_comm_over(dt_comm *host, uint32_t id, dt_comm **out)
{
    const char *op = "attaching NCCL for device buffers";
    *out = NULL;
    dt__launch_env env = {.rank = host->rank, .size = host->size, .local_rank = host->local_rank,
                          .local_size = host->local_size};
    int device = 0;
    /* Every rank learns whether every rank found its GPU, so none is left
     * waiting in ncclCommInitRank for one that gave up. */
    dt_status s = pick_device(&env, &device);
    char why[DT__ERROR_LEN];
    dt__error_save(why);
    int32_t ok = s == DT_OK, all = 0;
    DT_CHECK(dt_allreduce(&ok, &all, 1, DT_I32, DT_MIN, host));
    if (s != DT_OK)
        return dt__error_restore(s, why);
    if (!all)
        return dt__fail(DT_ERR_INVALID, "%s: another rank found no GPU of its own (its own error says why)", op);
    DT_CHECK(dt__nccl_cuda_error(cudaSetDevice(device), op));
    ncclUniqueId uid;
    memset(&uid, 0, sizeof uid);
    int32_t made = 1;
    if (host->rank == 0 && (s = dt__nccl_error(ncclGetUniqueId(&uid), "ncclGetUniqueId", NULL)) != DT_OK)
        made = 0;
    dt__error_save(why);
    DT_CHECK(dt_broadcast(&made, 1, DT_I32, 0, host));
    if (!made)
        return host->rank == 0 ? dt__error_restore(s, why)
                               : dt__fail(DT_ERR_PEER, "%s: rank 0 could not make NCCL's unique id", op);
    DT_CHECK(dt_broadcast(&uid, sizeof uid, DT_U8, 0, host));
    dt_comm *d = calloc(1, sizeof *d);
    if (!d || !(d->ranks = malloc((size_t)host->size * sizeof *d->ranks))) {
        free(d);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    d->world = host->world;
    d->backend = &dt__nccl_backend;
    d->rank = host->rank;
    d->size = host->size;
    d->local_rank = host->local_rank;
    d->local_size = host->local_size;
    d->one_host = host->one_host;
    d->timeout_s = host->timeout_s;
    d->algo = host->algo;
    d->id = id;
    memcpy(d->ranks, host->ranks, (size_t)host->size * sizeof *d->ranks);
    s = make_impl(d, device, op);
    if (s == DT_OK) {
        dt__nccl_comm *n = dt__nccl_of(d);
        ncclConfig_t cfg = nonblocking_config();
        int64_t deadline = dt__deadline_after(host->timeout_s);
        ncclResult_t r = ncclCommInitRankConfig(&n->comm, host->size, uid, host->rank, &cfg);
        s = n->comm ? dt__nccl_settle(d, r, "ncclCommInitRank", deadline)
                    : dt__nccl_error(r == ncclSuccess ? ncclInternalError : r, "ncclCommInitRank", d);
        if (s != DT_OK) {
            dt__error_save(why);
            if (n->comm && !n->broken)
                ncclCommAbort(n->comm);
            release(n);
            d->impl = NULL;
            dt__error_restore(s, why);
        }
    }
    if (s != DT_OK) {
        free(d->ranks);
        free(d);
        return s;
    }
    __atomic_add_fetch(&host->world->refs, 1, __ATOMIC_ACQ_REL);
    DT_INFO("device buffers over NCCL: rank %d of %d on GPU %d (NCCL %d.%d.%d)", d->rank, d->size, device,
            NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    *out = d;
    return DT_OK;
}

static dt_status comm_free(dt_comm *c, bool world)
{
    dt__nccl_comm *n = dt__nccl_of(c);
    if (!n)
        return DT_OK;
    dt_status s = DT_OK;
    dt__nccl_self_free(c);
    if (!n->broken && n->comm) {
        const char *op = world ? "destroying the world communicator" : "destroying a communicator";
        int64_t deadline = dt__deadline_after(c->timeout_s);
        cudaSetDevice(n->device);
        /* The world: like the native one, every rank gets here before any leaves. */
        if (world)
            s = dt__nccl_barrier(c);
        /* Finalize flushes what was issued (polled: the communicator is
         * non-blocking); on a failure or the deadline, abort instead. */
        if (s == DT_OK)
            s = dt__nccl_settle(c, ncclCommFinalize(n->comm), op, deadline);
        if (s == DT_OK && n->comm) {
            ncclCommDestroy(n->comm);
            n->comm = NULL;
        }
    }
    if (n->comm) /* left by a failure above */
        ncclCommAbort(n->comm);
    release(n);
    c->impl = NULL;
    return s;
}

static dt_status nccl_abort(dt_comm *c, const char *reason)
{
    c->world->aborted = true;
    dt__fail(DT_ERR_ABORTED, "aborted: %s (DT_BACKEND=nccl: this rank's NCCL communicator was aborted; the other "
                             "ranks' calls on it fail by their deadline)",
             reason ? reason : "");
    return dt__nccl_break(c, DT_ERR_ABORTED);
}

const dt__backend dt__nccl_backend = {
    .name = "nccl",
    .barrier = dt__nccl_barrier,
    .broadcast = dt__nccl_broadcast,
    .reduce = dt__nccl_reduce,
    .allreduce = dt__nccl_allreduce,
    .reduce_scatter = dt__nccl_reduce_scatter,
    .allgather = dt__nccl_allgather,
    .gather = dt__nccl_gather,
    .scatter = dt__nccl_scatter,
    .alltoall = dt__nccl_alltoall,
    .allreduce_half = dt__nccl_allreduce_half,
    .isend = dt__nccl_isend,
    .irecv = dt__nccl_irecv,
    .wait = dt__nccl_wait,
    .test = dt__nccl_test,
    .cancel = dt__nccl_cancel,
    .waitany = dt__nccl_waitany,
    .world_init = world_init,
    .split = split,
    .comm_free = comm_free,
    .abort = nccl_abort,
};
