/* dtrain data parallelism, Horovod style, for people who write their own
 * training loop.  Every rank holds the whole model; gradients are averaged
 * across ranks with bucketed allreduces that start during backward.
 *
 *   dt_comm *world;       dt_comm_init_env(&world);           // rank/size: dt_comm_rank/size
 *   dt_ddp *ddp;          dt_ddp_create(world, params, NULL, &ddp);   // rank 0's weights everywhere
 *   dt_sampler s;         dt_dist_sampler_init(&s, n, seed, world);   // this rank's shard
 *   each step:  zero grads, forward, loss, backward (buckets go out as
 *               gradients become ready), then
 *               dt_ddp_step(ddp, optimizer, lr, clip, &norm);   // waits, averages, updates
 *
 * See examples/ddp_fashion_mnist.c and docs/ddp.md. */
#ifndef DTRAIN_PARALLEL_H
#define DTRAIN_PARALLEL_H

#include <stdbool.h>
#include <stddef.h>

#include "dtrain/comm.h"
#include "dtrain/data.h"
#include "dtrain/nn.h"
#include "dtrain/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_ddp dt_ddp;

typedef enum { DT_DDP_UNCOMPRESSED = 0, DT_DDP_POWERSGD = 1, DT_DDP_TOPK = 2 } dt_ddp_compressor;

typedef struct {
    /* Gradient bytes per bucket (f32); 0 takes DT_BUCKET_MB, or when that is
     * unset 25 MiB or an eighth of the model's gradient bytes, whichever is
     * smaller, but at least 1 MiB (so that a small model still overlaps). */
    size_t bucket_bytes;
    /* DT_F32: no compression.  DT_F16 or DT_BF16: gradients travel in that
     * format, sums are taken in f32 (dt_allreduce_half). */
    dt_dtype wire;
    /* Beyond half precision (docs/ddp.md), wire then DT_F32: DT_DDP_POWERSGD
     * sends each bucket's matrices (2-D and larger parameters, reshaped to
     * shape[0] x the rest) as rank-r factors P = M Q and Q = M^T P (Vogels et
     * al. 2019, PyTorch's powerSGD_hook: two allreduces, P orthogonalised
     * between them, Q warm-started from the last step), the rest of the
     * bucket as f32; DT_DDP_TOPK sends the largest |g| of each bucket, a
     * fraction of it, as (index, value) pairs by allgather.  Both keep what
     * they did not send (error feedback) and add it to the next step's
     * gradients.  The first `compress_start` synchronised steps are sent
     * uncompressed.  Host gradients only. */
    dt_ddp_compressor compressor;
    int powersgd_rank;      /* r >= 1 (0: 4) */
    int64_t compress_start; /* steps before compression starts */
    double topk_fraction;   /* (0, 1] (0: 0.01) */
} dt_ddp_config;

/* Collective over c.  Checks that every rank registered the same parameters
 * (names and shapes, in order: a mismatch names the first differing parameter
 * and the ranks), broadcasts rank 0's values, checks every rank then holds
 * the same bits (a checksum), builds the buckets and hooks the parameters'
 * gradient-ready callback.  cfg may be NULL (defaults).  The communicator and
 * parameters must outlive the returned object. */
dt_status dt_ddp_create(dt_comm *c, dt_params *p, const dt_ddp_config *cfg, dt_ddp **out);

/* Gradient accumulation: with `micro_batches` k > 1 the caller runs k
 * forward/backward passes per step without zeroing gradients in between and
 * calls dt_ddp_set_sync(d, false) before all but the last; communication
 * happens only on the last, and the summed gradients are divided by k so the
 * result is the mean over all k micro-batches of all ranks. */
void dt_ddp_set_accumulation(dt_ddp *d, int micro_batches);
void dt_ddp_set_sync(dt_ddp *d, bool sync);

/* After backward: start the buckets still waiting (parameters that received
 * no gradient this step contribute zeros) and wait for all of them.  The
 * gradients are then the average across ranks.  dt_ddp_step calls it. */
