/* Sharded checkpoints: each rank of a ZeRO group writes its shard of the
 * optimizer state (and at stage 3 of the values) into the step's temporary
 * directory; the manifest's "sharding" says how the shards cut the flat
 * buffer, so that a reader with any number of ranks takes what it needs
 * from each file.
 *
 * The cut (src/parallel/zero/shard.c makes it): units are ranges of the
 * flat buffer, each padded to a multiple of N and cut into N slices of
 * ceil(numel / N); rank r's shard is slice r of every unit, one after the
 * other.  A reader of N' ranks wants, of unit k, the range [r' s', (r'+1) s')
 * clipped to numel; old rank q holds [q s, (q+1) s) at its shard offset
 * sum of the slices before k: the overlap of the two is one pread.  A rank
 * of N' reads about 1/N' of the state, from the ceil(N / N') + 1 files at
 * most that overlap it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json.h"
#include "base/status.h"
#include "ckpt/ckpt_internal.h"
#include "dtrain/version.h"

/* 2^53: the whole numbers a double holds exactly. */
static const double BIG = 9007199254740992.0;

static int64_t slice_of(int64_t numel, int nranks)
{
    return (numel + nranks - 1) / nranks;
}

int64_t dt_ckpt_shard_numel(const dt_ckpt_sharding *sh)
{
    if (!sh || sh->nranks < 1 || sh->nunits < 0 || (sh->nunits && !sh->units))
        return -1;
    int64_t n = 0;
    for (int k = 0; k < sh->nunits; k++) {
        if (sh->units[k].numel < 0 || sh->units[k].offset < 0)
            return -1;
        n += slice_of(sh->units[k].numel, sh->nranks);
    }
    return n;
}

dt_status dt_ckpt_shard_name(int rank, int nranks, char *out, size_t len)
{
    if (nranks < 1 || nranks > 99999 || rank < 0 || rank >= nranks)
        return dt__fail(DT_ERR_INVALID, "shard file: rank %d of %d (at most 99999 ranks)", rank, nranks);
    return dt__ckpt_path(out, len, DT__CKPT_SHARD_FMT, rank, nranks);
}

dt_status dt__ckpt_tmp_dir(const char *root, int64_t step, char *out, size_t len)
{
    return dt__ckpt_path(out, len, "%s/.step-%08" PRId64 ".tmp", root, step);
}

dt_status dt_ckpt_shard_prepare(const char *root, int64_t step)
{
    char tmp[DT_CKPT_PATH_MAX];
    DT_CHECK(dt__ckpt_tmp_dir(root, step, tmp, sizeof tmp));
    if (mkdir(root, 0755) != 0 && errno != EEXIST)
        return dt__fail_errno(DT_ERR_SYSTEM, "cannot create checkpoint directory %s", root);
    dt__ckpt_remove_dir(tmp); /* left by a writer that died */
    if (mkdir(tmp, 0755) != 0)
        return dt__fail_errno(DT_ERR_SYSTEM, "cannot create %s", tmp);
    return DT_OK;
}

void dt_ckpt_shard_abandon(const char *root, int64_t step)
{
    char tmp[DT_CKPT_PATH_MAX];
    if (dt__ckpt_tmp_dir(root, step, tmp, sizeof tmp) == DT_OK)
        dt__ckpt_remove_dir(tmp);
}

/* The sharding's fields a writer passes in, checked before anything is written. */
static dt_status check_given(const dt_ckpt_sharding *sh)
{
    if (!sh || sh->stage < 1 || sh->stage > 3 || sh->nranks < 1 || sh->nranks > 99999 || sh->ntensors < 1 ||
        sh->ntensors > DT__CKPT_SHARD_TENSORS_MAX || !sh->tensors || dt_ckpt_shard_numel(sh) < 0)
        return dt__fail(DT_ERR_INVALID, "sharded checkpoint: a bad sharding (stage %d, %d ranks, %d tensors)",
                        sh ? sh->stage : -1, sh ? sh->nranks : -1, sh ? sh->ntensors : -1);
    for (int i = 0; i < sh->ntensors; i++)
        if (!sh->tensors[i] || !sh->tensors[i][0] || strlen(sh->tensors[i]) > 32)
            return dt__fail(DT_ERR_INVALID, "sharded checkpoint: tensor name %d is empty or long", i);
    return DT_OK;
}

