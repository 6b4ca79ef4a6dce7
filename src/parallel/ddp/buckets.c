/* Data parallel training: bucketed gradient allreduce started from the
 * registry's gradient-ready events while backward continues.
 *
 * Buckets are runs of parameters in reverse registration order (roughly the
 * order backward finishes them); the last one is smaller (build_buckets).
 * The flat gradient buffer holds parameters in registration order, so every
 * bucket is one contiguous range of it and is reduced in place: no packing
 * copies.  Buckets start strictly in index order
 * (bucket b only after b-1), so every rank issues the same collectives in the
 * same order whatever order its callbacks fire in.
 *
 * A compressed bucket (compress.h) is a chain of collectives with compute
 * between them (PowerSGD: P, then Q).  The chain advances at fixed points
 * only, so that every rank issues the same collectives in the same order:
 * starting bucket b first takes bucket b-1 past its first message when it
 * has another (waiting for it: PowerSGD's P is small, usually landed), and
 * the sync takes each bucket to its end in index order.  Top-k's single
 * allgather waits for the sync like an f32 bucket. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/hash.h"
#include "base/status.h"
#include "base/trace.h"
#include "dtrain/parallel.h"
#include "dtrain/tensor.h"
#include "optim/clip.h"
#include "parallel/ddp/compress.h"
#include "tensor/backend.h"

typedef struct {
    int64_t offset, count; /* range of the flat gradient buffer, in floats */
    int params;            /* parameters in it */
    int pending;           /* not yet ready this step */
    dt_request *req;       /* in flight */
    bool started, done;
    int msgs;              /* compressed: messages issued this step */
} bucket;

struct dt_ddp {
    dt_comm *comm;
    dt_params *params;
    /* where the gradients and values live (dt_params_device: the cpu's, or a
     * device's); every touch of their memory goes through these entries, and
     * the buckets are reduced in place on the device pointers */
    const dt_compute_ops *ops;
    dt_ddp_config cfg;
    bucket *buckets;
    int nbuckets, next_start; /* buckets start in index order */
    int *bucket_of;           /* parameter index -> bucket */
    bool *ready;              /* per parameter, this step */
    bool sync;
    int micro_batches;
    dt_status failed; /* first error of a callback (reported at the sync, as before callbacks could return one) */
    dt_subscription ready_sub; /* to the registry's gradient-ready events */
    double async_before, exposed, last_comm, last_exposed;
    dt__compressor *cx; /* NULL: uncompressed (or f16/bf16 on the wire) */
    bool compressing;   /* this step: cx and compress_start steps done */
    int64_t steps;      /* synchronised steps done */
};

static uint64_t describe(const dt_param_info *info)
{
    uint64_t h = dt__fnv1a64(DT_FNV64_SEED, info->name, strlen(info->name));
    h = dt__fnv1a64(h, &info->ndim, sizeof info->ndim);
    return dt__fnv1a64(h, info->shape, (size_t)info->ndim * sizeof info->shape[0]);
}

static void format_shape(const dt_param_info *info, char *buf, size_t len)
{
    size_t at = (size_t)snprintf(buf, len, "[");
    for (int d = 0; d < info->ndim && at < len; d++)
        at += (size_t)snprintf(buf + at, len - at, d ? ", %lld" : "%lld", (long long)info->shape[d]);
    if (at < len)
        snprintf(buf + at, len - at, "]");
}

