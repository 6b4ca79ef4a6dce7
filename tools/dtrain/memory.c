/* The trainer's memory lines: the plan at start (the library's
 * dt_layout_memory_plan, checked against the memory limit: the memory_limit
 * key, else this process's share of its cgroup's limit, naming the ZeRO
 * stage that fits) and what rank 0 allocated at the end. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "dtrain_cli.h"

static double total(const dt_memory_plan *b) { return b->params + b->grads + b->optimizer + b->buffers; }

static double mib(double bytes) { return bytes / 1048576.0; }

/* The plan of c's layout at ZeRO stage `stage` for this rank's model m over nranks. */
static dt_memory_plan estimate(const dtrain_config *c, dt_model *m, int nranks, int stage)
{
    dt_layout l;
    dtrain_layout_of(c, &l);
    l.zero_stage = stage;
    int k = !strcmp(c->optimizer, "adamw") ? 2 : !strcmp(c->optimizer, "adagrad") || c->momentum > 0 ? 1 : 0;
    dt_memory_plan b = {0};
    (void)dt_layout_memory_plan(&l, m, nranks, k, &b); /* (its arguments are valid here) */
    return b;
}

dt_status dtrain_parse_bytes(const char *text, double *bytes)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || errno || !(v >= 0) || !isfinite(v))
        return DT_ERR_INVALID;
    while (*end == ' ')
        end++;
    static const struct {
        const char *unit;
        double scale;
    } units[] = {{"", 1}, {"B", 1}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0},
                 {"TiB", 1099511627776.0}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcmp(end, units[i].unit)) {
            *bytes = v * units[i].scale;
            return DT_OK;
        }
    return DT_ERR_INVALID;
}

/* A limit file's value in bytes; 0 for none ("max", v1's huge number, absent). */
static double limit_in(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[64] = "";
    if (!f)
        return 0;
    char *got = fgets(line, sizeof line, f);
    fclose(f);
    if (!got || !isdigit((unsigned char)line[0]))
        return 0;
    double v = strtod(line, NULL);
    return v >= 9e18 ? 0 : v;
}

/* This process's memory limit from its cgroups (v1's memory controller and
 * v2, as /proc/self/cgroup names them, each and their ancestors: the
 * smallest applies), 0 when none. */
