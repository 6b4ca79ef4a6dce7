/* DT_DEBUG=coll test rank.
 *
 * usage: coll_mismatch MODE
 *   mismatch: a few matching collectives, then rank 1 calls allgather where
 *             the others call allreduce (every rank should fail, naming both)
 *   stall:    rank 2 stops issuing collectives after #3 (it sleeps, alive);
 *             the others time out and print every rank's recent collectives
 * Prints "rank R: STATUS: message" and exits 0 on success, 3 on failure. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain/dtrain.h"

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "mismatch") && strcmp(argv[1], "stall"))) {
        fprintf(stderr, "usage: coll_mismatch mismatch|stall\n");
        return 2;
    }
    bool stall = !strcmp(argv[1], "stall");
    signal(SIGTERM, SIG_IGN); /* report our own error before dtrun's SIGKILL */
    dt_comm *c;
    if (dt_comm_init_env(&c) != DT_OK) {
        fprintf(stderr, "coll_mismatch: init: %s\n", dt_last_error());
        return 1;
    }
    int rank = dt_comm_rank(c), size = dt_comm_size(c);
    float buf[256] = {0}, *all = calloc(256 * (size_t)size, sizeof *all);
    dt_status s = DT_OK;
    for (int step = 0; step < 6 && s == DT_OK; step++) {
        char tag[32];
        snprintf(tag, sizeof tag, "step %d", step);
        dt_comm_set_tag(c, tag);
        if (step < 3)
            s = dt_broadcast(buf, 16, DT_F32, 0, c);
        else if (stall && rank == 2)
            sleep(30); /* alive (heartbeats go on) but no longer calling collectives */
        else if (!stall && rank == 1)
            s = dt_allgather(buf, all, 256, DT_F32, c);
        else
            s = dt_allreduce(buf, buf, 256, DT_F32, DT_SUM, c);
    }
    printf("rank %d: %s: %s\n", rank, dt_status_name(s), s == DT_OK ? "" : dt_last_error());
    fflush(stdout);
    if (stall && rank == 2)
        s = DT_ERR_PEER; /* the others have failed; do not wait for them */
    dt_comm_destroy(c);
    free(all);
    return s == DT_OK ? 0 : 3;
}
