/* The versioned frame header that precedes every message between ranks.
 *
 *   off size field
 *     0   2  magic "DT"
 *     2   1  version (DT_FRAME_VERSION)
 *     3   1  type (DATA, ABORT, BYE, DATA_REF, ACK)
 *     4   4  communicator id
 *     8   4  tag (collectives use the DT_TAG_INTERNAL bit)
 *    12   4  sequence, low 32 bits (collective sequence number of the
 *            communicator; messages in flight on a connection never lie
 *            2^32 apart, so the low bits match as well as all 64)
 *    16   6  payload length in bytes (at most DT_FRAME_MAX_PAYLOAD)
 *    22   8  signature of the collective call the frame belongs to (kind,
 *            count, dtype, op, root; src/comm/collsig.c), 0 for
 *            point-to-point and internal messages: the receiver compares it
 *            with its own call's and fails both sides on a difference
 *            (docs/failures.md), which costs 8 bytes a message and no
 *            extra message
 *    30   2  FNV-1a of bytes 0..29 folded to 16 bits (catches garbage and
 *            misalignment together with magic, version, type and length)
 * All little endian.  dt__frame_decode checks every field before use.  The
 * sender is not in the header: a connection is to one authenticated peer.
 * Kept short because small collectives are wire-bound on slow links: at
 * 200mbit each header byte costs 40 ns on every step. */
#ifndef DT_TRANSPORT_FRAME_H
#define DT_TRANSPORT_FRAME_H

#include <stdint.h>

#include "dtrain/base.h"

#define DT_FRAME_VERSION 4
#define DT_FRAME_HDR 32
#define DT_FRAME_MAX_PAYLOAD (1ull << 40)
#define DT_FRAME_MAX_CONTROL 4096

/* DATA_REF and ACK exist only on shared-memory channels: a DATA_REF frame is
 * a DATA frame whose `len` payload bytes stay in the sender's memory; the
 * stream carries 16 bytes instead, the payload's address and an id that the
 * sender gives each DATA_REF to that peer.  The receiver copies the payload
 * from there (process_vm_readv) once its receive is posted and answers with
 * an ACK whose sequence field is the id, which completes that send. */
enum { DT_FRAME_DATA = 1, DT_FRAME_ABORT = 2, DT_FRAME_BYE = 3, DT_FRAME_DATA_REF = 4, DT_FRAME_ACK = 5 };
#define DT_FRAME_REF_BYTES 16

typedef struct {
    uint8_t type;
    uint32_t comm_id;
    int32_t tag;
    uint64_t seq; /* decoded: the low 32 bits */
    uint64_t len;
    uint64_t sig; /* 0: none */
} dt__frame;

void dt__frame_encode(const dt__frame *f, uint8_t out[DT_FRAME_HDR]);
/* DT_ERR_PROTOCOL with the reason when any field is invalid. */
dt_status dt__frame_decode(const uint8_t in[DT_FRAME_HDR], dt__frame *f);
/* Whether two sequence numbers agree in the bits a frame carries. */
static inline int dt__frame_seq_eq(uint64_t a, uint64_t b) { return (uint32_t)a == (uint32_t)b; }

#endif
