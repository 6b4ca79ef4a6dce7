/* A small persistent thread pool (the process's one compute pool singleton).
 * Between jobs a worker keeps looking for the next one for DT_POOL_SPIN_US
 * (yielding its core between looks), then sleeps on a condition variable, so
 * an idle pool costs nothing, unlike spinning OpenMP workers fighting
 * OpenBLAS for the cores.  The short look matters for small models: an mlp
 * step runs ~20 parallel sections in 1.5 ms, and waking a sleeping worker
 * costs tens of microseconds each time.  The caller waits for the workers the
 * same way.  When the host's ranks times threads outnumber its cores nobody
 * spins: the core is someone else's. */
#include "tensor/threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <unistd.h>

#include "base/env.h"
#include "base/local_ranks.h"
#include "base/spin.h"
#include "base/status.h"
#include "dtrain/tensor.h"

#define MAX_THREADS 256

void openblas_set_num_threads(int); /* from OpenBLAS; no header declares it portably */

/* One job at a time: callers from several threads queue on `call`. */
static pthread_mutex_t call = PTHREAD_MUTEX_INITIALIZER;

/* A job is published by writing fn..chunk, then bumping `generation`
 * (release); a worker that sees the new generation (acquire) reads them. */
static struct {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t threads[MAX_THREADS];
    int nthreads; /* including the caller */
    int started;  /* workers running */
    _Atomic uint64_t generation;
    _Atomic int pending;  /* workers still running the current job */
    _Atomic bool parked;  /* dt__pool_park: stop spinning until the next job */
    int sleepers;         /* workers waiting on `work` (under mu) */
    uint64_t spawn_generation; /* the generation new workers start after (under mu) */
    _Atomic int64_t spin_ns; /* how long to look before sleeping */
    dt__range_fn fn;
    void *arg;
    int64_t n, chunk;
    bool configured;
} pool = {.mu = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

typedef struct {
    uint64_t seen;
} new_job;

static int64_t spin_ns(void) { return atomic_load_explicit(&pool.spin_ns, memory_order_relaxed); }

static bool job_arrived(void *arg)
{
    return atomic_load_explicit(&pool.generation, memory_order_acquire) != ((new_job *)arg)->seen;
}

/* What a spinning worker looks for: a job, or being told to sleep. */
static bool job_or_parked(void *arg)
{
    return job_arrived(arg) || atomic_load_explicit(&pool.parked, memory_order_relaxed);
}

void dt__pool_park(void) { atomic_store_explicit(&pool.parked, true, memory_order_relaxed); }

static bool workers_done(void *arg)
{
    (void)arg;
    return atomic_load_explicit(&pool.pending, memory_order_acquire) == 0;
}

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
    /* Started for the job being published: wait for the generation after
     * the one it was started at (mu is held from the start to the publication). */
    pthread_mutex_lock(&pool.mu);
    new_job wait = {pool.spawn_generation};
    pthread_mutex_unlock(&pool.mu);
    inside_pool = true;
    for (;;) {
        if (!dt__spin_until(job_or_parked, &wait, spin_ns(), false, 8) || !job_arrived(&wait)) {
            /* The caller bumps the generation, then looks at `sleepers`
             * under mu; a worker counts itself, then looks at the generation
             * under mu: one of them sees the other, so no wake-up is lost. */
            pthread_mutex_lock(&pool.mu);
            pool.sleepers++;
            while (!job_arrived(&wait))
                pthread_cond_wait(&pool.work, &pool.mu);
            pool.sleepers--;
            pthread_mutex_unlock(&pool.mu);
        }
        wait.seen = atomic_load_explicit(&pool.generation, memory_order_acquire);
        run_chunk(index);
        if (atomic_fetch_sub_explicit(&pool.pending, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&pool.mu);
            pthread_cond_signal(&pool.done);
            pthread_mutex_unlock(&pool.mu);
        }
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
    /* Spin only where this rank's threads have cores of their own. */
    int64_t spin_us = 0;
    int local = 1;
    if (dt__env_int("DT_POOL_SPIN_US", 0, 1000000, &spin_us) != DT_OK)
        spin_us = 0; /* dt_env_check names a malformed value */
    if (dt__local_ranks(&local, NULL) != DT_OK)
        local = 1;
    bool own_cores = dt_cpus_bound() ? n <= available_cores() : (int64_t)n * local <= available_cores();
    pthread_mutex_lock(&pool.mu);
    pool.nthreads = n;
    atomic_store_explicit(&pool.spin_ns, own_cores ? spin_us * 1000 : 0, memory_order_relaxed);
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
    pool.spawn_generation = atomic_load_explicit(&pool.generation, memory_order_relaxed);
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
    /* Every started worker runs its chunk index (empty beyond n). */
    atomic_store_explicit(&pool.pending, pool.started, memory_order_relaxed);
    atomic_store_explicit(&pool.parked, false, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool.generation, 1, memory_order_release);
    if (pool.sleepers > 0)
        pthread_cond_broadcast(&pool.work);
    pthread_mutex_unlock(&pool.mu);
    inside_pool = true;
    run_chunk(0);
    inside_pool = false;
    if (!dt__spin_until(workers_done, NULL, spin_ns(), false, 8)) {
        pthread_mutex_lock(&pool.mu);
        while (!workers_done(NULL))
            pthread_cond_wait(&pool.done, &pool.mu);
        pthread_mutex_unlock(&pool.mu);
    }
    pthread_mutex_unlock(&call);
}
