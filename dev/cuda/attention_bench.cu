/* Playground of the cuda backend's causal attention (src/cuda/attention.cu),
 * llm.c dev/cuda style: random inputs, a naive CPU reference in double, a
 * check of out, the saved log-sum-exp and dqkv for several shapes in f32
 * and bf16, a determinism check of the backward, and timings.  It includes
 * src/cuda/attention.cu itself, so that it can run each kernel version
 * (kernel_version there): 1 = SIMT, 2 = tensor cores for bf16.
 *
 * Build and run from the repository root (the runtime of src/cuda/cuda.h is
 * stubbed below, so nothing else is linked):
 *
 *   nvcc -O3 -arch=sm_90 -std=c++17 -I src -I include -o attention_bench dev/cuda/attention_bench.cu
 *   ./attention_bench            # checks, then timings
 *   ./attention_bench --no-time  # checks only
 *   ./attention_bench --quick    # checks of the small shapes only
 *
 * One line per check, "PASS" or "FAIL"; the exit status is 1 when any
 * check failed (or a CUDA call did), 0 otherwise.
 *
 * Errors are max |gpu - ref| / max |ref| over each of out, dq, dk, dv (the
 * log-sum-exp: max |gpu - ref| / max(1, |ref|)).  The reference follows the
 * cpu engine's meaning of bf16 (product operands rounded to bf16, sums in
 * f32; here in double): Q, K, V, dO, the normalised P and scale * dS are
 * rounded.  Tolerances: 2e-5 in f32, 1e-2 in bf16 (where the kernels round
 * the unnormalised P and the unscaled dS, a different bf16 rounding).
 *
 * Timings count FLOPs as FlashAttention does for a causal mask: forward
 * 4 B H T^2 hd / 2, backward 2.5 times that (our backward does 3.5 times:
 * the dQ pass recomputes S and dP), and report the mean of 10 runs after 2
 * warm-up runs. */
#include <cuda_runtime.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cuda/cuda.h"
/* the kernels themselves, to switch kernel_version (its namespace is this file's) */
#include "../../src/cuda/attention.cu"

#define CK(call)                                                                                          \
    do {                                                                                                  \
        cudaError_t e_ = (call);                                                                          \
        if (e_ != cudaSuccess) {                                                                          \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));       \
            exit(1);                                                                                      \
        }                                                                                                 \
    } while (0)

/* ---- the runtime of src/cuda/cuda.h, stubbed ---- */

static cudaStream_t bench_stream;
static int bench_errors;

extern "C" {
bool dt__cuda_enter(void) { return true; }
void *dt__cuda_stream(void) { return bench_stream; }
int dt__cuda_sm_count(void)
{
    int n = 1;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, 0) != cudaSuccess)
        n = 1;
    return n;
}
bool dt__cuda_check(int err, const char *file, int line, const char *expr)
{
    if (err == 0)
        return true;
    (void)cudaGetLastError();
    fprintf(stderr, "cuda error: %s:%d: %s: %s\n", file, line, expr, cudaGetErrorString((cudaError_t)err));
    bench_errors++;
    return false;
}
void dt__cuda_record(dt_status code, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "recorded error %d at %s:%d: ", (int)code, file, line);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    bench_errors++;
}
}

/* true when an entry recorded an error since the last call */
static bool runtime_failed(void)
{
    int n = bench_errors;
    bench_errors = 0;
    return n != 0;
}

/* The kernels to check and time: the precision and attention.cu's kernel_version. */
struct mode {
    const char *name;
    bool bf16;
    int version;
};
static const mode modes[] = {{"f32", false, 1}, {"bf16-simt", true, 1}, {"bf16-mma", true, 2}};

/* ---- inputs and the reference ---- */

struct shape {
    int B, T, H, hd;
};

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static float uniform(float lo, float hi) /* splitmix64 */
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return lo + (hi - lo) * (float)((z >> 40) * (1.0 / 16777216.0));
}

