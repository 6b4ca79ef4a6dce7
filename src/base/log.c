#include "base/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/env.h"

/* Process-wide logging singleton: the rank tag shown on every line. */
static atomic_int log_rank = -1;

void dt__log_set_rank(int rank) { atomic_store(&log_rank, rank); }

bool dt__log_enabled(dt__log_level level)
{
    const char *d = dt__env_str("DT_DEBUG");
    int want = DT_LOG_WARN;
    if (d && (strstr(d, "trace") || strstr(d, "all")))
        want = DT_LOG_TRACE;
    else if (d && strstr(d, "info"))
        want = DT_LOG_INFO;
    return (int)level <= want;
}

void dt__log(dt__log_level level, const char *fmt, ...)
{
    if (!dt__log_enabled(level))
        return;
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    char line[2048];
    static const char *names[] = {"WARN", "INFO", "TRACE"};
    int n = snprintf(line, sizeof line, "dtrain %s:%d:%d %s ", host, (int)getpid(),
                     atomic_load(&log_rank), names[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s\n", line);
}

bool dt__log_limit_pass(dt__log_limit *l, long *suppressed)
{
    long long now = (long long)dt__now_ns();
    if (now - l->window_start_ns >= (long long)(l->window_s * 1e9)) {
        l->window_start_ns = now;
        l->logged = 0;
    }
    if (l->logged >= l->burst) {
        l->suppressed++;
        return false;
    }
    l->logged++;
    *suppressed = l->suppressed;
    l->suppressed = 0;
    return true;
}
