/* Pipeline parallelism as a strategy: this rank's chunks of blocks run the
 * schedule's forwards and backwards (the order: plan.c; the execution,
 * one context and one arena per micro-batch in flight, activations and
 * their gradients moving to the neighbouring ranks with nonblocking
 * point-to-point on a communicator of their own: executor.c).  After
 * the schedule, the data-parallel half (common/dp_sync.h): data parallelism's
 * allreduce (the gradients averaged over the micro-batches and the
 * replicas, started during the last backward, the tied parameters' copies
 * summed between the stages that hold them, the norm over every stage, the
 * update) or ZeRO's (pc->zero_stage: the same sums, the gradients
 * reduce-scattered over dp, the sharded update, the allgather). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "parallel/pipe/internal.h"

static dt_status plan_for(pipe_state *P, int M)
{
    if (P->plan && P->plan_m == M)
        return DT_OK;
    free(P->plan);
    free(P->slots);
    free(P->events);
    P->plan = NULL;
    P->slots = NULL;
    P->events = NULL;
    DT_CHECK(dt_pipe_schedule_build(P->pc.schedule, P->p, P->v, P->r, M, &P->plan, &P->nplan));
    P->slots = calloc((size_t)M * (size_t)P->v, sizeof *P->slots);
    P->events = calloc((size_t)P->nplan, sizeof *P->events);
    if (!P->slots || !P->events)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    P->nslots = M * P->v;
    P->plan_m = M;
    return DT_OK;
}

/* Wait for every request still pending and give every arena back (after an
 * error too: no buffer the engine may still write stays in use). */
static dt_status pipe_step(dt_strategy *s, int64_t step, float lr, dt_next_batch_fn next, void *user,
                           dt_step_stats *st)
{
    pipe_state *P = s->impl;
    int M = s->cfg.micro_batches;
    DT_CHECK(dt__pipe_take_batches(P, M, next, user));
    if (!P->agreed_any || !dt__pipe_same_shape(&P->agreed, &P->x_shape)) { /* new input shape: boundaries agree again */
        memset(P->known, 0, (size_t)(P->nvs + 1) * sizeof *P->known);
        P->agreed = P->x_shape;
        P->agreed_any = true;
    }
    if ((int64_t)M * P->nvs * PIPE_TAG_KINDS > DT_TAG_MAX)
        return dt__fail(DT_ERR_INVALID, "pipeline: %d micro-batches x %d stages are too many to tag", M, P->nvs);
    DT_CHECK(plan_for(P, M));
    P->wait_s = 0;
    float loss = 0;
    dt_status rs = dt__pipe_drain(P, dt__pipe_run_schedule(P, s, step, &loss, st));
    P->nevents = P->nplan;
    DT_CHECK(rs);
    /* The loss is the last stage's: every rank of the pipeline reports it. */
    loss /= (float)M;
    DT_CHECK(dt_broadcast(&loss, 1, DT_F32, P->p - 1, P->pc.pp));
    st->loss = loss;
    double c0 = 0, e0 = 0;
    DT_CHECK(P->sync.ops->update(P->sync.impl, s, P->pc.pp, P->tied, lr, &st->grad_norm, &c0, &e0));
    st->comm_s = c0 + P->wait_s; /* the stages' messages count as communication (waiting for them: the bubble too) */
    st->exposed_s = e0 + P->wait_s;
    return DT_OK;
}

static dt_status pipe_sync(dt_strategy *s)
{
    pipe_state *P = s->impl;
    return P->sync.ops->sync ? P->sync.ops->sync(P->sync.impl) : DT_OK;
}

static size_t pipe_memory(const dt_strategy *s, size_t *buffers)
{
    const pipe_state *P = s->impl;
    return P->sync.ops->memory ? P->sync.ops->memory(P->sync.impl, buffers) : 0;
}

static void pipe_destroy(dt_strategy *s)
{
    pipe_state *P = s->impl;
    if (!P)
        return;
    if (P->slots)
        dt__pipe_drain(P, DT_OK);
    for (int i = 0; i < P->npool; i++)
        dt_arena_destroy(P->pool[i]);
    dt__dp_sync_destroy(&P->sync);
    if (P->tied)
        dt_comm_destroy(P->tied);
    if (P->link)
        dt_comm_destroy(P->link);
    free(P->pool);
    free(P->plan);
    free(P->slots);
    free(P->events);
    free(P->xs);
    free(P->ys);
    free(P->bshape);
    free(P->known);
    free(P->vs_lo);
    free(P->vs_hi);
    free(P);
}

static const dt__strategy_ops pipe_ops = {
    .name = "pipeline", .step = pipe_step, .sync = pipe_sync, .memory = pipe_memory, .destroy = pipe_destroy};

int dt_strategy_pipeline_timeline(const dt_strategy *s, const dt_pipe_event **out)
{
    if (!s || s->ops != &pipe_ops) {
        *out = NULL;
        return 0;
    }
    const pipe_state *P = s->impl;
    *out = P->events;
    return P->nevents;
}

