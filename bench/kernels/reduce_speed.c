/* Speed of the reduction kernels (src/base/redop.c) on large buffers:
 * GB/s of out = a OP b (3 x n x element size bytes moved), best of REPS.
 * Built against a given redop.c (the library's copy is not pulled in),
 * so two versions compare side by side:
 *
 *   cc -std=c11 -O2 -Iinclude -Isrc -c bench/kernels/reduce_speed.c -o m.o
 *   cc -std=c11 -O3 -Iinclude -Isrc -c src/base/redop.c -o r.o
 *   cc m.o r.o build/lib/libdtrain.a -lm -lpthread -o reduce_speed */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/redop.h"
#include "dtrain/base.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(void)
{
    enum { N = 1 << 24, REPS = 15 };
    static const dt_dtype types[] = {DT_F32, DT_F64, DT_BF16};
    static const dt_redop ops[] = {DT_SUM, DT_MAX};
    for (int ti = 0; ti < 3; ti++) {
        size_t es = dt_dtype_size(types[ti]);
        unsigned char *a = malloc(N * es), *b = malloc(N * es);
        for (size_t i = 0; i < N; i++) { /* ordinary numbers: no denormals, no NaN */
            float x = (float)(i % 1000) * 0.25f + 1, y = (float)(i % 777) * 0.5f - 100;
            if (types[ti] == DT_F32) {
                memcpy(a + i * 4, &x, 4);
                memcpy(b + i * 4, &y, 4);
            } else if (types[ti] == DT_F64) {
                double dx = x, dy = y;
                memcpy(a + i * 8, &dx, 8);
                memcpy(b + i * 8, &dy, 8);
            } else {
                uint16_t hx = dt_f32_to_bf16(x), hy = dt_f32_to_bf16(y);
                memcpy(a + i * 2, &hx, 2);
                memcpy(b + i * 2, &hy, 2);
            }
        }
        for (int oi = 0; oi < 2; oi++) {
            double best = 1e9;
            for (int r = 0; r < REPS; r++) {
                double t0 = now();
                dt__reduce(a, a, b, N, types[ti], ops[oi]);
                double t = now() - t0;
                best = t < best ? t : best;
            }
            printf("%-5s %-4s %d elements: %6.2f GB/s (%.2f ms)\n", dt_dtype_name(types[ti]), dt_redop_name(ops[oi]),
                   N, 3.0 * N * (double)es / best / 1e9, best * 1e3);
        }
        free(a);
        free(b);
    }
    return 0;
}
