/* Copies (MindSpore's multi-copy, Megatron-LM's tp-comm-overlap): a block's
 * micro-batch split along its rows into n copies that take turns on the
 * cores.  Each copy runs on a thread of its own, but only the copy whose
 * turn it is computes; at each tensor-parallel exchange it starts the
 * exchange, hands the turn to the next copy (round robin over those not
 * finished), waits for the exchange and then for its turn.  So copy k's
 * exchange travels while copy k+1 computes, and everything shared (the
 * parameters' gradients, the compute threads, the exchanges' order on the
 * communicator) is touched in a fixed order: copy 0's part, then copy 1's,
 * ..., the same on every rank and in every run.
 *
 *   copy 0: [compute]start ~~~~~~ wait [compute]start ~~~~ ...
 *   copy 1:                [compute]start ~~~~~~ wait [compute] ...
 */
#ifndef DT_NN_COPIES_H
#define DT_NN_COPIES_H

#include <stdbool.h>

#include "dtrain/nn.h"

typedef struct dt__copies dt__copies;

/* A runner of up to `max` copies (1 <= max <= DT_ARENA_COMPANIONS); its
 * threads start on the first run and live until it is destroyed. */
dt_status dt__copies_create(int max, dt__copies **out);
void dt__copies_destroy(dt__copies *r);

/* fn(arg, k) for k = 0 .. n-1 (n <= max), each on copy k's thread, taking
 * turns as above, copy 0 first; returns when all have returned.  The first
 * failure (in turn order) is returned with its message; the copies after it
 * stop at their next exchange (having waited for it) with DT_ERR_INVALID. */
typedef dt_status (*dt__copy_fn)(void *arg, int k);
dt_status dt__copies_run(dt__copies *r, int n, dt__copy_fn fn, void *arg);

/* True on a copy's thread while it runs. */
bool dt__copies_inside(void);
/* On a copy's thread, with an exchange started (req): hand the turn on,
 * wait(user, req), take the turn back; the exchange's status, or
 * DT_ERR_INVALID when an earlier copy failed meanwhile. */
dt_status dt__copies_await(dt_status (*wait)(void *user, void *req), void *user, void *req);

/* A layer run as copies of its input's rows: x [B, ...] split into
 * n' = min(n, B) contiguous parts (copy k: rows [k B / n', (k+1) B / n')),
 * each run by child on a context of its own: companion arena k of
 * ctx->arena (dt_arena_link, so a rewind of ctx->arena frees it as if it
 * were there), its own saved records, row0 its first row (dropout's masks
 * are the whole micro-batch's).  y (and dx) are whole, in ctx->arena: one
 * more copy of the block's output, the price of separate arenas.  The
 * parameters' gradients sum the copies in copy order; only the last copy
 * passes the gradient-ready events on (dt__params_quiet), when the sums are
 * final.  The forward saves one record on ctx (owner child) that the
 * backward takes. */
dt_status dt__copies_forward(dt__copies *r, int n, dt_layer *child, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y);
dt_status dt__copies_backward(dt__copies *r, dt_layer *child, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx,
                              bool need_dx);
/* Gradient-ready events of this thread not passed on (params.c). */
void dt__params_quiet(bool on);

#endif
