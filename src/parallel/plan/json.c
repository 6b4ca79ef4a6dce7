/* The planner's files (JSON): a model's profile (dt_plan_model_read /
 * _write), the links (dt_plan_links_read), one estimate for scripts
 * (dt_plan_estimate_json). */
#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/status.h"
#include "dtrain/ckpt.h"
#include "parallel/plan/internal.h"

/* A number member of o, required (its name in the refusal). */
static dt_status number(const cJSON *o, const char *key, const char *path, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v))
        return dt__fail(DT_ERR_INVALID, "%s: \"%s\" is missing or not a number", path, key);
    *out = v->valuedouble;
    return DT_OK;
}

static dt_status parse_file(const char *path, cJSON **out)
{
    char *text = NULL;
    DT_CHECK(dt_read_file(path, &text, NULL));
    *out = dt__json_parse(text);
    free(text);
    if (!*out || !cJSON_IsObject(*out)) {
        cJSON_Delete(*out);
        return dt__fail(DT_ERR_INVALID, "%s: not a JSON object", path);
    }
    return DT_OK;
}

/* A block's figures: the double fields by offset (the optional ones read as 0 when absent), then the three
 * integers. */
static const struct {
    const char *key;
    size_t off;
    bool optional;
} doubles[] = {
    {"fwd_s", offsetof(dt_plan_block, fwd_s), false},
    {"bwd_s", offsetof(dt_plan_block, bwd_s), false},
    {"act_bytes", offsetof(dt_plan_block, act_bytes), false},
    {"out_bytes", offsetof(dt_plan_block, out_bytes), false},
    {"tp_bytes", offsetof(dt_plan_block, tp_bytes), false},
    {"flops", offsetof(dt_plan_block, flops), true},
    {"act_tp_whole_bytes", offsetof(dt_plan_block, act_tp_whole_bytes), true},
    {"fwd_fixed_s", offsetof(dt_plan_block, fwd_fixed_s), true},
    {"bwd_fixed_s", offsetof(dt_plan_block, bwd_fixed_s), true},
};
#define NDOUBLES (sizeof doubles / sizeof *doubles)

static dt_status read_block(const cJSON *o, const char *path, dt_plan_block *b)
{
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(o, "kind");
    if (!cJSON_IsString(kind) || strlen(kind->valuestring) >= sizeof b->kind)
        return dt__fail(DT_ERR_INVALID, "%s: a block's \"kind\" is missing or longer than %zu characters", path,
                        sizeof b->kind - 1);
    strcpy(b->kind, kind->valuestring);
    for (size_t i = 0; i < NDOUBLES; i++)
        if (!doubles[i].optional || cJSON_GetObjectItemCaseSensitive(o, doubles[i].key))
            DT_CHECK(number(o, doubles[i].key, path, (double *)((char *)b + doubles[i].off)));
    double params = 0, split = 0, colls = 0;
    DT_CHECK(number(o, "params", path, &params));
    DT_CHECK(number(o, "tp_splittable", path, &split));
    DT_CHECK(number(o, "tp_collectives", path, &colls));
    b->params = (int64_t)params;
    b->tp_splittable = (int)split;
    b->tp_collectives = (int)colls;
    return DT_OK;
}

