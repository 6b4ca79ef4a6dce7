/* This machine's floating-point peak, measured: independent chains of
 * fused multiply-adds (f32: AVX-512 or AVX2 with FMA, whichever the CPU
 * has; bf16: AVX512_BF16's dot products into f32) on 1 .. T threads at
 * once, each pinned by the OS where it likes.  The training benchmarks
 * quote what share of it each program reaches (issue 35).
 *
 *   build/bin/peak_flops [THREADS=all cores] [SECONDS=0.5]
 *
 * One line per kernel and thread count: GFLOP/s in all and per thread (the
 * best of 3 passes).  A multiply-add counts 2 flops; a bf16 dot product
 * (VDPBF16PS: 32 pairs into 16 f32 sums) 64.  The kernels are chosen at run
 * time from the CPU's flags, so one binary serves every x86-64 machine.
 * AMX (TDPBF16PS: 16 x 16 x 32 multiply-adds per tile product) counts
 * 16384 flops per instruction. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <stdint.h>
#include <sys/syscall.h>
#endif

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

enum { CHAINS = 12 }; /* independent accumulators: enough to cover FMA latency x ports */
/* The chains must live in registers: left a loop over an array, GCC -O2 keeps
 * them on the stack and every FMA waits on a store and a load (48 f32 GFLOP/s
 * per core here, below what dtrain's GEMMs reach; 100-160 unrolled, as the
 * machine's other tenants allow).  Unrolled whole, each chain is a register. */

typedef double (*kernel_fn)(long iters, float *sink); /* returns the flops done */

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static double fma512(long iters, float *sink)
{
    __m512 acc[CHAINS], b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int k = 0; k < CHAINS; k++)
        acc[k] = _mm512_set1_ps((float)k);
    for (long i = 0; i < iters; i++) {
#pragma GCC unroll 16
        for (int k = 0; k < CHAINS; k++)
            acc[k] = _mm512_fmadd_ps(acc[k], b, c);
    }
    __m512 s = acc[0];
    for (int k = 1; k < CHAINS; k++)
        s = _mm512_add_ps(s, acc[k]);
    *sink = _mm512_reduce_add_ps(s);
    return 2.0 * 16 * CHAINS * (double)iters;
}

__attribute__((target("avx2,fma"))) static double fma256(long iters, float *sink)
{
    __m256 acc[CHAINS], b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int k = 0; k < CHAINS; k++)
        acc[k] = _mm256_set1_ps((float)k);
    for (long i = 0; i < iters; i++) {
#pragma GCC unroll 16
        for (int k = 0; k < CHAINS; k++)
            acc[k] = _mm256_fmadd_ps(acc[k], b, c);
    }
    __m256 s = acc[0];
    for (int k = 1; k < CHAINS; k++)
        s = _mm256_add_ps(s, acc[k]);
    float out[8];
    _mm256_storeu_ps(out, s);
    *sink = out[0] + out[7];
    return 2.0 * 8 * CHAINS * (double)iters;
}

__attribute__((target("avx512f,avx512bf16"))) static double dpbf16(long iters, float *sink)
{
    __m512 acc[CHAINS];
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3380); /* 1.0, ~6e-8 */
    for (int k = 0; k < CHAINS; k++)
        acc[k] = _mm512_set1_ps((float)k);
    for (long i = 0; i < iters; i++) {
#pragma GCC unroll 16
        for (int k = 0; k < CHAINS; k++)
            acc[k] = _mm512_dpbf16_ps(acc[k], x, y);
    }
    __m512 s = acc[0];
    for (int k = 1; k < CHAINS; k++)
        s = _mm512_add_ps(s, acc[k]);
    *sink = _mm512_reduce_add_ps(s);
    return 64.0 * CHAINS * (double)iters;
}

/* AMX: four 16 x 16 f32 accumulator tiles fed by two A and two B tiles
 * (TDPBF16PS: 16 x 16 x 32 multiply-adds each, 16384 flops).  The tile
 * state needs the kernel's permission first (amx_permitted). */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} tile_config;
static const tile_config amx_config __attribute__((aligned(64))) = {
    .palette = 1, .colsb = {64, 64, 64, 64, 64, 64, 64, 64}, .rows = {16, 16, 16, 16, 16, 16, 16, 16}};

__attribute__((target("amx-tile,amx-bf16"))) static double amx_bf16(long iters, float *sink)
{
    static const uint16_t x[512] __attribute__((aligned(64))) = {[0 ... 511] = 0x3f80}; /* 1.0 */
    static const uint16_t y[512] __attribute__((aligned(64))) = {[0 ... 511] = 0x3380}; /* ~6e-8 */
    float out[256] __attribute__((aligned(64)));
    _tile_loadconfig(&amx_config);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, x, 64);
    _tile_loadd(5, x, 64);
    _tile_loadd(6, y, 64);
    _tile_loadd(7, y, 64);
