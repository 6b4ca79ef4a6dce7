/* The pipeline strategy's state (strategy.c: creation, the step,
 * the update) and its executor (executor.c: the micro-batches' contexts
 * and arenas, the messages between stages, the schedule's actions). */
#ifndef DT_PARALLEL_PIPE_INTERNAL_H
#define DT_PARALLEL_PIPE_INTERNAL_H

#include <stdbool.h>

#include "dtrain/pipeline.h"
#include "parallel/common/dp_sync.h"
#include "parallel/common/strategy.h"

enum { PIPE_TAG_ACT, PIPE_TAG_GRAD, PIPE_TAG_SHAPE, PIPE_TAG_KINDS };

/* One micro-batch on one chunk, from its forward to the end of its backward. */
typedef struct {
    dt_arena *arena;
    dt_ctx ctx;
    dt_tensor in, out, dy; /* dy: the loss gradient (last stage) or the received output gradient */
    dt_request *in_req, *dy_req, *send_out, *send_dx;
    bool live;     /* forward began, arena held */
    bool finished; /* backward ran; the arena goes back once the gradient has left */
} pipe_slot;

typedef struct {
    dt_pipeline_config pc;
    int p, v, r, nvs;
    int *vs_lo, *vs_hi; /* per local chunk: the whole model's block range */
    dt_comm *link;      /* point to point between the stages: a copy of pp */
    dt_comm *tied;      /* the stages holding a copy of a shared parameter (NULL: none) */
    dt__dp_sync sync;   /* over dp after the schedule: allreduce or ZeRO (common/dp_sync.h) */
    dt_pipe_action *plan;
    int nplan, plan_m;
    pipe_slot *slots; /* [micro * v + chunk] */
    int nslots;
    dt_arena **pool; /* arenas not in use */
    int npool, cap_pool;
    /* the step's micro-batches */
    float *xs;
    int32_t *ys;
    size_t xs_cap, ys_cap;
    int64_t x_numel, y_count;
    dt_tensor x_shape; /* shape of each micro-batch's input (data unused) */
    /* boundary shapes: the input shape of virtual stage b, for the inputs of shape `agreed` */
    dt_tensor *bshape;
    bool *known;
    dt_tensor agreed;
    bool agreed_any;
    dt_pipe_event *events;
    int nevents;
    double wait_s;
} pipe_state;

/* Virtual stage of this rank's chunk c, and the chunk's place in the model. */
static inline int dt__pipe_vstage(const pipe_state *P, int chunk) { return chunk * P->p + P->r; }
static inline bool dt__pipe_first(const pipe_state *P, int chunk) { return P->vs_lo[chunk] == 0; }

/* Every micro-batch of the step from `next`, copied (each call invalidates
 * the one before): their inputs and targets. */
dt_status dt__pipe_take_batches(pipe_state *P, int M, dt_next_batch_fn next, void *user);
/* Run this rank's schedule (P->plan) for `step`: *loss gets the sum of the
 * micro-batches' losses where this rank holds the last block; st the
 * activation peak, micro-batches in flight, busy time. */
dt_status dt__pipe_run_schedule(pipe_state *P, dt_strategy *s, int64_t step, float *loss, dt_step_stats *st);
/* Wait for every request still pending and give every arena back (after an
 * error too); returns s, or the first error found when s is DT_OK. */
dt_status dt__pipe_drain(pipe_state *P, dt_status s);
/* Two shapes equal (data ignored). */
bool dt__pipe_same_shape(const dt_tensor *a, const dt_tensor *b);

#endif
