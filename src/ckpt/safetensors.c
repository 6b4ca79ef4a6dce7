/* safetensors writer and reader for the flat parameter layout. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/status.h"
#include "ckpt/ckpt_internal.h"

#define MAX_HEADER (100u << 20)

dt_status dt__safetensors_header(dt_params *p, const char *const *metadata, size_t at_least, unsigned char **out,
                                 size_t *len)
{
    cJSON *root = cJSON_CreateObject();
    if (!root)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    if (metadata) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; metadata[i] && metadata[i + 1]; i += 2)
            cJSON_AddStringToObject(meta, metadata[i], metadata[i + 1]);
    }
    for (int i = 0; i < dt_params_count(p); i++) {
        const dt_param_info *pi = dt_params_info(p, i);
        cJSON *t = cJSON_AddObjectToObject(root, pi->name);
        cJSON_AddStringToObject(t, "dtype", "F32");
        cJSON *shape = cJSON_AddArrayToObject(t, "shape");
        for (int d = 0; d < pi->ndim; d++)
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)pi->shape[d]));
        cJSON *off = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(pi->offset * 4)));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)((pi->offset + pi->numel) * 4)));
    }
    char *json = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    size_t hlen = json ? strlen(json) : 0, padded = (hlen + 7) / 8 * 8;
    if (at_least > 8 && (at_least - 8) % 8 == 0 && at_least - 8 > padded)
        padded = at_least - 8;
    unsigned char *buf = json ? malloc(8 + padded) : NULL;
    if (!buf) {
        free(json);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)((uint64_t)padded >> (8 * i));
    memcpy(buf + 8, json, hlen);
    memset(buf + 8 + hlen, ' ', padded - hlen);
    free(json);
    *out = buf;
    *len = 8 + padded;
    return DT_OK;
}

dt_status dt_safetensors_write(const char *path, dt_params *p, const float *data, const char *const *metadata,
                               uint32_t *crc)
{
    unsigned char *header;
    size_t hlen, dlen = (size_t)dt_params_numel(p) * 4;
    dt_status s = dt__safetensors_header(p, metadata, 0, &header, &hlen);
    if (s != DT_OK)
        return dt__wrap(s, "%s: ", path);
    /* the header, then the data where it lies (little-endian hosts: f32 bytes
     * as they are): no copy of it.  Written a piece at a time, each piece's
     * CRC taken while the write has just brought it into the cache: one pass
     * over the data from memory, not two (a memory snapshot every step). */
    enum { PIECE = 512 << 10 };
    dt__atomic_file f;
    uint32_t c = dt__crc32(0, header, hlen);
    s = dt__atomic_open(&f, path);
    if (s == DT_OK)
        s = dt__atomic_append(&f, header, hlen);
    for (size_t at = 0; s == DT_OK && at < dlen; at += PIECE) {
        size_t n = dlen - at < PIECE ? dlen - at : PIECE;
        s = dt__atomic_append(&f, (const char *)data + at, n);
        c = dt__crc32(c, (const char *)data + at, n);
    }
    if (s == DT_OK)
        s = dt__atomic_commit(&f);
    if (s == DT_OK && crc)
        *crc = c;
    free(header);
    return s;
}

static dt_status check_tensor(const char *path, const dt_param_info *pi, const cJSON *t, size_t data_len, uint64_t *begin)
{
    const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    if (!cJSON_IsString(dtype) || strcmp(dtype->valuestring, "F32") != 0)
        return dt__fail(DT_ERR_INVALID, "%s: tensor %s is not F32", path, pi->name);
    if (!cJSON_IsArray(shape) || cJSON_GetArraySize(shape) != pi->ndim)
        return dt__fail(DT_ERR_INVALID, "%s: tensor %s has the wrong number of dimensions", path, pi->name);
    for (int d = 0; d < pi->ndim; d++) {
        const cJSON *v = cJSON_GetArrayItem(shape, d);
        if (!cJSON_IsNumber(v) || (int64_t)v->valuedouble != pi->shape[d])
            return dt__fail(DT_ERR_INVALID, "%s: tensor %s dimension %d is %g, the model has %lld", path, pi->name, d,
                            cJSON_IsNumber(v) ? v->valuedouble : -1.0, (long long)pi->shape[d]);
    }
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return dt__fail(DT_ERR_INVALID, "%s: tensor %s has no data_offsets", path, pi->name);
    double b = cJSON_GetArrayItem(off, 0)->valuedouble, e = cJSON_GetArrayItem(off, 1)->valuedouble;
    if (!(b >= 0 && e >= b && e <= (double)data_len && e - b == (double)pi->numel * 4))
        return dt__fail(DT_ERR_INVALID, "%s: tensor %s has byte range [%g, %g) but needs %lld bytes inside %zu (truncated?)",
                        path, pi->name, b, e, (long long)pi->numel * 4, data_len);
    *begin = (uint64_t)b;
    return DT_OK;
}

/* Read exactly n bytes at offset `at` of f (false: short or failed). */
static bool read_at(FILE *f, uint64_t at, void *out, size_t n)
{
    return fseeko(f, (off_t)at, SEEK_SET) == 0 && fread(out, 1, n, f) == n;
}