static double cgroup_limit(void)
{
    FILE *f = fopen("/proc/self/cgroup", "r");
    char line[1024];
    double best = 0;
    while (f && fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        bool v1 = !strncmp(c1 + 1, "memory:", 7), v2 = c2 == c1 + 1; /* "0::/path" */
        if (!v1 && !v2)
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s", c2 + 1);
        static const char *const roots[] = {"/sys/fs/cgroup/memory", "/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
        for (size_t r = v1 ? 0 : 1; r < (v1 ? 1 : 3); r++)
            for (char *end = path + strlen(path);;) { /* the cgroup, then each ancestor */
                char file[2200];
                snprintf(file, sizeof file, "%s%s/%s", roots[r], path, v1 ? "memory.limit_in_bytes" : "memory.max");
                double v = limit_in(file);
                if (v > 0 && (best == 0 || v < best))
                    best = v;
                char *slash = strrchr(path, '/');
                if (!slash || end == path)
                    break;
                *slash = '\0';
                end = slash;
            }
        snprintf(path, sizeof path, "%s", c2 + 1);
    }
    if (f)
        fclose(f);
    return best;
}

double dtrain_cgroup_memory_limit(void) { return cgroup_limit(); }

int dtrain_memory_plan(const dtrain_config *c, dt_model *m, int nranks, bool lead)
{
    int stage = (int)c->zero_stage;
    dt_memory_plan want = estimate(c, m, nranks, stage);
    double limit = 0;
    const char *source = "";
    if (c->memory_limit[0] && dtrain_parse_bytes(c->memory_limit, &limit) == DT_OK && limit > 0)
        source = "memory_limit";
    else if ((limit = cgroup_limit()) > 0) { /* shared by this host's ranks */
        const char *lws = getenv("DT_LOCAL_WORLD_SIZE");
        int local = lws && atoi(lws) > 0 ? atoi(lws) : 1;
        limit /= local;
        source = "the cgroup's memory limit, shared by this host's ranks";
    }
    if (lead)
        dtrain_progress_line("model states per rank (zero_stage %d over %d rank%s): parameters %.1f MiB, gradients "
                             "%.1f MiB, optimizer state %.1f MiB, communication buffers %.1f MiB: %.1f MiB, plus "
                             "activations%s\n",
                             stage, nranks, nranks == 1 ? "" : "s", mib(want.params), mib(want.grads), mib(want.optimizer),
                             mib(want.buffers), mib(total(&want)), limit > 0 ? " (limit below)" : "");
    if (limit <= 0 || total(&want) <= limit)
        return 0;
    int fits = -1, least = 0;
    double need[4];
    for (int z = 0; z <= 3; z++) {
        dt_memory_plan b = estimate(c, m, nranks, z);
        need[z] = total(&b);
        if (need[z] <= limit && fits < 0)
            fits = z;
        least = need[z] < need[least] ? z : least;
    }
    char hint[256];
    if (fits >= 0)
        snprintf(hint, sizeof hint, "zero_stage %d needs %.1f MiB and fits", fits, mib(need[fits]));
    else
        snprintf(hint, sizeof hint, "no zero_stage fits on %d ranks (the least, zero_stage %d, needs %.1f MiB): add "
                 "ranks, offload the optimizer state (offload=disk) or shrink the model", nranks, least,
                 mib(need[least]));
    fprintf(stderr, "dtrain: zero_stage %d needs %.1f MiB of model states per rank (before activations), above %.1f "
                    "MiB (%s); %s\n", stage, mib(total(&want)), mib(limit), source, hint);
    return 2;
}

/* The resident bytes of [p, p + bytes): pages never written (a sparse
 * embedding's rows no batch reached, an optimizer state before its first
 * step) are allocated but not in the RSS.  From /proc/self/pagemap: a page
 * counts when present and mapped by this process alone (bits 63 and 56), so
 * the shared zero page that reading an untouched page maps does not (mincore
 * would count it).  pagemap unreadable: all of it. */
static double resident(const void *p, size_t bytes)
{
    long page = sysconf(_SC_PAGESIZE);
    if (!p || !bytes || page <= 0)
        return 0;
    uint64_t first = (uint64_t)(uintptr_t)p / (uint64_t)page,
             last = ((uint64_t)(uintptr_t)p + bytes - 1) / (uint64_t)page, in = 0;
    FILE *f = fopen("/proc/self/pagemap", "rb");
    if (!f || fseeko(f, (off_t)(first * 8), SEEK_SET) != 0) {
        if (f)
            fclose(f);
        return (double)bytes;
    }
    uint64_t entries[512];
    for (uint64_t at = first; at <= last;) {
        size_t want = last - at + 1 < 512 ? (size_t)(last - at + 1) : 512, got = fread(entries, 8, want, f);
        if (got == 0)
            break;
        for (size_t i = 0; i < got; i++)
            in += (entries[i] >> 63 & 1) && (entries[i] >> 56 & 1);
        at += got;
    }
    fclose(f);
    double r = (double)in * (double)page;
    return r < (double)bytes ? r : (double)bytes; /* (the end pages may hold other data) */
}

/* The resident bytes of a registry's values and gradients and an
 * optimizer's state (on the host). */
static double resident_states(dt_params *p, dt_optimizer *o)
{
    size_t n = (size_t)dt_params_numel(p) * sizeof(float);
    bool on_disk = false;
    size_t state = o ? (size_t)dt_optimizer_state_floats(o, &on_disk) * sizeof(float) : 0;
    dt_ckpt_tensors live = dt_ckpt_tensors_live(p, on_disk ? NULL : o);
    return resident(live.values, n) + resident(dt_params_grads(p), dt_params_grads(p) ? n : 0) +
           resident(live.m, on_disk ? 0 : state);
}

void dtrain_memory_report(dt_model *m, dt_optimizer *o, dt_strategy *s, dt_ckpt_writer *w, double data_bytes,
                          size_t act_peak)
{
    dt_params *p = dt_model_params(m);
    double n = (double)dt_params_numel(p), values = dt_params_values(p) ? 4 * n : 0, grads = dt_params_grads(p) ? 4 * n : 0;
    bool on_disk = false;
    double state = 4.0 * (double)dt_optimizer_state_floats(o, &on_disk), optim = on_disk ? 0 : state;
    /* what of them is resident, on the host (with a device: as allocated,
     * the accounting's figure before it looked at pages) */
    double held = !dt_device_is_host(dt_params_device(p)) ? values + grads + optim : resident_states(p, o);
    /* the checkpoints' copies: the writer's (heap, not staged), and a
     * split run's whole model that its shards are gathered into */
    dt_params *cp = NULL;
    dt_optimizer *co = NULL;
    bool streamed = false;
    dt_strategy_checkpoint_state(s, &cp, &co, &streamed);
    const void *heap[3];
    size_t each = dt_ckpt_writer_heap(w, heap);
    double copies = resident(heap[0], each) + resident(heap[1], each) + resident(heap[2], each) +
                    (cp && cp != p ? resident_states(cp, co) : 0);
    size_t buffers = 0;
    double shard = (double)dt_strategy_memory_bytes(s, &buffers) - (double)buffers;
    struct rusage ru;
    double rss = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024.0 : NAN;
    char disk[64] = "", shard_disk[64] = "";
    if (on_disk) /* two windows of it in memory */
        snprintf(disk, sizeof disk, " (%.1f on disk)", mib(state));
    dt_strategy_io io;
    dt_strategy_io_bytes(s, &io);
    if (io.disk_written > 0) /* ZeRO-3's parameter shard on disk too (two windows of it in memory) */
        snprintf(shard_disk, sizeof shard_disk, "; its parameters on disk");
    printf("memory on rank 0: model states allocated %.1f MiB (parameters %.1f, gradients %.1f, optimizer state "
           "%.1f%s, the strategy's shard %.1f%s), communication buffers %.1f MiB at most, peak RSS %.1f MiB\n",
           mib(values + grads + optim + shard), mib(values), mib(grads), mib(optim), disk, mib(shard), shard_disk,
           mib((double)buffers), mib(rss));
    dtrain_memory_account(held + shard, values + grads + optim + shard, copies, (double)buffers, data_bytes,
                          act_peak);
}
