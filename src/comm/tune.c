/* Start-up measurement of which small-message algorithms pay.
 *
 * Three choices depend on the links, none known in advance:
 *   - direct (one-shot) saves log2(n) - 1 message latencies and costs n - 1
 *     messages per rank instead of log2(n): a hop of 30 us or of 300 us
 *     against what a message costs the CPU;
 *   - halving-doubling puts 1.5x the buffer on each rank's link where
 *     recursive doubling puts 2x, and takes twice its steps: at 200 mbit the
 *     bytes cost more than the steps from 8 KiB, at 1000 mbit they do not;
 *   - alltoall's Bruck sends ceil(log2 n) messages per rank where all at
 *     once sends n-1, but in as many hops: where a message costs more CPU
 *     than a hop costs time it wins (4 hosts at 1000mbit, 256 B: 37 us
 *     against 50-53; 8 hosts: 128 against 219-229), where hops are slow it
 *     loses (100 us per hop: 400-430 against 222-290).
 * So the world communicator times the candidates once, on the real links,
 * before any user collective.  It also learns, from every rank's sockets,
 * whether bbr runs on some link (it stalls halving-doubling's exchanges of
 * 128-256 KiB).  The three algorithms combine the inputs in
 * the same order (docs/algorithms.md), so a verdict that differs from run to
 * run changes the speed, never the bits.  docs/algorithms.md has the
 * figures that motivate it. */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/log.h"
#include "base/status.h"
#include "comm/coll.h"
#include "dtrain/store.h"

enum { TUNE_PASSES = 2, TUNE_REPS = 16, TUNE_MAX_RANKS = 16, TUNE_MAX_DRAIN_CALLS = 64 };
#define TUNE_WIN 0.9             /* the challenger must be at least 10% faster */
#define TUNE_MAX_BYTES 16384     /* the largest size timed */
#define COUNT(a) (sizeof(a) / sizeof((a)[0]))
#define TUNE_DRAIN_BYTES 524288  /* what the untimed calls before the timing move, at least */

typedef dt_status (*allreduce_fn)(dt__coll *k, void *buf, size_t count, dt_dtype t, dt_redop op);

/* Alltoall in the timing's signature: `count` floats of pieces in buf, the
 * result after them. */
static dt_status alltoall_as(dt__coll *k, float *buf, size_t count, dt__alg alg)
{
    size_t piece = count * sizeof(float) / (size_t)k->c->size;
    return dt__alltoall_alg(k, buf, buf + count, piece, alg);
}

static dt_status bruck_alltoall(dt__coll *k, void *buf, size_t count, dt_dtype t, dt_redop op)
{
    (void)t, (void)op;
    return alltoall_as(k, buf, count, DT__ALG_RHD);
}

static dt_status at_once_alltoall(dt__coll *k, void *buf, size_t count, dt_dtype t, dt_redop op)
{
    (void)t, (void)op;
    return alltoall_as(k, buf, count, DT__ALG_RD);
}

static dt_status rhd_allreduce(dt__coll *k, void *buf, size_t count, dt_dtype t, dt_redop op)
{
    return dt__allreduce_alg(k, buf, buf, count, t, op, DT__ALG_RHD);
}

/* One call of fn on `count` floats. */
static dt_status one_call(dt_comm *c, allreduce_fn fn, float *buf, size_t count)
{
    dt__coll k;
    DT_CHECK(dt__coll_begin_reducing(&k, c, "start-up timing"));
    return fn(&k, buf, count, DT_F32, DT_SUM);
}

/* Mean duration of fn's calls on `count` floats in one block of back-to-back
 * calls, in seconds.
 *
 * A link shaper lets a burst through at full speed (tbf's bucket: 250 KB on
 * the 1000 mbit namespace cluster; a switch's buffer does the same): nine
 * calls of 16 KiB fit in it, and timed that way recursive doubling, which
 * puts the most bytes on the link, took 119 us where back-to-back calls take
 * 277.  So untimed calls first move at least TUNE_DRAIN_BYTES and the timed
 * ones follow back to back.  Each algorithm is timed in blocks of its own:
 * alternating them call by call made both slower than either runs in a loop
 * (8 bytes: 204 us against 58), as one rank's next call waits on a peer
 * still in the other algorithm's steps.  The block's mean, not its median
 * call: what a loop of calls gets (docs/algorithms.md has the start-ups that
 * led here). */
