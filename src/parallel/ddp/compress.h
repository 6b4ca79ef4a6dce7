/* Gradient compressors of data parallelism's buckets (dt_ddp_config's
 * compressor): PowerSGD (powersgd.c) and top-k (topk.c), each with error
 * feedback, behind one interface that dt_ddp's buckets drive.
 *
 * A compressed bucket is a short chain of collectives: begin() adds the
 * error held to the bucket's gradients and gives the first message; after
 * each message completes, next() gives the following one or, at the end,
 * leaves the decoded average in the gradients and the new error held.
 * PowerSGD: allreduce P (and the bucket's uncompressed tensors), then
 * allreduce Q; top-k: one allgather of (index, value) pairs.  Everything is
 * computed in a fixed order from bits every rank shares, so every rank ends
 * with the same gradients bitwise, run after run.
 *
 * The compressor's state (the error, in the registry's flat layout, and
 * PowerSGD's Q) is saved and loaded as one file (compress.c). */
#ifndef DT_PARALLEL_DDP_COMPRESS_H
#define DT_PARALLEL_DDP_COMPRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/nn.h"
#include "dtrain/parallel.h"

/* One collective to issue: an allreduce (average) of `count` f32, in place
 * on send, or an allgather of `count` 32-bit words from send into recv. */
typedef struct {
    bool gather;
    void *send, *recv;
    size_t count;
} dt__cx_msg;

typedef struct dt__compressor dt__compressor;

/* A compressor for the buckets [offset[b], offset[b] + count[b]) of p's flat
 * gradients, over `world` ranks.  cfg's compressor must not be
 * DT_DDP_UNCOMPRESSED; its zero rank and fraction take the defaults. */
dt_status dt__compressor_create(const dt_ddp_config *cfg, dt_params *p, const int64_t *offset, const int64_t *count,
                                int nbuckets, int world, dt__compressor **out);
void dt__compressor_destroy(dt__compressor *c);

/* Bucket b of the flat gradient buffer g (the whole registry's; the bucket
 * is its range): the first message. */
dt_status dt__compressor_begin(dt__compressor *c, int b, float *g, dt__cx_msg *msg);
/* Bucket b's last message completed: *more with the next one in msg, or
 * (*more false) g holds the decoded average and the error is updated. */
dt_status dt__compressor_next(dt__compressor *c, int b, float *g, dt__cx_msg *msg, bool *more);

/* The messages of bucket b's chain (PowerSGD 2, or 1 when the bucket has no
 * matrix; top-k 1). */
int dt__compressor_messages(const dt__compressor *c, int b);
/* The error held, in the flat layout (numel floats). */
const float *dt__compressor_error(const dt__compressor *c);
/* The state file (compress.c). */
dt_status dt__compressor_save(const dt__compressor *c, int64_t steps, int rank, const char *path);
dt_status dt__compressor_load(dt__compressor *c, const char *path, int rank, bool with_error, int64_t *steps);

/* ---- what each compressor implements (compress.c dispatches) ---- */
typedef struct dt__cx_impl dt__cx_impl;
typedef struct {
    const char *name;
    dt_status (*create)(dt__compressor *c, int b, int64_t offset, int64_t count, dt__cx_impl **out);
    dt_status (*begin)(dt__compressor *c, dt__cx_impl *k, float *g, dt__cx_msg *msg);
    dt_status (*next)(dt__compressor *c, dt__cx_impl *k, float *g, dt__cx_msg *msg, bool *more);
    int (*messages)(const dt__cx_impl *k);
    /* floats of persistent state besides the error (PowerSGD's Q), and where */
    float *(*state)(dt__cx_impl *k, size_t *n);
    void (*destroy)(dt__cx_impl *k);
} dt__cx_ops;

struct dt__compressor {
    const dt__cx_ops *ops;
    dt_ddp_config cfg;
    dt_params *p;
    int world, nbuckets;
    int64_t numel;
    float *error; /* numel floats: what was not sent yet */
    dt__cx_impl **impl;
};

extern const dt__cx_ops dt__cx_powersgd, dt__cx_topk;

#endif
