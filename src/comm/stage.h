/* Device buffers on a backend that runs host algorithms (backend.h's
 * device_buffers): the public calls of api.c come here when some device is
 * registered (base/devmem.h).  Each entry has its public call's signature
 * and contract; it finds which of its buffers are device memory on this
 * rank, and then, by the communicator's backend:
 *  - STAGE (native): copies the device buffers that carry input into host
 *    memory (a grow-only buffer per communicator, page-locked for cuda),
 *    runs the backend's host collective on the host copies, and copies the
 *    results back; the bits are the host collective's, and its mismatch
 *    checks, deadlines and failures are unchanged.  Large device buffers
 *    of broadcast and allgather go chunk by chunk (DT_STAGE_CHUNK), the
 *    device copying the next chunk while the transport moves this one;
 *    reductions stay whole (stage.c says why).  Point to point: a host
 *    copy per request, filled before the send (a large one as a chunked
 *    message, each chunk sent once copied: p2p_chunk.h), copied out when
 *    the receive completes (dt_test, dt_waitany) or piece by piece as it
 *    arrives (dt_wait).
 *  - REFUSE (MPI): DT_ERR_INVALID naming the buffer and the backend.
 *  - PASS (NCCL): the call as it came.
 * Without a device buffer every entry is the backend's call. */
#ifndef DT_COMM_STAGE_H
#define DT_COMM_STAGE_H

#include <stdbool.h>

#include "comm/comm_internal.h"

dt_status dt__stage_broadcast(void *buf, size_t count, dt_dtype t, int root, dt_comm *c);
dt_status dt__stage_reduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, int root,
                           dt_comm *c);
dt_status dt__stage_allreduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, dt_comm *c);
dt_status dt__stage_reduce_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, dt_redop op,
                                   dt_comm *c);
dt_status dt__stage_allgather(const void *send, void *recv, size_t sendcount, dt_dtype t, dt_comm *c);
dt_status dt__stage_gather(const void *send, void *recv, size_t sendcount, dt_dtype t, int root, dt_comm *c);
dt_status dt__stage_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, int root, dt_comm *c);
dt_status dt__stage_alltoall(const void *send, void *recv, size_t count, dt_dtype t, dt_comm *c);
dt_status dt__stage_allreduce_half(const float *send, float *recv, size_t count, dt_dtype wire, dt_redop op,
                                   dt_comm *c);
dt_status dt__stage_isend(const void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c,
                          dt_request **req);
dt_status dt__stage_irecv(void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req);
/* The completions of a request that carries a host copy (r->stage). */
dt_status dt__stage_wait(dt_request *r, size_t *received);
dt_status dt__stage_test(dt_request *r, int *done, size_t *received);
dt_status dt__stage_cancel(dt_request *r);
/* dt_waitany when some request carries a host copy. */
dt_status dt__stage_waitany(dt_request **reqs, int n, int *index, size_t *received);
/* The chunking of large device buffers (stage.c, "chunked staging"):
 * elements per chunk of chunk_bytes (DT_STAGE_CHUNK), at least one; and
 * the number of chunks of `count` elements, 0 when fewer than two whole
 * chunks fit (the buffer is staged whole), the last chunk the remainder. */
size_t dt__stage_chunk_elems(size_t chunk_bytes, size_t elem);
size_t dt__stage_nchunks(size_t count, size_t chunk_elems);
/* Release c's staging buffer (dt_comm_destroy). */
void dt__stage_free(dt_comm *c);

#endif