#pragma GCC unroll 4
    for (long i = 0; i < iters; i++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_release();
    *sink = out[0];
    return 4.0 * 16 * 16 * 32 * 2 * (double)iters;
}

/* cpuid leaf 7 EDX: AMX-BF16 (bit 22) and AMX-TILE (24); then Linux's
 * permission for the tile data state (arch_prctl ARCH_REQ_XCOMP_PERM). */
static const char *amx_refusal(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24)))
        return "this CPU has no AMX-BF16";
    if (syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) != 0)
        return "the kernel refused the AMX tile state";
    return NULL;
}
#endif

typedef struct {
    kernel_fn fn;
    long iters;
    double flops, seconds;
    float sink;
    pthread_barrier_t *start;
} job;

static void *run(void *arg)
{
    job *j = arg;
    pthread_barrier_wait(j->start);
    double t0 = now();
    j->flops = j->fn(j->iters, &j->sink);
    j->seconds = now() - t0;
    return NULL;
}

/* GFLOP/s of `threads` threads running fn at once (the slowest's time). */
static double measure(kernel_fn fn, long iters, int threads)
{
    job *jobs = calloc((size_t)threads, sizeof *jobs);
    pthread_t *tid = calloc((size_t)threads, sizeof *tid);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, (unsigned)threads);
    for (int t = 0; t < threads; t++) {
        jobs[t] = (job){fn, iters, 0, 0, 0, &start};
        pthread_create(&tid[t], NULL, run, &jobs[t]);
    }
    double flops = 0, slowest = 0;
    for (int t = 0; t < threads; t++) {
        pthread_join(tid[t], NULL);
        flops += jobs[t].flops;
        slowest = jobs[t].seconds > slowest ? jobs[t].seconds : slowest;
    }
    pthread_barrier_destroy(&start);
    free(jobs);
    free(tid);
    return flops / slowest / 1e9;
}

int main(int argc, char **argv)
{
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int maxt = argc > 1 ? atoi(argv[1]) : (int)cores;
    double seconds = argc > 2 ? atof(argv[2]) : 0.5;
    if (maxt < 1 || maxt > 1024 || !(seconds > 0)) {
        fprintf(stderr, "usage: peak_flops [THREADS=%ld] [SECONDS=0.5]\n", cores);
        return 2;
    }
    struct kernel {
        const char *name;
        kernel_fn fn;
    } kernels[4] = {{0}};
    int nk = 0;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        kernels[nk++] = (struct kernel){"f32 FMA, AVX-512 (16 lanes)", fma512};
    else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        kernels[nk++] = (struct kernel){"f32 FMA, AVX2 (8 lanes)", fma256};
    if (__builtin_cpu_supports("avx512bf16"))
        kernels[nk++] = (struct kernel){"bf16 dot products into f32, AVX512_BF16", dpbf16};
    else
        printf("bf16: this CPU has no AVX512_BF16 (bf16 GEMMs would convert to f32 first)\n");
    const char *no_amx = amx_refusal();
    if (!no_amx)
        kernels[nk++] = (struct kernel){"bf16 tile dot products into f32, AMX (TDPBF16PS)", amx_bf16};
    else
        printf("amx: %s\n", no_amx);
#endif
    if (nk == 0) {
        printf("peak_flops: no FMA kernel for this CPU (x86-64 with AVX2+FMA or AVX-512 needed)\n");
        return 0;
    }
    for (int k = 0; k < nk; k++) {
        long iters = 1 << 16; /* calibrate: one thread, about `seconds` */
        double t0 = now();
        float sink;
        kernels[k].fn(iters, &sink);
        double dt = now() - t0;
        iters = (long)((double)iters * seconds / (dt > 1e-6 ? dt : 1e-6));
        for (int t = 1; t <= maxt; t *= 2) {
            double best = 0;
            for (int pass = 0; pass < 3; pass++) {
                double g = measure(kernels[k].fn, iters, t);
                best = g > best ? g : best;
            }
            printf("%s: %d thread%s: %.1f GFLOP/s (%.1f per thread)\n", kernels[k].name, t, t == 1 ? "" : "s", best,
                   best / t);
            if (t < maxt && t * 2 > maxt)
                t = maxt / 2; /* the last pass runs maxt threads */
        }
    }
    return 0;
}
