/* Crash-safe file replacement and whole-file checksums. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "ckpt/ckpt_internal.h"

static dt_status fsync_dir_of(const char *path)
{
    char *copy = strdup(path);
    if (!copy)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    const char *dir = dirname(copy);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    dt_status s = DT_OK;
    if (fd < 0 || fsync(fd) != 0)
        s = dt__fail_errno(DT_ERR_SYSTEM, "cannot fsync directory %s", dir);
    if (fd >= 0)
        close(fd);
    free(copy);
    return s;
}

dt_status dt_atomic_write(const char *path, const void *bytes, size_t len)
{
    return dt__ckpt_atomic_write_parts(path, &bytes, &len, 1);
}

/* ROOT/.spare/NAME renamed to tmp, for path ROOT/DIR/NAME (ckpt_internal.h);
 * false when there is none. */
static bool take_spare(const char *path, const char *tmp)
{
    const char *name = strrchr(path, '/'), *dir_end = name;
    if (!name || name == path)
        return false;
    const char *root_end = dir_end - 1;
    while (root_end > path && *root_end != '/')
        root_end--;
    if (*root_end != '/')
        return false;
    char spare[DT_CKPT_PATH_MAX + 64];
    if (snprintf(spare, sizeof spare, "%.*s/" DT__CKPT_SPARE "/%s", (int)(root_end - path), path, name + 1) >=
        (int)sizeof spare)
        return false;
    return rename(spare, tmp) == 0;
}

dt_status dt__atomic_open(dt__atomic_file *f, const char *path)
{
    f->fd = -1;
    f->written = 0;
    if (snprintf(f->path, sizeof f->path, "%s", path) >= (int)sizeof f->path ||
        snprintf(f->tmp, sizeof f->tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof f->tmp)
        return dt__fail(DT_ERR_INVALID, "path too long: %s", path);
    /* a reused file is written over from its start and cut to size at the commit */
    int trunc = take_spare(path, f->tmp) ? 0 : O_TRUNC;
    if ((f->fd = open(f->tmp, O_WRONLY | O_CREAT | trunc | O_CLOEXEC, 0644)) < 0)
        return dt__fail_errno(DT_ERR_SYSTEM, "cannot create %s", f->tmp);
    return DT_OK;
}

void dt__atomic_abandon(dt__atomic_file *f)
{
    if (f->fd < 0)
        return;
    close(f->fd);
    unlink(f->tmp);
    f->fd = -1;
}

dt_status dt__atomic_append(dt__atomic_file *f, const void *bytes, size_t len)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = write(f->fd, (const unsigned char *)bytes + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            dt_status s = dt__fail_errno(DT_ERR_SYSTEM, "cannot write %s (disk full?)", f->tmp);
            dt__atomic_abandon(f);
            return s;
        }
        done += (size_t)n;
    }
    f->written += len;
    return DT_OK;
}

dt_status dt__atomic_commit(dt__atomic_file *f)
{
    if (ftruncate(f->fd, (off_t)f->written) != 0) {
        dt_status s = dt__fail_errno(DT_ERR_SYSTEM, "cannot set the size of %s", f->tmp);
        dt__atomic_abandon(f);
        return s;
    }
    if (fsync(f->fd) != 0) {
        dt_status s = dt__fail_errno(DT_ERR_SYSTEM, "cannot fsync %s", f->tmp);
        dt__atomic_abandon(f);
        return s;
    }
    close(f->fd);
    f->fd = -1;
    if (rename(f->tmp, f->path) != 0) {
        dt_status s = dt__fail_errno(DT_ERR_SYSTEM, "cannot rename %s to %s", f->tmp, f->path);
        unlink(f->tmp);
        return s;
    }
    return fsync_dir_of(f->path);
}

dt_status dt__ckpt_atomic_write_parts(const char *path, const void *const *parts, const size_t *lens,
                                      int nparts)
{
    dt__atomic_file f;
    DT_CHECK(dt__atomic_open(&f, path));
    for (int i = 0; i < nparts; i++)
        DT_CHECK(dt__atomic_append(&f, parts[i], lens[i]));
    return dt__atomic_commit(&f);
}

dt_status dt_file_crc32(const char *path, uint32_t *crc, uint64_t *size)
{
    DT_CHECK(dt__regular_file(path));
    FILE *f = fopen(path, "rb");
    if (!f)
        return dt__fail_errno(DT_ERR_INVALID, "cannot open %s", path);
    unsigned char buf[1 << 16];
    uint32_t c = 0;
    uint64_t total = 0;
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        c = dt__crc32(c, buf, n);
        total += n;
    }
    int err = ferror(f);
    fclose(f);
    if (err)
        return dt__fail(DT_ERR_INVALID, "cannot read %s", path);
    *crc = c;
    if (size)
        *size = total;
    return DT_OK;
}
