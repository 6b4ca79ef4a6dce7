/* TEMPORARY stand-in for issue47-core's cost model and search (deleted on merge). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/plan.h"

void dt_plan_model_free(dt_plan_model *m)
{
    if (m) {
        free(m->blocks);
        m->blocks = NULL;
        m->nblocks = 0;
    }
}
dt_status dt_plan_model_read(const char *path, dt_plan_model *out)
{
    (void)out;
    return dt__fail(DT_ERR_INVALID, "%s: stub", path);
}
dt_status dt_plan_model_write(const char *path, const dt_plan_model *m)
{
    (void)m;
    return dt__fail(DT_ERR_INVALID, "%s: stub", path);
}
dt_status dt_plan_links_read(const char *path, dt_plan_links *out)
{
    (void)out;
    return dt__fail(DT_ERR_SYSTEM, "cannot open %s", path);
}
dt_status dt_plan_hardware_read(const char *path, dt_plan_inputs *in)
{
    (void)in;
    return dt__fail(DT_ERR_SYSTEM, "cannot open %s", path);
}
dt_status dt_plan_model_gpt(const char *name, const dt_plan_inputs *in, int64_t mb, dt_plan_model *out)
{
    (void)in, (void)mb, (void)out;
    return dt__fail(DT_ERR_INVALID, "unknown model %s (gpt3-1.3b, gpt3-13b, gpt3-175b)", name);
}
dt_status dt_plan_layout(const dt_plan_inputs *in, const dt_layout *l, dt_plan_estimate *e)
{
    int dp = 1;
    DT_CHECK(dt_layout_check(l, in->world, &dp));
    memset(e, 0, sizeof *e);
    e->layout = *l;
    double f = 0, p = 0, a = 0;
    for (int i = 0; i < in->model.nblocks; i++)
        f += in->model.blocks[i].fwd_s + in->model.blocks[i].bwd_s, p += (double)in->model.blocks[i].params,
            a += in->model.blocks[i].act_bytes;
    e->compute_s = f * (double)in->batch_size / (l->tp * l->pp);
    e->bubble_s = l->pp > 1 ? e->compute_s * (l->pp - 1) / (l->micro_batches + l->pp - 1) : 0;
    e->dp_s = dp > 1 ? 2 * 4 * p / in->links.intra.bandwidth_Bps : 0;
    e->step_s = e->compute_s + e->bubble_s + e->dp_s;
    e->memory_bytes = 16 * p / (l->tp * l->pp) + a * (double)in->batch_size / l->micro_batches;
    e->samples_per_s = (double)in->batch_size * dp / e->step_s;
    e->fits = !in->memory_limit || e->memory_bytes <= in->memory_limit;
    return DT_OK;
}
static int by_time(const void *a, const void *b)
{
    const dt_plan_estimate *x = a, *y = b;
    return x->step_s < y->step_s ? -1 : x->step_s > y->step_s;
}
dt_status dt_plan_search(const dt_plan_inputs *in, const dt_plan_search_opts *o, dt_plan_result *r)
{
    memset(r, 0, sizeof *r);
    dt_plan_estimate *all = calloc(256, sizeof *all);
    int n = 0;
    for (int tp = 1; tp <= in->world; tp *= 2)
        for (int pp = 1; pp <= in->world; pp *= 2)
            for (int z = 0; z <= 1; z++)
                for (int mb = 1; mb <= 4; mb *= 2) {
                    dt_layout l;
                    dt_layout_default(&l);
                    l.tp = tp, l.pp = pp, l.zero_stage = z, l.micro_batches = mb;
                    r->considered++;
                    if (in->batch_size % mb || dt_plan_layout(in, &l, &all[n]) != DT_OK)
                        continue;
                    r->valid++;
                    if (all[n].fits)
                        n++, r->fitting++;
                }
    qsort(all, (size_t)n, sizeof *all, by_time);
    r->best = all;
    r->nbest = n < o->top ? n : o->top;
    r->rejected = calloc(1, sizeof *r->rejected);
    r->rejected[0] = strdup("tp 8: stub");
    r->nrejected = 1;
    return n ? DT_OK : dt__fail(DT_ERR_INVALID, "no layout fits");
}
void dt_plan_result_free(dt_plan_result *r)
{
    for (int i = 0; i < r->nrejected; i++)
        free(r->rejected[i]);
    free(r->rejected);
    free(r->best);
    memset(r, 0, sizeof *r);
}
char *dt_plan_estimate_json(const dt_plan_estimate *e)
{
    char *s = malloc(256);
    snprintf(s, 256, "{\"step_s\": %g, \"memory_bytes\": %g}", e->step_s, e->memory_bytes);
    return s;
}
