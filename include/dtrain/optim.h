/* dtrain optimizers, learning-rate schedules and gradient clipping.
 *
 * An optimizer owns the state for a flat shard of `numel` parameters and
 * updates (param, grad) arrays of that length: a single process hands it the
 * whole flat parameter buffer, ZeRO a rank's shard.  The arithmetic follows
 * PyTorch's torch.optim.SGD, torch.optim.AdamW and torch.optim.Adagrad. */
#ifndef DTRAIN_OPTIM_H
#define DTRAIN_OPTIM_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float momentum;     /* 0 = plain SGD */
    float weight_decay; /* L2 added to the gradient, as torch.optim.SGD */
    bool nesterov;
} dt_sgd_config;

typedef struct {
    float beta1, beta2, eps;
    float weight_decay; /* decoupled: p *= 1 - lr * weight_decay */
} dt_adamw_config;

/* torch.optim.Adagrad (its defaults: eps 1e-10, the rest 0): at step t
 * (from 1) clr = lr / (1 + (t - 1) lr_decay), g += weight_decay p,
 * sum += g^2, p -= clr g / (sqrt(sum) + eps); sum starts at
 * initial_accumulator_value.  State "sum". */
typedef struct {
    float lr_decay, weight_decay, initial_accumulator_value, eps;
} dt_adagrad_config;

typedef struct dt_optimizer dt_optimizer;

dt_status dt_sgd_create(const dt_sgd_config *cfg, int64_t numel, dt_optimizer **out);
dt_status dt_adamw_create(const dt_adamw_config *cfg, int64_t numel, dt_optimizer **out);
dt_status dt_adagrad_create(const dt_adagrad_config *cfg, int64_t numel, dt_optimizer **out);
/* One update with learning rate lr.  n must equal the optimizer's numel. */
dt_status dt_optimizer_step(dt_optimizer *o, float *param, const float *grad, int64_t n, float lr);
/* The same update in parts, for updating each gradient bucket as soon as its
 * allreduce completes: update_range applies step t (t = steps taken so far)
 * to elements [offset, offset+n) (param and grad point at element 0 of the
 * shard), and end_step counts the step once every part is done. */
dt_status dt_optimizer_update_range(dt_optimizer *o, float *param, const float *grad, int64_t offset, int64_t n,
                                    float lr);
void dt_optimizer_end_step(dt_optimizer *o);
/* The same with param and grad pointing at element `offset` itself: a slice
 * that lives elsewhere than in one array of the shard's length (ZeRO-1 and
 * -2 update their slices where they sit in the whole parameters). */
dt_status dt_optimizer_update_slice(dt_optimizer *o, float *param, const float *grad, int64_t offset, int64_t n,
                                    float lr);
/* guard(user) runs on the updating thread before every update (step,
 * range, slice, rows) changes the parameters or the state: a checkpoint
 * writer that copies them in the background waits there for its copy
 * (dt_ckpt_writer_config.defer_copy).  One guard per optimizer: a call
 * replaces the previous one; NULL removes it. */
void dt_optimizer_set_guard(dt_optimizer *o, void (*guard)(void *user), void *user);
/* A tee: tee(user, offset, n, written) runs on the updating threads (several
 * at once) right after an update on the cpu wrote the elements [offset,
 * offset + n) of the parameters and the state, while they are still in
 * the cache: written[0] points at the parameters' element offset, [1] and
 * [2] at the state's (momentum or sum, then v; NULL where the optimizer has
 * none).  Each call lies within one piece of `grid` elements (piece i:
 * [i grid, (i + 1) grid)), so that a whole piece comes in one call.  A call
 * with written[0] NULL says the elements changed without their values at
 * hand (row-sparse updates).  Updates on a device or of an offloaded state
 * write where the tee's user did not look (their pointers tell).  A
 * checkpoint writer copies the state into its snapshot this way
 * (dt_ckpt_writer_arm).  One tee per optimizer; NULL removes it. */
typedef void (*dt_optim_tee)(void *user, int64_t offset, int64_t n, const float *const written[3]);
void dt_optimizer_set_tee(dt_optimizer *o, int64_t grid, dt_optim_tee tee, void *user);
/* Row-sparse parameters (nn.h): the update of some rows only.  A row whose
 * gradient is zero is left exactly as it is by SGD without momentum or
 * weight decay and by Adagrad without weight decay (its sum grows by 0 and
 * the step is 0 / (sqrt(sum) + eps) = 0), so for them updating only the
 * rows a step touched equals the dense update, to the bit.  Momentum, any
 * weight decay and AdamW move untouched rows too (their state decays, or
 * the decay term is nonzero): not exact.  dt_optimizer_rows_exact says
 * whether [offset, offset + n) of the shard qualifies (also false when the
 * state is offloaded). */
bool dt_optimizer_rows_exact(const dt_optimizer *o, int64_t offset, int64_t n);
/* Update the rows rows[0..nrows) (each in [0, total_rows); any order, no
 * repeats) of a parameter of total_rows rows of `row` elements that starts
 * at element `offset` of the shard; param and grad point at element 0 of
 * the shard.  Refused (naming why) unless dt_optimizer_rows_exact holds for
 * the whole parameter.  Part of a step, as update_range: dt_optimizer_end_step
 * counts it. */
