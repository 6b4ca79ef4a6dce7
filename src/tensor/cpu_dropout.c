/* The cpu backend's dropout mask: element i draws from (stream, at(i)), so
 * any thread count, a recomputed forward and a resumed run draw the same
 * mask (see the table's contract in tensor/backend.h). */
#include <stdbool.h>

#include "dtrain/base.h"
#include "tensor/cpu_kernels.h"
#include "tensor/threads.h"

#define GRAIN 16384

typedef struct {
    uint64_t stream;
    float prob, keep;
    const float *x;
    float *y, *mask;
    /* element i of a [.., slice] part is element (i / slice) * whole + first + i % slice of the whole */
    int64_t slice, whole, first;
} mask_args;

static void draw_mask(int64_t b, int64_t e, void *p)
{
    mask_args *a = p;
    bool whole = a->slice == a->whole; /* no sequence split: element i is first + i (no division per element) */
    for (int64_t i = b; i < e; i++) {
        uint64_t at = whole ? (uint64_t)(a->first + i) : (uint64_t)((i / a->slice) * a->whole + a->first + i % a->slice);
        a->mask[i] = dt_rng_key_uniform(a->stream, at) < a->prob ? 0.0f : a->keep;
        a->y[i] = a->x[i] * a->mask[i];
    }
}

void dt__cpu_dropout_fwd(float *y, float *mask, const float *x, int64_t n, uint64_t stream, float prob, float keep,
                         int64_t slice, int64_t whole, int64_t first)
{
    mask_args a = {stream, prob, keep, x, y, mask, slice, whole, first};
    dt__parallel_for(n, GRAIN, draw_mask, &a);
}
