/* Causal multi-head attention on the GPU, flash-attention style: no T x T
 * matrix in memory.  The layout is the cpu one (src/nn/attention.c): qkv
 * [B, T, 3D] with q, k and v side by side and head h at columns h*hd of
 * each (row stride 3D), out [B, T, D] with head h at columns h*hd,
 * D = H hd, scale 1/sqrt(hd), causal mask.
 *
 * Forward (one block per (b, h) and tile of query rows): stream the key
 * and value tiles up to the diagonal through shared memory, keep the row
 * max m and sum l of exp(s - m) on the way (online softmax), rescale the
 * output accumulator when m grows, divide by l at the end.  saved[b, h, t]
 * = the row's log-sum-exp (natural log, of the scaled scores).
 *
 * Backward (FlashAttention-2, without atomics):
 *   1. D_i = sum_d dO[i, d] O[i, d]                      -> scratch [B, H, T]
 *   2. one block per (b, h, key tile j): K_j, V_j in shared memory, for the
 *      query tiles i >= j: P = exp(S scale - lse), dV_j += P^T dO_i,
 *      dP = dO_i V_j^T, dS = P (dP - D_i), dK_j += scale dS^T Q_i;
 *   3. one block per (b, h, query tile i): the same P and dS again for the
 *      key tiles j <= i, dQ_i += scale dS K_j.
 * Pass 3 recomputes S and dP (7 tile products where FlashAttention-2 has
 * 5) so that every dQ element is summed by one thread in a fixed order:
 * the result repeats bitwise, with no float atomics and no partial dQ in
 * memory.  Every element of dqkv is written (rows past T do not exist).
 *
 * Two kernel families.  compute = DT_F32 runs the SIMT kernels (f32 FMAs),
 * compute = DT_BF16 the tensor-core ones (mma.sync bf16, f32 accumulators;
 * "tensor cores" below).  kernel_version = 1 runs SIMT for bf16 as well
 * (same results to f32 rounding; dev/cuda/attention_bench.cu checks both).
 * Measured on an H200 (dev/cuda/attention_bench.cu), B=16 T=1024 H=12
 * hd=64, forward + backward: f32 0.85 + 3.13 ms, bf16 0.18 + 0.84 ms
 * (140 and 77 TFLOP/s counted as FlashAttention counts a causal mask).
 *
 * SIMT: tiles are 64 x 64 and blocks 128 threads (4 warps): thread
 * (rg, cg) = (tid / 8, tid % 8) owns rows 4rg..4rg+3 of a
 * tile, key columns cg + 8j (j < 8) of a 64 x 64 product and head columns
 * 32q + 4cg + e (e < 4) of a 64 x hd one.  Head widths go in buckets of
 * 32, 64 and 128 (a template parameter HD); a smaller hd pads with zero
 * columns.  Shared memory per block, floats, with LD = HD + 4 (the 4 keep
 * the 16-byte reads free of bank conflicts) and PLD = 68:
 *   forward 3*64*LD + 64*PLD      (HD = 64: 68 KiB)
 *   dK, dV  4*64*LD + 2*64*PLD    (HD = 64: 102 KiB)
 *   dQ      4*64*LD + 64*PLD      (HD = 64: 85 KiB)
 *
 * Precision.  compute = DT_F32: f32 products and sums (plain FMAs, no
 * TF32).  compute = DT_BF16: the operands of every product (Q, K, V, dO,
 * and P, dS where they are multiplied) are rounded to bf16 (nearest even,
 * like dt_f32_to_bf16) and the products summed in f32, the cpu's meaning
 * of bf16.  The order of summation differs from the cpu's (which sums
 * each product over its whole inner dimension, and normalises P before
 * P V): results agree with the cpu to a few f32 roundings per product
 * (about 1e-6 relative) in f32 and to bf16 rounding (about 1e-2) in bf16.
 * The exponentials use exp2f of log2(e)-scaled scores (2 ulp).
 *
 * hd must be a multiple of 4 in 4..128 (16-byte rows); another records
 * DT_ERR_INVALID.  The pointers must be 16-byte aligned (cudaMalloc'd
 * memory and the arena's are; offsets of whole rows keep it). */
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>

#include "cuda/attention.h"
#include "cuda/common.cuh"

namespace {

constexpr int NT = 128;      /* threads per block */
constexpr int BR = 64;       /* query rows per tile */
constexpr int BC = 64;       /* keys per tile */
constexpr int PLD = BC + 4;  /* row stride of a 64 x 64 tile in shared memory */
constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;

/* round to nearest even, as dt_f32_to_bf16 (a NaN stays a NaN) */
__device__ __forceinline__ float bf16_round(float f)
{
    uint32_t x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return __uint_as_float(x | 0x00400000u);
    return __uint_as_float((x + 0x7fffu + ((x >> 16) & 1u)) & 0xffff0000u);
}

template <bool BF16> __device__ __forceinline__ float operand(float f) { return BF16 ? bf16_round(f) : f; }

/* dst[r][c] (row stride HD + 4) = src rows row0..row0+63, columns 0..HD-1,
 * zero past T and past hd; rounded to bf16 when BF16.  Consecutive threads
 * read consecutive 16 bytes of a row. */
template <int HD, bool BF16>
__device__ __forceinline__ void load_tile(float *dst, const float *src, int64_t ld, int row0, int T, int hd)
{
    constexpr int C4 = HD / 4, LD = HD + 4;
    for (int idx = threadIdx.x; idx < BR * C4; idx += NT) {
        int r = idx / C4, c = (idx - r * C4) * 4;
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row0 + r < T && c < hd) {
            v = *reinterpret_cast<const float4 *>(src + (int64_t)(row0 + r) * ld + c);
            v.x = operand<BF16>(v.x);
            v.y = operand<BF16>(v.y);
            v.z = operand<BF16>(v.z);
            v.w = operand<BF16>(v.w);
        }
        *reinterpret_cast<float4 *>(dst + r * LD + c) = v;
    }
}

/* acc[i][j] += sum_d A[4rg + i][d] B[cg + 8j][d]: a 64 x 64 product over
 * the head dimension (A, B row stride HD + 4).  The A reads are broadcasts
 * within each 8-thread phase; the B rows cg + 8j start in distinct bank
 * quads since (HD + 4) / 4 is odd. */
