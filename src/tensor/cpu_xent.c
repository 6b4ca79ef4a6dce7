/* The cpu backend's softmax cross-entropy (moved from src/nn/loss.c).  Rows
 * are independent and run in parallel; their losses are summed in row order,
 * so the result is the same for any thread count. */
#include <math.h>
#include <stdlib.h>

#include "base/status.h"
#include "tensor/cpu_kernels.h"
#include "tensor/threads.h"

typedef struct {
    const float *logits;
    const int32_t *targets;
    float *grad; /* NULL: loss only */
    double *row_loss;
    int64_t classes;
    float scale;
} ce_args;

static void ce_rows(int64_t r0, int64_t r1, void *p)
{
    ce_args *a = p;
    int64_t C = a->classes;
    for (int64_t r = r0; r < r1; r++) {
        const float *z = a->logits + r * C;
        float *g = a->grad ? a->grad + r * C : NULL;
        int32_t target = a->targets[r];
        a->row_loss[r] = 0;
        if (target == -1) {
            for (int64_t c = 0; g && c < C; c++)
                g[c] = 0;
            continue;
        }
        float mx = z[0];
        for (int64_t c = 1; c < C; c++)
            mx = z[c] > mx ? z[c] : mx;
        double sum = 0;
        for (int64_t c = 0; c < C; c++)
            sum += exp((double)(z[c] - mx));
        double lse = log(sum) + mx;
        a->row_loss[r] = lse - z[target];
        for (int64_t c = 0; g && c < C; c++)
            g[c] = (float)(exp((double)z[c] - lse) * a->scale) - (c == target ? a->scale : 0.0f);
    }
}

dt_status dt__cpu_xent(float *loss, float *dlogits, const float *logits, const int32_t *targets, int64_t n, int64_t C,
                       int64_t counted)
{
    double *row_loss = malloc((size_t)(n ? n : 1) * sizeof *row_loss);
    if (!row_loss)
        return dt__fail(DT_ERR_NOMEM, "cross-entropy: out of memory for %lld row losses", (long long)n);
    ce_args a = {logits, targets, dlogits, row_loss, C, counted ? 1.0f / (float)counted : 0.0f};
    dt__parallel_for(n, 4096 / C + 1, ce_rows, &a);
    double total = 0;
    for (int64_t r = 0; r < n; r++)
        total += row_loss[r];
    free(row_loss);
    *loss = counted ? (float)(total / (double)counted) : 0.0f;
    return DT_OK;
}
