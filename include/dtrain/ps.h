/* dtrain parameter server: servers hold the parameters and run the
 * optimizer over their part; workers pull the parameters, compute
 * gradients and push them back (TensorFlow's PS, ps-lite, BytePS).
 *
 *   dt_ps_config pc = {.servers = 2, .sync = DT_PS_SSP, .staleness = 2};
 *   dt_comm *group;  dt_ps_split(world, &pc, &group);     // the role's ranks
 *   if (dt_ps_server_index(&pc, world) >= 0)
 *       dt_ps_serve(world, group, &pc, model, make_optimizer, user);   // until the workers leave
 *   else {
 *       dt_strategy *s;  dt_strategy_ps_create(model, world, &pc, &cfg, &s);
 *       each step: dt_strategy_step(s, step, lr, next_batch, user, &stats);
 *   }
 *
 * Roles: the last `servers` ranks of the communicator serve, the others
 * (W) work; data parallelism runs over the workers (`group` on a worker).
 * The parameters (the registry's flat buffer) are cut into `servers`
 * contiguous ranges of nearly equal length, one per server; each server
 * runs its own optimizer (made by the caller for its range, so weight-decay
 * groups and the kind are the caller's) over its range.
 *
 * A step on a worker: the forward of each block waits only for the
 * parameters of that block (pulled at the end of the step before, from
 * every server in parallel); in the last micro-batch's backward, as a block
 * finishes, its gradients (the mean over the micro-batches) are pushed to
 * the servers whose ranges they cover, overlapping the blocks still
 * running (like data parallelism's buckets); then the worker's clock
 * advances and it pulls for the next step.
 *
 * Synchronisation (`sync`), c being the step a worker is about to run
 * (the number of pushes it has made):
 *   DT_PS_BSP  a server sums every worker's gradients for step c-1 and
 *              updates once with their mean before answering any pull for
 *              step c: every step sees every worker's gradients of every
 *              earlier step, the same as allreduce data parallelism from
 *              the same weights (clipping included: the servers reduce the
 *              norm among themselves).
 *   DT_PS_ASP  each push is applied alone (the gradient over W, so the
 *              learning rate means what it means in data parallelism) as
 *              it arrives, and pulls are answered at once: no worker ever
 *              waits for another, and nothing bounds how stale the
 *              parameters a worker computes with are.
 *   DT_PS_SSP  pushes are applied as with ASP; a pull for step c is
 *              answered once the slowest worker has pushed at least
 *              c - staleness steps.  Guarantee (Ho et al., 2013): the
 *              parameters a worker computes step c with hold every
 *              worker's gradients of steps before c - staleness, and its
 *              own of every step before c; a worker is never more than
 *              `staleness` steps ahead of the slowest.  staleness 0 waits
 *              like BSP but applies pushes one by one.
 *
 * Checks: each worker's model layout (every tensor's name and length) is
 * compared with the servers' when it joins, and every push is checked
 * against the server's range and the worker's clock before it touches the
 * server's state; a refused message fails the worker's call with an error
 * naming the worker and the tensor.  A worker that dies fails the job (the
 * servers and workers see it as a dead peer, naming it): BSP cannot go on
 * without it, and ASP and SSP here do not either; `dtrun --max-restarts`
 * restarts the job from its last checkpoint (docs/parameter-server.md).
 *
 * Every call returns DT_OK or a negative dt_status with the detail in
 * dt_last_error(). */
#ifndef DTRAIN_PS_H
#define DTRAIN_PS_H

#include "dtrain/comm.h"
#include "dtrain/nn.h"
#include "dtrain/optim.h"
#include "dtrain/parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_PS_BSP, DT_PS_ASP, DT_PS_SSP } dt_ps_sync;

typedef struct {
    int servers;       /* S >= 1: the last S ranks serve */
    dt_ps_sync sync;
    int staleness;     /* SSP: how many steps a worker may run ahead of the slowest (>= 0) */
    /* Servers append one line per pull they answer to this file (NULL: no
     * log): "pull worker W step C slowest K waited_ms T" (K: the fewest
     * steps any worker had pushed then). */
    const char *clock_log;
    /* Worker 0 on resume: a whole optimizer (over every parameter) whose
     * state and step count the servers take with the values; NULL: fresh. */
    dt_optimizer *resume_state;
} dt_ps_config;

/* "bsp", "asp" or "ssp" to the enum; DT_ERR_INVALID naming the text. */
dt_status dt_ps_sync_parse(const char *text, dt_ps_sync *out);
const char *dt_ps_sync_name(dt_ps_sync s);

/* The server index (0..S-1) of this rank of c, or -1 for a worker. */
int dt_ps_server_index(const dt_ps_config *pc, dt_comm *c);

/* Collective over c: the communicator of this rank's role (the workers, or
 * the servers).  Refuses S < 1 or no worker left, naming the numbers. */
dt_status dt_ps_split(dt_comm *c, const dt_ps_config *pc, dt_comm **group);
/* dt_ps_split's checks for a world of n ranks, with its messages, without a
 * communicator (a rank can refuse before joining the job). */
dt_status dt_ps_check(const dt_ps_config *pc, int n);

/* The range [*offset, *offset + *numel) of the flat parameters server k
 * of S holds, for a model of P parameters. */
void dt_ps_range(int64_t P, int S, int k, int64_t *offset, int64_t *numel);

/* Makes the optimizer of a server for its range of the parameters
 * ([offset, offset + numel) of m's registry). */
typedef dt_status (*dt_ps_optimizer_fn)(void *user, dt_model *m, int64_t offset, int64_t numel, dt_optimizer **out);

/* Serve on a server rank until every worker has left (dt_strategy_destroy
 * on the workers).  m: the model as the workers build it (its layout and
 * names; the values come from worker 0).  group: the servers (from
 * dt_ps_split), over which BSP reduces the gradient norm. */
dt_status dt_ps_serve(dt_comm *c, dt_comm *group, const dt_ps_config *pc, dt_model *m, dt_ps_optimizer_fn make,
                      void *user);

/* A worker's strategy (collective with the servers' dt_ps_serve: worker 0
 * sends its values, and pc->resume_state's state, to the servers; every
 * worker's layout is checked).  cfg->grad_clip needs BSP (ASP and SSP apply
 * pushes one by one: refused).  The step's grad_norm is the norm of the
 * mean gradient the servers applied (BSP), or of this worker's own
 * gradient (ASP, SSP). */
dt_status dt_strategy_ps_create(dt_model *m, dt_comm *c, const dt_ps_config *pc, const dt_strategy_config *cfg,
                                dt_strategy **out);
/* Worker 0 between steps: the servers' parameters into values (the flat
 * registry layout) and their optimizer state into whole (an optimizer over
 * every parameter, of the servers' kind), once every worker has pushed the
 * steps this worker has (a checkpoint). */
dt_status dt_strategy_ps_snapshot(dt_strategy *s, float *values, dt_optimizer *whole);
/* Bytes this worker sent to and received from the servers since it joined
 * (worker 0's initial values not counted): headers, ids, rows, gradients. */
void dt_strategy_ps_traffic(const dt_strategy *s, uint64_t *sent, uint64_t *received);

#ifdef __cplusplus
}
#endif

#endif
