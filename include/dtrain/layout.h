/* dtrain layouts: how a training run is spread over its ranks, as one
 * value.  A layout names the data-parallel, tensor-parallel and pipeline
 * widths, ZeRO's stage, the parameter servers, the micro-batch schedule and
 * the memory and precision choices; with a model recipe and a world it is all
 * dt_strategy_create needs to build a run (mesh, this rank's model or stage,
 * storage, optimizer, the composed strategy).
 *
 *   dt_layout l;   dt_layout_default(&l);
 *   dt_layout_set(&l, "tp", "2");  dt_layout_set(&l, "zero_stage", "1");    // the trainer's --set keys
 *   dt_layout_check(&l, world_size);        // every conflict named, with its numbers
 *   char *json = dt_layout_to_json(&l);     // {"dp": 0, "tp": 2, ...}; dt_layout_from_json reads it back
 *
 * Key names are the trainer's (docs/dtrain.md); docs/layout.md lists them.
 * Conventions as in comm.h: every call that can fail returns dt_status with
 * the reason in dt_last_error(). */
#ifndef DTRAIN_LAYOUT_H
#define DTRAIN_LAYOUT_H

#include <stdbool.h>
#include <stddef.h>

#include "dtrain/base.h"
#include "dtrain/ckpt.h"
#include "dtrain/mesh.h"
#include "dtrain/pipeline.h"
#include "dtrain/ps.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_RECOMPUTE_OFF = 0, DT_RECOMPUTE_BLOCKS = 1, DT_RECOMPUTE_ALL = 2 } dt_recompute;
typedef enum { DT_OFFLOAD_NONE = 0, DT_OFFLOAD_DISK = 1 } dt_offload;

typedef struct {
    /* ---- the mesh: world = servers + dp x pp x tp (tp innermost, then pp) ---- */
    int dp; /* data-parallel replicas; 0: whatever the world leaves (workers / (pp x tp)) */
    int tp; /* tensor-parallel ranks per group (>= 1) */
    int pp; /* pipeline stages (>= 1) */
    /* ---- who holds the model states ---- */
    int zero_stage;   /* 0 off; 1 optimizer state, 2 also gradients, 3 also parameters, sharded over dp */
    int servers;      /* parameter servers: the world's last `servers` ranks (0: allreduce data parallelism) */
    dt_ps_sync sync;  /* servers > 0: bsp, asp, ssp */
    int staleness;    /* sync ssp: steps a worker may run ahead of the slowest */
    /* ---- the step's schedule ---- */
    int micro_batches;         /* pieces each rank's batch is cut into (a pipeline fills its stages with them) */
    int grad_accumulation;     /* batches per optimizer step, each cut into micro_batches */
    dt_pipe_schedule schedule; /* pp > 1: gpipe, 1f1b, interleaved */
    int virtual_stages;        /* schedule interleaved: chunks per pipeline rank (>= 2) */
    bool sequence_parallel;    /* tp > 1 (gpt): 1/tp of the positions between the split regions */
    int tp_copies;             /* tp > 1 (gpt): each transformer block's micro-batch rows in copies that overlap its tp exchanges (1: off) */
    /* ---- memory and precision ---- */
    dt_recompute recompute; /* activation recomputation: off, every block (blocks), or all */
    dt_offload offload;     /* disk: the optimizer state (and at zero_stage 3 the parameter shard) in files */
    dt_dtype precision;     /* DT_F32, or DT_BF16 matrix products (f32 weights, sums and state) */
    dt_dtype grad_wire;     /* gradients on the wire of allreduce data parallelism: DT_F32, DT_F16 or DT_BF16 */
    double bucket_mb;       /* MiB per allreduce bucket (0: DT_BUCKET_MB, else dt_ddp's default) */
    char device[32];        /* "cpu", "cuda", "cuda:N", "emu" (dt_device_open) */
    bool tf32;              /* device cuda: f32 matrix products may use TF32 tensor cores */
    /* ---- gradient compressors (grad_compression powersgd or topk; docs/ddp.md) ---- */
    int powersgd_rank;       /* powersgd: the rank r of the factors P (rows x r) and Q (cols x r) */
    int compress_start_step; /* powersgd, topk: steps sent uncompressed before compression starts */
    double topk_fraction;    /* topk: the share of each bucket's gradients sent, in (0, 1] */
} dt_layout;

/* grad_compression's compressors, held in grad_wire beside the wire formats
 * DT_F32 (none), DT_F16 and DT_BF16: values no dt_dtype takes. */
#define DT_GRAD_POWERSGD ((dt_dtype)0x100)
#define DT_GRAD_TOPK ((dt_dtype)0x101)

