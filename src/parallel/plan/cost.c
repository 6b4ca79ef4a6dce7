/* One layout's predicted step time and memory (dt_plan_layout).  Each part's
 * formula is in docs/planner.md; the code follows it part by part. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "parallel/pipe/partition.h"
#include "parallel/plan/internal.h"
#include "parallel/run/memory_plan.h"

#define MIB 1048576.0

dt_status dt__plan_inputs_check(const dt_plan_inputs *in)
{
    const dt_plan_model *m = in ? &in->model : NULL;
    if (!in)
        return dt__fail(DT_ERR_INVALID, "plan: the inputs are NULL");
    if (m->nblocks < 1 || !m->blocks)
        return dt__fail(DT_ERR_INVALID, "plan: the model has %d blocks", m->nblocks);
    if (in->world < 1)
        return dt__fail(DT_ERR_INVALID, "plan: world %d (at least 1 rank)", in->world);
    if (in->global_batch < 0 || (in->global_batch == 0 && in->batch_size < 1))
        return dt__fail(DT_ERR_INVALID, "plan: batch_size %lld and global_batch %lld (one of them at least 1)",
                        (long long)in->batch_size, (long long)in->global_batch);
    if (!(in->links.intra.bandwidth_Bps > 0) || !(in->links.inter.bandwidth_Bps > 0) || in->links.ranks_per_node < 1)
        return dt__fail(DT_ERR_INVALID, "plan: links need bandwidths > 0 and ranks_per_node >= 1 (intra %g B/s, inter "
                        "%g B/s, %d ranks per node)", in->links.intra.bandwidth_Bps, in->links.inter.bandwidth_Bps,
                        in->links.ranks_per_node);
    for (int i = 0; i < m->nblocks; i++) {
        const dt_plan_block *b = &m->blocks[i];
        if (b->params < 0 || b->fwd_s < 0 || b->bwd_s < 0 || b->act_bytes < 0 || b->out_bytes < 0 || b->tp_bytes < 0 ||
            b->tp_collectives < 0 || b->fwd_fixed_s < 0 || b->bwd_fixed_s < 0)
            return dt__fail(DT_ERR_INVALID, "plan: block %d (%s) has a negative figure", i, b->kind);
    }
    return DT_OK;
}

dt_status dt__plan_ctx_init(dt__plan_ctx *c, const dt_plan_inputs *in)
{
    *c = (dt__plan_ctx){in, NULL, false};
    DT_CHECK(dt__plan_inputs_check(in));
    c->bounds = calloc((size_t)in->model.nblocks + 1, sizeof *c->bounds);
    if (!c->bounds)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < in->model.nblocks; i++)
        c->has_gpt_block |= !strcmp(in->model.blocks[i].kind, "gpt-block");
    return DT_OK;
}

void dt__plan_ctx_free(dt__plan_ctx *c)
{
    if (c->bounds)
        for (int i = 0; i <= c->in->model.nblocks; i++)
            free(c->bounds[i]);
    free(c->bounds);
    c->bounds = NULL;
}

/* The cut into `parts` stages, as dt_pipeline_partition makes it: its cost
 * hint is the forward FLOPs, else the parameters. */
static dt_status cut(dt__plan_ctx *c, int parts, const int **out)
{
    const dt_plan_model *m = &c->in->model;
    if (!c->bounds[parts]) {
        double *cost = malloc((size_t)m->nblocks * sizeof *cost);
        int *b = malloc((size_t)(parts + 1) * sizeof *b);
        if (!cost || !b) {
            free(cost);
            free(b);
            return dt__fail(DT_ERR_NOMEM, "out of memory");
        }
        for (int i = 0; i < m->nblocks; i++)
            cost[i] = m->blocks[i].flops > 0 ? m->blocks[i].flops : (double)m->blocks[i].params;
        dt_status s = dt__partition_costs(cost, m->nblocks, parts, b);
        free(cost);
        if (s != DT_OK) {
            free(b);
            return s;
        }
        c->bounds[parts] = b;
    }
    *out = c->bounds[parts];
    return DT_OK;
}

