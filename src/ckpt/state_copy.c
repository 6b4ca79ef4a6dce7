/* A checkpoint writer's copy of the state in pieces (ckpt_internal.h,
 * dt__state_copy): numbered so that several threads can take them in turn
 * (the writer's low-priority copier, and whoever has to wait for the copy),
 * each piece's CRC-32 taken right after its copy, while it is in the cache,
 * and the pieces' CRCs combined into each array's at the end. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "ckpt/ckpt_internal.h"

/* 1 MiB: a piece and its copy stay in L2 for the CRC; ~40 pieces per
 * array of gpt-mini, so a waiter that helps finds work to share. */
#define PIECE ((size_t)1 << 20)

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
    if (c->crc)
        c->piece_crc[k] = dt__crc32_copy(0, c->dst[a] + at, c->src[a] + at, n);
    else
        memcpy(c->dst[a] + at, c->src[a] + at, n);
}

void dt__state_copy_crcs(const dt__state_copy *c, uint32_t out[3])
{
    for (int a = 0; a < c->arrays; a++) {
        uint32_t crc = 0; /* (the CRC of nothing) */
        for (int p = 0; p < c->slot_pieces; p++) {
            size_t at = (size_t)p * PIECE, n = c->bytes - at < PIECE ? c->bytes - at : PIECE;
            crc = dt__crc32_combine(crc, c->piece_crc[a * c->slot_pieces + p], n);
        }
        out[c->slot[a]] = crc;
    }
}

void dt__state_copy_free(dt__state_copy *c)
{
    free(c->piece_crc);
    memset(c, 0, sizeof *c);
}
