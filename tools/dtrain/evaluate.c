/* dtrain evaluation: loss and accuracy on the held-out split, for a whole
 * model, a tensor-parallel one (the logits' slices gathered for the argmax)
 * and a pipeline (each batch's forward flows through the stages; the last
 * stage scores it and sends the totals back to the others). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_source.h"
#include "dtrain_cli.h"

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
    if (!pp)
        return dt_model_forward(m, ctx, in, out) == DT_OK ? (*scored = true, DT_OK) : DT_ERR_INVALID;
    for (int c = 0; c < dt_model_chunks(m); c++) {
        int lo, hi;
        dt_model_chunk_range(m, c, &lo, &hi);
        dt_tensor x = *in, y;
        if (lo > 0) { /* shape, then values, from the stage before */
            int64_t h[1 + DT_MAX_DIMS];
            if (dt_recv(h, 1 + DT_MAX_DIMS, DT_I64, (r - 1 + p) % p, TAG_SHAPE, pp, NULL) != DT_OK)
                return DT_ERR_INVALID;
            if (h[0] < 1 || h[0] > DT_MAX_DIMS)
                return DT_ERR_INVALID;
            x.ndim = (int)h[0];
            for (int i = 0; i < x.ndim; i++)
                x.shape[i] = h[1 + i];
            if (!(x.data = dt_arena_alloc(ctx->arena, dt_tensor_numel(&x))) ||
                dt_recv(x.data, (size_t)dt_tensor_numel(&x), DT_F32, (r - 1 + p) % p, TAG_DATA, pp, NULL) != DT_OK)
                return DT_ERR_INVALID;
        }
        if (dt_model_forward_chunk(m, c, ctx, &x, &y) != DT_OK)
            return DT_ERR_INVALID;
        if (hi == dt_model_whole_blocks(m)) {
            *out = y;
            *scored = true;
        } else {
            int64_t h[1 + DT_MAX_DIMS] = {y.ndim};
            for (int i = 0; i < y.ndim; i++)
                h[1 + i] = y.shape[i];
            if (dt_send(h, 1 + DT_MAX_DIMS, DT_I64, (r + 1) % p, TAG_SHAPE, pp) != DT_OK ||
                dt_send(y.data, (size_t)dt_tensor_numel(&y), DT_F32, (r + 1) % p, TAG_DATA, pp) != DT_OK)
                return DT_ERR_INVALID;
        }
    }
    return DT_OK;
}

void dtrain_evaluate(const dtrain_config *c, dt_model *m, const data_source *d, dt_arena *arena, dt_comm *tp,
                     dt_comm *pp, eval_result *r)
{
    int t = tp ? dt_comm_size(tp) : 1;
    float *all = NULL; /* tensor parallel: every rank's slice of the logits, for the argmax */
    int64_t B = c->batch_size, F = d->features, per = d->gpt ? c->context : 1;
    float *x = malloc((size_t)(B * F) * sizeof *x);
    int32_t *y = malloc((size_t)(B * per) * sizeof *y);
    int64_t *idx = malloc((size_t)B * sizeof *idx);
    double total = 0, correct = 0;
    int64_t rows = 0, batches = 0, samples = 0;
    bool scored = false;
    for (int64_t start = 0; x && y && idx && start < d->eval_samples && batches < c->eval_batches; start += B) {
        int64_t n = d->eval_samples - start < B ? d->eval_samples - start : B;
        for (int64_t i = 0; i < n; i++)
            idx[i] = start + i;
        data_batch(d, 1, idx, n, x, y);
        dt_arena_reset(arena);
        dt_ctx ctx = {.arena = arena};
        dt_tensor in = dt_tensor_view(x, 2, (int64_t[]){n, d->gpt ? c->context : F}), out;
        float l = 0;
        if (forward_through(m, pp, &ctx, &in, &out, &scored) != DT_OK)
            break;
        batches++;
        samples += n;
        if (!scored)
            continue;
        if (dt_model_loss(m, &out, y, &l, NULL) != DT_OK)
            break;
        total += (double)l * (double)(n * per);
        rows += n * per;
        int64_t C = out.shape[out.ndim - 1], R = n * per; /* C: this rank's classes */
        const float *z = out.data;
        const dt_device *dev = dt_model_device(m);
        if (!dt_device_is_host(dev)) { /* the logits to the host for the argmax */
            float *grown = realloc(all, (size_t)(R * C) * sizeof *all);
            if (!grown || dt_device_download(dev, grown, out.data, (size_t)(R * C) * sizeof *all) != DT_OK) {
                all = grown ? grown : all;
                break;
            }
            all = grown;
            z = all;
        }
        if (t > 1) { /* gather the slices: [t][R][C], class k of row r at [k / C][r][k % C] */
            float *grown = realloc(all, (size_t)(t * R * C) * sizeof *all);
            if (!grown || dt_allgather(out.data, grown, (size_t)(R * C), DT_F32, tp) != DT_OK) {
                all = grown ? grown : all;
                break;
            }
            all = grown;
            z = all;
        }
        for (int64_t q = 0; q < R; q++) {
            int64_t best = 0;
            float bv = z[q * C];
            for (int64_t k = 1; k < C * t; k++) {
                float v = z[((k / C) * R + q) * C + k % C];
                if (v > bv) {
                    bv = v;
                    best = k;
                }
            }
            correct += best == y[q];
        }
    }
    if (pp && dt_comm_size(pp) > 1) { /* the last stage's totals to stage 0 (which prints) */
        int p = dt_comm_size(pp), me = dt_comm_rank(pp);
        double res[3] = {total, correct, (double)rows};
        if (me == p - 1 && dt_send(res, 3, DT_F64, 0, TAG_RESULT, pp) != DT_OK)
            rows = 0;
        if (me == 0 && dt_recv(res, 3, DT_F64, p - 1, TAG_RESULT, pp, NULL) == DT_OK) {
            total = res[0];
            correct = res[1];
            rows = (int64_t)res[2];
        }
    }
    *r = (eval_result){rows ? total / (double)rows : NAN, rows ? correct / (double)rows : NAN, batches, samples, rows};
    free(all);
    free(x);
    free(y);
    free(idx);
}

void dtrain_eval_describe(const dtrain_config *c, const data_source *d, const eval_result *r, char *buf, size_t len)
{
    const char *split = d->gpt        ? "held-out windows (the last 10% of the text)"
                        : d->fortunes ? "held-out fortunes (FNV-1a of the text mod 10 = 0)"
                                      : "images of the t10k split";
    int n = snprintf(buf, len, "%lld batch%s of %lld: %lld of the %lld %s", (long long)r->batches,
                     r->batches == 1 ? "" : "es", (long long)c->batch_size, (long long)r->samples,
                     (long long)d->eval_samples, split);
    if (d->gpt && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ", %lld tokens", (long long)r->rows);
}