/* One pipeline rank's share of the model: per sample, tp applied. */
typedef struct {
    double fwd, bwd, recompute;  /* seconds per sample */
    double tp_fwd;               /* seconds of tp collectives per micro-batch, forward (backward the same) */
    double tp_recompute;         /* the recomputed blocks' forward collectives, per micro-batch */
    double params, shard, unit;  /* elements: held, the ZeRO shard, the largest block padded to dp */
    double act, kept, act_max;   /* bytes per sample: every block's activations; with recompute, what is kept;
                                    the largest recomputed block's (rebuilt during its backward) */
    double rs_sum, rs_first, ag_sum, ag_first; /* ZeRO: seconds of every unit's reduce-scatter / allgather */
} rank_share;

static bool recomputed(const dt__plan_ctx *c, const dt_layout *l, const dt_plan_block *b)
{
    if (l->recompute == DT_RECOMPUTE_ALL)
        return true;
    return l->recompute == DT_RECOMPUTE_BLOCKS && (!c->has_gpt_block || !strcmp(b->kind, "gpt-block"));
}

/* Multi-copy tensor parallelism (tp_copies c): a block's micro-batch runs as
 * c copies of its rows taking turns, each copy's exchanges travelling while
 * the next copy computes.  The copies before the last take 2 shares of the
 * rows, the last 1 (nn/copies_rows.c), each exchange its own latency; what
 * stays exposed is at least the last copy's exchanges, and otherwise what
 * the other copies' compute, (2c-2)/(2c-1) of the block's, cannot cover.
 * compute_s: the block's forward over the micro-batch (its backward,
 * longer, is covered at least as well: the forward bounds both). */
static double copies_exposed_s(dt__plan_group tpg, const dt_plan_block *b, double mb, int c, double compute_s)
{
    double share = 1.0 / (2 * c - 1);
    double last = b->tp_collectives * dt__plan_allreduce_s(tpg, b->tp_bytes * mb * share);
    double other = b->tp_collectives * dt__plan_allreduce_s(tpg, b->tp_bytes * mb * 2 * share);
    return fmax(last, (c - 1) * other + last - compute_s * (1 - share));
}

static void share_of(const dt__plan_ctx *c, const dt_layout *l, const int *bounds, int r, int dp, double mb,
                     rank_share *s)
{
    const dt_plan_model *m = &c->in->model;
    int p = l->pp, t = l->tp, v = dt_layout_chunks(l);
    dt__plan_group tpg = {&c->in->links, t, 1}, dpg = {&c->in->links, dp, t * p};
    *s = (rank_share){0};
    for (int ch = 0; ch < v; ch++)
        for (int i = bounds[ch * p + r]; i < bounds[ch * p + r + 1]; i++) {
            const dt_plan_block *b = &m->blocks[i];
            bool split = b->tp_splittable && t > 1;
            double d = split ? t : 1, params = ceil((double)b->params / d);
            double coll = split ? b->tp_collectives * dt__plan_allreduce_s(tpg, b->tp_bytes * mb) : 0;
            bool re = recomputed(c, l, b);
            /* per sample at this micro-batch: the fixed cost per micro-batch shared by its mb samples */
            double fwd = b->fwd_s + b->fwd_fixed_s / mb, bwd = b->bwd_s + b->bwd_fixed_s / mb;
            bool copies = split && l->tp_copies > 1 && !strcmp(b->kind, "gpt-block");
            if (copies)
                coll = copies_exposed_s(tpg, b, mb, l->tp_copies, mb * fwd / d);
            s->fwd += fwd / d;
            s->bwd += bwd / d;
            s->tp_fwd += coll;
            s->params += params;
            double u = ceil(params / dp); /* ZeRO: a slice of every block, the block padded to dp */
            s->shard += u;
            s->unit = fmax(s->unit, u * dp);
            /* tp splits a block's activations but the part it keeps whole, which sequence parallelism splits */
            double whole = split && !l->sequence_parallel ? fmin(b->act_tp_whole_bytes, b->act_bytes) : 0;
            double act = whole + (b->act_bytes - whole) / d;
            if (copies) /* the block's output and its input gradient assembled from the copies once more */
                act += 2 * b->out_bytes;
            s->act += act;
            if (re) {
                s->recompute += fwd / d;
                s->tp_recompute += coll;
                s->kept += i > 0 ? m->blocks[i - 1].out_bytes : 0; /* its input */
                s->act_max = fmax(s->act_max, act);
            } else
                s->kept += act;
            if (l->zero_stage && dp > 1) {
                double rs = dt__plan_reduce_scatter_s(dpg, 4 * u * dp), ag = dt__plan_allgather_s(dpg, 4 * u * dp);
                if (s->rs_sum == 0) { /* the rank's first unit: gathered first, reduced last */
                    s->rs_first = rs;
                    s->ag_first = ag;
                }
                s->rs_sum += rs;
                s->ag_sum += ag;
            }
        }
}