dt_status dt_ddp_finish(dt_ddp *d);

/* Synchronise and update (Horovod's DistributedOptimizer step): without
 * clipping (max_norm <= 0) each bucket is applied as soon as its allreduce
 * completes, so the update overlaps the buckets still on the wire; with
 * clipping every bucket is awaited, the global norm clipped, then the update
 * applied.  *norm (optional) gets the gradient norm before clipping. */
dt_status dt_ddp_step(dt_ddp *d, dt_optimizer *o, float lr, float max_norm, float *norm);

/* Timing of the last synchronised step, in seconds: `comm` is the time the
 * progress thread spent in this step's allreduces, `exposed` the time the
 * caller spent waiting for them (communication not hidden behind backward). */
void dt_ddp_last_timing(const dt_ddp *d, double *comm, double *exposed);
/* Number of buckets, and gradient elements in bucket b (0 <= b < that; b in
 * backward order: bucket 0 is sent first). */
int dt_ddp_buckets(const dt_ddp *d);
int64_t dt_ddp_bucket_numel(const dt_ddp *d, int b);
/* A compressor's state (error feedback, PowerSGD's Q, the steps done): the
 * same state again gives bitwise the same steps.  save writes it to `path`
 * atomically (a file of this rank's own; DT_ERR_INVALID without a
 * compressor).  load reads one back (rank and world as written: this
 * rank's); with_error false keeps only the steps and Q (the same on every
 * rank) and starts the error at zero, for a resume on another number of
 * ranks.  A file of another compressor, rank, size or model is refused
 * naming it. */
dt_status dt_ddp_state_save(const dt_ddp *d, const char *path);
dt_status dt_ddp_state_load(dt_ddp *d, const char *path, bool with_error);
/* The synchronised steps done (compress_start counts them); set by a resume
 * without a state file. */
int64_t dt_ddp_steps(const dt_ddp *d);
void dt_ddp_set_steps(dt_ddp *d, int64_t steps);
/* The error feedback held (the registry's flat layout; NULL without a
 * compressor): what was not sent yet. */
const float *dt_ddp_error(const dt_ddp *d);
/* Unhooks the gradient-ready callback.  Waits for anything still in flight. */
void dt_ddp_destroy(dt_ddp *d);

/* ---- ZeRO in your own loop (see dt_strategy_zero_create for the stages) ----
 *
 *   dt_optimizer *o;  dt_adamw_create(&acfg, dt_zero_shard_numel(model, dt_comm_size(c)), &o);
 *   dt_zero *z;       dt_zero_create(c, model, o, 2, &z);   // rank 0's weights everywhere
 *   each step:  zero grads, forward, loss, backward (stages 2 and 3 move
 *               each block's gradients and parameters from its hooks), then
 *               dt_zero_step(z, lr, clip, &norm);    // reduce, clip, update, gather
 *
 * See examples/zero_fashion_mnist.c.  With k micro-batches per step, call
 * dt_zero_set_accumulation(z, k) and backward k times before the step. */
typedef struct dt_zero dt_zero;
typedef struct dt_strategy dt_strategy;
/* Collective over c; m whole and initialised, o over the shard. */
dt_status dt_zero_create(dt_comm *c, dt_model *m, dt_optimizer *o, int stage, dt_zero **out);
void dt_zero_set_accumulation(dt_zero *z, int micro_batches);
/* After the backward(s): the gradients averaged over the ranks (and the
 * micro-batches) into the shards, clipped to max_norm (> 0; *norm gets the
 * norm before), the update, and for stages 1 and 2 the new parameters
 * gathered into every rank's whole ones.  Collective. */
dt_status dt_zero_step(dt_zero *z, float lr, float max_norm, float *norm);
/* The strategy behind it (for dt_strategy_zero_shard, dt_strategy_memory_bytes). */
dt_strategy *dt_zero_strategy(dt_zero *z);
void dt_zero_destroy(dt_zero *z);

