/* The pipeline's executor: each micro-batch in flight on a chunk gets a
 * context and an arena of its own (from a pool), so the saved tensors of
 * several coexist and a backward gives its arena back; the activation to
 * the next stage and the gradient to the previous one go out with
 * dt_isend; the receive an action needs is posted one action ahead.
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
#include "base/trace.h"
#include "parallel/pipe/internal.h"

static bool is_last(const pipe_state *P, int chunk, const dt_model *m) { return P->vs_hi[chunk] == dt_model_whole_blocks(m); }
static int prev_rank(const pipe_state *P) { return (P->r - 1 + P->p) % P->p; }
static int next_rank(const pipe_state *P) { return (P->r + 1) % P->p; }
static int tag_of(const pipe_state *P, int kind, int micro, int boundary) { return (micro * P->nvs + boundary) * PIPE_TAG_KINDS + kind; }

bool dt__pipe_same_shape(const dt_tensor *a, const dt_tensor *b)
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

/* A new arena is on the model's device: the activations, the received
 * inputs and gradients live where the layers read them. */
static dt_status arena_take(pipe_state *P, const dt_model *m, dt_arena **out)
{
    if (P->npool > 0) {
        *out = P->pool[--P->npool];
        return DT_OK;
    }
    return dt_arena_create_on(dt_model_device(m), out);
}

static dt_status arena_give(pipe_state *P, dt_arena *a)
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
    int64_t t0 = dt__trace_begin(); /* the timeline: how long this stage waited for the transfer */
    dt_status s = dt_wait(*req, &got);
    *req = NULL;
    if (t0)
        dt__trace_end("pipeline", what, t0, "\"peer_stage_rank\":%d,\"bytes\":%zu", peer, got * sizeof(float));
    if (s != DT_OK)
        return dt__fail(s, "pipeline: %s (stage rank %d): %s", what, peer, dt_last_error());
    if (want && got != want)
        return dt__fail(DT_ERR_INVALID, "pipeline: %s from stage rank %d: %zu values, expected %zu", what, peer, got,
                        want);
    return DT_OK;
}

/* Release a slot whose backward ran: its sends must be done first. */
static dt_status slot_release(pipe_state *P, pipe_slot *sl)
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

static pipe_slot *slot_of(pipe_state *P, int micro, int chunk) { return &P->slots[micro * P->v + chunk]; }

static dt_status slot_open(pipe_state *P, dt_strategy *s, int64_t step, int micro, int chunk)
{
    pipe_slot *sl = slot_of(P, micro, chunk);
    if (sl->live)
        return DT_OK;
    DT_CHECK(arena_take(P, s->model, &sl->arena));
    sl->live = true;
    sl->ctx = (dt_ctx){.arena = sl->arena,
                       .key = {s->cfg.seed, (uint64_t)step, (uint32_t)micro, s->key_group},
                       .training = true,
                       .reclaim = true}; /* the slot's arena is its own */
    return DT_OK;
}

/* Post the receive action a needs (a forward's input from the previous
 * stage, a backward's output gradient from the next), when its shape is
 * known and it is not posted yet. */
static dt_status post_receive(pipe_state *P, dt_strategy *s, int64_t step, const dt_pipe_action *a)
{
    int c = a->chunk, b = dt__pipe_vstage(P, c);
    pipe_slot *sl = slot_of(P, a->micro, c);
    if (a->kind == 'F') {
        if (dt__pipe_first(P, c) || sl->in_req || !P->known[b])
            return DT_OK;
        DT_CHECK(slot_open(P, s, step, a->micro, c));
        sl->in = P->bshape[b];
        if (!(sl->in.data = dt_arena_alloc(sl->arena, dt_tensor_numel(&sl->in))))
            return dt__fail(DT_ERR_NOMEM, "pipeline: out of activation memory");
        return dt_irecv(sl->in.data, (size_t)dt_tensor_numel(&sl->in), DT_F32, prev_rank(P),
                        tag_of(P, PIPE_TAG_ACT, a->micro, b), P->link, &sl->in_req);
    }
    if (is_last(P, c, s->model) || sl->dy_req || !sl->live || !sl->out.data)
        return DT_OK;
    sl->dy = sl->out;
    if (!(sl->dy.data = dt_arena_alloc(sl->arena, dt_tensor_numel(&sl->out))))
        return dt__fail(DT_ERR_NOMEM, "pipeline: out of activation memory");
    return dt_irecv(sl->dy.data, (size_t)dt_tensor_numel(&sl->dy), DT_F32, next_rank(P),
                    tag_of(P, PIPE_TAG_GRAD, a->micro, b + 1), P->link, &sl->dy_req);
}