template <int HD> __device__ __forceinline__ void tile_abt(float acc[4][8], const float *A, const float *B, int hd)
{
    constexpr int LD = HD + 4;
    const int rg = threadIdx.x >> 3, cg = threadIdx.x & 7;
    const float *a0 = A + rg * 4 * LD, *b0 = B + cg * LD;
    for (int d = 0; d < hd; d += 4) {
        float4 a[4], b[8];
#pragma unroll
        for (int i = 0; i < 4; i++)
            a[i] = *reinterpret_cast<const float4 *>(a0 + i * LD + d);
#pragma unroll
        for (int j = 0; j < 8; j++)
            b[j] = *reinterpret_cast<const float4 *>(b0 + j * 8 * LD + d);
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float s = acc[i][j];
                s = fmaf(a[i].x, b[j].x, s);
                s = fmaf(a[i].y, b[j].y, s);
                s = fmaf(a[i].z, b[j].z, s);
                s = fmaf(a[i].w, b[j].w, s);
                acc[i][j] = s;
            }
    }
}

/* acc[i][q][e] += sum_k P[4rg + i][k] Z[k][32q + 4cg + e]: a 64 x HD
 * product over 64 keys (or queries); P row stride PLD, Z row stride HD + 4.
 * The Z reads of a phase are 128 contiguous bytes. */
template <int HD> __device__ __forceinline__ void tile_ab(float acc[4][HD / 32][4], const float *P, const float *Z)
{
    constexpr int LD = HD + 4, NQ = HD / 32;
    const int rg = threadIdx.x >> 3, cg = threadIdx.x & 7;
    const float *p0 = P + rg * 4 * PLD, *z0 = Z + cg * 4;
#pragma unroll 2
    for (int k = 0; k < BC; k += 4) {
        float p[4][4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            float4 t = *reinterpret_cast<const float4 *>(p0 + i * PLD + k);
            p[i][0] = t.x;
            p[i][1] = t.y;
            p[i][2] = t.z;
            p[i][3] = t.w;
        }
#pragma unroll
        for (int kk = 0; kk < 4; kk++)
#pragma unroll
            for (int q = 0; q < NQ; q++) {
                float4 z = *reinterpret_cast<const float4 *>(z0 + (k + kk) * LD + 32 * q);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    acc[i][q][0] = fmaf(p[i][kk], z.x, acc[i][q][0]);
                    acc[i][q][1] = fmaf(p[i][kk], z.y, acc[i][q][1]);
                    acc[i][q][2] = fmaf(p[i][kk], z.z, acc[i][q][2]);
                    acc[i][q][3] = fmaf(p[i][kk], z.w, acc[i][q][3]);
                }
            }
    }
}

/* Row 4rg + i of a 64 x HD accumulator, times `mul`, to dst (row stride
 * ld, rows past T and columns past hd left alone). */
template <int HD>
__device__ __forceinline__ void store_rows(float *dst, int64_t ld, int row0, int T, int hd,
                                           const float acc[4][HD / 32][4], const float mul[4])
{
    const int rg = threadIdx.x >> 3, cg = threadIdx.x & 7;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        int row = row0 + rg * 4 + i;
        if (row >= T)
            continue;
#pragma unroll
        for (int q = 0; q < HD / 32; q++) {
            int c = 32 * q + 4 * cg;
            if (c < hd)
                *reinterpret_cast<float4 *>(dst + (int64_t)row * ld + c) =
                    make_float4(acc[i][q][0] * mul[i], acc[i][q][1] * mul[i], acc[i][q][2] * mul[i],
                                acc[i][q][3] * mul[i]);
        }
    }
}

/* (b, h) of a block's pair index. */
struct head {
    int64_t q, o; /* offsets of head h of batch b in qkv (row stride 3D) and in out (row stride D) */
    int64_t row;  /* offset of (b, h) in a [B, H, T] array */
};

__device__ __forceinline__ head head_of(int bh, int T, int H, int hd)
{
    int64_t b = bh / H, h = bh % H, D = (int64_t)H * hd;
    head r;
    r.q = b * T * 3 * D + h * hd;
    r.o = b * T * D + h * hd;
    r.row = (int64_t)bh * T;
    return r;
}

/* ---- forward ---- */

/* Block: query tile qt of pair bh, the longest tiles first (the causal
 * loop's length grows with qt). */
template <int HD, bool BF16>
__global__ void __launch_bounds__(NT)
    attn_fwd_simt(float *out, float *lse, const float *qkv, int T, int H, int hd, int tiles, float sl2)
{
    extern __shared__ float4 smem4[];
    constexpr int LD = HD + 4, NQ = HD / 32;
    float *Qs = reinterpret_cast<float *>(smem4), *Ks = Qs + BR * LD, *Vs = Ks + BC * LD, *Ps = Vs + BC * LD;
    const int BH = (int)(gridDim.x / tiles), bh = (int)(blockIdx.x % BH), qt = tiles - 1 - (int)(blockIdx.x / BH);
    const int rg = threadIdx.x >> 3, cg = threadIdx.x & 7, q0 = qt * BR;
    const head hp = head_of(bh, T, H, hd);
    const int64_t ld = 3 * (int64_t)H * hd, D = (int64_t)H * hd;
    const float *q = qkv + hp.q, *k = q + D, *v = q + 2 * D;

    load_tile<HD, BF16>(Qs, q, ld, q0, T, hd);
    float m[4], l[4], o[4][NQ][4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f; /* this thread's columns only: summed over the 8 at the end */
#pragma unroll
        for (int c = 0; c < NQ; c++)
            o[i][c][0] = o[i][c][1] = o[i][c][2] = o[i][c][3] = 0.0f;
    }
    for (int kt = 0; kt <= qt; kt++) {
        load_tile<HD, BF16>(Ks, k, ld, kt * BC, T, hd);
        load_tile<HD, BF16>(Vs, v, ld, kt * BC, T, hd);
        __syncthreads();
        float s[4][8];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 8; j++)
                s[i][j] = 0.0f;
        tile_abt<HD>(s, Qs, Ks, hd);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int row = q0 + rg * 4 + i;
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int key = kt * BC + cg + 8 * j;
                /* key <= row also keeps keys past T out: a row < T sees
                 * keys <= row < T (rows past T are never stored) */
                s[i][j] = key <= row ? s[i][j] * sl2 : -INFINITY;
                mx = fmaxf(mx, s[i][j]);
            }
            /* the row's 8 threads are lanes 8w..8w+7 of one warp */
            mx = fmaxf(mx, __shfl_xor_sync(DT__FULL_MASK, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(DT__FULL_MASK, mx, 2));
            mx = fmaxf(mx, __shfl_xor_sync(DT__FULL_MASK, mx, 4));
            /* finite: key kt*64 <= row for every row of the tile */
            float mnew = fmaxf(m[i], mx), alpha = exp2f(m[i] - mnew); /* 0 on the first tile */
            m[i] = mnew;
            l[i] *= alpha;
#pragma unroll
            for (int c = 0; c < NQ; c++) {
                o[i][c][0] *= alpha;
                o[i][c][1] *= alpha;
                o[i][c][2] *= alpha;
                o[i][c][3] *= alpha;
            }
#pragma unroll
            for (int j = 0; j < 8; j++) {
                float p = exp2f(s[i][j] - mnew);
                l[i] += p;
                Ps[(rg * 4 + i) * PLD + cg + 8 * j] = operand<BF16>(p);
            }
        }
        __syncthreads();
        tile_ab<HD>(o, Ps, Vs);
        __syncthreads(); /* before the next tile overwrites Ks, Vs, Ps */
    }
    float inv[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        l[i] += __shfl_xor_sync(DT__FULL_MASK, l[i], 1);
        l[i] += __shfl_xor_sync(DT__FULL_MASK, l[i], 2);
        l[i] += __shfl_xor_sync(DT__FULL_MASK, l[i], 4);
        inv[i] = 1.0f / l[i];
        int row = q0 + rg * 4 + i;
        if (cg == 0 && row < T)
            lse[hp.row + row] = (m[i] + log2f(l[i])) * LN2;
    }
    store_rows<HD>(out + hp.o, D, q0, T, hd, o, inv);
}

