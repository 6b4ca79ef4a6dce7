/* The planner's parts: the collectives' costs over the links (collectives.c),
 * one layout's estimate (cost.c) over a context that caches the pipeline's
 * cuts, shared by the search (search.c), which estimates many layouts of
 * one model. */
#ifndef DT_PARALLEL_PLAN_INTERNAL_H
#define DT_PARALLEL_PLAN_INTERNAL_H

#include "dtrain/plan.h"

/* Where a group's members sit: n ranks, `stride` apart in the world
 * (tp: 1; pp: tp; dp: tp x pp), the world filling hosts of
 * links->ranks_per_node in rank order. */
typedef struct {
    const dt_plan_links *links;
    int n, stride;
} dt__plan_group;

/* Seconds for one collective of `bytes` (the whole buffer, as
 * docs/algorithms.md's N) over group g, by the algorithm the communicator
 * picks at that size (docs/planner.md). */
double dt__plan_allreduce_s(dt__plan_group g, double bytes);
double dt__plan_reduce_scatter_s(dt__plan_group g, double bytes);
double dt__plan_allgather_s(dt__plan_group g, double bytes);
/* One message between world ranks a and b. */
double dt__plan_p2p_s(const dt_plan_links *links, int a, int b, double bytes);

/* The cuts of the model's blocks into 1..nblocks parts, each computed once
 * (the pipeline's dynamic programming over the blocks' cost hints). */
typedef struct {
    const dt_plan_inputs *in;
    int **bounds; /* [parts]: parts + 1 entries, NULL until asked */
    bool has_gpt_block; /* recompute blocks: only the "gpt-block"s when the model has some, else every block */
} dt__plan_ctx;

dt_status dt__plan_ctx_init(dt__plan_ctx *c, const dt_plan_inputs *in);
void dt__plan_ctx_free(dt__plan_ctx *c);
/* The inputs checked once (blocks, links, batch): DT_ERR_INVALID naming the field. */
dt_status dt__plan_inputs_check(const dt_plan_inputs *in);
/* One layout's estimate: dt_layout_check against in->world first, then the
 * model against the layout (stages against blocks, tp against splittable
 * blocks, the batch against micro_batches); DT_ERR_INVALID naming why. */
dt_status dt__plan_estimate(dt__plan_ctx *c, const dt_layout *l, dt_plan_estimate *out);

/* Measure dt_plan_model's contention and sync_s for `ranks` ranks of this
 * process's compute threads on `cores` cores (contention.c): block `block`
 * of d on an input of in_shape (token ids below `ids` when ids > 0). */
dt_status dt__plan_measure_sharing(const dt_model_desc *d, int block, int in_ndim, const int64_t *in_shape, int64_t ids,
                                   int ranks, int cores, dt_plan_model *out);

/* One step's compute when a host's ranks take turns on its cores (share.c):
 * pipeline rank r's chunk c (virtual stage c p + r) takes fwd[c p + r] and
 * bwd[c p + r] seconds of one core per micro-batch; each pipeline rank
 * stands for `copies` threads of the host computing alike (its tp group
 * and data-parallel replicas there, times the threads of each).  fwait,
 * bwait (NULL: none): seconds each such action then waits without a core
 * (collectives on the wire).  *span: the time from the first forward to
 * the last backward; busy[r] (p entries): the time rank r spent running.
 * DT_ERR_NOMEM. */
typedef struct {
    dt_pipe_schedule schedule;
    int p, v, m;
    const double *fwd, *bwd;
    double copies, cores;
    const double *fwait, *bwait;
} dt__plan_share;
dt_status dt__plan_shared_span(const dt__plan_share *sh, double *span, double *busy);

/* The links' members of a links or a hardware file (json.c): "intra" and
 * "inter" objects of latency_us and bandwidth_GBps, ranks per node under
 * `rpn_key`.  DT_ERR_INVALID naming the file and the member. */
struct cJSON;
dt_status dt__plan_links_from(const struct cJSON *root, const char *path, const char *rpn_key, dt_plan_links *out);

#endif
