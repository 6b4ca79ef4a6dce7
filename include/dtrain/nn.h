/* dtrain neural-network layers, the parameter registry and models.
 *
 * Parameters: every value lives in one flat f32 buffer and every gradient in
 * another with the same layout, in registration order, under stable names
 * ("fc1.weight").  Optimizers, data-parallel buckets and ZeRO shards all work
 * on contiguous ranges of these buffers.
 *
 * Layers: forward allocates its output (and whatever backward needs) in the
 * step's arena; backward accumulates parameter gradients, fires the registry's
 * gradient-ready event for each parameter once its gradient is final (in
 * backward order; every subscriber hears it), and writes the input gradient
 * when asked. */
#ifndef DTRAIN_NN_H
#define DTRAIN_NN_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/base.h"
#include "dtrain/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- parameter registry ---- */
typedef struct dt_params dt_params;
typedef struct {
    char name[96];
    int64_t offset, numel; /* into the flat buffers, in floats */
    int ndim;
    int64_t shape[DT_MAX_DIMS];
    /* A tensor-parallel shard: part `part` of `parts` of the whole tensor
     * of shape `whole`, cut along dimension split_dim, which holds `groups`
     * equal groups each cut `parts` ways (attention's q, k, v: 3; else 1).
     * parts == 1 (the default): this is the whole tensor. */
    int parts, part, split_dim, groups;
    int64_t whole[DT_MAX_DIMS];
    /* Replicated over a tensor-parallel group, but each rank's gradient is
     * a partial sum (sequence parallelism: LayerNorms and biases between
     * the split regions see 1/t of the positions); the strategy sums it over
     * the group (dt_params_reduce_tp_partial) before the update. */
    bool tp_partial;
    /* Row-sparse (dt_param_set_row_sparse): rows = shape[0], each row the
     * numel / shape[0] elements after it. */
    bool row_sparse;
} dt_param_info;
/* A subscription to a registry's gradient-ready events or to a model's
 * block hooks: > 0 names it, 0 names none. */
typedef int dt_subscription;

dt_status dt_params_create(dt_params **out);
/* Register a parameter (before dt_params_finalize); *index identifies it. */
dt_status dt_params_add(dt_params *p, const char *name, int ndim, const int64_t *shape, int *index);
/* Allocate the value and gradient buffers (zeroed). */
dt_status dt_params_finalize(dt_params *p);
/* Finalize over flat buffers supplied from outside (numel floats each, not
 * freed by the registry: offload, a mapped file), or with none at all
 * (values and grads NULL: a shard-only registry, every parameter bound with
 * dt_param_bind before a block uses it, as ZeRO-3 gathers them). */
dt_status dt_params_finalize_external(dt_params *p, float *values, float *grads);
/* Point parameter `index` at storage of its own (numel floats each); NULL
 * returns it to its place in the flat buffers (or to none).  A strategy's
 * block hooks (dt_model_set_hooks) bind a block's parameters before the
 * block runs and release them after. */
void dt_param_bind(dt_params *p, int index, float *value, float *grad);
/* True when parameter `index` has value and gradient storage now / value
 * storage (what a forward needs). */
bool dt_param_has_storage(const dt_params *p, int index);
bool dt_param_has_value(const dt_params *p, int index);
/* Give up the flat value and/or gradient buffer (freed when the registry
 * owns it, forgotten when it came from outside; every parameter unbound):
 * ZeRO-2 keeps no whole gradient, ZeRO-3 no whole parameters either; the
 * strategy's block hooks bind what a block needs while it runs.  On a
 * device (dt_params_to_device) its buffers go as well. */
void dt_params_drop_storage(dt_params *p, bool values, bool grads);
/* Declare parameter `index` a shard (see dt_param_info) of a tensor whose
 * dimension split_dim is `parts` times (per group) this one's; the layers
 * that split parameters call it right after registering them. */
dt_status dt_param_set_shard(dt_params *p, int index, int parts, int part, int split_dim, int groups);
/* Where element `i` (row-major over info->whole) of the whole tensor lies
 * in this shard, or -1 when another part holds it. */
int64_t dt_param_shard_index(const dt_param_info *info, int64_t i);
/* Mark parameter `index` tp_partial (see dt_param_info). */
void dt_param_set_tp_partial(dt_params *p, int index);
int dt_params_count(const dt_params *p);
int64_t dt_params_numel(const dt_params *p);
const dt_param_info *dt_params_info(const dt_params *p, int index);
/* Index of the parameter called `name`, or -1. */
int dt_params_find(const dt_params *p, const char *name);
/* The flat buffers (NULL for a shard-only registry). */
float *dt_params_values(dt_params *p);
float *dt_params_grads(dt_params *p);
float *dt_param_value(dt_params *p, int index);
float *dt_param_grad(dt_params *p, int index);
/* Zero the flat gradient buffer (bound storage is its owner's to clear):
 * row-sparse parameters at their touched rows only, and forget those rows. */
