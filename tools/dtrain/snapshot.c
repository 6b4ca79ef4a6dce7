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
    train_run *t = user; /* (its snapshot fields are the writer thread's until dtrain_snapshot_stop joins it) */
    if (r->note && *r->note) /* (staging failed: said once) */
        fprintf(stderr, "dtrain: %s\n", r->note);
    if (r->status == DT_OK) {
        t->snap_writes++;
        t->snap_write_s += r->seconds;
    }
    if (r->status != DT_OK && !t->snap_write_failures++)
        fprintf(stderr, "dtrain: memory snapshot at step %lld failed: %s; training continues%s (later failures "
                        "of memory snapshots are not printed)\n", (long long)r->step, r->error,
                r->kept_step >= 0 ? ", the previous snapshot is kept" : "");
    dtrain_snapshot_term_written(); /* a SIGTERM that waited for this write acts now */
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

/* The newest snapshot in this node's directory, verified once per node (by
 * its local rank 0: the files and their CRCs, the configuration, the model's
 * shapes) and told to the node's other ranks: *local (-1: none) and, on the
 * verifying rank, its progress.  false when the job cannot go on. */
static bool node_newest(train_run *t, const char *root, int64_t *local, dt_ckpt_progress *pr)
{
    const char *nr = getenv("DT_NODE_RANK"), *lr = getenv("DT_LOCAL_RANK");
    int64_t node = nr && *nr ? atoll(nr) : dt_comm_rank(t->job), nodes = node + 1; /* no dtrun: a node per rank */
    bool verifier = !(lr && *lr) || atoi(lr) == 0;
    if (!agree(t, &nodes, DT_MAX))
        return false;
    int64_t *seen = malloc((size_t)nodes * sizeof *seen);
    if (!seen) {
        fprintf(stderr, "dtrain: rank %d: out of memory\n", dt_comm_rank(t->job));
        return false;
    }
    for (int64_t i = 0; i < nodes; i++)
        seen[i] = -2; /* (MAX keeps each node's verifier's value) */
    char dir[2048];
    dtrain_config saved;
    if (verifier && !dtrain_snapshot_verify_take(t, &seen[node], pr)) { /* (not verified while joining) */
        seen[node] = -1;
        if (dt_ckpt_newest(root) >= 0 &&
            dtrain_checkpoint_open(root, t->d.train_samples, dir, sizeof dir, &saved, pr) == DT_OK)
            seen[node] = pr->step;
    }
    bool ok = dt_allreduce(seen, seen, (size_t)nodes, DT_I64, DT_MAX, t->job) == DT_OK;
    if (!ok)
        fprintf(stderr, "dtrain: rank %d: agreeing on the memory snapshot: %s\n", dt_comm_rank(t->job),
                dt_last_error());
    *local = seen[node] >= 0 ? seen[node] : -1;
    free(seen);
    return ok;
}

