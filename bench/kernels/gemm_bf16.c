/* GFLOP/s of the bf16 GEMM (dt_sgemm_bf16_ld) on each kernel this machine
 * runs, against the f32 GEMM (dt_sgemm_ld, OpenBLAS), on the shapes of the
 * gpt-mini and mlp configs, at 1 and 2 threads (issue 35).
 *
 *   build/bin/gemm_bf16 [MAX_THREADS=2] [SECONDS=0.3] [KERNEL]
 *
 * KERNEL (amx, avx512_bf16, emulated or onednn: oneDNN's matmul, the bf16
 * copies of the inputs included) measures that one alone.
 *
 * The kernel is chosen once per process, so each kernel is measured in a
 * child process of its own (DT_BF16_GEMM set before its first call), timed
 * runs of the f32 GEMM alternating with its own so that the ratio compares
 * like with like on a shared machine; the results come back through shared
 * memory.  Each figure is the best of 3 timed runs of about SECONDS / 3
 * each; a multiply-add counts 2 flops. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dtrain/dtrain.h"

typedef struct {
    const char *what;
    int ta, tb;
    int64_t m, n, k;
} shape;

/* gpt-mini (2048 tokens, d 256, mlp 1024, vocab-free parts): forward Y = X W^T,
 * backward dX = dY W and dW = dY^T X; mlp: batch 128, 784-256-256-10. */
static const shape shapes[] = {
    {"gpt qkv   fwd  X W^T", 0, 1, 2048, 768, 256},  {"gpt proj  fwd  X W^T", 0, 1, 2048, 256, 256},
    {"gpt fc1   fwd  X W^T", 0, 1, 2048, 1024, 256}, {"gpt fc2   fwd  X W^T", 0, 1, 2048, 256, 1024},
    {"gpt qkv   bwd  dY W", 0, 0, 2048, 256, 768},   {"gpt fc1   bwd  dY W", 0, 0, 2048, 256, 1024},
    {"gpt proj  dW   dY^T X", 1, 0, 256, 256, 2048}, {"gpt qkv   dW   dY^T X", 1, 0, 768, 256, 2048},
    {"gpt fc2   dW   dY^T X", 1, 0, 256, 1024, 2048}, {"mlp 784>256 fwd", 0, 1, 128, 256, 784},
    {"mlp 256>256 fwd", 0, 1, 128, 256, 256},          {"mlp 256>10  fwd", 0, 1, 128, 10, 256},
    {"mlp 784>256 dW", 1, 0, 256, 784, 128},           {"mlp 256>256 dX", 0, 0, 128, 256, 256},
    /* gpt-small (d 384, mlp 1536), and one attention head's products (T 128, hd 64) */
    {"gpts qkv  fwd  X W^T", 0, 1, 2048, 1152, 384}, {"gpts fc1  fwd  X W^T", 0, 1, 2048, 1536, 384},
    {"gpts fc2  fwd  X W^T", 0, 1, 2048, 384, 1536}, {"gpts fc1  bwd  dY W", 0, 0, 2048, 384, 1536},
    {"gpts fc2  bwd  dY W", 0, 0, 2048, 1536, 384},  {"gpts qkv  dW   dY^T X", 1, 0, 1152, 384, 2048},
    {"gpts fc2  dW   dY^T X", 1, 0, 384, 1536, 2048}, {"gpts fc1  dW   dY^T X", 1, 0, 1536, 384, 2048},
    {"gpts proj fwd  X W^T", 0, 1, 2048, 384, 384},   {"gpts proj dW   dY^T X", 1, 0, 384, 384, 2048},
    {"gpt fc2   bwd  dY W", 0, 0, 2048, 1024, 256},  {"gpt fc1   dW   dY^T X", 1, 0, 1024, 256, 2048},
    {"att QK^T", 0, 1, 128, 128, 64},
    {"att P V", 0, 0, 128, 64, 128},                   {"att dV P^T dO", 1, 0, 128, 64, 128},
};
enum { NSHAPES = sizeof shapes / sizeof shapes[0], NPATHS = 5, MAXT = 2 };
static const char *paths[NPATHS] = {"f32", "amx", "avx512_bf16", "emulated", "onednn"};

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static float *random_floats(int64_t n)
{
    float *x = malloc((size_t)n * sizeof *x);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return x;
}

static void call(int path, const shape *s, const float *a, const float *b, float *c)
{
    int64_t lda = s->ta ? s->m : s->k, ldb = s->tb ? s->k : s->n;
    if (path == 0)
        dt_sgemm_ld(s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);
    else
        dt_sgemm_bf16_ld(s->ta, s->tb, s->m, s->n, s->k, 1.0f, a, lda, b, ldb, 0.0f, c, s->n);
}

