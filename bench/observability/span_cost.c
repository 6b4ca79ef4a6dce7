/* What one timeline span costs the thread that records it, off and on
 * (bench/observability/timeline_cost.sh prints it with the step-time
 * comparison): N spans of an empty body, through the public dt_trace_begin
 * / dt_trace_end, which are the library's own hooks.
 *
 *     span_cost [N=1000000]
 *
 * Prints ns per span off, on, and the on figure again with a four-member
 * args object like a collective's. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/dtrain.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double per_span(long n, const char *args)
{
    double t0 = now();
    for (long i = 0; i < n; i++) {
        int64_t s = dt_trace_begin();
        dt_trace_end("bench", "span", s, args);
    }
    return (now() - t0) / (double)n * 1e9;
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 1000000;
    if (n < 1 || n > 100000000) {
        fprintf(stderr, "usage: span_cost [N=1000000] (1..1e8)\n");
        return 2;
    }
    double off = per_span(n, NULL);
    char path[] = "/tmp/span_cost.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return 1;
    close(fd);
    if (dt_trace_start(path, 0, "span_cost") != DT_OK) {
        fprintf(stderr, "span_cost: %s\n", dt_last_error());
        return 1;
    }
    long on_n = n < 1000000 ? n : 1000000; /* the thread keeps at most 2^20 events */
    double on = per_span(on_n / 2, NULL);
    double on_args = per_span(on_n / 2, "\"comm\":1,\"ranks\":2,\"algorithm\":\"shm\",\"bytes\":1051648");
    double t0 = now();
    dt_status s = dt_trace_stop();
    double write = now() - t0;
    unlink(path);
    if (s != DT_OK) {
        fprintf(stderr, "span_cost: %s\n", dt_last_error());
        return 1;
    }
    printf("span cost: off %.2f ns, on %.0f ns, on with a collective's args %.0f ns; writing %ld spans took %.2f s\n",
           off, on, on_args, on_n, write);
    return 0;
}