/* The tensors from arrays (whole) or, arrays NULL, from read in pieces. */
static dt_status write_shard(const char *root, int64_t step, const dt_ckpt_sharding *sh, int rank,
                             const float *const *arrays, dt_ckpt_shard_read_fn read, void *user,
                             dt_ckpt_shard_file *out)
{
    DT_CHECK(check_given(sh));
    char tmp[DT_CKPT_PATH_MAX], path[DT_CKPT_PATH_MAX];
    DT_CHECK(dt_ckpt_shard_name(rank, sh->nranks, out->name, sizeof out->name));
    DT_CHECK(dt__ckpt_tmp_dir(root, step, tmp, sizeof tmp));
    DT_CHECK(dt__ckpt_path(path, sizeof path, "%s/%s", tmp, out->name));
    int64_t S = dt_ckpt_shard_numel(sh);
    /* the safetensors header: each tensor F32 [S], one after the other */
    cJSON *h = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(h, "__metadata__");
    char text[32];
    cJSON_AddStringToObject(meta, "producer", "dtrain");
    cJSON_AddStringToObject(meta, "dtrain_version", DTRAIN_VERSION);
    cJSON_AddStringToObject(meta, "kind", "zero-shard");
    snprintf(text, sizeof text, "%d", rank);
    cJSON_AddStringToObject(meta, "rank", text);
    snprintf(text, sizeof text, "%d", sh->nranks);
    cJSON_AddStringToObject(meta, "ranks", text);
    snprintf(text, sizeof text, "%" PRId64, step);
    cJSON_AddStringToObject(meta, "step", text);
    for (int i = 0; i < sh->ntensors; i++) {
        cJSON *t = cJSON_AddObjectToObject(h, sh->tensors[i]);
        cJSON_AddStringToObject(t, "dtype", "F32");
        cJSON_AddItemToObject(t, "shape", cJSON_CreateArray());
        cJSON_AddItemToArray(cJSON_GetObjectItem(t, "shape"), cJSON_CreateNumber((double)S));
        cJSON *off = cJSON_AddArrayToObject(t, "data_offsets");
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)i * (double)S * 4));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)(i + 1) * (double)S * 4));
    }
    char *json = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    size_t hlen = json ? strlen(json) : 0, padded = (hlen + 7) / 8 * 8;
    char *header = json ? malloc(8 + padded) : NULL;
    if (!header) {
        free(json);
        return dt__fail(DT_ERR_NOMEM, "out of memory for %s", path);
    }
    for (int i = 0; i < 8; i++)
        header[i] = (char)((uint64_t)padded >> (8 * i));
    memcpy(header + 8, json, hlen);
    memset(header + 8 + hlen, ' ', padded - hlen);
    free(json);
    int64_t piece = S < DT_CKPT_SHARD_PIECE ? S : DT_CKPT_SHARD_PIECE;
    float *buf = arrays ? NULL : malloc((size_t)(piece ? piece : 1) * sizeof *buf);
    dt__atomic_file f;
    dt_status s = arrays || buf ? dt__atomic_open(&f, path) : dt__fail(DT_ERR_NOMEM, "out of memory for %s", path);
    if (s == DT_OK)
        s = dt__atomic_append(&f, header, 8 + padded);
    for (int i = 0; s == DT_OK && i < sh->ntensors; i++) { /* little-endian hosts: f32 bytes as they are */
        if (arrays) {
            s = dt__atomic_append(&f, arrays[i], (size_t)S * sizeof(float));
            continue;
        }
        for (int64_t at = 0; s == DT_OK && at < S; at += piece) {
            int64_t n = S - at < piece ? S - at : piece;
            if ((s = read(user, i, at, n, buf)) != DT_OK)
                dt__atomic_abandon(&f);
            else
                s = dt__atomic_append(&f, buf, (size_t)n * sizeof(float));
        }
    }
    if (s == DT_OK)
        s = dt__atomic_commit(&f);
    free(buf);
    free(header);
    if (s == DT_OK) /* the bytes on disk, read back */
        s = dt_file_crc32(path, &out->crc, &out->bytes);
    if (s != DT_OK)
        return dt__wrap(s, "rank %d's shard of the checkpoint at step %" PRId64 " not written: ", rank, step);
    return DT_OK;
}

