/* Choosing a matrix product's cuBLASLt algorithm by timing, once per shape.
 *
 * cuBLASLt's heuristic ranks its candidates by a model; its first is not
 * always the fastest (on an H200 it put GPT-2's QKV product, bf16
 * 8192x2304x768, at 36-42 TFLOP/s where the other products ran at 150-340).
 * With DT_GEMM_TUNE=N (N > 1, at most 16), the first time a shape is seen
 * the heuristic's first N candidates each run a few times on the call's own
 * operands into a scratch C, and the fastest is kept with the shape's plan.
 * This waits on the stream (the first step only); the scratch C is freed
 * after.  Every candidate computes the same product summing in f32, but
 * they tile and split k differently, so their bits differ by rounding, and
 * which one wins a timing can differ between processes: a run restarted
 * from a checkpoint may then follow other bits.  So it is off by default
 * (the heuristic's first, untimed, the same in every process). */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include "cuda/common.cuh"
#include "cuda/gemm_tune.h"

extern "C" {
#include "base/env.h" /* C headers without their own extern "C" */
#include "base/log.h"
}

int dt__gemm_tune_candidates(void)
{
    static int n = -1;
    if (n < 0) {
        int64_t v = 1;
        if (dt__env_int("DT_GEMM_TUNE", 1, DT_GEMM_TUNE_MAX, &v) != DT_OK) {
            DT_WARN("%s; the heuristic's first algorithm is taken untimed", dt_last_error());
            v = 1;
        }
        n = (int)v;
    }
    return n;
}

/* Milliseconds of `runs` launches of algo (after one warm-up), or -1 when it fails. */
static float time_algo(const dt__gemm_call *g, const cublasLtMatmulAlgo_t *algo, void *c, cudaEvent_t t0,
                       cudaEvent_t t1, int runs)
{
    cudaStream_t s = dt__stream();
    size_t ws_bytes = 0;
    void *ws = dt__cuda_workspace(&ws_bytes);
    for (int r = 0; r <= runs; r++) {
        if (r == 1 && cudaEventRecord(t0, s) != cudaSuccess)
            return -1;
        if (cublasLtMatmul((cublasLtHandle_t)dt__cuda_lt(), g->desc, &g->alpha, g->pb, g->la, g->pa, g->lb, &g->beta,
                           c, g->lc, c, g->lc, algo, ws, ws_bytes, s) != CUBLAS_STATUS_SUCCESS)
            return -1;
    }
    float ms = -1;
    if (cudaEventRecord(t1, s) != cudaSuccess || cudaEventSynchronize(t1) != cudaSuccess ||
        cudaEventElapsedTime(&ms, t0, t1) != cudaSuccess)
        return -1;
    return ms;
}

int dt__gemm_tune(const dt__gemm_call *g, const cublasLtMatmulHeuristicResult_t *cand, int n)
{
    if (n <= 1)
        return 0;
    void *c = NULL;
    cudaEvent_t t0 = NULL, t1 = NULL;
    bool ready = cudaMalloc(&c, g->c_bytes) == cudaSuccess && cudaMemsetAsync(c, 0, g->c_bytes, dt__stream()) ==
                 cudaSuccess && cudaEventCreate(&t0) == cudaSuccess && cudaEventCreate(&t1) == cudaSuccess;
    int best = 0;
    float best_ms = -1;
    for (int i = 0; ready && i < n; i++) {
        if (cand[i].state != CUBLAS_STATUS_SUCCESS)
            continue;
        float ms = time_algo(g, &cand[i].algo, c, t0, t1, 3);
        if (ms >= 0 && (best_ms < 0 || ms < best_ms))
            best = i, best_ms = ms;
    }
    /* a candidate that failed may leave an error behind; the product itself runs on the kept one */
    (void)cudaGetLastError();
    if (t1)
        cudaEventDestroy(t1);
    if (t0)
        cudaEventDestroy(t0);
    if (c) {
        (void)cudaStreamSynchronize(dt__stream());
        cudaFree(c);
    }
    (void)cudaGetLastError();
    return best;
}
