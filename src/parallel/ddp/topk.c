/* Top-k sparsification with error feedback (Stich et al. 2018; Lin et al.,
 * Deep Gradient Compression, 2018) on one bucket of n gradients:
 *
 *   A = G + e
 *   pick the k = ceil(fraction n) largest |A| (ties: the lower index first)
 *   allgather the k (index, value) pairs of every rank
 *   G = (sum over ranks, in rank order, of their pairs scattered) / world
 *   e = A with the picked entries zeroed
 *
 * Bytes sent per rank: 8k instead of 4n (2 (n-1)/n of that on a ring); the
 * allgather's receive is (world - 1) 8k.  The values travel as their f32
 * bits, so sent + held is exactly A on every rank. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "parallel/ddp/compress.h"

struct dt__cx_impl {
    int64_t off, n, k;
    float *mag;      /* n: the magnitudes, reordered by the selection */
    uint32_t *send;  /* 2k words: index, value bits */
    uint32_t *recv;  /* world x 2k */
};

static dt_status create(dt__compressor *c, int b, int64_t offset, int64_t count, dt__cx_impl **out)
{
    (void)b;
    dt__cx_impl *k = calloc(1, sizeof *k);
    if (!k)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    *out = k;
    if (count > (int64_t)UINT32_MAX)
        return dt__fail(DT_ERR_INVALID, "topk: a bucket of %lld elements (at most 2^32: a smaller bucket_mb)",
                        (long long)count);
    k->off = offset;
    k->n = count;
    k->k = (int64_t)ceil(c->cfg.topk_fraction * (double)count);
    k->k = k->k < 1 ? 1 : k->k > count ? count : k->k;
    k->mag = malloc((size_t)(count ? count : 1) * sizeof *k->mag);
    k->send = malloc((size_t)k->k * 2 * sizeof *k->send);
    k->recv = malloc((size_t)c->world * (size_t)k->k * 2 * sizeof *k->recv);
    if (!k->mag || !k->send || !k->recv)
        return dt__fail(DT_ERR_NOMEM, "topk: out of memory for a bucket of %lld elements", (long long)count);
    return DT_OK;
}

static float mag(float x)
{
    float a = fabsf(x);
    return a == a ? a : INFINITY; /* a NaN is sent, so that it shows */
}

/* The k-th largest of a[0..n) (1 <= k <= n), a reordered: quickselect with a
 * median-of-three pivot, no randomness. */
static float kth_largest(float *a, int64_t n, int64_t k)
{
    int64_t lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        float x = a[lo], y = a[mid], z = a[hi];
        float pivot = x > y ? (y > z ? y : x > z ? z : x) : (x > z ? x : y > z ? z : y);
        int64_t i = lo, j = hi;
        while (i <= j) { /* descending: larger to the left */
            while (a[i] > pivot)
                i++;
            while (a[j] < pivot)
                j--;
            if (i <= j) {
                float t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            return a[want];
    }
    return a[want];
}

static dt_status begin(dt__compressor *c, dt__cx_impl *k, float *g, dt__cx_msg *msg)
{
    float *a = g + k->off, *e = c->error + k->off;
    for (int64_t i = 0; i < k->n; i++) {
        a[i] += e[i];
        k->mag[i] = mag(a[i]);
    }
    float t = kth_largest(k->mag, k->n, k->k);
    int64_t above = 0;
    for (int64_t i = 0; i < k->n; i++)
        above += mag(a[i]) > t;
    int64_t ties = k->k - above, got = 0; /* of those equal to t, the first `ties` */
    for (int64_t i = 0; i < k->n; i++) {
        float m = mag(a[i]);
        e[i] = a[i];
        if (m > t || (m == t && ties-- > 0)) {
            k->send[2 * got] = (uint32_t)i;
            memcpy(&k->send[2 * got + 1], &a[i], sizeof(float));
            e[i] = 0;
            got++;
        }
    }
    *msg = (dt__cx_msg){true, k->send, k->recv, (size_t)(2 * k->k)};
    return DT_OK;
}

static dt_status next(dt__compressor *c, dt__cx_impl *k, float *g, dt__cx_msg *msg, bool *more)
{
    (void)msg;
    float *a = g + k->off;
    memset(a, 0, (size_t)k->n * sizeof *a);
    for (int r = 0; r < c->world; r++) { /* rank order: the same sums everywhere */
        const uint32_t *w = k->recv + (size_t)r * 2 * (size_t)k->k;
        for (int64_t j = 0; j < k->k; j++) {
            uint32_t i = w[2 * j];
            float v;
            memcpy(&v, &w[2 * j + 1], sizeof v);
            if (i >= (uint64_t)k->n)
                return dt__fail(DT_ERR_PEER, "topk: rank %d sent index %u for a bucket of %lld", r, i,
                                (long long)k->n);
            a[i] += v;
        }
    }
    for (int64_t i = 0; i < k->n; i++)
        a[i] /= (float)c->world;
    *more = false;
    return DT_OK;
}

static int messages(const dt__cx_impl *k)
{
    (void)k;
    return 1;
}

static float *state(dt__cx_impl *k, size_t *n)
{
    (void)k;
    *n = 0;
    return NULL;
}

static void destroy(dt__cx_impl *k)
{
    free(k->mag);
    free(k->send);
    free(k->recv);
    free(k);
}

const dt__cx_ops dt__cx_topk = {"topk", create, begin, next, messages, state, destroy};