/* Every rank's chunks, gathered: virtual stage b must end where b + 1 begins. */
static dt_status check_layout(pipe_state *P, dt_model *m)
{
    int n = 2 * P->v, *all = malloc((size_t)(n * P->p) * sizeof *all), mine[2 * 64];
    if (!all)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int c = 0; c < P->v; c++) {
        mine[2 * c] = P->vs_lo[c];
        mine[2 * c + 1] = P->vs_hi[c];
    }
    dt_status s = dt_allgather(mine, all, (size_t)n, DT_I32, P->pc.pp);
    int total = dt_model_whole_blocks(m);
    for (int b = 0; s == DT_OK && b < P->nvs; b++) {
        int rank = b % P->p, c = b / P->p, lo = all[rank * n + 2 * c], hi = all[rank * n + 2 * c + 1];
        int want_lo = b == 0 ? 0 : all[((b - 1) % P->p) * n + 2 * ((b - 1) / P->p) + 1];
        if (lo != want_lo || (b == P->nvs - 1 && hi != total))
            s = dt__fail(DT_ERR_INVALID, "pipeline: virtual stage %d (rank %d, chunk %d) holds blocks [%d, %d), but "
                         "the stage before it ends at block %d of %d: build every rank's model with "
                         "dt_pipeline_stage_create and the same p and v", b, rank, c, lo, hi, want_lo, total);
    }
    free(all);
    return s;
}

/* The stages that hold a copy of a shared parameter whose users live on
 * different ranks (GPT's wte: the first and the last) reduce between them. */
static dt_status make_tied(pipe_state *P, dt_model *m)
{
    const dt_shared_param *sh;
    int n = dt_model_shared_params(m, &sh), color = DT_UNDEFINED;
    for (int k = 0; k < n; k++) {
        bool first = false, last = false;
        for (int c = 0; c < P->v; c++) {
            first |= sh[k].first_block >= P->vs_lo[c] && sh[k].first_block < P->vs_hi[c];
            last |= sh[k].last_block >= P->vs_lo[c] && sh[k].last_block < P->vs_hi[c];
        }
        if (first != last)
            color = 0;
    }
    dt_comm *c = NULL;
    DT_CHECK(dt_comm_split(P->pc.pp, color, P->r, &c));
    P->tied = c;
    return DT_OK;
}

dt_status dt_strategy_pipeline_create(dt_model *m, dt_optimizer *o, const dt_pipeline_config *pc,
                                      const dt_strategy_config *cfg, dt_strategy **out)
{
    if (!pc || !pc->pp || !out)
        return dt__fail(DT_ERR_INVALID, "strategy pipeline: %s is NULL", !pc ? "the pipeline config" : !out ? "out"
                                                                                                      : "the pipeline group");
    if (pc->schedule < DT_PIPE_GPIPE || pc->schedule > DT_PIPE_INTERLEAVED)
        return dt__fail(DT_ERR_INVALID, "strategy pipeline: schedule %d is not one of gpipe, 1f1b, interleaved",
                        (int)pc->schedule);
    int v = pc->schedule == DT_PIPE_INTERLEAVED ? pc->virtual_stages : 1;
    if (v < 1 || v > 64 || (pc->schedule == DT_PIPE_INTERLEAVED && v < 2))
        return dt__fail(DT_ERR_INVALID, "strategy pipeline: %d virtual stages (interleaved: 2 to 64)", v);
    if (m && dt_model_chunks(m) != v)
        return dt__fail(DT_ERR_INVALID, "strategy pipeline: the model holds %d chunks, the schedule wants %d",
                        dt_model_chunks(m), v);
    dt_strategy *s = NULL;
    DT_CHECK(dt__strategy_new(&pipe_ops, sizeof(pipe_state), m, o, cfg, &s));
    pipe_state *P = s->impl;
    dt_status st = DT_OK;
    P->pc = *pc;
    P->p = dt_comm_size(pc->pp);
    P->r = dt_comm_rank(pc->pp);
    P->v = v;
    P->nvs = P->p * v;
    if (st == DT_OK && (!(P->vs_lo = calloc((size_t)v, sizeof(int))) || !(P->vs_hi = calloc((size_t)v, sizeof(int))) ||
                        !(P->bshape = calloc((size_t)P->nvs + 1, sizeof *P->bshape)) ||
                        !(P->known = calloc((size_t)P->nvs + 1, sizeof *P->known))))
        st = dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int c = 0; st == DT_OK && c < v; c++)
        dt_model_chunk_range(m, c, &P->vs_lo[c], &P->vs_hi[c]);
    if (st == DT_OK)
        st = check_layout(P, m);
    if (st == DT_OK)
        st = dt_comm_split(pc->pp, 0, P->r, &P->link);
    if (st == DT_OK)
        st = make_tied(P, m);
    if (st == DT_OK) /* the data-parallel half (common/dp_sync.h) */
        st = pc->zero_stage > 0 ? dt__dp_sync_zero(m, o, pc->dp, pc->zero_stage, pc->pp, cfg, &P->sync)
                                : dt__dp_sync_allreduce(m, pc->dp, cfg, &P->sync);
    if (st == DT_OK && pc->dp && dt_comm_size(pc->dp) > 1)
        s->key_group = (uint32_t)dt_comm_rank(pc->dp);
    return dt__strategy_finish(s, st, out);
}
