/* What a run built by dt_strategy_create answers about itself, and a
 * parameter server's side of it. */
#include <stdlib.h>

#include "base/status.h"
#include "parallel/common/strategy.h"

bool dt_strategy_serves(const dt_strategy *s) { return s && s->run && s->run->server; }

dt_model *dt_strategy_model(const dt_strategy *s) { return s ? s->model : NULL; }

dt_optimizer *dt_strategy_optimizer(const dt_strategy *s) { return s ? s->opt : NULL; }

dt_comm *dt_strategy_data_comm(const dt_strategy *s) { return s && s->run ? s->run->dp : NULL; }

dt_comm *dt_strategy_job_comm(const dt_strategy *s) { return s && s->run ? s->run->job : NULL; }

dt_comm *dt_strategy_train_comm(const dt_strategy *s)
{
    return !s || !s->run ? NULL : s->run->role ? s->run->role : s->run->job;
}

const dt_layout *dt_strategy_layout(const dt_strategy *s) { return s && s->run ? &s->run->layout : NULL; }

bool dt_strategy_lead(const dt_strategy *s)
{
    if (!s || !s->run)
        return false;
    const dt__run *r = s->run;
    return !r->server && dt_comm_rank(r->dp) == 0 && (!r->tp || dt_comm_rank(r->tp) == 0) &&
           (!r->pp || dt_comm_rank(r->pp) == 0);
}

bool dt_strategy_state_replicated(const dt_strategy *s)
{
    if (!s || !s->run)
        return false;
    const dt__run *r = s->run;
    return !r->server && !r->whole && !r->mesh && r->layout.servers == 0 && r->layout.zero_stage == 0;
}

void dt_strategy_groups(const dt_strategy *s, dt_comm **dp, dt_comm **tp, dt_comm **pp)
{
    const dt__run *r = s ? s->run : NULL;
    *dp = r ? r->dp : NULL;
    *tp = r ? r->tp : NULL;
    *pp = r ? r->pp : NULL;
}

int64_t dt_strategy_whole_parameters(dt_strategy *s)
{
    if (!s || !s->model)
        return s && s->run && s->run->whole ? dt_params_numel(dt_model_params(s->run->whole)) : -1;
    dt_model *m = s->model;
    dt_params *p = dt_model_params(m);
    const dt_shared_param *sh;
    int nsh = dt_model_shared_params(m, &sh);
    int64_t n = 0;
    for (int i = 0; i < dt_params_count(p); i++) {
        bool copy = false; /* a tied parameter's copy on a stage that does not hold its first user */
        for (int k = 0; k < nsh; k++)
            if (sh[k].param == i) {
                int lo, hi;
                copy = true;
                for (int ch = 0; ch < dt_model_chunks(m); ch++) {
                    dt_model_chunk_range(m, ch, &lo, &hi);
                    copy &= !(sh[k].first_block >= lo && sh[k].first_block < hi);
                }
            }
        if (!copy)
            n += dt_params_info(p, i)->numel * dt_params_info(p, i)->parts;
    }
    dt_comm *pp = s->run ? s->run->pp : NULL;
    if (pp && dt_allreduce(&n, &n, 1, DT_I64, DT_SUM, pp) != DT_OK)
        return -1;
    return n;
}

void dt_strategy_checkpoint_state(dt_strategy *s, dt_params **params, dt_optimizer **optimizer, bool *stream_model)
{
    *params = NULL;
    *optimizer = NULL;
    *stream_model = false;
    if (!dt_strategy_lead(s) && !dt_strategy_state_replicated(s))
        return;
    const dt__run *r = s->run;
    if (r->whole) { /* a mesh's or a server's: gathered into at each save */
        *params = dt_model_params(r->whole);
        *optimizer = r->whole_o;
        return;
    }
    *params = dt_model_params(s->model);
    *optimizer = r->layout.zero_stage > 0 ? NULL : s->opt; /* ZeRO's state goes into shard files */
    *stream_model = r->layout.zero_stage == 3;
}

int dt_strategy_server_range(const dt_strategy *s, int64_t *lo, int64_t *n, int64_t *total)
{
    if (!dt_strategy_serves(s))
        return -1;
    const dt__run *r = s->run;
    int k = dt_ps_server_index(&r->ps, r->job);
    *total = dt_params_numel(dt_model_params(r->whole));
    dt_ps_range(*total, r->ps.servers, k, lo, n);
    return k;
}

static dt_status serve_optimizer(void *user, dt_model *m, int64_t offset, int64_t numel, dt_optimizer **out)
{
    return dt__run_optimizer_range(user, dt_model_params(m), offset, numel, out);
}

dt_status dt_strategy_serve(dt_strategy *s)
{
    if (!dt_strategy_serves(s))
        return dt__fail(DT_ERR_INVALID, "strategy_serve: this rank is not a parameter server");
    dt__run *r = s->run;
    return dt_ps_serve(r->job, r->role, &r->ps, r->whole, serve_optimizer, r);
}

dt_mesh *dt_strategy_mesh(const dt_strategy *s) { return s && s->run ? s->run->mesh : NULL; }

bool dt_strategy_lockstep(const dt_strategy *s)
{
    return s && s->run && !(s->run->layout.servers > 0 && s->run->layout.sync != DT_PS_BSP);
}
