/* manifest.json: written last into a step directory, read back with its own
 * checksum (manifest_crc32) and every file it lists checked for size and
 * CRC-32.  The range checks of its values are in progress.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/json.h"
#include "base/status.h"
#include "ckpt/ckpt_internal.h"

/* Parsing the canonical text and printing it again gives the same text, so
 * the writer and the reader agree whatever the file's layout. */
bool dt__ckpt_manifest_crc(cJSON *m, uint32_t *crc)
{
    cJSON *saved = cJSON_DetachItemFromObjectCaseSensitive(m, "manifest_crc32");
    char *text = cJSON_PrintUnformatted(m);
    if (saved)
        cJSON_AddItemToObject(m, "manifest_crc32", saved);
    if (!text)
        return false;
    *crc = dt__crc32(0, text, strlen(text));
    free(text);
    return true;
}

/* The members in the order of every manifest written so far (files first). */
static cJSON *build(const dt__ckpt_file *files, int nfiles, const dt_ckpt_meta *meta,
                    const dt_ckpt_progress *pr, cJSON *sharding, cJSON *config)
{
    cJSON *manifest = cJSON_CreateObject(), *jfiles = cJSON_AddObjectToObject(manifest, "files");
    cJSON_AddStringToObject(manifest, "format", DT__CKPT_FORMAT);
    for (int i = 0; i < nfiles; i++) {
        cJSON *f = cJSON_AddObjectToObject(jfiles, files[i].name);
        cJSON_AddNumberToObject(f, "bytes", (double)files[i].bytes);
        cJSON_AddNumberToObject(f, "crc32", (double)files[i].crc);
    }
    cJSON_AddNumberToObject(manifest, "step", (double)pr->step);
    cJSON_AddNumberToObject(manifest, "world_size", (double)pr->world_size);
    cJSON_AddNumberToObject(manifest, "global_batch", (double)pr->global_batch);
    cJSON *s = cJSON_AddObjectToObject(manifest, "sampler");
    cJSON_AddNumberToObject(s, "epoch", (double)pr->epoch);
    cJSON_AddNumberToObject(s, "position", (double)pr->position);
    cJSON *opt = cJSON_AddObjectToObject(manifest, "optimizer");
    cJSON_AddStringToObject(opt, "kind", meta->optimizer ? meta->optimizer : "");
    cJSON_AddNumberToObject(opt, "steps", (double)pr->optimizer_steps);
    cJSON *rng = cJSON_AddArrayToObject(manifest, "rng");
    for (int i = 0; i < 4; i++) { /* 64-bit words as strings: JSON numbers are doubles */
        char w[32];
        snprintf(w, sizeof w, "%" PRIu64, pr->rng.s[i]);
        cJSON_AddItemToArray(rng, cJSON_CreateString(w));
    }
    if (sharding)
        cJSON_AddItemToObject(manifest, "sharding", sharding);
    if (config)
        cJSON_AddItemToObject(manifest, "config", config);
    return manifest;
}

dt_status dt__ckpt_manifest_write(const char *dir, const dt__ckpt_file *files, int nfiles,
                                  const dt_ckpt_meta *meta, const dt_ckpt_progress *pr,
                                  const dt_ckpt_sharding *sh)
{
    char path[DT_CKPT_PATH_MAX];
    DT_CHECK(dt__ckpt_path(path, sizeof path, "%s/manifest.json", dir));
    cJSON *config = NULL;
    if (meta->config_json && !(config = dt__json_parse(meta->config_json)))
        return dt__fail(DT_ERR_INVALID, "checkpoint manifest not written: its config is not JSON (%.60s)",
                        meta->config_json);
    cJSON *sharding = sh ? dt__ckpt_sharding_json(sh) : NULL;
    if (sh && !sharding) {
        cJSON_Delete(config);
        return dt__fail(DT_ERR_NOMEM, "checkpoint manifest not written: out of memory for %s", path);
    }
    cJSON *manifest = build(files, nfiles, meta, pr, sharding, config);
    uint32_t crc = 0;
    char hex[16];
    bool have_crc = dt__ckpt_manifest_crc(manifest, &crc);
    snprintf(hex, sizeof hex, "%08x", crc);
    cJSON_AddStringToObject(manifest, "manifest_crc32", hex);
    char *text = have_crc ? cJSON_Print(manifest) : NULL;
    cJSON_Delete(manifest);
    if (!text)
        return dt__fail(DT_ERR_NOMEM, "checkpoint manifest not written: out of memory for %s", path);
    dt_status s = dt_atomic_write(path, text, strlen(text));
    free(text);
    if (s != DT_OK)
        return dt__wrap(s, "checkpoint manifest not written: ");
    return DT_OK;
}

