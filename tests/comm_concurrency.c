/* Communicators that make progress side by side, from several threads: the
 * runtime tensor and data parallelism need (issue 30).  Run under dtrun
 * with an even number of ranks (tests/cases/comm_concurrency.sh).
 *
 * The world is split the way a dp x tp mesh splits it: tensor-parallel
 * pairs {0,1}, {2,3}, ... and data-parallel groups {0,2,...}, {1,3,...}.
 *   - the main thread starts a large nonblocking allreduce on the dp group
 *     and waits for it;
 *   - a "tp" thread, once that is in flight, runs small allreduces on its
 *     tp pair, blocking, one after the other, until either rank of the pair
 *     has seen its large allreduce finish (at most K);
 *   - a "p2p" thread ping-pongs with its tp partner on a third
 *     communicator (a copy of the world), with the same stopping rule.
 * The first tp pair (dp rank 0) holds the large allreduce open: the other
 * members of each dp group join it only when told so, over a fourth
 * communicator, and the first pair tells them only after MIN_DURING small
 * allreduces and ping-pongs of its own have finished.  So the check does
 * not depend on timing: with one progress queue per world, as before, the
 * first small allreduce waits behind the large one, the word never comes
 * and the test fails (naming the wait) instead of passing by luck.  Every
 * result is checked exactly and the times are printed:
 *   rank R: 40 small allreduces on the tp pair in X ms ... (it took Y ms)
 *
 * usage: comm_concurrency [--mib N] [--small K] [--pings P]   (exit 0: every check held) */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain/dtrain.h"


/* Small operations that must finish while the large one is in flight. */
#define MIN_DURING 3

static int failures;
static atomic_bool large_started, large_done;

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

