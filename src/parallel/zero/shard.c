/* How ZeRO cuts a model's flat buffers over the N ranks of a data-parallel
 * group.  The unit is a block's parameters (a contiguous range of the flat
 * buffer, a tied parameter in its first holder's): padded to a multiple of
 * N, each rank owns one slice of every unit, and a rank's shard is its
 * slices one after the other.  A block's parameters are then one allgather
 * of its unit away (ZeRO-3) and its gradients one reduce-scatter (ZeRO-2),
 * and the optimizer works on the shard as on any flat array. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "parallel/zero/internal.h"

dt_status dt__zero_layout_make(dt_model *m, int nranks, int rank, dt__zero_layout *L)
{
    *L = (dt__zero_layout){.nranks = nranks, .rank = rank};
    dt_params *p = dt_model_params(m);
    int nb = dt_model_num_layers(m), np = dt_params_count(p);
    L->unit = calloc((size_t)(nb ? nb : 1), sizeof *L->unit);
    L->unit_of_block = malloc((size_t)(nb ? nb : 1) * sizeof(int));
    L->unit_of_param = malloc((size_t)(np ? np : 1) * sizeof(int));
    if (!L->unit || !L->unit_of_block || !L->unit_of_param) {
        dt__zero_layout_free(L);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    for (int b = 0; b < nb; b++) {
        int first, count;
        dt_model_block_params(m, b, &first, &count);
        L->unit_of_block[b] = -1;
        if (!count)
            continue;
        dt__zero_unit *u = &L->unit[L->nunits];
        const dt_param_info *lo = dt_params_info(p, first), *hi = dt_params_info(p, first + count - 1);
        u->block = b;
        u->first_param = first;
        u->nparams = count;
        u->flat_offset = lo->offset;
        u->numel = hi->offset + hi->numel - lo->offset;
        u->slice = (u->numel + nranks - 1) / nranks;
        u->shard_offset = L->shard_numel;
        L->shard_numel += u->slice;
        L->max_padded = u->slice * nranks > L->max_padded ? u->slice * nranks : L->max_padded;
        for (int k = first; k < first + count; k++)
            L->unit_of_param[k] = L->nunits;
        L->unit_of_block[b] = L->nunits++;
    }
    return DT_OK;
}

void dt__zero_layout_free(dt__zero_layout *L)
{
    free(L->unit);
    free(L->unit_of_block);
    free(L->unit_of_param);
    *L = (dt__zero_layout){0};
}

int64_t dt_zero_shard_numel(dt_model *m, int nranks)
{
    dt__zero_layout L;
    if (!m || nranks < 1 || dt__zero_layout_make(m, nranks, 0, &L) != DT_OK)
        return -1;
    int64_t n = L.shard_numel;
    dt__zero_layout_free(&L);
    return n;
}

int dt_zero_units(dt_model *m, int64_t *offsets, int64_t *numels, int max)
{
    dt__zero_layout L;
    if (!m || max < 0 || dt__zero_layout_make(m, 1, 0, &L) != DT_OK)
        return -1;
    for (int k = 0; k < L.nunits && k < max; k++) {
        offsets[k] = L.unit[k].flat_offset;
        numels[k] = L.unit[k].numel;
    }
    int n = L.nunits;
    dt__zero_layout_free(&L);
    return n;
}

dt_status dt_zero_decay_groups(dt_model *m, int nranks, int rank, const char *patterns, float weight_decay,
                               dt_optim_group **out, int *count)
{
    if (!m || !out || !count || nranks < 1 || rank < 0 || rank >= nranks)
        return dt__fail(DT_ERR_INVALID, "zero_decay_groups: rank %d of %d", rank, nranks);
    dt__zero_layout L;
    DT_CHECK(dt__zero_layout_make(m, nranks, rank, &L));
    dt_params *p = dt_model_params(m);
    int used = 0, cap = 16;
    dt_optim_group *all = malloc((size_t)cap * sizeof *all);
    dt_status s = all ? DT_OK : dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int k = 0; s == DT_OK && k < L.nunits; k++) {
        const dt__zero_unit *u = &L.unit[k];
        int64_t lo = (int64_t)rank * u->slice, hi = lo + u->slice < u->numel ? lo + u->slice : u->numel;
        if (lo >= hi)
            continue; /* this rank's slice is all padding */
        dt_optim_group *g = NULL;
        int n = 0;
        if ((s = dt_decay_groups(p, patterns, weight_decay, u->flat_offset + lo, hi - lo, &g, &n)) != DT_OK)
            break;
        if (used + n > cap) {
            cap = 2 * (used + n);
            dt_optim_group *grown = realloc(all, (size_t)cap * sizeof *all);
            if (!grown) {
                free(g);
                s = dt__fail(DT_ERR_NOMEM, "out of memory");
                break;
            }
            all = grown;
        }
        for (int i = 0; i < n; i++) { /* relative to the slice: shift to its place in the shard */
            g[i].offset += u->shard_offset;
            all[used++] = g[i];
        }
        free(g);
    }
    dt__zero_layout_free(&L);
    if (s != DT_OK) {
        free(all);
        return s;
    }
    *out = all;
    *count = used;
    return DT_OK;
}

/* Copy between a whole flat array and rank's shard of it (put: shard to whole). */
static dt_status move_slices(dt_model *m, int nranks, int rank, float *whole, float *shard, bool put)
{
    if (!m || !whole || !shard || nranks < 1 || rank < 0 || rank >= nranks)
        return dt__fail(DT_ERR_INVALID, "zero_shard_%s: rank %d of %d, arrays %p and %p", put ? "put" : "take", rank,
                        nranks, (void *)whole, (void *)shard);
    dt__zero_layout L;
    DT_CHECK(dt__zero_layout_make(m, nranks, rank, &L));
    for (int k = 0; k < L.nunits; k++) {
        const dt__zero_unit *u = &L.unit[k];
        int64_t lo = (int64_t)rank * u->slice, n = u->numel - lo < u->slice ? u->numel - lo : u->slice;
        if (!put && u->slice > (n > 0 ? n : 0)) /* the padding takes zeros */
            memset(shard + u->shard_offset + (n > 0 ? n : 0), 0, (size_t)(u->slice - (n > 0 ? n : 0)) * sizeof(float));
        if (n <= 0)
            continue;
        if (put)
            memcpy(whole + u->flat_offset + lo, shard + u->shard_offset, (size_t)n * sizeof(float));
        else
            memcpy(shard + u->shard_offset, whole + u->flat_offset + lo, (size_t)n * sizeof(float));
    }
    dt__zero_layout_free(&L);
    return DT_OK;
}

dt_status dt_zero_shard_take(dt_model *m, int nranks, int rank, const float *whole, float *shard)
{
    return move_slices(m, nranks, rank, (float *)whole, shard, false);
}

dt_status dt_zero_shard_put(dt_model *m, int nranks, int rank, const float *shard, float *whole)
{
    return move_slices(m, nranks, rank, whole, (float *)shard, true);
}