static float host_bf16_round(float f) /* nearest even, as dt_f32_to_bf16 */
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return f;
    x = (x + 0x7fffu + ((x >> 16) & 1u)) & 0xffff0000u;
    memcpy(&f, &x, 4);
    return f;
}

/* The cpu engine's attention (src/nn/attention.c) in double, for the
 * pairs bh with bh % every == 0: out [B, T, D], lse [B, H, T], dqkv
 * [B, T, 3D].  bf16 rounds what the cpu's bf16 products round. */
static void reference(bool bf16, const shape &s, const float *qkv, const float *dout, int every, double *out,
                      double *lse, double *dqkv)
{
    const int T = s.T, H = s.H, hd = s.hd, D = H * hd, ld = 3 * D;
    const double scale = 1.0 / sqrt((double)hd);
    auto rd = [&](float x) -> double { return bf16 ? (double)host_bf16_round(x) : (double)x; };
    std::vector<double> Q((size_t)T * hd), K((size_t)T * hd), V((size_t)T * hd), dO((size_t)T * hd);
    std::vector<double> P((size_t)T * T), dP((size_t)T * T), G((size_t)T * T);
    for (int bh = 0; bh < s.B * H; bh += every) {
        int b = bh / H, h = bh % H;
        for (int t = 0; t < T; t++)
            for (int d = 0; d < hd; d++) {
                const float *row = qkv + ((size_t)b * T + t) * ld + h * hd + d;
                Q[(size_t)t * hd + d] = rd(row[0]);
                K[(size_t)t * hd + d] = rd(row[D]);
                V[(size_t)t * hd + d] = rd(row[2 * D]);
                dO[(size_t)t * hd + d] = rd(dout[((size_t)b * T + t) * D + h * hd + d]);
            }
        for (int i = 0; i < T; i++) {
            double mx = -INFINITY, sum = 0;
            for (int j = 0; j <= i; j++) {
                double a = 0;
                for (int d = 0; d < hd; d++)
                    a += Q[(size_t)i * hd + d] * K[(size_t)j * hd + d];
                P[(size_t)i * T + j] = a * scale;
                mx = fmax(mx, a * scale);
            }
            for (int j = 0; j <= i; j++)
                sum += exp(P[(size_t)i * T + j] - mx);
            for (int j = 0; j <= i; j++)
                P[(size_t)i * T + j] = exp(P[(size_t)i * T + j] - mx) / sum;
            lse[(size_t)bh * T + i] = mx + log(sum);
            for (int d = 0; d < hd; d++) {
                double a = 0;
                for (int j = 0; j <= i; j++)
                    a += rd((float)P[(size_t)i * T + j]) * V[(size_t)j * hd + d];
                out[((size_t)b * T + i) * D + h * hd + d] = a;
            }
            double dot = 0;
            for (int j = 0; j <= i; j++) {
                double a = 0;
                for (int d = 0; d < hd; d++)
                    a += dO[(size_t)i * hd + d] * V[(size_t)j * hd + d];
                dP[(size_t)i * T + j] = a;
                dot += a * P[(size_t)i * T + j];
            }
            for (int j = 0; j <= i; j++)
                G[(size_t)i * T + j] = rd((float)(P[(size_t)i * T + j] * (dP[(size_t)i * T + j] - dot) * scale));
        }
        for (int t = 0; t < T; t++)
            for (int d = 0; d < hd; d++) {
                double dq = 0, dk = 0, dv = 0;
                for (int j = 0; j <= t; j++) /* dQ_t = sum_j G[t, j] K_j */
                    dq += G[(size_t)t * T + j] * K[(size_t)j * hd + d];
                for (int i = t; i < T; i++) { /* dK_t = sum_i G[i, t] Q_i, dV_t = sum_i P[i, t] dO_i */
                    dk += G[(size_t)i * T + t] * Q[(size_t)i * hd + d];
                    dv += rd((float)P[(size_t)i * T + t]) * dO[(size_t)i * hd + d];
                }
                double *row = dqkv + ((size_t)b * T + t) * ld + h * hd + d;
                row[0] = dq;
                row[D] = dk;
                row[2 * D] = dv;
            }
    }
}

