/* Matrix products through cuBLASLt, with the table's row-major semantics.
 *
 * cuBLASLt is column-major.  A row-major matrix with row stride ld, read as
 * column-major, is its own transpose with leading dimension ld; so the
 * row-major C[m,n] = op(A) op(B) is the column-major C^T[n,m] = op(B)^T
 * op(A)^T: cuBLASLt's "A" is our b (transposed when trans_b), its "B" our a
 * (transposed when trans_a), with M = n, N = m, K = k, and every leading
 * dimension as stored.
 *
 * f32: CUBLAS_COMPUTE_32F (TF32 tensor cores when dt__cuda_set_tf32 is on).
 * bf16: both operands are rounded to bf16 (convert.cu, the cpu's rounding)
 * into a scratch buffer, packed; cuBLASLt multiplies them on tensor cores
 * summing in f32, and writes f32.  Neither sums in the cpu's order (OpenBLAS
 * blocks differently): results agree to rounding, |error| <= about
 * k * 2^-24 * sum_i |a_i b_i| for f32 (TF32 operands: 2^-11 relative each).
 *
 * A descriptor set and its algorithm are cached per shape, strides and
 * pointer alignment: a training step repeats the same few dozen products,
 * and the heuristic query costs tens of microseconds.  The algorithm is the
 * heuristic's first, or with DT_GEMM_TUNE=N the fastest of its first N,
 * timed when the shape is first seen (gemm_tune.cu). */
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <pthread.h>
#include <string.h>

#include "cuda/common.cuh"
#include "cuda/gemm_tune.h"
#include "cuda/ops.h"

extern "C" {
#include "base/log.h"
}

/* All int64_t: compared with memcmp, so no padding. */
typedef struct {
    int64_t bf16, tf32, trans_a, trans_b, m, n, k, lda, ldb, ldc, align_a, align_b, align_c;
} plan_key;

typedef struct {
    plan_key key;
    bool used;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc; /* cuBLASLt's A (our b), B (our a), C = D */
    cublasLtMatmulAlgo_t algo;
} plan;

#define PLANS 64

/* One lock for the plans and the scratch buffer: taken for a whole call,
 * from the conversion to the matmul's launch (the stream orders the rest). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static plan plans[PLANS];
static int next_victim;
static void *scratch; /* bf16 operands: op(A)'s storage, then op(B)'s at a 256-byte boundary */
static size_t scratch_bytes;

/* The largest power of two (up to 256) dividing the address: cuBLASLt's
 * default heuristic assumes 256-byte aligned operands, and a view into a
 * matrix (a column block, q within qkv) is not. */
static int64_t alignment(const void *p)
{
    uintptr_t a = (uintptr_t)p, low = a & (~a + 1);
    return low == 0 || low > 256 ? 256 : (int64_t)low;
}

static void drop(plan *p)
{
    if (!p->used)
        return;
    cublasLtMatrixLayoutDestroy(p->lc);
    cublasLtMatrixLayoutDestroy(p->lb);
    cublasLtMatrixLayoutDestroy(p->la);
    cublasLtMatmulDescDestroy(p->desc);
    p->used = false;
}

