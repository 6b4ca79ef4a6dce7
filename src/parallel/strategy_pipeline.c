/* Pipeline parallelism as a strategy: this rank's chunks of blocks run the
 * schedule's forwards and backwards (pipe_plan.c), one context and one arena
 * per micro-batch in flight, activations and their gradients moving to the
 * neighbouring ranks with nonblocking point-to-point on a communicator of
 * their own.  After the schedule: the gradients averaged over the micro-
 * batches and the data-parallel replicas (dt_ddp, started during the last
 * backward), the tied parameters' copies summed between the stages that
 * hold them, the norm over every stage, the update.
 *
 * Messages: between virtual stages b-1 and b (the boundary b) micro-batch
 * i's activation travels forward and its gradient back, with tags naming
 * (kind, i, b), so they match whatever order the ranks post them in.
 * Shapes: boundary b's shape is sent once, before the first micro-batch's
 * activation, and again only when the input's shape changes; every rank
 * sees the same inputs, so all know when a shape message comes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "dtrain/pipeline.h"
#include "parallel/strategy_internal.h"

enum { TAG_ACT, TAG_GRAD, TAG_SHAPE, TAG_KINDS };

/* One micro-batch on one chunk, from its forward to the end of its backward. */
typedef struct {
    dt_arena *arena;
    dt_ctx ctx;
    dt_tensor in, out, dy; /* dy: the loss gradient (last stage) or the received output gradient */
    dt_request *in_req, *dy_req, *send_out, *send_dx;
    bool live;     /* forward began, arena held */
    bool finished; /* backward ran; the arena goes back once the gradient has left */
} slot;

typedef struct {
    dt_pipeline_config pc;
    int p, v, r, nvs;
    int *vs_lo, *vs_hi; /* per local chunk: the whole model's block range */
    dt_comm *link;      /* point to point between the stages: a copy of pp */
    dt_comm *tied;      /* the stages holding a copy of a shared parameter (NULL: none) */
    dt_ddp *ddp;
    dt_pipe_action *plan;
    int nplan, plan_m;
    slot *slots; /* [micro * v + chunk] */
    int nslots;
    dt_arena **pool; /* arenas not in use */
    int npool, cap_pool;
    /* the step's micro-batches */
    float *xs;
    int32_t *ys;
    size_t xs_cap, ys_cap;
    int64_t x_numel, y_count;
    dt_tensor x_shape; /* shape of each micro-batch's input (data unused) */
    /* boundary shapes: the input shape of virtual stage b, for the inputs of shape `agreed` */
    dt_tensor *bshape;
    bool *known;
    dt_tensor agreed;
    bool agreed_any;
    dt_pipe_event *events;
    int nevents;
    double wait_s;
} pipe;

static int vstage(const pipe *P, int chunk) { return chunk * P->p + P->r; }
static bool is_first(const pipe *P, int chunk) { return P->vs_lo[chunk] == 0; }
static bool is_last(const pipe *P, int chunk, const dt_model *m) { return P->vs_hi[chunk] == dt_model_whole_blocks(m); }
static int prev_rank(const pipe *P) { return (P->r - 1 + P->p) % P->p; }
static int next_rank(const pipe *P) { return (P->r + 1) % P->p; }
static int tag_of(const pipe *P, int kind, int micro, int boundary) { return (micro * P->nvs + boundary) * TAG_KINDS + kind; }

static bool same_shape(const dt_tensor *a, const dt_tensor *b)
{
    if (a->ndim != b->ndim)
        return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i])
            return false;
    return true;
}

static void format_shape(const dt_tensor *t, char *buf, size_t len)
{
    int n = snprintf(buf, len, "[");
    for (int i = 0; i < t->ndim && n > 0 && (size_t)n < len; i++)
        n += snprintf(buf + n, len - (size_t)n, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, "]");
}

/* ---- arenas: a pool, one per micro-batch in flight ---- */

static dt_status arena_take(pipe *P, dt_arena **out)
{
    if (P->npool > 0) {
        *out = P->pool[--P->npool];
        return DT_OK;
    }
    return dt_arena_create(out);
}

