/* Checkpoints: <dir>/step-NNNNNNNN/ holding model.safetensors, the optimizer
 * state as safetensors in the parameters' layout (optim_m, optim_v), and
 * manifest.json written last and atomically: a checkpoint counts only once
 * its manifest exists.  The manifest carries a CRC-32 of its own canonical
 * text (manifest_crc32), and loading re-checks it, every value's range, the
 * tensors' shapes against the configuration, and every file's size and
 * CRC-32: a checkpoint that fails any of them is refused naming the field. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include "dtrain_cli.h"

/* Version 2 adds manifest_crc32; version 1 manifests (no checksum) still load,
 * with every value range-checked. */
static const char *const FORMAT = "dtrain-checkpoint-2", *const FORMAT_V1 = "dtrain-checkpoint-1";

/* CRC-32 (zlib) of the manifest's canonical text: cJSON's unformatted print of
 * it without the manifest_crc32 member.  Parsing and printing again gives the
 * same text, so the writer and the reader agree whatever the file's layout. */
static bool manifest_crc(cJSON *m, uint32_t *crc)
{
    cJSON *saved = cJSON_DetachItemFromObjectCaseSensitive(m, "manifest_crc32");
    char *text = cJSON_PrintUnformatted(m);
    if (saved)
        cJSON_AddItemToObject(m, "manifest_crc32", saved);
    if (!text)
        return false;
    *crc = (uint32_t)crc32(crc32(0L, Z_NULL, 0), (const Bytef *)text, (uInt)strlen(text));
    free(text);
    return true;
}

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
    /* safetensors __metadata__ (strings only): what a reader outside dtrain
     * needs to rebuild the model (scripts/dtrain_to_torch.py) */
    cJSON *model = dtrain_model_config_json(c);
    char *model_text = cJSON_PrintUnformatted(model), step_text[32];
    cJSON_Delete(model);
    snprintf(step_text, sizeof step_text, "%" PRId64, pr->step);
    const char *meta[] = {"format", "pt", "producer", "dtrain", "dtrain_version", DTRAIN_VERSION,
                          "model", model_text ? model_text : "{}", "step", step_text, NULL, NULL};
    for (size_t i = 0; i < 3; i++) {
        if (!files[i].data)
            continue;
        snprintf(path, sizeof path, "%s/%s", tmp_dir, files[i].name);
        uint32_t crc;
        uint64_t size;
        if (dt_safetensors_write(path, p, files[i].data, meta, &crc) != DT_OK ||
            dt_file_crc32(path, &crc, &size) != DT_OK) {
            cJSON_Delete(manifest);
            free(model_text);
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
    free(model_text);
    cJSON_AddItemToObject(manifest, "config", dtrain_config_to_json(c));
    uint32_t mcrc = 0;
    char hex[16];
    bool have_crc = manifest_crc(manifest, &mcrc);
    snprintf(hex, sizeof hex, "%08x", mcrc);
    cJSON_AddStringToObject(manifest, "manifest_crc32", hex);
    char *text = have_crc ? cJSON_Print(manifest) : NULL;
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
    bool v1 = cJSON_IsString(fmt) && strcmp(fmt->valuestring, FORMAT_V1) == 0;
    if (!j || !cJSON_IsString(fmt) || (!v1 && strcmp(fmt->valuestring, FORMAT) != 0)) {
        cJSON_Delete(j);
        return fail("%s is not a dtrain checkpoint manifest (%s)", path, "bad JSON or format");
    }
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(j, "manifest_crc32");
    uint32_t crc;
    char why[160];
    if (!v1 && (!cJSON_IsString(want) || !manifest_crc(j, &crc))) {
        cJSON_Delete(j);
        return fail("%s: field manifest_crc32 is missing or not a string (%s)", path, "edited or corrupt");
    }
    if (!v1) {
        snprintf(why, sizeof why, "has checksum %08x, its field manifest_crc32 says %.12s (edited or corrupt)", crc,
                 want->valuestring);
        char hex[16];
        snprintf(hex, sizeof hex, "%08x", crc);
        if (strcmp(hex, want->valuestring) != 0) {
            cJSON_Delete(j);
            return fail("%s %s", path, why);
        }
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

/* A whole number field in [min, max] (the object may be NULL); the message
 * names the field and its value. */
static dt_status whole(const char *step_dir, const cJSON *obj, const char *field, const char *key, double min,
                       double max, int64_t *out)
{
    char why[256];
    const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    if (!cJSON_IsNumber(v)) {
        snprintf(why, sizeof why, "field %s is missing or not a number", field);
        return fail("%s: the manifest's %s", step_dir, why);
    }
    double d = v->valuedouble;
    if (!(d >= min && d <= max) || d != (double)(int64_t)d) { /* the range first: the cast needs it */
        snprintf(why, sizeof why, "field %s = %.17g is not a whole number in [%.0f, %.0f]", field, d, min, max);
        return fail("%s: the manifest's %s", step_dir, why);
    }
    *out = (int64_t)d;
    return DT_OK;
}

/* Read a safetensors header (the JSON after the 8-byte length). */
static cJSON *tensor_header(const char *path)
{
    FILE *f = fopen(path, "rb");
    unsigned char len[8];
    cJSON *j = NULL;
    if (f && fread(len, 1, 8, f) == 8) {
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--)
            n = n << 8 | len[i];
        char *text = n < (100u << 20) ? malloc(n + 1) : NULL;
        if (text && fread(text, 1, n, f) == n) {
            text[n] = '\0';
            j = cJSON_Parse(text);
        }
        free(text);
    }
    if (f)
        fclose(f);
    return j;
}

/* Every tensor file holds exactly the parameters of the model the manifest's
 * configuration builds, with their shapes. */
static dt_status check_shapes(const char *step_dir, const cJSON *files, const dtrain_config *c)
{
    dt_model *m;
    if (dtrain_build_model(c, &m) != DT_OK)
        return fail("%s: the manifest's configuration does not build a model%s", step_dir, "");
    dt_params *p = dt_model_params(m);
    dt_status s = DT_OK;
    char path[2300], why[512];
    for (const cJSON *f = files->child; f && s == DT_OK; f = f->next) {
        snprintf(path, sizeof path, "%s/%s", step_dir, f->string);
        cJSON *h = tensor_header(path);
        int tensors = 0;
        for (const cJSON *t = h ? h->child : NULL; t; t = t->next)
            tensors += strcmp(t->string, "__metadata__") != 0;
        if (!h)
            s = fail("%s: %s has no readable safetensors header", step_dir, f->string);
        else if (tensors != dt_params_count(p)) {
            snprintf(why, sizeof why, "%s holds %d tensors, the configuration (model %s) has %d parameters",
                     f->string, tensors, c->model, dt_params_count(p));
            s = fail("%s: %s", step_dir, why);
        }
        for (int i = 0; s == DT_OK && i < dt_params_count(p); i++) {
            const dt_param_info *pi = dt_params_info(p, i);
            const cJSON *shape = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(h, pi->name), "shape");
            bool same = cJSON_GetArraySize(shape) == pi->ndim;
            for (int d = 0; same && d < pi->ndim; d++)
                same = cJSON_GetArrayItem(shape, d)->valuedouble == (double)pi->shape[d];
            if (!same) {
                char want[128] = "", *w = want;
                for (int d = 0; d < pi->ndim; d++)
                    w += snprintf(w, sizeof want - (size_t)(w - want), "%s%lld", d ? ", " : "", (long long)pi->shape[d]);
                char *got = shape ? cJSON_PrintUnformatted(shape) : NULL;
                snprintf(why, sizeof why, "%s: tensor %s has shape %s, the manifest's config (model %s) needs [%s]",
                         f->string, pi->name, got ? got : "(missing)", c->model, want);
                free(got);
                s = fail("%s: %s", step_dir, why);
            }
        }
        cJSON_Delete(h);
    }
    dt_model_destroy(m);
    return s;
}

/* Read and verify one step directory's manifest into c and pr: its checksum,
 * every value's range (train_samples > 0: the sampler's against the epoch),
 * the tensors' shapes, every file's size and checksum. */
static dt_status open_one(const char *step_dir, int64_t train_samples, dtrain_config *c, dtrain_progress *pr)
{
    cJSON *m = NULL;
    if (read_manifest(step_dir, &m) != DT_OK)
        return DT_ERR_INVALID;
    dt_status s = verify(step_dir, m);
    if (s == DT_OK) {
        dtrain_config_load(NULL, NULL, 0, c);
        s = dtrain_config_from_json(cJSON_GetObjectItemCaseSensitive(m, "config"), step_dir, c);
        if (s == DT_OK && (s = dtrain_config_validate(c)) != DT_OK)
            fprintf(stderr, "dtrain: %s: the manifest's config is inconsistent (above)\n", step_dir);
    }
    const double big = 9007199254740992.0; /* 2^53: whole numbers a double holds exactly */
    const cJSON *sampler = cJSON_GetObjectItemCaseSensitive(m, "sampler");
    dtrain_progress got = {0};
    if (s == DT_OK)
        s = whole(step_dir, m, "step", "step", 0, (double)c->steps, &got.step);
    if (s == DT_OK)
        s = whole(step_dir, cJSON_GetObjectItemCaseSensitive(m, "optimizer"), "optimizer.steps", "steps", 0,
                  (double)got.step, &got.optimizer_steps);
    if (s == DT_OK && cJSON_GetObjectItemCaseSensitive(m, "world_size")) /* absent from older checkpoints */
        s = whole(step_dir, m, "world_size", "world_size", 0, 1 << 20, &got.world_size);
    if (s == DT_OK && cJSON_GetObjectItemCaseSensitive(m, "global_batch"))
        s = whole(step_dir, m, "global_batch", "global_batch", 0, big, &got.global_batch);
    /* The sampler: its position is within an epoch (the epoch of train_samples,
     * padded to the writer's world size), and no more epochs have passed than
     * twice the samples the steps consumed allow. */
    int64_t w = got.world_size > 0 ? got.world_size : 1;
    int64_t len = train_samples > 0 ? (train_samples + w - 1) / w * w : 0;
    int64_t gb = got.global_batch > 0 ? got.global_batch : c->batch_size * c->grad_accumulation * w;
    double max_epoch = len ? 1.0 + 2.0 * (double)got.step * (double)gb / (double)len : big;
    if (s == DT_OK)
        s = whole(step_dir, sampler, "sampler.epoch", "epoch", 0, max_epoch < big ? max_epoch : big, &got.epoch);
    if (s == DT_OK)
        s = whole(step_dir, sampler, "sampler.position", "position", 0, len ? (double)len : big, &got.position);
    const cJSON *rng = cJSON_GetObjectItemCaseSensitive(m, "rng");
    if (s == DT_OK && cJSON_GetArraySize(rng) != 4)
        s = fail("%s: the manifest's field rng must hold 4 words%s", step_dir, "");
    uint64_t any = 0;
    for (int i = 0; s == DT_OK && i < 4; i++) {
        const cJSON *v = cJSON_GetArrayItem(rng, i);
        char *end = NULL;
        errno = 0;
        unsigned long long x = cJSON_IsString(v) ? strtoull(v->valuestring, &end, 10) : 0;
        if (!cJSON_IsString(v) || !v->valuestring[0] || *end || errno || v->valuestring[0] == '-') {
            char why[160];
            snprintf(why, sizeof why, "rng[%d] = %.40s is not a 64-bit unsigned decimal", i,
                     cJSON_IsString(v) ? v->valuestring : "(not a string)");
            s = fail("%s: the manifest's field %s", step_dir, why);
        } else {
            got.rng.s[i] = x;
            any |= x;
        }
    }
    if (s == DT_OK && !any)
        s = fail("%s: the manifest's field rng is all zero (%s)", step_dir, "not a generator state");
    if (s == DT_OK)
        s = check_shapes(step_dir, cJSON_GetObjectItemCaseSensitive(m, "files"), c);
    if (s == DT_OK)
        *pr = got;
    cJSON_Delete(m);
    return s;
}

dt_status dtrain_checkpoint_open(const char *path, int64_t train_samples, char *step_dir, size_t len,
                                 dtrain_config *c, dtrain_progress *pr)
{
    char probe[2300];
    struct stat st;
    snprintf(probe, sizeof probe, "%s/manifest.json", path);
    if (stat(probe, &st) == 0) { /* one step directory, named by the user: no fallback */
        snprintf(step_dir, len, "%s", path);
        return open_one(step_dir, train_samples, c, pr);
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
        s = open_one(step_dir, train_samples, c, pr);
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

/* Step directories of any kind (complete, partial, a writer's temporary or
 * replaced one) under root; *n of them in names (caller frees each and the array). */
static char **step_entries(const char *root, int *n)
{
    *n = 0;
    DIR *d = opendir(root);
    if (!d)
        return NULL;
    char **names = NULL;
    int cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long step;
        if (sscanf(e->d_name, "step-%ld", &step) != 1 && sscanf(e->d_name, ".step-%ld", &step) != 1)
            continue;
        if (*n == cap) {
            char **grown = realloc(names, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *names);
            if (!grown)
                break;
            names = grown;
        }
        names[(*n)++] = strdup(e->d_name);
    }
    closedir(d);
    return names;
}

int dtrain_checkpoint_count_any(const char *root)
{
    int n;
    char **names = step_entries(root, &n);
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return n;
}

dt_status dtrain_checkpoint_clear(const char *root)
{
    int n;
    char **names = step_entries(root, &n);
    dt_status s = DT_OK;
    for (int i = 0; i < n; i++) {
        char dir[2300], manifest[2400];
        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        /* the manifest first: a removal cut short leaves no complete-looking checkpoint */
        snprintf(manifest, sizeof manifest, "%s/manifest.json", dir);
        if (unlink(manifest) != 0 && errno != ENOENT && errno != ENOTDIR)
            s = fail("--overwrite: cannot remove %s: %s", manifest, strerror(errno));
        remove_dir(dir);
        struct stat st;
        if (s == DT_OK && stat(dir, &st) == 0)
            s = fail("--overwrite: cannot remove %s (%s)", dir, "not a flat checkpoint directory, or permissions");
        free(names[i]);
    }
    free(names);
    int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    return s;
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
