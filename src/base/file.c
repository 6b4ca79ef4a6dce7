/* Whole files read into memory (dt_read_file, base.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "base/status.h"
#include "dtrain/base.h"

dt_status dt__regular_file(const char *path)
{
    struct stat st;
    if (!path || stat(path, &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode))
        return DT_OK;
    const char *kind = S_ISFIFO(st.st_mode)  ? "a FIFO"
                       : S_ISCHR(st.st_mode) ? "a character device"
                       : S_ISBLK(st.st_mode) ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "of another kind";
    return dt__fail(DT_ERR_INVALID, "%s is %s, not a regular file", path, kind);
}

dt_status dt_read_file(const char *path, char **out, size_t *size)
{
    if (!path || !out)
        return dt__fail(DT_ERR_INVALID, "read_file: %s is NULL", !path ? "the path" : "out");
    *out = NULL;
    if (size)
        *size = 0;
    if (dt__regular_file(path) != DT_OK) {
        errno = EINVAL; /* the callers that print strerror(errno) say "Invalid argument" after the path */
        return DT_ERR_INVALID;
    }
    FILE *f = fopen(path, "rb");
    if (!f)
        return dt__fail_errno(DT_ERR_SYSTEM, "cannot open %s", path);
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) { /* opens, and its size reads as LONG_MAX */
        fclose(f);
        errno = EISDIR;
        return dt__fail_errno(DT_ERR_SYSTEM, "cannot read %s", path);
    }
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n < 0 || fseek(f, 0, SEEK_SET) != 0) { /* a pipe, say */
        int err = errno;
        fclose(f);
        errno = err;
        return dt__fail_errno(DT_ERR_SYSTEM, "cannot find the size of %s", path);
    }
    char *data = malloc((size_t)n + 1);
    if (!data) {
        fclose(f);
        errno = ENOMEM; /* the callers that print strerror(errno) */
        return dt__fail_errno(DT_ERR_NOMEM, "out of memory for %s (%ld bytes)", path, n);
    }
    size_t got = fread(data, 1, (size_t)n, f);
    if (got != (size_t)n) {
        int err = ferror(f) ? errno : EIO; /* no error: it shrank under us */
        free(data);
        fclose(f);
        errno = err;
        return dt__fail_errno(DT_ERR_SYSTEM, "%s: read %zu of its %ld bytes", path, got, n);
    }
    fclose(f);
    data[n] = '\0';
    *out = data;
    if (size)
        *size = (size_t)n;
    return DT_OK;
}
