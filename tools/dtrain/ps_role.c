/* The trainer's parameter-server side (the servers key, dtrun --servers):
 * the configuration for the library (dtrain/ps.h) and the server role.  A
 * server builds the model as the workers do (for its layout and names),
 * makes the run's optimizer over its range, with the weight-decay groups
 * the names give, and serves until every worker has left. */
#include <stdio.h>
#include <string.h>

#include "dtrain_cli.h"

dt_status dtrain_ps_config(const dtrain_config *c, dt_ps_config *out)
{
    memset(out, 0, sizeof *out);
    out->servers = (int)c->servers;
    out->staleness = (int)c->staleness;
    out->clock_log = c->ps_clock_log[0] ? c->ps_clock_log : NULL;
    return dt_ps_sync_parse(c->sync, &out->sync);
}

static dt_status make_range_optimizer(void *user, dt_model *m, int64_t offset, int64_t numel, dt_optimizer **out)
{
    return dtrain_make_optimizer_range(user, dt_model_params(m), offset, numel, out);
}

int dtrain_ps_serve(const dtrain_config *c, dt_comm *job, dt_comm *servers, const dt_ps_config *pc)
{
    dt_model *m = NULL;
    if (dtrain_build_model_tp(c, NULL, &m) != DT_OK)
        return 1;
    int k = dt_ps_server_index(pc, job);
    int64_t P = dt_params_numel(dt_model_params(m)), lo, n;
    dt_ps_range(P, pc->servers, k, &lo, &n);
    dtrain_progress_line("parameter server %d of %d: parameters [%lld, %lld) of %lld, %s, sync %s, for %d worker%s\n",
                         k, pc->servers, (long long)lo, (long long)(lo + n), (long long)P, c->optimizer,
                         dt_ps_sync_name(pc->sync), dt_comm_size(job) - pc->servers,
                         dt_comm_size(job) - pc->servers == 1 ? "" : "s");
    dt_status s = dt_ps_serve(job, servers, pc, m, make_range_optimizer, (void *)c);
    dt_model_destroy(m);
    if (s != DT_OK) {
        fprintf(stderr, "dtrain: rank %d: %s\n", dt_comm_rank(job), dt_last_error());
        return 1;
    }
    dtrain_progress_line("parameter server %d: every worker has left\n", k);
    return 0;
}
