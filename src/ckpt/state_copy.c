/* A checkpoint writer's copy of the state in pieces (ckpt_internal.h,
 * dt__state_copy): numbered so that several threads can take them in turn
 * (the writer thread, and an update of the state that comes first),
 * each piece's CRC-32 taken right after its copy, while it is in the cache,
 * and the pieces' CRCs combined into each array's at the end.  A piece an
 * optimizer's update has just written can be copied by the update itself
 * (the tee), from the cache: the state is then read from memory once per
 * snapshot, by the update, instead of again by the copy. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/status.h"
#include "ckpt/ckpt_internal.h"

/* 64 KiB: a piece and its copy stay in L1/L2 for the CRC, and a piece is
 * a few microseconds of CPU: a thread that needs the copy done waits at
 * most that long for a piece another one took. */
#define PIECE ((size_t)64 << 10)

dt_status dt__state_copy_plan(dt__state_copy *c, const float *const src[3], float *const dst[3], size_t bytes,
                              bool crc)
{
    c->bytes = bytes;
    c->crc = crc;
    c->slot_pieces = bytes ? (int)((bytes + PIECE - 1) / PIECE) : 0;
    c->arrays = 0;
    for (int i = 0; i < 3; i++)
        if (dst[i]) {
            c->slot[c->arrays] = i;
            c->src[c->arrays] = (const unsigned char *)src[i];
            c->dst[c->arrays] = (unsigned char *)dst[i];
            c->arrays++;
        }
    c->pieces = c->arrays * c->slot_pieces;
    if (c->pieces > c->capacity) {
        uint32_t *more = realloc(c->piece_crc, (size_t)c->pieces * sizeof *more);
        if (more)
            c->piece_crc = more;
        _Atomic unsigned char *done = more ? realloc((void *)c->done, (size_t)c->pieces) : NULL;
        if (!done)
            return dt__fail(DT_ERR_NOMEM, "out of memory for a checkpoint copy's %d pieces", c->pieces);
        c->done = done;
        c->capacity = c->pieces;
    }
    for (int k = 0; k < c->pieces; k++)
        atomic_init(&c->done[k], 0);
    return DT_OK;
}

/* A copy that leaves the cache alone (the destination is not read again
 * soon: streaming stores, no read of the lines first) where the CPU has them. */
static void stream_copy(unsigned char *dst, const unsigned char *src, size_t n)
{
#if defined(__SSE2__)
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    if (head > n)
        head = n;
    memcpy(dst, src, head);
    size_t i = head;
    for (; i + 64 <= n; i += 64) {
        __m128 a = _mm_loadu_ps((const float *)(src + i)), b = _mm_loadu_ps((const float *)(src + i + 16)),
               x = _mm_loadu_ps((const float *)(src + i + 32)), y = _mm_loadu_ps((const float *)(src + i + 48));
        _mm_stream_ps((float *)(dst + i), a);
        _mm_stream_ps((float *)(dst + i + 16), b);
        _mm_stream_ps((float *)(dst + i + 32), x);
        _mm_stream_ps((float *)(dst + i + 48), y);
    }
    memcpy(dst + i, src + i, n - i);
    _mm_sfence(); /* (streaming stores are ordered by nothing else: seen by the writer thread after) */
#else
    memcpy(dst, src, n);
#endif
}

void dt__state_copy_tee(dt__state_copy *c, int64_t offset, int64_t n, const float *const written[3])
{
    if (offset < 0 || n <= 0 || (size_t)(offset + n) * sizeof(float) > c->bytes)
        return;
    size_t at = (size_t)offset * sizeof(float), end = at + (size_t)n * sizeof(float);
    for (size_t j = at / PIECE; j * PIECE < end; j++) {
        size_t p0 = j * PIECE, len = c->bytes - p0 < PIECE ? c->bytes - p0 : PIECE;
        bool whole = at <= p0 && p0 + len <= end;
        for (int a = 0; a < c->arrays; a++) {
            int k = a * c->slot_pieces + (int)j;
            const float *from = written[c->slot[a]];
            if (whole && from && (const unsigned char *)from + (p0 - at) == c->src[a] + p0) {
                stream_copy(c->dst[a] + p0, c->src[a] + p0, len);
                if (c->crc) /* (from the source: still in the cache, unlike what was streamed) */
                    c->piece_crc[k] = dt__crc32(0, c->src[a] + p0, len);
                atomic_store_explicit(&c->done[k], 1, memory_order_relaxed);
            } else {
                atomic_store_explicit(&c->done[k], 0, memory_order_relaxed);
            }
        }
    }
}

bool dt__state_copy_reads(const dt__state_copy *c, const float *const src[3])
{
    int a = 0;
    for (int i = 0; i < 3; i++)
        if (a < c->arrays && c->slot[a] == i && c->src[a++] != (const unsigned char *)src[i])
            return false;
    return true;
}

bool dt__state_copy_done(const dt__state_copy *c, int k)
{
    return atomic_load_explicit(&c->done[k], memory_order_relaxed);
}

void dt__state_copy_piece(dt__state_copy *c, int k)
{
    int a = k / c->slot_pieces;
    size_t at = (size_t)(k % c->slot_pieces) * PIECE, n = c->bytes - at < PIECE ? c->bytes - at : PIECE;
    memcpy(c->dst[a] + at, c->src[a] + at, n);
    if (c->crc)
        c->piece_crc[k] = dt__crc32(0, c->dst[a] + at, n);
}

void dt__state_copy_crcs(const dt__state_copy *c, uint32_t out[3])
{
    uint32_t whole = dt__crc32_combine_gen(PIECE);
    for (int a = 0; a < c->arrays; a++) {
        const uint32_t *crc = c->piece_crc + a * c->slot_pieces;
        uint32_t sum = c->slot_pieces ? crc[0] : 0; /* (0: the CRC of nothing) */
        for (int p = 1; p < c->slot_pieces; p++) {
            size_t n = c->bytes - (size_t)p * PIECE;
            sum = n < PIECE ? dt__crc32_combine(sum, crc[p], n) : dt__crc32_combine_op(sum, crc[p], whole);
        }
        out[c->slot[a]] = sum;
    }
}

void dt__state_copy_free(dt__state_copy *c)
{
    free(c->piece_crc);
    free((void *)c->done);
    memset(c, 0, sizeof *c);
}