static dt_status arena_give(pipe *P, dt_arena *a)
{
    if (P->npool == P->cap_pool) {
        int cap = P->cap_pool ? 2 * P->cap_pool : 8;
        dt_arena **grown = realloc(P->pool, (size_t)cap * sizeof *grown);
        if (!grown) {
            dt_arena_destroy(a);
            return dt__fail(DT_ERR_NOMEM, "out of memory");
        }
        P->pool = grown;
        P->cap_pool = cap;
    }
    dt_arena_reset(a);
    P->pool[P->npool++] = a;
    return DT_OK;
}

/* Wait for a request (freeing it); a receive must have brought `want` floats. */
static dt_status finish(dt_request **req, size_t want, const char *what, int peer)
{
    if (!*req)
        return DT_OK;
    size_t got = 0;
    dt_status s = dt_wait(*req, &got);
    *req = NULL;
    if (s != DT_OK)
        return dt__fail(s, "pipeline: %s (stage rank %d): %s", what, peer, dt_last_error());
    if (want && got != want)
        return dt__fail(DT_ERR_INVALID, "pipeline: %s from stage rank %d: %zu values, expected %zu", what, peer, got,
                        want);
    return DT_OK;
}

/* Release a slot whose backward ran: its sends must be done first. */
static dt_status slot_release(pipe *P, slot *sl)
{
    dt_status s = finish(&sl->send_out, 0, "sending an activation", next_rank(P));
    dt_status s2 = finish(&sl->send_dx, 0, "sending a gradient", prev_rank(P));
    if (sl->live)
        arena_give(P, sl->arena);
    sl->live = false;
    sl->arena = NULL;
    return s != DT_OK ? s : s2;
}

/* ---- receives, posted ahead when the shape is known ---- */

static slot *slot_of(pipe *P, int micro, int chunk) { return &P->slots[micro * P->v + chunk]; }

static dt_status slot_open(pipe *P, dt_strategy *s, int64_t step, int micro, int chunk)
{
    slot *sl = slot_of(P, micro, chunk);
    if (sl->live)
        return DT_OK;
    DT_CHECK(arena_take(P, &sl->arena));
    sl->live = true;
    sl->ctx = (dt_ctx){.arena = sl->arena,
                       .key = {s->cfg.seed, (uint64_t)step, (uint32_t)micro, s->key_group},
                       .training = true};
    return DT_OK;
}

/* Post the receive action a needs (a forward's input from the previous
 * stage, a backward's output gradient from the next), when its shape is
 * known and it is not posted yet. */
static dt_status post_receive(pipe *P, dt_strategy *s, int64_t step, const dt_pipe_action *a)
{
    int c = a->chunk, b = vstage(P, c);
    slot *sl = slot_of(P, a->micro, c);
    if (a->kind == 'F') {
        if (is_first(P, c) || sl->in_req || !P->known[b])
            return DT_OK;
        DT_CHECK(slot_open(P, s, step, a->micro, c));
        sl->in = P->bshape[b];
        if (!(sl->in.data = dt_arena_alloc(sl->arena, dt_tensor_numel(&sl->in))))
            return dt__fail(DT_ERR_NOMEM, "pipeline: out of activation memory");
        return dt_irecv(sl->in.data, (size_t)dt_tensor_numel(&sl->in), DT_F32, prev_rank(P),
                        tag_of(P, TAG_ACT, a->micro, b), P->link, &sl->in_req);
    }
    if (is_last(P, c, s->model) || sl->dy_req || !sl->live || !sl->out.data)
        return DT_OK;
    sl->dy = sl->out;
    if (!(sl->dy.data = dt_arena_alloc(sl->arena, dt_tensor_numel(&sl->out))))
        return dt__fail(DT_ERR_NOMEM, "pipeline: out of activation memory");
    return dt_irecv(sl->dy.data, (size_t)dt_tensor_numel(&sl->dy), DT_F32, next_rank(P),
                    tag_of(P, TAG_GRAD, a->micro, b + 1), P->link, &sl->dy_req);
}

