/* Step directories under a checkpoint root: their names, the complete ones
 * newest first, the lookup that falls back past a bad one, and removal
 * (--overwrite, keep K). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "ckpt/ckpt_internal.h"

dt_status dt__ckpt_path(char *out, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(out, len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len)
        return dt__fail(DT_ERR_INVALID, "path too long (%d bytes, at most %zu): %.200s...", n, len - 1, out);
    return DT_OK;
}

void dt__ckpt_remove_dir(const char *path)
{
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        char f[DT_CKPT_PATH_MAX + 256];
        while ((e = readdir(d)))
            if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
                snprintf(f, sizeof f, "%s/%s", path, e->d_name);
                unlink(f);
            }
        closedir(d);
    }
    rmdir(path);
}

void dt__ckpt_fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

dt_status dt_ckpt_step_dir(const char *root, int64_t step, char *out, size_t len)
{
    return dt__ckpt_path(out, len, "%s/step-%08" PRId64, root, step);
}

dt_status dt_ckpt_list(const char *root, int64_t **steps_out, int *n_out)
{
    *steps_out = NULL;
    *n_out = 0;
    DIR *d = opendir(root);
    if (!d)
        return DT_OK;
    int64_t *steps = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        long step;
        char tail, m[DT_CKPT_PATH_MAX + 300];
        struct stat st;
        if (sscanf(e->d_name, "step-%ld%c", &step, &tail) != 1 || step < 0) /* step-N exactly */
            continue;
        snprintf(m, sizeof m, "%s/%s/manifest.json", root, e->d_name);
        if (stat(m, &st) != 0)
            continue;
        if (n == cap) {
            int64_t *grown = realloc(steps, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *steps);
            if (!grown) {
                closedir(d);
                free(steps);
                return dt__fail(DT_ERR_NOMEM, "out of memory listing %s", root);
            }
            steps = grown;
        }
        steps[n++] = step;
    }
    closedir(d);
    for (int i = 1; i < n; i++) /* insertion sort, descending */
        for (int j = i; j > 0 && steps[j] > steps[j - 1]; j--) {
            int64_t t = steps[j];
            steps[j] = steps[j - 1];
            steps[j - 1] = t;
        }
    *steps_out = steps;
    *n_out = n;
    return DT_OK;
}

int64_t dt_ckpt_newest(const char *root)
{
    int64_t *steps, newest = -1;
    int n;
    if (dt_ckpt_list(root, &steps, &n) == DT_OK && n > 0)
        newest = steps[0];
    free(steps);
    return newest;
}

dt_status dt_ckpt_find(const char *path, dt_ckpt_verify_fn verify, dt_ckpt_skip_fn skipped, void *user,
                       char *step_dir, size_t len)
{
    char probe[DT_CKPT_PATH_MAX];
    struct stat st;
    DT_CHECK(dt__ckpt_path(probe, sizeof probe, "%s/manifest.json", path));
    if (stat(probe, &st) == 0) { /* one step directory, named by the caller: no fallback */
        DT_CHECK(dt__ckpt_path(step_dir, len, "%s", path));
        return verify(user, step_dir);
    }
    if (stat(path, &st) != 0)
        return dt__fail_errno(DT_ERR_INVALID, "checkpoint %s", path);
    if (!S_ISDIR(st.st_mode))
        return dt__fail(DT_ERR_INVALID, "checkpoint %s is not a directory (a checkpoint directory, or the "
                                        "checkpoint_dir holding step-* directories)", path);
    int64_t *steps;
    int n;
    DT_CHECK(dt_ckpt_list(path, &steps, &n));
    if (n == 0)
        return dt__fail(DT_ERR_INVALID, "%s holds no complete checkpoint (no step-*/manifest.json)", path);
    dt_status s = DT_ERR_INVALID;
    for (int i = 0; i < n && s != DT_OK; i++) {
        if ((s = dt_ckpt_step_dir(path, steps[i], step_dir, len)) == DT_OK)
            s = verify(user, step_dir);
        if (s != DT_OK && skipped)
            skipped(user, step_dir, dt_last_error(), i + 1 < n);
    }
    free(steps);
    return s;
}

