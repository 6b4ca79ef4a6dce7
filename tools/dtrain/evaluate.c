/* dtrain evaluation: loss and accuracy on the held-out split.  The data
 * is the trainer's; the forward through stages and shards, the scoring and
 * the totals are the library's (dt_strategy_evaluate, dt_evaluate_batches). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data_source.h"
#include "dtrain_cli.h"

/* The held-out split from its start, a batch at a time (the library's
 * dt_next_batch_fn): rows past its end end the evaluation. */
typedef struct {
    const dtrain_config *c;
    const data_source *d;
    float *x;
    int32_t *y;
    int64_t *idx, start;
} eval_source;

static dt_status next_eval_batch(void *user, dt_micro_batch *mb)
{
    eval_source *e = user;
    const data_source *d = e->d;
    int64_t B = e->c->batch_size, n = d->eval_samples - e->start < B ? d->eval_samples - e->start : B;
    int64_t per = d->gpt ? e->c->context : 1;
    if (n <= 0) {
        *mb = (dt_micro_batch){0};
        return DT_OK;
    }
    for (int64_t i = 0; i < n; i++)
        e->idx[i] = e->start + i;
    data_batch(d, 1, e->idx, n, e->x, e->y);
    e->start += n;
    mb->x = dt_tensor_view(e->x, 2, (int64_t[]){n, d->gpt ? e->c->context : d->features});
    mb->targets = e->y;
    mb->ntargets = n * per;
    return DT_OK;
}

/* Over c->eval_batches batches, through the strategy (s) or a model of one's own (m, whole). */
static void evaluate(const dtrain_config *c, dt_strategy *s, dt_model *m, dt_arena *arena, const data_source *d,
                     eval_result *r)
{
    int64_t B = c->batch_size, F = d->features, per = d->gpt ? c->context : 1;
    eval_source e = {c, d, malloc((size_t)(B * F) * sizeof(float)), malloc((size_t)(B * per) * sizeof(int32_t)),
                     malloc((size_t)B * sizeof(int64_t)), 0};
    dt_eval_totals t = {0};
    if (e.x && e.y && e.idx)
        (void)(s ? dt_strategy_evaluate(s, c->eval_batches, next_eval_batch, &e, &t)
                 : dt_evaluate_batches(m, arena, NULL, NULL, c->eval_batches, next_eval_batch, &e, &t));
    *r = (eval_result){t.rows ? t.loss_sum / (double)t.rows : NAN, t.rows ? t.correct / (double)t.rows : NAN,
                       t.batches, t.samples, t.rows};
    free(e.x);
    free(e.y);
    free(e.idx);
}

void dtrain_evaluate_run(const dtrain_config *c, dt_strategy *s, const data_source *d, eval_result *r)
{
    evaluate(c, s, NULL, NULL, d, r);
}

void dtrain_evaluate(const dtrain_config *c, dt_model *m, const data_source *d, dt_arena *arena, eval_result *r)
{
    evaluate(c, NULL, m, arena, d, r);
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