/* Best GFLOP/s of 3 timed runs each of the f32 GEMM (*f32) and of the bf16
 * one (*bf16, when bf16), alternating, so that both see the same machine
 * (a shared one's load comes and goes). */
static void measure(const shape *s, double seconds, bool bf16, double *f32, double *bf16_out)
{
    float *a = random_floats(s->m * s->k), *b = random_floats(s->k * s->n), *c = random_floats(s->m * s->n);
    double flops = 2.0 * (double)s->m * (double)s->n * (double)s->k;
    long reps[2];
    double best[2] = {0, 0};
    for (int path = 0; path <= (int)bf16; path++) {
        call(path, s, a, b, c); /* warm up; calibrate */
        double t0 = now();
        call(path, s, a, b, c);
        double one = now() - t0;
        reps[path] = (long)(seconds / 3 / (one > 1e-7 ? one : 1e-7)) + 1;
    }
    for (int pass = 0; pass < 3; pass++)
        for (int path = 0; path <= (int)bf16; path++) {
            double t0 = now();
            for (long r = 0; r < reps[path]; r++)
                call(path, s, a, b, c);
            double g = flops * (double)reps[path] / (now() - t0) / 1e9;
            best[path] = g > best[path] ? g : best[path];
        }
    *f32 = best[0];
    if (bf16)
        *bf16_out = best[1];
    free(a), free(b), free(c);
}

int main(int argc, char **argv)
{
    int maxt = argc > 1 ? atoi(argv[1]) : 2;
    double seconds = argc > 2 ? atof(argv[2]) : 0.3;
    if (maxt < 1 || maxt > MAXT || !(seconds > 0)) {
        fprintf(stderr, "usage: gemm_bf16 [MAX_THREADS=2 (1 or 2)] [SECONDS=0.3] [KERNEL]\n");
        return 2;
    }
    /* results[path][shape][threads - 1]: GFLOP/s of the bf16 kernel, -1 where
     * it does not run here; path 0: the f32 GEMM in the same process */
    size_t size = sizeof(double) * NPATHS * NPATHS * NSHAPES * MAXT;
    double *results = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (results == MAP_FAILED)
        return 1;
#define AT(child, path, s, t) results[(((child) * NPATHS + (path)) * NSHAPES + (s)) * MAXT + (t) - 1]
    const char *only = argc > 3 ? argv[3] : NULL;
    for (int p = 1; p < NPATHS; p++) {
        if (only && strcmp(only, paths[p]) != 0) {
            for (int s = 0; s < NSHAPES; s++)
                for (int t = 1; t <= maxt; t++)
                    AT(p, p, s, t) = -1, AT(p, 0, s, t) = 0;
            continue;
        }
        pid_t pid = fork();
        if (pid == 0) {
            setenv("DT_BF16_GEMM", paths[p], 1);
            bool runs = strcmp(dt_bf16_gemm_kernel(), paths[p]) == 0;
            for (int t = 1; t <= maxt; t++) {
                dt_set_threads(t);
                for (int s = 0; s < NSHAPES; s++) {
                    AT(p, p, s, t) = -1;
                    measure(&shapes[s], seconds, runs, &AT(p, 0, s, t), &AT(p, p, s, t));
                }
            }
            _exit(0);
        }
        int status;
        waitpid(pid, &status, 0);
    }
    printf("GFLOP/s (best of 3), dt_sgemm_ld (f32; the best of its runs beside each kernel) vs dt_sgemm_bf16_ld\n"
           "per kernel ('-': not on this CPU); the ratio is the fastest kernel's to f32 measured beside it\n");
    printf("%-22s %5s %5s %5s %3s", "shape", "m", "n", "k", "thr");
    for (int p = 0; p < NPATHS; p++)
        printf(" %12s", paths[p]);
    printf("  best bf16 / f32\n");
    for (int s = 0; s < NSHAPES; s++)
        for (int t = 1; t <= maxt; t++) {
            const shape *x = &shapes[s];
            printf("%-22s %5lld %5lld %5lld %3d", x->what, (long long)x->m, (long long)x->n, (long long)x->k, t);
            double f32 = 0, best = 0, ratio = 0;
            for (int p = 1; p < NPATHS; p++)
                f32 = AT(p, 0, s, t) > f32 ? AT(p, 0, s, t) : f32;
            printf(" %12.1f", f32);
            for (int p = 1; p < NPATHS; p++) {
                double g = AT(p, p, s, t);
                if (g < 0)
                    printf(" %12s", "-");
                else
                    printf(" %12.1f", g);
                if (g > best) {
                    best = g;
                    ratio = g / AT(p, 0, s, t);
                }
            }
            printf("  %.2fx\n", ratio);
        }
    munmap(results, size);
    return 0;
}
