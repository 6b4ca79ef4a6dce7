/* Checkpoints: <dir>/step-NNNNNNNN/ holding model.safetensors, the optimizer
 * state as safetensors in the parameters' layout (optim_m, optim_v), and
 * manifest.json written last and atomically: a checkpoint counts only once
 * its manifest exists, and loading re-checks every file's size and CRC-32. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "dtrain_cli.h"

static const char *const FORMAT = "dtrain-checkpoint-1";

static dt_status fail(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "dtrain: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    return DT_ERR_INVALID;
}

static int optimizer_files(dt_optimizer *o, dt_params *p, float **m, float **v)
{
    int64_t count = 0;
    float *state = o ? dt_optimizer_state(o, &count) : NULL;
    int64_t n = dt_params_numel(p);
    *m = count >= n ? state : NULL;
    *v = count >= 2 * n ? state + n : NULL;
    return (*m != NULL) + (*v != NULL);
}

dt_status dtrain_checkpoint_save(const char *dir, const dtrain_config *c, dt_params *p, dt_optimizer *o,
                                 const dtrain_progress *pr, char *written, size_t written_len)
{
    char step_dir[2048], path[2300];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return fail("cannot create checkpoint directory %s: %s", dir, strerror(errno));
    snprintf(step_dir, sizeof step_dir, "%s/step-%08" PRId64, dir, pr->step);
    if (mkdir(step_dir, 0755) != 0 && errno != EEXIST)
        return fail("cannot create %s: %s", step_dir, strerror(errno));
    float *m, *v;
    optimizer_files(o, p, &m, &v);
    struct {
        const char *name;
        const float *data;
    } files[] = {{"model.safetensors", dt_params_values(p)}, {"optim_m.safetensors", m}, {"optim_v.safetensors", v}};
    cJSON *manifest = cJSON_CreateObject(), *jfiles = cJSON_CreateObject();
    cJSON_AddStringToObject(manifest, "format", FORMAT);
    for (size_t i = 0; i < 3; i++) {
        if (!files[i].data)
            continue;
        snprintf(path, sizeof path, "%s/%s", step_dir, files[i].name);
        uint32_t crc;
        if (dt_safetensors_write(path, p, files[i].data, NULL, &crc) != DT_OK) {
            cJSON_Delete(manifest);
            cJSON_Delete(jfiles);
            return fail("checkpoint not written: %s%s", dt_last_error(), "");
        }
        uint64_t size;
        dt_file_crc32(path, &crc, &size);
        cJSON *f = cJSON_AddObjectToObject(jfiles, files[i].name);
        cJSON_AddNumberToObject(f, "bytes", (double)size);
        cJSON_AddNumberToObject(f, "crc32", (double)crc);
    }
    cJSON_AddItemToObject(manifest, "files", jfiles);
    cJSON_AddNumberToObject(manifest, "step", (double)pr->step);
    cJSON *s = cJSON_AddObjectToObject(manifest, "sampler");
    cJSON_AddNumberToObject(s, "epoch", (double)pr->epoch);
    cJSON_AddNumberToObject(s, "position", (double)pr->position);
    cJSON *opt = cJSON_AddObjectToObject(manifest, "optimizer");
    cJSON_AddStringToObject(opt, "kind", c->optimizer);
    cJSON_AddNumberToObject(opt, "steps", (double)pr->optimizer_steps);
    cJSON *rng = cJSON_AddArrayToObject(manifest, "rng");
    for (int i = 0; i < 4; i++) { /* 64-bit words as strings: JSON numbers are doubles */
        char w[32];
        snprintf(w, sizeof w, "%" PRIu64, pr->rng.s[i]);
        cJSON_AddItemToArray(rng, cJSON_CreateString(w));
    }
    cJSON_AddItemToObject(manifest, "config", dtrain_config_to_json(c));
    char *text = cJSON_Print(manifest);
    cJSON_Delete(manifest);
    snprintf(path, sizeof path, "%s/manifest.json", step_dir);
    dt_status st = dt_atomic_write(path, text, strlen(text));
    free(text);
    if (st != DT_OK)
        return fail("checkpoint manifest not written: %s%s", dt_last_error(), "");
    if (written)
        snprintf(written, written_len, "%s", step_dir);
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

static dt_status read_manifest(const char *step_dir, cJSON **out)
{
    char path[2300];
    snprintf(path, sizeof path, "%s/manifest.json", step_dir);
    char *text = dtrain_read_file(path);
    if (!text)
        return fail("%s has no readable manifest.json (incomplete checkpoint?): %s", step_dir, strerror(errno));
    cJSON *j = cJSON_Parse(text);
    free(text);
    const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(j, "format");
    if (!j || !cJSON_IsString(fmt) || strcmp(fmt->valuestring, FORMAT) != 0) {
        cJSON_Delete(j);
        return fail("%s is not a dtrain checkpoint manifest (%s)", path, "bad JSON or format");
    }
    *out = j;
    return DT_OK;
}

