/* dtrun internals: options, node join, spawning and supervising ranks. */
#ifndef DTRUN_H
#define DTRUN_H

#include <stdbool.h>
#include <sys/types.h>

#include "dtrain/dtrain.h"

typedef struct {
    int nproc, nnodes, node_rank;
    char master_host[256];
    int master_port; /* 0: pick a free port (single node only) */
    char token[256];
    double join_timeout;
    bool prefix;
    char **argv; /* PROGRAM ARGS... */
} dtrun_opts;

/* Where this node's ranks sit in the job, decided at join time. */
typedef struct {
    int world_size, first_rank;
} dtrun_layout;

typedef struct {
    pid_t pid;
    int rank;
    int out_fd, err_fd; /* pipes, -1 once closed */
    char out_buf[4096], err_buf[4096];
    size_t out_len, err_len;
    bool exited;
    int status;
} dtrun_child;

/* Parse argv; prints usage and exits for --help / bad options. */
void dtrun_parse(int argc, char **argv, dtrun_opts *o);

/* Register this node in the store and wait for the others (join timeout). */
dt_status dtrun_join(const dtrun_opts *o, dt_store_client *store, dtrun_layout *out);
/* Multi-node end: say this node is done; node 0 waits for the rest. */
void dtrun_finish(const dtrun_opts *o, dt_store_client *store, bool ok);

/* Fork+exec the local ranks with the DT_* environment; *started counts the
 * children running (kids[0..*started-1]) even when a later one failed. */
dt_status dtrun_spawn(const dtrun_opts *o, const dtrun_layout *l, dtrun_child *kids, int *started);
/* Forward output, signals and failures until every rank has exited.
 * Returns the exit code dtrun should end with. */
int dtrun_supervise(const dtrun_opts *o, dtrun_child *kids, int n);

#endif
