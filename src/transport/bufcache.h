/* A small cache of payload buffers for messages that arrive before their
 * receive is posted.  Collectives hit this path every step (a peer one step
 * ahead), and a fresh malloc of hundreds of KiB comes back from the kernel as
 * untouched pages: on a VM each page fault costs more than copying the page.
 * Buffers handed back are kept (up to DT__BUFCACHE_SLOTS of them, at most
 * DT__BUFCACHE_BYTES in all) and reused for the next message that fits.
 * Owned by one engine; not thread-safe (the engine is single-threaded). */
#ifndef DT_TRANSPORT_BUFCACHE_H
#define DT_TRANSPORT_BUFCACHE_H

#include <stddef.h>

enum { DT__BUFCACHE_SLOTS = 32 };
#define DT__BUFCACHE_BYTES ((size_t)256 << 20)

typedef struct {
    void *buf[DT__BUFCACHE_SLOTS];
    size_t cap[DT__BUFCACHE_SLOTS];
    int n;
    size_t bytes;
} dt__bufcache;

/* A buffer of at least len bytes (len > 0): the smallest cached one that fits
 * and is at most 4x too big, else a new allocation.  NULL when out of memory. */
void *dt__bufcache_get(dt__bufcache *c, size_t len, size_t *cap);
/* Hand a buffer of capacity cap back (NULL is ignored); freed when the cache
 * is full, the smallest buffer making room for a larger one. */
void dt__bufcache_put(dt__bufcache *c, void *buf, size_t cap);
/* Free every cached buffer. */
void dt__bufcache_clear(dt__bufcache *c);

#endif
