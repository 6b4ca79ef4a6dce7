/* A pool of float buffers of one size (see buf_pool.h).  A step takes a
 * handful at a time (ZeRO: the running block's units and MAX_REDUCES in
 * flight), so a linear search is cheaper than any index. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "parallel/zero/buf_pool.h"
#include "tensor/backend.h"

static bool on_host(const dt__buf_pool *p) { return !p->ops || p->ops->host; }

static dt_status grow(dt__buf_pool *p)
{
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 8;
        dt__pool_buf *b = realloc(p->b, (size_t)cap * sizeof *b);
        if (!b)
            return dt__fail(DT_ERR_NOMEM, "out of memory for buffer pool entry %d", p->n + 1);
        p->b = b;
        p->cap = cap;
    }
    size_t bytes = (size_t)(p->size ? p->size : 1) * sizeof(float);
    float *data = on_host(p) ? malloc(bytes) : p->ops->alloc(bytes);
    if (!data)
        return dt__fail(DT_ERR_NOMEM, "out of %s memory for buffer %d of %lld floats (the pool holds %zu bytes)",
                        on_host(p) ? "host" : p->ops->name, p->n + 1, (long long)p->size, p->bytes);
    p->b[p->n++] = (dt__pool_buf){data, p->size, false};
    p->bytes += (size_t)(p->size ? p->size : 1) * sizeof(float);
    p->allocs++;
    return DT_OK;
}

dt_status dt__pool_reserve(dt__buf_pool *p, int64_t size, int count)
{
    p->size = size;
    while (count-- > 0)
        DT_CHECK(grow(p));
    return DT_OK;
}

dt_status dt__pool_take(dt__buf_pool *p, int64_t n, bool zero, float **out)
{
    *out = NULL;
    if (n > p->size)
        return dt__fail(DT_ERR_INVALID, "buffer pool: %lld floats asked of buffers of %lld", (long long)n,
                        (long long)p->size);
    int at = 0;
    while (at < p->n && p->b[at].used)
        at++;
    if (at == p->n)
        DT_CHECK(grow(p));
    if (zero && on_host(p))
        memset(p->b[at].data, 0, (size_t)n * sizeof(float));
    else if (zero)
        DT_CHECK(p->ops->zero(p->b[at].data, (size_t)n * sizeof(float)));
    p->b[at].used = true;
    *out = p->b[at].data;
    return DT_OK;
}

void dt__pool_give(dt__buf_pool *p, float *buf)
{
    for (int i = 0; buf && i < p->n; i++)
        if (p->b[i].data == buf) {
            p->b[i].used = false;
            return;
        }
}

void dt__pool_free(dt__buf_pool *p)
{
    for (int i = 0; i < p->n; i++)
        if (on_host(p))
            free(p->b[i].data);
        else
            p->ops->free(p->b[i].data);
    free(p->b);
    *p = (dt__buf_pool){.ops = p->ops};
}
