/* Restart phase marks (DT_RESTART_TRACE; include/dtrain/base.h). */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/base.h"

void dt_phase_mark(const char *fmt, ...)
{
    const char *path = getenv("DT_RESTART_TRACE");
    if (!path || !*path)
        return;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts); /* the hosts' clocks: namespace hosts share one */
    char line[512];
    int n = snprintf(line, sizeof line, "%lld.%06ld ", (long long)ts.tv_sec, ts.tv_nsec / 1000);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof line - (size_t)n - 1, fmt, ap);
    va_end(ap);
    n += m < 0 ? 0 : m >= (int)sizeof line - n - 1 ? (int)sizeof line - n - 2 : m;
    line[n++] = '\n';
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    (void)!write(fd, line, (size_t)n);
    close(fd);
}