/* The streams below play one pipeline rank's blocks one by one; a block's
 * pieces: its tp divisor, its compute at mb samples x g (cores shared:
 * forward; backward with its recompute) and its ZeRO unit, the block's
 * parameters on this rank padded to dp (bytes of f32). */
static double tp_div(const dt_layout *l, const dt_plan_block *b) { return b->tp_splittable && l->tp > 1 ? l->tp : 1; }

static double block_fwd_s(const dt_layout *l, const dt_plan_block *b, double mb, double g)
{
    return g * (mb * b->fwd_s + b->fwd_fixed_s) / tp_div(l, b);
}

static double block_bwd_s(const dt__plan_ctx *c, const dt_layout *l, const dt_plan_block *b, double mb, double g)
{
    double re = recomputed(c, l, b) ? mb * b->fwd_s + b->fwd_fixed_s : 0;
    return g * (mb * b->bwd_s + b->bwd_fixed_s + re) / tp_div(l, b);
}

static double unit_bytes(const dt_layout *l, const dt_plan_block *b, int dp)
{
    return 4 * ceil(ceil((double)b->params / tp_div(l, b)) / dp) * dp;
}

/* ZeRO 1/2's exposed transfers on pipeline rank r, the link taking one
 * transfer at a time (the strategy's collectives run in order on their
 * communicator): each block's reduce-scatter can start once its backward
 * is done, the blocks' backwards in reverse order (*rs: how long the last
 * one ends after the backward); each block's allgather, all started at the
 * update in forward order, must land before its forward (*ag: how much the
 * forward is held up).  Against the sums alone this sees that the first
 * reduce-scatter waits for the last block's backward and the last forward
 * for every gather before it. */
static void zero_streams(const dt__plan_ctx *c, const dt_layout *l, const int *bounds, int r, int dp, double mb,
                         double g, double *rs, double *ag)
{
    const dt_plan_model *m = &c->in->model;
    int p = l->pp, v = dt_layout_chunks(l);
    dt__plan_group dpg = {&c->in->links, dp, l->tp * p};
    double now = 0, link = 0; /* the backward: the blocks in reverse */
    for (int ch = v - 1; ch >= 0; ch--)
        for (int i = bounds[ch * p + r + 1] - 1; i >= bounds[ch * p + r]; i--) {
            now += block_bwd_s(c, l, &m->blocks[i], mb, g);
            link = fmax(link, now) + dt__plan_reduce_scatter_s(dpg, unit_bytes(l, &m->blocks[i], dp));
        }
    *rs = fmax(link - now, 0);
    double fwd = 0, gathered = 0, alone = 0; /* the forward: each block after its gather */
    for (int ch = 0; ch < v; ch++)
        for (int i = bounds[ch * p + r]; i < bounds[ch * p + r + 1]; i++) {
            double f = block_fwd_s(l, &m->blocks[i], mb, g);
            gathered += dt__plan_allgather_s(dpg, unit_bytes(l, &m->blocks[i], dp));
            fwd = fmax(fwd, gathered) + f;
            alone += f;
        }
    *ag = fmax(fwd - alone, 0);
}

/* ZeRO-3's exposed transfers per micro-batch on pipeline rank r, the link
 * taking one collective at a time in the order the strategy starts them:
 * the forward gathers each block's parameters, the next block's gather
 * started as a block's forward begins (the first's before the forward);
 * the backward gathers them again, the block before's started as a block's
 * backward begins (the last block's as the forward ends), and
 * reduce-scatters each block's gradients as its backward ends.  The
 * exposed time: how much later the backward's last transfer ends than the
 * compute alone. */