void dt_params_zero_grads(dt_params *p);
/* ---- row-sparse parameters ----
 * An embedding table whose backward writes only the rows a batch used: the
 * registry keeps, per row-sparse parameter, the rows whose gradient may be
 * nonzero since the last dt_params_zero_grads ("touched"), so that
 * - zeroing the gradients clears only those rows (a 2^20 x 32 table costs
 *   what the batch touched, not a 128 MiB memset per step);
 * - an update can visit only those rows (dt_params_optimizer_step in
 *   parallel.h; exact for SGD without momentum or decay and for Adagrad
 *   without decay, whose update of a zero-gradient row is no change);
 * - a parameter server can push only those rows and pull them back.
 * The layer that writes the gradient records the rows (dt_param_touch_rows;
 * EmbeddingBag does).  Whoever writes a row-sparse gradient elsewhere than
 * at recorded rows -- a data-parallel allreduce sums other ranks' rows into
 * this one's, dt_ddp does this -- must call dt_param_touch_all first, or
 * the next zeroing leaves those rows stale.  The bookkeeping costs
 * rows / 8 bytes of bits plus 8 bytes per touched row. */
/* Mark parameter `index` (2 or more dimensions) row-sparse: rows = shape[0],
 * each row the remaining dimensions.  Before or after finalize; its
 * gradient must be zero then (as a fresh registry's is). */
dt_status dt_param_set_row_sparse(dt_params *p, int index);
bool dt_param_is_row_sparse(const dt_params *p, int index);
/* True when any parameter is row-sparse. */
bool dt_params_any_row_sparse(const dt_params *p);
/* Record rows[0..n) of parameter `index` as touched (repeats allowed); a
 * row outside [0, rows) is an error naming the parameter. */
dt_status dt_param_touch_rows(dt_params *p, int index, const int64_t *rows, int64_t n);
/* Every row of parameter `index` may be nonzero until the next zeroing. */
void dt_param_touch_all(dt_params *p, int index);
/* The touched rows of parameter `index` since the last dt_params_zero_grads:
 * returns their count and sets *rows to their ids, sorted, unique (valid
 * until the next touch or zeroing).  After dt_param_touch_all: returns the
 * row count with *rows = NULL (every row).  -1 (and NULL) for a parameter
 * that is not row-sparse. */
int64_t dt_param_touched_rows(dt_params *p, int index, const int64_t **rows);
/* ---- parameters on a device ----
 * dt_params_to_device moves a finalized registry of whole, dense parameters
 * (flat buffers, nothing bound elsewhere) to device d: the values are
 * copied there and the gradients zeroed there; dt_param_value/grad then give
 * device pointers, which the layers use.  dt_params_values/grads keep
 * naming the host's flat buffers, a copy of the values that is current
 * after dt_params_download (checkpoints, evaluation on the host) and is
 * sent back by dt_params_upload (after a checkpoint is loaded into it).
 * The cpu device (or NULL) is a no-op. */
dt_status dt_params_to_device(dt_params *p, const dt_device *d);
/* The registry's device (the cpu one when it was never moved). */
const dt_device *dt_params_device(const dt_params *p);
/* The flat buffers the layers and the optimizer use: the device's, or the
 * host's on cpu. */
float *dt_params_device_values(dt_params *p);
float *dt_params_device_grads(dt_params *p);
dt_status dt_params_download(dt_params *p);
dt_status dt_params_upload(dt_params *p);
/* ---- gradient-ready events ----
 * The one seam through which whoever syncs gradients learns, while backward
 * still runs, that a parameter's gradient is final for this backward pass:
 * data parallelism fills and starts its buckets (dt_ddp), ZeRO
 * reduce-scatters a block's unit once its last parameter is ready, the
 * parameter server pushes a block's range likewise.  Several subscribers
 * may listen at once (a compression, a monitor beside the strategy), none
 * displacing another.  Block hooks (dt_model_add_hook) stay for what is not
 * about gradients: binding and gathering storage before a block runs.
 *
 * Conventions:
 *  - the event is one parameter's registry index; backward fires each
 *    parameter once per pass, right after its layer's last write to that
 *    gradient in the pass, so the events arrive in backward order (within a
 *    layer: weight, then bias).  A tied parameter fires once, from its first
 *    block, whose backward comes after its other users' (GPT's wte: from
 *    the embedding; a pipeline stage holding only the head never fires it,
 *    and a parameter whose layer did not run fires nothing: whoever syncs
 *    covers those at the update, as dt_ddp does);
 *  - every subscriber hears every event, in the order they subscribed;
 *  - a subscriber returns DT_OK or a failure; the registry keeps the first
 *    failure (the others are still called) until dt_params_grad_ready_status
 *    takes it: the model does so after each block's backward, which then
 *    fails with that status (the detail in dt_last_error());
 *  - subscribing and unsubscribing are not allowed from inside an event, nor
 *    while a backward over the registry runs on another thread;
 *  - an event costs one indirect call per subscriber. */