int dtrain_snapshot_choose(train_run *t, dtrain_config *c, char *step_dir, size_t len)
{
    const char *root = snapshot_root(c), *restart = getenv("DT_RESTART");
    if (!root || !restart || atoi(restart) <= 0)
        return 0;
    int me = dt_comm_rank(t->job);
    bool rank0 = me == 0;
    const char *lr = getenv("DT_LOCAL_RANK");
    bool verifier = !(lr && *lr) || atoi(lr) == 0;
    char mine[2048] = "";
    dtrain_config saved;
    dt_ckpt_progress pr = {0};
    int64_t local, best, src, missing;
    int64_t disk = c->checkpoint_dir[0] ? dt_ckpt_newest(c->checkpoint_dir) : -1;
    bool usable = true;
    if (c->zero_stage > 0 && c->tp <= 1 && c->pp <= 1 && c->servers == 0 && dt_comm_size(t->job) > 1) {
        int64_t early;
        dt_ckpt_progress early_pr;
        /* (layout auto chose ZeRO after the verification started: it may predate the shards put together) */
        dtrain_snapshot_verify_take(t, &early, &early_pr);
        if (dtrain_snapshot_assemble(t, root, restart, &usable) != 0)
            return 1;
    }
    if (!usable) {
        if (rank0)
            from_disk(restart, "no memory snapshot is complete (a node and its buddy node were both lost: above)",
                      disk);
        return 0;
    }
    if (!node_newest(t, root, &local, &pr))
        return 1;
    if (local >= 0 && dt_ckpt_step_dir(root, local, mine, sizeof mine) != DT_OK)
        local = -1;
    best = local;
    if (!agree(t, &best, DT_MAX))
        return 1;
    if (best < 0 || best < disk) {
        if (rank0)
            from_disk(restart, best < 0 ? "no memory snapshot is left (lost or damaged)"
                                        : "the memory snapshots are older than the disk checkpoint", disk);
        return 0;
    }
    /* A rank whose node's newest is older (or none: its node was replaced,
     * or its snapshot directory is not the writer's) takes the newest from
     * the lowest rank that verified it, and checks it like its own. */
    src = local == best && verifier ? me : INT64_MAX;
    missing = local != best;
    if (!agree(t, &src, DT_MIN) || !agree(t, &missing, DT_MAX))
        return 1;
    if (missing) { /* one copy per node that lacks it: its verifier receives it, its other ranks read it */
        char dest[2048];
        snprintf(dest, sizeof dest, "%s/.copy-%08lld", root, (long long)best);
        bool receiver = local != best && verifier;
        int r = dtrain_snapshot_copy(t->job, (int)src, mine, receiver, dest);
        if (r == 1)
            return 1;
        int64_t refused = 0;
        if (r == 0 && receiver &&
            (dtrain_checkpoint_open(dest, t->d.train_samples, mine, sizeof mine, &saved, &pr) != DT_OK ||
             pr.step != best))
            refused = 1;
        if (local != best)
            snprintf(mine, sizeof mine, "%s", dest);
        if (!agree(t, &refused, DT_MAX))
            return 1;
        if (r != 0 || refused) {
            if (rank0)
                from_disk(restart, "the memory snapshot could not be copied to every rank (above)", disk);
            return 0;
        }
    }
    /* every rank resumes the same step: the verifier's progress is everyone's */
    if (dt_broadcast(&pr, sizeof pr, DT_U8, (int)src, t->job) != DT_OK) {
        fprintf(stderr, "dtrain: rank %d: the memory snapshot's progress: %s\n", me, dt_last_error());
        return 1;
    }
    t->snap_pr = pr;
    snprintf(step_dir, len, "%s", mine);
    if (rank0) {
        printf("restart %s: resuming from the memory snapshot of step %lld (%s)", restart, (long long)best, mine);
        if (missing)
            printf("; copied from rank %lld to the nodes that had none", (long long)src);
        if (disk >= 0)
            printf("; the newest disk checkpoint is step %lld", (long long)disk);
        printf("\n");
        fflush(stdout);
    }
    return 0;
}

/* Where the copy of replicated state runs (DT_SNAPSHOT_COPY, *in_update):
 * in the optimizer's update (the state read from memory once: the update
 * writes it into the snapshot too, from the cache, but the update takes
 * longer) or on the writer thread while the next step computes (the state
 * read again, on another core).  auto: in the update where this host's
 * ranks' compute threads take every core available to this rank (a copy
 * beside them would take its time from theirs), else beside them.  false
 * (printed) for another word. */
static bool copy_place(const train_run *t, bool *in_update)
{
    const char *v = getenv("DT_SNAPSHOT_COPY");
    if (!v || !*v || strcmp(v, "auto") == 0) {
        int64_t threads = dt_get_threads(), cores = dt_cores_available();
        *in_update = dt_cpus_bound() ? threads >= cores : threads * dt_local_ranks() >= cores;
        return true;
    }
    *in_update = strcmp(v, "update") == 0;
    if (*in_update || strcmp(v, "background") == 0)
        return true;
    fprintf(stderr, "dtrain: rank %d: DT_SNAPSHOT_COPY='%s': expected auto, update or background\n", t->rank, v);
    return false;
}