/* Step directories of any kind (complete, partial, a writer's temporary or
 * replaced one) under root: *n names (caller frees each and the array). */
static dt_status step_entries(const char *root, char ***out, int *n_out)
{
    *out = NULL;
    *n_out = 0;
    DIR *d = opendir(root);
    if (!d)
        return DT_OK;
    char **names = NULL;
    int n = 0, cap = 0;
    dt_status s = DT_OK;
    struct dirent *e;
    while (s == DT_OK && (e = readdir(d))) {
        long step;
        if (sscanf(e->d_name, "step-%ld", &step) != 1 && sscanf(e->d_name, ".step-%ld", &step) != 1)
            continue;
        if (n == cap) {
            char **grown = realloc(names, (size_t)(cap = cap ? 2 * cap : 16) * sizeof *names);
            if (!grown) {
                s = dt__fail(DT_ERR_NOMEM, "out of memory listing %s", root);
                break;
            }
            names = grown;
        }
        if (!(names[n] = strdup(e->d_name)))
            s = dt__fail(DT_ERR_NOMEM, "out of memory listing %s", root);
        else
            n++;
    }
    closedir(d);
    *out = names;
    *n_out = n;
    return s;
}

static void free_names(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

int dt_ckpt_count_any(const char *root)
{
    char **names;
    int n;
    step_entries(root, &names, &n);
    free_names(names, n);
    return n;
}

dt_status dt_ckpt_clear(const char *root)
{
    char **names;
    int n;
    dt_status s = step_entries(root, &names, &n);
    for (int i = 0; i < n; i++) {
        char dir[DT_CKPT_PATH_MAX + 300], manifest[DT_CKPT_PATH_MAX + 400];
        struct stat st;
        snprintf(dir, sizeof dir, "%s/%s", root, names[i]);
        /* the manifest first: a removal cut short leaves no complete-looking checkpoint */
        snprintf(manifest, sizeof manifest, "%s/manifest.json", dir);
        if (unlink(manifest) != 0 && errno != ENOENT && errno != ENOTDIR && s == DT_OK)
            s = dt__fail_errno(DT_ERR_SYSTEM, "cannot remove %s", manifest);
        dt__ckpt_remove_dir(dir);
        if (s == DT_OK && stat(dir, &st) == 0)
            s = dt__fail(DT_ERR_SYSTEM, "cannot remove %s (not a flat checkpoint directory, or permissions)",
                         dir);
    }
    free_names(names, n);
    dt__ckpt_fsync_dir(root);
    return s;
}

/* A pruned in-memory checkpoint's files into ROOT/.spare for reuse
 * (ckpt_internal.h), each replacing a spare of its name; what cannot be
 * moved is removed with the directory. */
static void keep_spares(const char *root, const char *dir)
{
    char spare_dir[DT_CKPT_PATH_MAX + 16];
    if (snprintf(spare_dir, sizeof spare_dir, "%s/" DT__CKPT_SPARE, root) >= (int)sizeof spare_dir ||
        (mkdir(spare_dir, 0755) != 0 && errno != EEXIST))
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    char from[DT_CKPT_PATH_MAX + 256], to[DT_CKPT_PATH_MAX + 272];
    while ((e = readdir(d)))
        if (e->d_type == DT_REG && snprintf(from, sizeof from, "%s/%s", dir, e->d_name) < (int)sizeof from &&
            snprintf(to, sizeof to, "%s/%s", spare_dir, e->d_name) < (int)sizeof to)
            (void)rename(from, to);
    closedir(d);
}

dt_status dt_ckpt_prune(const char *root, int keep)
{
    int64_t *steps;
    int n;
    DT_CHECK(dt_ckpt_list(root, &steps, &n));
    bool memory = n > keep && keep > 0 && dt__ckpt_in_memory(root);
    for (int i = keep; keep > 0 && i < n; i++) {
        char dir[DT_CKPT_PATH_MAX];
        if (dt_ckpt_step_dir(root, steps[i], dir, sizeof dir) == DT_OK) {
            if (memory)
                keep_spares(root, dir);
            dt__ckpt_remove_dir(dir);
        }
    }
    free(steps);
    return DT_OK;
}
