/* A machine described for projections (dt_plan_hardware_read): one device's
 * peak FLOP/s, memory and memory bandwidth, devices per node, the two link
 * classes and the efficiency the blocks reach.  bench/plan/hardware/ holds
 * examples; docs/planner.md says how to write one. */
#include <cjson/cJSON.h>
#include <stdlib.h>

#include "base/json.h"
#include "base/status.h"
#include "parallel/plan/internal.h"

static dt_status positive(const cJSON *root, const char *key, const char *path, bool required, double *out)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v && !required)
        return DT_OK;
    if (!cJSON_IsNumber(v) || !(v->valuedouble > 0))
        return dt__fail(DT_ERR_INVALID, "%s: \"%s\" is missing or not a positive number", path, key);
    *out = v->valuedouble;
    return DT_OK;
}

dt_status dt_plan_hardware_read(const char *path, dt_plan_inputs *in)
{
    if (!path || !in)
        return dt__fail(DT_ERR_INVALID, "plan_hardware_read: %s is NULL", !path ? "the path" : "in");
    char *text = NULL;
    DT_CHECK(dt_read_file(path, &text, NULL));
    cJSON *root = dt__json_parse(text);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return dt__fail(DT_ERR_INVALID, "%s: not a JSON object", path);
    }
    double flops = 0, memory = 0, eff = 1, mem_gbps = 0;
    dt_plan_links links;
    dt_status s = positive(root, "flops_per_s", path, true, &flops);
    if (s == DT_OK)
        s = positive(root, "memory_bytes", path, true, &memory);
    if (s == DT_OK)
        s = positive(root, "efficiency", path, false, &eff);
    if (s == DT_OK && eff > 1)
        s = dt__fail(DT_ERR_INVALID, "%s: \"efficiency\" %g is a fraction of the peak (at most 1)", path, eff);
    if (s == DT_OK)
        s = positive(root, "memory_bandwidth_GBps", path, false, &mem_gbps);
    if (s == DT_OK)
        s = dt__plan_links_from(root, path, "devices_per_node", &links);
    cJSON_Delete(root);
    if (s != DT_OK)
        return s;
    in->links = links;
    in->flops_per_s = flops;
    in->memory_limit = memory;
    in->compute_efficiency = eff;
    in->memory_bandwidth_Bps = mem_gbps * 1e9;
    return DT_OK;
}
