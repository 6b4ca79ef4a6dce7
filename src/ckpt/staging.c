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

/* ROOT/.spare/NAME (a pruned snapshot's file, its pages still allocated)
 * renamed to path, else path created; sized len, every page allocated now
 * (fallocate: a full /dev/shm fails here, not as a SIGBUS in the copy) and
 * mapped (the mapping outlives the descriptor).  *map set on success. */
static dt_status open_one(const char *root, const char *name, const char *path, size_t len, unsigned char **map)
{
    char spare[DT_CKPT_PATH_MAX + 64];
    if (snprintf(spare, sizeof spare, "%s/" DT__CKPT_SPARE "/%s", root, name) < (int)sizeof spare)
        (void)rename(spare, path);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return dt__fail_errno(DT_ERR_SYSTEM, "cannot create %s", path);
    int err = ftruncate(fd, (off_t)len) != 0 ? errno : posix_fallocate(fd, 0, (off_t)len);
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
    return DT_OK;
}

static const char *const slot_names[3] = {DT__CKPT_MODEL, DT__CKPT_OPTIM_M, DT__CKPT_OPTIM_V};

dt_status dt__ckpt_staging_open(dt__ckpt_staging *st, const char *root, dt_params *p, const dt_ckpt_meta *meta,
                                const bool want[3])
{
    memset(st, 0, sizeof *st);
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
        dt_status s = open_one(root, slot_names[i], path, st->len, &st->map[i]);
        if (s != DT_OK) {
            dt__ckpt_staging_close(st);
            return s;
        }
        st->present[i] = true;
    }
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
                                dt__ckpt_file *files)
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
        files[n++] = (dt__ckpt_file){slot_names[i], st->len, dt__crc32(0, st->map[i], st->len)};
    }
    free(header);
    return DT_OK;
}

void dt__ckpt_staging_release(dt__ckpt_staging *st)
{
    for (int i = 0; i < 3; i++) {
        if (st->map[i])
            munmap(st->map[i], st->len);
        st->map[i] = NULL;
    }
}

void dt__ckpt_staging_close(dt__ckpt_staging *st)
{
    dt__ckpt_staging_release(st);
    for (int i = 0; i < 3; i++) {
        char path[DT_CKPT_PATH_MAX + 64];
        if (st->present[i] && snprintf(path, sizeof path, "%s/%s", st->dir, slot_names[i]) < (int)sizeof path)
            unlink(path); /* (gone when moved into a step) */
        st->present[i] = false;
    }
    if (st->dir[0])
        rmdir(st->dir);
}
