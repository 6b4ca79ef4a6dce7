/* The compressors' common part: the per-bucket dispatch, the error buffer,
 * and the state file.
 *
 * State file (native byte order, one per rank, written atomically):
 *   header  magic "DTCXST1", compressor, rank, world, steps, numel, the
 *           floats of extra state (Q), the model's hash (parameter names and
 *           shapes) and the bucket sizes' hash
 *   data    the error (numel f32), then each bucket's extra state in order
 *   tail    FNV-1a 64 of header and data */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/status.h"
#include "dtrain/ckpt.h"
#include "parallel/ddp/compress.h"

typedef struct {
    char magic[8];
    int32_t kind, rank, world, reserved;
    int64_t steps, numel, extra;
    uint64_t model, buckets;
} state_header;

dt_status dt__compressor_create(const dt_ddp_config *cfg, dt_params *p, const int64_t *offset, const int64_t *count,
                                int nbuckets, int world, dt__compressor **out)
{
    *out = NULL;
    const dt__cx_ops *ops = cfg->compressor == DT_DDP_POWERSGD ? &dt__cx_powersgd
                            : cfg->compressor == DT_DDP_TOPK   ? &dt__cx_topk
                                                               : NULL;
    if (!ops)
        return dt__fail(DT_ERR_INVALID, "data parallel: compressor %d is not powersgd (%d) or topk (%d)",
                        (int)cfg->compressor, (int)DT_DDP_POWERSGD, (int)DT_DDP_TOPK);
    dt_ddp_config c = *cfg;
    if (c.powersgd_rank == 0)
        c.powersgd_rank = 4;
    if (c.topk_fraction == 0)
        c.topk_fraction = 0.01;
    if (c.powersgd_rank < 1 || c.powersgd_rank > 1024)
        return dt__fail(DT_ERR_INVALID, "data parallel: powersgd rank %d is outside [1, 1024]", c.powersgd_rank);
    if (!(c.topk_fraction > 0 && c.topk_fraction <= 1))
        return dt__fail(DT_ERR_INVALID, "data parallel: topk fraction %g is outside (0, 1]", c.topk_fraction);
    if (c.compress_start < 0)
        return dt__fail(DT_ERR_INVALID, "data parallel: compress_start %lld is negative", (long long)c.compress_start);
    dt__compressor *x = calloc(1, sizeof *x);
    if (!x)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    x->ops = ops;
    x->cfg = c;
    x->p = p;
    x->world = world;
    x->nbuckets = nbuckets;
    x->numel = dt_params_numel(p);
    x->error = calloc((size_t)(x->numel ? x->numel : 1), sizeof *x->error);
    x->impl = calloc((size_t)(nbuckets ? nbuckets : 1), sizeof *x->impl);
    dt_status s = x->error && x->impl ? DT_OK
                                      : dt__fail(DT_ERR_NOMEM, "out of memory for %lld floats of error feedback",
                                                 (long long)x->numel);
    for (int b = 0; s == DT_OK && b < nbuckets; b++)
        s = ops->create(x, b, offset[b], count[b], &x->impl[b]);
    if (s != DT_OK) {
        dt__compressor_destroy(x);
        return s;
    }
    *out = x;
    return DT_OK;
}

void dt__compressor_destroy(dt__compressor *c)
{
    if (!c)
        return;
    for (int b = 0; c->impl && b < c->nbuckets; b++)
        if (c->impl[b])
            c->ops->destroy(c->impl[b]);
    free(c->impl);
    free(c->error);
    free(c);
}

dt_status dt__compressor_begin(dt__compressor *c, int b, float *g, dt__cx_msg *msg)
{
    return c->ops->begin(c, c->impl[b], g, msg);
}

dt_status dt__compressor_next(dt__compressor *c, int b, float *g, dt__cx_msg *msg, bool *more)
{
    return c->ops->next(c, c->impl[b], g, msg, more);
}

int dt__compressor_messages(const dt__compressor *c, int b) { return c->ops->messages(c->impl[b]); }

const float *dt__compressor_error(const dt__compressor *c) { return c->error; }

static uint64_t model_hash(dt_params *p)
{
    uint64_t h = DT_FNV64_SEED;
    for (int i = 0; i < dt_params_count(p); i++) {
        const dt_param_info *info = dt_params_info(p, i);
        h = dt__fnv1a64(h, info->name, strlen(info->name) + 1);
        h = dt__fnv1a64(h, info->shape, (size_t)info->ndim * sizeof info->shape[0]);
    }
    return h;
}

/* The extra state's total floats, and a hash of each bucket's share. */
static int64_t extra_floats(const dt__compressor *c, uint64_t *hash)
{
    int64_t total = 0;
    uint64_t h = DT_FNV64_SEED;
    for (int b = 0; b < c->nbuckets; b++) {
        size_t n = 0;
        c->ops->state(c->impl[b], &n);
        total += (int64_t)n;
        h = dt__fnv1a64(h, &n, sizeof n);
    }
    *hash = h;
    return total;
}

static void fill_header(const dt__compressor *c, int64_t steps, int rank, state_header *h)
{
    memset(h, 0, sizeof *h);
    memcpy(h->magic, "DTCXST1", 8);
    h->kind = (int32_t)c->cfg.compressor;
    h->rank = rank;
    h->world = c->world;
    h->steps = steps;
    h->numel = c->numel;
    h->extra = extra_floats(c, &h->buckets);
    h->model = model_hash(c->p);
}

