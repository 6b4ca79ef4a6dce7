/* The planner's inputs for `dtrain plan` and layout=auto (plan_inputs.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plan_inputs.h"

/* FNV-1a over a string. */
static uint64_t fnv(uint64_t h, const char *s)
{
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static void cpu_model(char *buf, size_t len)
{
    snprintf(buf, len, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
            snprintf(buf, len, "%s", strchr(line, ':') + 2);
            buf[strcspn(buf, "\n")] = 0;
            break;
        }
    if (f)
        fclose(f);
}

/* The cache file for c's model at this machine's threads ("" when there is no home). */
static void cache_path(const dtrain_config *c, int64_t samples, int ranks, char *path, size_t len)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[1024], cpu[256], key[512];
    if (xdg && *xdg)
        snprintf(dir, sizeof dir, "%s/dtrain", xdg);
    else if (home && *home)
        snprintf(dir, sizeof dir, "%s/.cache/dtrain", home);
    else {
        path[0] = 0;
        return;
    }
    cJSON *j = dtrain_model_config_json(c);
    char *text = j ? cJSON_PrintUnformatted(j) : NULL;
    cpu_model(cpu, sizeof cpu);
    /* v4: act_bytes what a block's forward keeps (issue 48: backward frees as it goes); the ranks per host (the
     * sharing probe, contention.c) */
    snprintf(key, sizeof key, "|v4|%lld|%d|%d|%s|%s|%s|", (long long)samples, dt_get_threads(), ranks, c->optimizer,
             c->precision, cpu);
    uint64_t h = fnv(fnv(1469598103934665603ULL, text ? text : c->model), key);
    free(text);
    cJSON_Delete(j);
    if (xdg && *xdg)
        mkdir(xdg, 0755);
    else {
        char parent[1100];
        snprintf(parent, sizeof parent, "%s/.cache", home);
        mkdir(parent, 0755);
    }
    mkdir(dir, 0755);
    snprintf(path, len, "%s/plan-%016llx.json", dir, (unsigned long long)h);
}

/* c's model profiled at this process's threads for `ranks` ranks of a host, from the cache when it holds it. */
dt_status dtrain_plan_profile(const dtrain_config *c, int ranks, bool fresh, bool quiet, dt_plan_model *m)
{
    char path[1200];
    int64_t samples = c->batch_size;
    cache_path(c, samples, ranks, path, sizeof path);
    if (!fresh && path[0] && dt_plan_model_read(path, m) == DT_OK) {
        if (!quiet)
            dtrain_progress_line("plan: the profile of this model from %s\n", path);
        return DT_OK;
    }
    dt_model_desc *d = NULL;
    if (dtrain_describe_model(c, NULL, &d) != DT_OK)
        return DT_ERR_INVALID;
    if (!quiet)
        dtrain_progress_line("plan: profiling %d blocks of %s on %lld samples with %d thread%s ...\n",
                             dt_model_desc_blocks(d), c->model, (long long)samples, dt_get_threads(),
                             dt_get_threads() == 1 ? "" : "s");
    dt_status s = dt_plan_profile_model(d, &(dt_plan_profile_opts){samples, 3, c->optimizer, ranks}, m);
    dt_model_desc_destroy(d);
    if (s != DT_OK) {
        fprintf(stderr, "dtrain plan: profiling: %s\n", dt_last_error());
        return s;
    }
    if (path[0] && dt_plan_model_write(path, m) != DT_OK && !quiet)
        fprintf(stderr, "dtrain plan: warning: cannot cache the profile: %s\n", dt_last_error());
    else if (path[0] && !quiet)
        dtrain_progress_line("plan: profiled; cached in %s\n", path);
    return DT_OK;
}

/* The measured barrier of the largest group of the host's ranks. */
static double sync_all(const dt_plan_model *m, int ranks)
{
    double y = 0;
    for (int k = 0, g = 2; k < 6 && g <= ranks; k++, g *= 2)
        y = m->sync_s[k] > 0 ? m->sync_s[k] : y;
    return y;
}

void dtrain_plan_default_links(dt_plan_links *l, int ranks_per_node)
{
    *l = (dt_plan_links){.intra = {2e-6, 5e9}, .inter = {50e-6, 1.25e9}, .ranks_per_node = ranks_per_node};
}

/* The inputs for c's model on `world` ranks over links (profile made). */
void dtrain_plan_inputs_of(const dtrain_config *c, int world, double memory_limit, dt_plan_inputs *in)
{
    double params = 0;
    for (int b = 0; b < in->model.nblocks; b++)
        params += (double)in->model.blocks[b].params;
    in->world = world;
    in->batch_size = c->batch_size;
    in->memory_limit = memory_limit;
    in->model_flops_per_sample = 6 * params * (double)in->model.tokens_per_sample;
}

/* A profile measures one process alone; a host's ranks that together run
 * more compute threads than it has cores take turns on them, which the
 * cost model works out from the cores (docs/planner.md, "Ranks sharing
 * cores").  Says so once (unless quiet). */
void dtrain_plan_share_cores(dt_plan_inputs *in, bool quiet)
{
    const dt_plan_model *m = &in->model;
    long cores = dt_cores_available();
    int rpn = in->links.ranks_per_node, rpm = in->links.ranks_per_machine;
    bool machine = rpm > rpn; /* several hosts on this machine's cores */
    rpn = machine ? rpm : rpn;
    in->cores_per_node = cores > 0 ? (int)cores : 0;
    if (quiet || cores <= 0)
        return;
    if ((double)rpn * m->threads > (double)cores)
        dtrain_progress_line("plan: %d ranks x %d thread%s share this %s's %ld cores: they take turns\n", rpn,
                             m->threads, m->threads == 1 ? "" : "s", machine ? "machine" : "host", cores);
    if (m->shared_ranks == rpn)
        dtrain_progress_line("plan: %d ranks at once measured here: compute x %.3f, a barrier of 2 ranks %.2f ms, of "
                             "%d %.2f ms\n", rpn, m->contention, m->sync_s[0] * 1e3, rpn, sync_all(m, rpn) * 1e3);
}

/* Whether c's model can run layout l on `world` ranks where the planner's
 * blocks cannot tell: tp dividing the heads and vocabulary (gpt) or the
 * split widths (mlp), micro_batches dividing batch_size, the pipeline's
 * stages against the blocks.  false with the reason in why. */
bool dtrain_plan_runnable(const dtrain_config *c, const dt_layout *l, int world, const dt_model_desc *d, char *why,
                     size_t len)
{
    bool gpt = !strcmp(c->model, "gpt"), mlp = !strcmp(c->model, "mlp");
    if (l->tp > 1 && !gpt && !mlp)
        snprintf(why, len, "tp %d: tensor parallelism is built for the gpt and mlp models", l->tp);
    else if (l->tp > 1 && gpt && (c->heads % l->tp || c->vocab % l->tp))
        snprintf(why, len, "tp %d: does not divide heads (%lld) and vocab (%lld)", l->tp, (long long)c->heads,
                 (long long)c->vocab);
    else if (l->tp > 1 && mlp && dt_mlp_tp_check(c->mlp_sizes, c->mlp_nsizes, l->tp) != DT_OK)
        snprintf(why, len, "%s", dt_last_error());
    else if (c->batch_size % l->micro_batches)
        snprintf(why, len, "micro_batches %d: does not divide batch_size %lld", l->micro_batches,
                 (long long)c->batch_size);
    else if (dt_layout_check(l, world, NULL) != DT_OK || (d && dt_layout_check_model(l, d) != DT_OK))
        snprintf(why, len, "%s", dt_last_error());
    else
        return true;
    return false;
}