static dt_status block_time(dt_comm *c, allreduce_fn fn, float *buf, size_t count, double *mean)
{
    size_t drain = TUNE_DRAIN_BYTES / (count * sizeof(float));
    if (drain > TUNE_MAX_DRAIN_CALLS)
        drain = TUNE_MAX_DRAIN_CALLS;
    for (size_t i = 0; i < drain; i++)
        DT_CHECK(one_call(c, fn, buf, count));
    int64_t t0 = dt__now_ns();
    for (int rep = 0; rep < TUNE_REPS; rep++)
        DT_CHECK(one_call(c, fn, buf, count));
    *mean = (double)(dt__now_ns() - t0) / 1e9 / TUNE_REPS;
    return DT_OK;
}

/* Times the challenger and the incumbent at `bytes`; true when the
 * challenger wins on the slowest rank's figures (the same verdict on every
 * rank).  Each is timed in two blocks, in the order challenger, incumbent,
 * incumbent, challenger, and keeps its faster block: neither gains from
 * coming first or last, and a stall in one block does not decide.  A loss
 * is checked once more with a second pass of the four blocks, each keeping
 * its fastest of all: just after start-up the scheduler may leave a phase
 * of ranks sharing a core that outlasts one pass (on the 2-core namespace
 * cluster 3 of 4 ranks on one core for up to 160 ms, halving-doubling then
 * taking 160 us on 8 KiB instead of 106; docs/algorithms.md).  t[0]:
 * challenger, t[1]: incumbent. */
static dt_status challenger_wins(dt_comm *c, allreduce_fn challenger, allreduce_fn incumbent, float *buf,
                                 size_t bytes, bool *wins, double t[2])
{
    size_t count = bytes / sizeof(float);
    t[0] = t[1] = INFINITY;
    *wins = false;
    for (int pass = 0; pass < TUNE_PASSES && !*wins; pass++) {
        double mine[4]; /* challenger, incumbent, incumbent, challenger */
        DT_CHECK(block_time(c, challenger, buf, count, &mine[0]));
        DT_CHECK(block_time(c, incumbent, buf, count, &mine[1]));
        DT_CHECK(block_time(c, incumbent, buf, count, &mine[2]));
        DT_CHECK(block_time(c, challenger, buf, count, &mine[3]));
        dt__coll k;
        DT_CHECK(dt__coll_begin_reducing(&k, c, "allreduce (start-up timing)"));
        DT_CHECK(dt__rd_allreduce(&k, mine, 4, DT_F64, DT_MAX));
        t[0] = fmin(t[0], fmin(mine[0], mine[3]));
        t[1] = fmin(t[1], fmin(mine[1], mine[2]));
        *wins = t[0] < TUNE_WIN * t[1];
    }
    return DT_OK;
}

/* A ladder of timings: the challenger against the incumbent at sizes[0],
 * then at each next size while it keeps winning; *limit becomes limits[i]
 * for each size i it won at.  `bytes_per` turns a size into the bytes of a
 * call (alltoall's sizes are pieces, n to a call). */
typedef struct {
    const char *op, *unit;               /* "allreduce", " bytes" / "alltoall", "-byte pieces" */
    const char *challenger, *incumbent;  /* names in the log */
} ladder_names;

static dt_status climb(dt_comm *twin, allreduce_fn challenger, allreduce_fn incumbent, float *buf,
                       const size_t *sizes, const size_t *limits, size_t steps, size_t bytes_per,
                       const ladder_names *names, size_t *limit)
{
    for (size_t i = 0; i < steps; i++) {
        bool wins;
        double t[2];
        DT_CHECK(challenger_wins(twin, challenger, incumbent, buf, sizes[i] * bytes_per, &wins, t));
        DT_INFO("%s of %zu%s across %d ranks: %s %.0f us, %s %.0f us", names->op, sizes[i], names->unit, twin->size,
                names->challenger, t[0] * 1e6, names->incumbent, t[1] * 1e6);
        if (!wins)
            break;
        *limit = limits[i];
    }
    return DT_OK;
}

/* Direct up to 1 KiB when it wins at 8 bytes, up to 4 KiB when it also wins
 * there. */
