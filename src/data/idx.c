/* idx files (MNIST, Fashion-MNIST), gzip or raw, read through zlib. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/status.h"
#include "dtrain/data.h"

#define MAX_ITEMS 100000000LL

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* Read exactly len bytes; a short read is "truncated". */
static dt_status read_exact(gzFile f, const char *path, void *buf, size_t len, const char *what)
{
    size_t got = 0;
    while (got < len) {
        unsigned chunk = len - got > (1u << 30) ? (1u << 30) : (unsigned)(len - got);
        int n = gzread(f, (uint8_t *)buf + got, chunk);
        if (n < 0) {
            int err;
            const char *msg = gzerror(f, &err);
            return dt__fail(DT_ERR_INVALID, "%s: corrupt or not a gzip/idx file while reading %s: %s", path, what, msg);
        }
        if (n == 0)
            return dt__fail(DT_ERR_INVALID, "%s: truncated: %s needs %zu bytes, the file has %zu", path, what, len, got);
        got += (size_t)n;
    }
    return DT_OK;
}

/* Open and check the header: magic 0x00000800 | ndim, then ndim big-endian sizes. */
static dt_status open_idx(const char *path, int ndim, uint32_t *dims, gzFile *out)
{
    DT_CHECK(dt__regular_file(path));
    gzFile f = gzopen(path, "rb");
    if (!f)
        return dt__fail_errno(DT_ERR_INVALID, "cannot open %s", path);
    uint8_t hdr[16];
    dt_status s = read_exact(f, path, hdr, 4 + 4 * (size_t)ndim, "the header");
    if (s == DT_OK && be32(hdr) != (0x800u | (uint32_t)ndim))
        s = dt__fail(DT_ERR_INVALID, "%s: bad magic 0x%08x (expected 0x%08x, an idx file of %d dimensions)", path,
                     be32(hdr), 0x800u | (uint32_t)ndim, ndim);
    for (int i = 0; s == DT_OK && i < ndim; i++) {
        dims[i] = be32(hdr + 4 + 4 * i);
        if (dims[i] == 0 || dims[i] > MAX_ITEMS)
            s = dt__fail(DT_ERR_INVALID, "%s: dimension %d is %u", path, i, dims[i]);
    }
    if (s != DT_OK) {
        gzclose(f);
        return s;
    }
    *out = f;
    return DT_OK;
}

static dt_status expect_end(gzFile f, const char *path)
{
    uint8_t extra;
    if (gzread(f, &extra, 1) != 0)
        return dt__fail(DT_ERR_INVALID, "%s: trailing bytes after the data (wrong sizes in the header?)", path);
    return DT_OK;
}

dt_status dt_idx_load(const char *images_path, const char *labels_path, dt_idx_set *out)
{
    memset(out, 0, sizeof *out);
    uint32_t idims[3], ldims[1];
    gzFile fi = NULL, fl = NULL;
    dt_status s = open_idx(images_path, 3, idims, &fi);
    if (s == DT_OK)
        s = open_idx(labels_path, 1, ldims, &fl);
    if (s == DT_OK && idims[0] != ldims[0])
        s = dt__fail(DT_ERR_INVALID, "%s has %u images but %s has %u labels", images_path, idims[0], labels_path, ldims[0]);
    if (s == DT_OK && (uint64_t)idims[1] * idims[2] > 1u << 20)
        s = dt__fail(DT_ERR_INVALID, "%s: images of %u x %u are implausibly large", images_path, idims[1], idims[2]);
    if (s == DT_OK) {
        out->count = idims[0];
        out->rows = (int)idims[1];
        out->cols = (int)idims[2];
        size_t npix = (size_t)out->count * (size_t)out->rows * (size_t)out->cols;
        out->images = malloc(npix);
        out->labels = malloc((size_t)out->count);
        if (!out->images || !out->labels)
            s = dt__fail(DT_ERR_NOMEM, "out of memory for %lld images", (long long)out->count);
        if (s == DT_OK)
            s = read_exact(fi, images_path, out->images, npix, "the pixels");
        if (s == DT_OK)
            s = expect_end(fi, images_path);
        if (s == DT_OK)
            s = read_exact(fl, labels_path, out->labels, (size_t)out->count, "the labels");
        if (s == DT_OK)
            s = expect_end(fl, labels_path);
        for (int64_t i = 0; s == DT_OK && i < out->count; i++)
            if (out->labels[i] > 9)
                s = dt__fail(DT_ERR_INVALID, "%s: label %d of sample %lld is not a class 0..9", labels_path,
                             out->labels[i], (long long)i);
    }
    if (fi)
        gzclose(fi);
    if (fl)
        gzclose(fl);
    if (s != DT_OK)
        dt_idx_free(out);
    return s;
}

dt_status dt_idx_load_dir(const char *dir, const char *split, dt_idx_set *out)
{
    if (strcmp(split, "train") != 0 && strcmp(split, "t10k") != 0)
        return dt__fail(DT_ERR_INVALID, "idx split '%s': expected train or t10k", split);
    char images[4096], labels[4096];
    snprintf(images, sizeof images, "%s/%s-images-idx3-ubyte.gz", dir, split);
    snprintf(labels, sizeof labels, "%s/%s-labels-idx1-ubyte.gz", dir, split);
    return dt_idx_load(images, labels, out);
}

void dt_idx_batch(const dt_idx_set *s, const int64_t *indices, int64_t n, float *x, int32_t *y)
{
    int64_t px = (int64_t)s->rows * s->cols;
    for (int64_t b = 0; b < n; b++) {
        const uint8_t *restrict img = s->images + indices[b] * px;
        float *restrict out = x + b * px; /* restrict: a float store must not force byte reloads */
        for (int64_t i = 0; i < px; i++)
            out[i] = (float)img[i] * (1.0f / 255.0f);
        if (y)
            y[b] = s->labels[indices[b]];
    }
}

void dt_idx_free(dt_idx_set *s)
{
    free(s->images);
    free(s->labels);
    memset(s, 0, sizeof *s);
}