static double zero3_stream(const dt__plan_ctx *c, const dt_layout *l, const int *bounds, int r, int dp, double mb,
                           double g)
{
    const dt_plan_block *blk = c->in->model.blocks;
    int lo = bounds[r], hi = bounds[r + 1];
    dt__plan_group dpg = {&c->in->links, dp, l->tp * l->pp};
    /* link: when the link is free; next: when the gather of the block about to run lands */
    double link = dt__plan_allgather_s(dpg, unit_bytes(l, &blk[lo], dp)), next = link, end = 0, alone = 0;
    for (int i = lo; i < hi; i++) { /* the forward */
        double start = fmax(end, next), f = block_fwd_s(l, &blk[i], mb, g);
        if (i + 1 < hi)
            next = link = fmax(link, start) + dt__plan_allgather_s(dpg, unit_bytes(l, &blk[i + 1], dp));
        end = start + f;
        alone += f;
    }
    next = link = fmax(link, end) + dt__plan_allgather_s(dpg, unit_bytes(l, &blk[hi - 1], dp));
    for (int i = hi - 1; i >= lo; i--) { /* the backward */
        double start = fmax(end, next), w = block_bwd_s(c, l, &blk[i], mb, g);
        if (i > lo)
            next = link = fmax(link, start) + dt__plan_allgather_s(dpg, unit_bytes(l, &blk[i - 1], dp));
        end = start + w;
        alone += w;
        link = fmax(link, end) + dt__plan_reduce_scatter_s(dpg, unit_bytes(l, &blk[i], dp));
    }
    return fmax(fmax(link, end) - alone, 0);
}

/* DDP's exposed allreduces on pipeline rank r: the buckets (`bucket` bytes
 * of gradients at `wire` bytes each) fill as the blocks' backwards end, in
 * reverse, each reduced once full (the last once the backward ends), one at
 * a time on the link; how long the last ends after the backward. */
static double ddp_stream(const dt__plan_ctx *c, const dt_layout *l, const int *bounds, int r, int dp, double mb,
                         double g, double wire, double bucket)
{
    const dt_plan_model *m = &c->in->model;
    int p = l->pp, v = dt_layout_chunks(l);
    dt__plan_group dpg = {&c->in->links, dp, l->tp * p};
    double now = 0, link = 0, filled = 0;
    for (int ch = v - 1; ch >= 0; ch--)
        for (int i = bounds[ch * p + r + 1] - 1; i >= bounds[ch * p + r]; i--) {
            const dt_plan_block *b = &m->blocks[i];
            now += block_bwd_s(c, l, b, mb, g);
            for (filled += wire * ceil((double)b->params / tp_div(l, b)); filled >= bucket; filled -= bucket)
                link = fmax(link, now) + dt__plan_allreduce_s(dpg, bucket);
        }
    if (filled > 0)
        link = fmax(link, now) + dt__plan_allreduce_s(dpg, filled);
    return fmax(link - now, 0);
}

/* Micro-batches whose activations a pipeline rank holds at once. */
static double in_flight(const dt_layout *l, int r, int m)
{
    int p = l->pp, v = dt_layout_chunks(l);
    if (p == 1)
        return 1; /* the common loop: each micro-batch's forward then its backward */
    if (l->schedule == DT_PIPE_GPIPE)
        return m;
    if (l->schedule == DT_PIPE_1F1B)
        return p - r < m ? p - r : m;
    /* interleaved (pipe/plan.c's warm-up, then one more forward); a chunk holds 1/v of the rank's blocks */
    int warm = m == p ? m * v : (p - r - 1) * 2 + (v - 1) * p;
    int n = warm + 1 < m * v ? warm + 1 : m * v;
    return (double)n / v;
}

/* The exposed part of `total` seconds of collectives that start while
 * `window` seconds of compute still run, the last `tail` starting only
 * once it ends. */
static double exposed(double total, double tail, double window) { return fmax(total - tail - window, 0) + tail; }

/* The ranks that take turns on one machine's cores: a host's, or every
 * host's of one machine (network namespaces of one box). */
static int sharing_ranks(const dt_plan_inputs *in)
{
    int R = in->links.ranks_per_node, M = in->links.ranks_per_machine;
    return M > R ? M : R;
}

/* The seconds a barrier among a group of t ranks costs on this host
 * (dt_plan_model.sync_s, measured for the host's ranks; 0 otherwise): the
 * largest group measured (non-zero) of at most t ranks. */
static double sync_cost(const dt_plan_inputs *in, int t)
{
    const dt_plan_model *mo = &in->model;
    if (t < 2 || mo->shared_ranks != sharing_ranks(in))
        return 0;
    int k = 0;
    while (k + 1 < 6 && (2 << (k + 1)) <= t && mo->sync_s[k + 1] > 0)
        k++;
    return mo->sync_s[k];
}

