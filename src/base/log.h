/* Logging to stderr; every line starts with a UTC timestamp (milliseconds)
 * and carries host:pid:rank.  DT_DEBUG selects the level: "warn" (default),
 * "info", "trace" ("all" = trace), plus "coll", comma-separated. */
#ifndef DT_BASE_LOG_H
#define DT_BASE_LOG_H

#include <stdbool.h>
#include <stddef.h>

#include "dtrain/base.h"

typedef enum { DT_LOG_WARN = 0, DT_LOG_INFO = 1, DT_LOG_TRACE = 2 } dt__log_level;

bool dt__log_enabled(dt__log_level level);
/* Whether DT_DEBUG holds `word` ("coll", "info", ...) as one of its words. */
bool dt__debug_word(const char *word);
/* DT_ERR_INVALID naming DT_DEBUG's value and the accepted words when it holds an unknown one. */
dt_status dt__debug_check(void);
/* "2026-01-31T12:34:56.789Z" (UTC, milliseconds) into buf; the length written. */
size_t dt__utc_stamp(char *buf, size_t len);
void dt__log(dt__log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The rank shown in log lines of this process (-1 until known). */
void dt__log_set_rank(int rank);

/* A rate limit for lines that strangers can provoke (refused connections,
 * failed accepts): at most `burst` lines per `window_s` seconds.  Not
 * thread-safe: guard it with the caller's lock. */
typedef struct {
    double window_s;
    int burst;
    long long window_start_ns;
    int logged;     /* lines logged in this window */
    long suppressed; /* lines not logged since the last one that was */
} dt__log_limit;
/* True when a line may be logged now; then *suppressed is the number of
 * lines skipped since the last one logged (and is reset). */
bool dt__log_limit_pass(dt__log_limit *l, long *suppressed);

#define DT_WARN(...) dt__log(DT_LOG_WARN, __VA_ARGS__)
#define DT_INFO(...) dt__log(DT_LOG_INFO, __VA_ARGS__)

#endif
