/* dt__plan_measure_sharing: how a host's ranks slow each other beyond
 * taking turns on its cores (dt_plan_model's contention and sync_s).
 *
 * One block (the profile's costliest) is instantiated once per copy, each
 * copy on a thread of its own with one compute thread (inline kernels), as
 * a rank of one thread would run it.  Three timed phases, each started
 * together at a barrier:
 *
 *   alone      one copy, `reps` forward + backward passes: c1, the CPU
 *              time of its thread per pass;
 *   together   every copy the same passes at once: cn, the mean CPU time
 *              per pass, and contention = cn / c1.  CPU time, not wall
 *              time: taking turns on the cores (the cost model's part) and
 *              other processes' load do not count, the caches and memory
 *              bandwidth the copies share do (a pass's stalls);
 *   sync       per group size g = 2, 4, ... <= copies (g dividing copies),
 *              every copy `rounds` forwards of one sample (pieces as short
 *              as a tensor-parallel rank's between two collectives), without and with a barrier
 *              among its group after each, five times in turn: sync_s =
 *              the difference of their quickest wall times per round,
 *              scaled by the load of other processes left in them (the
 *              rounds' wall time over their CPU time, against copies /
 *              cores x contention).
 *
 * The barrier waits as the communicator waits on shared memory
 * (dt__spin_until, giving the core away when the copies outnumber the
 * cores), so it costs what a collective's wait for its slowest member
 * costs there; its deadline is a minute.  More than 16 copies (ranks x
 * threads) are not measured (their blocks all in memory at once): the
 * planner then takes contention 1 and no barrier cost. */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/spin.h"
#include "base/status.h"
#include "parallel/plan/internal.h"

enum { REPS = 5, ROUNDS = 64, TURNS = 5, MAX_COPIES = 16 };
#define DEADLINE_NS (60 * 1000000000LL)

/* A sense-reversing barrier among `n` threads. */
typedef struct {
    atomic_int count, sense;
    int n;
    bool yields;
} barrier;

typedef struct {
    barrier *b;
    int sense;
} barrier_wait;

static bool flipped(void *arg)
{
    barrier_wait *w = arg;
    return atomic_load_explicit(&w->b->sense, memory_order_acquire) == w->sense;
}

/* false past the deadline */
static bool barrier_pass(barrier *b, int *local_sense)
{
    *local_sense = !*local_sense;
    if (atomic_fetch_add_explicit(&b->count, 1, memory_order_acq_rel) == b->n - 1) {
        atomic_store_explicit(&b->count, 0, memory_order_relaxed);
        atomic_store_explicit(&b->sense, *local_sense, memory_order_release);
        return true;
    }
    barrier_wait w = {b, *local_sense};
    return dt__spin_until(flipped, &w, DEADLINE_NS, b->yields, 1);
}

/* One copy: its block, input and output gradient; what a phase asks of it. */
typedef struct {
    dt_model *model;
    dt_arena *arena;
    dt_tensor in, in1; /* the input, and its first sample alone (the sync phase's pieces) */
    float *x, *dy;
    int64_t ny;
    int block;
    /* the phase */
    barrier *start, *group; /* group: NULL without a barrier between passes */
    int passes;
    bool backward;
    int sense_start, sense_group;
    double seconds; /* the copy's wall time from the start to its last pass */
    double cpu[REPS]; /* its thread's CPU time per pass (the first REPS passes) */
    dt_status s;
} copy;

