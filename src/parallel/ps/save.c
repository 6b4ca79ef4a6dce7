/* A parameter server's checkpoint: the servers hold the parameters and the
 * optimizer state, so worker 0 (the lead) fetches both into the run's whole
 * model and optimizer and hands them to the writer; the other workers hold
 * nothing of their own. */
#include "base/status.h"
#include "parallel/common/strategy.h"

dt_status dt__ps_save(dt_strategy *s, const dt__save_args *a)
{
    dt__run *r = s->run;
    if (dt_comm_rank(r->dp) != 0 || !r->whole)
        return DT_OK;
    if (dt_strategy_ps_snapshot(s, dt_params_values(dt_model_params(r->whole)), r->whole_o) != DT_OK)
        return dt__fail(DT_ERR_INVALID, "checkpoint at step %lld: %s", (long long)a->pr->step, dt_last_error());
    dt_ckpt_progress q = *a->pr;
    q.optimizer_steps = dt_optimizer_steps(r->whole_o); /* the servers' optimizer made the steps */
    if (a->w)
        dt_ckpt_writer_submit(a->w, &q, a->label, a->stall);
    return DT_OK;
}
