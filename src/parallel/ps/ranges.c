/* The parameter server's roles and ranges (ps.h) and the helpers both
 * sides of its protocol share (protocol.h). */
#include <string.h>

#include "base/hash.h"
#include "base/status.h"
#include "parallel/ps/protocol.h"

dt_status dt_ps_sync_parse(const char *text, dt_ps_sync *out)
{
    static const char *const names[] = {"bsp", "asp", "ssp"};
    for (int i = 0; text && i < 3; i++)
        if (!strcmp(text, names[i])) {
            *out = (dt_ps_sync)i;
            return DT_OK;
        }
    return dt__fail(DT_ERR_INVALID, "parameter server: sync '%s' is not bsp, asp or ssp", text ? text : "(null)");
}

const char *dt_ps_sync_name(dt_ps_sync s) { return s == DT_PS_BSP ? "bsp" : s == DT_PS_ASP ? "asp" : "ssp"; }

int dt_ps_server_index(const dt_ps_config *pc, dt_comm *c)
{
    int n = dt_comm_size(c), r = dt_comm_rank(c);
    return pc && r >= n - pc->servers ? r - (n - pc->servers) : -1;
}

dt_status dt_ps_check(const dt_ps_config *pc, int n)
{
    if (!pc)
        return dt__fail(DT_ERR_INVALID, "ps_check: the config is NULL");
    if (pc->servers < 1 || pc->servers >= n)
        return dt__fail(DT_ERR_INVALID, "parameter server: %d server%s among %d ranks leaves %d worker%s (need "
                                        "1 <= servers < ranks)", pc->servers, pc->servers == 1 ? "" : "s", n,
                        n - pc->servers, n - pc->servers == 1 ? "" : "s");
    if (pc->sync == DT_PS_SSP && pc->staleness < 0)
        return dt__fail(DT_ERR_INVALID, "parameter server: staleness %d (>= 0)", pc->staleness);
    return DT_OK;
}

dt_status dt_ps_split(dt_comm *c, const dt_ps_config *pc, dt_comm **group)
{
    if (!c || !pc || !group)
        return dt__fail(DT_ERR_INVALID, "ps_split: %s is NULL", !c ? "the communicator" : !pc ? "the config" : "group");
    DT_CHECK(dt_ps_check(pc, dt_comm_size(c)));
    int server = dt_ps_server_index(pc, c) >= 0;
    return dt_comm_split(c, server, dt_comm_rank(c), group);
}

void dt_ps_range(int64_t P, int S, int k, int64_t *offset, int64_t *numel)
{
    int64_t lo = P * k / S, hi = P * (k + 1) / S;
    *offset = lo;
    *numel = hi - lo;
}

dt_status dt__ps_tables(dt_params *p, int *ntables, int64_t *dense_from)
{
    int n = 0, np = dt_params_count(p);
    while (n < np && dt_params_info(p, n)->row_sparse)
        n++;
    for (int i = n; i < np; i++)
        if (dt_params_info(p, i)->row_sparse)
            return dt__fail(DT_ERR_INVALID, "parameter server: the row-sparse table %s comes after dense parameters "
                                            "(%s first): tables are served by rows only at the front of the model",
                            dt_params_info(p, i)->name, dt_params_info(p, n)->name);
    *ntables = n;
    *dense_from = n < np ? dt_params_info(p, n)->offset : dt_params_numel(p);
    return DT_OK;
}

void dt__ps_dense_range(int64_t P, int64_t dense_from, int S, int k, int64_t *lo, int64_t *n)
{
    dt_ps_range(P - dense_from, S, k, lo, n);
    *lo += dense_from;
}

uint64_t dt__ps_layout_hash(dt_params *p)
{
    uint64_t h = DT_FNV64_SEED;
    for (int i = 0; i < dt_params_count(p); i++) {
        const dt_param_info *in = dt_params_info(p, i);
        h = dt__fnv1a64(h, in->name, strlen(in->name) + 1);
        h = dt__fnv1a64(h, &in->numel, sizeof in->numel);
    }
    return h;
}

const char *dt__ps_tensor_at(dt_params *p, int64_t at)
{
    for (int i = 0; i < dt_params_count(p); i++) {
        const dt_param_info *in = dt_params_info(p, i);
        if (at >= in->offset && at < in->offset + in->numel)
            return in->name;
    }
    return "(outside every tensor)";
}
