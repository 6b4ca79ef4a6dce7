/* A checkpoint's tensor files against a parameter registry: the live
 * tensors to save, the shape check before loading, and the load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/status.h"
#include "ckpt/ckpt_internal.h"

/* The optimizer's state in the parameters' layout, by the names torch.optim
 * gives it (dt_optimizer_state_buffers): optim_m holds the first moment
 * ("exp_avg", or SGD's "momentum_buffer", or Adagrad's "sum"), optim_v the
 * second ("exp_avg_sq"); NULL where the optimizer keeps none. */
static void moments(dt_params *p, dt_optimizer *o, float **m, float **v)
{
    dt_optim_state st[4];
    int n = o ? dt_optimizer_state_buffers(o, st, 4) : 0;
    *m = *v = NULL;
    for (int i = 0; i < n; i++) {
        if (st[i].numel != dt_params_numel(p))
            continue;
        if (!strcmp(st[i].name, "exp_avg_sq"))
            *v = st[i].data;
        else if (!strcmp(st[i].name, "exp_avg") || !strcmp(st[i].name, "momentum_buffer") || !strcmp(st[i].name, "sum"))
            *m = st[i].data;
    }
}

dt_ckpt_tensors dt_ckpt_tensors_live(dt_params *p, dt_optimizer *o)
{
    float *m, *v;
    moments(p, o, &m, &v);
    return (dt_ckpt_tensors){dt_params_values(p), m, v};
}

/* A safetensors header (the JSON object after the 8-byte length); NULL when
 * unreadable or not an object. */
static cJSON *tensor_header(const char *path)
{
    FILE *f = dt__regular_file(path) == DT_OK ? fopen(path, "rb") : NULL; /* (a FIFO would block) */
    unsigned char len[8];
    cJSON *j = NULL;
    if (f && fread(len, 1, 8, f) == 8) {
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--)
            n = n << 8 | len[i];
        char *text = n < (100u << 20) ? malloc(n + 1) : NULL;
        if (text && fread(text, 1, n, f) == n) {
            text[n] = '\0';
            j = dt__json_parse(text);
        }
        if (j && !cJSON_IsObject(j)) { /* valid JSON, but not a header (an array: children without names) */
            cJSON_Delete(j);
            j = NULL;
        }
        free(text);
    }
    if (f)
        fclose(f);
    return j;
}

/* One file's header holds exactly p's parameters with their shapes. */
static dt_status check_file(const dt_ckpt_manifest *m, const char *name, const cJSON *h, dt_params *p,
                            const char *model)
{
    int tensors = 0;
    for (const cJSON *t = h ? h->child : NULL; t; t = t->next)
        tensors += strcmp(t->string, "__metadata__") != 0;
    if (!h)
        return dt__fail(DT_ERR_INVALID, "%s: %s has no readable safetensors header", m->dir, name);
    if (tensors != dt_params_count(p))
        return dt__fail(DT_ERR_INVALID,
                        "%s: %s holds %d tensors, the configuration (model %s) has %d parameters", m->dir,
                        name, tensors, model, dt_params_count(p));
    for (int i = 0; i < dt_params_count(p); i++) {
        const dt_param_info *pi = dt_params_info(p, i);
        const cJSON *shape =
            cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(h, pi->name), "shape");
        bool same = cJSON_GetArraySize(shape) == pi->ndim;
        for (int d = 0; same && d < pi->ndim; d++)
            same = cJSON_GetArrayItem(shape, d)->valuedouble == (double)pi->shape[d];
        if (same)
            continue;
        char want[128] = "", *w = want;
        for (int d = 0; d < pi->ndim; d++)
            w += snprintf(w, sizeof want - (size_t)(w - want), "%s%lld", d ? ", " : "",
                          (long long)pi->shape[d]);
        char *got = shape ? cJSON_PrintUnformatted(shape) : NULL;
        dt_status s = dt__fail(DT_ERR_INVALID,
                               "%s: %s: tensor %s has shape %s, the manifest's config (model %s) needs [%s]",
                               m->dir, name, pi->name, got ? got : "(missing)", model, want);
        free(got);
        return s;
    }
    return DT_OK;
}

dt_status dt_ckpt_manifest_check_tensors(const dt_ckpt_manifest *m, dt_params *p, const char *model)
{
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(m->json, "files");
    for (const cJSON *f = files ? files->child : NULL; f; f = f->next) {
        if (dt__ckpt_is_shard_file(m, f->string)) { /* the sharding's tensors, not the registry's */
            DT_CHECK(dt__ckpt_check_shard_file(m, f->string));
            continue;
        }
        char path[DT_CKPT_PATH_MAX];
        DT_CHECK(dt__ckpt_path(path, sizeof path, "%s/%s", m->dir, f->string));
        cJSON *h = tensor_header(path);
        dt_status s = check_file(m, f->string, h, p, model ? model : "?");
        cJSON_Delete(h);
        if (s != DT_OK)
            return s;
    }
    return DT_OK;
}

/* Whether the manifest of step_dir lists each of the n files (the files it
 * checked for size and CRC: no other is read).  One read of the manifest. */
static dt_status listed(const char *step_dir, const char *const *names, int n)
{
    dt_ckpt_manifest *m = NULL;
    DT_CHECK(dt__ckpt_manifest_read(step_dir, false, &m));
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(m->json, "files");
    dt_status s = DT_OK;
    for (int i = 0; i < n && s == DT_OK; i++)
        if (names[i] && !cJSON_GetObjectItemCaseSensitive(files, names[i]))
            s = dt__fail(DT_ERR_INVALID, "%s: the manifest does not list %s (the checkpoint holds no such state, "
                                         "or the manifest was edited)", step_dir, names[i]);
    dt_ckpt_manifest_close(m);
    return s;
}

dt_status dt_ckpt_load(const char *step_dir, dt_params *p, dt_optimizer *o)
{
    char path[DT_CKPT_PATH_MAX];
    DT_CHECK(dt__ckpt_path(path, sizeof path, "%s/" DT__CKPT_MODEL, step_dir));
    DT_CHECK(dt_safetensors_read(path, p, dt_params_values(p)));
    const char *names[2] = {DT__CKPT_OPTIM_M, DT__CKPT_OPTIM_V}, *sharded[2] = {"optim_m", "optim_v"};
    float *dst[2];
    moments(p, o, &dst[0], &dst[1]);
    int nranks = 0;
    if (dst[0])
        DT_CHECK(dt_ckpt_shards(step_dir, &nranks, NULL, NULL));
    if (dst[0] && nranks == 0) /* the moments' files, each listed */
        DT_CHECK(listed(step_dir, (const char *const[]){names[0], dst[1] ? names[1] : NULL}, 2));
    for (int i = 0; i < 2; i++) {
        if (!dst[i])
            continue;
        if (nranks > 0) { /* a sharded checkpoint: the moments put together from every rank's file */
            DT_CHECK(dt_ckpt_load_shard(step_dir, sharded[i], 0, 0, dst[i], dt_params_numel(p)));
        } else {
            DT_CHECK(dt__ckpt_path(path, sizeof path, "%s/%s", step_dir, names[i]));
            DT_CHECK(dt_safetensors_read(path, p, dst[i]));
        }
    }
    return DT_OK;
}