/* Every rank must register the same parameters in the same order. */
static dt_status check_same_model(dt_ddp *d)
{
    dt_comm *c = d->comm;
    int size = dt_comm_size(c), rank = dt_comm_rank(c), n = dt_params_count(d->params);
    int64_t counts[2] = {n, -(int64_t)n}, extremes[2];
    DT_CHECK(dt_allreduce(counts, extremes, 2, DT_I64, DT_MAX, c));
    if (extremes[0] != -extremes[1])
        return dt__fail(DT_ERR_INVALID, "data parallel: ranks register different numbers of parameters "
                        "(between %lld and %lld; this rank, %d, has %d)", (long long)-extremes[1],
                        (long long)extremes[0], rank, n);
    uint64_t *mine = malloc((size_t)(n ? n : 1) * sizeof *mine);
    uint64_t *all = malloc((size_t)size * (size_t)(n ? n : 1) * sizeof *all);
    dt_status s = mine && all ? DT_OK : dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; s == DT_OK && i < n; i++)
        mine[i] = describe(dt_params_info(d->params, i));
    if (s == DT_OK)
        s = dt_allgather(mine, all, (size_t)n, DT_I64, c);
    for (int i = 0; s == DT_OK && i < n; i++)
        for (int r = 1; r < size; r++)
            if (all[(size_t)r * (size_t)n + (size_t)i] != all[i]) {
                const dt_param_info *info = dt_params_info(d->params, i);
                char shape[96];
                format_shape(info, shape, sizeof shape);
                s = dt__fail(DT_ERR_INVALID, "data parallel: ranks 0 and %d differ at parameter #%d (this rank, %d, "
                             "has '%s' %s): every rank must build the same model", r, i, rank, info->name, shape);
                break;
            }
    free(mine);
    free(all);
    return s;
}

/* Whether every rank holds rank 0's bits (on a device: a host copy of
 * them, checked once at the start): *same, from a checksum of each rank's. */
static dt_status same_values(dt_ddp *d, bool *same)
{
    int size = dt_comm_size(d->comm);
    size_t bytes = (size_t)dt_params_numel(d->params) * sizeof(float);
    const float *values = dt_params_device_values(d->params);
    float *copy = NULL;
    if (!d->ops->host) {
        if (!(copy = malloc(bytes ? bytes : 1)))
            return dt__fail(DT_ERR_NOMEM, "out of memory for a host copy of %zu bytes of parameters", bytes);
        dt_status s = d->ops->download(copy, values, bytes);
        if (s != DT_OK) {
            free(copy);
            return s;
        }
        values = copy;
    }
    uint64_t sum = dt__fnv1a64(DT_FNV64_SEED, values, bytes);
    free(copy);
    uint64_t *all = malloc((size_t)size * sizeof *all);
    if (!all)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_status s = dt_allgather(&sum, all, 1, DT_I64, d->comm);
    *same = true;
    for (int r = 1; s == DT_OK && r < size && *same; r++)
        if (all[r] != all[0]) {
            *same = false;
            dt__fail(DT_ERR_INVALID, "data parallel: after the broadcast rank %d's parameters differ from rank 0's "
                     "(checksum %016llx vs %016llx)", r, (unsigned long long)all[r], (unsigned long long)all[0]);
        }
    free(all);
    return s;
}

/* DT_BUCKET_MB when set; else 25 MiB, or an eighth of the gradient bytes when
 * that is smaller (but at least 1 MiB): with a single bucket a small model
 * would send nothing until backward ends, and so overlap nothing. */
static dt_status default_bucket_bytes(int64_t numel, size_t *bytes)
{
    int64_t mb;
    if (dt__env_str("DT_BUCKET_MB")) {
        DT_CHECK(dt__env_int("DT_BUCKET_MB", 1, 1 << 16, &mb));
        *bytes = (size_t)mb << 20;
        return DT_OK;
    }
    size_t eighth = (size_t)numel * sizeof(float) / 8, lo = (size_t)1 << 20, hi = (size_t)25 << 20;
    *bytes = eighth < lo ? lo : eighth > hi ? hi : eighth;
    return DT_OK;
}

/* The bucket backward fills last is sent after backward ends, in full view:
 * it gets a quarter of the size limit, so what is left exposed is small.
 * Buckets are cut walking the parameters in registration order (the end of
 * backward first) and then put in backward order. */