typedef dt_status (*dt_grad_ready_cb)(void *user, int param_index);
/* Add fn(user, index) to the subscribers; *token (optional) names it for
 * dt_params_unsubscribe.  DT_ERR_INVALID for a NULL registry or fn,
 * DT_ERR_NOMEM. */
dt_status dt_params_subscribe_grad_ready(dt_params *p, dt_grad_ready_cb fn, void *user, dt_subscription *token);
/* Remove the subscriber `token` names; the others keep their order.  A
 * token of 0, or one already removed, removes nothing. */
void dt_params_unsubscribe(dt_params *p, dt_subscription token);
/* Fire parameter `index`'s event (the layers call it). */
void dt_params_grad_ready(dt_params *p, int index);
/* The first failure a subscriber returned since the last call (DT_OK:
 * none), and forget it. */
dt_status dt_params_grad_ready_status(dt_params *p);
/* The single callback of old, kept for its callers: one subscription of
 * its own that each call replaces (fn NULL: removes it); other
 * subscribers are untouched.  Out of memory: not subscribed, with the
 * detail in dt_last_error(). */
typedef void (*dt_grad_ready_fn)(int param_index, void *user);
void dt_params_on_grad_ready(dt_params *p, dt_grad_ready_fn fn, void *user);
void dt_params_destroy(dt_params *p);

/* ---- execution state: one context per micro-batch ----
 * Layers are stateless: what a forward keeps for its backward (inputs, masks,
 * attention probabilities) goes onto its context's stack of saved records,
 * allocated in ctx->arena, and the backward takes it off again in reverse
 * order.  Any number of micro-batches can therefore be in flight at once,
 * each with its own context (1F1B pipelines), and a block's forward can be
 * re-run during backward (recomputation).  Start a context with saved = NULL;
 * contexts may share an arena as long as nobody rewinds it under another. */
typedef struct dt_saved dt_saved;
typedef struct {
    dt_arena *arena;
    dt_params *params; /* set by dt_model_forward/backward */
    dt_rng_key key;    /* dropout masks: (seed, step, micro-batch, group) */
    bool training;
    dt_saved *saved; /* top of the saved-record stack (NULL when empty) */
    /* The input of the model (chunk) running, set by dt_model_forward(_chunk):
     * for block hooks that need it (a parameter server pulls the embedding
     * rows the input names before the first block's forward). */
    const dt_tensor *input;
    /* The precision of the matrix products, set by dt_model_forward(_chunk)
     * and dt_model_backward(_chunk) from dt_model_set_precision: DT_F32, or
     * DT_BF16 (operands rounded to bf16, sums in f32: dt_sgemm_bf16_ld). */
    dt_dtype compute;
    /* The compute backend (dt_device) of the model running, set by
     * dt_model_forward/backward(_chunk): every buffer the layers touch is
     * its memory. */
    const struct dt_compute_ops *ops;
    /* The model's input already in the device's memory (a prefetched
     * batch's x_dev, data.h), or NULL: dt_model_forward(_chunk) on a device
     * copies the host input in.  The input tensor stays the host copy, which
     * the layers check (token ids in range). */
    const float *input_dev;
    /* The first row of the micro-batch this context's tensors start at: 0,
     * except in a copy (dt_sequential_set_copies), which runs rows
     * [row0, row0 + its rows); dropout keys its masks by the micro-batch's
     * rows, so the copies draw what the whole micro-batch draws. */
    int64_t row0;
    /* Free activations as backward goes (false: the arena only grows until
     * its reset): a sequence rewinds the arena to where each child's forward
     * began once that child's backward is done, moving the child's input
     * gradient down there, and a residual does the same for its branch.  The
     * arena must be this context's alone (no other context's activations
     * above this one's), and the gradient handed to dt_model_backward is
     * dead after it (the output too).  Without training (inference) a
     * sequence keeps only each child's output.  `keep`: nothing below it is freed
     * (a residual protects its dy there while its branch runs backward);
     * zero-initialised, the arena's start. */
    bool reclaim;
    dt_arena_mark keep;
} dt_ctx;
/* Number of records on a context's stack (0 once every backward has run). */
int dt_ctx_saved_depth(const dt_ctx *ctx);

/* ---- layers ---- */
typedef struct dt_layer dt_layer;
typedef struct {
    const char *kind;
    dt_status (*forward)(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y);
    /* dx is written only when need_dx (the first layer needs no input gradient). */
    dt_status (*backward)(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx);
    /* Initialise this layer's parameters (after dt_params_finalize); each
     * parameter's values depend only on (seed, its name). */
    void (*init)(dt_layer *l, dt_params *p, uint64_t seed);
    void (*destroy)(dt_layer *l);
} dt_layer_ops;

struct dt_layer {
    const dt_layer_ops *ops;
    char name[64];
};