static dt_status tune_direct(dt_comm *twin, dt_comm *c, float *buf)
{
    static const size_t sizes[] = {8, 4096}, limits[] = {1024, 4096};
    static const ladder_names names = {"allreduce", " bytes", "direct", "recursive doubling"};
    DT_CHECK(climb(twin, dt__direct_allreduce, dt__rd_allreduce, buf, sizes, limits, COUNT(sizes), 1, &names,
                   &c->direct_tuned));
    DT_INFO("allreduce: direct algorithm up to %zu bytes", c->direct_tuned);
    return DT_OK;
}

/* Across hosts recursive doubling runs up to 16 KiB by default; down to 8
 * KiB when halving-doubling wins at 16, and halving each time
 * halving-doubling also wins at the next size down, to 512 bytes when it
 * wins at 1 KiB (4 hosts at 200 mbit: 2 KiB 143 us against 183, 1 KiB 80
 * against 91, 512 bytes 74-77 against 51-55; at 1000 mbit it loses from 4
 * KiB down, 89-94 against 70-75).  Only where halving-doubling
 * is what runs above (the ring's bits differ). */
static dt_status tune_doubling(dt_comm *twin, dt_comm *c, float *buf)
{
    if (c->one_host || c->small_bytes != SIZE_MAX || c->ring_bytes != SIZE_MAX ||
        dt__coll_small_bytes(c) != TUNE_MAX_BYTES)
        return DT_OK;
    static const size_t sizes[] = {16384, 8192, 4096, 2048, 1024}, limits[] = {8192, 4096, 2048, 1024, 512};
    static const ladder_names names = {"allreduce", " bytes", "halving-doubling", "recursive doubling"};
    DT_CHECK(climb(twin, rhd_allreduce, dt__rd_allreduce, buf, sizes, limits, COUNT(sizes), 1, &names,
                   &c->small_tuned));
    DT_INFO("allreduce: recursive doubling up to %zu bytes", dt__coll_allreduce_small_bytes(c));
    return DT_OK;
}

/* Every rank learns whether any rank's TCP connections run bbr (each
 * rank's own sockets may differ: each host has its own default). */
static dt_status agree_tcp_probes_rtt(dt_comm *twin, dt_comm *c)
{
    dt__world *w = c->world;
    w->tcp_probes_rtt = false;
    if (c->one_host || c->size < 2)
        return DT_OK;
    int32_t any = dt__engine_tcp_probes_rtt(w->eng) ? 1 : 0;
    dt__coll k;
    DT_CHECK(dt__coll_begin_reducing(&k, twin, "allreduce (start-up: TCP congestion control)"));
    DT_CHECK(dt__rd_allreduce(&k, &any, 1, DT_I32, DT_MAX));
    w->tcp_probes_rtt = any != 0;
    if (w->tcp_probes_rtt)
        DT_INFO("TCP peer connections run bbr: up to 4 ranks, allreduce and reduce_scatter take the ring above "
                "64 KiB");
    return DT_OK;
}

/* Across hosts Bruck's alltoall for pieces of up to 64 bytes when it wins
 * there, up to 128 when it also wins at 128.  Larger pieces would pay at
 * 1000mbit (4 hosts to 512 B, 8 hosts to 2 KiB: 207 us against 311) but not
 * at 200mbit (4 hosts, 256 B: 50-63 us against 50-55), and timed here they
 * look cheaper than they are: their few untimed calls leave the shaper's
 * bucket full, so Bruck's extra bytes go free (256 B: 40 us against 55-59,
 * timed at start-up, at 200mbit). */
static dt_status tune_bruck(dt_comm *twin, dt_comm *c, float *buf)
{
    if (c->one_host)
        return DT_OK;
    enum { LARGEST_PIECE = 128 };
    _Static_assert(2 * LARGEST_PIECE * TUNE_MAX_RANKS <= TUNE_MAX_BYTES,
                   "a timed alltoall's pieces and its result fit the timing buffer");
    static const size_t pieces[] = {64, LARGEST_PIECE};
    static const ladder_names names = {"alltoall", "-byte pieces", "Bruck", "all at once"};
    DT_CHECK(climb(twin, bruck_alltoall, at_once_alltoall, buf, pieces, pieces, COUNT(pieces), (size_t)c->size,
                   &names, &c->bruck_piece));
    DT_INFO("alltoall: Bruck's exchange up to %zu-byte pieces", c->bruck_piece);
    return DT_OK;
}