static dt_status build_buckets(dt_ddp *d)
{
    int n = dt_params_count(d->params);
    d->buckets = calloc((size_t)(n ? n : 1), sizeof *d->buckets);
    d->bucket_of = malloc((size_t)(n ? n : 1) * sizeof *d->bucket_of);
    d->ready = calloc((size_t)(n ? n : 1), sizeof *d->ready);
    if (!d->buckets || !d->bucket_of || !d->ready)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    int64_t limit = (int64_t)(d->cfg.bucket_bytes / sizeof(float));
    bucket *b = NULL;
    for (int i = 0; i < n; i++) {
        const dt_param_info *info = dt_params_info(d->params, i);
        int64_t cap = d->nbuckets == 1 ? (limit + 3) / 4 : limit;
        if (!b || (b->count > 0 && b->count + info->numel > cap)) {
            b = &d->buckets[d->nbuckets++];
            b->offset = info->offset;
        }
        b->count += info->numel;
        b->params++;
        d->bucket_of[i] = d->nbuckets - 1;
    }
    for (int lo = 0, hi = d->nbuckets - 1; lo < hi; lo++, hi--) {
        bucket t = d->buckets[lo];
        d->buckets[lo] = d->buckets[hi];
        d->buckets[hi] = t;
    }
    for (int i = 0; i < n; i++)
        d->bucket_of[i] = d->nbuckets - 1 - d->bucket_of[i];
    return DT_OK;
}

static void reset_step(dt_ddp *d)
{
    for (int b = 0; b < d->nbuckets; b++) {
        d->buckets[b].pending = d->buckets[b].params;
        d->buckets[b].started = d->buckets[b].done = false;
        d->buckets[b].req = NULL;
        d->buckets[b].msgs = 0;
    }
    d->compressing = d->cx && d->steps >= d->cfg.compress_start;
    memset(d->ready, 0, (size_t)dt_params_count(d->params) * sizeof *d->ready);
    d->next_start = 0;
    d->exposed = 0;
    d->async_before = dt_comm_async_seconds(d->comm);
}

static dt_status issue(dt_ddp *d, bucket *b, const dt__cx_msg *m)
{
    b->msgs++;
    if (m->gather)
        return dt_iallgather(m->send, m->recv, m->count, DT_I32, d->comm, &b->req);
    return dt_iallreduce(m->send, m->send, m->count, DT_F32, DT_AVG, d->comm, &b->req);
}

/* The compressed bucket's message in flight completed (or failed: s):
 * the next one issued, or the bucket decoded and done. */
static dt_status advance(dt_ddp *d, bucket *b, dt_status s)
{
    dt__cx_msg m;
    bool more = false;
    b->req = NULL;
    if (s == DT_OK)
        s = dt__compressor_next(d->cx, (int)(b - d->buckets), dt_params_device_grads(d->params), &m, &more);
    if (s == DT_OK && more)
        return issue(d, b, &m);
    b->done = true;
    return s;
}

static dt_status wait_req(dt_ddp *d, bucket *b)
{
    int64_t t0 = dt__now_ns();
    dt_status s = dt_wait(b->req, NULL);
    d->exposed += (double)(dt__now_ns() - t0) / 1e9;
    return s;
}

static dt_status start_compressed(dt_ddp *d, bucket *b)
{
    bucket *prev = b > d->buckets ? b - 1 : NULL;
    if (prev && !prev->done && prev->msgs == 1 && /* past its first message: see the top */
        dt__compressor_messages(d->cx, (int)(prev - d->buckets)) > 1)
        DT_CHECK(advance(d, prev, wait_req(d, prev)));
    dt__cx_msg m;
    DT_CHECK(dt__compressor_begin(d->cx, (int)(b - d->buckets), dt_params_device_grads(d->params), &m));
    return issue(d, b, &m);
}

