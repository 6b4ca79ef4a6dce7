#include "base/status.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"

static _Thread_local char last_error[DT__ERROR_LEN];

const char *dt_last_error(void) { return last_error; }

const char *dt_status_name(dt_status s)
{
    switch (s) {
    case DT_OK: return "DT_OK";
    case DT_ERR_INVALID: return "DT_ERR_INVALID";
    case DT_ERR_NOMEM: return "DT_ERR_NOMEM";
    case DT_ERR_SYSTEM: return "DT_ERR_SYSTEM";
    case DT_ERR_TIMEOUT: return "DT_ERR_TIMEOUT";
    case DT_ERR_PEER: return "DT_ERR_PEER";
    case DT_ERR_AUTH: return "DT_ERR_AUTH";
    case DT_ERR_PROTOCOL: return "DT_ERR_PROTOCOL";
    case DT_ERR_TRUNCATE: return "DT_ERR_TRUNCATE";
    case DT_ERR_ABORTED: return "DT_ERR_ABORTED";
    case DT_ERR_INTERNAL: return "DT_ERR_INTERNAL";
    }
    return "DT_ERR_UNKNOWN";
}

/* The message is formatted apart and then copied: a caller may pass
 * dt_last_error() itself as an argument ("context: %s"). */
dt_status dt__fail(dt_status code, const char *fmt, ...)
{
    char text[DT__ERROR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    memcpy(last_error, text, sizeof last_error);
    return code;
}

dt_status dt__fail_errno(dt_status code, const char *fmt, ...)
{
    int err = errno;
    char text[DT__ERROR_LEN];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof text)
        snprintf(text + n, sizeof text - (size_t)n, ": %s", strerror(err));
    memcpy(last_error, text, sizeof last_error);
    errno = err; /* the caller may still look at it */
    return code;
}

dt_status dt__wrap(dt_status code, const char *fmt, ...)
{
    char old[sizeof last_error];
    memcpy(old, last_error, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof last_error)
        snprintf(last_error + n, sizeof last_error - (size_t)n, "%s", old);
    return code;
}

void dt__error_save(char out[DT__ERROR_LEN]) { memcpy(out, last_error, sizeof last_error); }

dt_status dt__error_restore(dt_status code, const char saved[DT__ERROR_LEN])
{
    memcpy(last_error, saved, sizeof last_error);
    last_error[sizeof last_error - 1] = '\0';
    return code;
}

void dt__trace_failure(const char *file, int line, const char *expr, dt_status s)
{
    if (dt__log_enabled(DT_LOG_TRACE))
        dt__log(DT_LOG_TRACE, "%s:%d: %s -> %s (%s)", file, line, expr, dt_status_name(s),
                last_error);
}
