/* Data parallel as a strategy: gradient buckets start their allreduce during
 * the last micro-batch's backward (dt_ddp), and the update follows each
 * bucket as it lands, or waits for all of them when clipping needs the
 * global norm.  Dropout keys differ by rank, as the ranks' data do.  On a
 * device the buckets are the device's gradient buffer, reduced in place
 * (the communicator stages device pointers), and the update runs there. */
#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"
#include "parallel/common/strategy.h"

static void ddp_before_backward(dt_strategy *s, int micro, int count)
{
    dt_ddp_set_sync(s->impl, micro == count - 1); /* communicate on the last micro-batch only */
}

static dt_status ddp_update(dt_strategy *s, float lr, float max_norm, float *norm)
{
    if (!s->cfg.tp || dt_comm_size(s->cfg.tp) == 1)
        return dt_ddp_step(s->impl, s->opt, lr, max_norm, norm);
    /* Tensor-parallel shards: the norm needs every bucket and the group. */
    DT_CHECK(dt_ddp_finish(s->impl));
    dt_params *p = dt_model_params(s->model);
    DT_CHECK(dt_params_reduce_tp_partial(p, s->cfg.tp)); /* sequence parallel: sums of the slices' parts */
    DT_CHECK(dt_clip_grad_norm_tp(p, max_norm, s->cfg.tp, norm));
    return dt_optimizer_step(s->opt, dt_params_device_values(p), dt_params_device_grads(p), dt_params_numel(p), lr);
}

static void ddp_timing(const dt_strategy *s, double *comm, double *exposed) { dt_ddp_last_timing(s->impl, comm, exposed); }

static void ddp_destroy(dt_strategy *s) { dt_ddp_destroy(s->impl); }

/* ---- a compressor's state in checkpoints ----
 * Each rank's error feedback is its own, so each rank writes its file,
 * root/compression/step-NNNNNNNN-rank-RRRRR-of-NNNNN.bin, before the
 * checkpoint's step directory can appear (every rank's file written, agreed
 * by an allreduce, then the lead submits the checkpoint): a complete
 * checkpoint always has them.  A rank removes its files older than the
 * oldest complete checkpoint. */
static dt_status state_path(const char *root, int64_t step, int rank, int world, char *out, size_t len)
{
    int n = snprintf(out, len, "%s/compression/step-%08" PRId64 "-rank-%05d-of-%05d.bin", root, step, rank, world);
    return n >= 0 && (size_t)n < len ? DT_OK
                                     : dt__fail(DT_ERR_INVALID, "compressor state: a path under %s is too long", root);
}

static void prune_states(const char *root, int rank)
{
    int64_t *steps = NULL;
    int n = 0;
    if (dt_ckpt_list(root, &steps, &n) != DT_OK || n == 0) {
        free(steps);
        return;
    }
    int64_t oldest = steps[n - 1]; /* newest first */
    free(steps);
    char pattern[DT_CKPT_PATH_MAX];
    if (snprintf(pattern, sizeof pattern, "%s/compression/step-*-rank-%05d-of-*.bin", root, rank) >= (int)sizeof pattern)
        return;
    glob_t g;
    if (glob(pattern, 0, NULL, &g) != 0)
        return;
    for (size_t i = 0; i < g.gl_pathc; i++) {
        const char *base = strrchr(g.gl_pathv[i], '/') + 1;
        long long step;
        if (sscanf(base, "step-%lld-", &step) == 1 && step < oldest)
            unlink(g.gl_pathv[i]);
    }
    globfree(&g);
}

