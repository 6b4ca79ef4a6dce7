/* Weight-decay groups from parameter names, as GPT-2 / nanoGPT train: decay
 * on matrices, none on biases and normalisation weights (one dimension) or on
 * embedding tables (names matching the patterns). */
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/parallel.h"

const char *const DT_NO_DECAY_DEFAULT = "*wte*,*wpe*,*embed*";

bool dt_param_no_decay(const dt_param_info *pi, const char *patterns)
{
    if (!patterns)
        patterns = DT_NO_DECAY_DEFAULT;
    if (!strcmp(patterns, "none"))
        return false;
    if (pi->ndim < 2)
        return true;
    char pat[256];
    for (const char *p = patterns; *p;) {
        size_t n = strcspn(p, ",");
        if (n > 0 && n < sizeof pat) {
            memcpy(pat, p, n);
            pat[n] = 0;
            if (fnmatch(pat, pi->name, 0) == 0)
                return true;
        }
        p += n + (p[n] == ',');
    }
    return false;
}

dt_status dt_decay_groups(const dt_params *p, const char *patterns, float weight_decay, int64_t shard_offset,
                          int64_t shard_numel, dt_optim_group **out, int *count)
{
    if (!p || !out || !count)
        return dt__fail(DT_ERR_INVALID, "decay_groups: a NULL argument");
    if (shard_offset < 0 || shard_numel < 0 || shard_offset + shard_numel > dt_params_numel(p))
        return dt__fail(DT_ERR_INVALID, "decay_groups: shard [%lld, %lld) outside the %lld parameters",
                        (long long)shard_offset, (long long)(shard_offset + shard_numel),
                        (long long)dt_params_numel(p));
    int n = dt_params_count(p), used = 0;
    dt_optim_group *g = malloc((size_t)(n ? n : 1) * sizeof *g);
    if (!g)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) {
        const dt_param_info *pi = dt_params_info(p, i);
        int64_t lo = pi->offset > shard_offset ? pi->offset : shard_offset;
        int64_t hi = pi->offset + pi->numel < shard_offset + shard_numel ? pi->offset + pi->numel
                                                                         : shard_offset + shard_numel;
        if (lo >= hi)
            continue;
        float wd = dt_param_no_decay(pi, patterns) ? 0.0f : weight_decay;
        if (used && g[used - 1].weight_decay == wd && g[used - 1].offset + g[used - 1].numel == lo - shard_offset)
            g[used - 1].numel += hi - lo; /* merge neighbours with the same decay */
        else
            g[used++] = (dt_optim_group){lo - shard_offset, hi - lo, wd};
    }
    *out = g;
    *count = used;
    return DT_OK;
}
