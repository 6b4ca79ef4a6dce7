/* dtrain planning: predict a layout's step time and memory from measured
 * costs, and search the layouts of a world for the fastest that fits.
 *
 *   dt_plan_inputs in;     // the model's blocks, their measured costs, the links, the memory limit
 *   dt_plan_profile_model(desc, &opts, &in.model);           // or dt_plan_model_gpt(...) for a projection
 *   dt_plan_links_probe(world, &in.links);                    // or dt_plan_links_read(file, &in.links)
 *   dt_plan_estimate e;    dt_plan_layout(&in, &layout, &e);  // one layout: time split by part, memory
 *   dt_plan_result r;      dt_plan_search(&in, &opts, &r);     // the best that fit, and why the others do not
 *
 * The model of time and memory, its assumptions and its validation are in
 * docs/planner.md.  Conventions as in comm.h. */
#ifndef DTRAIN_PLAN_H
#define DTRAIN_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/base.h"
#include "dtrain/comm.h"
#include "dtrain/layout.h"
#include "dtrain/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- measured inputs ---- */

/* One block of the model (in model order) as the planner sees it: its
 * parameters and, per sample of the micro-batch, its times and activation
 * bytes at the thread count the job uses.  A block repeated (a GPT's
 * transformer blocks) appears once per instance; the profiler measures one
 * instance per distinct (kind, shape) and copies the figures. */
typedef struct {
    char kind[32];          /* dt_block_info.kind: "gpt-block", "embedding", "head", ... */
    int64_t params;         /* parameters (elements) */
    double fwd_s, bwd_s;    /* seconds per sample: forward, backward (without recompute) */
    double act_bytes;       /* activation bytes held per sample between its forward and backward */
    double out_bytes;       /* bytes per sample of its output (what a pipeline sends to the next stage) */
    /* tensor parallelism: how the block splits over tp ranks (0: it does not; replicated) and the bytes per
     * sample it exchanges per tp collective in forward and backward (Megatron: 2 allreduces of the
     * activations per transformer block each way) */
    int tp_splittable;
    double tp_bytes;        /* bytes per sample per collective */
    int tp_collectives;     /* collectives per pass (forward; backward the same) */
    double flops;           /* dt_block_info.flops: the cost hint dt_pipeline_partition cuts stages by (0: params) */
    /* of act_bytes, what a tensor-parallel split keeps whole on every rank unless sequence parallelism cuts it
     * too (Megatron's transformer block: the layer norms' and dropouts' 10 s h of 34 s h + 5 a s^2) */
    double act_tp_whole_bytes;
    /* seconds per micro-batch besides fwd_s and bwd_s per sample (0: none): a micro-batch of b samples takes
     * fwd_fixed_s + b x fwd_s forward.  The profiler fits the two to runs of 1 and of `samples` samples (what
     * a small micro-batch costs beyond its samples' share: weights read once per micro-batch) */
    double fwd_fixed_s, bwd_fixed_s;
} dt_plan_block;

typedef struct {
    dt_plan_block *blocks; /* owned: dt_plan_model_free */
    int nblocks;
    int64_t samples;       /* the micro-batch samples the figures were measured at (informative) */
    int64_t tokens_per_sample; /* positions per sample (1 for an mlp) */
    int threads;           /* compute threads the figures hold for */
    double optimizer_s_per_param; /* the optimizer's update, seconds per element */
    int optimizer_state_floats;   /* AdamW 2, SGD with momentum and Adagrad 1, plain SGD 0 */
    /* How a host's ranks share its cores, measured for `shared_ranks` ranks of `threads` threads at once
     * (dt_plan_profile_opts.ranks; 0: not measured, the planner then takes contention 1 and no sync cost):
     * contention, the slowdown of compute that sharing the cores does not explain (a copy's time among
     * shared_ranks copies at once / (its time alone x max(1, shared_ranks x threads / cores))): the caches and
     * the memory bandwidth shared; sync_s[k], the seconds a barrier among a group of 2^(k+1) ranks costs beyond
     * the compute between barriers while all shared_ranks compute (0 beyond the groups measured). */
    int shared_ranks;
    double contention;
    double sync_s[6];
} dt_plan_model;

