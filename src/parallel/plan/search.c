/* The search over a world's layouts (dt_plan_search): every dp x tp x pp
 * factorisation with ZeRO stages, servers, schedules, micro-batches and
 * recomputation, each estimated (cost.c), the fastest that fit kept.  A
 * large world gets a pruned enumeration (docs/planner.md, "The search"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "parallel/plan/internal.h"

#define PRUNE_WORLD 4096   /* above this many ranks, the pruned enumeration */
#define BUDGET 20000       /* or when the full one would estimate more layouts than this */
#define MAX_DIVISORS 64
#define GIB (1024.0 * 1024 * 1024)

/* One family of layouts (tp, pp, zero stage, servers): whether one fit, and
 * else the first reason a layout of it was refused, or the least memory
 * one needed. */
typedef struct {
    int tp, pp, zero, servers;
    bool fit;
    char reason[256];
    double least_memory;
} family;

typedef struct {
    dt__plan_ctx ctx;
    const dt_plan_search_opts *o;
    dt_plan_result *r;
    family *fam;
    int nfam, capfam;
    bool pruned;
} search;

static int divisors(int64_t n, int max_value, int *out)
{
    int k = 0;
    for (int64_t d = 1; d <= n && d <= max_value && k < MAX_DIVISORS; d++)
        if (n % d == 0)
            out[k++] = (int)d;
    return k;
}

static bool pow2(int64_t n) { return n > 0 && (n & (n - 1)) == 0; }

static family *family_of(search *S, const dt_layout *l)
{
    for (int i = 0; i < S->nfam; i++) {
        family *f = &S->fam[i];
        if (f->tp == l->tp && f->pp == l->pp && f->zero == l->zero_stage && f->servers == l->servers)
            return f;
    }
    if (S->nfam == S->capfam) {
        int cap = S->capfam ? 2 * S->capfam : 64;
        family *f = realloc(S->fam, (size_t)cap * sizeof *f);
        if (!f)
            return NULL;
        S->fam = f;
        S->capfam = cap;
    }
    family *f = &S->fam[S->nfam++];
    *f = (family){l->tp, l->pp, l->zero_stage, l->servers, false, "", 0};
    return f;
}

/* Keep e among the best (fastest first; equal speed: less memory first). */
static bool better(const dt_plan_estimate *a, const dt_plan_estimate *b)
{
    if (a->samples_per_s != b->samples_per_s)
        return a->samples_per_s > b->samples_per_s;
    return a->memory_bytes < b->memory_bytes;
}

static void keep(search *S, const dt_plan_estimate *e)
{
    dt_plan_result *r = S->r;
    int n = r->nbest, top = S->o->top;
    if (n == top && !better(e, &r->best[n - 1]))
        return;
    int at = n < top ? n : n - 1;
    while (at > 0 && better(e, &r->best[at - 1])) {
        r->best[at] = r->best[at - 1];
        at--;
    }
    r->best[at] = *e;
    if (n < top)
        r->nbest++;
}

/* Estimate one layout; true when it fit (callers prune on it). */
static dt_status try_layout(search *S, const dt_layout *l, bool *fit)
{
    family *f = family_of(S, l);
    if (!f)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    S->r->considered++;
    dt_plan_estimate e;
    *fit = false;
    dt_status s = dt__plan_estimate(&S->ctx, l, &e);
    if (s == DT_ERR_NOMEM)
        return s;
    if (s != DT_OK) {
        if (!f->reason[0])
            snprintf(f->reason, sizeof f->reason, "%s", dt_last_error());
        return DT_OK;
    }
    S->r->valid++;
    if (!e.fits) {
        if (f->least_memory == 0 || e.memory_bytes < f->least_memory)
            f->least_memory = e.memory_bytes;
        return DT_OK;
    }
    S->r->fitting++;
    f->fit = *fit = true;
    keep(S, &e);
    return DT_OK;
}

/* Every schedule, micro-batch count and recomputation of one (servers, tp,
 * pp, zero) family. */