dt_status dt_plan_model_read(const char *path, dt_plan_model *out)
{
    if (!path || !out)
        return dt__fail(DT_ERR_INVALID, "plan_model_read: %s is NULL", !path ? "the path" : "out");
    *out = (dt_plan_model){0};
    cJSON *root;
    DT_CHECK(parse_file(path, &root));
    dt_plan_model m = {0};
    double samples = 0, tokens = 0, threads = 0, opt = 0, state = 0;
    dt_status s = number(root, "samples", path, &samples);
    if (s == DT_OK)
        s = number(root, "tokens_per_sample", path, &tokens);
    if (s == DT_OK)
        s = number(root, "threads", path, &threads);
    if (s == DT_OK)
        s = number(root, "optimizer_s_per_param", path, &opt);
    if (s == DT_OK)
        s = number(root, "optimizer_state_floats", path, &state);
    const cJSON *blocks = cJSON_GetObjectItemCaseSensitive(root, "blocks");
    int n = cJSON_IsArray(blocks) ? cJSON_GetArraySize(blocks) : 0;
    if (s == DT_OK && n < 1)
        s = dt__fail(DT_ERR_INVALID, "%s: \"blocks\" is missing or empty", path);
    if (s == DT_OK && !(m.blocks = calloc((size_t)n, sizeof *m.blocks)))
        s = dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; s == DT_OK && i < n; i++)
        s = read_block(cJSON_GetArrayItem(blocks, i), path, &m.blocks[i]);
    if (s != DT_OK) {
        cJSON_Delete(root);
        free(m.blocks);
        return s;
    }
    m.nblocks = n;
    m.samples = (int64_t)samples;
    m.tokens_per_sample = (int64_t)tokens;
    m.threads = (int)threads;
    m.optimizer_s_per_param = opt;
    m.optimizer_state_floats = (int)state;
    /* optional: how the host's ranks share its cores (absent: not measured) */
    const cJSON *sr = cJSON_GetObjectItemCaseSensitive(root, "shared_ranks");
    if (cJSON_IsNumber(sr)) {
        const cJSON *k = cJSON_GetObjectItemCaseSensitive(root, "contention"), *y = cJSON_GetObjectItemCaseSensitive(root, "sync_s");
        m.shared_ranks = sr->valueint;
        m.contention = cJSON_IsNumber(k) ? k->valuedouble : 1;
        for (int i = 0; cJSON_IsArray(y) && i < cJSON_GetArraySize(y) && i < 6; i++)
            if (cJSON_IsNumber(cJSON_GetArrayItem(y, i)))
                m.sync_s[i] = cJSON_GetArrayItem(y, i)->valuedouble;
    }
    cJSON_Delete(root);
    *out = m;
    return DT_OK;
}

dt_status dt_plan_model_write(const char *path, const dt_plan_model *m)
{
    if (!path || !m || (m->nblocks > 0 && !m->blocks))
        return dt__fail(DT_ERR_INVALID, "plan_model_write: %s", !path ? "the path is NULL" : "the model is NULL");
    cJSON *root = cJSON_CreateObject(), *blocks = cJSON_AddArrayToObject(root, "blocks");
    bool ok = root && blocks && cJSON_AddNumberToObject(root, "samples", (double)m->samples) &&
              cJSON_AddNumberToObject(root, "tokens_per_sample", (double)m->tokens_per_sample) &&
              cJSON_AddNumberToObject(root, "threads", m->threads) &&
              cJSON_AddNumberToObject(root, "optimizer_s_per_param", m->optimizer_s_per_param) &&
              cJSON_AddNumberToObject(root, "optimizer_state_floats", m->optimizer_state_floats);
    if (ok && m->shared_ranks > 0) {
        cJSON *y = cJSON_AddArrayToObject(root, "sync_s");
        ok = y && cJSON_AddNumberToObject(root, "shared_ranks", m->shared_ranks) &&
             cJSON_AddNumberToObject(root, "contention", m->contention);
        for (int i = 0; ok && i < 6; i++)
            ok = cJSON_AddItemToArray(y, cJSON_CreateNumber(m->sync_s[i]));
    }
    for (int i = 0; ok && i < m->nblocks; i++) {
        dt_plan_block b = m->blocks[i];
        cJSON *o = cJSON_CreateObject();
        ok = o && cJSON_AddItemToArray(blocks, o) && cJSON_AddStringToObject(o, "kind", b.kind);
        ok = ok && cJSON_AddNumberToObject(o, "params", (double)b.params) &&
             cJSON_AddNumberToObject(o, "tp_splittable", b.tp_splittable) &&
             cJSON_AddNumberToObject(o, "tp_collectives", b.tp_collectives);
        for (size_t f = 0; ok && f < NDOUBLES; f++)
            ok = cJSON_AddNumberToObject(o, doubles[f].key, *(const double *)((const char *)&b + doubles[f].off)) != NULL;
    }
    char *text = ok ? cJSON_Print(root) : NULL;
    cJSON_Delete(root);
    if (!text)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_status s = dt_atomic_write(path, text, strlen(text));
    cJSON_free(text);
    return s;
}

