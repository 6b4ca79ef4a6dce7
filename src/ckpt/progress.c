/* A manifest's progress values, each range-checked: a checkpoint edited with
 * a fresh manifest_crc32, or written by a buggy writer, is refused naming
 * the field and its value rather than resuming somewhere impossible. */
#include <errno.h>
#include <stdlib.h>

#include "base/status.h"
#include "ckpt/ckpt_internal.h"

/* 2^53: the whole numbers a double holds exactly. */
static const double BIG = 9007199254740992.0;

/* A whole number field in [min, max] (obj may be NULL). */
static dt_status whole(const dt_ckpt_manifest *m, const cJSON *obj, const char *field, const char *key,
                       double min, double max, int64_t *out)
{
    const cJSON *v = obj ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    if (!cJSON_IsNumber(v))
        return dt__fail(DT_ERR_INVALID, "%s: the manifest's field %s is missing or not a number", m->dir,
                        field);
    double d = v->valuedouble;
    if (!(d >= min && d <= max) || d != (double)(int64_t)d) /* the range first: the cast needs it */
        return dt__fail(DT_ERR_INVALID,
                        "%s: the manifest's field %s = %.17g is not a whole number in [%.0f, %.0f]", m->dir,
                        field, d, min, max);
    *out = (int64_t)d;
    return DT_OK;
}

/* The four rng words: 64-bit unsigned decimals, not all zero. */
static dt_status rng_words(const dt_ckpt_manifest *m, dt_rng *out)
{
    const cJSON *rng = cJSON_GetObjectItemCaseSensitive(m->json, "rng");
    if (cJSON_GetArraySize(rng) != 4)
        return dt__fail(DT_ERR_INVALID, "%s: the manifest's field rng must hold 4 words", m->dir);
    uint64_t any = 0;
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetArrayItem(rng, i);
        char *end = NULL;
        errno = 0;
        unsigned long long x = cJSON_IsString(v) ? strtoull(v->valuestring, &end, 10) : 0;
        if (!cJSON_IsString(v) || !v->valuestring[0] || *end || errno || v->valuestring[0] == '-')
            return dt__fail(DT_ERR_INVALID,
                            "%s: the manifest's field rng[%d] = %.40s is not a 64-bit unsigned decimal",
                            m->dir, i, cJSON_IsString(v) ? v->valuestring : "(not a string)");
        out->s[i] = x;
        any |= x;
    }
    if (!any)
        return dt__fail(DT_ERR_INVALID, "%s: the manifest's field rng is all zero (not a generator state)",
                        m->dir);
    return DT_OK;
}

dt_status dt_ckpt_manifest_progress(const dt_ckpt_manifest *m, const dt_ckpt_limits *lim,
                                    dt_ckpt_progress *out)
{
    const cJSON *j = m->json;
    dt_ckpt_progress got = {0};
    DT_CHECK(whole(m, j, "step", "step", 0, (double)lim->max_step, &got.step));
    if (cJSON_GetObjectItemCaseSensitive(j, "world_size")) /* absent from older checkpoints */
        DT_CHECK(whole(m, j, "world_size", "world_size", 0, 1 << 20, &got.world_size));
    /* one update per step; per worker's push (asp, ssp): the others may be ahead of the writer, up to the run's end */
    double updates = lim->update_per_worker && got.world_size > 1 ? (double)lim->max_step * (double)got.world_size
                                                                   : (double)got.step;
    DT_CHECK(whole(m, cJSON_GetObjectItemCaseSensitive(j, "optimizer"), "optimizer.steps", "steps", 0, updates,
                   &got.optimizer_steps));
    if (cJSON_GetObjectItemCaseSensitive(j, "global_batch"))
        DT_CHECK(whole(m, j, "global_batch", "global_batch", 0, BIG, &got.global_batch));
    /* The sampler: its position is within an epoch (the epoch of train_samples,
     * padded to the writer's world size), and no more epochs have passed than
     * twice the samples the steps consumed allow. */
    int64_t w = got.world_size > 0 ? got.world_size : 1;
    int64_t len = lim->train_samples > 0 ? (lim->train_samples + w - 1) / w * w : 0;
    int64_t gb = got.global_batch > 0 ? got.global_batch : lim->batch_per_rank * w;
    double max_epoch = len ? 1.0 + 2.0 * (double)got.step * (double)gb / (double)len : BIG;
    const cJSON *sampler = cJSON_GetObjectItemCaseSensitive(j, "sampler");
    DT_CHECK(whole(m, sampler, "sampler.epoch", "epoch", 0, max_epoch < BIG ? max_epoch : BIG, &got.epoch));
    DT_CHECK(whole(m, sampler, "sampler.position", "position", 0, len ? (double)len : BIG, &got.position));
    DT_CHECK(rng_words(m, &got.rng));
    *out = got;
    return DT_OK;
}
