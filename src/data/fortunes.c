/* Fortunes by category (data.h): the examples of a text classifier, and
 * fastText's hashed unigram and bigram features of a text. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/hash.h"
#include "base/status.h"
#include "dtrain/data.h"

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The category files of dir, sorted (caller frees each and the array). */
static dt_status list_files(const char *dir, char ***out, int *count)
{
    DIR *d = opendir(dir);
    if (!d)
        return dt__fail_errno(DT_ERR_INVALID,
                              "fortunes: cannot read directory %s (the Debian package fortunes "
                              "installs it; scripts/setup.sh --test)",
                              dir);
    char **names = NULL;
    int n = 0, cap = 0;
    dt_status s = DT_OK;
    struct dirent *e;
    while (s == DT_OK && (e = readdir(d))) {
        char full[4096];
        struct stat st;
        snprintf(full, sizeof full, "%s/%s", dir, e->d_name);
        if (e->d_name[0] == '.' || strchr(e->d_name, '.') || lstat(full, &st) != 0 || !S_ISREG(st.st_mode))
            continue;
        if (strlen(e->d_name) >= 64) {
            s = dt__fail(DT_ERR_INVALID, "fortunes: file name %s/%s is too long for a category", dir,
                         e->d_name);
            break;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(names, (size_t)cap * sizeof *names);
            if (!grown) {
                s = dt__fail(DT_ERR_NOMEM, "out of memory");
                break;
            }
            names = grown;
        }
        if (!(names[n] = strdup(e->d_name)))
            s = dt__fail(DT_ERR_NOMEM, "out of memory");
        else
            n++;
    }
    closedir(d);
    if (n)
        qsort(names, (size_t)n, sizeof *names, by_name);
    *out = names;
    *count = n;
    return s;
}

typedef struct {
    dt_fortunes *f;
    int64_t cap_examples, len, cap_text;
} builder;

static dt_status add_example(builder *b, const char *text, int64_t len, int32_t label)
{
    bool blank = true;
    for (int64_t i = 0; i < len && blank; i++)
        blank = text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r';
    if (blank)
        return DT_OK;
    dt_fortunes *f = b->f;
    if (f->count + 1 >= b->cap_examples) {
        int64_t cap = b->cap_examples ? 2 * b->cap_examples : 4096;
        int64_t *st = realloc(f->start, (size_t)(cap + 1) * sizeof *st);
        if (st)
            f->start = st;
        int32_t *lb = st ? realloc(f->label, (size_t)cap * sizeof *lb) : NULL;
        if (!lb)
            return dt__fail(DT_ERR_NOMEM, "out of memory");
        f->label = lb;
        b->cap_examples = cap;
    }
    if (b->len + len > b->cap_text) {
        int64_t cap = b->cap_text ? 2 * b->cap_text : 1 << 20;
        while (cap < b->len + len)
            cap *= 2;
        char *t = realloc(f->text, (size_t)cap);
        if (!t)
            return dt__fail(DT_ERR_NOMEM, "out of memory");
        f->text = t;
        b->cap_text = cap;
    }
    memcpy(f->text + b->len, text, (size_t)len);
    f->start[f->count] = b->len;
    f->label[f->count++] = label;
    b->len += len;
    f->start[f->count] = b->len;
    return DT_OK;
}

/* One file's fortunes: overstrikes resolved in place, then cut at "%" lines. */
static dt_status add_file(builder *b, const char *path, int32_t label)
{
    dt_text t;
    DT_CHECK(dt_text_load(path, &t));
    char *s = (char *)t.bytes;
    int64_t n = 0;
    for (int64_t i = 0; i < t.len; i++) {
        if (s[i] == '\b') { /* "x\by": y printed over x */
            n -= n > 0;
            continue;
        }
        s[n++] = s[i];
    }
    dt_status st = DT_OK;
    int64_t from = 0;
    for (int64_t at = 0; st == DT_OK && at <= n;) {
        int64_t eol = at;
        while (eol < n && s[eol] != '\n')
            eol++;
        bool sep = eol - at == 1 && s[at] == '%';
        if (sep || eol >= n) {
            int64_t to = sep ? at : n;
            if (to > from && s[to - 1] == '\n')
                to--;
            st = add_example(b, s + from, to - from, label);
            from = eol + 1;
        }
        at = eol + 1;
    }
    dt_text_free(&t);
    return st;
}