dt_status dt_ckpt_shard_write(const char *root, int64_t step, const dt_ckpt_sharding *sh, int rank,
                              const float *const *arrays, dt_ckpt_shard_file *out)
{
    if (!arrays)
        return dt__fail(DT_ERR_INVALID, "dt_ckpt_shard_write: arrays is NULL");
    return write_shard(root, step, sh, rank, arrays, NULL, NULL, out);
}

dt_status dt_ckpt_shard_write_from(const char *root, int64_t step, const dt_ckpt_sharding *sh, int rank,
                                   dt_ckpt_shard_read_fn read, void *user, dt_ckpt_shard_file *out)
{
    if (!read)
        return dt__fail(DT_ERR_INVALID, "dt_ckpt_shard_write_from: read is NULL");
    return write_shard(root, step, sh, rank, NULL, read, user, out);
}

cJSON *dt__ckpt_sharding_json(const dt_ckpt_sharding *sh)
{
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", "zero");
    cJSON_AddNumberToObject(j, "stage", sh->stage);
    cJSON_AddNumberToObject(j, "ranks", sh->nranks);
    cJSON_AddNumberToObject(j, "shard_numel", (double)dt_ckpt_shard_numel(sh));
    cJSON_AddTrueToObject(j, "padded");
    cJSON *t = cJSON_AddArrayToObject(j, "tensors"), *f = cJSON_AddArrayToObject(j, "files");
    for (int i = 0; i < sh->ntensors; i++)
        cJSON_AddItemToArray(t, cJSON_CreateString(sh->tensors[i]));
    for (int r = 0; r < sh->nranks; r++) {
        char name[64];
        snprintf(name, sizeof name, DT__CKPT_SHARD_FMT, r, sh->nranks);
        cJSON_AddItemToArray(f, cJSON_CreateString(name));
    }
    cJSON *u = cJSON_AddArrayToObject(j, "units");
    for (int k = 0; k < sh->nunits; k++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "offset", (double)sh->units[k].offset);
        cJSON_AddNumberToObject(e, "numel", (double)sh->units[k].numel);
        cJSON_AddNumberToObject(e, "slice", (double)slice_of(sh->units[k].numel, sh->nranks));
        cJSON_AddItemToArray(u, e);
    }
    return j;
}

/* A whole number field of "sharding" in [min, max]; field names it. */
static dt_status whole(const dt_ckpt_manifest *m, const cJSON *obj, const char *key, const char *field,
                       double min, double max, int64_t *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v))
        return dt__fail(DT_ERR_INVALID, "%s: the manifest's field %s is missing or not a number", m->dir,
                        field);
    double d = v->valuedouble;
    if (!(d >= min && d <= max) || d != (double)(int64_t)d)
        return dt__fail(DT_ERR_INVALID,
                        "%s: the manifest's field %s = %.17g is not a whole number in [%.0f, %.0f]", m->dir,
                        field, d, min, max);
    *out = (int64_t)d;
    return DT_OK;
}

void dt__ckpt_sharding_free(dt__ckpt_shards *s)
{
    free(s->units);
    free(s->files);
    *s = (dt__ckpt_shards){0};
}