/* The plan for k, its algorithm timed on call's operands (call's desc and layouts are filled here). */
static bool build(plan *p, const plan_key *k, dt__gemm_call *call)
{
    memset(p, 0, sizeof *p);
    p->key = *k;
    cublasComputeType_t compute = k->bf16 ? CUBLAS_COMPUTE_32F
                                  : k->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                            : CUBLAS_COMPUTE_32F;
    cudaDataType_t in = k->bf16 ? CUDA_R_16BF : CUDA_R_32F;
    cublasOperation_t op_a = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N; /* cuBLASLt's A is our b */
    cublasOperation_t op_b = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    bool ok = DT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F));
    if (!ok)
        return false;
    bool la = false, lb = false, lc = false;
    ok = DT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a)) &&
         DT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b)) &&
         /* as stored: b is k x n (n x k when trans_b) row-major, i.e. n x k (k x n) column-major */
         (la = DT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la, in, k->trans_b ? k->k : k->n,
                                                          k->trans_b ? k->n : k->k, k->ldb))) &&
         (lb = DT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb, in, k->trans_a ? k->m : k->k,
                                                          k->trans_a ? k->k : k->m, k->lda))) &&
         (lc = DT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lc, CUDA_R_32F, k->n, k->m, k->ldc)));
    cublasLtMatmulPreference_t pref = NULL;
    size_t ws_bytes = 0;
    (void)dt__cuda_workspace(&ws_bytes);
    uint64_t ws = ws_bytes;
    uint32_t al_a = (uint32_t)k->align_b, al_b = (uint32_t)k->align_a, al_c = (uint32_t)k->align_c;
    ok = ok && DT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    ok = ok &&
         DT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                              sizeof ws)) &&
         DT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a,
                                                              sizeof al_a)) &&
         DT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b,
                                                              sizeof al_b)) &&
         DT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c,
                                                              sizeof al_c)) &&
         DT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c,
                                                              sizeof al_c));
    cublasLtMatmulHeuristicResult_t result[DT_GEMM_TUNE_MAX];
    int found = 0;
    ok = ok && DT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)dt__cuda_lt(), p->desc, p->la, p->lb,
                                                              p->lc, p->lc, pref, dt__gemm_tune_candidates(), result,
                                                              &found));
    if (ok && found == 0) {
        DT_CUDA_RECORD(DT_ERR_INVALID,
                       "cuBLASLt has no algorithm for %s %lldx%lldx%lld (trans %d%d, ld %lld/%lld/%lld, alignment "
                       "%lld/%lld/%lld bytes)",
                       k->bf16 ? "bf16" : k->tf32 ? "tf32" : "f32", (long long)k->m, (long long)k->n,
                       (long long)k->k, (int)k->trans_a, (int)k->trans_b, (long long)k->lda, (long long)k->ldb,
                       (long long)k->ldc, (long long)k->align_a, (long long)k->align_b, (long long)k->align_c);
        ok = false;
    }
    if (pref)
        cublasLtMatmulPreferenceDestroy(pref);
    if (!ok) {
        if (lc)
            cublasLtMatrixLayoutDestroy(p->lc);
        if (lb)
            cublasLtMatrixLayoutDestroy(p->lb);
        if (la)
            cublasLtMatrixLayoutDestroy(p->la);
        cublasLtMatmulDescDestroy(p->desc);
        return false;
    }
    call->desc = p->desc, call->la = p->la, call->lb = p->lb, call->lc = p->lc;
    int chosen = dt__gemm_tune(call, result, found);
    p->algo = result[chosen].algo;
    p->used = true;
    /* once per shape in a steady run: a line repeating means the plan cache thrashes */
    DT_INFO("cuBLASLt plan: %s %c%c m=%lld n=%lld k=%lld ld %lld/%lld/%lld alignment %lld/%lld/%lld: candidate %d of %d",
            k->bf16 ? "bf16" : k->tf32 ? "tf32" : "f32", k->trans_a ? 'T' : 'N', k->trans_b ? 'T' : 'N',
            (long long)k->m, (long long)k->n, (long long)k->k, (long long)k->lda, (long long)k->ldb,
            (long long)k->ldc, (long long)k->align_a, (long long)k->align_b, (long long)k->align_c, chosen + 1, found);
    return true;
}

static plan *find(const plan_key *k, dt__gemm_call *call)
{
    for (int i = 0; i < PLANS; i++)
        if (plans[i].used && memcmp(&plans[i].key, k, sizeof *k) == 0)
            return &plans[i];
    plan *p = &plans[next_victim];
    next_victim = (next_victim + 1) % PLANS;
    drop(p);
    return build(p, k, call) ? p : NULL;
}

/* bf16 scratch of at least `bytes`, grown only (shapes repeat every step). */
static void *scratch_for(size_t bytes)
{
    if (bytes <= scratch_bytes)
        return scratch;
    if (scratch) {
        /* earlier products queued on the stream may still read it */
        if (!DT_CUDA_CHECK(cudaStreamSynchronize(dt__stream())) || !DT_CUDA_CHECK(cudaFree(scratch)))
            return NULL;
        scratch = NULL;
        scratch_bytes = 0;
    }
    cudaError_t e = cudaMalloc(&scratch, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        scratch = NULL;
        DT_CUDA_RECORD(DT_ERR_NOMEM, "no device memory for the %zu-byte bf16 operands of a matrix product: %s", bytes,
                       cudaGetErrorString(e));
        return NULL;
    }
    scratch_bytes = bytes;
    return scratch;
}

/* C[m,n] = beta C when k = 0 (no product to add; beta = 0 writes zeros). */
__global__ static void scale_c(float *c, int64_t m, int64_t n, int64_t ldc, float beta)
{
    for (int64_t i = blockIdx.x; i < m; i += gridDim.x)
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
}

/* Bytes of a packed bf16 image of rows x cols in the scratch: whole 256-byte
 * blocks, so that every operand after it starts 256-byte aligned (the plans'
 * keys, and so the algorithms and bits, then do not depend on which entry
 * packed them). */
static size_t bf16_bytes(int64_t rows, int64_t cols)
{
    return ((size_t)(rows * cols) * 2 + 255) / 256 * 256;
}

/* C = alpha op(A) op(B) + beta C on operands as stored on the device: bf16
 * (packed by the caller) when bf16, else f32. */