/* One virtual stage's seconds of one core per micro-batch when its rank
 * shares the host's cores: forward, and backward with its recompute; the
 * compute times kappa.  *colls: its tp collectives per micro-batch.  The
 * tp collectives are work of the cores when the group is on one host
 * (shared memory); across hosts (wire) they are waits on the link that
 * take no core: *fwait and *bwait, per micro-batch, apart from fwd and bwd. */
static void part_times(const dt__plan_ctx *c, const dt_layout *l, int lo, int hi, double mb, double kappa, bool wire,
                       double *fwd, double *bwd, double *colls, double *fwait, double *bwait)
{
    const dt_plan_model *m = &c->in->model;
    int t = l->tp;
    dt__plan_group tpg = {&c->in->links, t, 1};
    *fwd = *bwd = *colls = *fwait = *bwait = 0;
    for (int i = lo; i < hi; i++) {
        const dt_plan_block *b = &m->blocks[i];
        bool split = b->tp_splittable && t > 1, re = recomputed(c, l, b);
        double d = split ? t : 1;
        double coll = split ? b->tp_collectives * dt__plan_allreduce_s(tpg, b->tp_bytes * mb) : 0;
        *colls += split ? b->tp_collectives * (2 + re) : 0;
        if (wire) {
            *fwait += coll;
            *bwait += coll * (1 + re);
            coll = 0;
        }
        double f = kappa * (mb * b->fwd_s + b->fwd_fixed_s) / d, bw = kappa * (mb * b->bwd_s + b->bwd_fixed_s) / d;
        *fwd += f + coll;
        *bwd += bw + coll + (re ? f + coll : 0);
    }
}

/* When the machine's ranks share cores (in->cores_per_node > 0 and the
 * machine's ranks x threads above it, or a contention measured for them):
 * the pipelined part simulated with processor sharing (share.c), its
 * parts scaled by g = the slowest pipeline rank's time running over its
 * work alone, the bubble what is left of the span; the optimizer, which
 * every rank runs at once, x kappa x max(1, ranks x threads / cores); each
 * tp collective of the slowest rank + the barrier's measured cost.  A tp
 * group across hosts (namespace hosts of one machine) waits on the wire,
 * which is not stretched: while a rank waits, the others have the cores
 * (the simulation holds each action's output back by its waits).
 * Without sharing nothing changes and g = 1. */
