/* The saved-record stack of a micro-batch context (see dt_ctx in nn.h).
 * A layer's forward pushes one record with what its backward needs; the
 * backward pops it.  Each record names its owner, so a backward run out of
 * order is an error naming both layers instead of silently wrong gradients. */
#ifndef DT_NN_SAVED_H
#define DT_NN_SAVED_H

#include <stddef.h>

#include "dtrain/nn.h"

/* Room for `bytes` of owner's state on top of ctx's stack (in ctx->arena);
 * NULL with the error set when the arena is out of memory. */
void *dt__ctx_push(dt_ctx *ctx, const dt_layer *owner, size_t bytes);
/* Take the top record off, which must be owner's; NULL with the error set
 * when the stack is empty or the top belongs to another layer. */
void *dt__ctx_pop(dt_ctx *ctx, const dt_layer *owner);

/* Typed forms: SAVE(ctx, layer, T) gives a T* to fill, LOAD the same back. */
#define DT_SAVE(ctx, layer, T) ((T *)dt__ctx_push((ctx), (layer), sizeof(T)))
#define DT_LOAD(ctx, layer, T) ((T *)dt__ctx_pop((ctx), (layer)))

#endif
