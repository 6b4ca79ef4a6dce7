/* Activation arena: chunks of at least 64 MiB; allocations are 64-byte
 * aligned and never move, and reset keeps the chunks for the next step.  An
 * arena on a device (dt_arena_create_on) takes its chunks from the device's
 * backend; the bookkeeping stays on the host.
 *
 * Companions (dt_arena_link): arenas that live, reset and count with their
 * owner, for the copies of a micro-batch (nn/copies_rows.c), which allocate
 * and rewind each on its own while they interleave.  A link is a record, at
 * the owner's position when it was made, of where the companion stood then;
 * a rewind of the owner to a mark at or below that position rewinds the
 * companion back there, so that the owner's stack discipline (recomputation
 * freeing a block's activations, dt_arena.h) covers the companions too. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/tensor.h"
#include "tensor/backend.h"

#define MIN_CHUNK (64u << 20)
#define ALIGN 64

typedef struct chunk {
    struct chunk *next;
    size_t size, used;
    size_t high; /* the most of it ever handed out: the pages it has touched */
    unsigned char *mem;
} chunk;

/* The owner's position (at, used; at NULL: its start) and the companion's then. */
typedef struct {
    chunk *at;
    size_t used;
    int k;
    dt_arena_mark was;
} link;

struct dt_arena {
    const dt_compute_ops *ops; /* NULL: host memory (malloc) */
    dt_arena *host;            /* a device arena's host side (dt__arena_host), reset with it */
    chunk *chunks, *current;
    size_t in_use, peak; /* bytes handed out (alignment included), and the most at once; an owner's count its companions' */
    dt_arena *owner;                          /* a companion's (NULL: none) */
    dt_arena *companions[DT_ARENA_COMPANIONS]; /* created on the first link */
    link *links;                              /* in the order made, so by position */
    int nlinks, cap_links;
};

/* The host chunks' `high`s over every arena of the process: what the
 * arenas add to its resident set (dt_arena_host_touched_bytes). */
static _Atomic size_t host_touched;

static void note_high(const dt_arena *a, chunk *c)
{
    if (c->used > c->high) {
        if (!a->ops)
            atomic_fetch_add_explicit(&host_touched, c->used - c->high, memory_order_relaxed);
        c->high = c->used;
    }
}

static void note_alloc(dt_arena *a, size_t bytes)
{
    for (; a; a = a->owner) {
        a->in_use += bytes;
        if (a->in_use > a->peak)
            a->peak = a->in_use;
    }
}

dt_status dt_arena_create(dt_arena **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? DT_OK : dt__fail(DT_ERR_NOMEM, "out of memory for the activation arena");
}

dt_status dt_arena_create_on(const dt_device *d, dt_arena **out)
{
    DT_CHECK(dt_arena_create(out));
    (*out)->ops = d && !d->host ? d : NULL;
    return DT_OK;
}

/* A device's arena hands out 256-byte aligned blocks: cuBLASLt's
 * heuristic assumes operands aligned so and offers fewer kernels otherwise
 * (this did not speed up the slow QKV product of GPT-2's step on the H200,
 * bench/gpu/logs/2026-11-28-b2b12d0).  The host's stays at 64 (a cache
 * line). */
static size_t align_of(const dt_arena *a) { return a->ops ? 256 : ALIGN; }

