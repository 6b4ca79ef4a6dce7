/* A pool of float buffers (see buf_pool.h).  A step takes a handful at a
 * time (ZeRO: the running block's units and MAX_REDUCES in flight), so a
 * linear search is cheaper than any index. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "parallel/buf_pool.h"

dt_status dt__pool_take(dt__buf_pool *p, int64_t n, bool zero, float **out)
{
    *out = NULL;
    int best = -1;
    for (int i = 0; i < p->n; i++)
        if (!p->b[i].used && p->b[i].cap >= n && (best < 0 || p->b[i].cap < p->b[best].cap))
            best = i;
    if (best < 0) {
        if (p->n == p->cap) {
            int cap = p->cap ? 2 * p->cap : 8;
            dt__pool_buf *b = realloc(p->b, (size_t)cap * sizeof *b);
            if (!b)
                return dt__fail(DT_ERR_NOMEM, "out of memory for buffer pool entry %d", p->n + 1);
            p->b = b;
            p->cap = cap;
        }
        float *data = malloc((size_t)(n ? n : 1) * sizeof(float));
        if (!data)
            return dt__fail(DT_ERR_NOMEM, "out of memory for a buffer of %lld floats (the pool holds %zu bytes)",
                            (long long)n, p->bytes);
        p->b[p->n] = (dt__pool_buf){data, n, false};
        p->bytes += (size_t)(n ? n : 1) * sizeof(float);
        p->allocs++;
        best = p->n++;
    }
    p->b[best].used = true;
    if (zero)
        memset(p->b[best].data, 0, (size_t)n * sizeof(float));
    *out = p->b[best].data;
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
