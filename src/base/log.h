/* Logging to stderr; every line carries host:pid:rank.  DT_DEBUG selects the
 * level: "warn" (default), "info", "trace". */
#ifndef DT_BASE_LOG_H
#define DT_BASE_LOG_H

#include <stdbool.h>

typedef enum { DT_LOG_WARN = 0, DT_LOG_INFO = 1, DT_LOG_TRACE = 2 } dt__log_level;

bool dt__log_enabled(dt__log_level level);
void dt__log(dt__log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The rank shown in log lines of this process (-1 until known). */
void dt__log_set_rank(int rank);

#define DT_WARN(...) dt__log(DT_LOG_WARN, __VA_ARGS__)
#define DT_INFO(...) dt__log(DT_LOG_INFO, __VA_ARGS__)

#endif