#define CALL(x)                                                                                       \
    do {                                                                                              \
        dt_status s_ = (x);                                                                           \
        if (s_ != DT_OK) {                                                                            \
            fprintf(stderr, "comm_concurrency: %s failed: %s\n", #x, dt_last_error());               \
            exit(1);                                                                                  \
        }                                                                                             \
    } while (0)

typedef struct {
    dt_comm *comm;
    int rank, count;
    atomic_int during; /* finished while the large allreduce was in flight */
    atomic_bool finished;
    double took_ms;
    int wrong;
} worker;

static void wait_for_large(void)
{
    while (!atomic_load(&large_started)) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

/* Small allreduces on the tp pair, one after the other, until either rank
 * of the pair has seen its large allreduce finish (element 0 carries that
 * flag; the rest is checked exactly) or w->count ran. */
static void *tp_loop(void *arg)
{
    worker *w = arg;
    wait_for_large();
    double t0 = now_ms();
    int me = dt_comm_rank(w->comm), ran = 0;
    for (int i = 0; i < w->count; i++) {
        float v[64], out[64];
        bool done = atomic_load(&large_done);
        v[0] = done ? 1.0f : 0.0f;
        for (int j = 1; j < 64; j++)
            v[j] = (float)(me * 1000 + i * 64 + j);
        CALL(dt_allreduce(v, out, 64, DT_F32, DT_SUM, w->comm));
        for (int j = 1; j < 64; j++)
            w->wrong += out[j] != (float)(1000 + 2 * (i * 64 + j));
        ran++;
        atomic_fetch_add(&w->during, !done);
        if (out[0] > 0)
            break;
    }
    w->count = ran;
    w->took_ms = now_ms() - t0;
    atomic_store(&w->finished, true);
    return NULL;
}

/* Ping-pong with the tp partner over point to point on its own communicator,
 * with the same stopping rule (the reply carries the pair's flag). */
static void *p2p_loop(void *arg)
{
    worker *w = arg;
    wait_for_large();
    double t0 = now_ms();
    int me = dt_comm_rank(w->comm), partner = me ^ 1, ran = 0;
    for (int i = 0; i < w->count; i++) {
        int32_t msg[16], got[16];
        bool done = atomic_load(&large_done);
        msg[0] = done;
        for (int j = 1; j < 16; j++)
            msg[j] = me * 100000 + i * 16 + j;
        size_t n = 0;
        if (me % 2 == 0) {
            CALL(dt_send(msg, 16, DT_I32, partner, 7, w->comm));
            CALL(dt_recv(got, 16, DT_I32, partner, 7, w->comm, &n));
        } else {
            CALL(dt_recv(got, 16, DT_I32, partner, 7, w->comm, &n));
            msg[0] = done || got[0];
            CALL(dt_send(msg, 16, DT_I32, partner, 7, w->comm));
        }
        w->wrong += n != 16;
        for (int j = 1; j < 16; j++)
            w->wrong += got[j] != partner * 100000 + i * 16 + j;
        ran++;
        atomic_fetch_add(&w->during, !done);
        if (got[0] || msg[0])
            break;
    }
    w->count = ran;
    w->took_ms = now_ms() - t0;
    atomic_store(&w->finished, true);
    return NULL;
}

#define EXPECT(cond, ...)                                                                             \
    do {                                                                                              \
        if (!(cond)) {                                                                                \
            fprintf(stderr, "rank %d: %s: ", rank, #cond);                                            \
            fprintf(stderr, __VA_ARGS__);                                                             \
            fprintf(stderr, "\n");                                                                    \
            failures++;                                                                               \
        }                                                                                             \
    } while (0)

/* Per-communicator options: inherited by splits, refused when bad, the
 * algorithm agreed by every rank. */
static void check_options(dt_comm *world, dt_comm *tp, int rank)
{
    EXPECT(dt_comm_timeout(tp) == dt_comm_timeout(world), "split did not inherit the timeout");
    EXPECT(dt_comm_set_timeout(tp, 0) == DT_ERR_INVALID, "timeout 0 accepted");
    EXPECT(strstr(dt_last_error(), "0 seconds"), "message '%s'", dt_last_error());
    EXPECT(dt_comm_set_algorithm(tp, "fastest") == DT_ERR_INVALID, "unknown algorithm accepted");
    EXPECT(strstr(dt_last_error(), "'fastest'"), "message '%s'", dt_last_error());
    CALL(dt_comm_set_timeout(tp, 123));
    CALL(dt_comm_set_algorithm(tp, "ring"));
    dt_comm *sub;
    CALL(dt_comm_split(tp, 0, 0, &sub));
    EXPECT(dt_comm_timeout(sub) == 123, "timeout %g, not the parent's 123", dt_comm_timeout(sub));
    EXPECT(!strcmp(dt_comm_algorithm(sub), "ring"), "algorithm %s, not the parent's ring", dt_comm_algorithm(sub));
    EXPECT(!strcmp(dt_comm_algorithm(world), "auto"), "the world's algorithm changed to %s", dt_comm_algorithm(world));
    float v[1000], out[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = (float)(i + rank % 2);
    CALL(dt_allreduce(v, out, 1000, DT_F32, DT_SUM, sub));
    for (int i = 0; i < 1000; i++)
        EXPECT(out[i] == (float)(2 * i + 1), "ring allreduce element %d is %g", i, out[i]);
    /* Different choices on the ranks: refused on every rank, the old one kept. */
    dt_status s = dt_comm_set_algorithm(sub, rank % 2 ? "rd" : "direct");
    EXPECT(s == DT_ERR_INVALID, "different algorithms accepted (%s)", dt_status_name(s));
    EXPECT(strstr(dt_last_error(), "different algorithms"), "message '%s'", dt_last_error());
    EXPECT(!strcmp(dt_comm_algorithm(sub), "ring"), "algorithm %s after the refusal", dt_comm_algorithm(sub));
    CALL(dt_allreduce(v, out, 1000, DT_F32, DT_SUM, sub)); /* still healthy */
    CALL(dt_comm_destroy(sub));
    CALL(dt_comm_set_algorithm(tp, "auto"));
}

int main(int argc, char **argv)
{
    size_t mib = 64;
    int small = 10000, pings = 10000;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mib") && i + 1 < argc)
            mib = (size_t)strtoul(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--small") && i + 1 < argc)
            small = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--pings") && i + 1 < argc)
            pings = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: comm_concurrency [--mib N] [--small K] [--pings P]\n");
            return 2;
        }
    }
    dt_comm *world, *tp, *dp, *pairs, *word;
    CALL(dt_comm_init_env(&world));
    int rank = dt_comm_rank(world), size = dt_comm_size(world);
    if (size < 4 || size % 2) {
        fprintf(stderr, "comm_concurrency: needs an even number of ranks, at least 4 (got %d)\n", size);
        return 2;
    }
    CALL(dt_comm_split(world, rank / 2, rank, &tp));
    CALL(dt_comm_split(world, rank % 2, rank, &dp));
    CALL(dt_comm_split(world, 0, rank, &pairs));
    CALL(dt_comm_split(world, 0, rank, &word));

    check_options(world, tp, rank);

    size_t count = mib * 1024 * 1024 / sizeof(float);
    float *big = malloc(count * sizeof *big);
    if (!big)
        return 1;
    int dpn = dt_comm_size(dp), dpr = dt_comm_rank(dp);
    for (size_t i = 0; i < count; i++)
        big[i] = (float)((i % 1024) + (size_t)dpr);

    worker tw = {.comm = tp, .rank = rank, .count = small};
    worker pw = {.comm = pairs, .rank = rank, .count = pings};
    pthread_t tt, pt;
    pthread_create(&tt, NULL, tp_loop, &tw);
    pthread_create(&pt, NULL, p2p_loop, &pw);

    CALL(dt_barrier(world));
    double t0 = now_ms();
    dt_request *req;
    bool holds_open = dpr == 0; /* the first tp pair: its large allreduce waits for the word */
    int32_t go = 1;
    if (!holds_open) /* the word comes from dp rank 0 of this dp group: world rank rank % 2 */
        CALL(dt_recv(&go, 1, DT_I32, rank % 2, 9, word, NULL));
    CALL(dt_iallreduce(big, big, count, DT_F32, DT_SUM, dp, &req));
    atomic_store(&large_started, true);
    if (holds_open) {
        double held_since = now_ms();
        /* The large allreduce cannot finish before the others join: wait for
         * MIN_DURING of each small operation (or the thread's end), at most
         * 60 s, then let the others in either way so the job ends. */
        bool gave_up = false;
        while (!(gave_up = now_ms() - held_since > 60000) &&
               !((atomic_load(&tw.during) >= MIN_DURING || atomic_load(&tw.finished)) &&
                 (atomic_load(&pw.during) >= MIN_DURING || atomic_load(&pw.finished)))) {
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        if (gave_up) {
            fprintf(stderr,
                    "rank %d: the small operations waited for the large one: after 60 s with it in flight, %d "
                    "small allreduces and %d ping-pongs had finished (%d of each expected)\n",
                    rank, atomic_load(&tw.during), atomic_load(&pw.during), MIN_DURING);
            failures++;
        }
        for (int r = rank + 2; r < size; r += 2)
            CALL(dt_send(&go, 1, DT_I32, r, 9, word));
    }
    CALL(dt_wait(req, NULL));
    atomic_store(&large_done, true);
    double large_ms = now_ms() - t0;
    pthread_join(tt, NULL);
    pthread_join(pt, NULL);

    /* dp members r hold (i % 1024) + r: the sum is dpn * (i % 1024) + dpn(dpn-1)/2. */
    size_t wrong_big = 0;
    for (size_t i = 0; i < count; i++)
        wrong_big += big[i] != (float)((size_t)dpn * (i % 1024) + (size_t)(dpn * (dpn - 1) / 2));
    if (wrong_big || tw.wrong || pw.wrong) {
        fprintf(stderr, "rank %d: wrong results: %zu of the large allreduce, %d small, %d ping-pong\n", rank,
                wrong_big, tw.wrong, pw.wrong);
        failures++;
    }
    /* The pair that held its large allreduce open must have run its small
     * operations meanwhile (the others joined later: theirs are reported). */
    if (holds_open && ((small && tw.during < MIN_DURING) || (pings && pw.during < MIN_DURING))) {
        fprintf(stderr,
                "rank %d: the small operations waited for the large one: %d small allreduces and %d ping-pongs "
                "finished while it was in flight (at least %d of each expected)\n",
                rank, atomic_load(&tw.during), atomic_load(&pw.during), MIN_DURING);
        failures++;
    }
    printf("rank %d: %d small allreduces on the tp pair in %.1f ms and %d ping-pongs in %.1f ms; %d and %d of them "
           "finished while the dp allreduce of %zu MiB was in flight (it took %.1f ms)\n",
           rank, tw.count, tw.took_ms, pw.count, pw.took_ms, tw.during, pw.during, mib, large_ms);
    fflush(stdout);
    int all = 0;
    CALL(dt_allreduce(&failures, &all, 1, DT_I32, DT_SUM, world));
    free(big);
    CALL(dt_comm_destroy(word));
    CALL(dt_comm_destroy(pairs));
    CALL(dt_comm_destroy(dp));
    CALL(dt_comm_destroy(tp));
    CALL(dt_comm_destroy(world));
    if (rank == 0)
        printf("comm_concurrency: %d ranks: %s\n", size, all ? "FAILED" : "ok");
    return all ? 1 : 0;
}