/* ---- backward ---- */

/* Dsum[b, h, t] = sum_d dout[b, t, h*hd + d] out[b, t, h*hd + d], summed in
 * double: one warp per (b, t, h), lanes along d.  In bf16, dout is rounded
 * as in the product dP = dO V^T, so that D_i = sum_j P_ij dP_ij holds to the
 * rounding of P in out, as on the cpu (which sums P dP). */
template <bool BF16>
__global__ void attn_bwd_dot(float *Dsum, const float *dout, const float *out, int64_t rows, int T, int H, int hd)
{
    const int lane = threadIdx.x & 31;
    const int64_t warps = (int64_t)gridDim.x * (blockDim.x / 32), D = (int64_t)H * hd;
    for (int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; w < rows * H; w += warps) {
        int64_t bt = w / H, h = w % H, b = bt / T, t = bt % T;
        const float *x = dout + bt * D + h * hd, *y = out + bt * D + h * hd;
        double s = 0.0;
        for (int c = lane * 4; c < hd; c += 128) {
            float4 a = *reinterpret_cast<const float4 *>(x + c), o = *reinterpret_cast<const float4 *>(y + c);
            s += (double)operand<BF16>(a.x) * o.x + (double)operand<BF16>(a.y) * o.y +
                 (double)operand<BF16>(a.z) * o.z + (double)operand<BF16>(a.w) * o.w;
        }
        s = dt__warp_sum(s);
        if (lane == 0)
            Dsum[(b * H + h) * T + t] = (float)s;
    }
}

/* Rows row0..row0+63 of lse (times log2 e) and of Dsum into shared memory,
 * zero past T. */
__device__ __forceinline__ void load_row_stats(float *Ls, float *Ds, const float *lse, const float *Dsum, int row0,
                                               int T)
{
    for (int r = threadIdx.x; r < BR; r += NT) {
        bool in = row0 + r < T;
        Ls[r] = in ? lse[row0 + r] * LOG2E : 0.0f;
        Ds[r] = in ? Dsum[row0 + r] : 0.0f;
    }
}

/* Block: key tile kt of pair bh (the longest loops, small kt, first). */
template <int HD, bool BF16>
__global__ void __launch_bounds__(NT)
    attn_bwd_dkdv_simt(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *Dsum, int T,
                       int H, int hd, int tiles, float sl2, float scale)
{
    extern __shared__ float4 smem4[];
    constexpr int LD = HD + 4, NQ = HD / 32;
    float *Ks = reinterpret_cast<float *>(smem4), *Vs = Ks + BC * LD, *Qs = Vs + BC * LD, *dOs = Qs + BR * LD;
    float *Pt = dOs + BR * LD, *dSt = Pt + BC * PLD, *Ls = dSt + BC * PLD, *Ds = Ls + BR;
    const int BH = (int)(gridDim.x / tiles), bh = (int)(blockIdx.x % BH), kt = (int)(blockIdx.x / BH);
    const int rg = threadIdx.x >> 3, cg = threadIdx.x & 7, k0 = kt * BC;
    const head hp = head_of(bh, T, H, hd);
    const int64_t ld = 3 * (int64_t)H * hd, D = (int64_t)H * hd;
    const float *q = qkv + hp.q, *k = q + D, *v = q + 2 * D, *dO = dout + hp.o;

    load_tile<HD, BF16>(Ks, k, ld, k0, T, hd);
    load_tile<HD, BF16>(Vs, v, ld, k0, T, hd);
    float dk[4][NQ][4], dv[4][NQ][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int c = 0; c < NQ; c++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                dk[i][c][e] = dv[i][c][e] = 0.0f;
    for (int qt = kt; qt < tiles; qt++) {
        const int q0 = qt * BR;
        load_tile<HD, BF16>(Qs, q, ld, q0, T, hd);
        load_tile<HD, BF16>(dOs, dO, D, q0, T, hd);
        load_row_stats(Ls, Ds, lse + hp.row, Dsum + hp.row, q0, T);
        __syncthreads();
        /* transposed tiles: row = key k0 + 4rg + i, column = query q0 + cg + 8j */
        float s[4][8], dp[4][8];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 8; j++)
                s[i][j] = dp[i][j] = 0.0f;
        tile_abt<HD>(s, Ks, Qs, hd);
        tile_abt<HD>(dp, Vs, dOs, hd);
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int key = k0 + rg * 4 + i, c = cg + 8 * j, query = q0 + c;
                float p = key <= query && query < T ? exp2f(s[i][j] * sl2 - Ls[c]) : 0.0f;
                float ds = p * (dp[i][j] - Ds[c]);
                Pt[(rg * 4 + i) * PLD + c] = operand<BF16>(p);
                dSt[(rg * 4 + i) * PLD + c] = operand<BF16>(ds);
            }
        __syncthreads();
        tile_ab<HD>(dv, Pt, dOs);
        tile_ab<HD>(dk, dSt, Qs);
        __syncthreads(); /* before the next tile overwrites Qs, dOs, Pt, dSt */
    }
    const float one[4] = {1.0f, 1.0f, 1.0f, 1.0f}, sc[4] = {scale, scale, scale, scale};
    store_rows<HD>(dqkv + hp.q + D, ld, k0, T, hd, dk, sc);
    store_rows<HD>(dqkv + hp.q + 2 * D, ld, k0, T, hd, dv, one);
}

