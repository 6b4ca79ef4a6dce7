/* A checkpoint writer's copy of the state in pieces (ckpt_internal.h,
 * dt__state_copy): numbered so that several threads can take them in turn
 * (the writer thread, and an update of the state that comes first),
 * each piece's CRC-32 taken right after its copy, while it is in the cache,
 * and the pieces' CRCs combined into each array's at the end. */
#include <stdlib.h>
#include <string.h>

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
    if (crc && c->pieces > c->crc_capacity) {
        uint32_t *more = realloc(c->piece_crc, (size_t)c->pieces * sizeof *more);
        if (!more)
            return dt__fail(DT_ERR_NOMEM, "out of memory for a checkpoint copy's %d CRCs", c->pieces);
        c->piece_crc = more;
        c->crc_capacity = c->pieces;
    }
    return DT_OK;
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
    memset(c, 0, sizeof *c);
}
