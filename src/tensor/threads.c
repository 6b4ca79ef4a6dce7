/* A small persistent thread pool (the process's one compute pool singleton).
 * Workers sleep on a condition variable between jobs, so an idle pool costs
 * nothing, unlike spinning OpenMP workers fighting OpenBLAS for the cores. */
#include "tensor/threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/env.h"
#include "base/local_ranks.h"
#include "base/status.h"
#include "dtrain/tensor.h"

#define MAX_THREADS 256

void openblas_set_num_threads(int); /* from OpenBLAS; no header declares it portably */

/* One job at a time: callers from several threads queue on `call`. */
static pthread_mutex_t call = PTHREAD_MUTEX_INITIALIZER;

static struct {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t threads[MAX_THREADS];
    int nthreads; /* including the caller */
    int started;  /* workers running */
    uint64_t generation;
    int pending;
    dt__range_fn fn;
    void *arg;
    int64_t n, chunk;
    bool configured;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

/* Set on pool workers and on the caller while it runs its own chunk: a
 * parallel_for from inside a chunk runs inline instead of waiting for a pool
 * that is busy with the outer one. */
static _Thread_local bool inside_pool;

bool dt__in_parallel(void) { return inside_pool; }

static void run_chunk(int index)
{
    int64_t begin = (int64_t)index * pool.chunk, end = begin + pool.chunk;
    if (end > pool.n)
        end = pool.n;
    if (begin < end)
        pool.fn(begin, end, pool.arg);
}

static void *worker(void *arg)
{
    int index = (int)(intptr_t)arg;
    uint64_t seen = 0;
    inside_pool = true;
    pthread_mutex_lock(&pool.mu);
    for (;;) {
        while (pool.generation == seen)
            pthread_cond_wait(&pool.work, &pool.mu);
        seen = pool.generation;
        pthread_mutex_unlock(&pool.mu);
        run_chunk(index);
        pthread_mutex_lock(&pool.mu);
        if (--pool.pending == 0)
            pthread_cond_signal(&pool.done);
    }
    return NULL;
}

static int available_cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return 1;
}

int dt_cores_available(void) { return available_cores(); }

int dt_local_ranks(void)
{
    int n = 1;
    return dt__local_ranks(&n, NULL) == DT_OK ? n : 1;
}

int dt_cpus_bound(void)
{
    /* The launcher (our parent) may use more CPUs than it gave us: then it
     * bound this process.  Not a container's cpuset, which both share. */
    cpu_set_t mine, parent;
    return sched_getaffinity(0, sizeof mine, &mine) == 0 && sched_getaffinity(getppid(), sizeof parent, &parent) == 0 &&
           CPU_COUNT(&mine) < CPU_COUNT(&parent);
}

dt_status dt_threads_default(int *n, const char **source)
{
    int64_t v = 0;
    int local = 1;
    if (dt__env_str("DT_THREADS")) {
        if (dt__env_int("DT_THREADS", 0, MAX_THREADS, &v) != DT_OK)
            return DT_ERR_INVALID;
        if (v > 0) {
            *n = (int)v;
            if (source)
                *source = "DT_THREADS";
            return DT_OK;
        }
    }
    if (dt__local_ranks(&local, NULL) != DT_OK)
        return DT_ERR_INVALID;
    /* A rank its launcher bound to some CPUs (dtrun --bind auto, mpirun,
     * srun) has its share already: its affinity.  Otherwise the ranks on this
     * host share its cores, as torchrun's OMP_NUM_THREADS default. */
    int cores = available_cores();
    bool bound = dt_cpus_bound();
    int share = bound ? cores : cores / local;
    *n = share < 1 ? 1 : share > MAX_THREADS ? MAX_THREADS : share;
    if (source)
        *source = bound ? "the cores this rank is bound to" : local > 1 ? "the cores / local ranks" : "the cores";
    return DT_OK;
}

dt_status dt_set_threads(int n)
{
    if (n < 0 || n > MAX_THREADS)
        return dt__fail(DT_ERR_INVALID, "thread count %d outside 0..%d", n, MAX_THREADS);
    if (n == 0)
        n = available_cores();
    pthread_mutex_lock(&pool.mu);
    pool.nthreads = n;
    pool.configured = true;
    pthread_mutex_unlock(&pool.mu);
    /* dt_sgemm splits large products across dtrain's own threads and calls
     * OpenBLAS once per part, so OpenBLAS itself stays single-threaded: two
     * pools would fight for the cores, and OpenBLAS's splits small products
     * (attention's per-head ones) poorly. */
    openblas_set_num_threads(1);
    return DT_OK;
}

static void configure_once(void)
{
    if (pool.configured)
        return;
    int n = 0;
    if (dt_threads_default(&n, NULL) != DT_OK)
        n = 0; /* a bad DT_THREADS: dt_env_check names it; here the cores */
    dt_set_threads(n);
}

int dt_get_threads(void)
{
    configure_once();
    return pool.nthreads;
}

void dt__parallel_for(int64_t n, int64_t grain, dt__range_fn fn, void *arg)
{
    configure_once();
    int threads = pool.nthreads;
    if (grain < 1)
        grain = 1;
    if (threads <= 1 || n <= grain || inside_pool) {
        if (n > 0)
            fn(0, n, arg);
        return;
    }
    int64_t chunks = (n + grain - 1) / grain;
    if (chunks > threads)
        chunks = threads;
    pthread_mutex_lock(&call);
    pthread_mutex_lock(&pool.mu);
    while (pool.started < (int)chunks - 1) {
        if (pthread_create(&pool.threads[pool.started], NULL, worker, (void *)(intptr_t)(pool.started + 1)) != 0)
            break;
        pthread_detach(pool.threads[pool.started]);
        pool.started++;
    }
    if (pool.started < (int)chunks - 1)
        chunks = pool.started + 1; /* could not start more workers: use fewer chunks */
    pool.fn = fn;
    pool.arg = arg;
    pool.n = n;
    pool.chunk = (n + chunks - 1) / chunks;
    /* Every started worker wakes and runs its chunk index (empty beyond n). */
    pool.pending = pool.started;
    pool.generation++;
    pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.mu);
    inside_pool = true;
    run_chunk(0);
    inside_pool = false;
    pthread_mutex_lock(&pool.mu);
    while (pool.pending > 0)
        pthread_cond_wait(&pool.done, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
    pthread_mutex_unlock(&call);
}
