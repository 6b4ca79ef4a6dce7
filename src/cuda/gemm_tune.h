/* gemm_tune.cu: the fastest of cuBLASLt's candidate algorithms for a
 * product, timed on its operands (gemm.cu asks once per shape). */
#ifndef DT_CUDA_GEMM_TUNE_H
#define DT_CUDA_GEMM_TUNE_H

#include <cublasLt.h>
#include <stddef.h>

#define DT_GEMM_TUNE_MAX 16

/* One product as cuBLASLt sees it (gemm.cu's plan and operands). */
typedef struct {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    const void *pa, *pb; /* cuBLASLt's B (our a) and A (our b), as passed to cublasLtMatmul */
    float alpha, beta;
    size_t c_bytes; /* C's extent: rows x ldc f32 */
} dt__gemm_call;

/* How many candidates to ask the heuristic for and time: DT_GEMM_TUNE
 * (default 1: the heuristic's first, untimed; at most DT_GEMM_TUNE_MAX). */
int dt__gemm_tune_candidates(void);

/* The index of the fastest of cand[0..n) on g (into a scratch C, so g's
 * own C is untouched); 0 when n <= 1 or nothing could be timed. */
int dt__gemm_tune(const dt__gemm_call *g, const cublasLtMatmulHeuristicResult_t *cand, int n);

#endif