/* Block: query tile qt of pair bh (the longest loops first). */
template <int HD, bool BF16>
__global__ void __launch_bounds__(NT)
    attn_bwd_dq_simt(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *Dsum, int T,
                     int H, int hd, int tiles, float sl2, float scale)
{
    extern __shared__ float4 smem4[];
    constexpr int LD = HD + 4, NQ = HD / 32;
    float *Qs = reinterpret_cast<float *>(smem4), *dOs = Qs + BR * LD, *Ks = dOs + BR * LD, *Vs = Ks + BC * LD;
    float *dSs = Vs + BC * LD, *Ls = dSs + BR * PLD, *Ds = Ls + BR;
    const int BH = (int)(gridDim.x / tiles), bh = (int)(blockIdx.x % BH), qt = tiles - 1 - (int)(blockIdx.x / BH);
    const int rg = threadIdx.x >> 3, cg = threadIdx.x & 7, q0 = qt * BR;
    const head hp = head_of(bh, T, H, hd);
    const int64_t ld = 3 * (int64_t)H * hd, D = (int64_t)H * hd;
    const float *q = qkv + hp.q, *k = q + D, *v = q + 2 * D, *dO = dout + hp.o;

    load_tile<HD, BF16>(Qs, q, ld, q0, T, hd);
    load_tile<HD, BF16>(dOs, dO, D, q0, T, hd);
    load_row_stats(Ls, Ds, lse + hp.row, Dsum + hp.row, q0, T);
    float dq[4][NQ][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int c = 0; c < NQ; c++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                dq[i][c][e] = 0.0f;
    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * BC;
        load_tile<HD, BF16>(Ks, k, ld, k0, T, hd);
        load_tile<HD, BF16>(Vs, v, ld, k0, T, hd);
        __syncthreads();
        /* row = query q0 + 4rg + i, column = key k0 + cg + 8j */
        float s[4][8], dp[4][8];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 8; j++)
                s[i][j] = dp[i][j] = 0.0f;
        tile_abt<HD>(s, Qs, Ks, hd);
        tile_abt<HD>(dp, dOs, Vs, hd);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int r = rg * 4 + i, query = q0 + r;
            const float Lr = Ls[r], Dr = Ds[r];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                int key = k0 + cg + 8 * j;
                float p = key <= query && query < T ? exp2f(s[i][j] * sl2 - Lr) : 0.0f;
                dSs[r * PLD + cg + 8 * j] = operand<BF16>(p * (dp[i][j] - Dr));
            }
        }
        __syncthreads();
        tile_ab<HD>(dq, dSs, Ks);
        __syncthreads(); /* before the next tile overwrites Ks, Vs, dSs */
    }
    const float sc[4] = {scale, scale, scale, scale};
    store_rows<HD>(dqkv + hp.q, ld, q0, T, hd, dq, sc);
}

/* ---- tensor cores: bf16 mma.sync m16n8k16, f32 accumulators ----
 *
 * The bf16 kernels: the same passes as the SIMT ones, the products on
 * tensor cores.  Q, K, V and dO sit in shared memory as bf16 (row stride
 * HD + 8: the eight 16-byte rows an ldmatrix phase reads fall in distinct
 * banks).  Warp w owns rows 16w..16w+15 of its block's rows (queries, or
 * keys in the dK dV pass).  A 16 x 64 score tile stays in registers in the
 * accumulator layout (thread: rows g = lane/4 and g + 8, columns 8n + 2t,
 * 8n + 2t + 1 for t = lane%4) and becomes the A fragments of the next
 * product in place (FlashAttention-2), so P and dS never go through shared
 * memory.  Fragment layouts are PTX's for mma.m16n8k16 (.row.col) and
 * ldmatrix (.trans for the operands stored [k][n]).
 *
 * The forward takes 128 query rows a block (8 warps, 256 threads) and
 * loads the next key and value tile into registers while it works on the
 * current one; the backward passes take 64 (4 warps).  Shared memory,
 * bytes: forward 2 (128 + 2*64)(HD + 8) (HD = 64: 36 KiB), each backward
 * pass 2*4*64 (HD + 8) + 512 (HD = 64: 37 KiB). */

