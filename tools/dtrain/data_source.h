/* The dataset a configuration names, split into training and evaluation
 * samples (the library's dt_prefetcher prepares the next batch). */
#ifndef DTRAIN_DATA_SOURCE_H
#define DTRAIN_DATA_SOURCE_H

#include "dtrain_cli.h"

typedef struct {
    const dtrain_config *c;
    int gpt, fortunes;
    dt_idx_set train, test;
    dt_text text;
    dt_fortunes f; /* textclf: the held-out split evaluates */
    int64_t train_samples, eval_samples, eval_begin; /* text: the last 10% of windows evaluate */
    int64_t features; /* inputs per sample: 784, the context, or max_features */
} data_source;

dt_status data_open(const dtrain_config *c, data_source *d);
/* Fill x (inputs) and y (targets) for `n` samples of the training or evaluation split. */
void data_batch(const data_source *d, int eval, const int64_t *idx, int64_t n, float *x, int32_t *y);
void data_close(data_source *d);
/* The bytes the loaded data set holds (text, images and labels, fortunes). */
double data_bytes(const data_source *d);
/* What an evaluation scored: loss and accuracy per sample (per token for
 * text), over `batches` batches holding `samples` samples and `rows` scored
 * rows (samples, or tokens for text). */
typedef struct {
    double loss, accuracy;
    int64_t batches, samples, rows;
} eval_result;

/* Evaluate over c->eval_batches batches of the held-out split (from its
 * start), in evaluate.c: through a run (every rank calls it; the lead gets
 * the result, dt_strategy_evaluate), or a whole model of one's own. */
void dtrain_evaluate_run(const dtrain_config *c, dt_strategy *s, const data_source *d, eval_result *r);
void dtrain_evaluate(const dtrain_config *c, dt_model *m, const data_source *d, dt_arena *arena, eval_result *r);
/* "20 batches of 128: 2560 of the 10000 images of the t10k split" (what an
 * evaluation covered, printed wherever a loss is). */
void dtrain_eval_describe(const dtrain_config *c, const data_source *d, const eval_result *r, char *buf, size_t len);

/* The prefetcher's fill function (dt_batch_fill_fn) over the training split;
 * user is the data_source. */
void data_fill(void *user, const int64_t *idx, int64_t n, float *x, int32_t *y);

#endif
