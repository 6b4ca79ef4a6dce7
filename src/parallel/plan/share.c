/* dt__plan_shared_span: one step's pipelined compute when a host's ranks
 * outnumber its cores (docs/planner.md, "Ranks sharing cores").
 *
 * The scheduler is taken as processor sharing: while n pipeline ranks can
 * run (the next action of their schedule has its input: the forward of the
 * stage before, the backward of the stage after), each of the n x copies
 * threads they stand for progresses at min(1, cores / (n x copies)) of a
 * core.  A rank waiting in its bubble runs nothing and leaves its share to
 * the others: a pipeline's bubble is filled by the other stages' work when
 * the cores are oversubscribed, which ranks / cores applied to every rank
 * misses.  An action may end in a wait that takes no core (fwait, bwait:
 * tensor-parallel collectives across hosts, on the wire): the rank holds
 * its output back that long while the others compute.  The schedules are
 * the pipeline's own (dt_pipe_schedule_build); the step is simulated event
 * by event, each event ending an action's work or its wait. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/pipeline.h"
#include "parallel/plan/internal.h"

dt_status dt__plan_shared_span(const dt__plan_share *sh, double *span, double *busy)
{
    int p = sh->p, v = sh->v, m = sh->m, parts = p * v;
    double copies = sh->copies > 0 ? sh->copies : 1, cores = sh->cores > 0 ? sh->cores : 1;
    if (p == 1 && v == 1) { /* every rank always runnable: the work times the share, then the waits */
        double w = m * (sh->fwd[0] + sh->bwd[0]) * fmax(1, copies / cores);
        busy[0] = w;
        *span = w + (sh->fwait ? m * (sh->fwait[0] + sh->bwait[0]) : 0);
        return DT_OK;
    }
    dt_pipe_action **acts = calloc((size_t)p, sizeof *acts);
    int *nact = calloc((size_t)p, sizeof *nact), *at = calloc((size_t)p, sizeof *at);
    double *left = calloc((size_t)p, sizeof *left), *wleft = calloc((size_t)p, sizeof *wleft);
    bool *fdone = calloc((size_t)parts * (size_t)m, sizeof *fdone), *bdone = calloc((size_t)parts * (size_t)m, sizeof *bdone);
    bool *run = calloc((size_t)p, sizeof *run);
    dt_status s = acts && nact && at && left && wleft && fdone && bdone && run ? DT_OK
                                                                          : dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int r = 0; s == DT_OK && r < p; r++)
        s = dt_pipe_schedule_build(sh->schedule, p, v, r, m, &acts[r], &nact[r]);
    /* the work of rank r's current action */
#define WORK(r) (acts[r][at[r]].kind == 'F' ? sh->fwd : sh->bwd)[acts[r][at[r]].chunk * p + (r)]
#define WAIT(r) (sh->fwait ? (acts[r][at[r]].kind == 'F' ? sh->fwait : sh->bwait)[acts[r][at[r]].chunk * p + (r)] : 0)
    for (int r = 0; s == DT_OK && r < p; r++) {
        busy[r] = 0;
        left[r] = nact[r] ? WORK(r) : 0;
    }
    double now = 0;
    for (int pending = 1; s == DT_OK && pending;) {
        int n = 0, waiting = 0;
        pending = 0;
        for (int r = 0; r < p; r++) {
            run[r] = false;
            if (at[r] >= nact[r])
                continue;
            pending = 1;
            if (wleft[r] > 0) { /* its work done, its wait running */
                waiting++;
                continue;
            }
            dt_pipe_action a = acts[r][at[r]];
            int vs = a.chunk * p + r;
            size_t k = (size_t)vs * (size_t)m + (size_t)a.micro;
            run[r] = a.kind == 'F' ? vs == 0 || fdone[k - (size_t)m]
                                   : fdone[k] && (vs == parts - 1 || bdone[k + (size_t)m]);
            n += run[r];
        }
        if (!pending)
            break;
        if (!n && !waiting) {
            s = dt__fail(DT_ERR_INTERNAL, "plan: the pipeline schedule (p %d, v %d, m %d) waits on itself", p, v, m);
            break;
        }
        double rate = n ? fmin(1, cores / (n * copies)) : 1, dt = INFINITY;
        for (int r = 0; r < p; r++)
            if (run[r])
                dt = fmin(dt, left[r] / rate);
            else if (wleft[r] > 0)
                dt = fmin(dt, wleft[r]);
        now += dt;
        for (int r = 0; r < p; r++) {
            bool ends = false;
            if (run[r]) {
                busy[r] += dt;
                left[r] -= dt * rate;
                if (left[r] <= 1e-12 * (1 + now)) { /* its work done: its wait, if any, starts */
                    left[r] = 0;
                    wleft[r] = WAIT(r);
                    ends = !(wleft[r] > 0);
                }
            } else if (wleft[r] > 0) {
                wleft[r] -= dt;
                if (wleft[r] <= 1e-12 * (1 + now)) {
                    wleft[r] = 0;
                    ends = true;
                }
            }
            if (ends) { /* this action ends: its output is ready */
                dt_pipe_action a = acts[r][at[r]];
                size_t k = (size_t)(a.chunk * p + r) * (size_t)m + (size_t)a.micro;
                (a.kind == 'F' ? fdone : bdone)[k] = true;
                if (++at[r] < nact[r])
                    left[r] = WORK(r);
            }
        }
    }
#undef WORK
#undef WAIT
    *span = now;
    for (int r = 0; acts && r < p; r++)
        free(acts[r]);
    free(acts);
    free(nact);
    free(at);
    free(left);
    free(wleft);
    free(fdone);
    free(bdone);
    free(run);
    return s;
}