/* Two floats rounded to bf16 (nearest even) in one register, lo in the low
 * half: cvt's first source goes to the high half. */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi)
{
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* d += a b: A 16 x 16 (4 registers), B 16 x 8 (2), D 16 x 8 f32. */
__device__ __forceinline__ void mma_bf16_16816(float d[4], const uint32_t a[4], const uint32_t b[2])
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/* Four 8 x 8 bf16 matrices; lane 8i + r gives the address of row r of
 * matrix i, register i gets matrix i's row lane/4, columns 2(lane%4), +1. */
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const uint16_t *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

/* The same, transposed: register i gets matrix i's column lane/4, rows
 * 2(lane%4), +1. */
__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const uint16_t *p)
{
    uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

/* dst[r][c] (bf16, row stride HD + 8) = src rows row0..row0+ROWS-1 rounded
 * to bf16, zero past T and past hd; THREADS threads share the work. */
template <int HD, int ROWS, int THREADS>
__device__ __forceinline__ void load_tile_bf16(uint16_t *dst, const float *src, int64_t ld, int row0, int T, int hd)
{
    constexpr int C4 = HD / 4, LDB = HD + 8;
    for (int idx = threadIdx.x; idx < ROWS * C4; idx += THREADS) {
        int r = idx / C4, c = (idx - r * C4) * 4;
        uint2 w = make_uint2(0u, 0u);
        if (row0 + r < T && c < hd) {
            float4 v = *reinterpret_cast<const float4 *>(src + (int64_t)(row0 + r) * ld + c);
            w = make_uint2(pack_bf16(v.x, v.y), pack_bf16(v.z, v.w));
        }
        *reinterpret_cast<uint2 *>(dst + r * LDB + c) = w;
    }
}

/* The same in two steps, to overlap the loads with work: fetch_tile reads
 * this thread's part of a 64-row tile into registers, put_tile stores it. */
template <int HD, int THREADS>
__device__ __forceinline__ void fetch_tile(float4 v[BC * HD / 4 / THREADS], const float *src, int64_t ld, int row0,
                                           int T, int hd)
{
    constexpr int C4 = HD / 4;
#pragma unroll
    for (int i = 0; i < BC * C4 / THREADS; i++) {
        int idx = (int)threadIdx.x + i * THREADS, r = idx / C4, c = (idx - r * C4) * 4;
        v[i] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (row0 + r < T && c < hd)
            v[i] = *reinterpret_cast<const float4 *>(src + (int64_t)(row0 + r) * ld + c);
    }
}

template <int HD, int THREADS>
__device__ __forceinline__ void put_tile(uint16_t *dst, const float4 v[BC * HD / 4 / THREADS])
{
    constexpr int C4 = HD / 4, LDB = HD + 8;
#pragma unroll
    for (int i = 0; i < BC * C4 / THREADS; i++) {
        int idx = (int)threadIdx.x + i * THREADS, r = idx / C4, c = (idx - r * C4) * 4;
        *reinterpret_cast<uint2 *>(dst + r * LDB + c) =
            make_uint2(pack_bf16(v[i].x, v[i].y), pack_bf16(v[i].z, v[i].w));
    }
}

/* The warp's acc[n] (n < 8: a 16 x 64 tile) += A B^T over the head
 * dimension: A = rows a0..a0+15 of As, B = rows 0..63 of Bs (both bf16
 * [rows][HD + 8]). */
template <int HD>
__device__ __forceinline__ void mma_abt(float acc[8][4], const uint16_t *As, int a0, const uint16_t *Bs)
{
    constexpr int LDB = HD + 8;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++) {
        uint32_t a[4];
        ldsm_x4(a, As + (a0 + (lane & 15)) * LDB + ks * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < 4; np++) { /* n-tiles 2np, 2np + 1 */
            uint32_t b[4];
            ldsm_x4(b, Bs + (np * 16 + (lane >> 4) * 8 + (lane & 7)) * LDB + ks * 16 + ((lane >> 3) & 1) * 8);
            mma_bf16_16816(acc[2 * np], a, b);
            mma_bf16_16816(acc[2 * np + 1], a, b + 2);
        }
    }
}

/* The warp's 16 x 64 tile x (accumulator layout) as A fragments of a
 * product over its 64 columns, rounded to bf16: a[kk] covers columns
 * 16kk..16kk+15. */
__device__ __forceinline__ void to_a_fragments(uint32_t a[4][4], const float x[8][4])
{
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        a[kk][0] = pack_bf16(x[2 * kk][0], x[2 * kk][1]);         /* row g,     columns 2t, 2t+1 */
        a[kk][1] = pack_bf16(x[2 * kk][2], x[2 * kk][3]);         /* row g + 8 */
        a[kk][2] = pack_bf16(x[2 * kk + 1][0], x[2 * kk + 1][1]); /* row g,     columns 8 + 2t, 9 + 2t */
        a[kk][3] = pack_bf16(x[2 * kk + 1][2], x[2 * kk + 1][3]); /* row g + 8 */
    }
}

/* The warp's acc[dn] (dn < HD/8: a 16 x HD tile) += X Z: X = a 16 x 64 tile
 * as A fragments, Z = rows 0..63 of Zs (bf16 [rows][HD + 8]). */
template <int HD>
__device__ __forceinline__ void mma_xz(float acc[HD / 8][4], const uint32_t x[4][4], const uint16_t *Zs)
{
    constexpr int LDB = HD + 8;
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int dp = 0; dp < HD / 16; dp++) { /* n-tiles 2dp, 2dp + 1 */
            uint32_t b[4];
            ldsm_x4_trans(b, Zs + (kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LDB + dp * 16 + (lane >> 4) * 8);
            mma_bf16_16816(acc[2 * dp], x[kk], b);
            mma_bf16_16816(acc[2 * dp + 1], x[kk], b + 2);
        }
}

/* Rows row0 + g, row0 + g + 8 of a warp's 16 x HD accumulator, times mul[0]
 * and mul[1], to dst (row stride ld; rows past T, columns past hd left
 * alone). */
template <int HD>
__device__ __forceinline__ void store_warp_rows(float *dst, int64_t ld, int row0, int T, int hd,
                                                const float acc[HD / 8][4], const float mul[2])
{
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int row = row0 + g + 8 * h;
        if (row >= T)
            continue;
#pragma unroll
        for (int dn = 0; dn < HD / 8; dn++) {
            int c = dn * 8 + 2 * t; /* c < hd: c + 1 < hd too (both even) */
            if (c < hd)
                *reinterpret_cast<float2 *>(dst + (int64_t)row * ld + c) =
                    make_float2(acc[dn][2 * h] * mul[h], acc[dn][2 * h + 1] * mul[h]);
        }
    }
}

/* The forward's warps a block (16 FWD_WARPS query rows), at most 128
 * registers a thread for HD <= 64 so that two blocks share an SM (56 bytes
 * spill at HD = 64).  H200, B=16 T=1024 H=12 hd=64: 0.184 ms; one block an
 * SM (166 registers) 0.212 ms; 4 warps 0.233 ms. */
constexpr int FWD_WARPS = 8;