dt_status dt__ckpt_sharding_parse(const dt_ckpt_manifest *m, const cJSON *j, dt__ckpt_shards *out)
{
    *out = (dt__ckpt_shards){0};
    if (!j)
        return DT_OK; /* not sharded */
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(j, "kind");
    if (!cJSON_IsObject(j) || !cJSON_IsString(kind) || strcmp(kind->valuestring, "zero") != 0)
        return dt__fail(DT_ERR_INVALID,
                        "%s: the manifest's field sharding.kind is not \"zero\" (the only kind)", m->dir);
    int64_t stage, ranks, S;
    DT_CHECK(whole(m, j, "stage", "sharding.stage", 1, 3, &stage));
    DT_CHECK(whole(m, j, "ranks", "sharding.ranks", 1, 99999, &ranks));
    DT_CHECK(whole(m, j, "shard_numel", "sharding.shard_numel", 0, BIG, &S));
    if (!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "padded")))
        return dt__fail(DT_ERR_INVALID, "%s: the manifest's field sharding.padded is not true", m->dir);
    const cJSON *tensors = cJSON_GetObjectItemCaseSensitive(j, "tensors");
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(j, "files");
    const cJSON *units = cJSON_GetObjectItemCaseSensitive(j, "units");
    const cJSON *listed = cJSON_GetObjectItemCaseSensitive(m->json, "files");
    int nt = cJSON_GetArraySize(tensors);
    if (!cJSON_IsArray(tensors) || nt < 1 || nt > DT__CKPT_SHARD_TENSORS_MAX)
        return dt__fail(DT_ERR_INVALID, "%s: the manifest's field sharding.tensors must list 1 to %d names",
                        m->dir, DT__CKPT_SHARD_TENSORS_MAX);
    if (!cJSON_IsArray(files) || cJSON_GetArraySize(files) != ranks)
        return dt__fail(DT_ERR_INVALID,
                        "%s: the manifest's field sharding.files lists %d files, sharding.ranks is %lld",
                        m->dir, cJSON_IsArray(files) ? cJSON_GetArraySize(files) : -1, (long long)ranks);
    if (!cJSON_IsArray(units))
        return dt__fail(DT_ERR_INVALID, "%s: the manifest's field sharding.units is missing", m->dir);
    dt__ckpt_shards s = {.sh = {.stage = (int)stage, .nranks = (int)ranks, .ntensors = nt}, .shard_numel = S};
    s.sh.nunits = cJSON_GetArraySize(units);
    s.units = malloc((size_t)(s.sh.nunits ? s.sh.nunits : 1) * sizeof *s.units);
    s.files = malloc((size_t)ranks * sizeof *s.files);
    dt_status st = s.units && s.files ? DT_OK : dt__fail(DT_ERR_NOMEM, "out of memory reading %s", m->path);
    for (int i = 0; st == DT_OK && i < nt; i++) {
        const cJSON *t = cJSON_GetArrayItem(tensors, i);
        if (!cJSON_IsString(t) || !t->valuestring[0] || strlen(t->valuestring) > 32)
            st = dt__fail(DT_ERR_INVALID,
                          "%s: the manifest's field sharding.tensors[%d] is not a tensor name", m->dir, i);
        for (int k = 0; st == DT_OK && k < i; k++)
            if (!strcmp(s.tensors[k], t->valuestring))
                st = dt__fail(DT_ERR_INVALID, "%s: the manifest's field sharding.tensors names %s twice",
                              m->dir, t->valuestring);
        if (st == DT_OK)
            s.tensors[i] = t->valuestring;
    }
    for (int r = 0; st == DT_OK && r < ranks; r++) {
        const cJSON *f = cJSON_GetArrayItem(files, r);
        char want[64];
        snprintf(want, sizeof want, DT__CKPT_SHARD_FMT, r, (int)ranks);
        if (!cJSON_IsString(f) || strcmp(f->valuestring, want) != 0)
            st = dt__fail(DT_ERR_INVALID,
                          "%s: the manifest's field sharding.files[%d] = %.80s, rank %d's file is %s", m->dir,
                          r, cJSON_IsString(f) ? f->valuestring : "(not a string)", r, want);
        else if (!cJSON_GetObjectItemCaseSensitive(listed, want))
            st = dt__fail(DT_ERR_INVALID,
                          "%s: shard file %s (sharding.files[%d]) is not in the manifest's files", m->dir,
                          want, r);
        else
            s.files[r] = f->valuestring;
    }
    int64_t sum = 0;
    for (int k = 0; st == DT_OK && k < s.sh.nunits; k++) {
        const cJSON *u = cJSON_GetArrayItem(units, k);
        char field[96];
        int64_t slice;
        snprintf(field, sizeof field, "sharding.units[%d].offset", k);
        st = whole(m, u, "offset", field, 0, BIG, &s.units[k].offset);
        snprintf(field, sizeof field, "sharding.units[%d].numel", k);
        if (st == DT_OK)
            st = whole(m, u, "numel", field, 1, BIG, &s.units[k].numel);
        snprintf(field, sizeof field, "sharding.units[%d].slice", k);
        if (st == DT_OK)
            st = whole(m, u, "slice", field, 0, BIG, &slice);
        if (st == DT_OK && slice != slice_of(s.units[k].numel, (int)ranks))
            st = dt__fail(DT_ERR_INVALID, "%s: the manifest's field %s = %lld, ceil(numel / ranks) is %lld",
                          m->dir, field, (long long)slice, (long long)slice_of(s.units[k].numel, (int)ranks));
        sum += st == DT_OK ? slice : 0;
    }
    if (st == DT_OK && sum != S)
        st = dt__fail(DT_ERR_INVALID,
                      "%s: the manifest's field sharding.shard_numel = %lld, its units' slices sum to %lld",
                      m->dir, (long long)S, (long long)sum);
    if (st != DT_OK) {
        dt__ckpt_sharding_free(&s);
        return st;
    }
    s.sh.units = s.units;
    s.sh.tensors = s.tensors;
    *out = s;
    return DT_OK;
}

