/* The trainer's progress lines (steps, evaluations, checkpoints) on stdout,
 * each prefixed with a UTC timestamp with milliseconds, as the library's log
 * lines are: "2026-01-31T12:34:56.789Z step 100/500 | loss ...". */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "dtrain_cli.h"

void dtrain_progress_line(const char *fmt, ...)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    char line[4096];
    int n = snprintf(line, sizeof line, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ ", tm.tm_year + 1900,
                     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    fputs(line, stdout); /* one write per line: lines of two threads do not mix */
    fflush(stdout);
}

void dtrain_phase(const char *what)
{
    const char *r = getenv("DT_RANK"), *g = getenv("DT_RESTART");
    dt_phase_mark("rank %s gen %s %s", r && *r ? r : "0", g && *g ? g : "0", what);
}