/* ---- the tensor-parallel group ----
 * A tensor-parallel group as the layers see it: this rank's place in it and
 * the exchanges the tensor-parallel layers and the vocabulary-parallel loss
 * need, so that nn knows no communicator.  src/parallel supplies one over a
 * communicator (dt_tp_group_of_comm, dtrain/parallel.h); a test may supply its
 * own.  Layers, descriptions and models keep a copy of the struct: what
 * `user` points to (the communicator) must outlive them.  A zeroed group
 * (size 0) is no group.
 *
 * Every entry is collective over the group: each rank calls it in the same
 * order with the same count, and each rank gets bitwise the same result (the
 * reduction order fixed, whatever the timing), which the layers rely on to
 * keep replicated values equal.  Counts are elements, not bytes.  A failure
 * returns its status with the detail in dt_last_error(). */
typedef struct dt_tp_group {
    int rank, size; /* this rank's place: 0 <= rank < size */
    void *user;     /* passed to every entry */
    /* buf[0..n) := the elementwise sum over ranks of buf[0..n), in place */
    dt_status (*allreduce_sum)(void *user, float *buf, int64_t n);
    /* The same over doubles, and the elementwise maximum (the
     * vocabulary-parallel loss's row statistics). */
    dt_status (*allreduce_sum_f64)(void *user, double *buf, int64_t n);
    dt_status (*allreduce_max_f64)(void *user, double *buf, int64_t n);
    /* all[r*n_each .. (r+1)*n_each) := rank r's mine[0..n_each), for every
     * r; all holds size*n_each floats and does not overlap mine. */
    dt_status (*allgather)(void *user, const float *mine, float *all, int64_t n_each);
    /* mine[0..n_each) := block `rank` of the elementwise sum over ranks of
     * all[0..size*n_each); mine does not overlap all. */
    dt_status (*reduce_scatter_sum)(void *user, const float *all, float *mine, int64_t n_each);
    /* Optional (all four or none): the three exchanges above started
     * without waiting, *req a handle that `wait` completes (and frees),
     * with the same results; the buffers stay untouched until then.  Every
     * rank starts the same exchanges in the same order.  A block run as
     * copies (dt_sequential_set_copies) starts one copy's exchange and
     * computes the next copy while it travels; without them its exchanges
     * block as ever. */
    dt_status (*iallreduce_sum)(void *user, float *buf, int64_t n, void **req);
    dt_status (*iallgather)(void *user, const float *mine, float *all, int64_t n_each, void **req);
    dt_status (*ireduce_scatter_sum)(void *user, const float *all, float *mine, int64_t n_each, void **req);
    dt_status (*wait)(void *user, void *req);
} dt_tp_group;

/* Constructors register their parameters in p under "<name>.weight" etc. */
dt_status dt_linear_create(dt_params *p, const char *name, int64_t in, int64_t out, bool bias, dt_layer **l);
/* Tensor-parallel linear (Megatron-LM) over the group `tp` of t ranks (copied):
 * DT_TP_COLUMN splits W [out, in] by output features (this rank computes
 * out/t of them from the whole input; backward sums the input gradient over
 * the group), DT_TP_ROW by input features (this rank takes its in/t slice of
 * the input; forward sums the outputs over the group, then adds the bias,
 * which every rank holds whole).  Parameters are registered under
 * "<name>.weight" / ".bias" with this rank's shard shape, initialised as
 * their slice of the unsplit layer's initialisation.  The split size must
 * divide by t (an error names the numbers).  Forward and backward are
 * collective over tp. */
typedef enum { DT_TP_COLUMN = 1, DT_TP_ROW = 2 } dt_tp_split;
dt_status dt_linear_parallel_create(dt_params *p, const char *name, int64_t in, int64_t out, bool bias,
                                    dt_tp_split split, const dt_tp_group *tp, dt_layer **l);
dt_status dt_relu_create(const char *name, dt_layer **l);
/* GELU, tanh approximation (as GPT-2 and torch's approximate="tanh"). */
dt_status dt_gelu_create(const char *name, dt_layer **l);
/* LayerNorm over the last dimension, with weight and bias. */
dt_status dt_layernorm_create(dt_params *p, const char *name, int64_t dim, float eps, dt_layer **l);
/* Dropout with probability `prob`; identity when ctx->training is false. */
dt_status dt_dropout_create(const char *name, float prob, dt_layer **l);
/* Embedding: input tensor of token ids stored as floats (exact up to 2^24),
 * output [..., dim]. */
dt_status dt_embedding_create(dt_params *p, const char *name, int64_t vocab, int64_t dim, dt_layer **l);
/* EmbeddingBag, mean mode (torch.nn.EmbeddingBag(mode="mean")): a table
 * "<name>.weight" [rows, dim] (rows <= 2^24), registered row-sparse.  Input:
 * a batch of bags as [batch, L] ids stored as floats, -1 marking no id: bag
 * b holds the ids >= 0 of row b, in any positions, so variable-length bags
 * are padded to the width L (torch's ids + offsets: the concatenated ids of
 * the bags and each bag's start; dt_bags_from_offsets converts).  Output
 * [batch, dim]: each bag's mean row, zeros for an empty bag (as torch).
 * Backward adds dy[b] / |bag b| to each id's row and records the ids as the
 * table's touched rows.  Initialised U(-1/dim, 1/dim) (fastText's input
 * vectors). */
