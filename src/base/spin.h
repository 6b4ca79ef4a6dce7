/* Busy-waiting on memory another process or thread writes. */
#ifndef DT_BASE_SPIN_H
#define DT_BASE_SPIN_H

#include <sched.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/clock.h"

/* Pause-spin this long before yielding between looks. */
#define DT__PURE_SPIN_NS 5000

/* Look at ready(arg) until it returns true (then true) or spin_ns have
 * passed (then false; at once when spin_ns <= 0).  The first few
 * microseconds pause-spin, `pauses` CPU pauses (1-64) between looks; after
 * them, or from the start when `yields` (more ranks than cores), every look
 * also gives the core away: the peer being waited for may be queued on this
 * very core.  Inline so that `ready` inlines too: the waits it serves take
 * microseconds. */
static inline bool dt__spin_until(bool (*ready)(void *arg), void *arg, int64_t spin_ns, bool yields, int pauses)
{
    if (spin_ns <= 0)
        return false;
    int64_t start = dt__now_ns(), now = start;
    do {
        if (yields || now - start > DT__PURE_SPIN_NS) {
            if (ready(arg))
                return true;
            sched_yield();
        } else {
            for (int k = 0; k < 64; k += pauses) {
                for (int i = 0; i < pauses; i++)
#if defined(__x86_64__) || defined(__i386__)
                    __builtin_ia32_pause();
#else
                    ;
#endif
                if (ready(arg))
                    return true;
            }
        }
        now = dt__now_ns();
    } while (now - start < spin_ns);
    return false;
}

#endif
