/* dtrun internals: options, node join, spawning and supervising ranks. */
#ifndef DTRUN_H
#define DTRUN_H

#include <sched.h>
#include <stdbool.h>
#include <sys/types.h>

#include "dtrain/dtrain.h"

/* Seconds a store request may take: a healthy store answers within
 * milliseconds, and a node whose link is down must not wait the client's
 * default 30 s per request. */
#define DTRUN_STORE_IO_TIMEOUT 10.0

typedef struct {
    int nproc, nnodes, node_rank;
    int nnodes_min;      /* --nnodes MIN:MAX: nnodes is MAX; MIN == MAX unless elastic */
    int max_restarts;    /* restarts after failures (membership changes do not count) */
    double rejoin_timeout; /* elastic: how long a generation waits for missing nodes */
    char master_host[256];
    int master_port; /* 0: pick a free port (single node only) */
    char token[256];
    char monitor[300];     /* --monitor ADDR:PORT ("": none) */
    bool monitor_remote;   /* --monitor-allow-remote: a non-loopback ADDR, requests need the token */
    double monitor_linger; /* --monitor-linger S: serve the final state this long after the job */
    double join_timeout;
    bool prefix;
    bool bind;   /* --bind auto (default): a block of CPUs per local rank */
    int servers; /* --servers: DT_PS_SERVERS for the ranks (0: not set) */
    char timeline[4096]; /* --timeline FILE, made absolute ("": none) */
    char snapshot_dir[512]; /* the ranks' DT_SNAPSHOT_DIR ("": none; snapshots.c) */
    char **argv; /* PROGRAM ARGS... */
} dtrun_opts;

/* Where this node's ranks sit in the job, decided by node 0 for each
 * generation (the first run is generation 0, each restart the next). */
typedef struct {
    int world_size, first_rank, nodes, generation;
} dtrun_layout;

typedef enum { DTRUN_JOINED, DTRUN_LATE, DTRUN_STOP, DTRUN_LOST } dtrun_join_result;

typedef struct {
    pid_t pid;
    int rank;
    int out_fd, err_fd; /* pipes, -1 once closed */
    char out_buf[4096], err_buf[4096];
    size_t out_len, err_len;
    bool exited;
    int status;
    /* stderr lines that pass another rank's failure on (the library ends
     * them "(reported by rank N ...)"), held until the failure's own reason
     * is out (supervise.c): at the end, or after a few seconds */
    char *held;
    size_t held_len;
    double held_at;
    bool secondary; /* it printed such a line */
    bool spoke;     /* it printed another stderr line (an error of its own, a warning) */
} dtrun_child;

/* Parse argv; prints usage and exits for --help / bad options. */
void dtrun_parse(int argc, char **argv, dtrun_opts *o);

/* --rank-table FILE: sets nnodes, node_rank (found when not given), nproc
 * and (unless --master was given) the master from the file; exits 2 with a
 * message naming the bad entry (rank_table.c). */
void dtrun_rank_table(const char *path, bool have_node_rank, bool have_master, dtrun_opts *o);

/* Register this node in generation g and wait for node 0's membership
 * decision.  Node 0 makes it: every node joined, or (elastic) at least MIN
 * after --rejoin-timeout; stop_reason non-NULL makes node 0 end the job.
 * DTRUN_LATE: the generation was closed without this node (it joins the
 * next); DTRUN_STOP: the job ends, why says so; DTRUN_LOST: the store did
 * not answer (why says how). */
dtrun_join_result dtrun_join(const dtrun_opts *o, dt_store_client *store, int g, const char *stop_reason,
                             dtrun_layout *out, char *why, size_t why_len);

/* Run the job: generations of join, spawn, supervise, until success, a
 * failure with no restart left, or a signal.  Returns dtrun's exit code. */
int dtrun_run(const dtrun_opts *o, dt_store_client **store);

/* --timeline: merge the files of ranks first..first+n-1 (PREFIX.rank<R>.json,
 * those that exist) into FILE, remove them, say where it is.  0 when done. */