/* max |got - want| / max |want| over the checked pairs' columns `group`
 * (0, 1, 2 of a [B, T, groups*D] array). */
static double rel_error(const shape &s, int every, int groups, int group, const float *got, const double *want)
{
    const int T = s.T, H = s.H, hd = s.hd, D = H * hd;
    double err = 0, big = 0;
    for (int bh = 0; bh < s.B * H; bh += every) {
        int b = bh / H, h = bh % H;
        for (int t = 0; t < T; t++)
            for (int d = 0; d < hd; d++) {
                size_t at = ((size_t)b * T + t) * groups * D + (size_t)group * D + h * hd + d;
                double e = fabs((double)got[at] - want[at]); /* NaN (never written) fails below */
                if (!(e <= err))
                    err = e;
                big = fmax(big, fabs(want[at]));
            }
    }
    return big > 0 ? err / big : err;
}

static double lse_error(const shape &s, int every, const float *got, const double *want)
{
    double err = 0;
    for (int bh = 0; bh < s.B * s.H; bh += every)
        for (int t = 0; t < s.T; t++) {
            size_t at = (size_t)bh * s.T + t;
            double e = fabs((double)got[at] - want[at]) / fmax(1.0, fabs(want[at]));
            if (!(e <= err))
                err = e;
        }
    return err;
}

/* Device buffers of one shape. */
struct buffers {
    float *qkv, *out, *lse, *dout, *dqkv, *scratch;
    size_t n_qkv, n_out, n_lse, n_scratch;
};

static buffers alloc_buffers(const shape &s)
{
    buffers d;
    size_t BT = (size_t)s.B * s.T, D = (size_t)s.H * s.hd;
    d.n_qkv = BT * 3 * D;
    d.n_out = BT * D;
    d.n_lse = (size_t)dt__cuda_attn_saved_floats(s.B, s.H, s.T);
    d.n_scratch = (size_t)dt__cuda_attn_scratch_floats(s.B, s.H, s.T, s.hd);
    CK(cudaMalloc((void **)&d.qkv, d.n_qkv * 4));
    CK(cudaMalloc((void **)&d.dqkv, d.n_qkv * 4));
    CK(cudaMalloc((void **)&d.out, d.n_out * 4));
    CK(cudaMalloc((void **)&d.dout, d.n_out * 4));
    CK(cudaMalloc((void **)&d.lse, d.n_lse * 4));
    CK(cudaMalloc((void **)&d.scratch, (d.n_scratch ? d.n_scratch : 1) * 4));
    return d;
}

static void free_buffers(buffers &d)
{
    CK(cudaFree(d.qkv));
    CK(cudaFree(d.dqkv));
    CK(cudaFree(d.out));
    CK(cudaFree(d.dout));
    CK(cudaFree(d.lse));
    CK(cudaFree(d.scratch));
}

static void fill_inputs(const shape &s, std::vector<float> &qkv, std::vector<float> &dout)
{
    const int D = s.H * s.hd;
    qkv.resize((size_t)s.B * s.T * 3 * D);
    dout.resize((size_t)s.B * s.T * D);
    for (size_t i = 0; i < qkv.size(); i++) {
        int group = (int)(i / D % 3); /* q and k wider than v: peaked rows as well as flat ones */
        qkv[i] = group < 2 ? uniform(-2.0f, 2.0f) : uniform(-1.0f, 1.0f);
    }
    for (auto &x : dout)
        x = uniform(-1.0f, 1.0f);
}

static int failures;

static void verdict(const char *what, bool ok)
{
    printf("%s %s\n", ok ? "PASS" : "FAIL", what);
    fflush(stdout);
    if (!ok)
        failures++;
}