dt_status dt_embedding_bag_create(dt_params *p, const char *name, int64_t rows, int64_t dim, dt_layer **l);
/* Bags given as torch gives them -- ids[0..nids) concatenated, bag b from
 * offsets[b] to offsets[b+1] (nids for the last) -- into the padded form:
 * out [nbags, width], each bag's ids in order then -1.  A bag longer than
 * width is an error naming it. */
dt_status dt_bags_from_offsets(const int64_t *ids, int64_t nids, const int64_t *offsets, int64_t nbags,
                               int64_t width, float *out);
/* Causal multi-head self-attention over [batch, time, dim], with parameters
 * "<name>.c_attn.{weight,bias}" [3*dim, dim] and "<name>.c_proj.*" [dim, dim]. */
dt_status dt_attention_create(dt_params *p, const char *name, int64_t dim, int64_t heads, dt_layer **l);
/* The same with its heads split over the tensor-parallel group tp (heads
 * divisible by its size): c_attn column-parallel (this rank's heads' q, k
 * and v), c_proj row-parallel; one allreduce forward, one backward. */
dt_status dt_attention_parallel_create(dt_params *p, const char *name, int64_t dim, int64_t heads,
                                       const dt_tp_group *tp, dt_layer **l);
/* conv2d over [batch, in, h, w]: square kernel k, stride 1, zero padding pad;
 * parameters "<name>.weight" [out, in, k, k] and "<name>.bias" [out]. */
dt_status dt_conv2d_create(dt_params *p, const char *name, int64_t in, int64_t out, int64_t k, int64_t pad,
                           dt_layer **l);
/* What runs conv2d: "oneDNN" (built with it, DT_CONV not im2col) or "im2col". */
const char *dt_conv2d_backend(void);
/* 2x2 max pooling with stride 2 over [batch, channels, h, w] (odd edges dropped). */
dt_status dt_maxpool2d_create(const char *name, dt_layer **l);
/* Keep the batch dimension, give each sample the shape shape[0..ndim). */
dt_status dt_reshape_create(const char *name, int ndim, const int64_t *shape, dt_layer **l);
void dt_layer_destroy(dt_layer *l);

/* Residual add: y = a + b; the backward of an add passes dy to both inputs. */
void dt_residual_add(const dt_tensor *a, const dt_tensor *b, dt_tensor *y);

/* ---- loss ---- */
/* Mean softmax cross-entropy of logits [n, classes] against integer targets
 * (a target of -1 is ignored).  Writes dlogits (same shape) when non-NULL. */
dt_status dt_softmax_cross_entropy(const dt_tensor *logits, const int32_t *targets, float *loss,
                                   dt_tensor *dlogits);

/* The same over logits split by class across the tensor-parallel group tp:
 * this rank holds classes [vocab_start, vocab_start + C) of `vocab`, the
 * last dimension of logits being C; targets are global class ids (-1:
 * ignored).  The full logits are never gathered: per row the maximum, the
 * sum of exponentials and the target's logit are reduced over tp.  Every
 * rank gets the loss; dlogits (optional) is this rank's slice of the
 * gradient.  Collective over tp. */
dt_status dt_softmax_cross_entropy_parallel(const dt_tensor *logits, const int32_t *targets, int64_t vocab,
                                            int64_t vocab_start, const dt_tp_group *tp, float *loss,
                                            dt_tensor *dlogits);

/* ---- containers ---- */
typedef enum { DT_BEFORE_FORWARD, DT_AFTER_FORWARD, DT_BEFORE_BACKWARD, DT_AFTER_BACKWARD } dt_hook_point;
typedef dt_status (*dt_block_hook)(void *user, dt_hook_point point, int block, dt_ctx *ctx);
/* A sequence of layers: forward runs them in order, backward in reverse.
 * One container serves a GPT block's sub-layers, a whole model and a
 * pipeline stage.  It owns what is appended (also when appending fails). */
dt_status dt_sequential_create(const char *name, dt_layer **out);
dt_status dt_sequential_append(dt_layer *seq, dt_layer *l);
int dt_sequential_count(const dt_layer *seq);
dt_layer *dt_sequential_at(dt_layer *seq, int i);
/* One hook around every item's forward and backward (a model's sequences
 * carry its own dispatcher here: add hooks with dt_model_add_hook). */
void dt_sequential_set_hooks(dt_layer *seq, dt_block_hook hook, void *user);
/* Activation recomputation for item i: while training, forward keeps only
 * the item's input and frees its activations (an arena rewind); backward
 * runs the item's forward again first.  Gradients are bitwise those of the
 * run without it; it costs one more forward of the item. */
