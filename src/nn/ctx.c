/* Saved records live in the micro-batch's arena (its host side when the
 * arena is a device's: the records are the host's bookkeeping): a header
 * linking to the record below, then the owner's payload (64-byte aligned
 * like every arena allocation, so payloads may hold anything). */
#include "base/status.h"
#include "nn/saved.h"
#include "tensor/backend.h"

struct dt_saved {
    dt_saved *below;
    const dt_layer *owner;
};

#define HEADER_FLOATS 16 /* 64 bytes: keeps the payload aligned */

void *dt__ctx_push(dt_ctx *ctx, const dt_layer *owner, size_t bytes)
{
    _Static_assert(sizeof(dt_saved) <= HEADER_FLOATS * sizeof(float), "record header fits its slot");
    float *mem = dt__arena_host(ctx->arena, HEADER_FLOATS + (int64_t)((bytes + sizeof(float) - 1) / sizeof(float)));
    if (!mem) {
        dt__fail(DT_ERR_NOMEM, "%s: out of activation memory for its saved tensors", owner->name);
        return NULL;
    }
    dt_saved *r = (dt_saved *)mem;
    r->below = ctx->saved;
    r->owner = owner;
    ctx->saved = r;
    return mem + HEADER_FLOATS;
}

void *dt__ctx_pop(dt_ctx *ctx, const dt_layer *owner)
{
    dt_saved *r = ctx->saved;
    if (!r) {
        dt__fail(DT_ERR_INVALID, "%s: backward without its forward on this context (nothing saved)", owner->name);
        return NULL;
    }
    if (r->owner != owner) {
        dt__fail(DT_ERR_INVALID, "%s: backward out of order: the last forward on this context was %s's",
                 owner->name, r->owner->name);
        return NULL;
    }
    ctx->saved = r->below;
    return (float *)r + HEADER_FLOATS;
}

int dt_ctx_saved_depth(const dt_ctx *ctx)
{
    int n = 0;
    for (const dt_saved *r = ctx->saved; r; r = r->below)
        n++;
    return n;
}
