/* What each strategy implements behind dt_strategy (parallel.h).  The common
 * micro-batch loop (strategy.c here) runs forward, loss and backward per
 * micro-batch; a strategy decides what happens around it: which micro-batch
 * communicates, how gradients are synchronised and how the update is made.
 * Pipeline, ZeRO, tensor-parallel and parameter-server strategies are further
 * tables of the same shape. */
#ifndef DT_PARALLEL_COMMON_STRATEGY_H
#define DT_PARALLEL_COMMON_STRATEGY_H

#include "dtrain/layout.h"
#include "dtrain/mesh.h"
#include "dtrain/parallel.h"

typedef struct dt__save_args dt__save_args;

typedef struct {
    const char *name;
    /* The optimizer lives elsewhere (the parameter servers): creation takes
     * none. */
    bool no_optimizer;
    /* The whole step instead of the common micro-batch loop (a pipeline
     * runs its own schedule); NULL for the common loop. */
    dt_status (*step)(dt_strategy *s, int64_t step, float lr, dt_next_batch_fn next, void *user, dt_step_stats *out);
    /* Before micro-batch `micro` of `count` runs its backward. */
    void (*before_backward)(dt_strategy *s, int micro, int count);
    /* After the last backward: synchronise, clip, update. */
    dt_status (*update)(dt_strategy *s, float lr, float max_norm, float *norm);
    /* Wait for what the last step left in flight (ZeRO's gathers of the
     * updated parameters); NULL: nothing is ever left. */
    dt_status (*sync)(dt_strategy *s);
    /* Communication time of the last step (seconds), and the part not hidden. */
    void (*timing)(const dt_strategy *s, double *comm, double *exposed);
    /* Bytes the strategy holds beyond the model and the optimizer, of which
     * *buffers communication buffers (NULL: none). */
    size_t (*memory)(const dt_strategy *s, size_t *buffers);
    /* One checkpoint (dt_strategy_save); NULL: the common one (run/save.c:
     * the state as it is, gathered over tp and pp onto the lead when split). */
    dt_status (*save)(dt_strategy *s, const dt__save_args *a);
    /* After dt_strategy_create built it from a resume's step directory: the
     * strategy's own state beyond the model and the optimizer (data
     * parallelism's compressor); NULL: none. */
    dt_status (*resume)(dt_strategy *s, const char *step_dir);
    /* Bytes moved so far beyond the gradients' collectives (NULL: none). */
    void (*io)(const dt_strategy *s, dt_strategy_io *out);
    void (*destroy)(dt_strategy *s);
} dt__strategy_ops;

struct dt_strategy {
    const dt__strategy_ops *ops;
    dt_model *model;
    dt_optimizer *opt;
    dt_strategy_config cfg;
    uint32_t key_group; /* dropout keys differ across data-parallel ranks */
    dt_arena *arena;
    void *impl;
    /* ---- set by dt_strategy_create (run/build.c); zero for a strategy
     * made by its own constructor, which owns none of it ---- */
    struct dt__run *run;
};

/* What dt_strategy_create built and the strategy owns. */
typedef struct dt__run {
    dt_layout layout;     /* dp resolved */
    dt_run_recipe recipe; /* resume cleared after the build */
    dt_comm *job;         /* the world given (not owned) */
    dt_comm *role;        /* a parameter server's: this rank's role's group (owned), else NULL */
    dt_mesh *mesh;        /* dp x pp x tp when tp or pp > 1 (owned) */
    dt_comm *dp, *tp, *pp; /* this rank's groups (dp: the mesh's, the workers, or the world; tp, pp NULL: not split) */
    dt_ps_config ps;      /* servers > 0 */
    bool server;          /* this rank serves */
    dt_model *whole;      /* the lead's whole model for checkpoints of a mesh or a parameter server (owned) */
    dt_optimizer *whole_o;
    /* Frees the run with the model and optimizer it built (run/build.c):
     * dt_strategy_destroy calls it, so the common layer needs no arrow to
     * the run's files. */
    void (*release)(struct dt__run *r, dt_model *m, dt_optimizer *o);
} dt__run;

struct dt__save_args {
    dt_ckpt_writer *w; /* the lead's; NULL elsewhere */
    const char *dir;
    const dt_ckpt_progress *pr;
    const char *label;
    double *stall;
    bool *dropped;
};

/* run/build.c: the run's models and optimizers. */
dt_status dt__run_whole_model(const dt__run *r, dt_model **m);
dt_status dt__run_stage_model(const dt__run *r, int stage, dt_model **m);
dt_status dt__run_optimizer_range(const dt__run *r, dt_params *p, int64_t offset, int64_t n, dt_optimizer **o);
dt_status dt__run_prepare_writer(dt_strategy *s);
/* run/load.c: this rank's part of the checkpoint in step_dir into m and o
 * (before the strategy exists: ZeRO and the servers take it from there). */
dt_status dt__run_load(dt__run *r, const char *step_dir, dt_model *m, dt_optimizer *o);

/* run/gather.c: a split run's checkpoint in the unsplit layout, and its
 * resume's slices (by name; of the optimizer state a ZeRO shard). */
dt_status dt__split_gather(const dt__run *r, dt_params *p, dt_optimizer *o, dt_params *whole, dt_optimizer *wo);
dt_status dt__tp_slice(dt_params *whole, dt_optimizer *wo, dt_params *p, dt_optimizer *o);
dt_status dt__zero_slice(dt_model *m, int nranks, int rank, dt_optimizer *wo, dt_optimizer *o);
/* zero/checkpoint.c: ZeRO's shard files; run/gather.c: ZeRO inside a mesh
 * (the optimizer state gathered over dp into the unsplit checkpoint, sliced
 * back on resume). */
dt_status dt__zero_load(const char *step_dir, dt_model *m, dt_optimizer *o, int nranks, int rank);
dt_status dt__zero_mesh_gather(dt_strategy *s, dt_params *whole, dt_optimizer *wo);
dt_status dt__zero_mesh_slice(const dt__run *r, dt_params *whole, dt_optimizer *wo, dt_model *m, dt_optimizer *o);

/* The common checkpoint: the state as it is (downloaded from a device),
 * gathered over tp and pp onto the lead's whole model when split. */
dt_status dt__save_common(dt_strategy *s, const dt__save_args *a);
/* Each parameter's weight in the global norm of a model part (group_grads.c):
 * 1 for a tensor-parallel shard, 1/t for a tensor replicated over the t
 * ranks of tp, 0 for a tied copy whose first user is on another pipeline
 * stage.  *out: malloc'd, one per parameter. */
dt_status dt__grad_norm_weights(dt_model *m, int t, float **out);

/* Every strategy's constructor: a strategy with the given table, its common
 * part checked and filled (the model, the optimizer, the config, the
 * activation arena on the model's device) and, when impl_size > 0, a zeroed
 * impl of that size.  The caller then sets key_group and fills impl, and
 * ends with dt__strategy_finish.  On failure nothing is left and *out is
 * untouched; ops->destroy must accept the zeroed impl (or NULL when
 * impl_size is 0), as it does a half-built one. */
dt_status dt__strategy_new(const dt__strategy_ops *ops, size_t impl_size, dt_model *m, dt_optimizer *o,
                           const dt_strategy_config *cfg, dt_strategy **out);

/* The end of a strategy's creation: st == DT_OK hands s out (*out), else s
 * is destroyed and *out untouched.  Returns st. */
dt_status dt__strategy_finish(dt_strategy *s, dt_status st, dt_strategy **out);

#endif