/* ---- strategies: who owns the training step ----
 * A strategy runs one optimizer step: the micro-batch schedule (forward,
 * loss and backward of each micro-batch on its own context, dropout keyed by
 * (seed, step, micro-batch, rank)), the gradient synchronisation and the
 * update.  The trainer only feeds batches and reads the statistics, so data
 * parallel, single-process and the strategies to come (pipeline, ZeRO,
 * tensor parallel, parameter server) are interchangeable behind it.
 *
 *   dt_strategy *s;  dt_strategy_ddp_create(model, opt, world, &cfg, &s);
 *   each step:       dt_strategy_step(s, step, lr, next_batch, user, &stats);
 */
typedef struct dt_strategy dt_strategy;
typedef struct {
    int micro_batches; /* gradient accumulation: >= 1 forward/backward passes per step */
    float grad_clip;   /* global-norm clipping; 0 = off */
    uint64_t seed;     /* dropout keys */
    dt_ddp_config ddp; /* data parallel: buckets and wire format */
    /* The tensor-parallel group of the model's shards (a GPT with tp set;
     * NULL: none): the gradient norm adds every shard once over it
     * (dt_clip_grad_norm_tp).  Data parallelism then runs over the
     * communicator passed to the strategy, the mesh's dp group. */
    dt_comm *tp;
} dt_strategy_config;
/* One micro-batch: the model's input and one target per output row. */
typedef struct {
    dt_tensor x;
    const int32_t *targets;
    int64_t ntargets; /* how many targets (one per output row); a pipeline needs it, to keep a copy */
    /* x's data and the targets in the model's device memory already (a
     * prefetched batch's x_dev and y_dev), or NULL: the step copies them in */
    const float *x_dev;
    const int32_t *targets_dev;
} dt_micro_batch;
/* Called micro_batches times per step, in order, for the next micro-batch;
 * the data must stay valid until the next call. */
typedef dt_status (*dt_next_batch_fn)(void *user, dt_micro_batch *mb);
typedef struct {
    float loss;      /* mean over this rank's micro-batches */
    float grad_norm; /* before clipping */
    double comm_s;   /* time in gradient communication */
    double exposed_s; /* of which the step waited for (not hidden behind backward) */
    size_t activation_bytes; /* the most activation memory held at once (one micro-batch's, or a pipeline
                                stage's micro-batches in flight together) */
    int micro_in_flight;     /* the most micro-batches whose activations were held at once (an
                                interleaved pipeline counts each micro-batch once per chunk) */
    double busy_s;           /* time computing (forward, loss, backward), not waiting for messages */
} dt_step_stats;

/* No communication: clipping and the update on this process's gradients. */
dt_status dt_strategy_single_create(dt_model *m, dt_optimizer *o, const dt_strategy_config *cfg, dt_strategy **out);
/* Data parallel over c (dt_ddp: rank 0's weights everywhere, bucketed
 * allreduce overlapping backward).  Collective over c. */
dt_status dt_strategy_ddp_create(dt_model *m, dt_optimizer *o, dt_comm *c, const dt_strategy_config *cfg,
                                 dt_strategy **out);
/* ZeRO (DeepSpeed's optimizer sharding) over the data-parallel group c of N
 * ranks: each rank keeps 1/N of the optimizer state (stage 1: each block's
 * gradients reduce-scattered in place as the last micro-batch's backward
 * of the block ends), also of the
 * gradients (stage 2: each block's gradients reduce-scattered as its
 * backward ends, overlapping the blocks still running, so no whole gradient
 * is held) and of the parameters (stage 3: each block's parameters
 * allgathered before its forward and again before its backward, the next
 * block's gather started while the current one computes, freed after).
 * Stages 1 and 2 gather the updated slices while the update goes on and
 * the next forward runs (see dt_strategy_step).  The strategy communicates
 * on a communicator it splits from c, so the caller's own calls on c do not
 * wait behind it.
 * Stage 0 is data parallelism (dt_strategy_ddp_create).  The shard is a
 * slice of every block's parameters (dt_zero_shard_numel elements): make
 * the optimizer for that many, with dt_zero_decay_groups for weight decay.
 * m is a whole model with its own storage, initialised; rank 0's values are
 * broadcast, then stage 2 gives up the flat gradient buffer and stage 3 the
 * parameters too (dt_params_drop_storage) and installs its block hooks.
 * Losses, gradients and updates equal data parallelism's (to rounding).
 * Collective over c. */