/* Block: 16 WARPS query rows (tile qt) of pair bh, the longest first. */
template <int HD, int WARPS>
__global__ void __launch_bounds__(WARPS * 32, HD <= 64 ? 2 : 1)
    attn_fwd_mma(float *out, float *lse, const float *qkv, int T, int H, int hd, int tiles, float sl2)
{
    extern __shared__ float4 smem4[];
    constexpr int LDB = HD + 8, NO = HD / 8, ROWS = 16 * WARPS, THREADS = 32 * WARPS, PF = BC * HD / 4 / THREADS;
    uint16_t *Qs = reinterpret_cast<uint16_t *>(smem4), *Ks = Qs + ROWS * LDB, *Vs = Ks + BC * LDB;
    const int BH = (int)(gridDim.x / tiles), bh = (int)(blockIdx.x % BH), qt = tiles - 1 - (int)(blockIdx.x / BH);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int q0 = qt * ROWS, w0 = q0 + warp * 16;   /* the block's and the warp's first row */
    const int last = (min(q0 + ROWS, T) - 1) / BC; /* the last key tile a row of the block sees */
    const head hp = head_of(bh, T, H, hd);
    const int64_t ld = 3 * (int64_t)H * hd, D = (int64_t)H * hd;
    const float *q = qkv + hp.q, *k = q + D, *v = q + 2 * D;

    load_tile_bf16<HD, ROWS, THREADS>(Qs, q, ld, q0, T, hd);
    float4 kr[PF], vr[PF];
    fetch_tile<HD, THREADS>(kr, k, ld, 0, T, hd);
    fetch_tile<HD, THREADS>(vr, v, ld, 0, T, hd);
    /* m: the row max of the scores times sl2; l: this thread's part of the
     * row sum of exp2(score sl2 - m), summed over the row's 4 threads at the end */
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f}, o[NO][4];
#pragma unroll
    for (int dn = 0; dn < NO; dn++)
        o[dn][0] = o[dn][1] = o[dn][2] = o[dn][3] = 0.0f;
    for (int kt = 0; kt <= last; kt++) {
        const int k0 = kt * BC;
        __syncthreads(); /* every warp is done with the previous Ks, Vs */
        put_tile<HD, THREADS>(Ks, kr);
        put_tile<HD, THREADS>(Vs, vr);
        __syncthreads();
        if (kt < last) {
            fetch_tile<HD, THREADS>(kr, k, ld, k0 + BC, T, hd);
            fetch_tile<HD, THREADS>(vr, v, ld, k0 + BC, T, hd);
        }
        if (k0 > w0 + 15)
            continue; /* every key of the tile is past every row of the warp (the same for its 32 threads) */
        float s[8][4];
#pragma unroll
        for (int n = 0; n < 8; n++)
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
        mma_abt<HD>(s, Qs, warp * 16, Ks);
        if (k0 + BC - 1 > w0) { /* the tile crosses the warp's diagonal: mask key > row (also keys past T) */
#pragma unroll
            for (int n = 0; n < 8; n++)
#pragma unroll
                for (int r = 0; r < 4; r++)
                    if (k0 + n * 8 + 2 * t + (r & 1) > w0 + g + 8 * (r >> 1))
                        s[n][r] = -INFINITY;
        }
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int n = 0; n < 8; n++) {
            mx[0] = fmaxf(mx[0], fmaxf(s[n][0], s[n][1]));
            mx[1] = fmaxf(mx[1], fmaxf(s[n][2], s[n][3]));
        }
        float mn[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            /* a row's 4 threads are lanes 4g..4g+3 */
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(DT__FULL_MASK, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(DT__FULL_MASK, mx[h], 2));
            /* finite: the warp's first tile (kt = 0) has key 0 <= row */
            float mnew = fmaxf(m[h], mx[h] * sl2), alpha = exp2f(m[h] - mnew); /* 0 on the first tile */
            m[h] = mnew;
            mn[h] = -mnew;
            l[h] *= alpha;
#pragma unroll
            for (int dn = 0; dn < NO; dn++) {
                o[dn][2 * h] *= alpha;
                o[dn][2 * h + 1] *= alpha;
            }
        }
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                s[n][r] = exp2f(fmaf(s[n][r], sl2, mn[r >> 1])); /* masked: exp2(-inf) = 0 */
                l[r >> 1] += s[n][r];
            }
        uint32_t pa[4][4];
        to_a_fragments(pa, s);
        mma_xz<HD>(o, pa, Vs);
    }
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(DT__FULL_MASK, l[h], 1);
        l[h] += __shfl_xor_sync(DT__FULL_MASK, l[h], 2);
        inv[h] = 1.0f / l[h];
        int row = w0 + g + 8 * h;
        if (t == 0 && row < T)
            lse[hp.row + row] = (m[h] + log2f(l[h])) * LN2;
    }
    store_warp_rows<HD>(out + hp.o, D, w0, T, hd, o, inv);
}

/* Block: key tile kt of pair bh; warp w owns keys 16w..16w+15 of it. */
template <int HD>
__global__ void __launch_bounds__(NT)
    attn_bwd_dkdv_mma(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *Dsum, int T,
                      int H, int hd, int tiles, float sl2, float scale)
{
    extern __shared__ float4 smem4[];
    constexpr int LDB = HD + 8, NO = HD / 8;
    uint16_t *Ks = reinterpret_cast<uint16_t *>(smem4), *Vs = Ks + BC * LDB, *Qs = Vs + BC * LDB, *dOs = Qs + BR * LDB;
    float *Ls = reinterpret_cast<float *>(dOs + BR * LDB), *Ds = Ls + BR;
    const int BH = (int)(gridDim.x / tiles), bh = (int)(blockIdx.x % BH), kt = (int)(blockIdx.x / BH);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int k0 = kt * BC, w0 = k0 + warp * 16;
    const head hp = head_of(bh, T, H, hd);
    const int64_t ld = 3 * (int64_t)H * hd, D = (int64_t)H * hd;
    const float *q = qkv + hp.q, *k = q + D, *v = q + 2 * D, *dO = dout + hp.o;

    load_tile_bf16<HD, BC, NT>(Ks, k, ld, k0, T, hd);
    load_tile_bf16<HD, BC, NT>(Vs, v, ld, k0, T, hd);
    float dk[NO][4], dv[NO][4];
#pragma unroll
    for (int dn = 0; dn < NO; dn++)
        dk[dn][0] = dk[dn][1] = dk[dn][2] = dk[dn][3] = dv[dn][0] = dv[dn][1] = dv[dn][2] = dv[dn][3] = 0.0f;
    for (int qt = kt; qt < tiles; qt++) {
        const int q0 = qt * BR;
        load_tile_bf16<HD, BR, NT>(Qs, q, ld, q0, T, hd);
        load_tile_bf16<HD, BR, NT>(dOs, dO, D, q0, T, hd);
        load_row_stats(Ls, Ds, lse + hp.row, Dsum + hp.row, q0, T);
        __syncthreads();
        /* transposed: row = key w0 + g (+8), column = query q0 + 8n + 2t (+1) */
        float s[8][4], dp[8][4];
#pragma unroll
        for (int n = 0; n < 8; n++)
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
        mma_abt<HD>(s, Ks, warp * 16, Qs);
        mma_abt<HD>(dp, Vs, warp * 16, dOs);
        /* a query before a key of the warp, or past T: mask */
        const bool edge = q0 < w0 + 15 || q0 + BR > T;
#pragma unroll
        for (int n = 0; n < 8; n++) {
            const int c = n * 8 + 2 * t;
            const float2 L = *reinterpret_cast<const float2 *>(Ls + c), Dc = *reinterpret_cast<const float2 *>(Ds + c);
#pragma unroll
            for (int r = 0; r < 4; r++) {
                int key = w0 + g + 8 * (r >> 1), query = q0 + c + (r & 1);
                float p = exp2f(fmaf(s[n][r], sl2, -((r & 1) ? L.y : L.x)));
                if (edge && (key > query || query >= T))
                    p = 0.0f;
                dp[n][r] = p * (dp[n][r] - ((r & 1) ? Dc.y : Dc.x));
                s[n][r] = p;
            }
        }
        uint32_t pa[4][4], dsa[4][4];
        to_a_fragments(pa, s);
        to_a_fragments(dsa, dp);
        mma_xz<HD>(dv, pa, dOs); /* dV += P^T dO */
        mma_xz<HD>(dk, dsa, Qs); /* dK += dS^T Q */
        __syncthreads();         /* before the next tile overwrites Qs, dOs, Ls, Ds */
    }
    const float one[2] = {1.0f, 1.0f}, sc[2] = {scale, scale};
    store_warp_rows<HD>(dqkv + hp.q + D, ld, w0, T, hd, dk, sc);
    store_warp_rows<HD>(dqkv + hp.q + 2 * D, ld, w0, T, hd, dv, one);
}

