/* Vocabulary-parallel softmax cross-entropy (Megatron-LM): each rank of the
 * tensor-parallel group holds the logits of its slice of the classes,
 * [vocab_start, vocab_start + C_local), and the full logits are never
 * gathered.  Per row, three numbers cross the group:
 *   m = max over all classes     (allreduce MAX of the local maxima)
 *   s = sum of exp(z - m)        (allreduce SUM of the local sums)
 *   z_t = the target's logit     (allreduce SUM: only its owner adds it)
 * and loss_row = log(s) + m - z_t, dz = softmax(z) - onehot(t), as the
 * ordinary loss computes them; 3 x rows floats per call instead of
 * rows x classes.  The row losses are summed in row order, so every rank
 * gets the same loss. */
#include <math.h>
#include <stdlib.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/loss.h"
#include "nn/tp.h"

dt_status dt_softmax_cross_entropy_parallel(const dt_tensor *logits, const int32_t *targets, int64_t vocab,
                                            int64_t vocab_start, const dt_tp_group *tp, float *loss,
                                            dt_tensor *dlogits)
{
    if (!logits || !targets || !loss)
        return dt__fail(DT_ERR_INVALID, "vocabulary-parallel cross-entropy: %s is NULL",
                        !logits ? "logits" : !targets ? "targets" : "loss");
    DT_CHECK(dt__tp_check(tp, "vocabulary-parallel cross-entropy"));
    int64_t C = logits->shape[logits->ndim - 1], n = dt_tensor_numel(logits) / C;
    if (vocab_start < 0 || vocab_start + C > vocab)
        return dt__fail(DT_ERR_INVALID,
                        "vocabulary-parallel cross-entropy: classes %lld..%lld of this rank are outside the vocabulary "
                        "of %lld",
                        (long long)vocab_start, (long long)(vocab_start + C - 1), (long long)vocab);
    int64_t counted = 0;
    DT_CHECK(dt__ce_count_targets(targets, n, vocab, &counted));
    /* rows x {max}, then rows x {sum, target logit} */
    double *mx = malloc((size_t)(n ? n : 1) * sizeof *mx), *st = malloc((size_t)(n ? 2 * n : 1) * sizeof *st);
    dt_status s = mx && st ? DT_OK : dt__fail(DT_ERR_NOMEM, "cross-entropy: out of memory for %lld rows", (long long)n);
    for (int64_t r = 0; s == DT_OK && r < n; r++) {
        const float *z = logits->data + r * C;
        float m = z[0];
        for (int64_t c = 1; c < C; c++)
            m = z[c] > m ? z[c] : m;
        mx[r] = m;
    }
    if (s == DT_OK && n)
        s = tp->allreduce_max_f64(tp->user, mx, n);
    for (int64_t r = 0; s == DT_OK && r < n; r++) {
        const float *z = logits->data + r * C;
        float m = (float)mx[r];
        double sum = 0;
        for (int64_t c = 0; c < C; c++)
            sum += exp((double)(z[c] - m));
        int64_t t = (int64_t)targets[r] - vocab_start;
        st[2 * r] = sum;
        st[2 * r + 1] = targets[r] != -1 && t >= 0 && t < C ? (double)z[t] : 0.0;
    }
    if (s == DT_OK && n)
        s = tp->allreduce_sum_f64(tp->user, st, 2 * n);
    double total = 0;
    float scale = counted ? 1.0f / (float)counted : 0.0f;
    for (int64_t r = 0; s == DT_OK && r < n; r++) {
        float *g = dlogits ? dlogits->data + r * C : NULL;
        if (targets[r] == -1) {
            for (int64_t c = 0; g && c < C; c++)
                g[c] = 0;
            continue;
        }
        double lse = log(st[2 * r]) + (float)mx[r];
        total += lse - st[2 * r + 1];
        const float *z = logits->data + r * C;
        int64_t t = (int64_t)targets[r] - vocab_start;
        for (int64_t c = 0; g && c < C; c++)
            g[c] = (float)(exp((double)z[c] - lse) * scale) - (c == t ? scale : 0.0f);
    }
    free(mx);
    free(st);
    if (s != DT_OK)
        return dt__wrap(s, "vocabulary-parallel cross-entropy: ");
    *loss = counted ? (float)(total / (double)counted) : 0.0f;
    return DT_OK;
}
