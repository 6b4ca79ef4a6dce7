/* A memory checkpoint's tensor files mapped before the state is copied
 * (ckpt_internal.h, dt__ckpt_staging): the training thread's copy lands in
 * the files' pages, so the write that follows is only the headers, the
 * CRCs and the renames -- one copy of the state instead of two. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "ckpt/ckpt_internal.h"

#define STAGING_DIR ".staging"

/* The header bytes reserved before the data: the header of the longest
 * step number, so that every step's header fits and is padded to it. */
static dt_status reserved_header(dt_params *p, const dt_ckpt_meta *meta, size_t *head)
{
    char step_text[32];
    const char *metadata[12];
    dt__ckpt_model_metadata(meta, INT64_MAX, step_text, metadata);
    unsigned char *header;
    DT_CHECK(dt__safetensors_header(p, metadata, 0, &header, head));
    free(header);
    return DT_OK;
}

void dt__ckpt_maps_clear(dt__ckpt_maps *maps)
{
    for (int i = 0; i < maps->n; i++)
        munmap(maps->e[i].map, maps->e[i].len);
    maps->n = 0;
}

static void maps_drop(dt__ckpt_maps *maps, int i)
{
    munmap(maps->e[i].map, maps->e[i].len);
    maps->e[i] = maps->e[--maps->n];
}

/* The mapping of the file st describes, len bytes, or NULL. */
static unsigned char *maps_find(dt__ckpt_maps *maps, const struct stat *st, size_t len)
{
    for (int i = 0; maps && i < maps->n; i++)
        if (maps->e[i].dev == (uint64_t)st->st_dev && maps->e[i].ino == (uint64_t)st->st_ino &&
            maps->e[i].len == len && st->st_size == (off_t)len) {
            maps->e[i].used = maps->opens;
            maps->reused++;
            return maps->e[i].map;
        }
    return NULL;
}

static void maps_add(dt__ckpt_maps *maps, const struct stat *st, size_t len, unsigned char *map)
{
    if (maps->n == DT__CKPT_MAPS_MAX) { /* the least recently used one out */
        int lru = 0;
        for (int i = 1; i < maps->n; i++)
            lru = maps->e[i].used < maps->e[lru].used ? i : lru;
        maps_drop(maps, lru);
    }
    maps->e[maps->n++] = (dt__ckpt_map){(uint64_t)st->st_dev, (uint64_t)st->st_ino, maps->opens, len, map};
    maps->made++;
}

/* The mapping of path (about to be removed) out of the table. */
static void maps_forget(dt__ckpt_maps *maps, const char *path)
{
    struct stat st;
    for (int i = 0; maps && stat(path, &st) == 0 && i < maps->n; i++)
        if (maps->e[i].dev == (uint64_t)st.st_dev && maps->e[i].ino == (uint64_t)st.st_ino) {
            maps_drop(maps, i);
            return;
        }
}

/* ROOT/.spare/NAME (a pruned snapshot's file, its pages still allocated)
 * renamed to path, else path created; sized len, every page allocated now
 * (fallocate: a full /dev/shm fails here, not as a SIGBUS in the copy) and
 * mapped (the mapping outlives the descriptor) -- or, when maps holds the
 * file's mapping, that.  *map set on success. */
static dt_status open_one(const char *root, const char *name, const char *path, size_t len, dt__ckpt_maps *maps,
                          unsigned char **map)
{
    char spare[DT_CKPT_PATH_MAX + 64];
    if (snprintf(spare, sizeof spare, "%s/" DT__CKPT_SPARE "/%s", root, name) < (int)sizeof spare)
        (void)rename(spare, path);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return dt__fail_errno(DT_ERR_SYSTEM, "cannot create %s", path);
    struct stat st;
    int err = fstat(fd, &st) != 0 ? errno : 0;
    if (!err && (*map = maps_find(maps, &st, len))) {
        close(fd);
        return DT_OK;
    }
    if (!err)
        err = ftruncate(fd, (off_t)len) != 0 ? errno : posix_fallocate(fd, 0, (off_t)len);
    void *m = err ? MAP_FAILED : mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    if (m == MAP_FAILED && !err)
        err = errno;
    close(fd);
    if (m == MAP_FAILED) {
        unlink(path);
        errno = err;
        return dt__fail_errno(DT_ERR_SYSTEM, "cannot allocate the %zu bytes of %s", len, path);
    }
    *map = m;
    if (maps)
        maps_add(maps, &st, len, m);
    return DT_OK;
}