dt_status dt_sequential_set_recompute(dt_layer *seq, int i, bool on);
/* Copies (multi-copy tensor parallelism, docs/parallelism.md): item i
 * runs each micro-batch's rows split into `copies` contiguous parts
 * (1..DT_ARENA_COMPANIONS; fewer when the batch has fewer rows), which take
 * turns on the cores: where a copy's forward or backward reaches a
 * tensor-parallel exchange it starts it without waiting (a group with the
 * nonblocking entries: dt_tp_group) and the next copy computes while it
 * travels.  The item must treat its rows independently (a transformer
 * block does; a loss does not).  Results equal the item's run whole except
 * for the order of the sums over rows in the parameters' gradients (the
 * copies' parts added in copy order: not bitwise, within f32 rounding);
 * dropout draws the whole micro-batch's masks.  Each copy keeps its
 * activations in a companion arena of the context's (dt_arena_link); the
 * output is put together once more in the context's arena.  Composes with
 * recomputation of the same item. */
dt_status dt_sequential_set_copies(dt_layer *seq, int i, int copies);
/* y = x + f(x); the residual owns f (also when creating it fails). */
dt_status dt_residual_create(const char *name, dt_layer *f, dt_layer **out);

/* ---- models: block descriptions, instantiated whole or as a stage ----
 * A description lists a model's blocks in order, with cost hints, and knows
 * how to create each.  dt_model_instantiate(d, lo, hi) builds blocks
 * [lo, hi) with only their parameters: the whole model, or one pipeline
 * stage.  Parameter names, initial values (keyed by seed and name) and
 * computations do not depend on the range, so stages [0, k) and [k, n) run
 * one after the other give exactly the whole model's results. */
typedef struct dt_model_desc dt_model_desc;
typedef struct {
    char name[64];    /* "transformer.h.3" */
    const char *kind; /* "gpt-block", "linear", ... */
    int64_t params;   /* parameter elements the block uses (a tied one counts for each user) */
    double flops;     /* forward FLOPs per sample (backward: about twice) */
    double act_bytes; /* activation bytes per sample that forward keeps for backward */
} dt_block_info;

/* An MLP: sizes[0] inputs, hidden layers sizes[1..n-2] with ReLU, sizes[n-1]
 * outputs.  Blocks fc1, relu1, fc2, ...; parameters "fc1.weight", "fc1.bias"
 * (PyTorch's nn.Linear layout). */
dt_status dt_mlp_describe(const int64_t *sizes, int nsizes, dt_model_desc **out);
/* The same split over the tensor-parallel group tp (copied; NULL or size 0:
 * none): fc1 column-parallel, fc2 row-parallel, fc3 column, ... (Megatron's
 * MLP), a last layer without a partner replicated; the split widths must
 * divide by tp's size. */
dt_status dt_mlp_describe_tp(const int64_t *sizes, int nsizes, const dt_tp_group *tp, dt_model_desc **out);
/* The sizes dt_mlp_describe_tp splits over tp ranks (the hidden sizes between
 * a column- and a row-parallel layer) checked without a communicator: a
 * configuration refused before the job starts, naming the size. */
dt_status dt_mlp_tp_check(const int64_t *sizes, int nsizes, int tp);
/* GPT (decoder-only, pre-LayerNorm, learned positions, GELU MLP 4x, output
 * tied to the token embedding).  Input: token ids [batch, time] as floats;
 * output: logits [batch, time, vocab].  Blocks: transformer.embed,
 * transformer.h.0 .. h.L-1, lm_head; transformer.wte.weight is shared by the
 * first and the last.  gpt-mini: {256, 128, 4, 4, 256, 0}. */
typedef struct {
    int64_t vocab, context, layers, heads, dim;
    float dropout;
    /* Tensor parallelism over this group (zeroed, size 0: none; src/parallel
     * makes one with dt_tp_group_of_comm): the embedding table
     * and the tied output layer split by vocabulary, attention by heads, the
     * MLP column then row (docs/parallelism.md); vocab and heads must divide
     * by its size.  The model's output is then this rank's slice of the
     * logits: dt_model_loss takes the vocabulary-parallel loss. */
    dt_tp_group tp;
    /* Sequence parallelism (Megatron-LM's later form; needs tp, context
     * divisible by its size): between the split regions (LayerNorms,
     * dropouts, residuals) each rank keeps 1/t of the positions, gathered
     * entering a region and reduce-scattered leaving it instead of one
     * allreduce: the same bytes, 1/t of those activations. */
    bool sequence_parallel;
} dt_gpt_config;
dt_status dt_gpt_describe(const dt_gpt_config *cfg, dt_model_desc **out);
/* CNN for square single-channel images: conv5x5(c1, pad 2)-relu-pool2-
 * conv5x5(c2, pad 2)-relu-pool2-linear(classes), one block per layer.  For
 * Fashion-MNIST: {28, 32, 64, 10}.  Input [batch, size*size]. */