/* Block: query tile qt of pair bh; warp w owns queries 16w..16w+15 of it. */
template <int HD>
__global__ void __launch_bounds__(NT)
    attn_bwd_dq_mma(float *dqkv, const float *dout, const float *qkv, const float *lse, const float *Dsum, int T,
                    int H, int hd, int tiles, float sl2, float scale)
{
    extern __shared__ float4 smem4[];
    constexpr int LDB = HD + 8, NO = HD / 8;
    uint16_t *Qs = reinterpret_cast<uint16_t *>(smem4), *dOs = Qs + BR * LDB, *Ks = dOs + BR * LDB, *Vs = Ks + BC * LDB;
    float *Ls = reinterpret_cast<float *>(Vs + BC * LDB), *Ds = Ls + BR;
    const int BH = (int)(gridDim.x / tiles), bh = (int)(blockIdx.x % BH), qt = tiles - 1 - (int)(blockIdx.x / BH);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int q0 = qt * BR, w0 = q0 + warp * 16;
    const head hp = head_of(bh, T, H, hd);
    const int64_t ld = 3 * (int64_t)H * hd, D = (int64_t)H * hd;
    const float *q = qkv + hp.q, *k = q + D, *v = q + 2 * D, *dO = dout + hp.o;

    load_tile_bf16<HD, BR, NT>(Qs, q, ld, q0, T, hd);
    load_tile_bf16<HD, BR, NT>(dOs, dO, D, q0, T, hd);
    load_row_stats(Ls, Ds, lse + hp.row, Dsum + hp.row, q0, T);
    float dq[NO][4];
#pragma unroll
    for (int dn = 0; dn < NO; dn++)
        dq[dn][0] = dq[dn][1] = dq[dn][2] = dq[dn][3] = 0.0f;
    for (int kt = 0; kt <= qt; kt++) {
        const int k0 = kt * BC;
        load_tile_bf16<HD, BC, NT>(Ks, k, ld, k0, T, hd);
        load_tile_bf16<HD, BC, NT>(Vs, v, ld, k0, T, hd);
        __syncthreads();
        /* row = query w0 + g (+8), column = key k0 + 8n + 2t (+1) */
        float s[8][4], dp[8][4];
#pragma unroll
        for (int n = 0; n < 8; n++)
            s[n][0] = s[n][1] = s[n][2] = s[n][3] = dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.0f;
        mma_abt<HD>(s, Qs, warp * 16, Ks);
        mma_abt<HD>(dp, dOs, warp * 16, Vs);
        const int r0 = warp * 16 + g;
        const float mL[2] = {-Ls[r0], -Ls[r0 + 8]}, Dr[2] = {Ds[r0], Ds[r0 + 8]};
        /* the tile crosses the warp's diagonal: mask key > query (rows past T are never stored) */
        const bool edge = k0 + BC - 1 > w0;
#pragma unroll
        for (int n = 0; n < 8; n++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                int h = r >> 1;
                float p = exp2f(fmaf(s[n][r], sl2, mL[h]));
                if (edge && k0 + n * 8 + 2 * t + (r & 1) > w0 + g + 8 * h)
                    p = 0.0f;
                dp[n][r] = p * (dp[n][r] - Dr[h]);
            }
        uint32_t dsa[4][4];
        to_a_fragments(dsa, dp);
        mma_xz<HD>(dq, dsa, Ks); /* dQ += dS K */
        __syncthreads();         /* before the next tile overwrites Ks, Vs */
    }
    const float sc[2] = {scale, scale};
    store_warp_rows<HD>(dqkv + hp.q, ld, w0, T, hd, dq, sc);
}

/* ---- launches ---- */

/* Which kernels run: 1 = the SIMT ones in both precisions, 2 = tensor
 * cores in bf16 (the default).  dev/cuda/attention_bench.cu, which
 * includes this file, switches it to check and time both. */
int kernel_version = 2;

constexpr size_t fwd_smem(int HD) { return sizeof(float) * (size_t)(3 * 64 * (HD + 4) + 64 * PLD); }
constexpr size_t dkdv_smem(int HD) { return sizeof(float) * (size_t)(4 * 64 * (HD + 4) + 2 * 64 * PLD + 2 * BR); }
constexpr size_t dq_smem(int HD) { return sizeof(float) * (size_t)(4 * 64 * (HD + 4) + 64 * PLD + 2 * BR); }
constexpr size_t fwd_mma_smem(int HD) { return sizeof(uint16_t) * (size_t)((16 * FWD_WARPS + 2 * BC) * (HD + 8)); }
constexpr size_t bwd_mma_smem(int HD) { return sizeof(uint16_t) * (size_t)(4 * 64 * (HD + 8)) + sizeof(float) * 2 * BR; }

/* Launch `kernel` over `blocks` blocks of `threads` threads with `smem`
 * bytes of dynamic shared memory (above 48 KiB must be asked for). */
template <typename... Params, typename... Args>
bool launch(void (*kernel)(Params...), unsigned blocks, int threads, size_t smem, Args... args)
{
    if (!DT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)))
        return false;
    kernel<<<blocks, threads, smem, dt__stream()>>>(args...);
    return DT_CUDA_LAUNCHED();
}

