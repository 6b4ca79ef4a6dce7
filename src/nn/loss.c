/* Softmax cross-entropy, mean over the rows whose target is not -1 (the cpu
 * kernel is src/tensor/cpu_xent.c; dt_model_loss runs the model's backend). */
#include <math.h>
#include <stdlib.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/loss.h"
#include "tensor/cpu_kernels.h"

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
    return dt__cpu_xent(loss, dlogits ? dlogits->data : NULL, logits->data, targets, n, C, counted);
}
