/* CPU binding of the local ranks (--bind auto).
 *
 * Two ranks that exchange through shared memory both poll; when the
 * scheduler lets them share a core (it tends to place a woken process next
 * to the one that woke it), every exchange waits for a context switch: the
 * 8-byte allreduce of 2 ranks on this 2-core machine took 2 us or 14 us from
 * one run to the next, and stays at 2 us with each rank on its own core.
 * So, like mpirun's default binding, each rank gets its own block of the
 * CPUs dtrun may use, when there are enough for one each. */
#include <sched.h>

#include "dtrun.h"

int dtrun_cpu_block(const dtrun_opts *o, int local, cpu_set_t *out)
{
    cpu_set_t allowed;
    CPU_ZERO(out);
    if (!o->bind || o->nproc < 2 || sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return 0;
    int ncpu = CPU_COUNT(&allowed);
    if (ncpu < o->nproc)
        return 0;
    int per = ncpu / o->nproc, first = local * per, seen = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE && seen < first + per; cpu++) {
        if (!CPU_ISSET(cpu, &allowed))
            continue;
        if (seen >= first)
            CPU_SET(cpu, out);
        seen++;
    }
    return per;
}