template <int HD, bool BF16>
void fwd(float *out, float *lse, const float *qkv, int B, int T, int H, int hd)
{
    float sl2 = LOG2E / sqrtf((float)hd);
    if (BF16 && kernel_version >= 2) {
        int tiles = (T + 16 * FWD_WARPS - 1) / (16 * FWD_WARPS);
        launch(attn_fwd_mma<HD, FWD_WARPS>, (unsigned)(tiles * B * H), 32 * FWD_WARPS, fwd_mma_smem(HD), out, lse,
               qkv, T, H, hd, tiles, sl2);
    } else {
        int tiles = (T + BR - 1) / BR;
        launch(attn_fwd_simt<HD, BF16>, (unsigned)(tiles * B * H), NT, fwd_smem(HD), out, lse, qkv, T, H, hd, tiles,
               sl2);
    }
}

template <int HD, bool BF16>
void bwd(float *dqkv, float *Dsum, const float *dout, const float *qkv, const float *out, const float *lse, int B,
         int T, int H, int hd)
{
    int tiles = (T + BR - 1) / BR;
    float scale = 1.0f / sqrtf((float)hd), sl2 = LOG2E * scale;
    int64_t rows = (int64_t)B * T;
    attn_bwd_dot<BF16><<<dt__grid(rows * H * 32, 256), 256, 0, dt__stream()>>>(Dsum, dout, out, rows, T, H, hd);
    if (!DT_CUDA_LAUNCHED())
        return;
    unsigned blocks = (unsigned)(tiles * B * H);
    if (BF16 && kernel_version >= 2) {
        if (launch(attn_bwd_dkdv_mma<HD>, blocks, NT, bwd_mma_smem(HD), dqkv, dout, qkv, lse, Dsum, T, H, hd, tiles,
                   sl2, scale))
            launch(attn_bwd_dq_mma<HD>, blocks, NT, bwd_mma_smem(HD), dqkv, dout, qkv, lse, Dsum, T, H, hd, tiles,
                   sl2, scale);
    } else if (launch(attn_bwd_dkdv_simt<HD, BF16>, blocks, NT, dkdv_smem(HD), dqkv, dout, qkv, lse, Dsum, T, H, hd,
                      tiles, sl2, scale)) {
        launch(attn_bwd_dq_simt<HD, BF16>, blocks, NT, dq_smem(HD), dqkv, dout, qkv, lse, Dsum, T, H, hd, tiles, sl2,
               scale);
    }
}

/* The head-width bucket (32, 64, 128), or 0 with an error recorded. */
int bucket(const char *what, dt_dtype compute, int64_t B, int64_t T, int64_t H, int64_t hd)
{
    if (compute != DT_F32 && compute != DT_BF16) {
        DT_CUDA_RECORD(DT_ERR_INVALID, "%s: compute precision %d is neither f32 nor bf16", what, (int)compute);
        return 0;
    }
    if (hd < 4 || hd > 128 || hd % 4) {
        DT_CUDA_RECORD(DT_ERR_INVALID, "%s: head width %lld is not a multiple of 4 in 4..128", what, (long long)hd);
        return 0;
    }
    if (T > INT32_MAX / 2 || B * H * ((T + BR - 1) / BR) > INT32_MAX) {
        DT_CUDA_RECORD(DT_ERR_INVALID, "%s: %lld x %lld heads of %lld rows are too many for one launch", what,
                       (long long)B, (long long)H, (long long)T);
        return 0;
    }
    return hd <= 32 ? 32 : hd <= 64 ? 64 : 128;
}

bool aligned(const void *p) { return ((uintptr_t)p & 15u) == 0; }

} // namespace

int64_t dt__cuda_attn_saved_floats(int64_t B, int64_t H, int64_t T) { return B * H * T; }

int64_t dt__cuda_attn_scratch_floats(int64_t B, int64_t H, int64_t T, int64_t hd)
{
    (void)hd;
    return B * H * T; /* D_i */
}

void dt__cuda_attn_fwd(dt_dtype compute, float *out, float *saved, const float *qkv, int64_t B, int64_t T, int64_t H,
                       int64_t hd)
{
    if (!dt__cuda_enter() || B <= 0 || T <= 0 || H <= 0)
        return;
    int hb = bucket("attention forward", compute, B, T, H, hd);
    if (!hb)
        return;
    if (!aligned(out) || !aligned(qkv)) {
        DT_CUDA_RECORD(DT_ERR_INVALID, "attention forward: out and qkv must be 16-byte aligned");
        return;
    }
    int b = (int)B, t = (int)T, h = (int)H, d = (int)hd;
    bool bf = compute == DT_BF16;
    switch (hb) {
    case 32: bf ? fwd<32, true>(out, saved, qkv, b, t, h, d) : fwd<32, false>(out, saved, qkv, b, t, h, d); break;
    case 64: bf ? fwd<64, true>(out, saved, qkv, b, t, h, d) : fwd<64, false>(out, saved, qkv, b, t, h, d); break;
    default: bf ? fwd<128, true>(out, saved, qkv, b, t, h, d) : fwd<128, false>(out, saved, qkv, b, t, h, d); break;
    }
}

void dt__cuda_attn_bwd(dt_dtype compute, float *dqkv, float *scratch, const float *dout, const float *qkv,
                       const float *out, const float *saved, int64_t B, int64_t T, int64_t H, int64_t hd)
{
    if (!dt__cuda_enter() || B <= 0 || T <= 0 || H <= 0)
        return;
    int hb = bucket("attention backward", compute, B, T, H, hd);
    if (!hb)
        return;
    if (!aligned(dqkv) || !aligned(dout) || !aligned(qkv) || !aligned(out)) {
        DT_CUDA_RECORD(DT_ERR_INVALID, "attention backward: dqkv, dout, qkv and out must be 16-byte aligned");
        return;
    }
    int b = (int)B, t = (int)T, h = (int)H, d = (int)hd;
    bool bf = compute == DT_BF16;
#define BWD(HD, BF) bwd<HD, BF>(dqkv, scratch, dout, qkv, out, saved, b, t, h, d)
    switch (hb) {
    case 32: bf ? BWD(32, true) : BWD(32, false); break;
    case 64: bf ? BWD(64, true) : BWD(64, false); break;
    default: bf ? BWD(128, true) : BWD(128, false); break;
    }
#undef BWD
}