/* A forward and backward of the whole input, or (backward false) a forward of its first sample. */
static dt_status pass(copy *c, bool backward)
{
    dt_arena_reset(c->arena);
    dt_ctx ctx = {.arena = c->arena, .key = {1, 1, 0, 0}, .training = true};
    dt_tensor y, dx;
    DT_CHECK(dt_model_forward(c->model, &ctx, backward ? &c->in : &c->in1, &y));
    if (!backward)
        return DT_OK;
    if (!c->dy) {
        c->ny = dt_tensor_numel(&y);
        if (!(c->dy = calloc((size_t)c->ny, sizeof *c->dy)))
            return dt__fail(DT_ERR_NOMEM, "out of memory");
        for (int64_t i = 0; i < c->ny; i++)
            c->dy[i] = (float)((i % 7) - 3) * 0.01f;
    }
    dt_tensor g = dt_tensor_view(c->dy, y.ndim, y.shape);
    dt_status s = c->block == 0 ? dt_model_backward(c->model, &ctx, &g) : dt_model_backward_dx(c->model, &ctx, &g, &dx);
    dt_params_zero_grads(dt_model_params(c->model));
    return s;
}

static void *run_copy(void *arg)
{
    copy *c = arg;
    c->s = DT_OK;
    if (!barrier_pass(c->start, &c->sense_start)) {
        c->s = dt__fail(DT_ERR_TIMEOUT, "plan sharing probe: the start barrier timed out");
        return NULL;
    }
    int64_t t0 = dt__now_ns();
    for (int i = 0; i < c->passes && c->s == DT_OK; i++) {
        struct timespec a, b;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
        c->s = pass(c, c->backward);
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
        if (i < REPS)
            c->cpu[i] = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
        if (c->s == DT_OK && c->group && !barrier_pass(c->group, &c->sense_group))
            c->s = dt__fail(DT_ERR_TIMEOUT, "plan sharing probe: a group barrier timed out");
    }
    c->seconds = (double)(dt__now_ns() - t0) * 1e-9;
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Run the first n copies at once (the caller's thread runs copy 0): the mean of their wall times per pass, and
 * (cpu not NULL) the mean over the copies of their median CPU time per pass. */
static dt_status phase(copy *cs, int n, int passes, bool backward, barrier *groups, int g, bool yields,
                       double *per_pass, double *cpu)
{
    barrier start = {0};
    start.n = n;
    start.yields = yields;
    pthread_t th[MAX_COPIES];
    int started = 0;
    for (int i = 0; i < n / (g ? g : 1) && g; i++)
        groups[i] = (barrier){.n = g, .yields = yields};
    for (int i = 0; i < n; i++) {
        cs[i].start = &start;
        cs[i].group = g ? &groups[i / g] : NULL;
        cs[i].passes = passes;
        cs[i].backward = backward;
        cs[i].sense_start = cs[i].sense_group = 0;
    }
    dt_status s = DT_OK;
    for (int i = 1; i < n && s == DT_OK; i++)
        if (pthread_create(&th[i], NULL, run_copy, &cs[i]) == 0)
            started = i;
        else
            s = dt__fail(DT_ERR_SYSTEM, "plan sharing probe: cannot start thread %d", i);
    if (s != DT_OK) { /* the started ones wait at the start barrier: let them through, with nothing to do */
        for (int i = 1; i <= started; i++)
            cs[i].passes = 0;
        start.n = started + 1;
    }
    run_copy(&cs[0]);
    double sum = 0, sum_cpu = 0;
    for (int i = 1; i <= started; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < n && s == DT_OK; i++) {
        s = cs[i].s;
        sum += cs[i].seconds;
        if (cpu)
            sum_cpu += median(cs[i].cpu, passes < REPS ? passes : REPS);
    }
    *per_pass = s == DT_OK ? sum / n / passes : 0;
    if (cpu)
        *cpu = s == DT_OK ? sum_cpu / n : 0;
    return s;
}

dt_status dt__plan_measure_sharing(const dt_model_desc *d, int block, int in_ndim, const int64_t *in_shape, int64_t ids,
                                   int ranks, int cores, dt_plan_model *out)
{
    int threads = dt_get_threads(), copies = ranks * threads;
    if (ranks < 2 || copies > MAX_COPIES) /* beyond: as many block copies in memory at once; not measured */
        return DT_OK;
    if (cores < 1)
        cores = 1;
    copy *cs = calloc((size_t)copies, sizeof *cs);
    barrier *groups = calloc((size_t)copies, sizeof *groups);
    int64_t count = 1;
    for (int i = 0; i < in_ndim; i++)
        count *= in_shape[i];
    dt_status s = cs && groups ? dt_set_threads(1) : dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; s == DT_OK && i < copies; i++) {
        copy *c = &cs[i];
        c->block = block;
        if ((s = dt_model_instantiate(d, block, block + 1, &c->model)) != DT_OK ||
            (s = dt_arena_create(&c->arena)) != DT_OK)
            break;
        dt_model_init(c->model, 1);
        if (!(c->x = malloc((size_t)count * sizeof *c->x))) {
            s = dt__fail(DT_ERR_NOMEM, "out of memory");
            break;
        }
        for (int64_t k = 0; k < count; k++) /* token ids for block 0 of a GPT, small floats otherwise */
            c->x[k] = ids > 0 ? (float)(k % ids) : (float)((k % 11) - 5) * 0.1f;
        c->in = dt_tensor_view(c->x, in_ndim, in_shape);
        int64_t one[DT_MAX_DIMS];
        memcpy(one, in_shape, (size_t)in_ndim * sizeof *one);
        one[0] = 1;
        c->in1 = dt_tensor_view(c->x, in_ndim, one);
        s = pass(c, true); /* warm-up: the first pass allocates */
    }
    bool yields = copies > cores;
    double wall, alone = 0, together = 0;
    if (s == DT_OK)
        s = phase(cs, 1, REPS, true, groups, 0, yields, &wall, &alone);
    if (s == DT_OK)
        s = phase(cs, copies, REPS, true, groups, 0, yields, &wall, &together);
    if (s == DT_OK) {
        out->shared_ranks = ranks;
        /* below 1: noise (sharing does not speed a pass up) */
        out->contention = alone > 0 && together > alone ? together / alone : 1;
        memset(out->sync_s, 0, sizeof out->sync_s);
    }
    /* the share of a core each copy would get with the machine to itself */
    double quiet = out->contention * ((double)copies / cores > 1 ? (double)copies / cores : 1);
    for (int k = 0, g = 2; s == DT_OK && g <= copies && k < 6; k++, g *= 2) {
        double free_best = INFINITY, synced_best = INFINITY, free_run = 0, synced = 0, cpu = 0, stretch = INFINITY;
        if (copies % g)
            continue;
        for (int i = 0; s == DT_OK && i < TURNS; i++) {
            if ((s = phase(cs, copies, ROUNDS, false, groups, 0, yields, &free_run, &cpu)) == DT_OK)
                s = phase(cs, copies, ROUNDS, false, groups, g, yields, &synced, NULL);
            free_best = fmin(free_best, free_run);
            synced_best = fmin(synced_best, synced);
            if (cpu > 0)
                stretch = fmin(stretch, free_run / cpu);
        }
        /* other processes' load only adds: the quickest turn of each is the nearest to the machine alone; what
         * load is left stretches the rounds and the barriers alike (a peer waits longer for its turn): the
         * difference scaled by `quiet` over the rounds' wall time per CPU time */
        double scale = isfinite(stretch) && stretch > quiet ? quiet / stretch : 1;
        if (s == DT_OK)
            out->sync_s[k] = fmax(synced_best - free_best, 0) * scale;
    }
    for (int i = 0; cs && i < copies; i++) {
        free(cs[i].x);
        free(cs[i].dy);
        dt_arena_destroy(cs[i].arena);
        dt_model_destroy(cs[i].model);
    }
    free(cs);
    free(groups);
    dt_set_threads(threads);
    return s != DT_OK ? dt__fail(s, "plan sharing probe (%d copies): %s", copies, dt_last_error()) : DT_OK;
}