dt_status dt_fortunes_load(const char *dir, dt_fortunes *out)
{
    memset(out, 0, sizeof *out);
    char **names = NULL;
    int n = 0;
    dt_status s = list_files(dir, &names, &n);
    if (s == DT_OK && n < 2)
        s = dt__fail(DT_ERR_INVALID,
                     "fortunes: %s holds %d category file%s (extension-less regular files); a "
                     "classifier needs 2 or more",
                     dir, n, n == 1 ? "" : "s");
    if (s == DT_OK && !(out->names = calloc((size_t)n, sizeof *out->names)))
        s = dt__fail(DT_ERR_NOMEM, "out of memory");
    builder b = {out, 0, 0, 0};
    for (int i = 0; s == DT_OK && i < n; i++) {
        char full[4096];
        snprintf(full, sizeof full, "%s/%s", dir, names[i]);
        snprintf(out->names[i], sizeof out->names[i], "%s", names[i]);
        out->classes = i + 1;
        int64_t before = out->count;
        s = add_file(&b, full, i);
        if (s == DT_OK && out->count == before)
            s = dt__fail(DT_ERR_INVALID, "fortunes: %s holds no fortune", full);
    }
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    for (int k = 0; s == DT_OK && k < 2; k++)
        if (!(out->split[k] = malloc((size_t)(out->count ? out->count : 1) * sizeof *out->split[k])))
            s = dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; s == DT_OK && i < out->count; i++) {
        uint64_t h = dt__fnv1a64(DT_FNV64_OFFSET_BASIS, out->text + out->start[i],
                                 (size_t)(out->start[i + 1] - out->start[i]));
        int k = h % DT_FORTUNES_HELD_OUT_MOD == 0;
        out->split[k][out->split_count[k]++] = i;
    }
    if (s == DT_OK && (out->split_count[0] == 0 || out->split_count[1] == 0))
        s = dt__fail(DT_ERR_INVALID,
                     "fortunes: %s: %lld training and %lld held-out examples; both must be non-empty", dir,
                     (long long)out->split_count[0], (long long)out->split_count[1]);
    if (s != DT_OK)
        dt_fortunes_free(out);
    return s;
}

void dt_fortunes_free(dt_fortunes *f)
{
    free(f->names);
    free(f->text);
    free(f->start);
    free(f->label);
    free(f->split[0]);
    free(f->split[1]);
    memset(f, 0, sizeof *f);
}

static bool word_byte(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c >= 0x80;
}

static uint64_t hash_word(uint64_t h, const char *w, int64_t len)
{
    for (int64_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)w[i];
        c = c >= 'A' && c <= 'Z' ? (unsigned char)(c - 'A' + 'a') : c;
        h = dt__fnv1a64(h, &c, 1);
    }
    return h;
}

int64_t dt_text_features(const char *text, int64_t len, int64_t buckets, float *out, int64_t width)
{
    int64_t n = 0, prev_at = 0, prev_len = -1;
    for (int64_t i = 0; i < len;) {
        if (!word_byte((unsigned char)text[i])) {
            i++;
            continue;
        }
        int64_t at = i;
        while (i < len && word_byte((unsigned char)text[i]))
            i++;
        uint64_t uni = hash_word(DT_FNV64_OFFSET_BASIS, text + at, i - at);
        if (n < width)
            out[n] = (float)(uni % (uint64_t)buckets);
        n++;
        if (prev_len >= 0) {
            uint64_t bi = hash_word(DT_FNV64_OFFSET_BASIS, text + prev_at, prev_len);
            bi = hash_word(dt__fnv1a64(bi, " ", 1), text + at, i - at);
            if (n < width)
                out[n] = (float)(bi % (uint64_t)buckets);
            n++;
        }
        prev_at = at;
        prev_len = i - at;
    }
    for (int64_t k = n; k < width; k++)
        out[k] = -1.0f;
    return n;
}

void dt_fortunes_batch(const dt_fortunes *f, int split, const int64_t *indices, int64_t n, int64_t buckets,
                       int64_t width, float *x, int32_t *y)
{
    for (int64_t b = 0; b < n; b++) {
        int64_t e = f->split[split][indices[b]];
        dt_text_features(f->text + f->start[e], f->start[e + 1] - f->start[e], buckets, x + b * width, width);
        y[b] = f->label[e];
    }
}
