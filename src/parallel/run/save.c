/* dt_strategy_save: one checkpoint, through the strategy's table entry.
 * The common one (data parallelism, one process, a tensor- or
 * pipeline-parallel mesh) hands the state as it is to the writer, after
 * gathering a split run's shards and stages onto the lead's whole model
 * (run/gather.c), so that every checkpoint has the unsplit layout: a run
 * at dp x pp x tp = 2x2x2 resumes at 1x1x1.  ZeRO writes shard files
 * (zero/checkpoint.c); a parameter server's worker 0 snapshots the servers
 * (ps/save.c). */
#include "base/status.h"
#include "parallel/common/strategy.h"

dt_status dt__save_common(dt_strategy *s, const dt__save_args *a)
{
    dt__run *r = s->run;
    dt_status st;
    bool dev = !dt_device_is_host(dt_model_device(s->model));
    if (dev && (st = dt_strategy_sync(s)) != DT_OK) /* ZeRO's last gathers landed: the values are current */
        return dt__fail(st, "checkpoint at step %lld: %s", (long long)a->pr->step, dt_last_error());
    if (dev && a->w && /* the host's copies of the values and the state */
        ((st = dt_params_download(dt_model_params(s->model))) != DT_OK || (st = dt_optimizer_download(s->opt)) != DT_OK))
        return dt__fail(st, "checkpoint at step %lld: %s", (long long)a->pr->step, dt_last_error());
    dt_params *wp = r->whole ? dt_model_params(r->whole) : NULL;
    if ((r->tp || r->pp) && r->layout.zero_stage > 0) /* ZeRO inside a mesh: its state over dp first */
        DT_CHECK(dt__zero_mesh_gather(s, wp, r->whole_o));
    else if ((r->tp || r->pp) && dt_comm_rank(r->dp) == 0)
        DT_CHECK(dt__split_gather(r, dt_model_params(s->model), s->opt, wp, r->whole_o));
    if (a->w)
        dt_ckpt_writer_submit(a->w, a->pr, a->label, a->stall);
    return DT_OK;
}

dt_status dt_strategy_save(dt_strategy *s, dt_ckpt_writer *w, const char *dir, const dt_ckpt_progress *pr,
                           const char *label, double *stall, bool *dropped)
{
    bool none = false;
    dropped = dropped ? dropped : &none;
    *dropped = false;
    if (!s || !s->run || !pr || !dir)
        return dt__fail(DT_ERR_INVALID, "strategy_save: %s", !s ? "the strategy is NULL"
                        : !s->run ? "the strategy was not built by dt_strategy_create" : "progress or dir is NULL");
    if (s->run->server)
        return dt__fail(DT_ERR_INVALID, "strategy_save: a parameter server's rank saves nothing (worker 0 does)");
    dt__save_args a = {dt_strategy_lead(s) || dt_strategy_state_replicated(s) ? w : NULL, dir, pr, label ? label : "",
                       stall, dropped};
    /* a mesh's checkpoint is always the unsplit gather (ZeRO inside it included); otherwise the strategy's */
    return s->ops->save && !s->run->mesh ? s->ops->save(s, &a) : dt__save_common(s, &a);
}