static dt_status try_family(search *S, dt_layout base)
{
    const dt_plan_inputs *in = S->ctx.in;
    int workers = in->world - base.servers, dp = workers / (base.tp * base.pp);
    int64_t batch = in->global_batch > 0 ? (in->global_batch % dp ? 0 : in->global_batch / dp) : in->batch_size;
    if (batch < 1) { /* the global batch does not divide: refused by the estimate's message */
        bool fit;
        return try_layout(S, &base, &fit);
    }
    int ms[MAX_DIVISORS], nm = 0, all[MAX_DIVISORS];
    int nall = divisors(batch, 1 << 16, all);
    for (int i = 0; i < nall; i++) /* pruned: micro-batches of a power of two samples (or the whole batch) */
        if (!S->pruned || pow2(batch / all[i]) || all[i] == 1)
            ms[nm++] = all[i];
    static const dt_pipe_schedule scheds[] = {DT_PIPE_1F1B, DT_PIPE_INTERLEAVED, DT_PIPE_GPIPE};
    int nsched = base.pp == 1 ? 1 : S->pruned ? 2 : 3; /* pruned: gpipe is 1f1b's time with more memory */
    for (int si = 0; si < nsched; si++)
        for (int mi = 0; mi < nm; mi++) {
            dt_layout l = base;
            l.schedule = scheds[si];
            l.virtual_stages = 2;
            l.micro_batches = ms[mi];
            if (l.schedule == DT_PIPE_INTERLEAVED && (l.micro_batches % l.pp || 2 * l.pp > in->model.nblocks))
                continue; /* interleaved only where it can run */
            bool fit;
            l.recompute = DT_RECOMPUTE_OFF;
            DT_CHECK(try_layout(S, &l, &fit));
            /* multi-copy tp: 2 and 4 copies where a micro-batch has the rows (gpt blocks only) */
            for (int copies = 2; base.tp > 1 && S->ctx.has_gpt_block && copies <= 4; copies *= 2) {
                if (batch / l.micro_batches < copies)
                    break;
                dt_layout lc = l;
                bool fit_c;
                lc.tp_copies = copies;
                DT_CHECK(try_layout(S, &lc, &fit_c));
            }
            /* Recompute only costs time in the model: pruned, it is tried only where the layout does not fit
             * without. */
            if (S->o->allow_recompute && (!S->pruned || !fit)) {
                l.recompute = DT_RECOMPUTE_BLOCKS;
                DT_CHECK(try_layout(S, &l, &fit));
            }
        }
    return DT_OK;
}

static dt_status enumerate(search *S)
{
    const dt_plan_inputs *in = S->ctx.in;
    int R = in->links.ranks_per_node, nb = in->model.nblocks;
    int servers[8] = {0}, ns = 1;
    if (S->o->allow_servers)
        for (int k = 1; k <= R && k <= in->world / 2 && ns < 8; k *= 2)
            servers[ns++] = k;
    for (int si = 0; si < ns; si++) {
        int workers = in->world - servers[si], tps[MAX_DIVISORS], pps[MAX_DIVISORS];
        int ntp = servers[si] ? 1 : divisors(workers, workers, tps);
        if (servers[si])
            tps[0] = 1;
        for (int a = 0; a < ntp; a++) {
            int tp = tps[a];
            if (S->pruned && (!pow2(tp) || tp > R))
                continue; /* pruned: tp a power of two within a node */
            int npp = servers[si] ? 1 : divisors(workers / tp, nb, pps);
            if (servers[si])
                pps[0] = 1;
            for (int b = 0; b < npp; b++)
                for (int z = 0; z <= (servers[si] ? 0 : 3); z++) {
                    if (z == 3 && (tp > 1 || pps[b] > 1))
                        continue; /* ZeRO-3 is built without tp and pp only */
                    dt_layout l;
                    dt_layout_default(&l);
                    l.tp = tp;
                    l.pp = pps[b];
                    l.zero_stage = z;
                    l.servers = servers[si];
                    /* a GPT's tensor-parallel layouts with sequence parallelism: the same time in the model, less
                     * memory (other models do not have it) */
                    l.sequence_parallel = tp > 1 && S->ctx.has_gpt_block;
                    DT_CHECK(try_family(S, l));
                }
        }
    }
    return DT_OK;
}

