/* Softmax cross-entropy, mean over the rows whose target is not -1.  Rows are
 * independent and run in parallel; their losses are summed in row order, so
 * the result is the same for any thread count. */
#include <math.h>
#include <stdlib.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/loss.h"
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

dt_status dt__ce_count_targets(const int32_t *targets, int64_t rows, int64_t classes, int64_t *counted)
{
    *counted = 0;
    for (int64_t r = 0; r < rows; r++) {
        if (targets[r] == -1)
            continue;
        if (targets[r] < 0 || targets[r] >= classes)
            return dt__fail(DT_ERR_INVALID, "cross-entropy: target %d of row %lld is outside 0..%lld", targets[r],
                            (long long)r, (long long)classes - 1);
        (*counted)++;
    }
    return DT_OK;
}

dt_status dt_softmax_cross_entropy(const dt_tensor *logits, const int32_t *targets, float *loss, dt_tensor *dlogits)
{
    int64_t C = logits->shape[logits->ndim - 1], n = dt_tensor_numel(logits) / C, counted = 0;
    DT_CHECK(dt__ce_count_targets(targets, n, C, &counted));
    double *row_loss = malloc((size_t)(n ? n : 1) * sizeof *row_loss);
    if (!row_loss)
        return dt__fail(DT_ERR_NOMEM, "cross-entropy: out of memory for %lld row losses", (long long)n);
    ce_args a = {logits->data, targets, dlogits ? dlogits->data : NULL, row_loss, C,
                 counted ? 1.0f / (float)counted : 0.0f};
    dt__parallel_for(n, 4096 / C + 1, ce_rows, &a);
    double total = 0;
    for (int64_t r = 0; r < n; r++)
        total += row_loss[r];
    free(row_loss);
    *loss = counted ? (float)(total / (double)counted) : 0.0f;
    return DT_OK;
}