/* Every field at the trainer's default: one process's worth (dp 0, tp 1,
 * pp 1, no ZeRO, no servers, sync bsp, staleness 2, 1 micro-batch, no
 * accumulation, 1f1b with 2 virtual stages, recompute off, no offload, f32,
 * f32 wire, bucket 0, device "cpu"; powersgd_rank 4, compress_start_step 10,
 * topk_fraction 0.01). */
void dt_layout_default(dt_layout *l);

/* One key from its text, as the trainer's `--set key=value` gives it:
 * dp, tp, pp, zero_stage, servers, sync, staleness, micro_batches,
 * grad_accumulation, pipeline_schedule, virtual_stages, sequence_parallel,
 * tp_copies, recompute, offload, precision, grad_compression (none|f16|bf16|powersgd|topk),
 * bucket_mb, device, powersgd_rank, compress_start_step, topk_fraction.  DT_ERR_INVALID naming the key, the value and the accepted
 * range or choices (or that the key is not a layout key: dt_layout_has_key
 * tells first). */
dt_status dt_layout_set(dt_layout *l, const char *key, const char *value);
bool dt_layout_has_key(const char *key);
/* The text dt_layout_set would take for `key` into buf (DT_ERR_INVALID for
 * another key, or when buf is too small). */
dt_status dt_layout_get(const dt_layout *l, const char *key, char *buf, size_t len);
/* The layout's keys, in a fixed order, NULL-terminated. */
const char *const *dt_layout_keys(void);

/* From a JSON object of those keys (a subset: the others keep l's values).
 * An unknown key, a wrong type or a bad value is refused naming it. */
dt_status dt_layout_from_json(dt_layout *l, const char *json);
/* Every key as one JSON object (malloc'd; NULL when out of memory). */
char *dt_layout_to_json(const dt_layout *l);
/* The keys that differ from the default as "key=value" words separated by
 * spaces ("" for the default layout): the trainer's --set form.  Returns
 * the length it needed (as snprintf). */
int dt_layout_to_sets(const dt_layout *l, char *buf, size_t len);
/* One line for people: "dp 2 x pp 2 x tp 2, ZeRO-1, 1f1b, 4 micro-batches". */
const char *dt_layout_describe(const dt_layout *l, char *buf, size_t len);

/* Every check across the layout's keys and against a world of `world`
 * ranks (world <= 0: the keys alone), in one place: the first conflict is
 * refused (DT_ERR_INVALID) naming the keys and the numbers that conflict,
 * e.g. "tp 2 x pp 3 = 6 does not divide the 8 workers (world 10 less 2
 * servers)", "zero_stage 3 with tp 2: ZeRO-3 inside a tensor-parallel group
 * is not built (use 1 or 2)", "servers 2 with pp 2: a parameter server
 * replaces data parallelism by allreduce". *out_dp (optional) gets the
 * data-parallel width the world leaves. */
dt_status dt_layout_check(const dt_layout *l, int world, int *out_dp);
/* The model against the layout: the pipeline's pp x chunks stages cut from
 * d's blocks (at most one per block, dt_pipeline_partition).  DT_ERR_INVALID
 * naming pp and the blocks.  dt_strategy_create checks it too. */
dt_status dt_layout_check_model(const dt_layout *l, const dt_model_desc *d);
/* Model-state bytes per rank (f32: 4 bytes an element):
 *
 *   zero_stage 0   parameters 4P    gradients 4P    optimizer 4kP
 *   zero_stage 1   parameters 4P    gradients 4P    optimizer 4kP/N
 *   zero_stage 2   parameters 4P    gradients 4P/N  optimizer 4kP/N
 *   zero_stage 3   parameters 4P/N  gradients 4P/N  optimizer 4kP/N
 *
 * P: this rank's parameters (m: its pipeline stage's tensor-parallel
 * shards), N: the data-parallel ranks, k: the optimizer's state floats per
 * element (AdamW 2, SGD with momentum and Adagrad 1, plain SGD 0).  P/N is
 * the ZeRO shard (a slice of every block, rounded up); offload disk keeps
 * two windows of 2^20 elements of the optimizer state (and at stage 3 of the
 * parameter shard) in memory; a pipeline's stage 2 reduce-scatters after its
 * schedule, so its gradients are whole.  Communication buffers are counted
 * at the largest block: stages 1 and 2 reduce and gather in place except
 * blocks the ranks do not divide (two padded copies), stages 2 and 3 hold
 * the running block's gradients and two being reduced, stage 3 three
 * blocks' gathered parameters (the running one, a tied one, the next). */
