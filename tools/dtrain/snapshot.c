/* Checkpoints in memory (memory_checkpoint_interval, docs/fault-tolerance.md
 * "In-memory checkpoints").  Every k steps the run saves what a resume needs
 * (the same content and format as a disk checkpoint: the weights or ZeRO
 * shards, optimizer state, sampler position, RNG key, step) into
 * DT_SNAPSHOT_DIR, a directory in /dev/shm that dtrun (--max-restarts)
 * creates for the job and removes at its end, so it outlives the ranks.
 * The disk writer's machinery does the work: the state is copied at the
 * step boundary and written by a background thread, into a temporary
 * directory renamed whole once its manifest (sizes, CRC-32 of every file,
 * its own CRC) is written, two kept: a snapshot is never half-written, and
 * a damaged one is refused by its CRC and the other one (or the disk) used.
 *
 * A restarted generation resumes from the newest snapshot every rank of
 * the job can load (the minimum over the ranks of the newest each one
 * verified), when it is at least as new as the disk's; otherwise from the
 * disk, and says so. */
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "train_run.h"

#define SNAPSHOTS_KEPT 2 /* double buffered: the newest complete one and the one before */

/* The snapshot directory dtrun gives, or NULL (not under a restarting dtrun). */
static const char *snapshot_root(const dtrain_config *c)
{
    const char *d = getenv("DT_SNAPSHOT_DIR");
    return c->memory_checkpoint_interval > 0 && d && *d ? d : NULL;
}

/* The writer's report: a snapshot every few steps is not worth a line; a
 * failed one is (the previous one stays). */
static void report(void *user, const dt_ckpt_report *r)
{
    int *failures = user;
    if (r->status != DT_OK && !(*failures)++)
        fprintf(stderr, "dtrain: memory snapshot at step %lld failed: %s; training continues%s (later failures "
                        "of memory snapshots are not printed)\n", (long long)r->step, r->error,
                r->kept_step >= 0 ? ", the previous snapshot is kept" : "");
}

/* Every rank's allreduce of one value; false (printed) when the job cannot go on. */
static bool agree(train_run *t, int64_t *v, dt_redop op)
{
    if (dt_allreduce(v, v, 1, DT_I64, op, t->job) == DT_OK)
        return true;
    fprintf(stderr, "dtrain: rank %d: agreeing on the memory snapshot: %s\n", dt_comm_rank(t->job), dt_last_error());
    return false;
}

static void from_disk(const char *restart, const char *why, int64_t disk)
{
    printf("restart %s: %s; resuming from the disk %s\n", restart, why,
           disk >= 0 ? "checkpoint" : "(none: training from the start)");
    fflush(stdout);
}

int dtrain_snapshot_choose(train_run *t, dtrain_config *c, char *step_dir, size_t len)
{
    const char *root = snapshot_root(c), *restart = getenv("DT_RESTART");
    if (!root || !restart || atoi(restart) <= 0)
        return 0;
    int me = dt_comm_rank(t->job);
    bool rank0 = me == 0;
    /* the newest snapshot this rank verifies (a damaged one is skipped with a message, the other one tried) */
    char mine[2048] = "";
    dtrain_config saved;
    dt_ckpt_progress pr;
    int64_t local = -1, best, src, missing;
    if (dt_ckpt_newest(root) >= 0 && dtrain_checkpoint_open(root, t->d.train_samples, mine, sizeof mine, &saved,
                                                             &pr) == DT_OK)
        local = pr.step;
    best = local;
    if (!agree(t, &best, DT_MAX))
        return 1;
    int64_t disk = c->checkpoint_dir[0] ? dt_ckpt_newest(c->checkpoint_dir) : -1;
    if (best < 0 || best < disk) {
        if (rank0)
            from_disk(restart, best < 0 ? "no memory snapshot is left (lost or damaged)"
                                        : "the memory snapshots are older than the disk checkpoint", disk);
        return 0;
    }
    /* A rank whose newest is older (or none: its node was replaced, or its
     * snapshot directory is not the writer's) takes the newest from the
     * lowest rank that has it, and checks it like its own. */
    src = local == best ? me : INT64_MAX;
    missing = local != best;
    if (!agree(t, &src, DT_MIN) || !agree(t, &missing, DT_MAX))
        return 1;
    if (missing) {
        char dest[2048];
        snprintf(dest, sizeof dest, "%s/.copy-rank%d", root, me);
        int r = dtrain_snapshot_copy(t->job, (int)src, mine, local != best, dest);
        if (r == 1)
            return 1;
        int64_t refused = 0;
        if (r == 0 && local != best &&
            dtrain_checkpoint_open(dest, t->d.train_samples, mine, sizeof mine, &saved, &pr) != DT_OK)
            refused = 1;
        if (r == 0 && local != best && !refused && pr.step != best)
            refused = 1;
        if (!agree(t, &refused, DT_MAX))
            return 1;
        if (r != 0 || refused) {
            if (rank0)
                from_disk(restart, "the memory snapshot could not be copied to every rank (above)", disk);
            return 0;
        }
    }
    snprintf(step_dir, len, "%s", mine);
    if (rank0) {
        printf("restart %s: resuming from the memory snapshot of step %lld (%s)", restart, (long long)best, mine);
        if (missing)
            printf("; copied from rank %lld to the ranks that had none", (long long)src);
        if (disk >= 0)
            printf("; the newest disk checkpoint is step %lld", (long long)disk);
        printf("\n");
        fflush(stdout);
    }
    return 0;
}