dt_status dt__compressor_save(const dt__compressor *c, int64_t steps, int rank, const char *path)
{
    state_header h;
    fill_header(c, steps, rank, &h);
    size_t bytes = sizeof h + ((size_t)h.numel + (size_t)h.extra) * sizeof(float) + sizeof(uint64_t);
    char *buf = malloc(bytes), *at = buf;
    if (!buf)
        return dt__fail(DT_ERR_NOMEM, "compressor state: out of memory for %zu bytes", bytes);
    memcpy(at, &h, sizeof h);
    at += sizeof h;
    memcpy(at, c->error, (size_t)h.numel * sizeof(float));
    at += (size_t)h.numel * sizeof(float);
    for (int b = 0; b < c->nbuckets; b++) {
        size_t n = 0;
        const float *q = c->ops->state(c->impl[b], &n);
        if (n)
            memcpy(at, q, n * sizeof(float));
        at += n * sizeof(float);
    }
    uint64_t sum = dt__fnv1a64(DT_FNV64_SEED, buf, (size_t)(at - buf));
    memcpy(at, &sum, sizeof sum);
    dt_status s = dt_atomic_write(path, buf, bytes);
    free(buf);
    return s == DT_OK ? DT_OK : dt__fail(s, "compressor state: %s", dt_last_error());
}

static dt_status read_all(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return dt__fail(DT_ERR_INVALID, "compressor state %s: cannot open it", path);
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    dt_status s = DT_OK;
    do {
        if (n == cap) {
            char *more = realloc(buf, cap = cap ? 2 * cap : 1 << 16);
            if (!more) {
                s = dt__fail(DT_ERR_NOMEM, "compressor state %s: out of memory", path);
                break;
            }
            buf = more;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    if (s == DT_OK && ferror(f))
        s = dt__fail(DT_ERR_SYSTEM, "compressor state %s: read error", path);
    fclose(f);
    if (s != DT_OK) {
        free(buf);
        return s;
    }
    *out = buf;
    *len = n;
    return DT_OK;
}

dt_status dt__compressor_load(dt__compressor *c, const char *path, int rank, bool with_error, int64_t *steps)
{
    char *buf = NULL;
    size_t len = 0;
    DT_CHECK(read_all(path, &buf, &len));
    state_header want, h;
    fill_header(c, 0, rank, &want);
    dt_status s = DT_OK;
    size_t bytes = 0;
    if (len < sizeof h)
        s = dt__fail(DT_ERR_INVALID, "compressor state %s: %zu bytes, shorter than its header", path, len);
    else {
        memcpy(&h, buf, sizeof h);
        bytes = sizeof h + ((size_t)want.numel + (size_t)want.extra) * sizeof(float) + sizeof(uint64_t);
    }
    if (s == DT_OK && memcmp(h.magic, "DTCXST1", 8))
        s = dt__fail(DT_ERR_INVALID, "compressor state %s: not a compressor state file", path);
    else if (s == DT_OK && h.kind != want.kind)
        s = dt__fail(DT_ERR_INVALID, "compressor state %s: written by compressor %d, this run's is %d (%s)", path,
                     (int)h.kind, (int)want.kind, c->ops->name);
    else if (s == DT_OK && (h.numel != want.numel || h.extra != want.extra || h.model != want.model ||
                            h.buckets != want.buckets))
        s = dt__fail(DT_ERR_INVALID, "compressor state %s: another model or cut (%lld + %lld floats, this run "
                     "%lld + %lld; or names, shapes, buckets differ)", path, (long long)h.numel, (long long)h.extra,
                     (long long)want.numel, (long long)want.extra);
    else if (s == DT_OK && with_error && (h.rank != rank || h.world != c->world))
        s = dt__fail(DT_ERR_INVALID, "compressor state %s: rank %d of %d, this is rank %d of %d", path, (int)h.rank,
                     (int)h.world, rank, c->world);
    else if (s == DT_OK && len != bytes)
        s = dt__fail(DT_ERR_INVALID, "compressor state %s: %zu bytes, expected %zu", path, len, bytes);
    if (s == DT_OK) {
        uint64_t sum;
        memcpy(&sum, buf + bytes - sizeof sum, sizeof sum);
        if (sum != dt__fnv1a64(DT_FNV64_SEED, buf, bytes - sizeof sum))
            s = dt__fail(DT_ERR_INVALID, "compressor state %s: checksum mismatch (a damaged file)", path);
    }
    if (s == DT_OK) {
        const char *at = buf + sizeof h;
        if (with_error)
            memcpy(c->error, at, (size_t)h.numel * sizeof(float));
        else
            memset(c->error, 0, (size_t)h.numel * sizeof(float));
        at += (size_t)h.numel * sizeof(float);
        for (int b = 0; b < c->nbuckets; b++) {
            size_t n = 0;
            float *q = c->ops->state(c->impl[b], &n);
            if (n)
                memcpy(q, at, n * sizeof(float));
            at += n * sizeof(float);
        }
        *steps = h.steps;
    }
    free(buf);
    return s;
}
