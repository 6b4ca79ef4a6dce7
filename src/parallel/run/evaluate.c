/* dt_strategy_evaluate: loss and accuracy of held-out batches through
 * whatever the run split: a whole model, tensor-parallel shards (the
 * logits' slices gathered for the argmax) and pipeline stages (each batch's
 * forward flows through the stages; the last stage scores it and sends the
 * totals to stage 0, the lead's).  The lead's data-parallel replica
 * evaluates; under ZeRO-3 every rank does, as its forward gathers each
 * block's parameters from all of them. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "parallel/common/strategy.h"

enum { TAG_SHAPE = 50, TAG_DATA = 51, TAG_RESULT = 52 };

/* One batch forward through every chunk of m, in pipeline order: a chunk
 * that does not start the model takes its input from the previous stage, one
 * that does not end it hands its output on.  *scored: this rank holds the
 * model's last block, and *out is the model's output. */
static dt_status forward_through(dt_model *m, dt_comm *pp, dt_ctx *ctx, const dt_tensor *in, dt_tensor *out,
                                 bool *scored)
{
    int p = pp ? dt_comm_size(pp) : 1, r = pp ? dt_comm_rank(pp) : 0;
    *scored = false;
    if (!pp) {
        DT_CHECK(dt_model_forward(m, ctx, in, out));
        *scored = true;
        return DT_OK;
    }
    for (int c = 0; c < dt_model_chunks(m); c++) {
        int lo, hi;
        dt_model_chunk_range(m, c, &lo, &hi);
        dt_tensor x = *in, y;
        if (lo > 0) { /* shape, then values, from the stage before */
            int64_t h[1 + DT_MAX_DIMS];
            DT_CHECK(dt_recv(h, 1 + DT_MAX_DIMS, DT_I64, (r - 1 + p) % p, TAG_SHAPE, pp, NULL));
            if (h[0] < 1 || h[0] > DT_MAX_DIMS)
                return dt__fail(DT_ERR_PROTOCOL, "evaluation: stage %d sent a tensor of %lld dimensions",
                                (r - 1 + p) % p, (long long)h[0]);
            x.ndim = (int)h[0];
            for (int i = 0; i < x.ndim; i++)
                x.shape[i] = h[1 + i];
            if (!(x.data = dt_arena_alloc(ctx->arena, dt_tensor_numel(&x))))
                return dt__fail(DT_ERR_NOMEM, "evaluation: out of memory for stage %d's activations", r);
            DT_CHECK(dt_recv(x.data, (size_t)dt_tensor_numel(&x), DT_F32, (r - 1 + p) % p, TAG_DATA, pp, NULL));
        }
        DT_CHECK(dt_model_forward_chunk(m, c, ctx, &x, &y));
        if (hi == dt_model_whole_blocks(m)) {
            *out = y;
            *scored = true;
        } else {
            int64_t h[1 + DT_MAX_DIMS] = {y.ndim};
            for (int i = 0; i < y.ndim; i++)
                h[1 + i] = y.shape[i];
            DT_CHECK(dt_send(h, 1 + DT_MAX_DIMS, DT_I64, (r + 1) % p, TAG_SHAPE, pp));
            DT_CHECK(dt_send(y.data, (size_t)dt_tensor_numel(&y), DT_F32, (r + 1) % p, TAG_DATA, pp));
        }
    }
    return DT_OK;
}

/* The scored batch's loss and correct rows into t; *all grows to hold the
 * host's copy of the logits ([t][R][C] over a tensor-parallel group of t:
 * class k of row r at [k / C][r][k % C]). */
