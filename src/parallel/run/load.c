/* A resume: this rank's part of a checkpoint, whoever wrote it.  Every
 * checkpoint but ZeRO's shard files has the unsplit layout (run/save.c),
 * so a split run (a mesh, ZeRO from an unsplit checkpoint) loads the whole
 * model and optimizer and keeps its part by name: its stage's tensors, of
 * each its tensor-parallel shard, of the optimizer state its ZeRO slices.
 * ZeRO reads from shard files only what overlaps its new shard (any N, any
 * stage).  A parameter server's worker 0 loads the whole state, which the
 * strategy then hands to the servers. */
#include "base/status.h"
#include "parallel/common/strategy.h"

/* The whole model and optimizer from the checkpoint, then this rank's part. */
static dt_status load_split(dt__run *r, const char *step_dir, dt_model *m, dt_optimizer *o)
{
    dt_model *wm = NULL;
    dt_optimizer *wo = NULL;
    dt_status s = dt__run_whole_model(r, &wm);
    dt_params *p = dt_model_params(m), *wp = wm ? dt_model_params(wm) : NULL;
    if (s == DT_OK)
        s = dt__run_optimizer_range(r, wp, 0, dt_params_numel(wp), &wo);
    if (s == DT_OK)
        s = dt_ckpt_load(step_dir, wp, wo);
    if (s == DT_OK && r->layout.zero_stage > 0 && (r->tp || r->pp)) /* ZeRO inside a mesh */
        s = dt__zero_mesh_slice(r, wp, wo, m, o);
    else if (s == DT_OK && r->layout.zero_stage > 0) { /* m still whole: ZeRO takes its shard later */
        dt_vec_copy(dt_params_values(p), dt_params_values(wp), dt_params_numel(p));
        s = dt__zero_slice(m, dt_comm_size(r->dp), dt_comm_rank(r->dp), wo, o);
    } else if (s == DT_OK)
        s = dt__tp_slice(wp, wo, p, o);
    dt_optimizer_destroy(wo);
    dt_model_destroy(wm);
    return s;
}

dt_status dt__run_load(dt__run *r, const char *step_dir, dt_model *m, dt_optimizer *o)
{
    const dt_layout *l = &r->layout;
    int shards = 0;
    DT_CHECK(dt_ckpt_shards(step_dir, &shards, NULL, NULL));
    dt_status s;
    if (l->servers > 0) { /* worker 0 hands the values and the optimizer state to the servers; the others pull */
        if (dt_comm_rank(r->dp) != 0)
            return DT_OK;
        dt_params *p = dt_model_params(m);
        DT_CHECK(dt__run_optimizer_range(r, p, 0, dt_params_numel(p), &r->whole_o));
        DT_CHECK(dt_ckpt_load(step_dir, p, r->whole_o));
        dt_optimizer_set_steps(r->whole_o, r->recipe.resume_optimizer_steps);
        r->ps.resume_state = r->whole_o;
        s = DT_OK;
    } else if (l->zero_stage > 0 && shards > 0 && !r->tp && !r->pp)
        s = dt__zero_load(step_dir, m, o, dt_comm_size(r->dp), dt_comm_rank(r->dp));
    else if (r->mesh || l->zero_stage > 0)
        s = load_split(r, step_dir, m, o);
    else
        s = dt_ckpt_load(step_dir, dt_model_params(m), o);
    if (s == DT_OK)
        dt_optimizer_set_steps(o, r->recipe.resume_optimizer_steps);
    return s;
}
