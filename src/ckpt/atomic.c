/* Crash-safe file replacement and whole-file checksums. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

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

dt_status dt__ckpt_atomic_write_parts(const char *path, const void *const *parts, const size_t *lens,
                                      int nparts)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
        return dt__fail(DT_ERR_INVALID, "path too long: %s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return dt__fail_errno(DT_ERR_SYSTEM, "cannot create %s", tmp);
    for (int i = 0; i < nparts; i++)
        for (size_t done = 0; done < lens[i];) {
            ssize_t n = write(fd, (const unsigned char *)parts[i] + done, lens[i] - done);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                dt_status s = dt__fail_errno(DT_ERR_SYSTEM, "cannot write %s (disk full?)", tmp);
                close(fd);
                unlink(tmp);
                return s;
            }
            done += (size_t)n;
        }
    if (fsync(fd) != 0) {
        dt_status s = dt__fail_errno(DT_ERR_SYSTEM, "cannot fsync %s", tmp);
        close(fd);
        unlink(tmp);
        return s;
    }
    close(fd);
    if (rename(tmp, path) != 0) {
        dt_status s = dt__fail_errno(DT_ERR_SYSTEM, "cannot rename %s to %s", tmp, path);
        unlink(tmp);
        return s;
    }
    return fsync_dir_of(path);
}

dt_status dt_file_crc32(const char *path, uint32_t *crc, uint64_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return dt__fail_errno(DT_ERR_INVALID, "cannot open %s", path);
    unsigned char buf[1 << 16];
    uLong c = crc32(0L, Z_NULL, 0);
    uint64_t total = 0;
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0) {
        c = crc32(c, buf, (uInt)n);
        total += n;
    }
    int err = ferror(f);
    fclose(f);
    if (err)
        return dt__fail(DT_ERR_INVALID, "cannot read %s", path);
    *crc = (uint32_t)c;
    if (size)
        *size = total;
    return DT_OK;
}