static void matmul(bool bf16, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha, const void *pa,
                   int64_t lda, const void *pb, int64_t ldb, float beta, float *c, int64_t ldc)
{
    plan_key key;
    memset(&key, 0, sizeof key);
    key.bf16 = bf16;
    key.tf32 = !bf16 && dt__cuda_tf32();
    key.trans_a = trans_a != 0;
    key.trans_b = trans_b != 0;
    key.m = m, key.n = n, key.k = k, key.lda = lda, key.ldb = ldb, key.ldc = ldc;
    key.align_a = alignment(pa), key.align_b = alignment(pb), key.align_c = alignment(c);
    dt__gemm_call call = {};
    call.pa = pa, call.pb = pb, call.alpha = alpha, call.beta = beta, call.c_bytes = (size_t)(m * ldc) * sizeof(float);
    plan *p = find(&key, &call);
    if (!p)
        return;
    size_t ws_bytes = 0;
    void *ws = dt__cuda_workspace(&ws_bytes);
    DT_CUBLAS_CHECK(cublasLtMatmul((cublasLtHandle_t)dt__cuda_lt(), p->desc, &alpha, pb, p->la, pa, p->lb, &beta, c,
                                   p->lc, c, p->lc, &p->algo, ws, ws_bytes, dt__stream()));
}

static void product(dt_dtype compute, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                    const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (compute != DT_BF16) {
        matmul(false, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    /* op(A)'s storage is ra x ca (row stride lda), op(B)'s rb x cb; packed
     * copies have row strides ca and cb */
    int64_t ra = trans_a ? k : m, ca = trans_a ? m : k, rb = trans_b ? n : k, cb = trans_b ? k : n;
    size_t a_bytes = bf16_bytes(ra, ca);
    char *s = (char *)scratch_for(a_bytes + bf16_bytes(rb, cb));
    if (!s)
        return;
    dt__cuda_to_bf16((uint16_t *)s, a, ra, ca, lda);
    dt__cuda_to_bf16((uint16_t *)(s + a_bytes), b, rb, cb, ldb);
    matmul(true, trans_a, trans_b, m, n, k, alpha, s, ca, s + a_bytes, cb, beta, c, ldc);
}

void dt__cuda_gemm(dt_dtype compute, int trans_a, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                   const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc)
{
    if (m <= 0 || n <= 0 || !dt__cuda_enter())
        return;
    if (compute != DT_F32 && compute != DT_BF16) {
        DT_CUDA_RECORD(DT_ERR_INVALID, "gemm: compute type %s is not f32 or bf16",
                       dt_dtype_name(compute) ? dt_dtype_name(compute) : "?");
        return;
    }
    if (k <= 0) {
        scale_c<<<dt__grid_rows(m), dt__row_threads(n, 256), 0, dt__stream()>>>(c, m, n, ldc, beta);
        DT_CUDA_LAUNCHED();
        return;
    }
    pthread_mutex_lock(&lock);
    product(compute, trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    pthread_mutex_unlock(&lock);
}

/* A linear layer's backward products (backend.h's linear_grads).  bf16: dy
 * is converted once for both products (the fallback, two gemm calls,
 * converts it twice: on GPT-2 the lm head's dy alone is 8192 x 50304), and
 * the packed images sit at 256-byte boundaries as in product(), so the
 * plans, algorithms and bits are the fallback's. */
void dt__cuda_linear_grads(dt_dtype compute, int64_t m, int64_t n, int64_t k, const float *dy, const float *x,
                           const float *w, float *dw, float *db, float *dx)
{
    if (m <= 0 || n <= 0 || k <= 0 || compute != DT_BF16) { /* nothing to share: the fallback's calls */
        dt__cuda_gemm(compute, 1, 0, m, n, k, 1.0f, dy, m, x, n, 1.0f, dw, n);
        if (db)
            dt__cuda_rows_sum_add(db, dy, k, m);
        if (dx)
            dt__cuda_gemm(compute, 0, 0, k, n, m, 1.0f, dy, m, w, n, 0.0f, dx, n);
        return;
    }
    if (!dt__cuda_enter())
        return;
    size_t dy_bytes = bf16_bytes(k, m), x_bytes = bf16_bytes(k, n);
    pthread_mutex_lock(&lock);
    char *s = (char *)scratch_for(dy_bytes + x_bytes + (dx ? bf16_bytes(m, n) : 0));
    if (s) {
        dt__cuda_to_bf16((uint16_t *)s, dy, k, m, m);
        dt__cuda_to_bf16((uint16_t *)(s + dy_bytes), x, k, n, n);
        matmul(true, 1, 0, m, n, k, 1.0f, s, m, s + dy_bytes, n, 1.0f, dw, n); /* dw += dy^T x */
        if (dx) {
            dt__cuda_to_bf16((uint16_t *)(s + dy_bytes + x_bytes), w, m, n, n);
            matmul(true, 0, 0, k, n, m, 1.0f, s, m, s + dy_bytes + x_bytes, n, 0.0f, dx, n); /* dx = dy w */
        }
    }
    pthread_mutex_unlock(&lock);
    if (s && db)
        dt__cuda_rows_sum_add(db, dy, k, m);
}