dt_status dt_optimizer_update_rows(dt_optimizer *o, float *param, const float *grad, int64_t offset, int64_t row,
                                   const int64_t *rows, int64_t nrows, int64_t total_rows, float lr);
/* Parameter groups: ranges of the shard, [offset, offset + numel), with a
 * weight decay of their own (as torch.optim's param_groups); elements in no
 * group take the configuration's.  Groups may not overlap.  GPT-2 and
 * nanoGPT exempt biases, LayerNorm and embeddings from decay: see
 * dt_decay_groups in parallel.h, which builds the groups from parameter names. */
typedef struct {
    int64_t offset, numel;
    float weight_decay;
} dt_optim_group;
dt_status dt_optimizer_set_groups(dt_optimizer *o, const dt_optim_group *groups, int n);

/* The optimizer's state, named as torch.optim names it ("exp_avg" and
 * "exp_avg_sq" for AdamW, "momentum_buffer" for SGD with momentum, "sum"
 * for Adagrad), each
 * numel floats over the same shard.  Fills up to max entries of out and
 * returns how many there are (0 for plain SGD).  Checkpoints read and
 * restore the state through these, by name. */
typedef struct {
    const char *name;
    float *data;
    int64_t numel;
} dt_optim_state;
int dt_optimizer_state_buffers(dt_optimizer *o, dt_optim_state *out, int max);
/* How many buffers dt_optimizer_state_buffers gives, without reading an
 * offloaded state into memory. */
int dt_optimizer_state_count(const dt_optimizer *o);
/* Elements [offset, offset + n) of state buffer i (in
 * dt_optimizer_state_buffers' order) into out; an offloaded state is read
 * straight from its file, the rest staying on disk (a checkpoint written
 * piece by piece: dt_ckpt_shard_write_from). */
dt_status dt_optimizer_state_read(dt_optimizer *o, int i, int64_t offset, int64_t n, float *out);
/* The number of parameters the optimizer's state covers (its shard). */
int64_t dt_optimizer_numel(const dt_optimizer *o);

/* Keep the state in a file in `dir` (NULL or "": /var/tmp) instead of
 * memory: ZeRO-Infinity's offload, to the local disk.  Updates stream it in
 * windows of 2^20 elements through an I/O thread (the next window read and
 * the last one written while one computes); the results are bitwise those
 * of the state in memory.  dt_optimizer_state_buffers / dt_optimizer_state
 * read it into memory (for a checkpoint) until the next update writes it
 * back.  The file is removed as it is opened: nothing is left behind.
 * Nothing to do for plain SGD (no state). */
dt_status dt_optimizer_offload(dt_optimizer *o, const char *dir);
/* Floats of state the optimizer keeps (2 x numel for AdamW, numel for SGD
 * with momentum and for Adagrad, 0 for plain SGD), and whether they are on disk (offloaded). */
int64_t dt_optimizer_state_floats(const dt_optimizer *o, bool *on_disk);
/* Bytes an offloaded optimizer read and wrote so far (0 when not). */
void dt_optimizer_offload_io(const dt_optimizer *o, uint64_t *read, uint64_t *written);

/* Keep the state on device d (SGD and AdamW; the cpu device or NULL is a
 * no-op) and run the updates there: param and grad given to the update
 * calls are then the device's (dt_params_device_values/grads).  The state
 * read through dt_optimizer_state(_buffers) is a host copy made current by
 * the call; what is written into it is sent back before the next update
 * (a checkpoint loaded into it). */
struct dt_compute_ops;
dt_status dt_optimizer_set_device(dt_optimizer *o, const struct dt_compute_ops *d);
/* The optimizer's device (the cpu one unless set). */
const struct dt_compute_ops *dt_optimizer_device(const dt_optimizer *o);
/* Copy the device's state into the host's copy (a no-op on the cpu). */
dt_status dt_optimizer_download(dt_optimizer *o);

/* Steps taken so far (AdamW's bias correction uses it). */
int64_t dt_optimizer_steps(const dt_optimizer *o);
/* The state as one flat array (SGD: momentum; AdamW: m then v; Adagrad:
 * sum) for checkpoints;
 * *count is its length in floats.  dt_optimizer_set_steps restores the count. */
float *dt_optimizer_state(dt_optimizer *o, int64_t *count);
void dt_optimizer_set_steps(dt_optimizer *o, int64_t steps);
void dt_optimizer_destroy(dt_optimizer *o);

typedef enum { DT_LR_CONSTANT = 0, DT_LR_COSINE } dt_lr_kind;
typedef struct {
    dt_lr_kind kind;
    float base_lr, min_lr;
    int64_t warmup_steps; /* linear warm-up from base_lr/warmup to base_lr */
    int64_t total_steps;  /* cosine decays to min_lr at this step */
} dt_lr_schedule;

/* Learning rate for step (0-based). */
float dt_lr_at(const dt_lr_schedule *s, int64_t step);

/* Scale grad so its L2 norm is at most max_norm (as torch's clip_grad_norm_);
 * returns the norm before clipping.  max_norm <= 0 only measures. */
float dt_clip_grad_norm(float *grad, int64_t n, float max_norm);

#ifdef __cplusplus
}
#endif
#endif