bool dt__ckpt_is_shard_file(const dt_ckpt_manifest *m, const char *name)
{
    for (int r = 0; r < m->shards.sh.nranks; r++)
        if (!strcmp(m->shards.files[r], name))
            return true;
    return false;
}

/* An open shard file and where each of its tensors' data begins. */
typedef struct {
    int fd;
    uint64_t data;  /* the data's offset in the file */
    uint64_t begin; /* the tensor's offset in the data */
} shard_reader;

/* Open dir/name, check its header against the sharding (the tensors it
 * names, each F32 [S] inside the file) and, for `tensor` (may be NULL),
 * find where it begins.  fd -1 in *r when it only checks. */
static dt_status open_shard(const dt_ckpt_manifest *m, const char *name, const char *tensor, shard_reader *r)
{
    char path[DT_CKPT_PATH_MAX];
    DT_CHECK(dt__ckpt_path(path, sizeof path, "%s/%s", m->dir, name));
    DT_CHECK(dt__regular_file(path));
    r->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (r->fd < 0)
        return dt__fail_errno(DT_ERR_INVALID, "checkpoint shard file missing: %s", path);
    unsigned char len[8];
    struct stat st;
    uint64_t hlen = 0;
    dt_status s = DT_OK;
    if (fstat(r->fd, &st) != 0 || pread(r->fd, len, 8, 0) != 8)
        s = dt__fail(DT_ERR_INVALID, "%s: not a safetensors file (shorter than 8 bytes)", path);
    for (int i = 0; s == DT_OK && i < 8; i++)
        hlen |= (uint64_t)len[i] << (8 * i);
    if (s == DT_OK && (hlen > (100u << 20) || 8 + hlen > (uint64_t)st.st_size))
        s = dt__fail(DT_ERR_INVALID, "%s: not a safetensors file (header length %llu, file %lld bytes)", path,
                     (unsigned long long)hlen, (long long)st.st_size);
    char *text = s == DT_OK ? malloc(hlen + 1) : NULL;
    if (s == DT_OK && (!text || pread(r->fd, text, hlen, 8) != (ssize_t)hlen))
        s = dt__fail(DT_ERR_INVALID, "%s: cannot read its header", path);
    cJSON *h = NULL;
    if (s == DT_OK) {
        text[hlen] = '\0';
        if (!(h = dt__json_parse(text)) || !cJSON_IsObject(h))
            s = dt__fail(DT_ERR_INVALID, "%s: the header is not valid JSON", path);
    }
    free(text);
    const dt__ckpt_shards *sh = &m->shards;
    uint64_t data_len = s == DT_OK ? (uint64_t)st.st_size - 8 - hlen : 0;
    int tensors = 0;
    for (const cJSON *t = h ? h->child : NULL; t; t = t->next)
        tensors += strcmp(t->string, "__metadata__") != 0;
    if (s == DT_OK && tensors != sh->sh.ntensors)
        s = dt__fail(DT_ERR_INVALID, "%s holds %d tensors, the manifest's sharding.tensors names %d", path,
                     tensors, sh->sh.ntensors);
    bool found = !tensor;
    for (int i = 0; s == DT_OK && i < sh->sh.ntensors; i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(h, sh->tensors[i]);
        const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(t, "dtype");
        const cJSON *shape = cJSON_GetObjectItemCaseSensitive(t, "shape");
        const cJSON *off = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
        double b = cJSON_GetArraySize(off) == 2 ? cJSON_GetArrayItem(off, 0)->valuedouble : -1;
        double e = cJSON_GetArraySize(off) == 2 ? cJSON_GetArrayItem(off, 1)->valuedouble : -1;
        if (!t)
            s = dt__fail(DT_ERR_INVALID, "%s: tensor %s (in the manifest's sharding.tensors) is missing",
                         path, sh->tensors[i]);
        else if (!cJSON_IsString(dtype) || strcmp(dtype->valuestring, "F32") != 0)
            s = dt__fail(DT_ERR_INVALID, "%s: tensor %s is not F32", path, sh->tensors[i]);
        else if (cJSON_GetArraySize(shape) != 1 ||
                 cJSON_GetArrayItem(shape, 0)->valuedouble != (double)sh->shard_numel)
            s = dt__fail(DT_ERR_INVALID, "%s: tensor %s is not [%lld] (the manifest's sharding.shard_numel)",
                         path, sh->tensors[i], (long long)sh->shard_numel);
        else if (!(b >= 0 && e - b == (double)sh->shard_numel * 4 && e <= (double)data_len) ||
                 b != (double)(int64_t)b)
            s = dt__fail(DT_ERR_INVALID,
                         "%s: tensor %s has byte range [%g, %g), not %lld bytes inside %llu (truncated?)",
                         path, sh->tensors[i], b, e, (long long)sh->shard_numel * 4,
                         (unsigned long long)data_len);
        else if (tensor && !strcmp(tensor, sh->tensors[i])) {
            found = true;
            r->data = 8 + hlen;
            r->begin = (uint64_t)b;
        }
    }
    cJSON_Delete(h);
    if (s == DT_OK && !found)
        s = dt__fail(DT_ERR_INVALID, "%s: the checkpoint's shards hold no tensor %s (sharding.tensors)",
                     m->dir, tensor);
    if (s != DT_OK || !tensor) {
        close(r->fd);
        r->fd = -1;
    }
    return s;
}

