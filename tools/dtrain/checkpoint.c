/* The trainer's side of checkpoints; the library (dtrain/ckpt.h) writes,
 * finds, verifies and loads them.  Here: the configuration into the manifest
 * and back out of it, the checks that need its meaning (it must validate and
 * build a model whose shapes the tensor files hold; the step, sampler and
 * batch ranges it implies), and the messages. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_whole.h"
#include "dtrain_cli.h"

/* What dtrain_checkpoint_open's verify needs, and what it found. */
typedef struct {
    int64_t train_samples;
    dtrain_config *c;
    dt_ckpt_progress *pr;
    int tried; /* step directories verified (each failure already printed) */
} opener;

/* The configuration in the manifest must be one this dtrain accepts and
 * builds: its tensor shapes are checked against that model. */
static dt_status check_against_config(const char *step_dir, const dt_ckpt_manifest *m, const dtrain_config *c)
{
    dt_model *model;
    if (dtrain_build_model(c, &model) != DT_OK) {
        fprintf(stderr, "dtrain: %s: the manifest's configuration does not build a model\n", step_dir);
        return DT_ERR_INVALID;
    }
    dt_status s = dt_ckpt_manifest_check_tensors(m, dt_model_params(model), c->model);
    if (s != DT_OK)
        fprintf(stderr, "dtrain: %s\n", dt_last_error());
    else /* a sharded checkpoint's units against the model's ZeRO layout */
        if ((s = dt_zero_check_sharding(m, model)) != DT_OK)
            fprintf(stderr, "dtrain: %s\n", dt_last_error());
    dt_model_destroy(model);
    return s;
}

/* dt_ckpt_verify_fn: the manifest's checksum and files (the library), its
 * configuration, every value's range, the tensors' shapes. */
static dt_status verify(void *user, const char *step_dir)
{
    opener *o = user;
    o->tried++;
    dt_ckpt_manifest *m;
    if (dt_ckpt_manifest_open(step_dir, &m) != DT_OK) {
        fprintf(stderr, "dtrain: %s\n", dt_last_error());
        return DT_ERR_INVALID;
    }
    dtrain_config *c = o->c;
    dtrain_config_load(NULL, NULL, 0, c);
    const char *text = dt_ckpt_manifest_config(m);
    cJSON *json = text ? dt_json_parse_whole(text) : NULL;
    dt_status s = dtrain_config_from_json(json, step_dir, c);
    cJSON_Delete(json);
    if (s == DT_OK && (s = dtrain_config_validate(c)) != DT_OK)
        fprintf(stderr, "dtrain: %s: the manifest's config is inconsistent (above)\n", step_dir);
    dt_ckpt_limits lim = {c->steps, o->train_samples, c->batch_size * c->grad_accumulation,
                          c->servers > 0 && strcmp(c->sync, "bsp") != 0};
    dt_ckpt_progress got;
    if (s == DT_OK && (s = dt_ckpt_manifest_progress(m, &lim, &got)) != DT_OK)
        fprintf(stderr, "dtrain: %s\n", dt_last_error());
    if (s == DT_OK)
        s = check_against_config(step_dir, m, c);
    if (s == DT_OK)
        *o->pr = got;
    dt_ckpt_manifest_close(m);
    return s;
}

static void skipped(void *user, const char *step_dir, const char *why, int older_left)
{
    (void)user, (void)why; /* verify printed why */
    fprintf(stderr, "dtrain: skipping checkpoint %s (see above); %s\n", step_dir,
            older_left ? "falling back to the previous one" : "no older one is left");
}

dt_status dtrain_checkpoint_open(const char *path, int64_t train_samples, char *step_dir, size_t len,
                                 dtrain_config *c, dt_ckpt_progress *pr)
{
    opener o = {train_samples, c, pr, 0};
    dt_status s = dt_ckpt_find(path, verify, skipped, &o, step_dir, len);
    if (s != DT_OK && o.tried == 0) /* nothing to verify: the library's message */
        fprintf(stderr, "dtrain: %s\n", dt_last_error());
    return s;
}

/* dt_ckpt_writer's report, on its thread. */
static void report(void *user, const dt_ckpt_report *r)
{
    (void)user;
    if (r->note && *r->note) /* (staging failed: said once) */
        fprintf(stderr, "dtrain: %s\n", r->note);
    if (r->status == DT_OK) {
        dtrain_progress_line("checkpoint %s%s (%.2f s in the background)\n", r->dir, r->label, r->seconds);
        return;
    }
    fprintf(stderr, "dtrain: %s\n", r->error);
    if (r->kept_step >= 0)
        fprintf(
            stderr,
            "dtrain: checkpoint at step %lld failed (above); training continues, the checkpoint of step %lld "
            "is kept (%s)\n",
            (long long)r->step, (long long)r->kept_step, r->kept_dir);
    else
        fprintf(stderr, "dtrain: checkpoint at step %lld failed (above); training continues\n",
                (long long)r->step);
}

dt_status dtrain_checkpoint_writer_start(const dtrain_config *c, dt_params *p, dt_optimizer *o, bool stream_model,
                                         int64_t kept_step, const char *kept_dir, dt_ckpt_writer **out)
{
    cJSON *config = dtrain_config_to_json(c), *model = dtrain_model_config_json(c);
    char *config_text = cJSON_PrintUnformatted(config), *model_text = cJSON_PrintUnformatted(model);
    cJSON_Delete(config);
    cJSON_Delete(model);
    dt_ckpt_writer_config wc = {.root = c->checkpoint_dir,
                                .keep = (int)c->checkpoint_keep,
                                .meta = {config_text, model_text, c->optimizer},
                                .kept_step = kept_step,
                                .kept_dir = kept_dir,
                                .report = report,
                                .stream_model = stream_model};
    dt_status s = config_text ? dt_ckpt_writer_start(&wc, p, o, out) : DT_ERR_NOMEM;
    if (s != DT_OK)
        fprintf(stderr, "dtrain: %s\n", config_text ? dt_last_error() : "out of memory");
    free(config_text);
    free(model_text);
    return s;
}

bool dtrain_params_not_finite(dt_params *p, const char *step_dir)
{
    const float *values = dt_params_values(p);
    for (int i = 0; values && i < dt_params_count(p); i++) {
        const dt_param_info *pi = dt_params_info(p, i);
        for (int64_t k = 0; k < pi->numel; k++)
            if (!isfinite(values[pi->offset + k])) {
                fprintf(stderr, "dtrain: %s: parameter %s holds %g (element %lld): refused, the model would not be "
                                "finite\n", step_dir, pi->name, (double)values[pi->offset + k], (long long)k);
                return true;
            }
    }
    return false;
}