/* A link class: a message of n bytes takes latency_s + n / bandwidth_Bps.
 * The inter-host class's bandwidth is what one rank gets while every rank of
 * its host sends across hosts at once (a host's NIC shared by its ranks:
 * the NIC's bandwidth / ranks_per_node; a NIC per GPU: that NIC's). */
typedef struct {
    double latency_s, bandwidth_Bps;
} dt_plan_link;

typedef struct {
    dt_plan_link intra; /* between ranks of one host (shared memory) */
    dt_plan_link inter; /* between hosts */
    int ranks_per_node; /* ranks on one host (the world fills hosts in rank order) */
    /* Ranks that take turns on one machine's cores: 0 (or ranks_per_node) when every host is a machine of its
     * own; more when several hosts are one machine (network namespaces or containers of one box: the same
     * boot id), whose ranks then share dt_plan_inputs.cores_per_node cores across the hosts. */
    int ranks_per_machine;
    /* CPU seconds a byte sent between hosts costs, the sending and the receiving end together (the TCP
     * stack's copies and protocol work; 0: not known, taken as free).  When every core of a machine computes,
     * the data-parallel traffic's share of it lengthens the step (docs/planner.md, "Ranks sharing cores"). */
    double inter_cpu_s_per_byte;
} dt_plan_links;

typedef struct {
    dt_plan_model model;
    dt_plan_links links;
    int world;             /* ranks (servers included when a layout has them) */
    int64_t batch_size;    /* samples per micro-batch... per rank's batch (the trainer's batch_size) */
    double memory_limit;   /* model states + activations allowed per rank, bytes (0: none) */
    double flops_per_s;    /* per rank, for a projection's utilisation (0: unknown) */
    double model_flops_per_sample; /* 6 x parameters x tokens per sample (0: unknown) */
    /* > 0: the global batch (dp x batch_size x grad_accumulation) held fixed: each layout's batch_size is
     * global_batch / (dp x grad_accumulation), layouts it does not divide are refused; 0: batch_size as given */
    int64_t global_batch;
    double compute_efficiency;   /* projections: the fraction of flops_per_s the blocks reach (0: 1) */
    double memory_bandwidth_Bps; /* projections: device memory bandwidth, for the optimizer's time (0: unknown) */
    /* The cores a host's ranks share, or a machine's when links.ranks_per_machine says several hosts are one
     * machine (0: unknown, every rank has its own).  When those ranks x model.threads exceed them, the ranks
     * take turns: docs/planner.md, "Ranks sharing cores". */
    int cores_per_node;
} dt_plan_inputs;

/* Profile a model's blocks on this machine with this process's compute
 * threads: each distinct block (kind and shape) run forward and backward on
 * a micro-batch of `samples` (repeats times, the median kept), its
 * activation bytes from the arena's peak; the optimizer timed over a
 * buffer.  d: the whole model's description (tp NULL). */
typedef struct {
    int64_t samples;   /* micro-batch samples to time at (>= 1) */
    int repeats;       /* timed repetitions (>= 1); one warm-up before */
    const char *optimizer; /* "adamw", "sgd" or "adagrad" */
    /* > 1: the ranks of a host that will compute at once: the costliest block is also run as ranks x threads
     * copies at once, one compute thread each, to measure dt_plan_model's contention and sync_s (seconds;
     * more than 16 copies, or <= 1 rank: not measured) */
    int ranks;
} dt_plan_profile_opts;
dt_status dt_plan_profile_model(const dt_model_desc *d, const dt_plan_profile_opts *o, dt_plan_model *out);
/* Read and write a profile (JSON): cached per machine by the caller. */
dt_status dt_plan_model_read(const char *path, dt_plan_model *out);
dt_status dt_plan_model_write(const char *path, const dt_plan_model *m);
void dt_plan_model_free(dt_plan_model *m);