int dtrun_timeline_merge(const char *prefix, const char *file, int first, int n);
/* The ranks this node ran last (dtrun_spawn sets them). */
extern int dtrun_last_first_rank, dtrun_last_nproc;

/* Whether prog (the ranks' program: a path, or a name looked up on PATH
 * as the exec will) exists and may be executed; false with why filled
 * (naming PATH's directories when looked up there). */
bool dtrun_program_found(const char *prog, char *why, size_t len);
/* Fork+exec the local ranks with the DT_* environment; *started counts the
 * children running (kids[0..*started-1]) even when a later one failed. */
dt_status dtrun_spawn(const dtrun_opts *o, const dtrun_layout *l, dtrun_child *kids, int *started);
/* --bind auto: the CPUs local rank `local` is bound to, when this node has
 * at least two ranks and at least one allowed CPU per rank; returns how many
 * CPUs (0: no binding, out is empty). */
int dtrun_cpu_block(const dtrun_opts *o, int local, cpu_set_t *out);

/* Called about every 200 ms while ranks run: true stops them (SIGTERM, then
 * SIGKILL), e.g. because another node failed. */
typedef bool (*dtrun_stop_hook)(void *arg);
/* Wake dtrun_supervise's loop from another thread: it calls its hook at
 * once instead of at the hook's next period. */
void dtrun_supervise_wake(void);

/* A thread that waits on dtrun/g<generation>/why (written by the node that
 * ends the generation) and wakes the supervision when it appears
 * (end_watch.c).  NULL when it cannot start (the periodic look remains). */
typedef struct dtrun_end_watch dtrun_end_watch;
dtrun_end_watch *dtrun_end_watch_start(const dtrun_opts *o, int generation);
/* True once the key appeared. */
bool dtrun_end_watch_seen(const dtrun_end_watch *w);
/* Stop and join it (NULL: nothing): at once when the key was written, else
 * within a quarter of a second. */
void dtrun_end_watch_stop(dtrun_end_watch *w);

typedef enum { DTRUN_OK, DTRUN_FAILED, DTRUN_STOPPED, DTRUN_SIGNALLED } dtrun_outcome;

/* Forward output, signals and failures until every rank has exited.  Returns
 * the exit code dtrun should end with; *outcome (may be NULL) says why they
 * ended and what[] (may be NULL) names the failed rank. */
int dtrun_supervise(const dtrun_opts *o, dtrun_child *kids, int n, dtrun_stop_hook hook, void *arg,
                    dtrun_outcome *outcome, char *what, size_t what_len);

/* A restartable job's directory for the ranks' memory snapshots
 * (snapshots.c): node 0 names it in the store, every node creates it and
 * sets o->snapshot_dir.  0, or 1 (said on stderr). */
int dtrun_snapshots_open(dtrun_opts *o, dt_store_client *store);
/* Remove the directory and the snapshots in it (the job has ended). */
void dtrun_snapshots_close(const dtrun_opts *o);

/* dtrun --monitor (monitor*.c): the metrics endpoint and the dashboard. */
typedef enum { DTRUN_MON_STARTING, DTRUN_MON_RUNNING, DTRUN_MON_RESTARTING, DTRUN_MON_FINISHED, DTRUN_MON_FAILED }
    dtrun_mon_state;
/* Check --monitor's value at parse time: NULL when it may be served, else
 * why not (a static message). */
const char *dtrun_monitor_check(const dtrun_opts *o);
/* Serve o->monitor on a thread and give the ranks DT_MONITOR_DIR; prints the
 * address.  0 when serving, else 1 (said on stderr). */
int dtrun_monitor_start(const dtrun_opts *o);
/* The job's state as the dashboard shows it; why may be NULL.  No-op without
 * --monitor.  Thread-safe. */
void dtrun_monitor_note(dtrun_mon_state state, int generation, const char *why);
/* The job ended with dtrun exit status code (the state says so if nothing
 * more precise did).  Keep serving --monitor-linger seconds (SIGINT/SIGTERM end it), then stop
 * the server and remove DT_MONITOR_DIR. */
void dtrun_monitor_stop(int code);

#endif
