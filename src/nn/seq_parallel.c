/* Sequence parallelism's exchanges (Megatron-LM's later form): outside the
 * tensor-parallel regions each rank of the group keeps Tl = T/t positions
 * of every sequence, [B, Tl, D] holding rows r*Tl .. r*Tl+Tl-1 of [B, T, D].
 * Entering a region the slices are gathered (allgather) and leaving it the
 * partial results are summed and split again (reduce-scatter): the same
 * bytes as the allreduce they replace, the activations between regions
 * (LayerNorm, dropout, residual) 1/t of them.  The collectives exchange
 * contiguous per-rank blocks [t][B][Tl][D]; a copy puts them in sequence
 * order. */
#include <string.h>

#include "base/status.h"
#include "nn/tp.h"

dt_status dt__sp_gather(const dt_tp_group *tp, const float *local, float *whole, float *scratch, int64_t B,
                        int64_t Tl, int64_t D)
{
    int t = tp->size;
    size_t block = (size_t)(Tl * D);
    DT_CHECK(dt__tp_allgather(tp, local, scratch, B * Tl * D));
    for (int q = 0; q < t; q++)
        for (int64_t b = 0; b < B; b++)
            memcpy(whole + ((size_t)b * (size_t)t + (size_t)q) * block, scratch + ((size_t)q * (size_t)B + (size_t)b) * block,
                   block * sizeof *whole);
    return DT_OK;
}

dt_status dt__sp_reduce_scatter(const dt_tp_group *tp, const float *whole, float *local, float *scratch,
                                int64_t B, int64_t Tl, int64_t D)
{
    int t = tp->size;
    size_t block = (size_t)(Tl * D);
    for (int q = 0; q < t; q++)
        for (int64_t b = 0; b < B; b++)
            memcpy(scratch + ((size_t)q * (size_t)B + (size_t)b) * block, whole + ((size_t)b * (size_t)t + (size_t)q) * block,
                   block * sizeof *whole);
    return dt__tp_reduce_scatter_sum(tp, scratch, local, B * Tl * D);
}
