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
#include <fcntl.h>
#include <unistd.h>

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

dtrain_state dtrain_state_live(dt_params *p, dt_optimizer *o)
{
    float *m, *v;
    optimizer_files(o, p, &m, &v);
    return (dtrain_state){dt_params_values(p), m, v};
}

/* Remove a flat directory (a checkpoint holds only files). */
static void remove_dir(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        char f[2300];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(f, sizeof f, "%s/%s", path, e->d_name);
                unlink(f);
            }
        closedir(d);
    }
    rmdir(path);
}

static dt_status write_files(const char *tmp_dir, const dtrain_config *c, dt_params *p, const dtrain_state *st,
                             const dtrain_progress *pr)
{
    char path[2300];
    struct {
        const char *name;
        const float *data;
    } files[] = {{"model.safetensors", st->values}, {"optim_m.safetensors", st->m}, {"optim_v.safetensors", st->v}};
    cJSON *manifest = cJSON_CreateObject(), *jfiles = cJSON_AddObjectToObject(manifest, "files");
    cJSON_AddStringToObject(manifest, "format", FORMAT);
    for (size_t i = 0; i < 3; i++) {
        if (!files[i].data)
            continue;
        snprintf(path, sizeof path, "%s/%s", tmp_dir, files[i].name);
        uint32_t crc;
        uint64_t size;
        if (dt_safetensors_write(path, p, files[i].data, NULL, &crc) != DT_OK ||
            dt_file_crc32(path, &crc, &size) != DT_OK) {
            cJSON_Delete(manifest);
            return fail("checkpoint not written: %s%s", dt_last_error(), "");
        }
        cJSON *f = cJSON_AddObjectToObject(jfiles, files[i].name);
        cJSON_AddNumberToObject(f, "bytes", (double)size);
        cJSON_AddNumberToObject(f, "crc32", (double)crc);
    }
    cJSON_AddNumberToObject(manifest, "step", (double)pr->step);
    cJSON_AddNumberToObject(manifest, "world_size", (double)pr->world_size);
    cJSON_AddNumberToObject(manifest, "global_batch", (double)pr->global_batch);
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
    snprintf(path, sizeof path, "%s/manifest.json", tmp_dir);
    dt_status st_ = text ? dt_atomic_write(path, text, strlen(text)) : DT_ERR_NOMEM;
    free(text);
    if (st_ != DT_OK)
        return fail("checkpoint manifest not written: %s%s", dt_last_error(), "");
    return DT_OK;
}

dt_status dtrain_checkpoint_save(const char *dir, const dtrain_config *c, dt_params *p, const dtrain_state *st,
                                 const dtrain_progress *pr, char *written, size_t written_len)
{
    char step_dir[2048], tmp_dir[2100], old_dir[2100];
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return fail("cannot create checkpoint directory %s: %s", dir, strerror(errno));
    snprintf(step_dir, sizeof step_dir, "%s/step-%08" PRId64, dir, pr->step);
    snprintf(tmp_dir, sizeof tmp_dir, "%s/.step-%08" PRId64 ".tmp", dir, pr->step);
    snprintf(old_dir, sizeof old_dir, "%s/.step-%08" PRId64 ".old", dir, pr->step);
    remove_dir(tmp_dir); /* left by a writer that died */
    if (mkdir(tmp_dir, 0755) != 0)
        return fail("cannot create %s: %s", tmp_dir, strerror(errno));
    dt_status s = write_files(tmp_dir, c, p, st, pr);
    /* The step directory appears whole, by one rename; one already there for
     * this step (a run restarted from an earlier one) is replaced. */
    if (s == DT_OK && rename(step_dir, old_dir) != 0 && errno != ENOENT)
        s = fail("cannot replace %s: %s", step_dir, strerror(errno));
    if (s == DT_OK && rename(tmp_dir, step_dir) != 0)
        s = fail("cannot rename %s into place: %s", tmp_dir, strerror(errno));
    if (s != DT_OK) {
        remove_dir(tmp_dir);
        return s;
    }
    remove_dir(old_dir);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) { /* make the rename durable */
        fsync(fd);
        close(fd);
    }
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

/* Steps of the complete checkpoints (step-N/manifest.json) under root,
 * newest first; *n of them (caller frees).  NULL with *n = 0 when none. */
static long *complete_steps(const char *root, int *n)
{
    *n = 0;
    DIR *d = opendir(root);
    if (!d)
        return NULL;
    long *steps = NULL;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long step;
        char tail, m[2300];
        struct stat st;
        if (sscanf(e->d_name, "step-%ld%c", &step, &tail) != 1 || step < 0)
            continue;
        snprintf(m, sizeof m, "%s/%s/manifest.json", root, e->d_name);
        if (stat(m, &st) != 0)
            continue;
        if (*n == cap) {
            long *grown = realloc(steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *steps);
            if (!grown)
                break;
            steps = grown;
        }
        steps[(*n)++] = step;
    }
    closedir(d);
    for (int i = 1; i < *n; i++) /* insertion sort, descending */
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            long t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    return steps;
}

/* Read and verify one step directory's manifest into c and pr. */
static dt_status open_one(const char *step_dir, dtrain_config *c, dtrain_progress *pr)
{
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
        double step, epoch, position, osteps, world = 0, global = 0;
        if (!num(m, "step", &step) || !num(cJSON_GetObjectItemCaseSensitive(m, "sampler"), "epoch", &epoch) ||
            !num(cJSON_GetObjectItemCaseSensitive(m, "sampler"), "position", &position) ||
            !num(cJSON_GetObjectItemCaseSensitive(m, "optimizer"), "steps", &osteps) || cJSON_GetArraySize(rng) != 4)
            s = fail("%s: the manifest lacks step, sampler, optimizer or rng fields%s", step_dir, "");
        num(m, "world_size", &world); /* absent from older checkpoints */
        num(m, "global_batch", &global);
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
            pr->world_size = (int64_t)world;
            pr->global_batch = (int64_t)global;
        }
    }
    cJSON_Delete(m);
    return s;
}

dt_status dtrain_checkpoint_open(const char *path, char *step_dir, size_t len, dtrain_config *c, dtrain_progress *pr)
{
    char probe[2300];
    struct stat st;
    snprintf(probe, sizeof probe, "%s/manifest.json", path);
    if (stat(probe, &st) == 0) { /* one step directory, named by the user: no fallback */
        snprintf(step_dir, len, "%s", path);
        return open_one(step_dir, c, pr);
    }
    int n;
    long *steps = complete_steps(path, &n);
    if (n == 0) {
        free(steps);
        return fail("%s holds no complete checkpoint (no step-*/manifest.json)%s", path, "");
    }
    dt_status s = DT_ERR_INVALID;
    for (int i = 0; i < n && s != DT_OK; i++) {
        snprintf(step_dir, len, "%s/step-%08ld", path, steps[i]);
        s = open_one(step_dir, c, pr);
        if (s != DT_OK)
            fprintf(stderr, "dtrain: skipping checkpoint %s (see above); %s\n", step_dir,
                    i + 1 < n ? "falling back to the previous one" : "no older one is left");
    }
    free(steps);
    return s;
}

bool dtrain_checkpoint_exists(const char *root)
{
    int n;
    free(complete_steps(root, &n));
    return n > 0;
}

void dtrain_checkpoint_prune(const char *root, int keep)
{
    int n;
    long *steps = complete_steps(root, &n);
    for (int i = keep; keep > 0 && i < n; i++) {
        char dir[2300];
        snprintf(dir, sizeof dir, "%s/step-%08ld", root, steps[i]);
        remove_dir(dir);
    }
    free(steps);
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
