/* The data-parallel half of a strategy over a model part (a pipeline
 * stage of tensor-parallel shards): after the part's micro-batches ran
 * (the pipeline's schedule), how its gradients meet those of its replicas
 * over the dp group and how the update is made.  The pipeline is written
 * once over this seam; two entries fill it:
 *
 *   allreduce   data parallelism (dt_ddp: the buckets start during the last
 *               backward; none when dp has one rank): the mean, then the
 *               part's fix-ups (sequence parallel's partial sums over tp,
 *               the tied copies summed over the stages), the norm over tp
 *               and the stages, the whole update on every replica;
 *   zero        ZeRO stage 1 or 2 over dp (zero/strategy.c, deferred): the
 *               tied copies summed over the stages first (the stages' ZeRO
 *               units differ, so that sum cannot follow the
 *               reduce-scatter), then ZeRO's update: each unit
 *               reduce-scattered over dp, the partial sums over tp on the
 *               slices, the norm over dp, tp and the stages, the sharded
 *               update, the slices allgathered (waited for by the next
 *               forward of each block).
 *
 * The tensor-parallel common loop needs no seam of its own: ddp's update
 * and ZeRO's both take cfg->tp.  A third entry (a parameter server per
 * stage, a compressed allreduce) fills the same three calls. */
#ifndef DT_PARALLEL_COMMON_DP_SYNC_H
#define DT_PARALLEL_COMMON_DP_SYNC_H

#include <stdbool.h>

#include "parallel/common/strategy.h"

typedef struct {
    const char *name;
    /* Before each backward of the step: whether it is this rank's last
     * (NULL: nothing happens during backward). */
    void (*before_backward)(void *impl, bool last);
    /* After the schedule, the micro-batches' gradients summed in part's
     * registry: synchronise over dp, the tied copies over `tied` (NULL:
     * none), clip by the norm over every element of the model (tp:
     * part->cfg.tp; the stages: `stages`), update.  *comm, *exposed: the
     * dp communication's time and the part the step waited for. */
    dt_status (*update)(void *impl, dt_strategy *part, dt_comm *stages, dt_comm *tied, float lr, float *norm,
                        double *comm, double *exposed);
    /* Wait for what the update left in flight (NULL: nothing). */
    dt_status (*sync)(void *impl);
    /* Bytes held beyond the model and the optimizer, *buffers of them for
     * communication (NULL: none). */
    size_t (*memory)(const void *impl, size_t *buffers);
    void (*destroy)(void *impl);
} dt__dp_sync_ops;

typedef struct {
    const dt__dp_sync_ops *ops;
    void *impl;
} dt__dp_sync;

/* Data parallelism's allreduce over dp (NULL or one rank: none, the
 * micro-batches' mean alone).  Collective over dp. */
dt_status dt__dp_sync_allreduce(dt_model *m, dt_comm *dp, const dt_strategy_config *cfg, dt__dp_sync *out);
/* ZeRO stage 1 or 2 over dp for the part m, whose optimizer o holds its
 * shard (dt_zero_shard_numel(m, |dp|)); `stages` for the norm.  Rank 0's
 * values broadcast over dp.  Collective over dp. */
dt_status dt__dp_sync_zero(dt_model *m, dt_optimizer *o, dt_comm *dp, int stage, dt_comm *stages,
                           const dt_strategy_config *cfg, dt__dp_sync *out);
void dt__dp_sync_destroy(dt__dp_sync *d);

#endif
