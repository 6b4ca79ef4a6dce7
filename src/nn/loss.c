/* Softmax cross-entropy, mean over the rows whose target is not -1. */
#include <math.h>

#include "base/status.h"
#include "dtrain/nn.h"

dt_status dt_softmax_cross_entropy(const dt_tensor *logits, const int32_t *targets, float *loss, dt_tensor *dlogits)
{
    int64_t C = logits->shape[logits->ndim - 1], n = dt_tensor_numel(logits) / C, counted = 0;
    for (int64_t r = 0; r < n; r++) {
        if (targets[r] == -1)
            continue;
        if (targets[r] < 0 || targets[r] >= C)
            return dt__fail(DT_ERR_INVALID, "cross-entropy: target %d of row %lld is outside 0..%lld", targets[r],
                            (long long)r, (long long)C - 1);
        counted++;
    }
    double total = 0;
    float scale = counted ? 1.0f / (float)counted : 0.0f;
    for (int64_t r = 0; r < n; r++) {
        const float *z = logits->data + r * C;
        float *g = dlogits ? dlogits->data + r * C : NULL;
        if (targets[r] == -1) {
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
        total += lse - z[targets[r]];
        for (int64_t c = 0; g && c < C; c++)
            g[c] = (float)(exp((double)z[c] - lse) * scale) - (c == targets[r] ? scale : 0.0f);
    }
    *loss = counted ? (float)(total / (double)counted) : 0.0f;
    return DT_OK;
}