typedef struct {
    double params, grads, optimizer, buffers;
} dt_memory_plan;
dt_status dt_layout_memory_plan(const dt_layout *l, dt_model *m, int dp, int state_floats, dt_memory_plan *out);
/* The pipeline's chunks per rank: virtual_stages when interleaved, else 1. */
int dt_layout_chunks(const dt_layout *l);
/* Micro-batches through the schedule per optimizer step. */
int dt_layout_step_micro_batches(const dt_layout *l);

/* ---- runs built from a layout ----
 * A layout, a model recipe and a world build a run: the mesh (dp x pp x
 * tp, the parameter servers split off), this rank's model (its pipeline
 * stage of tensor-parallel shards, initialised from the seed), its storage
 * and precision, the optimizer sized for what this rank updates (its ZeRO
 * shard; nothing on a parameter server's worker), a resume's part of a
 * checkpoint, the move to the device, and the strategy composed of them.
 * The trainer then only feeds batches, saves and evaluates:
 *
 *   dt_run_recipe r = {.describe = my_describe, .make_optimizer = my_opt, .user = cfg, .seed = 1};
 *   dt_strategy *s;  dt_strategy_create(&layout, &r, world, &s);        // collective over world
 *   if (dt_strategy_serves(s)) return dt_strategy_serve(s);             // a parameter server's rank
 *   each step:  dt_strategy_step(s, step, lr, next_batch, user, &stats);
 *   checkpoint: dt_strategy_sync(s);  dt_strategy_save(s, writer, &progress, ...);
 */
typedef struct {
    /* The model's description with its tensor-parallel layers split over
     * tp (NULL: whole); the reason in dt_last_error on failure. */
    dt_status (*describe)(void *user, dt_comm *tp, dt_model_desc **out);
    /* An optimizer over n elements (its weight-decay groups are set by the
     * library from weight_decay and no_decay). */
    dt_status (*make_optimizer)(void *user, int64_t n, dt_optimizer **out);
    void *user;              /* must outlive the strategy: checkpoints and resumes call describe again */
    uint64_t seed;           /* weights and dropout */
    float grad_clip;         /* global-norm clipping (0: off) */
    float weight_decay;      /* > 0: groups by name (dt_decay_groups) */
    const char *no_decay;    /* patterns without decay (NULL: DT_NO_DECAY_DEFAULT) */
    const char *offload_dir; /* offload disk: where the files go (NULL: /var/tmp) */
    const char *ps_clock_log; /* servers > 0: the servers' clock log (NULL: none) */
    /* Optional: called on every rank once its model is built, before the
     * optimizer is allocated (dp: the data-parallel ranks; lead: the rank
     * that reports): a status other than DT_OK stops the build with it, e.g.
     * model states above a memory limit (dt_layout_memory_plan) refused
     * before they are allocated. */
    dt_status (*check_model)(void *user, dt_model *m, int dp, bool lead);
    const char *resume;      /* a checkpoint's step directory to start from (NULL: the recipe's weights) */
    int64_t resume_optimizer_steps; /* its progress's optimizer steps (dt_ckpt_progress) */
} dt_run_recipe;

/* Build the run `l` describes for this rank of `world` (collective over
 * world; world must outlive the strategy).  The strategy owns everything
 * it built (mesh, communicators, model, optimizer); dt_strategy_destroy
 * frees it.  A parameter server's rank gets a strategy that only serves
 * (dt_strategy_serves).  Refusals name the keys and numbers (dt_layout_check
 * first, then the model against the layout: the pipeline's stages against
 * its blocks, tensor-parallel widths it cannot split by). */
dt_status dt_strategy_create(const dt_layout *l, const dt_run_recipe *r, dt_comm *world, dt_strategy **out);
/* True for a parameter server's rank: call dt_strategy_serve, not step. */
bool dt_strategy_serves(const dt_strategy *s);
/* Serve the workers until every one has left (a server's rank's whole run). */
dt_status dt_strategy_serve(dt_strategy *s);
/* The model and optimizer this rank trains (its stage, its shards; the
 * optimizer over what it updates). */
dt_model *dt_strategy_model(const dt_strategy *s);
dt_optimizer *dt_strategy_optimizer(const dt_strategy *s);
/* The communicator the data is split over (the mesh's dp group, or the
 * parameter server's workers), and the job's (every rank, servers too). */
dt_comm *dt_strategy_data_comm(const dt_strategy *s);
dt_comm *dt_strategy_job_comm(const dt_strategy *s);
/* The ranks that train (the job less a parameter server's servers): the
 * group a trainer averages its logged loss over and agrees its decisions in. */
dt_comm *dt_strategy_train_comm(const dt_strategy *s);
/* This rank's data-parallel, tensor-parallel and pipeline groups (tp, pp
 * NULL when the layout does not split so). */