/* Boundary b's shape, by message from the previous stage. */
static dt_status receive_shape(pipe_state *P, int b)
{
    int64_t h[1 + DT_MAX_DIMS];
    size_t got = 0;
    dt_status s = dt_recv(h, 1 + DT_MAX_DIMS, DT_I64, prev_rank(P), tag_of(P, PIPE_TAG_SHAPE, 0, b), P->link, &got);
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

static dt_status send_shape(pipe_state *P, int b, const dt_tensor *out)
{
    int64_t h[1 + DT_MAX_DIMS] = {out->ndim};
    for (int i = 0; i < out->ndim; i++)
        h[1 + i] = out->shape[i];
    P->bshape[b] = *out;
    P->bshape[b].data = NULL;
    P->known[b] = true;
    dt_status s = dt_send(h, 1 + DT_MAX_DIMS, DT_I64, next_rank(P), tag_of(P, PIPE_TAG_SHAPE, 0, b), P->link);
    return s == DT_OK ? s : dt__fail(s, "pipeline: sending the activation shape to stage rank %d: %s", next_rank(P),
                                     dt_last_error());
}

/* ---- the actions ---- */

static dt_status run_forward(pipe_state *P, dt_strategy *s, int64_t step, const dt_pipe_action *a, float *loss,
                             dt_pipe_event *ev)
{
    int c = a->chunk, b = dt__pipe_vstage(P, c), i = a->micro;
    pipe_slot *sl = slot_of(P, i, c);
    DT_CHECK(slot_open(P, s, step, i, c));
    if (dt__pipe_first(P, c)) {
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
    else if (!dt__pipe_same_shape(&sl->out, &P->bshape[b + 1])) {
        char was[64], now[64];
        format_shape(&P->bshape[b + 1], was, sizeof was);
        format_shape(&sl->out, now, sizeof now);
        return dt__fail(DT_ERR_INVALID, "pipeline: stage %d's output changed shape from %s to %s within a step", b,
                        was, now);
    }
    return dt_isend(sl->out.data, (size_t)dt_tensor_numel(&sl->out), DT_F32, next_rank(P),
                    tag_of(P, PIPE_TAG_ACT, i, b + 1), P->link, &sl->send_out);
}

static dt_status run_backward(pipe_state *P, dt_strategy *s, int64_t step, const dt_pipe_action *a, dt_pipe_event *ev)
{
    int c = a->chunk, b = dt__pipe_vstage(P, c), i = a->micro;
    pipe_slot *sl = slot_of(P, i, c);
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
    DT_CHECK(dt_model_backward_chunk(s->model, c, &sl->ctx, &sl->dy, dt__pipe_first(P, c) ? NULL : &dx));
    if (dt__pipe_first(P, c))
        return DT_OK;
    return dt_isend(dx.data, (size_t)dt_tensor_numel(&dx), DT_F32, prev_rank(P), tag_of(P, PIPE_TAG_GRAD, i, b), P->link,
                    &sl->send_dx);
}

/* ---- the step ---- */

dt_status dt__pipe_take_batches(pipe_state *P, int M, dt_next_batch_fn next, void *user)
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
        } else if (!dt__pipe_same_shape(&mb.x, &P->x_shape) || mb.ntargets != P->y_count) {
            char a[64], b[64];
            format_shape(&P->x_shape, a, sizeof a);
            format_shape(&mb.x, b, sizeof b);
            return dt__fail(DT_ERR_INVALID, "pipeline: the micro-batches of one step differ: %s with %lld targets, "
                            "then %s with %lld", a, (long long)P->y_count, b, (long long)mb.ntargets);
        }
        memcpy(P->xs + (size_t)i * (size_t)P->x_numel, mb.x.data, (size_t)P->x_numel * sizeof(float));
        memcpy(P->ys + (size_t)i * (size_t)P->y_count, mb.targets, (size_t)P->y_count * sizeof(int32_t));
    }
    return DT_OK;
}

dt_status dt__pipe_drain(pipe_state *P, dt_status s)
{
    for (int k = 0; k < P->nslots; k++) {
        pipe_slot *sl = &P->slots[k];
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
static dt_status release_finished(pipe_state *P)
{
    for (int q = 0; q < P->nslots; q++) {
        pipe_slot *sl = &P->slots[q];
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

static size_t bytes_held(const pipe_state *P)
{
    size_t bytes = 0;
    for (int q = 0; q < P->nslots; q++)
        if (P->slots[q].live)
            bytes += dt_arena_bytes_in_use(P->slots[q].arena);
    return bytes;
}

dt_status dt__pipe_run_schedule(pipe_state *P, dt_strategy *s, int64_t step, float *loss, dt_step_stats *st)
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
            if (P->sync.ops->before_backward) /* data parallelism's buckets start during the last one */
                P->sync.ops->before_backward(P->sync.impl, k == last_b);
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