/* A tensor's bytes in the data section, and its parameter. */
typedef struct {
    uint64_t begin, end;
    int param;
} span;

static int by_begin(const void *a, const void *b)
{
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* The tensors cover the data section exactly, each byte once (the format
 * asks it: no overlap, no hole, nothing after): two tensors that share
 * bytes would load one's weights into the other. */
static dt_status check_tiling(const char *path, dt_params *p, span *spans, int count, uint64_t data_len)
{
    if (count > 1)
        qsort(spans, (size_t)count, sizeof *spans, by_begin);
    uint64_t at = 0;
    for (int i = 0; i < count; i++) {
        if (spans[i].begin != at)
            return dt__fail(DT_ERR_INVALID, "%s: tensor %s starts at byte %llu of the data, where %s (byte %llu)",
                            path, dt_params_info(p, spans[i].param)->name, (unsigned long long)spans[i].begin,
                            spans[i].begin < at ? "the tensor before it still runs: they overlap"
                                                : "nothing fills the bytes before it",
                            (unsigned long long)at);
        at = spans[i].end;
    }
    if (at != data_len)
        return dt__fail(DT_ERR_INVALID, "%s: %llu bytes after the last tensor's data", path,
                        (unsigned long long)(data_len - at));
    return DT_OK;
}

/* Each tensor goes from the file straight to its place in `data`: no copy
 * of the whole file is held (a model's worth of memory at every resume). */
dt_status dt_safetensors_read(const char *path, dt_params *p, float *data)
{
    DT_CHECK(dt__regular_file(path));
    FILE *f = fopen(path, "rb");
    if (!f)
        return dt__fail_errno(DT_ERR_INVALID, "cannot open %s", path);
    struct stat st;
    size_t len = fstat(fileno(f), &st) == 0 && st.st_size > 0 ? (size_t)st.st_size : 0;
    unsigned char head[8];
    if (len == 0 || !read_at(f, 0, head, len < 8 ? len : 8)) {
        fclose(f);
        return dt__fail(DT_ERR_INVALID, "%s: empty or unreadable", path);
    }
    uint64_t hlen = 0;
    for (int i = 0; len >= 8 && i < 8; i++)
        hlen |= (uint64_t)head[i] << (8 * i);
    dt_status s = DT_OK;
    cJSON *root = NULL;
    char *text = NULL;
    if (len < 8 || hlen > MAX_HEADER || 8 + hlen > len)
        s = dt__fail(DT_ERR_INVALID, "%s: not a safetensors file (header length %llu, file %zu bytes)", path,
                     (unsigned long long)hlen, len);
    else if (!(text = malloc((size_t)hlen + 1)) || !read_at(f, 8, text, (size_t)hlen))
        s = text ? dt__fail(DT_ERR_INVALID, "%s: empty or unreadable", path)
                 : dt__fail(DT_ERR_NOMEM, "out of memory for %s's header", path);
    else if (!(root = cJSON_ParseWithLength(text, (size_t)hlen)) || !cJSON_IsObject(root))
        s = dt__fail(DT_ERR_INVALID, "%s: the header is not valid JSON", path);
    free(text);
    int tensors = 0;
    for (const cJSON *it = root ? root->child : NULL; s == DT_OK && it; it = it->next)
        if (strcmp(it->string, "__metadata__") != 0) {
            tensors++;
            if (dt_params_find(p, it->string) < 0)
                s = dt__fail(DT_ERR_INVALID, "%s: tensor %s is not a parameter of this model", path, it->string);
        }
    if (s == DT_OK && tensors != dt_params_count(p))
        s = dt__fail(DT_ERR_INVALID, "%s: has %d tensors, the model has %d parameters", path, tensors, dt_params_count(p));
    size_t data_len = s == DT_OK ? len - 8 - (size_t)hlen : 0;
    int count = dt_params_count(p);
    span *spans = s == DT_OK ? malloc((size_t)(count > 0 ? count : 1) * sizeof *spans) : NULL;
    if (s == DT_OK && !spans)
        s = dt__fail(DT_ERR_NOMEM, "out of memory for %s's tensors", path);
    for (int i = 0; s == DT_OK && i < count; i++) {
        const dt_param_info *pi = dt_params_info(p, i);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, pi->name);
        spans[i] = (span){0, (uint64_t)pi->numel * 4, i};
        if (!t)
            s = dt__fail(DT_ERR_INVALID, "%s: parameter %s is missing", path, pi->name);
        else
            s = check_tensor(path, pi, t, data_len, &spans[i].begin);
        spans[i].end += spans[i].begin;
    }
    if (s == DT_OK)
        s = check_tiling(path, p, spans, count, data_len);
    for (int i = 0; s == DT_OK && i < count; i++) {
        const dt_param_info *pi = dt_params_info(p, spans[i].param);
        if (!read_at(f, 8 + hlen + spans[i].begin, data + pi->offset, (size_t)pi->numel * 4))
            s = dt__fail(DT_ERR_INVALID, "%s: cannot read tensor %s", path, pi->name);
    }
    free(spans);
    cJSON_Delete(root);
    fclose(f);
    return s;
}
