/* dtrain datasets and the sharded sampler.
 *
 * Loaders check every file they read and fail with a message naming the file
 * and what is wrong with it (missing, not gzip, bad magic, truncated, counts
 * that disagree). */
#ifndef DTRAIN_DATA_H
#define DTRAIN_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The Debian package dataset-fashion-mnist installs the files here. */
#define DT_FASHION_MNIST_DIR "/usr/share/datasets/fashion-mnist"

/* An idx image set with its labels (MNIST / Fashion-MNIST layout). */
typedef struct {
    int64_t count;
    int rows, cols;
    uint8_t *images; /* count * rows * cols, row major */
    uint8_t *labels; /* count */
} dt_idx_set;

/* Load an image file (magic 0x803) and a label file (magic 0x801); either may
 * be gzip-compressed or raw. */
dt_status dt_idx_load(const char *images_path, const char *labels_path, dt_idx_set *out);
/* Load "train" or "t10k" from a directory holding the standard file names
 * (*-images-idx3-ubyte.gz, *-labels-idx1-ubyte.gz). */
dt_status dt_idx_load_dir(const char *dir, const char *split, dt_idx_set *out);
/* Images of the given samples as floats in [0, 1] ([n, rows*cols]) and labels. */
void dt_idx_batch(const dt_idx_set *s, const int64_t *indices, int64_t n, float *x, int32_t *y);
void dt_idx_free(dt_idx_set *s);

/* The Debian package fortunes installs English text here. */
#define DT_FORTUNES_DIR "/usr/share/games/fortunes"

/* Byte-level text: the bytes of one file, or of every extension-less regular
 * file in a directory, in name order (so the fortunes directory reads its
 * text files and skips the .dat indexes). */
typedef struct {
    uint8_t *bytes;
    int64_t len;
} dt_text;

dt_status dt_text_load(const char *path, dt_text *out);
/* Sample i is the window of context+1 bytes starting at i*context: input
 * bytes [0, context), targets shifted by one.  Returns the sample count. */
int64_t dt_text_samples(const dt_text *t, int64_t context);
/* Inputs as float token ids [n, context] and int targets [n, context]. */
void dt_text_batch(const dt_text *t, int64_t context, const int64_t *indices, int64_t n, float *x, int32_t *y);
void dt_text_free(dt_text *t);

/* ---- fortunes by category: a text-classification set ----
 * Every extension-less regular file of the directory (symbolic links and
 * the .dat / .u8 files skipped; the Debian package's 43: art, ascii-art,
 * computers, ..., zippy) is a category, numbered in name order; each
 * fortune in it (the text between lines holding only "%") is one example
 * labelled with its file.  Fortunes that are only white space are skipped;
 * overstrikes (a byte, backspace: the files' underlining) keep the second
 * byte.  An example is held out when the FNV-1a 64 hash of its text (the
 * bytes kept, without the newline before the "%") modulo 10 is 0: a
 * deterministic tenth, the same for a text wherever it appears. */
#define DT_FORTUNES_HELD_OUT_MOD 10
typedef struct {
    int64_t count; /* examples */
    int classes;
    char (*names)[64]; /* the categories, in label order */
    char *text;        /* every example's bytes, one after the other */
    int64_t *start;    /* count + 1: example i is text[start[i], start[i+1]) */
    int32_t *label;    /* count */
    int64_t *split[2]; /* example ids of the training (0) and held-out (1) split, in file order */
    int64_t split_count[2];
} dt_fortunes;
dt_status dt_fortunes_load(const char *dir, dt_fortunes *out);
void dt_fortunes_free(dt_fortunes *f);

/* fastText's features of a text, as the bag an EmbeddingBag reads: words
 * are runs of ASCII letters and digits (lower-cased) and bytes >= 0x80;
 * word k gives the unigram id  FNV-1a-64(word) mod buckets, then for k > 0
 * the bigram id  FNV-1a-64(previous word, " ", word) mod buckets (FNV-1a 64:
 * offset basis 14695981039346656037, prime 1099511628211, over the
 * lower-cased bytes), so the order is w0, w1, w0_w1, w2, w1_w2, ...
 * out[0..width) gets the first width ids, -1 after them; returns how many
 * the text has (more than width: the rest were cut). */
