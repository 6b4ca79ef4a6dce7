/* Point-to-point messages in chunks, in the native backend: how a sender
 * that has its message piece by piece (a device buffer staged through host
 * memory, comm/stage.c) sends each piece as soon as the device has copied
 * it, while the device copies the next one.  Every native receive takes
 * such a message, into host or device memory, with the bytes, the count
 * and the errors of one message.
 *
 * The protocol.  A message of N bytes in chunks of C bytes (N >= 2C) is
 * K+1 frames, K = N / C.  Frame 0 carries bytes [0, C) on the user's tag
 * with bit 31 of its sequence number set (DT__P2P_CHUNKED; a plain
 * message's sequence never has it).  Frame j (1..K) carries bytes
 * [jC, min(N, (j+1)C)) on the continuation tag INT32_MIN + tag (no user or
 * collective tag is negative) with frame 0's sequence number; the last is
 * shorter than C (0 bytes when C divides N).  A receive matches frame 0 as
 * it matches a plain message (any sequence, in posting order), learns C
 * from its length and the sequence from the frame, and then receives the
 * continuation frames of exactly that sequence at jC of its buffer, up to
 * the first short one.  So the receiver needs neither N nor C in advance;
 * a receive buffer larger than N gets the count sent, and a smaller one the
 * truncation error of a plain message (the frame that does not fit).  The
 * sequence number (31 bits of the sender's per-communicator counter) keeps
 * the continuations of two messages on one tag apart.
 *
 * Costs: one frame header per chunk, one empty frame when C divides N, and
 * continuation frames that arrive before their receive is posted (the
 * receive posts up to 16 ahead, once frame 0 has told it the sequence)
 * are buffered by the engine and copied once more. */
#ifndef DT_COMM_P2P_CHUNK_H
#define DT_COMM_P2P_CHUNK_H

#include <stdbool.h>
#include <stdint.h>

#include "comm/comm_internal.h"

#define DT__P2P_CHUNKED 0x80000000u

/* The sequence number of this rank's next point-to-point message on c
 * (bit 31 clear). */
uint64_t dt__p2p_next_seq(dt_comm *c);

/* p2p.c's checked post of a send or receive; a send carries `seq`. */
dt_status dt__p2p_post(dt_comm *c, bool is_send, void *buf, size_t count, dt_dtype t, int peer, int tag,
                       uint64_t seq, dt_request **out);

/* Post frame 0 of a chunked send of `total` bytes in chunks of `chunk`
 * bytes (a whole number of t's elements, total >= 2 * chunk) from `first`
 * (chunk bytes); the frames 1..total/chunk follow with dt__p2p_send_more.
 * *req is waited for as any send (dt_wait: every frame posted is sent). */
dt_status dt__p2p_isend_chunked(const void *first, size_t total, size_t chunk, dt_dtype t, int peer, int tag,
                                dt_comm *c, dt_request **req);
/* Post frame j (1..total/chunk) of r from `piece` (its bytes of the message). */
dt_status dt__p2p_send_more(dt_request *r, size_t j, const void *piece);
/* Frames of r's message in 1..total/chunk (0 for a plain request). */
size_t dt__p2p_send_frames(const dt_request *r);
/* The bytes of a chunked send's whole message. */
size_t dt__p2p_send_total(const dt_request *r);

/* The next piece of a receive's message, in order: frame 0 (or the whole of
 * a plain message) first.  block: wait for it (until deadline_ns, when the
 * engine fails); else progress once.  *got: a piece was done, at *off of the
 * receive buffer, *len bytes; *more: others follow.  A failed piece is got
 * with *more false, its status in r's (dt__p2p_done reports it). */
dt_status dt__p2p_recv_next(dt_request *r, bool block, int64_t deadline_ns, bool *got, size_t *off, size_t *len,
                            bool *more);
/* Bytes of a receive's message already taken as pieces (a dt_test that
 * saw part of a chunked message): the next piece starts there. */
size_t dt__p2p_recv_taken(const dt_request *r);
/* After r's frame 0 is done: complete the rest of its message (block), or
 * look whether it is complete (!block).  *done: r is ready for its end
 * (a receive's count is the message's, the first failure is r's status). */
dt_status dt__p2p_rest(dt_request *r, bool block, int64_t deadline_ns, bool *done);
/* Release r's chunk state (withdrawing receives posted ahead). */
void dt__p2p_chunks_free(dt_request *r);

#endif