float *dt_arena_alloc(dt_arena *a, int64_t count)
{
    if (count < 0)
        return NULL;
    size_t al = align_of(a), bytes = ((size_t)count * sizeof(float) + al - 1) / al * al;
    if (bytes == 0)
        bytes = al;
    for (chunk *c = a->current; c; c = c->next) {
        if (c->size - c->used >= bytes) {
            a->current = c;
            float *p = (float *)(c->mem + c->used);
            c->used += bytes;
            note_high(a, c);
            note_alloc(a, bytes);
            return p;
        }
    }
    size_t size = bytes > MIN_CHUNK ? bytes : MIN_CHUNK;
    chunk *c = calloc(1, sizeof *c);
    if (!c || !(c->mem = a->ops ? a->ops->alloc(size) : aligned_alloc(ALIGN, size))) {
        free(c);
        return NULL;
    }
    c->size = size;
    c->used = bytes;
    note_high(a, c);
    /* append after the current chunk so earlier chunks are reused first next step */
    if (!a->chunks) {
        a->chunks = c;
    } else {
        chunk *last = a->chunks;
        while (last->next)
            last = last->next;
        last->next = c;
    }
    a->current = c;
    note_alloc(a, bytes);
    return (float *)c->mem;
}

float *dt_arena_calloc(dt_arena *a, int64_t count)
{
    float *p = dt_arena_alloc(a, count);
    if (p && count > 0) {
        if (a->ops)
            a->ops->zero(p, (size_t)count * sizeof(float));
        else
            memset(p, 0, (size_t)count * sizeof(float));
    }
    return p;
}

void *dt__arena_host(dt_arena *a, int64_t count)
{
    if (!a->ops)
        return dt_arena_alloc(a, count);
    if (!a->host && dt_arena_create(&a->host) != DT_OK)
        return NULL;
    return dt_arena_alloc(a->host, count);
}

void dt_arena_reset(dt_arena *a)
{
    if (a->host)
        dt_arena_reset(a->host);
    for (int k = 0; k < DT_ARENA_COMPANIONS; k++)
        if (a->companions[k])
            dt_arena_reset(a->companions[k]);
    a->nlinks = 0;
    for (chunk *c = a->chunks; c; c = c->next)
        c->used = 0;
    a->current = a->chunks;
    a->in_use = dt_arena_bytes_in_use(a);
}

dt_arena_mark dt_arena_get_mark(const dt_arena *a)
{
    return (dt_arena_mark){a->current, a->current ? a->current->used : 0};
}

/* Whether link l stands at or above mark m (made after m was taken, or at
 * its position): a rewind to m undoes it. */
static bool link_above(const dt_arena *a, const link *l, dt_arena_mark m)
{
    if (!m.chunk)
        return true;
    if (!l->at) /* made at the start: above only a mark at the start */
        return m.chunk == a->chunks && m.used == 0;
    if (l->at == m.chunk)
        return l->used >= m.used;
    for (const chunk *c = a->chunks; c; c = c->next) { /* whichever comes first in the list is below */
        if (c == l->at)
            return false;
        if (c == m.chunk)
            return true;
    }
    return false;
}

/* A rewind or reset of a companion changes its owner's count. */
static void recount_owner(dt_arena *a)
{
    if (a->owner)
        a->owner->in_use = dt_arena_bytes_in_use(a->owner);
}

void dt_arena_rewind(dt_arena *a, dt_arena_mark m)
{
    while (a->nlinks > 0 && link_above(a, &a->links[a->nlinks - 1], m)) {
        const link *l = &a->links[--a->nlinks];
        dt_arena_rewind(a->companions[l->k], l->was);
    }
    chunk *at = (chunk *)m.chunk;
    if (!at) {
        dt_arena_reset(a);
        recount_owner(a);
        return;
    }
    at->used = m.used;
    for (chunk *c = at->next; c; c = c->next)
        c->used = 0;
    a->current = at;
    a->in_use = dt_arena_bytes_in_use(a);
    recount_owner(a);
}

