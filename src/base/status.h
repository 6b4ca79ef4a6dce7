/* Internal error reporting: set the thread-local message and return a code. */
#ifndef DT_BASE_STATUS_H
#define DT_BASE_STATUS_H

#include "dtrain/base.h"

/* Record a formatted message for dt_last_error() and return `code`. */
dt_status dt__fail(dt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Like dt__fail, appending ": strerror(errno)". */
dt_status dt__fail_errno(dt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prefix the current message with more context ("allreduce: " + old). */
dt_status dt__wrap(dt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* DT_OK unless path names something other than a regular file or a
 * directory (a FIFO, a device, a socket; symlinks followed): opening a
 * FIFO for reading blocks until a writer comes, /dev/zero never ends, so
 * every reader of a user's file asks first.  A path that does not exist is
 * DT_OK too: the open that follows names that error (file.c). */
dt_status dt__regular_file(const char *path);

/* Clean-up after a failure may itself fail and overwrite the message; the
 * first error is the one to report:
 *   char why[DT__ERROR_LEN]; dt__error_save(why); clean_up(); return dt__error_restore(s, why); */
#define DT__ERROR_LEN 1024
void dt__error_save(char out[DT__ERROR_LEN]);
dt_status dt__error_restore(dt_status code, const char saved[DT__ERROR_LEN]);

/* Propagate a failure; at DT_DEBUG=trace logs file:line, giving a backtrace. */
#define DT_CHECK(call)                                                   \
    do {                                                                 \
        dt_status dt__s = (call);                                        \
        if (dt__s != DT_OK) {                                            \
            dt__trace_failure(__FILE__, __LINE__, #call, dt__s);         \
            return dt__s;                                                \
        }                                                                \
    } while (0)

void dt__trace_failure(const char *file, int line, const char *expr, dt_status s);

#endif