dt_status dt_cnn_describe(int64_t size, int64_t c1, int64_t c2, int64_t classes, dt_model_desc **out);
/* A synthetic model for timing pipeline schedules: `blocks` blocks
 * "delay.<i>", each a dim -> dim identity whose forward copies its input to
 * a new output (in ctx->arena; it keeps nothing else) and then sleeps
 * forward_ms, and whose backward passes dy through as dx and sleeps
 * backward_ms.  Sleeping, not computing, makes a stage's time independent of
 * the cores the ranks share.  Each block has one parameter
 * "delay.<i>.weight" of shape [1] whose gradient is 0, and equal cost hints
 * (a uniform partition).  Input and output [batch, dim]: with dim >= 2
 * dt_model_loss (softmax cross-entropy, one target per row) works on it. */
dt_status dt_delay_describe(int blocks, int64_t dim, double forward_ms, double backward_ms, dt_model_desc **out);
/* The fastText-style text classifier: blocks "embedding" (EmbeddingBag,
 * mean, [buckets, dim], row-sparse) and "fc" (linear dim -> classes, with
 * bias).  Input: each example's hashed feature ids as a bag ([batch, L],
 * -1 padding: dt_text_features in data.h makes them); output: logits
 * [batch, classes].  Parameters "embedding.weight", "fc.weight", "fc.bias"
 * (torch's names for nn.EmbeddingBag and nn.Linear modules so called). */
typedef struct {
    int64_t buckets, dim, classes;
} dt_textclf_config;
dt_status dt_textclf_describe(const dt_textclf_config *cfg, dt_model_desc **out);
int dt_model_desc_blocks(const dt_model_desc *d);
/* The input one sample of the model takes, the batch dimension left out:
 * shape[0..*ndim) (a GPT: {context}; an mlp: {sizes[0]}) and, for token or
 * feature ids stored as floats, *ids the number of ids (ids in [0, *ids);
 * 0: real values).  shape holds DT_MAX_DIMS.  DT_ERR_INVALID when the
 * builder did not say (the planner's profiler then cannot feed block 0). */
dt_status dt_model_desc_input(const dt_model_desc *d, int *ndim, int64_t *shape, int64_t *ids);
const dt_block_info *dt_model_desc_block(const dt_model_desc *d, int i);
void dt_model_desc_destroy(dt_model_desc *d);

typedef struct dt_model dt_model;
/* Blocks [lo, hi) of d (0 <= lo < hi <= blocks); d may be destroyed after. */
dt_status dt_model_instantiate(const dt_model_desc *d, int lo, int hi, dt_model **out);
/* The same over parameter storage from outside (see
 * dt_params_finalize_external; both NULL: a shard-only model whose block
 * hooks bind each block's parameters).  dt_model_init needs storage. */
dt_status dt_model_instantiate_external(const dt_model_desc *d, int lo, int hi, float *values, float *grads,
                                        dt_model **out);
/* Several ranges of blocks in one model, one parameter registry: an
 * interleaved pipeline rank's virtual stages (chunks).  bounds holds
 * nchunks pairs [lo, hi), increasing and not overlapping.  A block shared
 * by two chunks' users (a tied parameter) is registered once.  Each chunk
 * runs on its own: dt_model_forward_chunk / dt_model_backward_chunk. */
dt_status dt_model_instantiate_chunks(const dt_model_desc *d, const int *bounds, int nchunks, dt_model **out);
/* Describe and instantiate every block. */
dt_status dt_mlp_create(const int64_t *sizes, int nsizes, dt_model **out);
dt_status dt_gpt_create(const dt_gpt_config *cfg, dt_model **out);
dt_status dt_cnn_create(int64_t size, int64_t c1, int64_t c2, int64_t classes, dt_model **out);
dt_status dt_textclf_create(const dt_textclf_config *cfg, dt_model **out);

dt_params *dt_model_params(dt_model *m);
/* Run the model on device d (dt_device_open): its parameters move there
 * (dt_params_to_device; initialise or load them first), and forward,
 * backward and loss run there.  The model's input x (token ids, features)
 * and the loss's targets stay host memory and are copied in; the outputs,
 * the gradients and ctx->arena (dt_arena_create_on) are the device's.  Not
 * yet for tensor-parallel models.  The cpu device is a no-op. */
dt_status dt_model_to_device(dt_model *m, const dt_device *d);
/* The model's device (the cpu one unless moved). */
const dt_device *dt_model_device(const dt_model *m);
/* Number of blocks in this model (hi - lo). */
int dt_model_num_layers(const dt_model *m);
/* The blocks' range in the whole model's numbering (of a model holding
 * several chunks: from the first chunk's start to the last one's end). */
void dt_model_block_range(const dt_model *m, int *lo, int *hi);
/* Chunks of blocks this model holds (1 unless dt_model_instantiate_chunks
 * made it), chunk c's range in the whole model's numbering, and the number
 * of blocks of the whole model it was cut from. */
