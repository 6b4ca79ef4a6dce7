/* Which bf16 GEMM kernel this process runs: AMX where the CPU has it and the
 * kernel grants the tile state, else AVX512_BF16's dot products, else the
 * emulation (inputs rounded to bf16, then the f32 GEMM).  DT_BF16_GEMM
 * forces one (native: the own kernel; onednn: oneDNN's matmul for every
 * product, the own kernel for what it refuses); a forced kernel the machine
 * cannot run is refused with a warning, and the emulation runs instead.  The
 * choice is made once per process. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"
#include "base/log.h"
#include "tensor/gemm_bf16.h"

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
/* Set once under `once`, read-only after. */
static struct {
    dt__bf16_kernel chosen; /* the own kernel */
    bool onednn_all; /* every shape to oneDNN (DT_BF16_GEMM=onednn) */
    bool amx, avx512;
    char amx_why[160];
    const char *avx512_why;
} cpu;

#if defined(__x86_64__)
static uint64_t xcr0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

/* cpuid leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE (gcc 12's
 * __builtin_cpu_supports does not know them); XCR0 bits 17 and 18 say the OS
 * saves tile configuration and data; Linux then hands the data state out
 * per process on request. */
static void detect_amx(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 22)) || !(d & (1u << 24))) {
        snprintf(cpu.amx_why, sizeof cpu.amx_why, "this CPU has no AMX-BF16");
        return;
    }
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27)) || (xcr0() & (3u << 17)) != (3u << 17)) {
        snprintf(cpu.amx_why, sizeof cpu.amx_why, "the OS does not enable the AMX tile state (XCR0)");
        return;
    }
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) != 0) {
        snprintf(cpu.amx_why, sizeof cpu.amx_why, "the kernel refused the AMX tile state (arch_prctl: %s)",
                 strerror(errno));
        return;
    }
    cpu.amx = cpu.avx512; /* the packing and the epilogue use AVX-512 */
    if (!cpu.amx)
        snprintf(cpu.amx_why, sizeof cpu.amx_why, "AMX without AVX-512 F/BW/BF16");
}
#endif

static bool available(dt__bf16_kernel k, const char **why)
{
    bool ok = k == DT__BF16_EMULATED || (k == DT__BF16_AVX512 && cpu.avx512) || (k == DT__BF16_AMX && cpu.amx) ||
              (k == DT__BF16_ONEDNN && dt__bf16_dnnl_built());
    if (why)
        *why = ok                    ? NULL
               : k == DT__BF16_AMX    ? cpu.amx_why
               : k == DT__BF16_ONEDNN ? "this build has no oneDNN (libdnnl-dev)"
                                      : cpu.avx512_why;
    return ok;
}

static void choose(void)
{
    snprintf(cpu.amx_why, sizeof cpu.amx_why, "not an x86-64 build");
    cpu.avx512_why = "not an x86-64 build";
#if defined(__x86_64__)
    __builtin_cpu_init();
    cpu.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512bf16");
    cpu.avx512_why = cpu.avx512 ? NULL : "this CPU has no AVX512_BF16";
    detect_amx();
#endif
    dt__bf16_kernel best = cpu.amx ? DT__BF16_AMX : cpu.avx512 ? DT__BF16_AVX512 : DT__BF16_EMULATED;
    const char *want = dt__env_str("DT_BF16_GEMM");
    cpu.chosen = best;
    /* auto keeps the own kernel: oneDNN's products were seen to differ in
     * their last bits from one call to the next on a loaded machine (its
     * threads split k as they find the cores), and a run's bits must not
     * depend on the load; DT_BF16_GEMM=onednn asks for it (docs/engine.md
     * has the shapes where it was faster). */
    if (!want || strcmp(want, "auto") == 0)
        return;
    if (strcmp(want, "native") == 0)
        return;
    for (int k = DT__BF16_EMULATED; k <= DT__BF16_ONEDNN; k++) {
        if (strcmp(want, dt__bf16_kernel_name((dt__bf16_kernel)k)) != 0)
            continue;
        const char *why = NULL;
        if (k == DT__BF16_ONEDNN && available(DT__BF16_ONEDNN, &why)) {
            cpu.onednn_all = true; /* the own kernel stays the best, for what oneDNN refuses */
        } else if (available((dt__bf16_kernel)k, &why)) {
            cpu.chosen = (dt__bf16_kernel)k;
        } else {
            DT_WARN("DT_BF16_GEMM=%s refused: %s; the bf16 GEMM runs emulated", want, why);
            cpu.chosen = DT__BF16_EMULATED;
        }
        return;
    }
    DT_WARN("DT_BF16_GEMM=%s is not a kernel (auto, native, onednn, amx, avx512_bf16 or emulated); the bf16 GEMM "
            "runs emulated", want);
    cpu.chosen = DT__BF16_EMULATED;
}

dt__bf16_kernel dt__bf16_kernel_choice(void)
{
    pthread_once(&once, choose);
    return cpu.chosen;
}

bool dt__bf16_kernel_available(dt__bf16_kernel k, const char **why)
{
    pthread_once(&once, choose);
    return available(k, why);
}

const char *dt__bf16_kernel_name(dt__bf16_kernel k)
{
    return k == DT__BF16_AMX      ? "amx"
           : k == DT__BF16_AVX512 ? "avx512_bf16"
           : k == DT__BF16_ONEDNN ? "onednn"
                                  : "emulated";
}

dt__bf16_kernel dt__bf16_kernel_for(int trans_a, int trans_b, int64_t m, int64_t n, int64_t k)
{
    pthread_once(&once, choose);
    (void)trans_a, (void)trans_b, (void)m, (void)n, (void)k;
    if (cpu.onednn_all)
        return DT__BF16_ONEDNN;
    return cpu.chosen;
}

const char *dt_bf16_gemm_kernel(void)
{
    pthread_once(&once, choose);
    if (cpu.onednn_all)
        return "onednn";
    return dt__bf16_kernel_name(cpu.chosen);
}