dt_status dt_strategy_zero_create(dt_model *m, dt_optimizer *o, dt_comm *c, int stage, const dt_strategy_config *cfg,
                                  dt_strategy **out);
/* Elements of a rank's ZeRO shard of m over nranks ranks (-1 on error). */
int64_t dt_zero_shard_numel(dt_model *m, int nranks);
/* Weight-decay groups (see dt_decay_groups) over rank's shard. */
dt_status dt_zero_decay_groups(dt_model *m, int nranks, int rank, const char *patterns, float weight_decay,
                               dt_optim_group **out, int *count);
/* Copy rank's slices of a whole flat array laid out like m's registry
 * (values, or an optimizer state buffer) into its shard of
 * dt_zero_shard_numel elements (padding zeroed), or back (put): how an
 * unsplit checkpoint's state is cut for any number of ranks, and ZeRO-3's
 * values put together for model.safetensors.  (Sharded checkpoints cut
 * by their manifest's unit table: dt_zero_units, dt_ckpt_load_shard.) */
dt_status dt_zero_shard_take(dt_model *m, int nranks, int rank, const float *whole, float *shard);
dt_status dt_zero_shard_put(dt_model *m, int nranks, int rank, const float *shard, float *whole);
/* Every rank's shard of its ZeRO optimizer's state (`shard`, over dp) put
 * together into `whole` (an optimizer of the same kind for m's
 * dt_params_numel elements) on dp rank 0 (`whole` unused elsewhere), its
 * step count too: a mesh's checkpoint then gathers it over tp and pp as
 * any other.  The way back: dt_zero_shard_take on each state buffer.
 * Collective over dp. */
dt_status dt_zero_state_gather(dt_model *m, dt_optimizer *shard, dt_comm *dp, dt_optimizer *whole);
/* ZeRO's units of m, in shard order: each one's range of the flat buffer
 * (offsets[i], numels[i]; up to max of them filled).  Returns how many
 * there are (-1 on error).  A rank's shard over N ranks is slice r,
 * ceil(numel / N) long, of each: what a sharded checkpoint's manifest
 * records. */
int dt_zero_units(dt_model *m, int64_t *offsets, int64_t *numels, int max);
/* Check a sharded checkpoint's manifest against m's ZeRO units (a
 * manifest without sharding passes); DT_ERR_INVALID naming the unit. */
struct dt_ckpt_manifest;
dt_status dt_zero_check_sharding(const struct dt_ckpt_manifest *man, dt_model *m);
/* A ZeRO-3 strategy's shard of the values (the master copy its optimizer
 * updates, dt_zero_shard_numel elements: see dt_zero_shard_take for the
 * layout) and its length; NULL for stages 1 and 2, which update their
 * slices in the registry's whole values, and for another strategy.  On a
 * device (dt_model_to_device) the shard is the device's memory: read it
 * with dt_strategy_zero_shard_read. */
float *dt_strategy_zero_shard(dt_strategy *s, int64_t *numel);
/* Elements [offset, offset + n) of a ZeRO-3 strategy's shard of the values
 * into out (host memory); with the shard on disk (dt_strategy_zero_offload)
 * read straight from the file, the rest staying there (a checkpoint written
 * piece by piece); on a device, that range downloaded.  Refused for stages
 * 1 and 2 and another strategy. */