/* Boundary b's shape, by message from the previous stage. */
static dt_status receive_shape(pipe *P, int b)
{
    int64_t h[1 + DT_MAX_DIMS];
    size_t got = 0;
    dt_status s = dt_recv(h, 1 + DT_MAX_DIMS, DT_I64, prev_rank(P), tag_of(P, TAG_SHAPE, 0, b), P->link, &got);
    if (s != DT_OK)
        return dt__fail(s, "pipeline: the activation shape from stage rank %d: %s", prev_rank(P), dt_last_error());
    if (got != 1 + DT_MAX_DIMS || h[0] < 1 || h[0] > DT_MAX_DIMS)
        return dt__fail(DT_ERR_INVALID, "pipeline: stage rank %d sent a malformed activation shape", prev_rank(P));
    dt_tensor t = {NULL, (int)h[0], {0}};
    for (int i = 0; i < t.ndim; i++) {
        if (h[1 + i] < 1 || h[1 + i] > ((int64_t)1 << 40))
            return dt__fail(DT_ERR_INVALID, "pipeline: stage rank %d sent a malformed activation shape", prev_rank(P));
        t.shape[i] = h[1 + i];
    }
    P->bshape[b] = t;
    P->known[b] = true;
    return DT_OK;
}

static dt_status send_shape(pipe *P, int b, const dt_tensor *out)
{
    int64_t h[1 + DT_MAX_DIMS] = {out->ndim};
    for (int i = 0; i < out->ndim; i++)
        h[1 + i] = out->shape[i];
    P->bshape[b] = *out;
    P->bshape[b].data = NULL;
    P->known[b] = true;
    dt_status s = dt_send(h, 1 + DT_MAX_DIMS, DT_I64, next_rank(P), tag_of(P, TAG_SHAPE, 0, b), P->link);
    return s == DT_OK ? s : dt__fail(s, "pipeline: sending the activation shape to stage rank %d: %s", next_rank(P),
                                     dt_last_error());
}

/* ---- the actions ---- */

static dt_status run_forward(pipe *P, dt_strategy *s, int64_t step, const dt_pipe_action *a, float *loss,
                             dt_pipe_event *ev)
{
    int c = a->chunk, b = vstage(P, c), i = a->micro;
    slot *sl = slot_of(P, i, c);
    DT_CHECK(slot_open(P, s, step, i, c));
    if (is_first(P, c)) {
        sl->in = P->x_shape;
        sl->in.data = P->xs + (size_t)i * (size_t)P->x_numel;
    } else {
        if (!P->known[b])
            DT_CHECK(receive_shape(P, b));
        DT_CHECK(post_receive(P, s, step, a));
        int64_t t0 = dt__now_ns();
        DT_CHECK(finish(&sl->in_req, (size_t)dt_tensor_numel(&sl->in), "receiving an activation", prev_rank(P)));
        P->wait_s += (double)(dt__now_ns() - t0) / 1e9;
    }
    ev->ready_s = (double)dt__now_ns() / 1e9;
    DT_CHECK(dt_model_forward_chunk(s->model, c, &sl->ctx, &sl->in, &sl->out));
    if (is_last(P, c, s->model)) {
        int64_t rows = dt_tensor_numel(&sl->out) / sl->out.shape[sl->out.ndim - 1];
        if (rows != P->y_count)
            return dt__fail(DT_ERR_INVALID, "pipeline: the model gives %lld output rows, the micro-batch %lld targets",
                            (long long)rows, (long long)P->y_count);
        sl->dy = sl->out;
        if (!(sl->dy.data = dt_arena_alloc(sl->arena, dt_tensor_numel(&sl->out))))
            return dt__fail(DT_ERR_NOMEM, "pipeline: out of activation memory");
        float l = 0;
        DT_CHECK(dt_model_loss(s->model, &sl->out, P->ys + (size_t)i * (size_t)P->y_count, &l, &sl->dy));
        *loss += l;
        return DT_OK;
    }
    if (!P->known[b + 1])
        DT_CHECK(send_shape(P, b + 1, &sl->out));
    else if (!same_shape(&sl->out, &P->bshape[b + 1])) {
        char was[64], now[64];
        format_shape(&P->bshape[b + 1], was, sizeof was);
        format_shape(&sl->out, now, sizeof now);
        return dt__fail(DT_ERR_INVALID, "pipeline: stage %d's output changed shape from %s to %s within a step", b,
                        was, now);
    }
    return dt_isend(sl->out.data, (size_t)dt_tensor_numel(&sl->out), DT_F32, next_rank(P),
                    tag_of(P, TAG_ACT, i, b + 1), P->link, &sl->send_out);
}

