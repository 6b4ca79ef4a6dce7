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
    /* ---- memory and precision ---- */
    dt_recompute recompute; /* activation recomputation: off, every block (blocks), or all */
    dt_offload offload;     /* disk: the optimizer state (and at zero_stage 3 the parameter shard) in files */
    dt_dtype precision;     /* DT_F32, or DT_BF16 matrix products (f32 weights, sums and state) */
    dt_dtype grad_wire;     /* gradients on the wire of allreduce data parallelism: DT_F32, DT_F16 or DT_BF16 */
    double bucket_mb;       /* MiB per allreduce bucket (0: DT_BUCKET_MB, else dt_ddp's default) */
    char device[32];        /* "cpu", "cuda", "cuda:N", "emu" (dt_device_open) */
} dt_layout;

/* Every field at the trainer's default: one process's worth (dp 0, tp 1,
 * pp 1, no ZeRO, no servers, sync bsp, staleness 2, 1 micro-batch, no
 * accumulation, 1f1b with 2 virtual stages, recompute off, no offload, f32,
 * f32 wire, bucket 0, device "cpu"). */
void dt_layout_default(dt_layout *l);

/* One key from its text, as the trainer's `--set key=value` gives it:
 * dp, tp, pp, zero_stage, servers, sync, staleness, micro_batches,
 * grad_accumulation, pipeline_schedule, virtual_stages, sequence_parallel,
 * recompute, offload, precision, grad_compression (none|f16|bf16), bucket_mb,
 * device.  DT_ERR_INVALID naming the key, the value and the accepted
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
/* The pipeline's chunks per rank: virtual_stages when interleaved, else 1. */
int dt_layout_chunks(const dt_layout *l);
/* Micro-batches through the schedule per optimizer step. */
int dt_layout_step_micro_batches(const dt_layout *l);

#ifdef __cplusplus
}
#endif
#endif