static dt_status start_bucket(dt_ddp *d, bucket *b)
{
    float *g = dt_params_device_grads(d->params) + b->offset;
    if (d->micro_batches > 1)
        d->ops->scale(g, 1.0f / (float)d->micro_batches, b->count);
    b->started = true;
    for (int i = 0; i < dt_params_count(d->params); i++) { /* the average writes other ranks' rows */
        const dt_param_info *info = dt_params_info(d->params, i);
        if (info->row_sparse && dt_comm_size(d->comm) > 1 && info->offset >= b->offset &&
            info->offset < b->offset + b->count)
            dt_param_touch_all(d->params, i);
    }
    if (dt_comm_size(d->comm) == 1 && !d->compressing) {
        b->done = true;
        return DT_OK;
    }
    if (dt__tracing()) { /* the timeline's span of this bucket, from here to its completion */
        char label[32];
        snprintf(label, sizeof label, "bucket %d", (int)(b - d->buckets));
        dt__trace_label_next(label);
    }
    if (d->compressing)
        return start_compressed(d, b);
    if (d->cfg.wire == DT_F32)
        return dt_iallreduce(g, g, (size_t)b->count, DT_F32, DT_AVG, d->comm, &b->req);
    return dt_iallreduce_half(g, g, (size_t)b->count, d->cfg.wire, DT_AVG, d->comm, &b->req);
}

/* Start every bucket that is complete and whose predecessors have started. */
static dt_status start_ready(dt_ddp *d, bool all)
{
    while (d->next_start < d->nbuckets && (all || d->buckets[d->next_start].pending == 0)) {
        dt_status s = start_bucket(d, &d->buckets[d->next_start]);
        d->next_start++;
        if (s != DT_OK)
            return s;
    }
    return DT_OK;
}

static dt_status on_grad_ready(void *user, int index)
{
    dt_ddp *d = user;
    if (!d->sync || d->failed != DT_OK || d->ready[index])
        return DT_OK;
    d->ready[index] = true;
    d->buckets[d->bucket_of[index]].pending--;
    dt_status s = start_ready(d, false);
    if (s != DT_OK)
        d->failed = s;
    return DT_OK;
}

static dt_status wait_bucket(dt_ddp *d, bucket *b)
{
    dt_status s = DT_OK;
    while (!b->done && s == DT_OK) {
        if (!b->req) /* its start failed (that error is reported) */
            break;
        if (!d->compressing) {
            s = wait_req(d, b);
            b->req = NULL;
            b->done = true;
        } else
            s = advance(d, b, wait_req(d, b));
    }
    if (s != DT_OK && b->req) { /* nothing stays in flight */
        dt_wait(b->req, NULL);
        b->req = NULL;
    }
    b->done = true;
    return s;
}

/* Wait for what is in flight (after an error too, so no buffer stays in use). */
static dt_status drain(dt_ddp *d, dt_status s)
{
    for (int b = 0; b < d->nbuckets; b++)
        if (d->buckets[b].started && !d->buckets[b].done) {
            dt_status w = wait_bucket(d, &d->buckets[b]);
            if (s == DT_OK)
                s = w;
        }
    return s;
}

static void end_step(dt_ddp *d)
{
    d->last_comm = dt_comm_async_seconds(d->comm) - d->async_before;
    d->last_exposed = d->exposed;
    d->steps++;
    reset_step(d);
}

static dt_status begin_sync(dt_ddp *d)
{
    if (!d->sync)
        return dt__fail(DT_ERR_INVALID, "data parallel: step with synchronisation off (dt_ddp_set_sync(d, true) "
                        "before the last micro-batch)");
    dt_status s = d->failed;
    d->failed = DT_OK;
    if (s == DT_OK)
        s = start_ready(d, true); /* parameters without a gradient this step send their zeros */
    return s;
}

dt_status dt_ddp_finish(dt_ddp *d)
{
    dt_status s = drain(d, begin_sync(d));
    end_step(d);
    return s;
}

