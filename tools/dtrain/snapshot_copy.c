/* A memory snapshot copied over the job's connections at a restart: the
 * ranks whose node has no copy of the snapshot every rank resumes from (a
 * host that was lost and replaced, a node whose snapshot directory is not
 * the lead's) receive its files from a rank that has it.  One broadcast of
 * the file list, then one per file; the receivers write them into a
 * directory of their own and load from it, after the usual checks (the
 * manifest's CRC-32 of every file): a copy damaged on the way is refused
 * like a damaged snapshot. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train_run.h"

#define MAX_FILES 256

typedef struct {
    char name[240];
    int64_t size;
} file_entry;

/* The regular files of dir into list (src only). */
static int list_files(const char *dir, file_entry *list, int64_t *n)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *e;
    *n = 0;
    while ((e = readdir(d)) && *n < MAX_FILES) {
        char path[2400];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (e->d_name[0] == '.' || stat(path, &st) != 0 || !S_ISREG(st.st_mode) ||
            strlen(e->d_name) >= sizeof list->name)
            continue;
        memcpy(list[*n].name, e->d_name, strlen(e->d_name) + 1); /* (shorter than name: checked above) */
        list[(*n)++].size = st.st_size;
    }
    closedir(d);
    return 0;
}

static int read_all(const char *path, void *buf, int64_t size)
{
    FILE *f = fopen(path, "rb");
    int ok = f && (size == 0 || fread(buf, 1, (size_t)size, f) == (size_t)size);
    if (f)
        fclose(f);
    return ok ? 0 : -1;
}

static int write_all(const char *path, const void *buf, int64_t size)
{
    FILE *f = fopen(path, "wb");
    int ok = f && (size == 0 || fwrite(buf, 1, (size_t)size, f) == (size_t)size);
    if (f && fclose(f) != 0)
        ok = 0;
    return ok ? 0 : -1;
}

int dtrain_snapshot_copy(dt_comm *comm, int src, const char *dir, bool need, const char *dest)
{
    int me = dt_comm_rank(comm);
    file_entry *list = calloc(MAX_FILES, sizeof *list);
    int64_t n = 0, bad = 0;
    char why[2600] = "";
    if (!list)
        return 1; /* (the others then wait on this rank: it exits, and they fail naming it) */
    if (me == src && list_files(dir, list, &n) != 0) {
        snprintf(why, sizeof why, "cannot list %s: %s", dir, strerror(errno));
        n = -1;
    }
    dt_status s = dt_broadcast(&n, 1, DT_I64, src, comm);
    if (s == DT_OK && n > 0)
        s = dt_broadcast(list, (size_t)n * sizeof *list, DT_U8, src, comm);
    if (need && n >= 0 && (mkdir(dest, 0700) != 0 && errno != EEXIST)) {
        snprintf(why, sizeof why, "cannot create %s: %s", dest, strerror(errno));
        bad = 1;
    }
    for (int64_t i = 0; s == DT_OK && i < n; i++) {
        if (list[i].size < 0 || memchr(list[i].name, '\0', sizeof list[i].name) == NULL ||
            strchr(list[i].name, '/')) {
            snprintf(why, sizeof why, "a malformed file entry from rank %d", src);
            s = DT_ERR_INVALID;
            break;
        }
        unsigned char *buf = malloc(list[i].size > 0 ? (size_t)list[i].size : 1);
        int64_t missing = !buf;
        /* every rank must take part in each broadcast: a rank without memory says so first */
        if ((s = dt_allreduce(&missing, &missing, 1, DT_I64, DT_MAX, comm)) != DT_OK || missing) {
            free(buf);
            snprintf(why, sizeof why, "out of memory for %s (%lld bytes)", list[i].name, (long long)list[i].size);
            s = s == DT_OK ? DT_ERR_NOMEM : s;
            break;
        }
        char path[2400];
        snprintf(path, sizeof path, "%s/%s", me == src ? dir : dest, list[i].name);
        if (me == src && read_all(path, buf, list[i].size) != 0) {
            snprintf(why, sizeof why, "cannot read %s", path);
            bad = 1; /* sent anyway (the receivers' CRC check refuses it); the copy is refused below */
        }
        s = dt_broadcast(buf, (size_t)list[i].size, DT_U8, src, comm);
        if (s == DT_OK && need && !bad && write_all(path, buf, list[i].size) != 0) {
            snprintf(why, sizeof why, "cannot write %s: %s", path, strerror(errno));
            bad = 1;
        }
        free(buf);
    }
    if (s != DT_OK) {
        fprintf(stderr, "dtrain: rank %d: copying the memory snapshot from rank %d: %s\n", me, src,
                why[0] ? why : dt_last_error());
        free(list);
        return 1;
    }
    bad |= n < 0;
    if (bad && why[0])
        fprintf(stderr, "dtrain: rank %d: copying the memory snapshot from rank %d: %s\n", me, src, why);
    free(list);
    int64_t any = bad;
    if (dt_allreduce(&any, &any, 1, DT_I64, DT_MAX, comm) != DT_OK)
        return 1;
    return any ? 2 : 0;
}
