/* Split runs (tensor and pipeline parallel) checkpoint in the unsplit
 * layout, with PyTorch's names and shapes: before each checkpoint the
 * shards of every tensor (values and optimizer state) are gathered over the
 * tp group into the stage's unsplit tensors, and the stages send theirs to
 * the writer's rank, which places them by name in a whole model; a resume
 * loads the whole model and keeps each rank's slice (by name: a stage's
 * tensors, of each its shard).  A run at dp x pp x tp = 2x2x2 therefore
 * resumes at 1x1x1 or 1x2x4, and PyTorch loads its weights as it loads any
 * other. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "parallel/common/strategy.h"

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

/* Gather the tp shards of p's arrays (mine[0..na)) into arrays laid out
 * like the unsplit registry `whole` (all[], on tp rank 0 only). */
static dt_status gather_arrays(dt_params *p, float **mine, int na, dt_comm *tp, dt_params *whole, float **all)
{
    int t = dt_comm_size(tp), root = dt_comm_rank(tp) == 0;
    float *tmp = NULL;
    size_t tmp_cap = 0;
    dt_status s = DT_OK;
    for (int i = 0; s == DT_OK && i < dt_params_count(p); i++) {
        const dt_param_info *in = dt_params_info(p, i);
        int wi = root ? dt_params_find(whole, in->name) : -1;
        if (root && wi < 0) {
            s = dt__fail(DT_ERR_INVALID, "tensor-parallel checkpoint: %s is not in the whole model", in->name);
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
                s = dt__fail(DT_ERR_NOMEM, "tensor-parallel checkpoint: out of memory for %s", in->name);
                break;
            }
        }
        for (int a = 0; s == DT_OK && a < na; a++) {
            s = dt_gather(mine[a] + in->offset, tmp, (size_t)in->numel, DT_F32, 0, tp);
            if (s != DT_OK)
                dt__fail(s, "gathering the tensor-parallel shards of %s for a checkpoint: %s", in->name, dt_last_error());
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
    return s;
}

/* Copy every tensor of registry `from` (arrays src) to its place by name in
 * registry `to` (arrays dst). */
static dt_status place_by_name(dt_params *from, float **src, dt_params *to, float **dst, int na)
{
    for (int i = 0; i < dt_params_count(from); i++) {
        const dt_param_info *in = dt_params_info(from, i);
        int w = dt_params_find(to, in->name);
        if (w < 0 || dt_params_info(to, w)->numel != in->numel)
            return dt__fail(DT_ERR_INVALID, "pipeline checkpoint: %s %s the whole model", in->name,
                        w < 0 ? "is not in" : "has another size in");
        for (int a = 0; a < na; a++)
            memcpy(dst[a] + dt_params_info(to, w)->offset, src[a] + in->offset, (size_t)in->numel * sizeof(float));
    }
    return DT_OK;
}

dt_status dt__split_gather(const dt__run *r, dt_params *p, dt_optimizer *o, dt_params *whole, dt_optimizer *wo)
{
    dt_comm *tp = r->tp, *pp = r->pp;
    int stage = pp ? dt_comm_rank(pp) : 0, nst = pp ? dt_comm_size(pp) : 1;
    bool tp_root = !tp || dt_comm_rank(tp) == 0, lead = tp_root && stage == 0;
    float *mine[5], *arrays[5] = {0}, *all[5] = {0};
    int na = flat_arrays(p, o, mine);
    if (lead && flat_arrays(whole, wo, all) != na)
        return dt__fail(DT_ERR_INVALID, "checkpoint: the whole model's optimizer keeps other state");
    /* This stage's tensors unsplit: gathered over tp into a model of the
     * stage's blocks (the tp root), or this rank's own when tp is 1. */
    dt_model *unsplit = NULL;
    dt_params *sp = p;
    float **sa = mine;
    dt_status s = DT_OK;
    if (tp && dt_comm_size(tp) > 1) {
        if (tp_root && (s = dt__run_stage_model(r, stage, &unsplit)) == DT_OK) {
            sp = dt_model_params(unsplit);
            for (int a = 0; a < na && s == DT_OK; a++)
                if (!(arrays[a] = malloc((size_t)dt_params_numel(sp) * sizeof(float))))
                    s = dt__fail(DT_ERR_NOMEM, "checkpoint: out of memory");
            sa = arrays;
        }
        /* every tp rank joins the gather, also when its root failed above (its error stops the job) */
        dt_status g = gather_arrays(p, mine, na, tp, sp, sa);
        s = s != DT_OK ? s : g;
    }
    if (s == DT_OK && tp_root && nst > 1) {
        if (!lead) { /* a stage's unsplit arrays to the writer's stage */
            for (int a = 0; s == DT_OK && a < na; a++)
                if ((s = dt_send(sa[a], (size_t)dt_params_numel(sp), DT_F32, 0, 40 + a, pp)) != DT_OK)
                    dt__fail(s, "sending stage %d's tensors for a checkpoint: %s", stage, dt_last_error());
        } else
            for (int k = 1; s == DT_OK && k < nst; k++) { /* stage k's layout: its blocks built unsplit */
                dt_model *sk = NULL;
                float *got[5] = {0};
                if ((s = dt__run_stage_model(r, k, &sk)) != DT_OK)
                    break;
                int64_t n = dt_params_numel(dt_model_params(sk));
                for (int a = 0; s == DT_OK && a < na; a++) {
                    if (!(got[a] = malloc((size_t)n * sizeof(float))))
                        s = dt__fail(DT_ERR_NOMEM, "checkpoint: out of memory");
                    else if ((s = dt_recv(got[a], (size_t)n, DT_F32, k, 40 + a, pp, NULL)) != DT_OK)
                        dt__fail(s, "receiving stage %d's tensors for a checkpoint: %s", k, dt_last_error());
                }
                if (s == DT_OK)
                    s = place_by_name(dt_model_params(sk), got, whole, all, na);
                for (int a = 0; a < na; a++)
                    free(got[a]);
                dt_model_destroy(sk);
            }
    }
    if (s == DT_OK && lead) {
        s = place_by_name(sp, sa, whole, all, na);
        if (wo)
            dt_optimizer_set_steps(wo, dt_optimizer_steps(o));
    }
    for (int a = 0; a < na; a++)
        free(arrays[a]);
    dt_model_destroy(unsplit);
    return s;
}

dt_status dt__tp_slice(dt_params *whole, dt_optimizer *wo, dt_params *p, dt_optimizer *o)
{
    float *mine[5], *all[5];
    int na = flat_arrays(p, o, mine);
    if (flat_arrays(whole, wo, all) != na)
        return dt__fail(DT_ERR_INVALID, "tensor-parallel resume: the whole model's optimizer keeps other state");
    for (int i = 0; i < dt_params_count(p); i++) {
        const dt_param_info *in = dt_params_info(p, i);
        int wi = dt_params_find(whole, in->name);
        if (wi < 0)
            return dt__fail(DT_ERR_INVALID, "tensor-parallel resume: %s is not in the checkpoint's model", in->name);
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

dt_status dt__zero_slice(dt_model *m, int nranks, int rank, dt_optimizer *wo, dt_optimizer *o)
{
    dt_optim_state ws[4], st[4];
    int nw = dt_optimizer_state_buffers(wo, ws, 4), n = dt_optimizer_state_buffers(o, st, 4);
    if (nw != n)
        return dt__fail(DT_ERR_INVALID, "ZeRO resume: the checkpoint's optimizer keeps other state");
    for (int a = 0; a < n; a++)
        if (dt_zero_shard_take(m, nranks, rank, ws[a].data, st[a].data) != DT_OK)
            return dt__fail(DT_ERR_INVALID, "ZeRO resume: %s", dt_last_error());
    dt_optimizer_set_steps(o, dt_optimizer_steps(wo));
    return DT_OK;
}

/* ZeRO inside a mesh: the stage's optimizer state put together over dp on
 * dp rank 0 (dt_zero_state_gather), which then joins the mesh gather of an
 * unsplit checkpoint as without ZeRO (run/save.c). */
dt_status dt__zero_mesh_gather(dt_strategy *s, dt_params *whole, dt_optimizer *wo)
{
    const dt__run *r = s->run;
    dt_params *p = dt_model_params(s->model);
    dt_optimizer *full = NULL;
    bool root = dt_comm_rank(r->dp) == 0;
    dt_status st = dt_strategy_sync(s); /* the values current: the last update's gathers landed */
    if (st == DT_OK && root)
        st = dt__run_optimizer_range(r, p, 0, dt_params_numel(p), &full);
    if (st == DT_OK)
        st = dt_zero_state_gather(s->model, s->opt, r->dp, full);
    if (st != DT_OK)
        st = dt__fail(st, "rank %d: checkpoint: %s", dt_comm_rank(r->dp), dt_last_error());
    if (st == DT_OK && root)
        st = dt__split_gather(r, p, full, whole, wo);
    dt_optimizer_destroy(full);
    return st;
}

/* Its resume: the stage's shards of the whole state (dt__tp_slice, the
 * values into m), then this rank's ZeRO shard of them. */
dt_status dt__zero_mesh_slice(const dt__run *r, dt_params *whole, dt_optimizer *wo, dt_model *m, dt_optimizer *o)
{
    dt_params *p = dt_model_params(m);
    dt_optimizer *full = NULL;
    dt_status st = dt__run_optimizer_range(r, p, 0, dt_params_numel(p), &full);
    if (st == DT_OK)
        st = dt__tp_slice(whole, wo, p, full);
    if (st == DT_OK)
        st = dt__zero_slice(m, dt_comm_size(r->dp), dt_comm_rank(r->dp), full, o);
    dt_optimizer_destroy(full);
    return st;
}
