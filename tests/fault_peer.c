/* Fault-test rank: loops large allreduces; optionally one rank SIGKILLs itself
 * mid-operation.  Survivors record the error they got and how long after the
 * kill it came, in DIR/result.<rank>, for tests/run_tests.sh to check.
 *
 * usage: fault_peer DIR [--victim R] [--freeze 1 | --abort-at K | --stall-ms MS] [--delay-ms MS] [--count N]
 *                  [--iters N] [--pause-ms MS]
 * (--freeze 1: the victim SIGSTOPs itself instead, a frozen process;
 *  --abort-at K: the victim calls dt_comm_abort before its K-th allreduce;
 *  --stall-ms MS: the victim sleeps MS before its third allreduce, a busy
 *  but healthy rank, and lives on;
 *  --pause-ms MS: every rank sleeps MS after each allreduce, a job that runs
 *  for a known time).  DIR/ready.<rank> holds the rank's pid. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/dtrain.h"

static const char *dir;
static int delay_ms = 500, freeze, abort_at = -1, stall_ms, pause_ms;

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *killer(void *arg)
{
    (void)arg;
    usleep((useconds_t)delay_ms * 1000);
    char path[512];
    snprintf(path, sizeof path, "%s/killed", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "%.6f\n", wall());
        fclose(f);
    }
    raise(freeze ? SIGSTOP : SIGKILL); /* in the middle of whatever allreduce is running */
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: fault_peer DIR [--victim R] [--freeze 1 | --abort-at K | --stall-ms MS] [--delay-ms MS] "
                        "[--count N] [--iters N]\n");
        return 2;
    }
    dir = argv[1];
    int victim = -1, iters = 1000;
    size_t count = 4u << 20;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--victim"))
            victim = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--delay-ms"))
            delay_ms = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--count"))
            count = (size_t)atol(argv[i + 1]);
        else if (!strcmp(argv[i], "--iters"))
            iters = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--freeze"))
            freeze = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--abort-at"))
            abort_at = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--stall-ms"))
            stall_ms = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--pause-ms"))
            pause_ms = atoi(argv[i + 1]);
    }
    signal(SIGTERM, SIG_IGN); /* report our own error before dtrun's SIGKILL */
    dt_comm *c;
    if (dt_comm_init_env(&c) != DT_OK) {
        fprintf(stderr, "fault_peer: init: %s\n", dt_last_error());
        return 1;
    }
    int rank = dt_comm_rank(c);
    float *buf = calloc(count, sizeof *buf);
    char ready[512];
    snprintf(ready, sizeof ready, "%s/ready.%d", dir, rank); /* lets a test act once every rank runs */
    FILE *rf = fopen(ready, "w");
    if (rf) {
        fprintf(rf, "%d\n", (int)getpid());
        fclose(rf);
    }
    pthread_t th;
    if (rank == victim && abort_at < 0 && stall_ms == 0)
        pthread_create(&th, NULL, killer, NULL);
    double start = wall();
    dt_status s = DT_OK;
    int done = 0;
    for (; done < iters && s == DT_OK; done++) {
        if (rank == victim && done == abort_at) {
            s = dt_comm_abort(c, "the test asked rank to give up");
            printf("rank %d: dt_comm_abort returned %s\n", rank, dt_status_name(s));
            fflush(stdout);
            dt_comm_destroy(c);
            free(buf);
            return s == DT_ERR_ABORTED ? 4 : 1;
        }
        if (rank == victim && done == 2 && stall_ms > 0)
            usleep((useconds_t)stall_ms * 1000);
        s = dt_allreduce(buf, buf, count, DT_F32, DT_SUM, c);
        if (pause_ms > 0)
            usleep((useconds_t)pause_ms * 1000);
    }
    double failed_at = wall();
    char path[512];
    snprintf(path, sizeof path, "%s/result.%d", dir, rank);
    FILE *f = fopen(path, "w");
    if (f) {
        fprintf(f, "status=%s\nfailed_at=%.6f\nstarted_at=%.6f\niterations=%d\nmessage=%s\n", dt_status_name(s),
                failed_at, start, done, s == DT_OK ? "" : dt_last_error());
        fclose(f);
    }
    /* Later calls must fail at once with the same error, never hang. */
    if (s != DT_OK && dt_barrier(c) == DT_OK)
        fprintf(stderr, "fault_peer: rank %d: barrier succeeded after a failure\n", rank);
    printf("rank %d: %s after %d allreduces: %s\n", rank, dt_status_name(s), done, s == DT_OK ? "" : dt_last_error());
    dt_comm_destroy(c);
    free(buf);
    return s == DT_OK ? 0 : 3;
}