dt_arena *dt_arena_link(dt_arena *a, int k)
{
    if (!a || k < 0 || k >= DT_ARENA_COMPANIONS || a->owner) {
        dt__fail(DT_ERR_INVALID, "arena link: companion %d of %s (0..%d of an arena that is no companion)", k,
                 a ? "an arena" : "no arena", DT_ARENA_COMPANIONS - 1);
        return NULL;
    }
    if (!a->companions[k]) {
        dt_arena *c = calloc(1, sizeof *c);
        if (!c) {
            dt__fail(DT_ERR_NOMEM, "out of memory for a companion arena");
            return NULL;
        }
        c->ops = a->ops;
        c->owner = a;
        a->companions[k] = c;
    }
    if (a->nlinks == a->cap_links) {
        int cap = a->cap_links ? 2 * a->cap_links : 64;
        link *grown = realloc(a->links, (size_t)cap * sizeof *grown);
        if (!grown) {
            dt__fail(DT_ERR_NOMEM, "out of memory for the arena's links");
            return NULL;
        }
        a->links = grown;
        a->cap_links = cap;
    }
    a->links[a->nlinks++] = (link){a->current, a->current ? a->current->used : 0, k,
                                   dt_arena_get_mark(a->companions[k])};
    return a->companions[k];
}

bool dt_arena_since(const dt_arena *a, dt_arena_mark m, const void *p)
{
    const unsigned char *b = p;
    const chunk *c = m.chunk ? m.chunk : a->chunks;
    size_t from = m.chunk ? m.used : 0;
    for (; c; c = c->next, from = 0)
        if (b >= c->mem + from && b < c->mem + c->size)
            return true;
    return false;
}

dt_arena_mark dt__arena_later(const dt_arena *a, dt_arena_mark x, dt_arena_mark y)
{
    if (!x.chunk || !y.chunk)
        return x.chunk ? x : y;
    if (x.chunk == y.chunk)
        return x.used >= y.used ? x : y;
    for (const chunk *c = a->chunks; c; c = c->next) /* the one met first is the earlier */
        if (c == x.chunk || c == y.chunk)
            return c == x.chunk ? y : x;
    return x;
}

size_t dt__arena_gap(const dt_arena *a, dt_arena_mark m, const void *p)
{
    const unsigned char *b = p;
    const chunk *c = m.chunk ? m.chunk : a->chunks;
    size_t from = m.chunk ? m.used : 0;
    return c && b >= c->mem + from && b < c->mem + c->size ? (size_t)(b - (c->mem + from)) : SIZE_MAX;
}

bool dt__arena_mark_after(const dt_arena *a, const void *p, size_t bytes, dt_arena_mark *out)
{
    const unsigned char *b = p;
    size_t al = align_of(a), rounded = (bytes + al - 1) / al * al;
    for (const chunk *c = a->chunks; c; c = c->next)
        if (b >= c->mem && b < c->mem + c->size) {
            size_t end = (size_t)(b - c->mem) + rounded;
            if (end > c->used) /* not handed out whole: no mark inside it */
                return false;
            *out = (dt_arena_mark){c, end};
            return true;
        }
    return false;
}

size_t dt_arena_peak_bytes(const dt_arena *a) { return a->peak; }

size_t dt_arena_host_touched_bytes(void) { return atomic_load_explicit(&host_touched, memory_order_relaxed); }

void dt_arena_reset_peak(dt_arena *a) { a->peak = a->in_use; }

size_t dt_arena_bytes_in_use(const dt_arena *a)
{
    size_t n = 0;
    for (chunk *c = a->chunks; c; c = c->next)
        n += c->used;
    for (int k = 0; k < DT_ARENA_COMPANIONS; k++)
        if (a->companions[k])
            n += dt_arena_bytes_in_use(a->companions[k]);
    return n;
}

void dt_arena_destroy(dt_arena *a)
{
    if (!a)
        return;
    dt_arena_destroy(a->host);
    for (int k = 0; k < DT_ARENA_COMPANIONS; k++)
        dt_arena_destroy(a->companions[k]);
    free(a->links);
    for (chunk *c = a->chunks; c;) {
        chunk *n = c->next;
        if (a->ops) {
            a->ops->free(c->mem);
        } else {
            free(c->mem);
            atomic_fetch_sub_explicit(&host_touched, c->high, memory_order_relaxed);
        }
        free(c);
        c = n;
    }
    free(a);
}
