#include "data_source.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

dt_status data_open(const dtrain_config *c, data_source *d)
{
    memset(d, 0, sizeof *d);
    d->c = c;
    d->gpt = strcmp(c->model, "gpt") == 0;
    d->fortunes = strcmp(c->data, "fortunes") == 0;
    if (d->fortunes) {
        const char *dir = c->data_path[0] ? c->data_path : DT_FORTUNES_DIR;
        if (dt_fortunes_load(dir, &d->f) != DT_OK) {
            fprintf(stderr, "dtrain: %s\n", dt_last_error());
            return DT_ERR_INVALID;
        }
        if (d->f.classes != c->classes) {
            fprintf(stderr, "dtrain: key 'classes' = %lld, but %s holds %d categories (%s .. %s): set classes = %d\n",
                    (long long)c->classes, dir, d->f.classes, d->f.names[0], d->f.names[d->f.classes - 1],
                    d->f.classes);
            dt_fortunes_free(&d->f);
            return DT_ERR_INVALID;
        }
        d->train_samples = d->f.split_count[0];
        d->eval_samples = d->f.split_count[1];
        d->features = c->max_features;
        return DT_OK;
    }
    if (!d->gpt) {
        const char *dir = c->data_path[0] ? c->data_path : DT_FASHION_MNIST_DIR;
        if (dt_idx_load_dir(dir, "train", &d->train) != DT_OK || dt_idx_load_dir(dir, "t10k", &d->test) != DT_OK) {
            fprintf(stderr, "dtrain: %s\n", dt_last_error());
            return DT_ERR_INVALID;
        }
        d->train_samples = d->train.count;
        d->eval_samples = d->test.count;
        d->features = (int64_t)d->train.rows * d->train.cols;
        return DT_OK;
    }
    const char *path = c->data_path[0] ? c->data_path : DT_FORTUNES_DIR;
    if (dt_text_load(path, &d->text) != DT_OK) {
        fprintf(stderr, "dtrain: %s\n", dt_last_error());
        return DT_ERR_INVALID;
    }
    int top = 0; /* the bytes are the tokens: every one must be below vocab */
    for (int64_t i = 0; i < d->text.len && top < 255; i++)
        top = d->text.bytes[i] > top ? d->text.bytes[i] : top;
    if (c->vocab <= top) {
        fprintf(stderr, "dtrain: key 'vocab' = %lld is too small for %s: its bytes are the tokens and go up to %d, "
                        "so vocab must be at least %d (256 covers any text)\n",
                (long long)c->vocab, path, top, top + 1);
        dt_text_free(&d->text);
        return DT_ERR_INVALID;
    }
    int64_t all = dt_text_samples(&d->text, c->context);
    if (all < 2) {
        fprintf(stderr, "dtrain: %s has %lld bytes, too few for windows of %lld\n", path, (long long)d->text.len,
                (long long)c->context + 1);
        return DT_ERR_INVALID;
    }
    d->eval_samples = all / 10 > 0 ? all / 10 : 1;
    d->train_samples = all - d->eval_samples;
    d->eval_begin = d->train_samples;
    d->features = c->context;
    return DT_OK;
}

void data_batch(const data_source *d, int eval, const int64_t *idx, int64_t n, float *x, int32_t *y)
{
    if (d->fortunes) {
        dt_fortunes_batch(&d->f, eval, idx, n, d->c->buckets, d->features, x, y);
        return;
    }
    if (!d->gpt) {
        dt_idx_batch(eval ? &d->test : &d->train, idx, n, x, y);
        return;
    }
    int64_t shifted[4096];
    for (int64_t done = 0; done < n; done += 4096) {
        int64_t k = n - done < 4096 ? n - done : 4096;
        for (int64_t i = 0; i < k; i++)
            shifted[i] = idx[done + i] + (eval ? d->eval_begin : 0);
        dt_text_batch(&d->text, d->c->context, shifted, k, x + done * d->features, y + done * d->features);
    }
}

void data_close(data_source *d)
{
    dt_idx_free(&d->train);
    dt_idx_free(&d->test);
    dt_text_free(&d->text);
    dt_fortunes_free(&d->f);
}

void data_fill(void *user, const int64_t *idx, int64_t n, float *x, int32_t *y) { data_batch(user, 0, idx, n, x, y); }

static double idx_bytes(const dt_idx_set *s) { return (double)s->count * ((double)s->rows * s->cols + 1); }

double data_bytes(const data_source *d)
{
    const dt_fortunes *f = &d->f;
    double fortunes = f->count > 0 ? (double)f->start[f->count] + (double)f->count * (sizeof *f->start + sizeof *f->label) +
                                         (double)(f->split_count[0] + f->split_count[1]) * sizeof *f->split[0]
                                   : 0;
    return idx_bytes(&d->train) + idx_bytes(&d->test) + (double)d->text.len + fortunes;
}