dt_status dt_ddp_step(dt_ddp *d, dt_optimizer *o, float lr, float max_norm, float *norm)
{
    float *values = dt_params_device_values(d->params), *grads = dt_params_device_grads(d->params);
    int64_t numel = dt_params_numel(d->params);
    dt_status s = DT_OK;
    if (!values || !grads)
        s = dt__fail(DT_ERR_INVALID, "data parallel: the registry has no flat buffers");
    else if (dt_optimizer_device(o) != d->ops)
        s = dt__fail(DT_ERR_INVALID, "data parallel: the parameters are on %s, the optimizer on %s "
                     "(dt_optimizer_set_device)", d->ops->name, dt_optimizer_device(o)->name);
    if (s != DT_OK) { /* nothing stays in flight */
        s = drain(d, s);
        end_step(d);
        return s;
    }
    if (max_norm > 0) { /* clipping needs the global norm: everything first */
        DT_CHECK(dt_ddp_finish(d));
        float n = dt__clip_grad_norm_on(d->ops, grads, numel, max_norm);
        if (norm)
            *norm = n;
        return dt_optimizer_step(o, values, grads, numel, lr);
    }
    s = begin_sync(d);
    double sumsq = 0;
    for (int b = 0; s == DT_OK && b < d->nbuckets; b++) { /* update each bucket as it lands */
        bucket *k = &d->buckets[b];
        s = wait_bucket(d, k);
        if (s == DT_OK)
            s = dt_optimizer_update_range(o, values, grads, k->offset, k->count, lr);
        sumsq += d->ops->sumsq(grads + k->offset, k->count);
    }
    s = drain(d, s);
    end_step(d);
    if (s == DT_OK)
        dt_optimizer_end_step(o);
    if (norm)
        *norm = (float)sqrt(sumsq);
    return s;
}

void dt_ddp_set_accumulation(dt_ddp *d, int micro_batches) { d->micro_batches = micro_batches > 1 ? micro_batches : 1; }
void dt_ddp_set_sync(dt_ddp *d, bool sync) { d->sync = sync; }
int dt_ddp_buckets(const dt_ddp *d) { return d->nbuckets; }

int64_t dt_ddp_bucket_numel(const dt_ddp *d, int b) { return b >= 0 && b < d->nbuckets ? d->buckets[b].count : 0; }

void dt_ddp_last_timing(const dt_ddp *d, double *comm, double *exposed)
{
    if (comm)
        *comm = d->last_comm;
    if (exposed)
        *exposed = d->last_exposed;
}

static dt_status make_compressor(dt_ddp *d)
{
    int64_t *at = malloc(2 * (size_t)(d->nbuckets ? d->nbuckets : 1) * sizeof *at);
    if (!at)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int b = 0; b < d->nbuckets; b++) {
        at[b] = d->buckets[b].offset;
        at[d->nbuckets + b] = d->buckets[b].count;
    }
    dt_status s = dt__compressor_create(&d->cfg, d->params, at, at + d->nbuckets, d->nbuckets,
                                        dt_comm_size(d->comm), &d->cx);
    free(at);
    return s;
}

dt_status dt_ddp_state_save(const dt_ddp *d, const char *path)
{
    if (!d || !d->cx || !path)
        return dt__fail(DT_ERR_INVALID, "dt_ddp_state_save: %s", !d ? "NULL" : !d->cx ? "no compressor" : "path NULL");
    return dt__compressor_save(d->cx, d->steps, dt_comm_rank(d->comm), path);
}

dt_status dt_ddp_state_load(dt_ddp *d, const char *path, bool with_error)
{
    if (!d || !d->cx || !path)
        return dt__fail(DT_ERR_INVALID, "dt_ddp_state_load: %s", !d ? "NULL" : !d->cx ? "no compressor" : "path NULL");
    int64_t steps = 0;
    DT_CHECK(dt__compressor_load(d->cx, path, dt_comm_rank(d->comm), with_error, &steps));
    dt_ddp_set_steps(d, steps);
    return DT_OK;
}