/* A job restarted by dtrun (DT_RESTART > 0) has the same ranks on the same
 * links as its first generation: it takes that generation's verdicts from
 * the store (dtrun's, which outlives the ranks) instead of timing again,
 * which took 0.5 to 3.4 s of a restart on a loaded 2-core host (bench/
 * RESULTS.md, "In-memory checkpoints").  Keyed by the world's shape; rank
 * 0 reads the key and every rank takes its values (an allreduce of MAX over
 * rank 0's values and the others' zeros), so all agree.  A verdict changes
 * the speed, never the bits (above). */
static void cache_key(const dt_comm *c, char *key, size_t len)
{
    snprintf(key, len, "dtrain/tune/v1/%d/%d/%d/%d", c->size, c->local_size, (int)c->one_host,
             c->direct_bytes == SIZE_MAX);
}

static dt_status cached_verdicts(dt_comm *twin, dt_comm *c, bool *found)
{
    *found = false;
    int64_t restart = 0;
    if (!c->world->store || !dt__env_str("DT_RESTART") ||
        dt__env_int("DT_RESTART", 0, 1LL << 30, &restart) != DT_OK || restart <= 0)
        return DT_OK;
    int64_t v[4] = {0, 0, 0, 0}; /* found, direct, small, bruck */
    if (c->rank == 0) {
        char key[96];
        void *val = NULL;
        size_t n = 0;
        unsigned long long d, s, b;
        cache_key(c, key, sizeof key);
        if (dt_store_get(c->world->store, key, 0, &val, &n) == DT_OK && n > 0 && ((char *)val)[n - 1] == '\0' &&
            sscanf(val, "%llu %llu %llu", &d, &s, &b) == 3 && d <= TUNE_MAX_BYTES && s <= TUNE_MAX_BYTES &&
            b <= TUNE_MAX_BYTES) {
            v[0] = 1, v[1] = (int64_t)d, v[2] = (int64_t)s, v[3] = (int64_t)b;
        }
        free(val);
    }
    dt__coll k;
    DT_CHECK(dt__coll_begin_reducing(&k, twin, "allreduce (start-up: the first generation's verdicts)"));
    DT_CHECK(dt__rd_allreduce(&k, v, 4, DT_I64, DT_MAX));
    if (!v[0])
        return DT_OK;
    c->direct_tuned = (size_t)v[1];
    c->small_tuned = (size_t)v[2];
    c->bruck_piece = (size_t)v[3];
    *found = true;
    DT_INFO("restart: the small-message verdicts of the first generation (direct %zu, recursive doubling %zu, "
            "Bruck %zu bytes), not timed again", c->direct_tuned, c->small_tuned, c->bruck_piece);
    return DT_OK;
}

static void save_verdicts(const dt_comm *c)
{
    if (c->rank != 0 || !c->world->store)
        return;
    char key[96], val[96];
    cache_key(c, key, sizeof key);
    snprintf(val, sizeof val, "%zu %zu %zu", c->direct_tuned, c->small_tuned, c->bruck_piece);
    dt_store_set(c->world->store, key, val, strlen(val) + 1); /* (best effort: a restart then times again) */
}

dt_status dt__tune_collectives(dt_comm *c)
{
    c->direct_tuned = 0;
    c->small_tuned = 0;
    c->bruck_piece = 0;
    dt_comm twin;
    dt__comm_twin(c, DT__TUNE_COMM_ID, &twin);
    dt_status s = agree_tcp_probes_rtt(&twin, c);
    /* With the arena, allreduce never sends messages. */
    if (s != DT_OK || c->size < 3 || c->size > TUNE_MAX_RANKS || c->algo != DT_ALGO_AUTO || c->arena) {
        dt__comm_twin_done(&twin);
        return s;
    }
    bool cached = false;
    s = cached_verdicts(&twin, c, &cached);
    if (s != DT_OK || cached) {
        dt__comm_twin_done(&twin);
        return s;
    }
    float *buf = calloc(TUNE_MAX_BYTES / sizeof(float), sizeof(float));
    s = buf ? DT_OK : dt__fail(DT_ERR_NOMEM, "out of memory");
    if (s == DT_OK && c->direct_bytes == SIZE_MAX)
        s = tune_direct(&twin, c, buf);
    if (s == DT_OK)
        s = tune_doubling(&twin, c, buf);
    if (s == DT_OK)
        s = tune_bruck(&twin, c, buf);
    dt__comm_twin_done(&twin);
    free(buf);
    if (s == DT_OK)
        save_verdicts(c);
    return s;
}
