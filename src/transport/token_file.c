/* The job token from a file: one reader for the library (DT_TOKEN_FILE,
 * dtrain.token under srun) and dtrun (--token-file). */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/log.h"
#include "base/status.h"
#include "dtrain/store.h"

dt_status dt_read_token_file(const char *path, const char *what, char *out, size_t len)
{
    char where[160] = "";
    if (what)
        snprintf(where, sizeof where, " (%s)", what);
    if (len < 2)
        return dt__fail(DT_ERR_INVALID, "job token file %s%s: no room for a token", path, where);
    DT_CHECK(dt__regular_file(path));
    FILE *f = fopen(path, "r");
    if (!f)
        return dt__fail(DT_ERR_INVALID, "cannot read the job token file %s%s: %s", path, where, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) == 0 && (st.st_mode & 077))
        DT_WARN("job token file %s%s can be read by other users (mode %03o): chmod 600 it", path, where,
                (unsigned)(st.st_mode & 0777));
    /* The first line and its line end ("\r\n") fit in len + 1 bytes when the
     * token fits in out; a longer line fills the buffer. */
    char *line = malloc(len + 2);
    if (!line) {
        fclose(f);
        return dt__fail(DT_ERR_NOMEM, "job token file %s%s: out of memory", path, where);
    }
    errno = 0;
    bool got = fgets(line, (int)(len + 2), f) != NULL, failed = !got && ferror(f);
    int err = errno;
    fclose(f);
    size_t n = got ? strcspn(line, "\r\n") : 0;
    dt_status s = DT_OK;
    if (failed)
        s = dt__fail(DT_ERR_INVALID, "cannot read the job token file %s%s: %s", path, where, strerror(err));
    else if (n == 0)
        s = dt__fail(DT_ERR_INVALID, "job token file %s%s is empty (the token is its first line)", path, where);
    else if (n >= len)
        s = dt__fail(DT_ERR_INVALID, "job token file %s%s: the token is longer than %zu bytes", path, where,
                     len - 1);
    else {
        memcpy(out, line, n);
        out[n] = '\0';
    }
    free(line);
    return s;
}