void dt_strategy_groups(const dt_strategy *s, dt_comm **dp, dt_comm **tp, dt_comm **pp);
/* A parameter server's index among the servers and the range of the flat
 * parameters it holds ([*lo, *lo + *n) of *total); -1 on a worker. */
int dt_strategy_server_range(const dt_strategy *s, int64_t *lo, int64_t *n, int64_t *total);
/* The mesh of a tensor- or pipeline-parallel run (NULL otherwise). */
dt_mesh *dt_strategy_mesh(const dt_strategy *s);
/* False for a parameter server's asynchronous workers (sync asp, ssp), which
 * do not wait for each other: no collective over them between steps. */
bool dt_strategy_lockstep(const dt_strategy *s);
/* The layout it was built from, dp resolved. */
const dt_layout *dt_strategy_layout(const dt_strategy *s);
/* True on the rank that writes checkpoints and reports (dp rank 0 of stage 0,
 * tp rank 0; worker 0 of a parameter server). */
bool dt_strategy_lead(const dt_strategy *s);
/* The whole model's parameter count (every stage's, every shard whole, a
 * tied copy once).  Collective over the pipeline group. */
int64_t dt_strategy_whole_parameters(dt_strategy *s);
/* True where every rank holds the whole state, the same bits (data
 * parallelism without ZeRO, one process): there any rank may keep a
 * checkpoint of its own (dtrain's memory snapshots, one per host), so
 * dt_strategy_checkpoint_state and dt_strategy_save serve every rank as
 * they serve the lead.  False for ZeRO, a tp/pp mesh and the servers. */
bool dt_strategy_state_replicated(const dt_strategy *s);
/* On the lead (on every rank where dt_strategy_state_replicated): the
 * registry and optimizer a checkpoint writer saves (the whole model's,
 * gathered at each save, for a mesh or a parameter server; the live ones
 * otherwise; *optimizer NULL for ZeRO, whose state goes to shard files)
 * and whether it streams model.safetensors itself (ZeRO-3).  Elsewhere all
 * NULL. */
void dt_strategy_checkpoint_state(dt_strategy *s, dt_params **params, dt_optimizer **optimizer, bool *stream_model);

/* Bytes a strategy moved so far besides its gradient collectives: a
 * parameter server's worker to and from the servers, ZeRO-3's parameter
 * shard to and from its file (offload disk; the optimizer's own offload is
 * dt_optimizer_offload_io's).  Zeros for the others. */
typedef struct {
    uint64_t sent, received;          /* to and from the servers */
    uint64_t disk_read, disk_written; /* the parameter shard's file */
} dt_strategy_io;
void dt_strategy_io_bytes(const dt_strategy *s, dt_strategy_io *out);

/* One checkpoint at progress pr, collective over the strategy's ranks: each
 * holds its part; the lead hands the whole state to w (started with
 * dt_strategy_checkpoint_state's registry and optimizer, into dir), and so
 * does any other rank that passes a writer where the state is replicated
 * (elsewhere another rank's w is not used).  ZeRO's
 * ranks write their shard files into dir.  *dropped (with the reason in
 * dt_last_error) when this checkpoint could not be written but training can
 * go on; an error status when the job cannot.  *stall: the time the writer
 * held us up (may be NULL). */
dt_status dt_strategy_save(dt_strategy *s, dt_ckpt_writer *w, const char *dir, const dt_ckpt_progress *pr,
                           const char *label, double *stall, bool *dropped);

/* Evaluation totals over a batch source: the loss summed over scored rows,
 * the rows whose argmax is the target, and the rows. */
typedef struct {
    double loss_sum, correct;
    int64_t rows, batches, samples;
} dt_eval_totals;
/* Forward (no dropout, no gradients) `batches` batches from next through the
 * pipeline's stages and tensor-parallel shards (the logits' slices gathered
 * for the argmax).  Collective over the ranks that evaluate together: every
 * rank calls it; those that are not the lead's replica return at once with
 * zeros (under ZeRO-3 every rank takes part: its forward gathers).  The
 * lead gets the totals. */
dt_status dt_strategy_evaluate(dt_strategy *s, int64_t batches, dt_next_batch_fn next, void *user,
                               dt_eval_totals *out);
/* The same over a model of one's own: m (a stage, of shards) split over tp
 * and pp (either NULL: not split so), activations in arena.  A batch from
 * next with no targets ends the evaluation early.  Collective over tp and
 * pp; stage 0 gets the totals. */
dt_status dt_evaluate_batches(dt_model *m, dt_arena *arena, dt_comm *tp, dt_comm *pp, int64_t batches,
                              dt_next_batch_fn next, void *user, dt_eval_totals *out);

#ifdef __cplusplus
}
#endif
#endif