/* Every file the manifest lists must exist with its size and checksum. */
static dt_status verify(const char *step_dir, const cJSON *manifest)
{
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(manifest, "files");
    if (!cJSON_IsObject(files) || !cJSON_GetObjectItemCaseSensitive(files, "model.safetensors"))
        return fail("%s: the manifest lists no model.safetensors%s", step_dir, "");
    for (const cJSON *f = files->child; f; f = f->next) {
        char path[2300], why[256];
        snprintf(path, sizeof path, "%s/%s", step_dir, f->string);
        if (strchr(f->string, '/'))
            return fail("%s: the manifest names a file outside the checkpoint: %s", step_dir, f->string);
        uint32_t crc;
        uint64_t size;
        if (dt_file_crc32(path, &crc, &size) != DT_OK)
            return fail("checkpoint file missing: %s%s", path, "");
        double want_size, want_crc;
        if (!num(f, "bytes", &want_size) || !num(f, "crc32", &want_crc))
            return fail("%s: the manifest entry for %s lacks bytes or crc32", step_dir, f->string);
        if ((double)size != want_size) {
            snprintf(why, sizeof why, "has %llu bytes, the manifest says %.0f (truncated or replaced)",
                     (unsigned long long)size, want_size);
            return fail("checkpoint file %s %s", path, why);
        }
        if ((double)crc != want_crc) {
            snprintf(why, sizeof why, "has checksum %08x, the manifest says %08x (corrupt)", crc, (uint32_t)want_crc);
            return fail("checkpoint file %s %s", path, why);
        }
    }
    return DT_OK;
}

/* The newest step-* directory under root whose manifest exists. */
static dt_status newest(const char *root, char *out, size_t len)
{
    DIR *d = opendir(root);
    if (!d)
        return fail("cannot open checkpoint directory %s: %s", root, strerror(errno));
    long best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        long step;
        char tail;
        if (sscanf(e->d_name, "step-%ld%c", &step, &tail) != 1 || step <= best)
            continue;
        char m[2300];
        struct stat st;
        snprintf(m, sizeof m, "%s/%s/manifest.json", root, e->d_name);
        if (stat(m, &st) == 0)
            best = step;
    }
    closedir(d);
    if (best < 0)
        return fail("%s holds no complete checkpoint (no step-*/manifest.json)%s", root, "");
    snprintf(out, len, "%s/step-%08ld", root, best);
    return DT_OK;
}

dt_status dtrain_checkpoint_open(const char *path, char *step_dir, size_t len, dtrain_config *c, dtrain_progress *pr)
{
    char probe[2300];
    struct stat st;
    snprintf(probe, sizeof probe, "%s/manifest.json", path);
    if (stat(probe, &st) == 0)
        snprintf(step_dir, len, "%s", path);
    else if (newest(path, step_dir, len) != DT_OK)
        return DT_ERR_INVALID;
    cJSON *m = NULL;
    if (read_manifest(step_dir, &m) != DT_OK)
        return DT_ERR_INVALID;
    dt_status s = verify(step_dir, m);
    if (s == DT_OK) {
        dtrain_config_load(NULL, NULL, 0, c);
        s = dtrain_config_from_json(cJSON_GetObjectItemCaseSensitive(m, "config"), step_dir, c);
    }
    if (s == DT_OK) {
        const cJSON *rng = cJSON_GetObjectItemCaseSensitive(m, "rng");
        double step, epoch, position, osteps;
        if (!num(m, "step", &step) || !num(cJSON_GetObjectItemCaseSensitive(m, "sampler"), "epoch", &epoch) ||
            !num(cJSON_GetObjectItemCaseSensitive(m, "sampler"), "position", &position) ||
            !num(cJSON_GetObjectItemCaseSensitive(m, "optimizer"), "steps", &osteps) || cJSON_GetArraySize(rng) != 4)
            s = fail("%s: the manifest lacks step, sampler, optimizer or rng fields%s", step_dir, "");
        for (int i = 0; s == DT_OK && i < 4; i++) {
            const cJSON *w = cJSON_GetArrayItem(rng, i);
            if (!cJSON_IsString(w))
                s = fail("%s: the manifest's rng state is malformed%s", step_dir, "");
            else
                pr->rng.s[i] = strtoull(w->valuestring, NULL, 10);
        }
        if (s == DT_OK) {
            pr->step = (int64_t)step;
            pr->epoch = (int64_t)epoch;
            pr->position = (int64_t)position;
            pr->optimizer_steps = (int64_t)osteps;
        }
    }
    cJSON_Delete(m);
    return s;
}

dt_status dtrain_checkpoint_load(const char *step_dir, dt_params *p, dt_optimizer *o)
{
    char path[2300];
    snprintf(path, sizeof path, "%s/model.safetensors", step_dir);
    if (dt_safetensors_read(path, p, dt_params_values(p)) != DT_OK)
        return fail("%s%s", dt_last_error(), "");
    float *m, *v;
    optimizer_files(o, p, &m, &v);
    const char *names[2] = {"optim_m.safetensors", "optim_v.safetensors"};
    float *dst[2] = {m, v};
    for (int i = 0; i < 2; i++) {
        if (!dst[i])
            continue;
        snprintf(path, sizeof path, "%s/%s", step_dir, names[i]);
        if (dt_safetensors_read(path, p, dst[i]) != DT_OK)
            return fail("%s%s", dt_last_error(), "");
    }
    return DT_OK;
}