int dtrain_snapshot_start(train_run *t)
{
    const dtrain_config *c = t->c;
    const char *root = snapshot_root(c);
    if (c->memory_checkpoint_interval > 0 && !root) {
        if (t->lead)
            fprintf(stderr, "dtrain: warning: memory_checkpoint_interval: not under dtrun --max-restarts "
                            "(DT_SNAPSHOT_DIR is not set); no memory snapshots are taken\n");
        return 0;
    }
    if (!root)
        return 0;
    const dt_layout *l = dt_strategy_layout(t->s);
    if (l->zero_stage > 0 && l->tp == 1 && l->pp == 1 && t->nranks > 1) {
        /* ZeRO's snapshots are shard files that every rank writes into the
         * lead's step directory: they need one directory that all see (one
         * host, or hosts sharing /dev/shm).  The lead leaves a mark in it. */
        char mark[1200];
        snprintf(mark, sizeof mark, "%s/.lead-here", root);
        FILE *f = t->lead ? fopen(mark, "w") : NULL;
        if (f)
            fclose(f);
        int64_t seen = 0;
        if (dt_allreduce(&seen, &seen, 1, DT_I64, DT_SUM, t->world) != DT_OK) /* the mark is made */
            goto failed;
        FILE *g = fopen(mark, "r");
        seen = g != NULL;
        if (g)
            fclose(g);
        if (dt_allreduce(&seen, &seen, 1, DT_I64, DT_MIN, t->world) != DT_OK)
            goto failed;
        if (!seen) {
            if (t->lead)
                fprintf(stderr, "dtrain: warning: memory_checkpoint_interval: ZeRO's shard files need one snapshot "
                                "directory that every rank sees (the ranks on one host); these ranks' hosts "
                                "have their own, so no memory snapshots are taken (restarts use checkpoint_dir)\n");
            return 0;
        }
    }
    snprintf(t->snap_dir, sizeof t->snap_dir, "%s", root);
    if (!t->lead)
        return 0;
    cJSON *config = dtrain_config_to_json(c), *model = dtrain_model_config_json(c);
    char *config_text = cJSON_PrintUnformatted(config), *model_text = cJSON_PrintUnformatted(model);
    cJSON_Delete(config);
    cJSON_Delete(model);
    dt_params *wp;
    dt_optimizer *wo;
    bool stream;
    dt_strategy_checkpoint_state(t->s, &wp, &wo, &stream);
    dt_ckpt_writer_config wc = {.root = root,
                                .keep = SNAPSHOTS_KEPT,
                                .meta = {config_text, model_text, c->optimizer},
                                .kept_step = -1,
                                .report = report,
                                .user = &t->snap_write_failures,
                                .stream_model = stream};
    dt_status s = config_text && model_text ? dt_ckpt_writer_start(&wc, wp, wo, &t->snap_writer) : DT_ERR_NOMEM;
    if (s != DT_OK)
        fprintf(stderr, "dtrain: memory snapshots into %s: %s\n", root,
                config_text && model_text ? dt_last_error() : "out of memory");
    free(config_text);
    free(model_text);
    return s == DT_OK ? 0 : 1;
failed:
    fprintf(stderr, "dtrain: rank %d: memory snapshots: %s\n", t->rank, dt_last_error());
    return 1;
}

int dtrain_snapshot_after_step(train_run *t, double *stall)
{
    int64_t k = t->c->memory_checkpoint_interval;
    *stall = 0;
    if (!t->snap_dir[0] || t->pr.step % k != 0)
        return 0;
    bool dropped = false;
    if (dt_strategy_sync(t->s) != DT_OK || /* ZeRO's gathers of the updated parameters */
        dt_strategy_save(t->s, t->snap_writer, t->snap_dir, &t->pr, "", stall, &dropped) != DT_OK) {
        fprintf(stderr, "dtrain: rank %d: memory snapshot at step %lld: %s\n", t->rank, (long long)t->pr.step,
                dt_last_error());
        return 1;
    }
    if (dropped && !t->snap_dropped++) /* this snapshot is lost; the previous one stays */
        fprintf(stderr, "dtrain: memory snapshot: %s (later failures of memory snapshots are not printed)\n",
                dt_last_error());
    return 0;
}

void dtrain_snapshot_stop(train_run *t)
{
    dt_ckpt_writer_stop(t->snap_writer);
    t->snap_writer = NULL;
}