dt_status dt_strategy_zero_shard_read(dt_strategy *s, int64_t offset, int64_t n, float *out);
/* ZeRO-3's parameter shard kept in a file in dir (NULL or "": /var/tmp),
 * unlinked at once, instead of memory (ZeRO-Infinity's parameter offload
 * to NVMe, here to the local disk): each gather reads this rank's slice of
 * the block, and the update streams the shard through an I/O thread in
 * windows of 2^20 elements, two in memory, the next read and the last
 * written while the optimizer computes (dt_optimizer_offload does the same
 * for the optimizer state).  dt_strategy_zero_shard then returns a copy
 * read from the file, valid until the next step.  Stages 1 and 2, which
 * hold the whole parameters, are refused, and so is a shard on a device.
 * Results are bitwise those without. */
dt_status dt_strategy_zero_offload(dt_strategy *s, const char *dir);
/* Bytes the parameter offload read and wrote so far (0 without it). */
void dt_strategy_zero_offload_io(const dt_strategy *s, uint64_t *read, uint64_t *written);

/* One optimizer step at learning rate lr.  ZeRO stages 1 and 2 return with
 * the updated parameters still being gathered: the next forward of each
 * block waits for its own; call dt_strategy_sync before reading the
 * parameters otherwise (a checkpoint, a comparison). */
dt_status dt_strategy_step(dt_strategy *s, int64_t step, float lr, dt_next_batch_fn next, void *user,
                           dt_step_stats *out);
/* Wait for the communication the last step left in flight; then the
 * model's parameters are current on every rank.  Collective only in that
 * it waits for collectives the ranks started together. */
dt_status dt_strategy_sync(dt_strategy *s);
const char *dt_strategy_name(const dt_strategy *s);
/* Bytes the strategy itself holds beyond the model's registry and the
 * optimizer: ZeRO's shard and, at their most so far, its communication
 * buffers, *buffers (optional) gets the latter (0 for data parallelism,
 * whose buckets are the gradients). */
size_t dt_strategy_memory_bytes(const dt_strategy *s, size_t *buffers);
void dt_strategy_destroy(dt_strategy *s);

/* One optimizer step over a whole registry's flat buffers (o holds state
 * for dt_params_numel(p) elements): gradients scaled by grad_scale (1 /
 * micro-batches), clipped to max_norm (0: off; *norm gets the norm before
 * clipping), then updated.  Row-sparse parameters for which
 * dt_optimizer_rows_exact holds are scaled, measured and updated at their
 * touched rows only (dt_param_touched_rows); everything else whole.  The
 * result is dt_optimizer_step's over the whole buffer (untouched rows have
 * zero gradients), up to the norm's summation order; without row-sparse
 * parameters it is that call, to the bit.  The single-process strategy
 * updates through it. */
dt_status dt_params_optimizer_step(dt_params *p, dt_optimizer *o, float lr, float grad_scale, float max_norm,
                                   float *norm);

/* ---- the tensor-parallel group over a communicator ---- */
/* The group the tensor-parallel layers, the vocabulary-parallel loss and
 * dt_gpt_config.tp use (dt_tp_group, dtrain/nn.h) over the communicator c:
 * its rank and size, and its exchanges as dt_allreduce, dt_allgather and
 * dt_reduce_scatter over c with the same arguments.  The group holds c, not
 * a copy: c must outlive every layer and model given it.  c NULL: the zeroed
 * group (no tensor parallelism). */
dt_tp_group dt_tp_group_of_comm(dt_comm *c);

/* ---- gradients over a group of ranks that each hold part of the model ---- */
/* Clip to a global norm: the sum of squares of this rank's n gradients is
 * summed over `group` (NULL: this rank alone), so tensor-parallel shards,
 * pipeline stages and ZeRO shards each count their own elements once (a
 * replicated tensor must be passed by one rank of its replicas only).  Scales
 * grad as torch's clip_grad_norm_ when the norm exceeds max_norm (> 0);
 * *norm (optional) gets the norm before clipping.  Collective over group. */
