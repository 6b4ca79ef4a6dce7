/* dtrain pipeline parallelism: a model's blocks cut into stages held by the
 * ranks of a pipeline group, the batch cut into micro-batches that flow
 * through them.  Three schedules:
 *
 *   GPipe        every micro-batch's forward, then every backward; a stage
 *                holds the activations of all m micro-batches at once.
 *   1F1B         (PipeDream-Flush) after p - r - 1 warm-up forwards, stage r
 *                alternates one forward and one backward; it holds at most
 *                p - r micro-batches.  The same bubble as GPipe.
 *   interleaved  (Megatron-LM) each rank holds v chunks of blocks, virtual
 *                stages r, r + p, ..., r + (v-1)p of p*v; the bubble shrinks
 *                by v for v times the point-to-point messages.
 *
 * With uniform stages taking t_f and t_b per micro-batch the idle fraction
 * of each stage is (p-1) / (m+p-1) for GPipe and 1F1B and (p-1) / (v*m+p-1)
 * interleaved (docs/parallelism.md has the timelines and measurements).
 *
 *   int stage = dt_comm_rank(pp);
 *   dt_model *m;  dt_pipeline_stage_create(desc, p, v, stage, &m);
 *   dt_pipeline_config pc = {DT_PIPE_1F1B, 1, pp, dp};
 *   dt_strategy *s;  dt_strategy_pipeline_create(m, opt, &pc, &cfg, &s);
 *   each step:  dt_strategy_step(s, step, lr, next, user, &stats);
 *
 * Every rank of the pipeline group calls `next` for every micro-batch (they
 * read the same data: the first stage uses its input, the last its
 * targets).  Activations and their gradients travel with nonblocking
 * point-to-point messages posted ahead of the compute that needs them;
 * their shapes are agreed once (on the first micro-batch, again only when
 * the input's shape changes), not sent with every message. */
#ifndef DTRAIN_PIPELINE_H
#define DTRAIN_PIPELINE_H

#include <stdbool.h>

#include "dtrain/parallel.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_PIPE_GPIPE = 1, DT_PIPE_1F1B = 2, DT_PIPE_INTERLEAVED = 3 } dt_pipe_schedule;

/* "gpipe", "1f1b", "interleaved" (DT_ERR_INVALID naming the choices). */
dt_status dt_pipe_schedule_parse(const char *name, dt_pipe_schedule *out);
const char *dt_pipe_schedule_name(dt_pipe_schedule s);

/* Cut d's blocks into `parts` contiguous ranges, part k = [bounds[k],
 * bounds[k+1]) (bounds has parts + 1 entries), minimising the most costly
 * part by the blocks' cost hints: forward FLOPs (dt_block_info.flops; a
 * block without FLOPs costs its parameter count).  More parts than blocks
 * is refused naming both numbers. */
dt_status dt_pipeline_partition(const dt_model_desc *d, int parts, int *bounds);

/* This rank's share of a p-stage pipeline with v virtual stages per rank
 * (v = 1 unless interleaved): the chunks of virtual stages rank, rank + p,
 * ..., of the p*v parts of dt_pipeline_partition, in one model. */
dt_status dt_pipeline_stage_create(const dt_model_desc *d, int p, int v, int rank, dt_model **out);

/* One action of a schedule: forward or backward of micro-batch `micro`
 * through this rank's chunk `chunk`. */
typedef struct {
    char kind; /* 'F' or 'B' */
    int micro, chunk;
} dt_pipe_action;

/* The order in which pipeline rank `rank` of p runs m micro-batches (v
 * chunks each when interleaved, which needs m divisible by p).  *out is
 * malloc'd, 2 * m * v actions. */
dt_status dt_pipe_schedule_build(dt_pipe_schedule s, int p, int v, int rank, int m, dt_pipe_action **out, int *n);

typedef struct {
    dt_pipe_schedule schedule;
    int virtual_stages; /* v: 2 or more for interleaved; 1 otherwise */
    dt_comm *pp;        /* the pipeline group: a rank's stage is its rank in it */
    dt_comm *dp;        /* data parallelism over the replicas of this stage (NULL: none) */
    /* 0: data parallelism's allreduce over dp; 1 or 2: ZeRO over dp, the
     * stage's optimizer state (1) sharded over the replicas, its optimizer
     * made for dt_zero_shard_numel(m, |dp|) elements.  The gradients are
     * reduce-scattered after the schedule, once the tied copies are summed,
     * so stage 2 holds them whole through the schedule, as stage 1. */
    int zero_stage;
} dt_pipeline_config;

/* The pipeline as a strategy over m (made by dt_pipeline_stage_create with
 * the same p, v and this rank's place in pc->pp).  cfg->micro_batches is
 * the number of micro-batches per step; the gradient is their mean (and,
 * over pc->dp, the replicas'), the tied parameters' copies are summed
 * between the stages that hold them, the global norm counts every
 * parameter once over cfg->tp and the stages, and every rank of the
 * pipeline reports the loss (computed by the last stage).  Collective over
 * pp and dp. */
dt_status dt_strategy_pipeline_create(dt_model *m, dt_optimizer *o, const dt_pipeline_config *pc,
                                      const dt_strategy_config *cfg, dt_strategy **out);

/* What this rank did during the last step, one entry per action in the
 * order run: when it began (waiting for its input), when the input was
 * there, when it ended, on CLOCK_MONOTONIC in seconds (comparable between
 * the ranks of one host).  NULL / 0 for a strategy that is not a pipeline. */
typedef struct {
    dt_pipe_action action;
    double begin_s, ready_s, end_s;
} dt_pipe_event;
int dt_strategy_pipeline_timeline(const dt_strategy *s, const dt_pipe_event **out);

#ifdef __cplusplus
}
#endif
#endif