static dt_status shared_cores(const dt__plan_ctx *c, const dt_layout *l, const int *bounds, int worst_r, double mb,
                              int m, dt_plan_estimate *e, double *g)
{
    const dt_plan_inputs *in = c->in;
    const dt_plan_model *mo = &in->model;
    int R = sharing_ranks(in), thr = mo->threads > 0 ? mo->threads : 1, p = l->pp, v = dt_layout_chunks(l);
    double cores = in->cores_per_node, over = cores > 0 ? (double)R * thr / cores : 0;
    double kappa = mo->shared_ranks == R && mo->contention > 0 ? mo->contention : 1;
    double sync = sync_cost(in, l->tp);
    *g = 1;
    if (!(cores > 0) || (over <= 1 && kappa == 1 && sync == 0) || l->servers > 0)
        return DT_OK;
    bool wire = l->tp > 1 && l->tp > in->links.ranks_per_node; /* the tp group's collectives cross hosts */
    /* the slowest rank's work of the cores, one core its own */
    double alone = e->compute_s + (wire ? 0 : e->tp_s) + e->recompute_s;
    double *fwd = malloc((size_t)(4 * p * v) * sizeof *fwd), *busy = malloc((size_t)p * sizeof *busy);
    if (!fwd || !busy) {
        free(fwd);
        free(busy);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    double *bwd = fwd + p * v, *fwait = bwd + p * v, *bwait = fwait + p * v, span = 0, colls = 0, waits = 0;
    for (int k = 0; k < p * v; k++) {
        double n;
        part_times(c, l, bounds[k], bounds[k + 1], mb, kappa, wire, &fwd[k], &bwd[k], &n, &fwait[k], &bwait[k]);
        colls += k % p == worst_r ? n : 0;
        waits += k % p == worst_r ? m * (fwait[k] + bwait[k]) : 0;
    }
    dt__plan_share sh = {l->schedule, p, v, m, fwd, bwd, fmax(over, 1) * cores / p, cores,
                         wire ? fwait : NULL, wire ? bwait : NULL};
    dt_status st = over > 1 ? dt__plan_shared_span(&sh, &span, busy) : DT_OK;
    if (st == DT_OK && over <= 1) { /* a core each: the parts as they are, kappa and the barriers added */
        double w = 0;
        for (int k = worst_r; k < p * v; k += p)
            w += m * (fwd[k] + bwd[k]);
        busy[worst_r] = w;
        span = w + e->bubble_s / fmax(alone, 1e-300) * w + waits;
    }
    if (st == DT_OK && alone > 0) {
        *g = busy[worst_r] / alone;
        e->compute_s *= *g;
        e->tp_s *= wire ? 1 : *g;
        e->recompute_s *= *g;
        e->bubble_s = fmax(span - busy[worst_r] - waits, 0);
        e->optimizer_s *= kappa * fmax(over, 1);
        /* the barriers' wall time, measured among the sharing ranks: not stretched again */
        e->tp_s += m * colls * sync;
    }
    free(fwd);
    free(busy);
    return st;
}

/* The seconds of every core of the machine that the data-parallel traffic's
 * CPU takes per step (links.inter_cpu_s_per_byte: the TCP work of both ends
 * of each byte sent between hosts), when the dp group crosses hosts and the
 * machine's ranks keep all of its cores computing; 0 otherwise (a core to
 * spare does the work beside the compute).  Bytes each rank sends: a ring's
 * (n - 1) / n of each buffer, twice for an allreduce; ZeRO reduce-scatters
 * the gradients (stage 2 without a pipeline: every micro-batch) and gathers
 * f32 parameters (stage 3: twice, every micro-batch). */
static double dp_traffic_cpu(const dt_plan_inputs *in, const dt_layout *l, int dp, int m, double params)
{
    int share = sharing_ranks(in), thr = in->model.threads > 0 ? in->model.threads : 1;
    double cpu = in->links.inter_cpu_s_per_byte, cores = in->cores_per_node;
    if (dp < 2 || l->servers > 0 || !(cpu > 0) || !(cores > 0) || (double)share * thr < cores)
        return 0;
    if ((double)l->tp * l->pp * (dp - 1) < in->links.ranks_per_node) /* the group within a host: shared memory */
        return 0;
    double ring = (dp - 1.0) / dp, grads = (l->grad_wire == DT_F32 ? 4 : 2) * params, full = 4 * params;
    double sent = l->zero_stage == 0   ? 2 * ring * grads
                  : l->zero_stage <= 2 ? ring * (grads * (l->zero_stage == 2 && l->pp == 1 ? m : 1) + full)
                                       : m * ring * (2 * full + grads);
    return sent * share * cpu / cores;
}

dt_status dt__plan_estimate(dt__plan_ctx *c, const dt_layout *l, dt_plan_estimate *out)
{
    const dt_plan_inputs *in = c->in;
    const dt_plan_model *mo = &in->model;
    int dp = 0;
    DT_CHECK(dt_layout_check(l, in->world, &dp));
    int p = l->pp, t = l->tp, v = dt_layout_chunks(l), parts = p * v, workers = in->world - l->servers;
    if (parts > mo->nblocks)
        return dt__fail(DT_ERR_INVALID, "pp %d x %d chunks = %d stages but the model has %d blocks (at most one stage "
                        "per block)", p, v, parts, mo->nblocks);
    if (t > 1) {
        bool any = false;
        for (int i = 0; i < mo->nblocks && !any; i++)
            any = mo->blocks[i].tp_splittable != 0;
        if (!any)
            return dt__fail(DT_ERR_INVALID, "tp %d: no block of the model splits over tensor-parallel ranks", t);
    }
    int64_t acc = l->grad_accumulation, batch = in->batch_size;
    if (in->global_batch > 0) {
        if (in->global_batch % ((int64_t)dp * acc))
            return dt__fail(DT_ERR_INVALID, "the global batch %lld does not divide over dp %d x grad_accumulation %lld",
                            (long long)in->global_batch, dp, (long long)acc);
        batch = in->global_batch / ((int64_t)dp * acc);
    }
    if (batch % l->micro_batches)
        return dt__fail(DT_ERR_INVALID, "micro_batches %d do not divide the batch of %lld samples per rank",
                        l->micro_batches, (long long)batch);
    double mb = (double)(batch / l->micro_batches); /* samples per micro-batch */
    int m = dt_layout_step_micro_batches(l);
    if (l->schedule == DT_PIPE_INTERLEAVED && p > 1 && m % p)
        return dt__fail(DT_ERR_INVALID, "pipeline schedule interleaved: %d micro-batches are not a multiple of the %d "
                        "stages", m, p);
    const int *bounds = NULL;
    DT_CHECK(cut(c, parts, &bounds));

    /* Time: the slowest pipeline rank's; memory: the fullest rank's. */
    rank_share s = {0}, r_s;
    int worst_r = 0;
    double worst_time = -1, states_best = 0, act_best = -1;
    dt_memory_plan mem = {0};
    int k = l->servers > 0 ? 0 : mo->optimizer_state_floats; /* a parameter server's workers hold no optimizer */
    for (int r = 0; r < p; r++) {
        share_of(c, l, bounds, r, dp, mb, &r_s);
        double tm = mb * (r_s.fwd + r_s.bwd + r_s.recompute) + 2 * r_s.tp_fwd + r_s.tp_recompute;
        if (tm > worst_time) {
            worst_time = tm;
            s = r_s;
            worst_r = r;
        }
        dt_memory_plan mp;
        dt__memory_plan_states(l, r_s.params, r_s.shard, r_s.unit, dp, k, &mp);
        double act = mb * (in_flight(l, r, m) * r_s.kept + r_s.act_max);
        double states = mp.params + mp.grads + mp.optimizer + mp.buffers;
        if (states + act > states_best + act_best) {
            states_best = states;
            act_best = act;
            mem = mp;
        }
    }
    dt_plan_estimate e = {0};
    e.layout = *l;
    e.layout.dp = dp;
    e.compute_s = m * mb * (s.fwd + s.bwd);
    e.tp_s = m * 2 * s.tp_fwd;
    e.recompute_s = m * (mb * s.recompute + s.tp_recompute);
    if (p > 1) {
        /* The bubble: (p-1)/(m+p-1) of the pipelined time, (p-1)/v of a micro-batch's time over m at v chunks. */
        e.bubble_s = (p - 1.0) / ((double)v * m) * (e.compute_s + e.tp_s + e.recompute_s);
        /* Sends: hidden behind the other micro-batches except the first's forward through every boundary and
         * the last's backward back, as long as a link carries its micro-batch's messages (activations one way,
         * gradients the other: a full-duplex link) within a micro-batch's compute on the slowest rank; a slower
         * link (a pipeline across hosts) sets the pace of the m - 1 others instead.  Interleaved, the v
         * boundaries between ranks r and r + 1 share one link. */
        double *link = calloc((size_t)p, sizeof *link), period = worst_time;
        if (!link)
            return dt__fail(DT_ERR_NOMEM, "out of memory");
        for (int b = 1; b < parts; b++) {
            double bytes = mo->blocks[bounds[b] - 1].out_bytes * mb;
            double one = dt__plan_p2p_s(&in->links, ((b - 1) % p) * t, (b % p) * t, bytes);
            e.pp_s += 2 * one;
            link[(b - 1) % p] += one;
        }
        for (int r = 0; r < p; r++)
            e.pp_s += (m - 1) * fmax(link[r] - period, 0);
        free(link);
    }
    double opt_elems = l->servers > 0 ? 0 : l->zero_stage ? s.shard : s.params;
    e.optimizer_s = opt_elems * mo->optimizer_s_per_param;
    /* a host's ranks sharing its cores: the compute's parts stretched by g (1 when they do not) */
    double g = 1;
    DT_CHECK(shared_cores(c, l, bounds, worst_r, mb, m, &e, &g));
    e.core_share = g;
    double last_bwd = g * mb * (s.bwd + s.recompute), first_fwd = g * mb * s.fwd, wire_s = 0; /* the dp transfers' time */
    if (l->servers > 0) {
        /* Each worker pushes its gradients and pulls the parameters (f32); a server's link carries every
         * worker's share of its range.  The servers' update runs in between. */
        double bytes = 4 * s.params, server = bytes * workers / l->servers;
        e.ps_s = 2 * (in->links.inter.latency_s + fmax(bytes, server) / in->links.inter.bandwidth_Bps);
        e.optimizer_s = s.params / l->servers * mo->optimizer_s_per_param;
    } else if (dp > 1 && l->zero_stage == 0) {
        /* DDP: buckets reduced as backward fills them; all but the last overlap the last backward. */
        double wire = l->grad_wire == DT_F32 ? 4 : 2, G = wire * s.params;
        double bucket = l->bucket_mb > 0 ? l->bucket_mb * MIB : fmax(MIB, fmin(25 * MIB, G / 8));
        double nb = ceil(G / bucket), lastb = G - (nb - 1) * bucket;
        dt__plan_group dpg = {&in->links, dp, t * p};
        double tail = dt__plan_allreduce_s(dpg, lastb);
        wire_s = (nb - 1) * dt__plan_allreduce_s(dpg, bucket) + tail;
        e.dp_s = p > 1 ? exposed((nb - 1) * dt__plan_allreduce_s(dpg, bucket) + tail, tail, last_bwd)
                       : ddp_stream(c, l, bounds, worst_r, dp, mb, g, wire, bucket);
    } else if (dp > 1 && l->zero_stage <= 2) {
        /* ZeRO 1/2: each unit reduce-scattered as its backward ends (stage 2: every micro-batch; a pipeline:
         * after its schedule, nothing hidden); the updated slices allgathered during the update and the next
         * forward (zero_streams; the update's time counts as overlap). */
        double rs, ag;
        zero_streams(c, l, bounds, worst_r, dp, mb, g, &rs, &ag);
        if (p > 1)
            rs = s.rs_sum;
        if (l->zero_stage == 2 && p == 1)
            rs *= m;
        e.dp_s = rs + fmax(ag - e.optimizer_s, fmin(ag, s.ag_first));
        wire_s = s.rs_sum * (l->zero_stage == 2 && p == 1 ? m : 1) + s.ag_sum;
    } else if (dp > 1) {
        /* ZeRO-3: every block gathered before its forward and again before its backward, the next one
         * prefetched; gradients reduce-scattered as each backward ends (zero3_stream; a pipeline: the sums). */
        wire_s = m * (2 * s.ag_sum + s.rs_sum);
        e.dp_s = m * (p > 1 || v > 1 ? exposed(s.ag_sum, s.ag_first, first_fwd) +
                                           exposed(s.ag_sum + s.rs_sum, s.rs_first, last_bwd)
                                     : zero3_stream(c, l, bounds, worst_r, dp, mb, g));
    }
    /* the traffic's CPU lengthens the step while the transfers overlap compute; during the exposed waits the
     * cores are idle and absorb it */
    if (wire_s > 0)
        e.dp_s += dp_traffic_cpu(in, l, dp, m, s.params) * fmax(0, 1 - e.dp_s / wire_s);
    e.step_s = e.compute_s + e.bubble_s + e.tp_s + e.pp_s + e.dp_s + e.ps_s + e.recompute_s + e.optimizer_s;
    e.params_bytes = mem.params;
    e.grads_bytes = mem.grads;
    e.optimizer_bytes = mem.optimizer;
    e.buffers_bytes = mem.buffers;
    e.activation_bytes = act_best;
    e.memory_bytes = states_best + act_best;
    double global = (double)dp * (double)batch * (double)acc;
    e.samples_per_s = e.step_s > 0 ? global / e.step_s : 0;
    if (in->flops_per_s > 0 && in->model_flops_per_sample > 0 && e.step_s > 0)
        e.mfu = in->model_flops_per_sample * global / e.step_s / (in->flops_per_s * workers);
    e.fits = !(in->memory_limit > 0) || e.memory_bytes <= in->memory_limit;
    *out = e;
    return DT_OK;
}

dt_status dt_plan_layout(const dt_plan_inputs *in, const dt_layout *l, dt_plan_estimate *out)
{
    if (!l || !out)
        return dt__fail(DT_ERR_INVALID, "plan_layout: %s is NULL", !l ? "the layout" : "out");
    dt__plan_ctx c;
    dt_status s = dt__plan_ctx_init(&c, in);
    if (s == DT_OK)
        s = dt__plan_estimate(&c, l, out);
    if (c.bounds)
        dt__plan_ctx_free(&c);
    return s;
}