dt_status dt__ckpt_check_shard_file(const dt_ckpt_manifest *m, const char *name)
{
    shard_reader r;
    return open_shard(m, name, NULL, &r);
}

dt_status dt_ckpt_manifest_check_sharding(const dt_ckpt_manifest *m, const dt_ckpt_unit *units, int nunits,
                                          dt_ckpt_sharding *out)
{
    const dt__ckpt_shards *s = &m->shards;
    if (out)
        *out = s->sh;
    if (s->sh.nranks == 0)
        return DT_OK;
    if (nunits != s->sh.nunits)
        return dt__fail(DT_ERR_INVALID,
                        "%s: the manifest's sharding.units has %d units, the model's ZeRO layout %d", m->dir,
                        s->sh.nunits, nunits);
    for (int k = 0; k < nunits; k++) {
        if (units[k].offset != s->units[k].offset)
            return dt__fail(
                DT_ERR_INVALID,
                "%s: the manifest's field sharding.units[%d].offset = %lld, the model's ZeRO layout has %lld",
                m->dir, k, (long long)s->units[k].offset, (long long)units[k].offset);
        if (units[k].numel != s->units[k].numel)
            return dt__fail(
                DT_ERR_INVALID,
                "%s: the manifest's field sharding.units[%d].numel = %lld, the model's ZeRO layout has %lld",
                m->dir, k, (long long)s->units[k].numel, (long long)units[k].numel);
    }
    return DT_OK;
}

dt_status dt_ckpt_shards(const char *step_dir, int *nranks, int *stage, int *ntensors)
{
    dt_ckpt_manifest *m;
    DT_CHECK(dt__ckpt_manifest_read(step_dir, false, &m));
    *nranks = m->shards.sh.nranks;
    if (stage)
        *stage = m->shards.sh.stage;
    if (ntensors)
        *ntensors = m->shards.sh.ntensors;
    dt_ckpt_manifest_close(m);
    return DT_OK;
}