/* Links from a JSON file {"intra": {"latency_us": .., "bandwidth_GBps": ..}, "inter": {...},
 * "ranks_per_node": N, optionally "ranks_per_machine": M}, or measured over `c` (collective: ping-pong and a
 * streaming exchange between rank pairs on one host and across hosts, when
 * there are such pairs; the classes it cannot measure keep their defaults;
 * ranks_per_machine: the ranks whose boot id is rank 0's). */
dt_status dt_plan_links_read(const char *path, dt_plan_links *out);
dt_status dt_plan_links_probe(dt_comm *c, dt_plan_links *out);

/* A hardware description for projections (JSON): per-device FLOP/s and
 * memory, devices per node, link bandwidths and latencies per level.  It
 * fills in.links, in.flops_per_s and the memory limit; the model's block
 * times then come from FLOPs / (FLOP/s x an efficiency the file gives). */
dt_status dt_plan_hardware_read(const char *path, dt_plan_inputs *in);
/* The GPT shapes built in for projections: "gpt3-1.3b", "gpt3-13b",
 * "gpt3-175b" (Brown et al. 2020: layers, d_model, heads, context 2048,
 * vocab 50257); block costs from their FLOPs at in->flops_per_s. */
dt_status dt_plan_model_gpt(const char *name, const dt_plan_inputs *in, int64_t micro_batch, dt_plan_model *out);

/* ---- the cost model ---- */

typedef struct {
    dt_layout layout;
    double step_s;      /* predicted step time: the sum of the parts below, less the overlap */
    double compute_s;   /* forward and backward of this rank's stage, all micro-batches */
    double bubble_s;    /* the pipeline's idle time: (p-1)/(m+p-1) of the pipelined part, /v interleaved */
    double tp_s;        /* tensor-parallel collectives */
    double pp_s;        /* sends between stages not hidden behind compute */
    double dp_s;        /* gradient synchronisation (DDP allreduce, ZeRO reduce-scatter + allgather) not hidden */
    double ps_s;        /* the parameter server's pushes and pulls */
    double recompute_s; /* forwards run again */
    double optimizer_s; /* the update */
    double memory_bytes; /* the peak per rank: model states (dt_layout_memory_plan's formulas) + activations */
    double params_bytes, grads_bytes, optimizer_bytes, buffers_bytes, activation_bytes;
    double samples_per_s; /* the global batch / step_s */
    double mfu;           /* model FLOPs utilisation (0 when flops_per_s is unknown) */
    double core_share;    /* compute_s over its time with a core per thread (> 1: the host's ranks take turns) */
    bool fits;            /* memory_bytes <= the limit (or no limit) */
} dt_plan_estimate;

/* Predict one layout (dp resolved against in->world; a layout that cannot
 * run there is refused by dt_layout_check's message). */
dt_status dt_plan_layout(const dt_plan_inputs *in, const dt_layout *l, dt_plan_estimate *out);

/* ---- the search ---- */

typedef struct {
    int top;              /* how many of the best to return (>= 1) */
    int nodes;            /* hosts (0: world / ranks_per_node) */
    bool allow_servers;   /* consider parameter-server layouts */
    bool allow_recompute; /* consider recompute blocks / all */
} dt_plan_search_opts;

typedef struct {
    dt_plan_estimate *best; /* top, fastest first, every one fitting (owned: dt_plan_result_free) */
    int nbest;
    int considered, valid, fitting;
    /* Per family the search ruled out ("pp > 1", "tp 8", "zero_stage 0", ...), why: the first reason seen */
    char **rejected;
    int nrejected;
    double search_s; /* how long the search took */
} dt_plan_result;
/* Every valid layout of in->world for a small world; for a large one a
 * pruned search (docs/planner.md says which).  DT_ERR_INVALID naming why
 * when no layout fits; *out then still holds the counts and `rejected`
 * (free it with dt_plan_result_free either way). */
dt_status dt_plan_search(const dt_plan_inputs *in, const dt_plan_search_opts *o, dt_plan_result *out);
void dt_plan_result_free(dt_plan_result *r);
/* One estimate as JSON (malloc'd), for scripts. */
char *dt_plan_estimate_json(const dt_plan_estimate *e);

#ifdef __cplusplus
}
#endif
#endif
