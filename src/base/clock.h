/* Monotonic clock and deadlines. */
#ifndef DT_BASE_CLOCK_H
#define DT_BASE_CLOCK_H

#include <stdint.h>

/* Monotonic time in nanoseconds. */
int64_t dt__now_ns(void);
/* Deadline `seconds` from now (INT64_MAX when seconds <= 0 means none). */
int64_t dt__deadline_after(double seconds);
/* Milliseconds left until the deadline, clamped to [0, cap_ms]. */
int dt__ms_left(int64_t deadline_ns, int cap_ms);

#endif