int dt_model_chunks(const dt_model *m);
void dt_model_chunk_range(const dt_model *m, int c, int *lo, int *hi);
int dt_model_whole_blocks(const dt_model *m);
/* Block i of this model (0 <= i < dt_model_num_layers). */
const dt_block_info *dt_model_block(const dt_model *m, int i);
/* Parameters [first, first + count) of the registry were registered by
 * block i (a shared parameter belongs to its first holder in this model). */
void dt_model_block_params(const dt_model *m, int i, int *first, int *count);
/* Shared (tied) parameters this model holds: the registry index and the
 * whole model's blocks that use it.  Where first_block and last_block sit in
 * different stages, each stage holds a copy, and the copies' gradients must
 * be summed between those stages before the update (dt_model_reduce_shared
 * in parallel.h does it over a communicator). */
typedef struct {
    int param;
    int first_block, last_block;
} dt_shared_param;
int dt_model_shared_params(const dt_model *m, const dt_shared_param **out);
/* Recompute block i (local numbering) during backward: see
 * dt_sequential_set_recompute. */
dt_status dt_model_set_recompute(dt_model *m, int i, bool on);
/* Run block i (local numbering) as copies of its rows: see
 * dt_sequential_set_copies. */
dt_status dt_model_set_copies(dt_model *m, int i, int copies);
/* Per-block hooks, the seam for storage: ZeRO binding a block's gradient
 * buffers and gathering its parameters (stage 3), the parameter server's
 * pulls, offload.  (Gradients becoming final are the gradient-ready events'
 * business: dt_params_subscribe_grad_ready.)  A hook is called with the
 * block's local index before and after its forward and its backward (a
 * recomputed block's second forward runs between BEFORE_BACKWARD and
 * AFTER_BACKWARD).  Several hooks may be added: before a block they run in
 * the order added, after it in reverse, so a later one runs nested inside
 * an earlier one and sees the storage it bound.  A hook that fails stops
 * the pass with its status (the hooks after it are not called).  Before a
 * block runs, the model checks that every parameter it registered has
 * storage and names the first that has none.  Adding and removing are not
 * allowed from inside a hook.  *token (optional) names the hook for
 * dt_model_remove_hook; a token of 0 or one removed already removes
 * nothing. */
dt_status dt_model_add_hook(dt_model *m, dt_block_hook hook, void *user, dt_subscription *token);
void dt_model_remove_hook(dt_model *m, dt_subscription token);
/* The single hook of old, kept for its callers: one hook of its own that
 * each call replaces (NULL: removes it); hooks added otherwise stay. */
void dt_model_set_hooks(dt_model *m, dt_block_hook hook, void *user);
/* Initialise every parameter from `seed` (PyTorch's schemes; GPT-2's for GPT). */
void dt_model_init(dt_model *m, uint64_t seed);
/* Mixed precision: DT_BF16 runs every matrix product of the model's linear,
 * attention and output layers on bf16-rounded operands with f32 sums
 * (dt_sgemm_bf16_ld: AMX or AVX512_BF16 where the CPU has them, else the
 * same numerics emulated in f32); everything else -- element-wise layers,
 * normalisation, softmax, the loss, parameters, gradients and the optimizer
 * state -- stays f32.  DT_F32 (the default) is plain f32.  Any other dtype
 * is refused with DT_ERR_INVALID. */
dt_status dt_model_set_precision(dt_model *m, dt_dtype precision);
dt_dtype dt_model_precision(const dt_model *m);
/* Forward through every block; y is allocated in ctx->arena.  (A model of
 * several chunks refuses: run each chunk.) */
dt_status dt_model_forward(dt_model *m, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y);
/* Forward through chunk c's blocks / backward through them; dx (NULL when
 * the chunk starts at block 0 and no input gradient is wanted) gets the
 * gradient of the chunk's input, in ctx->arena. */
dt_status dt_model_forward_chunk(dt_model *m, int c, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y);
dt_status dt_model_backward_chunk(dt_model *m, int c, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx);
/* Backward from dy (the loss gradient of the last output). */
dt_status dt_model_backward(dt_model *m, dt_ctx *ctx, const dt_tensor *dy);
/* The same, also giving the gradient of the input (a pipeline stage sends
 * it to the previous stage). */
dt_status dt_model_backward_dx(dt_model *m, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx);
/* The training loss of the model's output (the last block's): mean softmax
 * cross-entropy against targets (-1: ignored), vocabulary-parallel when
 * the output is split over a tensor-parallel group (a GPT with tp set);
 * dout (optional, out's shape) gets its gradient. */
dt_status dt_model_loss(dt_model *m, const dt_tensor *out, const int32_t *targets, float *loss, dt_tensor *dout);
/* The same, with the targets also in the device's memory already
 * (targets_dev: a prefetched batch's y_dev; NULL: copied in as above); the
 * host targets are still what is checked and counted. */
dt_status dt_model_loss_dev(dt_model *m, const dt_tensor *out, const int32_t *targets, const int32_t *targets_dev,
                            float *loss, dt_tensor *dout);
void dt_model_destroy(dt_model *m);

#ifdef __cplusplus
}
#endif
#endif