/* Check one shape in one precision. */
static void check(const shape &s, const mode &md)
{
    const bool bf16 = md.bf16;
    const dt_dtype compute = bf16 ? DT_BF16 : DT_F32;
    kernel_version = md.version;
    const double tol = bf16 ? 1e-2 : 2e-5, tol_lse = bf16 ? 1e-2 : 2e-6;
    /* the reference costs B H T^2 hd: every head up to ~1e9, else a sample */
    double cost = (double)s.B * s.H * s.T * s.T * s.hd;
    int every = cost > 1e9 ? 7 : 1;
    std::vector<float> qkv, dout;
    fill_inputs(s, qkv, dout);
    buffers d = alloc_buffers(s);
    CK(cudaMemcpy(d.qkv, qkv.data(), d.n_qkv * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.dout, dout.data(), d.n_out * 4, cudaMemcpyHostToDevice));
    /* NaN in what the entries write: an element left unwritten fails */
    CK(cudaMemset(d.out, 0xff, d.n_out * 4));
    CK(cudaMemset(d.lse, 0xff, d.n_lse * 4));
    CK(cudaMemset(d.dqkv, 0xff, d.n_qkv * 4));
    CK(cudaMemset(d.scratch, 0xff, (d.n_scratch ? d.n_scratch : 1) * 4));

    dt__cuda_attn_fwd(compute, d.out, d.lse, d.qkv, s.B, s.T, s.H, s.hd);
    dt__cuda_attn_bwd(compute, d.dqkv, d.scratch, d.dout, d.qkv, d.out, d.lse, s.B, s.T, s.H, s.hd);
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    bool failed = runtime_failed();
    std::vector<float> out(d.n_out), lse(d.n_lse), dqkv(d.n_qkv), dqkv2(d.n_qkv);
    CK(cudaMemcpy(out.data(), d.out, d.n_out * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(lse.data(), d.lse, d.n_lse * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(dqkv.data(), d.dqkv, d.n_qkv * 4, cudaMemcpyDeviceToHost));
    /* the backward again, over a different garbage: the same bits */
    CK(cudaMemset(d.dqkv, 0x7f, d.n_qkv * 4));
    dt__cuda_attn_bwd(compute, d.dqkv, d.scratch, d.dout, d.qkv, d.out, d.lse, s.B, s.T, s.H, s.hd);
    CK(cudaDeviceSynchronize());
    failed |= runtime_failed();
    CK(cudaMemcpy(dqkv2.data(), d.dqkv, d.n_qkv * 4, cudaMemcpyDeviceToHost));
    free_buffers(d);

    std::vector<double> rout(out.size()), rlse(lse.size()), rdqkv(dqkv.size());
    reference(bf16, s, qkv.data(), dout.data(), every, rout.data(), rlse.data(), rdqkv.data());
    double e_out = rel_error(s, every, 1, 0, out.data(), rout.data());
    double e_lse = lse_error(s, every, lse.data(), rlse.data());
    double e_dq = rel_error(s, every, 3, 0, dqkv.data(), rdqkv.data());
    double e_dk = rel_error(s, every, 3, 1, dqkv.data(), rdqkv.data());
    double e_dv = rel_error(s, every, 3, 2, dqkv.data(), rdqkv.data());
    bool same = memcmp(dqkv.data(), dqkv2.data(), dqkv.size() * 4) == 0;

    char line[512];
    snprintf(line, sizeof line,
             "attention %-9s B=%d T=%d H=%d hd=%d%s: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e (tol %.0e)%s%s", md.name,
             s.B, s.T, s.H, s.hd, every > 1 ? " (every 7th head)" : "", e_out, e_lse, e_dq, e_dk, e_dv, tol,
             same ? ", backward repeats bitwise" : ", BACKWARD DIFFERS between runs",
             failed ? ", AN ERROR WAS RECORDED" : "");
    verdict(line, !failed && same && e_out <= tol && e_lse <= tol_lse && e_dq <= tol && e_dk <= tol &&
                      e_dv <= tol);
}

/* The entries must refuse a head width they do not support. */
static void check_refusal(void)
{
    shape s = {1, 8, 2, 6};
    buffers d = alloc_buffers(s);
    dt__cuda_attn_fwd(DT_F32, d.out, d.lse, d.qkv, s.B, s.T, s.H, s.hd);
    bool fwd = runtime_failed();
    dt__cuda_attn_bwd(DT_F32, d.dqkv, d.scratch, d.dout, d.qkv, d.out, d.lse, s.B, s.T, s.H, s.hd);
    bool bwd = runtime_failed();
    CK(cudaDeviceSynchronize());
    free_buffers(d);
    verdict("attention refuses hd=6 (not a multiple of 4) with a recorded error", fwd && bwd);
}

static void time_shape(const shape &s, const mode &md)
{
    const dt_dtype compute = md.bf16 ? DT_BF16 : DT_F32;
    kernel_version = md.version;
    std::vector<float> qkv, dout;
    fill_inputs(s, qkv, dout);
    buffers d = alloc_buffers(s);
    CK(cudaMemcpy(d.qkv, qkv.data(), d.n_qkv * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d.dout, dout.data(), d.n_out * 4, cudaMemcpyHostToDevice));
    cudaStream_t st = (cudaStream_t)dt__cuda_stream();
    cudaEvent_t e0, e1, e2;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventCreate(&e2));
    const int warm = 2, runs = 10;
    float fwd_ms = 0, bwd_ms = 0;
    for (int r = 0; r < warm + runs; r++) {
        CK(cudaEventRecord(e0, st));
        dt__cuda_attn_fwd(compute, d.out, d.lse, d.qkv, s.B, s.T, s.H, s.hd);
        CK(cudaEventRecord(e1, st));
        dt__cuda_attn_bwd(compute, d.dqkv, d.scratch, d.dout, d.qkv, d.out, d.lse, s.B, s.T, s.H, s.hd);
        CK(cudaEventRecord(e2, st));
        CK(cudaEventSynchronize(e2));
        float a, b;
        CK(cudaEventElapsedTime(&a, e0, e1));
        CK(cudaEventElapsedTime(&b, e1, e2));
        if (r >= warm) {
            fwd_ms += a / runs;
            bwd_ms += b / runs;
        }
    }
    bool failed = runtime_failed();
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaEventDestroy(e2));
    free_buffers(d);
    double fwd_flop = 4.0 * s.B * s.H * (double)s.T * s.T * s.hd / 2, bwd_flop = 2.5 * fwd_flop;
    printf("time attention %-9s B=%d T=%d H=%d hd=%d: forward %.3f ms (%.1f TFLOP/s), backward %.3f ms (%.1f "
           "TFLOP/s), both %.3f ms%s\n",
           md.name, s.B, s.T, s.H, s.hd, fwd_ms, fwd_flop / fwd_ms * 1e-9, bwd_ms,
           bwd_flop / bwd_ms * 1e-9, fwd_ms + bwd_ms, failed ? " (AN ERROR WAS RECORDED)" : "");
    if (failed)
        failures++;
}

int main(int argc, char **argv)
{
    bool quick = false, timing = true;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--quick"))
            quick = true, timing = false;
        else if (!strcmp(argv[i], "--no-time"))
            timing = false;
        else {
            fprintf(stderr, "usage: %s [--quick | --no-time]\n", argv[0]);
            return 2;
        }
    }
    CK(cudaStreamCreate(&bench_stream));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s (sm_%d%d, %d SMs)\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount);

    const shape small[] = {{2, 1, 2, 16},  {2, 67, 3, 32},  {1, 128, 4, 64}, {2, 65, 2, 8},
                           {1, 100, 3, 48}, {1, 130, 2, 128}, {3, 64, 2, 20}, {1, 300, 1, 64}};
    for (const shape &s : small)
        for (const mode &md : modes)
            check(s, md);
    check_refusal();
    if (!quick)
        for (const mode &md : modes)
            check(shape{4, 1024, 12, 64}, md);
    if (timing)
        for (const mode &md : modes) {
            time_shape(shape{4, 1024, 12, 64}, md);
            time_shape(shape{16, 1024, 12, 64}, md);
        }
    printf("%s: %d check(s) failed\n", failures ? "FAIL" : "PASS", failures);
    return failures ? 1 : 0;
}