static dt_status run_backward(pipe *P, dt_strategy *s, int64_t step, const dt_pipe_action *a, dt_pipe_event *ev)
{
    int c = a->chunk, b = vstage(P, c), i = a->micro;
    slot *sl = slot_of(P, i, c);
    if (!sl->live)
        return dt__fail(DT_ERR_INVALID, "pipeline: backward of micro-batch %d on chunk %d before its forward", i, c);
    if (!is_last(P, c, s->model)) {
        DT_CHECK(post_receive(P, s, step, a));
        int64_t t0 = dt__now_ns();
        DT_CHECK(finish(&sl->dy_req, (size_t)dt_tensor_numel(&sl->dy), "receiving a gradient", next_rank(P)));
        P->wait_s += (double)(dt__now_ns() - t0) / 1e9;
    }
    ev->ready_s = (double)dt__now_ns() / 1e9;
    dt_tensor dx = {0};
    DT_CHECK(dt_model_backward_chunk(s->model, c, &sl->ctx, &sl->dy, is_first(P, c) ? NULL : &dx));
    if (is_first(P, c))
        return DT_OK;
    return dt_isend(dx.data, (size_t)dt_tensor_numel(&dx), DT_F32, prev_rank(P), tag_of(P, TAG_GRAD, i, b), P->link,
                    &sl->send_dx);
}

/* ---- the step ---- */

/* Every micro-batch of the step, copied: inputs where this rank holds the
 * first block, targets where it holds the last (each call of `next`
 * invalidates the one before). */
static dt_status take_batches(pipe *P, dt_strategy *s, int M, dt_next_batch_fn next, void *user)
{
    for (int i = 0; i < M; i++) {
        dt_micro_batch mb = {0};
        DT_CHECK(next(user, &mb));
        if (!mb.x.data || mb.x.ndim < 1 || mb.ntargets < 1 || !mb.targets)
            return dt__fail(DT_ERR_INVALID, "pipeline: micro-batch %d has %s", i,
                            !mb.x.data || mb.x.ndim < 1 ? "no input" : "no targets (ntargets)");
        if (i == 0) {
            P->x_shape = mb.x;
            P->x_shape.data = NULL;
            P->x_numel = dt_tensor_numel(&mb.x);
            P->y_count = mb.ntargets;
            size_t xn = (size_t)M * (size_t)P->x_numel, yn = (size_t)M * (size_t)P->y_count;
            if (xn > P->xs_cap) {
                float *g = realloc(P->xs, xn * sizeof *g);
                if (!g)
                    return dt__fail(DT_ERR_NOMEM, "out of memory");
                P->xs = g;
                P->xs_cap = xn;
            }
            if (yn > P->ys_cap) {
                int32_t *g = realloc(P->ys, yn * sizeof *g);
                if (!g)
                    return dt__fail(DT_ERR_NOMEM, "out of memory");
                P->ys = g;
                P->ys_cap = yn;
            }
        } else if (!same_shape(&mb.x, &P->x_shape) || mb.ntargets != P->y_count) {
            char a[64], b[64];
            format_shape(&P->x_shape, a, sizeof a);
            format_shape(&mb.x, b, sizeof b);
            return dt__fail(DT_ERR_INVALID, "pipeline: the micro-batches of one step differ: %s with %lld targets, "
                            "then %s with %lld", a, (long long)P->y_count, b, (long long)mb.ntargets);
        }
        memcpy(P->xs + (size_t)i * (size_t)P->x_numel, mb.x.data, (size_t)P->x_numel * sizeof(float));
        memcpy(P->ys + (size_t)i * (size_t)P->y_count, mb.targets, (size_t)P->y_count * sizeof(int32_t));
    }
    (void)s;
    return DT_OK;
}