/* The format and the checksum of the manifest's own text. */
static dt_status check_format(dt_ckpt_manifest *m)
{
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(m->json, "format");
    bool v1 = cJSON_IsString(fmt) && strcmp(fmt->valuestring, DT__CKPT_FORMAT_V1) == 0;
    if (!m->json || !cJSON_IsString(fmt) || (!v1 && strcmp(fmt->valuestring, DT__CKPT_FORMAT) != 0))
        return dt__fail(DT_ERR_INVALID, "%s is not a dtrain checkpoint manifest (bad JSON or format)",
                        m->path);
    if (v1)
        return DT_OK;
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(m->json, "manifest_crc32");
    uint32_t crc;
    if (!cJSON_IsString(want) || !dt__ckpt_manifest_crc(m->json, &crc))
        return dt__fail(DT_ERR_INVALID,
                        "%s: field manifest_crc32 is missing or not a string (edited or corrupt)", m->path);
    char hex[16];
    snprintf(hex, sizeof hex, "%08x", crc);
    if (strcmp(hex, want->valuestring) != 0)
        return dt__fail(DT_ERR_INVALID,
                        "%s has checksum %08x, its field manifest_crc32 says %.12s (edited or corrupt)",
                        m->path, crc, want->valuestring);
    return DT_OK;
}

/* A number field of the manifest; false when missing or not a number. */
static bool num(const cJSON *obj, const char *key, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!cJSON_IsNumber(v))
        return false;
    *out = v->valuedouble;
    return true;
}

/* Every file the manifest lists must exist with its size and checksum. */
static dt_status check_files(const dt_ckpt_manifest *m)
{
    const char *dir = m->dir;
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(m->json, "files");
    if (!cJSON_IsObject(files) || !cJSON_GetObjectItemCaseSensitive(files, DT__CKPT_MODEL))
        return dt__fail(DT_ERR_INVALID, "%s: the manifest lists no " DT__CKPT_MODEL, dir);
    for (const cJSON *f = files->child; f; f = f->next) {
        char path[DT_CKPT_PATH_MAX];
        if (strchr(f->string, '/'))
            return dt__fail(DT_ERR_INVALID, "%s: the manifest names a file outside the checkpoint: %s", dir,
                            f->string);
        DT_CHECK(dt__ckpt_path(path, sizeof path, "%s/%s", dir, f->string));
        uint32_t crc;
        uint64_t size;
        struct stat st;
        if (stat(path, &st) != 0)
            return dt__fail(DT_ERR_INVALID, "checkpoint file missing: %s", path);
        if (dt_file_crc32(path, &crc, &size) != DT_OK) /* (it names why: not a regular file, unreadable) */
            return dt__wrap(DT_ERR_INVALID, "checkpoint file %s: ", path);
        double want_size, want_crc;
        if (!num(f, "bytes", &want_size) || !num(f, "crc32", &want_crc))
            return dt__fail(DT_ERR_INVALID, "%s: the manifest entry for %s lacks bytes or crc32", dir,
                            f->string);
        if ((double)size != want_size)
            return dt__fail(
                DT_ERR_INVALID,
                "checkpoint file %s has %llu bytes, the manifest says %.0f (truncated or replaced)", path,
                (unsigned long long)size, want_size);
        if ((double)crc != want_crc)
            return dt__fail(DT_ERR_INVALID,
                            "checkpoint file %s has checksum %08x, the manifest says %08x (corrupt)", path,
                            crc, (uint32_t)want_crc);
    }
    return DT_OK;
}

dt_status dt__ckpt_manifest_read(const char *step_dir, bool files, dt_ckpt_manifest **out)
{
    *out = NULL;
    dt_ckpt_manifest *m = calloc(1, sizeof *m);
    if (!m)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_status s = dt__ckpt_path(m->dir, sizeof m->dir, "%s", step_dir);
    if (s == DT_OK)
        s = dt__ckpt_path(m->path, sizeof m->path, "%s/manifest.json", step_dir);
    char *text = NULL;
    if (s == DT_OK && dt_read_file(m->path, &text, NULL) != DT_OK)
        s = dt__fail_errno(DT_ERR_INVALID, "%s has no readable manifest.json (incomplete checkpoint?)",
                           step_dir);
    if (s == DT_OK) {
        m->json = dt__json_parse(text);
        s = check_format(m);
    }
    free(text);
    if (s == DT_OK)
        s = dt__ckpt_sharding_parse(m, cJSON_GetObjectItemCaseSensitive(m->json, "sharding"), &m->shards);
    if (s == DT_OK && files)
        s = check_files(m);
    const cJSON *config = cJSON_GetObjectItemCaseSensitive(m->json, "config");
    if (s == DT_OK && config && !(m->config = cJSON_PrintUnformatted(config)))
        s = dt__fail(DT_ERR_NOMEM, "out of memory reading %s", m->path);
    if (s != DT_OK) {
        dt_ckpt_manifest_close(m);
        return s;
    }
    *out = m;
    return DT_OK;
}

dt_status dt_ckpt_manifest_open(const char *step_dir, dt_ckpt_manifest **out)
{
    return dt__ckpt_manifest_read(step_dir, true, out);
}

const char *dt_ckpt_manifest_config(const dt_ckpt_manifest *m)
{
    return m->config;
}

void dt_ckpt_manifest_close(dt_ckpt_manifest *m)
{
    if (!m)
        return;
    dt__ckpt_sharding_free(&m->shards);
    cJSON_Delete(m->json);
    free(m->config);
    free(m);
}
