/* Byte-level text datasets. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/status.h"
#include "dtrain/data.h"

static int by_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static dt_status append_file(const char *path, dt_text *t)
{
    DT_CHECK(dt__regular_file(path));
    FILE *f = fopen(path, "rb");
    if (!f)
        return dt__fail_errno(DT_ERR_INVALID, "cannot open text file %s", path);
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || st.st_size < 0) {
        fclose(f);
        return dt__fail_errno(DT_ERR_INVALID, "cannot stat %s", path);
    }
    uint8_t *grown = realloc(t->bytes, (size_t)(t->len + st.st_size + 1));
    if (!grown) {
        fclose(f);
        return dt__fail(DT_ERR_NOMEM, "out of memory reading %s", path);
    }
    t->bytes = grown;
    size_t n = fread(t->bytes + t->len, 1, (size_t)st.st_size, f);
    int err = ferror(f);
    fclose(f);
    if (err || n != (size_t)st.st_size)
        return dt__fail(DT_ERR_INVALID, "%s: short read (%zu of %lld bytes)", path, n, (long long)st.st_size);
    t->len += (int64_t)n;
    return DT_OK;
}

dt_status dt_text_load(const char *path, dt_text *out)
{
    memset(out, 0, sizeof *out);
    struct stat st;
    if (stat(path, &st) != 0)
        return dt__fail_errno(DT_ERR_INVALID, "text data %s", path);
    dt_status s = DT_OK;
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d)
            return dt__fail_errno(DT_ERR_INVALID, "cannot read directory %s", path);
        char **names = NULL;
        size_t count = 0, cap = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.' || strchr(e->d_name, '.'))
                continue;
            if (count == cap) {
                cap = cap ? 2 * cap : 64;
                char **grown = realloc(names, cap * sizeof *names);
                if (!grown)
                    break;
                names = grown;
            }
            names[count++] = strdup(e->d_name);
        }
        closedir(d);
        if (count > 0) /* (qsort of NULL, even with 0 elements, is undefined) */
            qsort(names, count, sizeof *names, by_name);
        for (size_t i = 0; i < count; i++) {
            char full[4096];
            snprintf(full, sizeof full, "%s/%s", path, names[i]);
            struct stat fs;
            if (s == DT_OK && lstat(full, &fs) == 0 && S_ISREG(fs.st_mode))
                s = append_file(full, out);
            free(names[i]);
        }
        free(names);
    } else {
        s = append_file(path, out);
    }
    if (s == DT_OK && out->len == 0)
        s = dt__fail(DT_ERR_INVALID, "text data %s is empty (a directory needs extension-less text files)", path);
    if (s != DT_OK)
        dt_text_free(out);
    return s;
}

int64_t dt_text_samples(const dt_text *t, int64_t context)
{
    return context > 0 && t->len > context ? (t->len - 1) / context : 0;
}

void dt_text_batch(const dt_text *t, int64_t context, const int64_t *indices, int64_t n, float *x, int32_t *y)
{
    for (int64_t b = 0; b < n; b++) {
        const uint8_t *w = t->bytes + indices[b] * context;
        for (int64_t i = 0; i < context; i++) {
            x[b * context + i] = (float)w[i];
            y[b * context + i] = w[i + 1];
        }
    }
}

void dt_text_free(dt_text *t)
{
    free(t->bytes);
    memset(t, 0, sizeof *t);
}
