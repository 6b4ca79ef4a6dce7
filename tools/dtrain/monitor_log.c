/* Per-rank records for dtrun --monitor.  dtrun gives the ranks a directory
 * (DT_MONITOR_DIR); each rank appends one JSON object a line to
 * DIR/rank<R>.jsonl and flushes it, and dtrun tails the files.  Files need no
 * protocol, cost nothing when nobody reads them, and survive the rank that
 * wrote them (what a dead rank last said stays readable). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain_cli.h"

FILE *dtrain_monitor_open(int rank, int world, int64_t steps, const char *unit)
{
    const char *dir = getenv("DT_MONITOR_DIR");
    if (!dir || !*dir)
        return NULL;
    char path[4096], host[256] = "?";
    snprintf(path, sizeof path, "%s/rank%d.jsonl", dir, rank);
    FILE *f = fopen(path, "a");
    if (!f) { /* the monitor is an observer: training goes on without it */
        fprintf(stderr, "dtrain: rank %d: DT_MONITOR_DIR: cannot write %s (training goes on unmonitored)\n",
                rank, path);
        return NULL;
    }
    gethostname(host, sizeof host - 1);
    host[strcspn(host, "\"\\")] = '\0'; /* a JSON string without escapes */
    const char *gen = getenv("DT_RESTART");
    fprintf(
        f,
        "{\"event\": \"start\", \"rank\": %d, \"world\": %d, \"host\": \"%s\", \"pid\": %d, \"steps\": %lld, "
        "\"unit\": \"%s\", \"restart\": %d}\n",
        rank, world, host, (int)getpid(), (long long)steps, unit, gen ? atoi(gen) : 0);
    fflush(f);
    return f;
}

void dtrain_monitor_record(FILE *f, const char *fmt, ...)
{
    if (!f)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fflush(f);
}