int64_t dt_ddp_steps(const dt_ddp *d) { return d->steps; }

void dt_ddp_set_steps(dt_ddp *d, int64_t steps)
{
    d->steps = steps;
    d->compressing = d->cx && d->steps >= d->cfg.compress_start; /* between steps: nothing started */
}

const float *dt_ddp_error(const dt_ddp *d) { return d && d->cx ? dt__compressor_error(d->cx) : NULL; }

dt_status dt_ddp_create(dt_comm *c, dt_params *p, const dt_ddp_config *cfg, dt_ddp **out)
{
    if (!c || !p || !out)
        return dt__fail(DT_ERR_INVALID, "dt_ddp_create: NULL argument");
    *out = NULL;
    dt_ddp *d = calloc(1, sizeof *d);
    if (!d)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    d->comm = c;
    d->params = p;
    d->ops = dt_params_device(p);
    d->sync = true;
    d->micro_batches = 1;
    d->cfg = cfg ? *cfg : (dt_ddp_config){.wire = DT_F32};
    dt_status s = DT_OK;
    if (d->cfg.wire != DT_F32 && d->cfg.wire != DT_F16 && d->cfg.wire != DT_BF16)
        s = dt__fail(DT_ERR_INVALID, "data parallel: gradient wire format must be f32, f16 or bf16");
    else if (d->cfg.compressor != DT_DDP_UNCOMPRESSED && d->cfg.wire != DT_F32)
        s = dt__fail(DT_ERR_INVALID, "data parallel: compressor %s with wire %s: the compressors send f32 (one or "
                     "the other)", d->cfg.compressor == DT_DDP_TOPK ? "topk" : "powersgd", dt_dtype_name(d->cfg.wire));
    else if (d->cfg.compressor != DT_DDP_UNCOMPRESSED && !d->ops->host)
        s = dt__fail(DT_ERR_INVALID, "data parallel: compressor %s with the gradients on %s: it compresses host "
                     "gradients only", d->cfg.compressor == DT_DDP_TOPK ? "topk" : "powersgd", d->ops->name);
    if (s == DT_OK && d->cfg.bucket_bytes == 0)
        s = default_bucket_bytes(dt_params_numel(p), &d->cfg.bucket_bytes);
    if (s == DT_OK && dt_comm_size(c) > 1) {
        /* Rank 0's values on every rank: a broadcast, unless every rank holds
         * them already (the same seed, or a checkpoint every rank loaded:
         * a restart's 13 MB of gpt-mini over the network saved). */
        bool same = false;
        s = check_same_model(d);
        if (s == DT_OK)
            s = same_values(d, &same);
        if (s == DT_OK && !same && (s = dt_broadcast(dt_params_device_values(p), (size_t)dt_params_numel(p), DT_F32,
                                                     0, c)) == DT_OK &&
            (s = same_values(d, &same)) == DT_OK && !same)
            s = DT_ERR_INVALID; /* (the message names the rank) */
    }
    if (s == DT_OK)
        s = build_buckets(d);
    if (s == DT_OK && d->cfg.compressor != DT_DDP_UNCOMPRESSED)
        s = make_compressor(d);
    if (s != DT_OK) {
        dt_ddp_destroy(d);
        return s;
    }
    reset_step(d);
    s = dt_params_subscribe_grad_ready(p, on_grad_ready, d, &d->ready_sub);
    if (s != DT_OK) {
        dt_ddp_destroy(d);
        return s;
    }
    *out = d;
    return DT_OK;
}

void dt_ddp_destroy(dt_ddp *d)
{
    if (!d)
        return;
    drain(d, DT_OK);
    dt_params_unsubscribe(d->params, d->ready_sub);
    dt__compressor_destroy(d->cx);
    free(d->buckets);
    free(d->bucket_of);
    free(d->ready);
    free(d);
}
