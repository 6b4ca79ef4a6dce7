/* The end-of-run accounting of a rank's memory (issue 48): its peak RSS
 * against what each part holds, every part measured on its own, so that
 * the sum says whether anything large went unnamed.
 *
 * The parts: model states (the registry's buffers, the optimizer's state,
 * the strategy's shard: their resident pages, /proc/self/pagemap, since a
 * sparse table's untouched rows are allocated but not resident), the
 * checkpoints' copies (the writer's heap copy of the state, a split run's
 * whole model gathered for its checkpoints), activations (every host arena's touched chunk
 * pages: a page stays resident once touched), the strategy's communication
 * buffers, the data set as loaded, shared-memory segments (the kernel's
 * RssShmem: the channels' rings and the collectives' arenas), code and
 * libraries (RssFile: file-backed pages), thread stacks (the anonymous
 * mappings that sit right above a guard page, in /proc/self/smaps), and the
 * anonymous memory the process held when main() began (the loader, libc,
 * the libraries' constructors).  What is left, peak - sum, is reported as
 * not attributed: the allocator's heap of small objects and OpenBLAS's and
 * oneDNN's work buffers; tests/cases/memory_accounting.sh keeps it within
 * 10% of the peak. */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "dtrain_cli.h"

static double start_anon = -1; /* bytes; -1: not measured */

static double mib(double bytes) { return bytes / 1048576.0; }

/* A "Name:   123 kB" field of /proc/self/status in bytes (-1: absent). */
static double status_field(const char *name)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double v = -1;
    size_t n = strlen(name);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, name, n) && line[n] == ':') {
            v = strtod(line + n + 1, NULL) * 1024.0;
            break;
        }
    if (f)
        fclose(f);
    return v;
}

void dtrain_memory_start(void) { start_anon = status_field("RssAnon"); }

/* The resident bytes of thread stacks: anonymous read-write mappings right
 * above an inaccessible 4 KiB one (the guard pthread puts below a stack),
 * and the main thread's [stack]; *threads counts them. */
static double stack_bytes(int *threads)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    double total = 0;
    uint64_t prev_hi = 0, prev_size = 0;
    bool prev_guard = false, in_stack = false;
    *threads = 0;
    while (f && fgets(line, sizeof line, f)) {
        uint64_t lo, hi;
        char perm[8], path[256] = "";
        bool header = (line[0] >= '0' && line[0] <= '9') || (line[0] >= 'a' && line[0] <= 'f'); /* fields: "Rss:" */
        if (header && sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %*s %*s %*s %255[^\n]", &lo, &hi, perm, path) >= 3) {
            char *p = path;
            while (*p == ' ')
                p++;
            bool anon = !*p;
            in_stack = (!strcmp(p, "[stack]")) ||
                       (anon && !strcmp(perm, "rw-p") && prev_guard && prev_hi == lo && prev_size == 4096);
            *threads += in_stack;
            prev_guard = anon && !strcmp(perm, "---p");
            prev_hi = hi;
            prev_size = hi - lo;
            continue;
        }
        unsigned long kb;
        if (in_stack && sscanf(line, "Rss: %lu kB", &kb) == 1)
            total += (double)kb * 1024.0;
    }
    if (f)
        fclose(f);
    return total;
}

void dtrain_memory_account(double model_states, double allocated, double copies, double comm_buffers,
                           double data_bytes, size_t act_in_use)
{
    struct rusage ru;
    double peak = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024.0 : 0;
    double act = (double)dt_arena_host_touched_bytes(), shm = status_field("RssShmem"),
           file = status_field("RssFile");
    int threads = 0;
    double stacks = stack_bytes(&threads), start = start_anon > 0 ? start_anon : 0;
    shm = shm > 0 ? shm : 0;
    file = file > 0 ? file : 0;
    double sum = act + model_states + copies + data_bytes + comm_buffers + shm + file + stacks + start;
    if (peak <= 0)
        return;
    char untouched[96] = ""; /* allocated pages no step touched (a sparse table's rows) are not resident */
    if (allocated - model_states >= 0.05 * 1048576.0)
        snprintf(untouched, sizeof untouched, " (resident pages; %.1f allocated)", mib(allocated));
    printf("memory accounted on rank 0: peak RSS %.1f MiB = activations %.1f (the arenas' pages; %.1f at most in "
           "use) + model states %.1f%s + checkpoint copies %.1f + data set %.1f + communication buffers %.1f + "
           "shared-memory segments %.1f + "
           "code and libraries %.1f (file pages) + thread stacks %.1f (%d threads) + start-up heap %.1f = %.1f MiB "
           "(%.1f%% of the peak), %.1f MiB not attributed (small objects, OpenBLAS's and oneDNN's work buffers)\n",
           mib(peak), mib(act), mib((double)act_in_use), mib(model_states), untouched, mib(copies), mib(data_bytes), mib(comm_buffers),
           mib(shm), mib(file), mib(stacks), threads, mib(start), mib(sum), 100.0 * sum / peak, mib(peak - sum));
    fflush(stdout);
}
