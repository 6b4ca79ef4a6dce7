/* The training command's pieces (train.c, train_setup.c, train_report.c):
 * what a run holds between its set-up, its steps and its end.  Everything
 * about how the run is split lives in the library's strategy, built from
 * the configuration's layout (run_layout.c). */
#ifndef DTRAIN_TRAIN_RUN_H
#define DTRAIN_TRAIN_RUN_H

#include "data_source.h"
#include "dtrain_cli.h"

typedef struct snapshot_verify snapshot_verify;
typedef struct snapshot_ring snapshot_ring;

typedef struct {
    const dtrain_config *c;
    const char *resume;
    dt_comm *job;      /* every rank (servers too) */
    dt_comm *world;    /* the ranks that train in lockstep: the job, or a parameter server's workers */
    dt_strategy *s;
    dtrain_recipe_state recipe; /* the run's recipe's state (it calls back into it while it lives) */
    int rank, nranks;  /* in world */
    int dpn, dpr;      /* the data-parallel group's size and this rank's place in it */
    bool lead;
    data_source d;
    dt_sampler sampler;
    dt_prefetcher *pf;
    dt_ckpt_writer *writer;
    dt_ckpt_writer *snap_writer; /* memory snapshots (the lead's; snapshot.c) */
    char snap_dir[1024];         /* DT_SNAPSHOT_DIR when memory_checkpoint_interval is on ("": off) */
    char snap_resume[2048];      /* a restart's memory snapshot to resume from */
    dt_ckpt_progress snap_pr;    /* and its progress (verified once per node) */
    snapshot_verify *snap_verify; /* that verification, running while the rank joins (snapshot_verify.c) */
    snapshot_ring *snap_ring;     /* ZeRO's shards copied to the buddy node (snapshot_ring.c; NULL: none) */
    int snap_dropped, snap_write_failures; /* failed snapshots (the first is printed) */
    int64_t snap_writes;                   /* written; their time on the training thread and behind it */
    double snap_stall_s, snap_write_s;
    bool snap_in_update;                   /* the optimizer's update copies replicated state (DT_SNAPSHOT_COPY) */
    FILE *metrics, *mon;
    bool metrics_lost;       /* a metrics record could not be written */
    int64_t metrics_lost_at; /* the step of the first such record */
    dt_straggler *strag;
    dt_ckpt_progress pr;
    char resumed_dir[2048];
    const char *thread_source;
    int64_t first_step;
    size_t act_peak;
    double predicted_step_s;      /* layout auto: the plan's step time (0: manual) */
    double steady_s;              /* the steps' wall time after the first two */
    int64_t steady_steps;
    int flight_peak;
} train_run;

/* Before joining (train_setup.c): the keys against the job's size, the
 * threads, a checkpoint_dir of another run.  0, or the exit code. */
int train_prepare(dtrain_config *c, const char *resume, bool overwrite, const char **thread_source);
/* Join, build the run, resume, open the outputs.  0, or the exit code. */
int train_setup(train_run *t, dtrain_config *c, const char *resume);
/* Free what set-up made; the exit code (3: the final checkpoint is missing). */
int train_teardown(train_run *t, int code);
/* The lead's start lines and end lines (train_report.c). */
void train_report_start(const train_run *t, int64_t nparams);
void train_report_end(const train_run *t);
/* One checkpoint at t->pr (collective): 0, or 1 when the job cannot go on. */
int train_checkpoint(train_run *t, const char *label, double *stall);

/* Memory snapshots (snapshot.c).  On a restart under dtrun, before the run
 * is built (collective over the job): the newest memory snapshot every rank
 * can load, when it is at least as new as the disk's newest checkpoint,
 * into step_dir and its progress into t->snap_pr (step_dir left empty
 * otherwise; says which on rank 0).  0, or 1. */
int dtrain_snapshot_choose(train_run *t, dtrain_config *c, char *step_dir, size_t len);
/* The lead's snapshot writer into DT_SNAPSHOT_DIR (a warning and nothing
 * when the key is set but dtrun gave no directory).  0, or 1. */
int dtrain_snapshot_start(train_run *t);
/* After step t->pr.step: a snapshot when due (collective like a
 * checkpoint); *stall: time held up by the writer.  0, or 1. */
/* The metrics file flushed after a record; its first failure (a full disk)
 * is said at once, and the run ends with status 3 (train.c). */
void train_metrics_flush(train_run *t);
/* Before step `step` (from 0): a snapshot follows it, so its update copies the state (dt_ckpt_writer_arm). */
void dtrain_snapshot_before_step(train_run *t, int64_t step);
int dtrain_snapshot_after_step(train_run *t, double *stall);
/* Collective over comm: rank src sends the files of its snapshot step
 * directory dir; the ranks with need write them into dest (made here)
 * (snapshot_copy.c).  0; 2 when a rank could not read or write them (said
 * on stderr; every rank returns 2); 1 when the job cannot go on. */
int dtrain_snapshot_copy(dt_comm *comm, int src, const char *dir, bool need, const char *dest);
void dtrain_snapshot_stop(train_run *t);
/* Before joining, on a restart's node verifier: verify the newest memory
 * snapshot of this node on a thread (nothing when not a restart, not the
 * verifier, or the thread cannot start). */
void dtrain_snapshot_verify_start(train_run *t, const dtrain_config *c);
/* Its result (joined): true with *step (-1: none verified) and, when one
 * was, *pr; false when no verification ran (then verify inline). */
bool dtrain_snapshot_verify_take(train_run *t, int64_t *step, dt_ckpt_progress *pr);
/* ZeRO without tp/pp on nodes with snapshot directories of their own
 * (snapshot_ring.c): start the buddy ring, collective over t->world;
 * lead_dir: this rank's directory is the lead's.  0 (t->snap_ring set), 1
 * when the job cannot go on, 2 when the nodes are not equal (no ring). */
int dtrain_snapshot_ring_start(train_run *t, bool lead_dir);
/* Around each snapshot's dt_strategy_save: before, the previous copy ends
 * (the wait added to *stall) and a rank outside the lead's directory gets
 * the step's temporary directory (0, or 1 printed); after, its shard moves
 * to shards-N/ and the copy to the buddy starts in the background. */
int dtrain_snapshot_ring_before(train_run *t, int64_t step, double *stall);
void dtrain_snapshot_ring_after(train_run *t, int64_t step);
/* The copy in flight ends; the ring is freed (nothing when none). */
void dtrain_snapshot_ring_stop(train_run *t);
/* SIGTERM during a snapshot's write waits for the write (snapshot_term.c):
 * install the handler once the writer runs; count each submit after it
 * and each write (its report), in either order. */
void dtrain_snapshot_term_install(void);
void dtrain_snapshot_term_submitted(void);
void dtrain_snapshot_term_written(void);
/* A restart under ZeRO without tp/pp on several nodes (snapshot_assemble.c,
 * collective over the job): the newest snapshot of rank 0 whose every shard
 * file some node holds (its own or its buddy's copy) gets the files its
 * directory lacks.  *usable false when none could be (a node and its buddy
 * both lost; printed).  0, or 1 when the job cannot go on. */
int dtrain_snapshot_assemble(train_run *t, const char *root, const char *restart, bool *usable);

#endif
