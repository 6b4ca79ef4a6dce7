/* The versioned frame header that precedes every message between ranks.
 *
 *   off size field
 *     0   4  magic "DTRN"
 *     4   1  version (DT_FRAME_VERSION)
 *     5   1  type (DATA, ABORT, BYE, DATA_REF, ACK)
 *     6   2  flags (must be 0)
 *     8   4  communicator id
 *    12   4  tag (collectives use the DT_TAG_INTERNAL bit)
 *    16   8  sequence (collective sequence number of the communicator)
 *    24   8  payload length in bytes
 *    32   4  sender's world rank
 *    36   4  FNV-1a hash of bytes 0..35 (catches garbage and misalignment)
 * All little endian.  dt__frame_decode checks every field before use. */
#ifndef DT_TRANSPORT_FRAME_H
#define DT_TRANSPORT_FRAME_H

#include <stdint.h>

#include "dtrain/base.h"

#define DT_FRAME_VERSION 2
#define DT_FRAME_HDR 40
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
    uint64_t seq;
    uint64_t len;
    uint32_t src;
} dt__frame;

void dt__frame_encode(const dt__frame *f, uint8_t out[DT_FRAME_HDR]);
/* DT_ERR_PROTOCOL with the reason when any field is invalid. */
dt_status dt__frame_decode(const uint8_t in[DT_FRAME_HDR], uint32_t world_size, dt__frame *f);

#endif
