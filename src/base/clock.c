#include "base/clock.h"

#include <time.h>

int64_t dt__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t dt__deadline_after(double seconds)
{
    if (seconds <= 0)
        return INT64_MAX;
    return dt__now_ns() + (int64_t)(seconds * 1e9);
}

int dt__ms_left(int64_t deadline_ns, int cap_ms)
{
    if (deadline_ns == INT64_MAX)
        return cap_ms;
    int64_t left = (deadline_ns - dt__now_ns() + 999999) / 1000000;
    if (left < 0)
        return 0;
    return left > cap_ms ? cap_ms : (int)left;
}