int dtrain_snapshot_start(train_run *t)
{
    const dtrain_config *c = t->c;
    const char *root = snapshot_root(c);
    if (root && !copy_place(t, &t->snap_in_update))
        return 1;
    if (c->memory_checkpoint_interval > 0 && !root) {
        if (t->lead)
            fprintf(stderr, "dtrain: warning: memory_checkpoint_interval: not under dtrun --max-restarts "
                            "(DT_SNAPSHOT_DIR is not set); no memory snapshots are taken\n");
        return 0;
    }
    if (!root)
        return 0;
    const dt_layout *l = dt_strategy_layout(t->s);
    bool ring = false, own = false;
    bool zero = l->zero_stage > 0 && l->tp == 1 && l->pp == 1 && t->nranks > 1;
    bool replicated = dt_strategy_state_replicated(t->s) && t->nranks > 1;
    if (zero || replicated) {
        /* ZeRO's snapshots are shard files that every rank writes into its
         * directory: the lead's step directory when all see one (one host, or
         * hosts sharing /dev/shm), else each node its own, copied to a buddy
         * node (snapshot_ring.c).  The lead leaves a mark in its directory.
         * Replicated state (data parallelism) is whole on every rank: a
         * node with a directory of its own has its first rank write the
         * same snapshot there, so that a restart after a rank's death finds
         * it on every node and copies nothing (37 MiB of gpt-mini over the
         * link: 0.3 to 0.5 s of the restart); only a replaced node needs a
         * copy then. */
        char mark[1200];
        snprintf(mark, sizeof mark, "%s/.lead-here", root);
        FILE *f = t->lead ? fopen(mark, "w") : NULL;
        if (f)
            fclose(f);
        int64_t seen = 0;
        if (dt_allreduce(&seen, &seen, 1, DT_I64, DT_SUM, t->world) != DT_OK) /* the mark is made */
            goto failed;
        FILE *g = fopen(mark, "r");
        int64_t here = g != NULL;
        if (g)
            fclose(g);
        seen = here;
        if (dt_allreduce(&seen, &seen, 1, DT_I64, DT_MIN, t->world) != DT_OK)
            goto failed;
        if (!seen && replicated) {
            const char *lr = getenv("DT_LOCAL_RANK");
            own = !here && (!(lr && *lr) || atoi(lr) == 0);
        } else if (!seen) {
            snprintf(t->snap_dir, sizeof t->snap_dir, "%s", root);
            int r = dtrain_snapshot_ring_start(t, here != 0);
            if (r == 1)
                return 1;
            if (r == 2) {
                t->snap_dir[0] = '\0';
                if (t->lead)
                    fprintf(stderr, "dtrain: warning: memory_checkpoint_interval: ZeRO's shard files in snapshot "
                                    "directories of their own per node need nodes with equal numbers of ranks; "
                                    "no memory snapshots are taken (restarts use checkpoint_dir)\n");
                return 0;
            }
            ring = true;
        }
    }
    snprintf(t->snap_dir, sizeof t->snap_dir, "%s", root);
    if (!t->lead && !own)
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
                                .user = t,
                                .stream_model = stream,
                                /* the live state, changed only by the optimizer's updates: the
                                 * writer thread copies it while the next step's forward runs */
                                .defer_copy = dt_strategy_state_replicated(t->s)};
    dt_status s = config_text && model_text ? dt_ckpt_writer_start(&wc, wp, wo, &t->snap_writer) : DT_ERR_NOMEM;
    if (s == DT_OK && ring) /* the other nodes' shards are in their own directories */
        s = dt_ckpt_writer_shards_elsewhere(t->snap_writer, true);
    if (s == DT_OK)
        dtrain_snapshot_term_install();
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

void dtrain_snapshot_before_step(train_run *t, int64_t step)
{
    int64_t k = t->c->memory_checkpoint_interval;
    if (t->snap_writer && t->snap_in_update && (step + 1) % k == 0)
        dt_ckpt_writer_arm(t->snap_writer);
}

int dtrain_snapshot_after_step(train_run *t, double *stall)
{
    int64_t k = t->c->memory_checkpoint_interval;
    *stall = 0;
    if (!t->snap_dir[0] || t->pr.step % k != 0)
        return 0;
    bool dropped = false;
    if (dtrain_snapshot_ring_before(t, t->pr.step, stall) != 0)
        return 1;
    dt_status st = dt_strategy_sync(t->s); /* ZeRO's gathers of the updated parameters */
    if (st == DT_OK)
        st = dt_strategy_save(t->s, t->snap_writer, t->snap_dir, &t->pr, "", stall, &dropped);
    if (t->snap_writer && st == DT_OK && !dropped) /* submitted: a SIGTERM now waits for its write */
        dtrain_snapshot_term_submitted();
    if (st != DT_OK) {
        fprintf(stderr, "dtrain: rank %d: memory snapshot at step %lld: %s\n", t->rank, (long long)t->pr.step,
                dt_last_error());
        return 1;
    }
    dtrain_snapshot_ring_after(t, t->pr.step);
    t->snap_stall_s += *stall;
    if (dropped && !t->snap_dropped++) /* this snapshot is lost; the previous one stays */
        fprintf(stderr, "dtrain: memory snapshot: %s (later failures of memory snapshots are not printed)\n",
                dt_last_error());
    return 0;
}

void dtrain_snapshot_stop(train_run *t)
{
    dtrain_snapshot_ring_stop(t);
    if (!t->snap_writer)
        return;
    double waited = dt_ckpt_writer_waited(t->snap_writer), tee_s = 0;
    double teed = dt_ckpt_writer_teed(t->snap_writer, &tee_s);
    dt_ckpt_writer_stop(t->snap_writer);
    t->snap_writer = NULL;
    char by_update[128] = "";
    if (teed > 0)
        snprintf(by_update, sizeof by_update, ", the copy in the update (%.0f%% of it)", 100 * teed);
    if (t->snap_writes > 0 && t->lead) /* what they cost: what held the step up, the copy and write behind it */
        dtrain_progress_line("memory snapshots: %lld written into %s, each %.1f ms on the training thread (the "
                             "submit%s, and waits for the copy) and %.1f ms in the background (the copy and the "
                             "write)\n", (long long)t->snap_writes, t->snap_dir,
                             1e3 * (t->snap_stall_s + waited + tee_s) / (double)t->snap_writes, by_update,
                             1e3 * t->snap_write_s / (double)t->snap_writes);
}