static dt_status ddp_save(dt_strategy *s, const dt__save_args *a)
{
    dt_ddp *d = s->impl;
    if (!dt_ddp_error(d))
        return dt__save_common(s, a);
    dt_comm *c = s->run->dp;
    int rank = dt_comm_rank(c), world = dt_comm_size(c);
    char path[DT_CKPT_PATH_MAX];
    dt_status st = state_path(a->dir, a->pr->step, rank, world, path, sizeof path);
    if (st == DT_OK) {
        char *dir = strrchr(path, '/');
        *dir = '\0';
        if ((mkdir(a->dir, 0755) != 0 && errno != EEXIST) || (mkdir(path, 0755) != 0 && errno != EEXIST))
            st = dt__fail(DT_ERR_SYSTEM, "compressor state: cannot create %s: %s", path, strerror(errno));
        *dir = '/';
    }
    if (st == DT_OK)
        st = dt_ddp_state_save(d, path);
    char why[256];
    snprintf(why, sizeof why, "%s", st == DT_OK ? "" : dt_last_error());
    int32_t failed = st != DT_OK, any = 0;
    DT_CHECK(dt_allreduce(&failed, &any, 1, DT_I32, DT_MAX, c));
    if (any)
        return dt__fail(st != DT_OK ? st : DT_ERR_PEER, "checkpoint at step %lld: %s", (long long)a->pr->step,
                        st != DT_OK ? why : "another rank could not write its compressor state");
    prune_states(a->dir, rank);
    return dt__save_common(s, a);
}

/* This rank's file of the step; on another number of ranks rank 0's (Q and
 * the steps: the error starts at zero); none (a checkpoint written without
 * compression): the steps from the step directory's name. */
static dt_status ddp_resume(dt_strategy *s, const char *step_dir)
{
    dt_ddp *d = s->impl;
    if (!dt_ddp_error(d))
        return DT_OK;
    dt_comm *c = s->run->dp;
    char dir[DT_CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", step_dir);
    for (size_t n = strlen(dir); n > 1 && dir[n - 1] == '/'; n--) /* "step-00000012/" */
        dir[n - 1] = '\0';
    step_dir = dir;
    const char *slash = strrchr(step_dir, '/'), *base = slash ? slash + 1 : step_dir;
    long long step;
    if (sscanf(base, "step-%lld", &step) != 1)
        return dt__fail(DT_ERR_INVALID, "resume: %s is not a step directory (step-NNNNNNNN)", step_dir);
    char root[DT_CKPT_PATH_MAX], path[DT_CKPT_PATH_MAX];
    snprintf(root, sizeof root, "%.*s", slash ? (int)(slash - step_dir) : 1, slash ? step_dir : ".");
    DT_CHECK(state_path(root, step, dt_comm_rank(c), dt_comm_size(c), path, sizeof path));
    if (access(path, F_OK) == 0)
        return dt_ddp_state_load(d, path, true);
    char pattern[DT_CKPT_PATH_MAX + 64];
    snprintf(pattern, sizeof pattern, "%s/compression/step-%08lld-rank-00000-of-*.bin", root, step);
    glob_t g;
    int found = glob(pattern, 0, NULL, &g);
    if (found == 0 && g.gl_pathc > 0) {
        dt_status st = dt_ddp_state_load(d, g.gl_pathv[0], false);
        globfree(&g);
        return st;
    }
    if (found == 0)
        globfree(&g);
    dt_ddp_set_steps(d, step);
    return DT_OK;
}

static const dt__strategy_ops ddp_ops = {.name = "ddp",
                                         .before_backward = ddp_before_backward,
                                         .update = ddp_update,
                                         .timing = ddp_timing,
                                         .save = ddp_save,
                                         .resume = ddp_resume,
                                         .destroy = ddp_destroy};

dt_status dt_strategy_ddp_create(dt_model *m, dt_optimizer *o, dt_comm *c, const dt_strategy_config *cfg,
                                 dt_strategy **out)
{
    if (!c)
        return dt__fail(DT_ERR_INVALID, "strategy ddp: the communicator is NULL");
    dt_strategy *s = NULL;
    DT_CHECK(dt__strategy_new(&ddp_ops, 0, m, o, cfg, &s));
    dt_ddp *d = NULL;
    dt_status st = dt_ddp_create(c, dt_model_params(m), &cfg->ddp, &d);
    if (st == DT_OK) {
        dt_ddp_set_accumulation(d, cfg->micro_batches);
        s->impl = d;
        s->key_group = (uint32_t)dt_comm_rank(c);
    }
    return dt__strategy_finish(s, st, out);
}
