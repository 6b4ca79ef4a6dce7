/* Cost of the arena's call record (src/transport/shm_arena.c): every public
 * collective on a one-host communicator with an arena records the call it
 * is in (dt__arena_publish_call), and a rank waiting on the slow path of an
 * arena round reads the others' records (dt__arena_call).  Nanoseconds per
 * call, 10^8 calls, three passes:
 *
 *   cc -std=c11 -O2 -Iinclude -Isrc -Ibuild/include bench/kernels/arena_call_speed.c \
 *      build/lib/libdtrain.a -lm -lpthread -lssl -lcrypto -lcjson -lopenblas -lz -o arena_call_speed */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "transport/shm_arena.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
    enum { N = 100000000 };
    char name[64];
    snprintf(name, sizeof name, "/dtrain-bench-arena-%d", (int)getpid());
    dt__arena *a = NULL;
    if (dt__arena_create(name, 4, 4096, &a) != DT_OK) {
        fprintf(stderr, "arena_call_speed: %s\n", dt_last_error());
        return 1;
    }
    dt__arena_unlink(name);
    for (int pass = 0; pass < 3; pass++) {
        double t0 = now();
        for (uint64_t i = 0; i < N; i++)
            dt__arena_publish_call(a, 1, 1, i, i * 0x9e3779b97f4a7c15ull);
        double t1 = now();
        uint64_t sig = 0, found = 0;
        for (uint64_t i = 0; i < N; i++)
            found += dt__arena_call(a, 1, 1, N - 1, &sig);
        double t2 = now();
        printf("publish %.2f ns/call, look %.2f ns/call (%llu found)\n", (t1 - t0) / N * 1e9, (t2 - t1) / N * 1e9,
               (unsigned long long)found);
    }
    dt__arena_close(a);
    return 0;
}