int64_t dt_text_features(const char *text, int64_t len, int64_t buckets, float *out, int64_t width);
/* Examples split_ids[indices[0..n)] of split 0 (training) or 1 (held out)
 * as bags x [n, width] and labels y [n]. */
void dt_fortunes_batch(const dt_fortunes *f, int split, const int64_t *indices, int64_t n, int64_t buckets,
                       int64_t width, float *x, int32_t *y);

/* Seeded, per-epoch shuffled, sharded sampler (as torch's DistributedSampler):
 * each epoch is a permutation of [0, size) from (seed, epoch); with drop_last
 * it is cut to a multiple of world, otherwise padded by wrapping around; rank
 * r takes every world-th sample from position r.  The position is counted in
 * samples of the whole epoch, so a run resumed with a different world size
 * continues where the old one stopped. */
typedef struct {
    int64_t size;
    uint64_t seed;
    int rank, world;
    bool shuffle, drop_last;
    int64_t epoch;
    int64_t position; /* samples of this epoch consumed by all ranks together */
    int64_t *perm;    /* this epoch's order; internal */
    int64_t perm_epoch;
} dt_sampler;

dt_status dt_sampler_init(dt_sampler *s, int64_t size, uint64_t seed, int rank, int world, bool shuffle,
                          bool drop_last);
/* Samples per rank per epoch. */
int64_t dt_sampler_per_rank(const dt_sampler *s);
/* Up to `batch` indices for this rank (fewer at the end of an epoch; the
 * next call starts the next epoch).  Returns how many were written. */
int64_t dt_sampler_next(dt_sampler *s, int64_t batch, int64_t *indices);
/* Resume at (epoch, position), possibly with a new rank/world. */
dt_status dt_sampler_seek(dt_sampler *s, int64_t epoch, int64_t position, int rank, int world);
void dt_sampler_free(dt_sampler *s);

/* ---- prefetching: the next batch is prepared on a thread of its own ----
 * fill(user, indices, n, x, y) writes n samples' inputs (x_per_sample floats
 * each) and targets (y_per_sample ints each); it runs on the prefetch thread
 * and must only read shared data.  Each batch records the sampler's (epoch,
 * position) after it, which is what a checkpoint saves. */
typedef struct {
    float *x;
    int32_t *y;
    int64_t n, epoch, position;
    /* x and y in the device's memory (dt_prefetch_start_on a device that is
     * not the host), copied in by the prefetch thread; NULL otherwise. */
    float *x_dev;
    int32_t *y_dev;
} dt_batch;
typedef void (*dt_batch_fill_fn)(void *user, const int64_t *indices, int64_t n, float *x, int32_t *y);
typedef struct dt_prefetcher dt_prefetcher;
/* Start the thread; from now on only it uses the sampler. */
dt_status dt_prefetch_start(dt_sampler *s, int64_t batch_size, int64_t x_per_sample, int64_t y_per_sample,
                            dt_batch_fill_fn fill, void *user, dt_prefetcher **out);
/* As dt_prefetch_start, and on a device (a dt_device, tensor.h; NULL or the
 * cpu: as dt_prefetch_start) each batch is also uploaded into device buffers
 * of the prefetcher's own (x_dev, y_dev), by the prefetch thread on a copy
 * stream of its own, from page-locked host memory, overlapping the compute.
 * The host x and y stay valid too (the step checks token ids and targets on
 * the host). */
struct dt_compute_ops;
dt_status dt_prefetch_start_on(const struct dt_compute_ops *device, dt_sampler *s, int64_t batch_size,
                               int64_t x_per_sample, int64_t y_per_sample, dt_batch_fill_fn fill, void *user,
                               dt_prefetcher **out);
/* The next batch in the sampler's order, valid until the following call.
 * On a device, the device's compute stream waits (queued: the host does
 * not) for the batch's upload before its later work, and the device
 * buffers of the batch handed out before are refilled only after the work
 * queued so far.  NULL when the batch's upload failed (dt_last_error() says
 * why); host-only prefetchers never fail. */
const dt_batch *dt_prefetch_next(dt_prefetcher *p);
/* Stop the thread and free the batches (NULL is a no-op). */
void dt_prefetch_stop(dt_prefetcher *p);

#ifdef __cplusplus
}
#endif
#endif
