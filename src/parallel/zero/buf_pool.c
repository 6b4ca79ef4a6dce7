/* A pool of float buffers of one size (see buf_pool.h).  A step takes a
 * handful at a time (ZeRO: the running block's units and MAX_REDUCES in
 * flight), so a linear search is cheaper than any index. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "parallel/zero/buf_pool.h"

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
    float *data = malloc((size_t)(p->size ? p->size : 1) * sizeof(float));
    if (!data)
        return dt__fail(DT_ERR_NOMEM, "out of memory for buffer %d of %lld floats (the pool holds %zu bytes)",
                        p->n + 1, (long long)p->size, p->bytes);
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
    p->b[at].used = true;
    if (zero)
        memset(p->b[at].data, 0, (size_t)n * sizeof(float));
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
        free(p->b[i].data);
    free(p->b);
    *p = (dt__buf_pool){0};
}
