/* Model-state memory per rank, by kind, for each ZeRO stage (f32: 4 bytes
 * an element; AdamW keeps 2 state floats an element, SGD with momentum and Adagrad 1):
 *
 *   stage 0   parameters 4P    gradients 4P    optimizer 4kP
 *   stage 1   parameters 4P    gradients 4P    optimizer 4kP/N
 *   stage 2   parameters 4P    gradients 4P/N  optimizer 4kP/N
 *   stage 3   parameters 4P/N  gradients 4P/N  optimizer 4kP/N
 *
 * (P/N exactly: the shard, a slice of every block rounded up; offload=disk
 * keeps two windows of 2^20 elements in memory of the optimizer state, and
 * at stage 3 of the parameter shard), plus the communication buffers each
 * stage allocates, counted at the largest block: stages 1 and 2 reduce and
 * gather in place, except blocks the ranks do not divide (at most two
 * padded copies at a time), stages 2 and 3 hold a block's gradients until its reduce-scatter lands
 * (three: the running block's and two in flight), stage 3 its
 * gathered parameters (three: the running block's, a tied block's, the next
 * one's prefetched).  An estimate: most blocks are smaller, and a tied
 * block's gradients (the embedding's, bound from the head's backward to its
 * own) come on top.  The trainer prints it
 * at start and refuses a stage whose model states exceed the memory limit
 * (the memory_limit key, else this process's share of its cgroup's limit),
 * naming the stage that fits.  Inside a mesh, P is this rank's part (its
 * pipeline stage's tensor-parallel shards) and N the dp group; a
 * pipeline's stage 2 reduce-scatters after its schedule, so its gradients
 * are whole (4P), as stage 1's. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "dtrain_cli.h"

typedef struct {
    double params, grads, optim, buffers;
} state_bytes;

static double total(const state_bytes *b) { return b->params + b->grads + b->optim + b->buffers; }

static double mib(double bytes) { return bytes / 1048576.0; }

/* The largest block's parameters, padded to a multiple of n. */
static int64_t largest_block(dt_model *m, int n)
{
    dt_params *p = dt_model_params(m);
    int64_t best = 0;
    for (int b = 0; b < dt_model_num_layers(m); b++) {
        int first, count;
        dt_model_block_params(m, b, &first, &count);
        if (!count)
            continue;
        int64_t lo = dt_params_info(p, first)->offset;
        int64_t len = dt_params_info(p, first + count - 1)->offset + dt_params_info(p, first + count - 1)->numel - lo;
        len = (len + n - 1) / n * n;
        best = len > best ? len : best;
    }
    return best;
}

static state_bytes estimate(const dtrain_config *c, dt_model *m, int n, int stage)
{
    double P = (double)dt_params_numel(dt_model_params(m)), S = stage ? (double)dt_zero_shard_numel(m, n) : P;
    double k = !strcmp(c->optimizer, "adamw") ? 2 : !strcmp(c->optimizer, "adagrad") || c->momentum > 0 ? 1 : 0, unit = (double)largest_block(m, n);
    state_bytes b = {4 * P, 4 * P, 4 * k * S, 0};
    if (!strcmp(c->offload, "disk") && b.optim > 4 * k * 2 * 1048576.0) /* on disk: two windows of 2^20 in memory */
        b.optim = 4 * k * 2 * 1048576.0;
    if ((stage == 1 || stage == 2) && S * n != P) /* blocks the ranks do not divide: at most two padded copies */
        b.buffers = 4 * 2 * unit;
    if (stage == 3 || (stage == 2 && c->pp <= 1)) { /* a pipeline's stage 2 holds them whole through its schedule */
        b.grads = 4 * S;
        b.buffers += 4 * (3 * unit + 2 * unit / n); /* the running block's gradients, two blocks' being reduced */
    }
    if (stage == 3) {
        b.params = 4 * S;
        if (!strcmp(c->offload, "disk") && b.params > 4 * 2 * 1048576.0) /* the shard on disk too */
            b.params = 4 * 2 * 1048576.0;
        b.buffers += 4 * 3 * unit; /* the block running, a tied block it uses, the next one prefetched */
    }
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

int dtrain_memory_plan(const dtrain_config *c, dt_model *m, int nranks, bool lead)
{
    int stage = (int)c->zero_stage;
    state_bytes want = estimate(c, m, nranks, stage);
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
                             stage, nranks, nranks == 1 ? "" : "s", mib(want.params), mib(want.grads), mib(want.optim),
                             mib(want.buffers), mib(total(&want)), limit > 0 ? " (limit below)" : "");
    if (limit <= 0 || total(&want) <= limit)
        return 0;
    int fits = -1, least = 0;
    double need[4];
    for (int z = 0; z <= 3; z++) {
        state_bytes b = estimate(c, m, nranks, z);
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

void dtrain_memory_report(dt_model *m, dt_optimizer *o, dt_strategy *s)
{
    dt_params *p = dt_model_params(m);
    double n = (double)dt_params_numel(p), values = dt_params_values(p) ? 4 * n : 0, grads = dt_params_grads(p) ? 4 * n : 0;
    bool on_disk = false;
    double state = 4.0 * (double)dt_optimizer_state_floats(o, &on_disk), optim = on_disk ? 0 : state;
    size_t buffers = 0;
    double shard = (double)dt_strategy_memory_bytes(s, &buffers) - (double)buffers;
    struct rusage ru;
    double rss = getrusage(RUSAGE_SELF, &ru) == 0 ? (double)ru.ru_maxrss * 1024.0 : NAN;
    char disk[64] = "", shard_disk[64] = "";
    if (on_disk) /* two windows of it in memory */
        snprintf(disk, sizeof disk, " (%.1f on disk)", mib(state));
    uint64_t rd, wr;
    dt_strategy_zero_offload_io(s, &rd, &wr);
    if (wr > 0) /* ZeRO-3's parameter shard on disk too (two windows of it in memory) */
        snprintf(shard_disk, sizeof shard_disk, "; its parameters on disk");
    printf("memory on rank 0: model states allocated %.1f MiB (parameters %.1f, gradients %.1f, optimizer state "
           "%.1f%s, the strategy's shard %.1f%s), communication buffers %.1f MiB at most, peak RSS %.1f MiB\n",
           mib(values + grads + optim + shard), mib(values), mib(grads), mib(optim), disk, mib(shard), shard_disk,
           mib((double)buffers), mib(rss));
    fflush(stdout);
}
