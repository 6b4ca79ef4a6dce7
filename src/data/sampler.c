#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/data.h"

static int64_t epoch_len(const dt_sampler *s)
{
    int64_t w = s->world;
    return s->drop_last ? s->size / w * w : (s->size + w - 1) / w * w;
}

int64_t dt_sampler_per_rank(const dt_sampler *s) { return epoch_len(s) / s->world; }

static void build_perm(dt_sampler *s)
{
    for (int64_t i = 0; i < s->size; i++)
        s->perm[i] = i;
    if (s->shuffle) {
        dt_rng rng;
        dt_rng_seed(&rng, s->seed * 0x9e3779b97f4a7c15ull + (uint64_t)s->epoch);
        for (int64_t i = s->size - 1; i > 0; i--) {
            int64_t j = (int64_t)(dt_rng_next(&rng) % (uint64_t)(i + 1));
            int64_t t = s->perm[i];
            s->perm[i] = s->perm[j];
            s->perm[j] = t;
        }
    }
    s->perm_epoch = s->epoch;
}

static dt_status check(int64_t size, int rank, int world)
{
    if (size <= 0 || world < 1 || rank < 0 || rank >= world)
        return dt__fail(DT_ERR_INVALID, "sampler: dataset of %lld samples, rank %d of %d", (long long)size, rank, world);
    return DT_OK;
}

dt_status dt_sampler_init(dt_sampler *s, int64_t size, uint64_t seed, int rank, int world, bool shuffle,
                          bool drop_last)
{
    memset(s, 0, sizeof *s);
    DT_CHECK(check(size, rank, world));
    if (drop_last && size < world)
        return dt__fail(DT_ERR_INVALID, "sampler: %lld samples cannot give each of %d ranks one with drop_last",
                        (long long)size, world);
    s->size = size;
    s->seed = seed;
    s->rank = rank;
    s->world = world;
    s->shuffle = shuffle;
    s->drop_last = drop_last;
    if (!(s->perm = malloc((size_t)size * sizeof *s->perm)))
        return dt__fail(DT_ERR_NOMEM, "out of memory for the sampler");
    build_perm(s);
    return DT_OK;
}

int64_t dt_sampler_next(dt_sampler *s, int64_t batch, int64_t *indices)
{
    int64_t len = epoch_len(s);
    if (s->position >= len) {
        s->epoch++;
        s->position = 0;
    }
    if (s->perm_epoch != s->epoch)
        build_perm(s);
    int64_t n = 0;
    /* every rank takes `batch` samples per step: the global cursor moves batch*world */
    for (; n < batch && s->position + (int64_t)s->world * n + s->rank < len; n++)
        indices[n] = s->perm[(s->position + (int64_t)s->world * n + s->rank) % s->size];
    int64_t step = (int64_t)s->world * batch;
    s->position = s->position + step > len ? len : s->position + step;
    return n;
}

dt_status dt_sampler_seek(dt_sampler *s, int64_t epoch, int64_t position, int rank, int world)
{
    DT_CHECK(check(s->size, rank, world));
    if (epoch < 0 || position < 0)
        return dt__fail(DT_ERR_INVALID, "sampler: cannot seek to epoch %lld position %lld", (long long)epoch,
                        (long long)position);
    s->rank = rank;
    s->world = world;
    s->epoch = epoch;
    s->position = position;
    build_perm(s);
    return DT_OK;
}

void dt_sampler_free(dt_sampler *s)
{
    free(s->perm);
    s->perm = NULL;
}