static dt_status read_link(const cJSON *root, const char *key, const char *path, dt_plan_link *out)
{
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!cJSON_IsObject(o))
        return dt__fail(DT_ERR_INVALID, "%s: \"%s\" is missing or not an object", path, key);
    double us = 0, gbps = 0;
    DT_CHECK(number(o, "latency_us", path, &us));
    DT_CHECK(number(o, "bandwidth_GBps", path, &gbps));
    if (us < 0 || !(gbps > 0))
        return dt__fail(DT_ERR_INVALID, "%s: %s: latency_us %g (>= 0) and bandwidth_GBps %g (> 0)", path, key, us,
                        gbps);
    *out = (dt_plan_link){us * 1e-6, gbps * 1e9};
    return DT_OK;
}

/* The links' members of a links or hardware file (ranks_per_node under `rpn_key`). */
dt_status dt__plan_links_from(const cJSON *root, const char *path, const char *rpn_key, dt_plan_links *out)
{
    dt_plan_links l;
    double rpn = 0;
    DT_CHECK(read_link(root, "intra", path, &l.intra));
    DT_CHECK(read_link(root, "inter", path, &l.inter));
    DT_CHECK(number(root, rpn_key, path, &rpn));
    if (rpn < 1 || rpn > 1 << 20 || rpn != (int)rpn)
        return dt__fail(DT_ERR_INVALID, "%s: %s %g (a whole number, at least 1)", path, rpn_key, rpn);
    l.ranks_per_node = (int)rpn;
    l.ranks_per_machine = 0;
    if (cJSON_GetObjectItemCaseSensitive(root, "ranks_per_machine")) {
        double rpm = 0;
        DT_CHECK(number(root, "ranks_per_machine", path, &rpm));
        if (rpm < rpn || rpm > 1 << 20 || rpm != (int)rpm)
            return dt__fail(DT_ERR_INVALID, "%s: ranks_per_machine %g (a whole number, at least %s %g)", path, rpm,
                            rpn_key, rpn);
        l.ranks_per_machine = (int)rpm;
    }
    l.inter_cpu_s_per_byte = 0;
    if (cJSON_GetObjectItemCaseSensitive(root, "inter_cpu_ns_per_byte")) {
        double ns = 0;
        DT_CHECK(number(root, "inter_cpu_ns_per_byte", path, &ns));
        if (!(ns >= 0 && ns < 1e6))
            return dt__fail(DT_ERR_INVALID, "%s: inter_cpu_ns_per_byte %g (0 or more, below 1e6)", path, ns);
        l.inter_cpu_s_per_byte = ns * 1e-9;
    }
    *out = l;
    return DT_OK;
}

dt_status dt_plan_links_read(const char *path, dt_plan_links *out)
{
    if (!path || !out)
        return dt__fail(DT_ERR_INVALID, "plan_links_read: %s is NULL", !path ? "the path" : "out");
    cJSON *root;
    DT_CHECK(parse_file(path, &root));
    dt_status s = dt__plan_links_from(root, path, "ranks_per_node", out);
    cJSON_Delete(root);
    return s;
}

char *dt_plan_estimate_json(const dt_plan_estimate *e)
{
    if (!e)
        return NULL;
    char *layout = dt_layout_to_json(&e->layout);
    cJSON *root = cJSON_CreateObject(), *l = layout ? dt__json_parse(layout) : NULL;
    free(layout);
    bool ok = root && l && cJSON_AddItemToObject(root, "layout", l);
    if (!ok)
        cJSON_Delete(l);
    const struct {
        const char *key;
        double v;
    } f[] = {{"step_s", e->step_s}, {"compute_s", e->compute_s}, {"bubble_s", e->bubble_s}, {"tp_s", e->tp_s},
             {"pp_s", e->pp_s}, {"dp_s", e->dp_s}, {"ps_s", e->ps_s}, {"recompute_s", e->recompute_s},
             {"optimizer_s", e->optimizer_s}, {"memory_bytes", e->memory_bytes}, {"params_bytes", e->params_bytes},
             {"grads_bytes", e->grads_bytes}, {"optimizer_bytes", e->optimizer_bytes},
             {"buffers_bytes", e->buffers_bytes}, {"activation_bytes", e->activation_bytes},
             {"samples_per_s", e->samples_per_s}, {"mfu", e->mfu},
             {"core_share", e->core_share}};
    for (size_t i = 0; ok && i < sizeof f / sizeof *f; i++)
        ok = cJSON_AddNumberToObject(root, f[i].key, f[i].v) != NULL;
    ok = ok && cJSON_AddBoolToObject(root, "fits", e->fits);
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    return text;
}
