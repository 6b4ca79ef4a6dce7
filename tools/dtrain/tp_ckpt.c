/* Tensor-parallel runs checkpoint in the unsplit layout, with PyTorch's
 * names and shapes: before each checkpoint the shards of every tensor
 * (values and optimizer state) are gathered over the tp group into a whole
 * model held by the writer's rank, and a resume loads the whole model and
 * keeps each rank's slice.  A run with tp = 2 therefore resumes with tp = 1
 * or tp = 4, and PyTorch loads its weights as it loads any other. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_cli.h"

/* Print "dtrain: <why>" and return code. */
static dt_status fail(dt_status code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static dt_status fail(dt_status code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("dtrain: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

/* The optimizer's flat arrays laid out like the registry's values: the
 * values themselves, then each named state buffer. */
static int flat_arrays(dt_params *p, dt_optimizer *o, float **out)
{
    dt_optim_state st[4];
    int n = o ? dt_optimizer_state_buffers(o, st, 4) : 0;
    out[0] = dt_params_values(p);
    for (int i = 0; i < n; i++)
        out[1 + i] = st[i].data;
    return 1 + n;
}

dt_status dtrain_tp_gather(dt_params *p, dt_optimizer *o, dt_comm *tp, dt_params *whole, dt_optimizer *wo)
{
    int t = dt_comm_size(tp), root = dt_comm_rank(tp) == 0;
    float *mine[5], *all[5] = {0};
    int na = flat_arrays(p, o, mine);
    if (root && flat_arrays(whole, wo, all) != na)
        return fail(DT_ERR_INVALID, "tensor-parallel checkpoint: the whole model's optimizer keeps other state");
    float *tmp = NULL;
    size_t tmp_cap = 0;
    dt_status s = DT_OK;
    for (int i = 0; s == DT_OK && i < dt_params_count(p); i++) {
        const dt_param_info *in = dt_params_info(p, i);
        int wi = root ? dt_params_find(whole, in->name) : -1;
        if (root && wi < 0) {
            s = fail(DT_ERR_INVALID, "tensor-parallel checkpoint: %s is not in the whole model", in->name);
            break;
        }
        const dt_param_info *win = root ? dt_params_info(whole, wi) : NULL;
        if (in->parts == 1) { /* replicated: the root's own copy */
            for (int a = 0; root && a < na; a++)
                memcpy(all[a] + win->offset, mine[a] + in->offset, (size_t)in->numel * sizeof(float));
            continue;
        }
        size_t need = (size_t)in->numel * (size_t)t;
        if (root && need > tmp_cap) {
            free(tmp);
            tmp_cap = need;
            if (!(tmp = malloc(tmp_cap * sizeof *tmp))) {
                s = fail(DT_ERR_NOMEM, "tensor-parallel checkpoint: out of memory for %s", in->name);
                break;
            }
        }
        for (int a = 0; s == DT_OK && a < na; a++) {
            s = dt_gather(mine[a] + in->offset, tmp, (size_t)in->numel, DT_F32, 0, tp);
            if (s != DT_OK)
                fail(s, "gathering the tensor-parallel shards of %s for a checkpoint: %s", in->name, dt_last_error());
            for (int q = 0; s == DT_OK && root && q < t; q++) { /* part q's elements to their whole places */
                dt_param_info part = *in;
                part.part = q;
                for (int64_t e = 0; e < win->numel; e++) {
                    int64_t at = dt_param_shard_index(&part, e);
                    if (at >= 0)
                        all[a][win->offset + e] = tmp[(size_t)q * (size_t)in->numel + (size_t)at];
                }
            }
        }
    }
    free(tmp);
    if (s == DT_OK && root && wo)
        dt_optimizer_set_steps(wo, dt_optimizer_steps(o));
    return s;
}

dt_status dtrain_tp_slice(dt_params *whole, dt_optimizer *wo, dt_params *p, dt_optimizer *o)
{
    float *mine[5], *all[5];
    int na = flat_arrays(p, o, mine);
    if (flat_arrays(whole, wo, all) != na)
        return fail(DT_ERR_INVALID, "tensor-parallel resume: the whole model's optimizer keeps other state");
    for (int i = 0; i < dt_params_count(p); i++) {
        const dt_param_info *in = dt_params_info(p, i);
        int wi = dt_params_find(whole, in->name);
        if (wi < 0)
            return fail(DT_ERR_INVALID, "tensor-parallel resume: %s is not in the checkpoint's model", in->name);
        const dt_param_info *win = dt_params_info(whole, wi);
        for (int a = 0; a < na; a++)
            for (int64_t e = 0; e < win->numel; e++) {
                int64_t at = in->parts > 1 ? dt_param_shard_index(in, e) : e;
                if (at >= 0)
                    mine[a][in->offset + at] = all[a][win->offset + e];
            }
    }
    dt_optimizer_set_steps(o, dt_optimizer_steps(wo));
    return DT_OK;
}