dt_status dt_clip_grad_norm_group(float *grad, int64_t n, float max_norm, dt_comm *group, float *norm);
/* The same over a registry of tensor-parallel shards and replicas
 * (dt_param_info: parts > 1 for a shard): the global norm counts each
 * shard's elements once over `tp` and each replicated tensor once (the
 * replicas hold the same gradient); clips every gradient by it when above
 * max_norm (> 0).  Collective over tp (NULL: this rank alone). */
dt_status dt_clip_grad_norm_tp(dt_params *p, float max_norm, dt_comm *tp, float *norm);
/* The same over a pipeline stage's model m (its chunks' parameters, tensor-
 * parallel shards and replicas as above): summed over tp, then over
 * `stages`, the pipeline group; a tied parameter's copy counts only on the
 * stage that holds its first user.  Collective over tp and stages (either
 * NULL: none). */
dt_status dt_clip_grad_norm_stages(dt_model *m, float max_norm, dt_comm *tp, dt_comm *stages, float *norm);
/* Sum the gradient of every tp_partial parameter of p over tp (sequence
 * parallelism: each rank saw its slice of the positions).  Collective over
 * tp; nothing when none is marked or tp is NULL. */
dt_status dt_params_reduce_tp_partial(dt_params *p, dt_comm *tp);
/* Sum the gradients of m's shared (tied) parameters over `stages`, the
 * communicator of the pipeline stages that hold a copy (GPT's wte: the first
 * and the last stage), so that every copy takes the same update.  Collective
 * over stages. */
dt_status dt_model_reduce_shared(dt_model *m, dt_comm *stages);

/* ---- weight-decay groups from parameter names ---- */
/* The default no-decay patterns: embedding tables. */
extern const char *const DT_NO_DECAY_DEFAULT;
/* True when a parameter takes no weight decay: one-dimensional (biases,
 * LayerNorm weights) or its name matching one of the comma-separated glob
 * patterns (NULL: DT_NO_DECAY_DEFAULT).  patterns "none" decays everything
 * (dtrain before parameter groups). */
bool dt_param_no_decay(const dt_param_info *pi, const char *patterns);
/* Optimizer groups for the shard [shard_offset, shard_offset + shard_numel)
 * of p's flat buffer (the whole model: 0 and dt_params_numel): weight_decay
 * where decay applies, 0 elsewhere, neighbours merged.  *out is malloc'd. */
dt_status dt_decay_groups(const dt_params *p, const char *patterns, float weight_decay, int64_t shard_offset,
                          int64_t shard_numel, dt_optim_group **out, int *count);

/* A sampler over `size` samples for this rank of c (dt_sampler_init with the
 * rank and world size of c; shuffled, drop_last). */
dt_status dt_dist_sampler_init(dt_sampler *s, int64_t size, uint64_t seed, const dt_comm *c);

/* ---- straggler detection (docs/observability.md) ----
 * For lockstep training (data and tensor parallel, ZeRO): every rank of c
 * calls dt_straggler_step once per step with the same step numbers.  Every
 * DT_STRAGGLER_EVERY steps (default 10; 0: off) the ranks allgather their
 * mean step time and time waiting in collectives; a rank whose time outside
 * collectives is above DT_STRAGGLER_RATIO (1.5) times the median of the
 * other ranks', and 5 ms or more above it, at DT_STRAGGLER_CHECKS (3)
 * checks in a row is named by rank 0 in one line on stderr (host, rank, its
 * time against the median). */
typedef struct dt_straggler dt_straggler;
/* Collective over c (gathers host names).  *out NULL (DT_OK) when off or
 * with one rank; DT_ERR_INVALID for a bad knob. */
dt_status dt_straggler_create(dt_comm *c, dt_straggler **out);
/* One step's wall time and its time waiting in collectives (for DDP,
 * dt_step_stats' exposed_s).  *named (optional): the rank named at this
 * step, else -1.  NULL s: nothing. */
dt_status dt_straggler_step(dt_straggler *s, int64_t step, double step_s, double wait_s, int *named);
void dt_straggler_destroy(dt_straggler *s);

#ifdef __cplusplus
}
#endif
#endif