static const char *const slot_names[3] = {DT__CKPT_MODEL, DT__CKPT_OPTIM_M, DT__CKPT_OPTIM_V};

dt_status dt__ckpt_staging_open(dt__ckpt_staging *st, const char *root, dt_params *p, const dt_ckpt_meta *meta,
                                const bool want[3], dt__ckpt_maps *maps)
{
    memset(st, 0, sizeof *st);
    st->maps = maps;
    if (maps)
        maps->opens++;
    DT_CHECK(dt__ckpt_path(st->dir, sizeof st->dir, "%s/" STAGING_DIR, root));
    if (mkdir(st->dir, 0755) != 0 && errno != EEXIST)
        return dt__fail_errno(DT_ERR_SYSTEM, "cannot create %s", st->dir);
    DT_CHECK(reserved_header(p, meta, &st->head));
    st->len = st->head + (size_t)dt_params_numel(p) * sizeof(float);
    for (int i = 0; i < 3; i++) {
        if (!want[i])
            continue;
        char path[DT_CKPT_PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/%s", st->dir, slot_names[i]);
        dt_status s = open_one(root, slot_names[i], path, st->len, maps, &st->map[i]);
        if (s != DT_OK) {
            dt__ckpt_staging_close(st);
            return s;
        }
        st->present[i] = true;
    }
    int horizon = maps && maps->horizon > 1 ? maps->horizon : 1;
    for (int i = 0; maps && i < maps->n; i++) /* files removed, not recycled */
        if (maps->e[i].used + (uint64_t)horizon < maps->opens)
            maps_drop(maps, i--);
    return DT_OK;
}

float *dt__ckpt_staging_data(const dt__ckpt_staging *st, int slot)
{
    return st->map[slot] ? (float *)(void *)(st->map[slot] + st->head) : NULL;
}

int dt__ckpt_staging_files(const dt__ckpt_staging *st, const char *names[3])
{
    int n = 0;
    for (int i = 0; i < 3; i++)
        if (st->present[i])
            names[n++] = slot_names[i];
    return n;
}

dt_status dt__ckpt_staging_seal(dt__ckpt_staging *st, dt_params *p, const dt_ckpt_meta *meta, int64_t step,
                                const uint32_t *data_crc, dt__ckpt_file *files)
{
    char step_text[32];
    const char *metadata[12];
    dt__ckpt_model_metadata(meta, step, step_text, metadata);
    unsigned char *header;
    size_t hlen;
    DT_CHECK(dt__safetensors_header(p, metadata, st->head, &header, &hlen));
    if (hlen != st->head) { /* (cannot happen: the reserve is the longest step's) */
        free(header);
        return dt__fail(DT_ERR_INVALID, "checkpoint header of %zu bytes does not fit the %zu reserved", hlen,
                        st->head);
    }
    int n = 0;
    for (int i = 0; i < 3; i++) {
        if (!st->map[i])
            continue;
        memcpy(st->map[i], header, hlen);
        uint32_t crc = data_crc ? dt__crc32_combine(dt__crc32(0, header, hlen), data_crc[i], st->len - hlen)
                                : dt__crc32(0, st->map[i], st->len);
        files[n++] = (dt__ckpt_file){slot_names[i], st->len, crc};
    }
    free(header);
    return DT_OK;
}

void dt__ckpt_staging_release(dt__ckpt_staging *st)
{
    for (int i = 0; i < 3; i++) {
        if (st->map[i] && !st->maps)
            munmap(st->map[i], st->len);
        st->map[i] = NULL;
    }
}

void dt__ckpt_staging_close(dt__ckpt_staging *st)
{
    dt__ckpt_staging_release(st);
    for (int i = 0; i < 3; i++) {
        char path[DT_CKPT_PATH_MAX + 64];
        if (st->present[i] && snprintf(path, sizeof path, "%s/%s", st->dir, slot_names[i]) < (int)sizeof path) {
            maps_forget(st->maps, path); /* (gone when moved into a step) */
            unlink(path);
        }
        st->present[i] = false;
    }
    if (st->dir[0])
        rmdir(st->dir);
}