static dt_status plan_for(pipe *P, int M)
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
static dt_status drain(pipe *P, dt_status s)
{
    for (int k = 0; k < P->nslots; k++) {
        slot *sl = &P->slots[k];
        dt_status w = finish(&sl->in_req, 0, "receiving an activation", prev_rank(P));
        dt_status w2 = finish(&sl->dy_req, 0, "receiving a gradient", next_rank(P));
        dt_status w3 = slot_release(P, sl);
        if (s == DT_OK)
            s = w != DT_OK ? w : w2 != DT_OK ? w2 : w3;
        memset(sl, 0, sizeof *sl);
    }
    return s;
}

/* Give back the arenas of micro-batches whose backward ran and whose
 * gradient has left since (a shared-memory send completes when the
 * receiver takes it, which may be several actions later). */
static dt_status release_finished(pipe *P)
{
    for (int q = 0; q < P->nslots; q++) {
        slot *sl = &P->slots[q];
        if (!sl->live || !sl->finished)
            continue;
        int done = 1;
        if (sl->send_dx)
            DT_CHECK(dt_test(sl->send_dx, &done, NULL));
        if (done) {
            sl->send_dx = NULL;
            DT_CHECK(slot_release(P, sl));
        }
    }
    return DT_OK;
}

static size_t bytes_held(const pipe *P)
{
    size_t bytes = 0;
    for (int q = 0; q < P->nslots; q++)
        if (P->slots[q].live)
            bytes += dt_arena_bytes_in_use(P->slots[q].arena);
    return bytes;
}

static dt_status run_schedule(pipe *P, dt_strategy *s, int64_t step, float *loss, dt_step_stats *st)
{
    int live = 0;
    size_t held = 0;
    int last_b = -1;
    for (int k = 0; k < P->nplan; k++)
        if (P->plan[k].kind == 'B')
            last_b = k;
    for (int k = 0; k < P->nplan; k++) {
        const dt_pipe_action *a = &P->plan[k];
        dt_pipe_event *ev = &P->events[k];
        ev->action = *a;
        ev->begin_s = (double)dt__now_ns() / 1e9;
        DT_CHECK(release_finished(P));
        if (k + 1 < P->nplan) /* the next action's message may arrive while this one computes */
            DT_CHECK(post_receive(P, s, step, &P->plan[k + 1]));
        if (a->kind == 'F') {
            DT_CHECK(run_forward(P, s, step, a, loss, ev));
            live++;
            st->micro_in_flight = live > st->micro_in_flight ? live : st->micro_in_flight;
        } else {
            if (P->ddp)
                dt_ddp_set_sync(P->ddp, k == last_b); /* buckets start during the last backward */
            DT_CHECK(run_backward(P, s, step, a, ev));
            live--;
            slot_of(P, a->micro, a->chunk)->finished = true;
        }
        size_t bytes = bytes_held(P); /* after a backward too: its scratch is still in the arena */
        held = bytes > held ? bytes : held;
        DT_CHECK(release_finished(P));
        ev->end_s = (double)dt__now_ns() / 1e9;
        st->busy_s += ev->end_s - ev->ready_s;
    }
    st->activation_bytes = held;
    return DT_OK;
}

