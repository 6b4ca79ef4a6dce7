#include "base/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/status.h"

/* Process-wide logging singleton: the rank tag shown on every line. */
static atomic_int log_rank = -1;

void dt__log_set_rank(int rank) { atomic_store(&log_rank, rank); }

/* The words DT_DEBUG may hold, comma-separated. */
static const char *const debug_words[] = {"warn", "info", "trace", "all", "coll", NULL};

static bool debug_has(const char *d, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = d; p && *p;) {
        size_t len = strcspn(p, ", ");
        if (len == n && strncmp(p, word, n) == 0)
            return true;
        p += len;
        p += strspn(p, ", ");
    }
    return false;
}

dt_status dt__debug_check(void)
{
    const char *d = dt__env_str("DT_DEBUG");
    for (const char *p = d; p && *p;) {
        size_t len = strcspn(p, ", ");
        bool known = false;
        for (int i = 0; debug_words[i] && !known; i++)
            known = strlen(debug_words[i]) == len && strncmp(p, debug_words[i], len) == 0;
        if (!known && len > 0)
            return dt__fail(DT_ERR_INVALID,
                            "DT_DEBUG=%s: '%.*s' is not a known word (accepted: warn, info, trace, all, coll, "
                            "comma-separated, e.g. info,coll)",
                            d, (int)len, p);
        p += len;
        p += strspn(p, ", ");
    }
    return DT_OK;
}

bool dt__debug_word(const char *word)
{
    const char *d = dt__env_str("DT_DEBUG");
    return d && debug_has(d, word);
}

bool dt__log_enabled(dt__log_level level)
{
    int want = DT_LOG_WARN;
    if (dt__debug_word("trace") || dt__debug_word("all"))
        want = DT_LOG_TRACE;
    else if (dt__debug_word("info"))
        want = DT_LOG_INFO;
    return (int)level <= want;
}

size_t dt__utc_stamp(char *buf, size_t len)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000);
    return n < 0 ? 0 : (size_t)n;
}

void dt__log(dt__log_level level, const char *fmt, ...)
{
    if (!dt__log_enabled(level))
        return;
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    char line[2048];
    static const char *names[] = {"WARN", "INFO", "TRACE"};
    char stamp[40];
    dt__utc_stamp(stamp, sizeof stamp);
    int n = snprintf(line, sizeof line, "%s dtrain %s:%d:%d %s ", stamp, host, (int)getpid(),
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