static dt_status score(dt_model *m, dt_comm *tp, const dt_tensor *out, const dt_micro_batch *mb, float **all,
                       dt_eval_totals *t)
{
    int tn = tp ? dt_comm_size(tp) : 1;
    float l = 0;
    DT_CHECK(dt_model_loss(m, out, mb->targets, &l, NULL));
    int64_t R = mb->ntargets, C = out->shape[out->ndim - 1]; /* C: this rank's classes */
    t->loss_sum += (double)l * (double)R;
    t->rows += R;
    const float *z = out->data;
    const dt_device *dev = dt_model_device(m);
    if (!dt_device_is_host(dev) || tn > 1) {
        /* on a device with tp: this rank's slice lands past the gathered ones */
        int64_t mine = !dt_device_is_host(dev) && tn > 1 ? tn * R * C : 0;
        float *grown = realloc(*all, (size_t)(mine + tn * R * C) * sizeof **all);
        if (!grown)
            return dt__fail(DT_ERR_NOMEM, "evaluation: out of memory for the logits");
        *all = grown;
        if (!dt_device_is_host(dev)) /* the logits to the host for the argmax */
            DT_CHECK(dt_device_download(dev, grown + mine, out->data, (size_t)(R * C) * sizeof *grown));
        if (tn > 1) /* the slices of every rank */
            DT_CHECK(dt_allgather(dt_device_is_host(dev) ? out->data : grown + mine, grown, (size_t)(R * C), DT_F32,
                                  tp));
        z = grown;
    }
    for (int64_t q = 0; q < R; q++) {
        int64_t best = 0;
        float bv = z[q * C];
        for (int64_t k = 1; k < C * tn; k++) {
            float v = z[((k / C) * R + q) * C + k % C];
            if (v > bv) {
                bv = v;
                best = k;
            }
        }
        t->correct += best == mb->targets[q];
    }
    return DT_OK;
}

dt_status dt_evaluate_batches(dt_model *m, dt_arena *arena, dt_comm *tp, dt_comm *pp, int64_t batches,
                              dt_next_batch_fn next, void *user, dt_eval_totals *out)
{
    if (!m || !arena || !next || !out)
        return dt__fail(DT_ERR_INVALID, "evaluate: %s is NULL", !m ? "the model" : !arena ? "the arena"
                        : !next ? "the batch source" : "out");
    memset(out, 0, sizeof *out);
    dt_status st = DT_OK;
    float *all = NULL;
    dt_eval_totals t = {0};
    for (int64_t b = 0; st == DT_OK && b < batches; b++) {
        dt_micro_batch mb = {0};
        if ((st = next(user, &mb)) != DT_OK || mb.ntargets == 0 || !mb.x.data)
            break;
        dt_arena_reset(arena);
        dt_ctx ctx = {.arena = arena, .reclaim = true}; /* forward only: each layer's activations freed after it */
        dt_tensor y;
        bool scored = false;
        if ((st = forward_through(m, pp, &ctx, &mb.x, &y, &scored)) != DT_OK)
            break;
        t.batches++;
        t.samples += mb.x.shape[0];
        if (scored)
            st = score(m, tp, &y, &mb, &all, &t);
    }
    free(all);
    if (st == DT_OK && pp && dt_comm_size(pp) > 1) { /* the last stage's totals to stage 0 */
        int p = dt_comm_size(pp), me = dt_comm_rank(pp);
        double res[3] = {t.loss_sum, t.correct, (double)t.rows};
        if (me == p - 1)
            st = dt_send(res, 3, DT_F64, 0, TAG_RESULT, pp);
        if (me == 0 && (st = dt_recv(res, 3, DT_F64, p - 1, TAG_RESULT, pp, NULL)) == DT_OK) {
            t.loss_sum = res[0];
            t.correct = res[1];
            t.rows = (int64_t)res[2];
        }
    }
    if (st == DT_OK)
        *out = t;
    return st;
}

dt_status dt_strategy_evaluate(dt_strategy *s, int64_t batches, dt_next_batch_fn next, void *user,
                               dt_eval_totals *out)
{
    if (!s || !s->run || !out)
        return dt__fail(DT_ERR_INVALID, "strategy_evaluate: %s", !s ? "the strategy is NULL"
                        : !s->run ? "the strategy was not built by dt_strategy_create" : "out is NULL");
    memset(out, 0, sizeof *out);
    dt__run *r = s->run;
    if (r->server || (dt_comm_rank(r->dp) != 0 && r->layout.zero_stage != 3))
        return DT_OK; /* the lead's replica evaluates */
    return dt_evaluate_batches(s->model, s->arena, r->tp, r->pp, batches, next, user, out);
}