static dt_status pipe_step(dt_strategy *s, int64_t step, float lr, dt_next_batch_fn next, void *user,
                           dt_step_stats *st)
{
    pipe *P = s->impl;
    int M = s->cfg.micro_batches;
    DT_CHECK(take_batches(P, s, M, next, user));
    if (!P->agreed_any || !same_shape(&P->agreed, &P->x_shape)) { /* new input shape: boundaries agree again */
        memset(P->known, 0, (size_t)(P->nvs + 1) * sizeof *P->known);
        P->agreed = P->x_shape;
        P->agreed_any = true;
    }
    if ((int64_t)M * P->nvs * TAG_KINDS > DT_TAG_MAX)
        return dt__fail(DT_ERR_INVALID, "pipeline: %d micro-batches x %d stages are too many to tag", M, P->nvs);
    DT_CHECK(plan_for(P, M));
    P->wait_s = 0;
    float loss = 0;
    dt_status rs = drain(P, run_schedule(P, s, step, &loss, st));
    P->nevents = P->nplan;
    DT_CHECK(rs);
    /* The loss is the last stage's: every rank of the pipeline reports it. */
    loss /= (float)M;
    DT_CHECK(dt_broadcast(&loss, 1, DT_F32, P->p - 1, P->pc.pp));
    st->loss = loss;
    dt_params *p = dt_model_params(s->model);
    double c0 = 0, e0 = 0;
    if (P->ddp) {
        DT_CHECK(dt_ddp_finish(P->ddp)); /* the mean over micro-batches and replicas */
        dt_ddp_last_timing(P->ddp, &c0, &e0);
    } else if (M > 1)
        dt_vec_scale(dt_params_grads(p), 1.0f / (float)M, dt_params_numel(p));
    st->comm_s = c0;
    st->exposed_s = e0 + P->wait_s;
    DT_CHECK(dt_params_reduce_tp_partial(p, s->cfg.tp));
    if (P->tied)
        DT_CHECK(dt_model_reduce_shared(s->model, P->tied));
    DT_CHECK(dt_clip_grad_norm_stages(s->model, s->cfg.grad_clip, s->cfg.tp, P->pc.pp, &st->grad_norm));
    return dt_optimizer_step(s->opt, dt_params_values(p), dt_params_grads(p), dt_params_numel(p), lr);
}

static void pipe_destroy(dt_strategy *s)
{
    pipe *P = s->impl;
    if (!P)
        return;
    if (P->slots)
        drain(P, DT_OK);
    for (int i = 0; i < P->npool; i++)
        dt_arena_destroy(P->pool[i]);
    dt_ddp_destroy(P->ddp);
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

static void pipe_timing(const dt_strategy *s, double *comm, double *exposed)
{
    (void)s;
    *comm = *exposed = 0; /* reported by the step itself */
}

static const dt__strategy_ops pipe_ops = {.name = "pipeline", .step = pipe_step, .timing = pipe_timing, .destroy = pipe_destroy};

int dt_strategy_pipeline_timeline(const dt_strategy *s, const dt_pipe_event **out)
{
    if (!s || s->ops != &pipe_ops) {
        *out = NULL;
        return 0;
    }
    const pipe *P = s->impl;
    *out = P->events;
    return P->nevents;
}

/* Every rank's chunks, gathered: virtual stage b must end where b + 1 begins. */
static dt_status check_layout(pipe *P, dt_model *m)
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
static dt_status make_tied(pipe *P, dt_model *m)
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
    dt_strategy *s = calloc(1, sizeof *s);
    pipe *P = calloc(1, sizeof *P);
    if (!s || !P) {
        free(s);
        free(P);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    s->impl = P;
    s->ops = &pipe_ops;
    dt_status st = dt__strategy_init(s, m, o, cfg);
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
    if (st == DT_OK && pc->dp && dt_comm_size(pc->dp) > 1) {
        st = dt_ddp_create(pc->dp, dt_model_params(m), &cfg->ddp, &P->ddp);
        if (st == DT_OK)
            dt_ddp_set_accumulation(P->ddp, cfg->micro_batches);
        s->key_group = (uint32_t)dt_comm_rank(pc->dp);
    }
    if (st != DT_OK) {
        dt_strategy_destroy(s);
        return st;
    }
    *out = s;
    return DT_OK;
}
