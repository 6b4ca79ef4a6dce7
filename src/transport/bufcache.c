#include "transport/bufcache.h"

#include <stdlib.h>

static void drop(dt__bufcache *c, int i)
{
    c->bytes -= c->cap[i];
    c->n--;
    c->buf[i] = c->buf[c->n];
    c->cap[i] = c->cap[c->n];
}

void *dt__bufcache_get(dt__bufcache *c, size_t len, size_t *cap)
{
    int best = -1;
    for (int i = 0; i < c->n; i++)
        if (c->cap[i] >= len && c->cap[i] / 4 <= len && (best < 0 || c->cap[i] < c->cap[best]))
            best = i;
    if (best >= 0) {
        void *b = c->buf[best];
        *cap = c->cap[best];
        drop(c, best);
        return b;
    }
    *cap = len;
    return malloc(len);
}

void dt__bufcache_put(dt__bufcache *c, void *buf, size_t cap)
{
    if (!buf)
        return;
    while (c->n > 0 && (c->n == DT__BUFCACHE_SLOTS || c->bytes + cap > DT__BUFCACHE_BYTES)) {
        int smallest = 0;
        for (int i = 1; i < c->n; i++)
            if (c->cap[i] < c->cap[smallest])
                smallest = i;
        if (c->cap[smallest] >= cap)
            break; /* keep the larger ones, free this one */
        free(c->buf[smallest]);
        drop(c, smallest);
    }
    if (c->n == DT__BUFCACHE_SLOTS || c->bytes + cap > DT__BUFCACHE_BYTES) {
        free(buf);
        return;
    }
    c->buf[c->n] = buf;
    c->cap[c->n++] = cap;
    c->bytes += cap;
}

void dt__bufcache_clear(dt__bufcache *c)
{
    for (int i = 0; i < c->n; i++)
        free(c->buf[i]);
    c->n = 0;
    c->bytes = 0;
}