/* The rejected families, "tp 8 x pp 2, zero_stage 1: why". */
static dt_status list_rejected(search *S)
{
    dt_plan_result *r = S->r;
    r->rejected = calloc((size_t)S->nfam + 1, sizeof *r->rejected);
    if (!r->rejected)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < S->nfam; i++) {
        family *f = &S->fam[i];
        if (f->fit)
            continue;
        char name[96], why[320];
        int n = snprintf(name, sizeof name, "tp %d x pp %d, zero_stage %d", f->tp, f->pp, f->zero);
        if (f->servers)
            snprintf(name + n, sizeof name - (size_t)n, ", servers %d", f->servers);
        if (f->least_memory > 0)
            snprintf(why, sizeof why, "needs at least %.4g GiB per rank, over the limit of %.4g GiB",
                     f->least_memory / GIB, S->ctx.in->memory_limit / GIB);
        else
            snprintf(why, sizeof why, "%s", f->reason[0] ? f->reason : "no layout of it was tried");
        size_t len = strlen(name) + strlen(why) + 3;
        char *line = malloc(len);
        if (!line)
            return dt__fail(DT_ERR_NOMEM, "out of memory");
        snprintf(line, len, "%s: %s", name, why);
        r->rejected[r->nrejected++] = line;
    }
    return DT_OK;
}

dt_status dt_plan_search(const dt_plan_inputs *in, const dt_plan_search_opts *o, dt_plan_result *out)
{
    if (!in || !o || !out)
        return dt__fail(DT_ERR_INVALID, "plan_search: %s is NULL", !in ? "the inputs" : !o ? "the options" : "out");
    if (o->top < 1)
        return dt__fail(DT_ERR_INVALID, "plan_search: top %d (at least 1)", o->top);
    *out = (dt_plan_result){0};
    int64_t t0 = dt__now_ns();
    dt_plan_inputs local = *in;
    if (o->nodes > 0) { /* the hosts given: the world spread evenly over them */
        if (in->world % o->nodes)
            return dt__fail(DT_ERR_INVALID, "plan_search: world %d does not divide over %d nodes", in->world,
                            o->nodes);
        local.links.ranks_per_node = in->world / o->nodes;
    }
    search S = {.o = o, .r = out};
    dt_status s = dt__plan_ctx_init(&S.ctx, &local);
    if (s == DT_OK && !(out->best = calloc((size_t)o->top, sizeof *out->best)))
        s = dt__fail(DT_ERR_NOMEM, "out of memory");
    if (s == DT_OK) {
        /* The full enumeration's size, roughly: (tp, pp) pairs x 4 stages x 3 schedules x micro-batch
         * counts x 2; over the budget (or a large world), the pruned one. */
        int d[MAX_DIVISORS], nd = divisors(local.world, local.world, d);
        int64_t b = local.global_batch > 0 ? local.global_batch : local.batch_size;
        int dm[MAX_DIVISORS], nm = divisors(b, 1 << 16, dm);
        S.pruned = local.world > PRUNE_WORLD || (int64_t)nd * nd * 4 * 3 * nm * 2 > BUDGET;
        s = enumerate(&S);
    }
    if (s == DT_OK)
        s = list_rejected(&S);
    if (S.ctx.bounds)
        dt__plan_ctx_free(&S.ctx);
    free(S.fam);
    out->search_s = (double)(dt__now_ns() - t0) * 1e-9;
    if (s != DT_OK) {
        dt_plan_result_free(out);
        return s;
    }
    if (out->nbest == 0)
        return dt__fail(DT_ERR_INVALID, "plan: no layout of %d ranks fits (%d considered, %d valid%s%s)", in->world,
                        out->considered, out->valid, out->nrejected ? "; first refused: " : "",
                        out->nrejected ? out->rejected[0] : "");
    return DT_OK;
}

void dt_plan_result_free(dt_plan_result *r)
{
    if (!r)
        return;
    for (int i = 0; i < r->nrejected; i++)
        free(r->rejected[i]);
    free(r->rejected);
    free(r->best);
    *r = (dt_plan_result){0};
}