/* pread exactly n bytes at off. */
static dt_status read_at(int fd, void *buf, size_t n, uint64_t off, const char *dir, const char *name)
{
    for (size_t done = 0; done < n;) {
        ssize_t got = pread(fd, (char *)buf + done, n - done, (off_t)(off + done));
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return dt__fail_errno(DT_ERR_INVALID, "%s/%s: cannot read %zu bytes at %llu", dir, name, n,
                                  (unsigned long long)off);
        done += (size_t)got;
    }
    return DT_OK;
}

static dt_status load_shard(const dt_ckpt_manifest *m, const char *tensor, int nranks, int rank, float *out,
                            int64_t numel)
{
    const dt__ckpt_shards *s = &m->shards;
    if (s->sh.nranks == 0)
        return dt__fail(DT_ERR_INVALID, "%s is not a sharded checkpoint (its manifest has no sharding)",
                        m->dir);
    if (nranks < 0 || (nranks > 0 && (rank < 0 || rank >= nranks)) || !out || numel < 0)
        return dt__fail(DT_ERR_INVALID, "dt_ckpt_load_shard: rank %d of %d", rank, nranks);
    int N = s->sh.nranks;
    int64_t want = 0; /* the output's length */
    for (int k = 0; k < s->sh.nunits; k++) {
        const dt_ckpt_unit *u = &s->units[k];
        int64_t end = u->offset + u->numel;
        want = nranks ? want + slice_of(u->numel, nranks) : (end > want ? end : want);
    }
    if (nranks ? numel != want : numel < want)
        return dt__fail(DT_ERR_INVALID,
                        "%s: the shard of rank %d of %d has %lld elements, the caller's has %lld", m->dir,
                        rank, nranks, (long long)want, (long long)numel);
    memset(out, 0, (size_t)numel * sizeof *out); /* padding, and elements no unit covers */
    shard_reader *r = calloc((size_t)N, sizeof *r);
    if (!r)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int q = 0; q < N; q++)
        r[q].fd = -2; /* not opened yet */
    dt_status st = DT_OK;
    int64_t old_at = 0, new_at = 0; /* the unit's slice in an old shard, in the new one */
    for (int k = 0; st == DT_OK && k < s->sh.nunits; k++) {
        const dt_ckpt_unit *u = &s->units[k];
        int64_t so = slice_of(u->numel, N), sn = nranks ? slice_of(u->numel, nranks) : u->numel;
        int64_t lo = nranks ? (int64_t)rank * sn : 0, hi = lo + sn < u->numel ? lo + sn : u->numel;
        float *dst = nranks ? out + new_at : out + u->offset;
        for (int q = lo < hi ? (int)(lo / so) : N; st == DT_OK && q < N && (int64_t)q * so < hi; q++) {
            int64_t a = (int64_t)q * so > lo ? (int64_t)q * so : lo,
                    b = (int64_t)(q + 1) * so < hi ? (int64_t)(q + 1) * so : hi;
            if (a >= b)
                continue;
            if (r[q].fd == -2 && (st = open_shard(m, s->files[q], tensor, &r[q])) != DT_OK)
                break;
            uint64_t off = r[q].data + r[q].begin + (uint64_t)(old_at + a - (int64_t)q * so) * sizeof(float);
            st = read_at(r[q].fd, dst + (a - lo), (size_t)(b - a) * sizeof(float), off, m->dir, s->files[q]);
        }
        old_at += so;
        new_at += nranks ? sn : 0;
    }
    for (int q = 0; q < N; q++)
        if (r[q].fd >= 0)
            close(r[q].fd);
    free(r);
    return st;
}

dt_status dt_ckpt_load_shard(const char *step_dir, const char *tensor, int nranks, int rank, float *out,
                             int64_t numel)
{
    dt_ckpt_manifest *m;
    DT_CHECK(dt__ckpt_manifest_read(step_dir, false, &m));
    dt_status s = load_shard(m, tensor, nranks, rank, out, numel);
    dt_ckpt_manifest_close(m);
    return s;
}
