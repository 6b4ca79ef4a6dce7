/* The NCCL backend's shared pieces (src/comm/nccl/): one NCCL communicator
 * and one CUDA stream per dt_comm, the dtype and reduction mapping, the
 * buffer check, and the waits that end by a deadline.
 *
 * Every NCCL communicator is made non-blocking (ncclConfig_t.blocking = 0):
 * its calls return at once, possibly with ncclInProgress, and the backend
 * polls ncclCommGetAsyncError up to the communicator's deadline (DT_TIMEOUT)
 * instead of leaving NCCL to spin inside a call that cannot be interrupted.
 * On a deadline or an asynchronous error the communicator is aborted
 * (ncclCommAbort): the call returns DT_ERR_TIMEOUT or DT_ERR_PEER naming the
 * call, the rank and NCCL's text, and every later call on it fails at once
 * with that message. */
#ifndef DT_COMM_NCCL_INTERNAL_H
#define DT_COMM_NCCL_INTERNAL_H

#include <cuda_runtime.h>
#include <nccl.h>
#include <pthread.h>
#include <stdbool.h>

#include "comm/backend.h"
#include "comm/comm_internal.h"

/* c->impl of a communicator of the NCCL backend. */
typedef struct {
    ncclComm_t comm;
    cudaStream_t stream; /* every call of this communicator runs on it */
    cudaEvent_t done;    /* recorded after a blocking call, polled by its wait */
    cudaEvent_t ready;   /* the fence before each call: the legacy default stream's work so far */
    float *flag;         /* one device float: barrier's allreduce */
    int device;          /* the CUDA device of the communicator (and its buffers) */
    pthread_mutex_t self_mu; /* guards the self messages */
    bool broken;         /* aborted: every later call fails with `why` */
    dt_status broken_status;
    char why[256];
    /* Self messages (send to this rank): see nccl_p2p.c. */
    struct dt__nccl_self *self_sends, *self_recvs;
} dt__nccl_comm;

static inline dt__nccl_comm *dt__nccl_of(const dt_comm *c) { return (dt__nccl_comm *)c->impl; }

/* ---- errors and waits (nccl_wait.c) ---- */

/* A failed CUDA or NCCL return as a dtrain status naming `op` and the
 * library's text; DT_OK on success. */
dt_status dt__nccl_cuda_error(cudaError_t e, const char *op);
dt_status dt__nccl_error(ncclResult_t r, const char *op, const dt_comm *c);
/* Before a call on c: c is usable (not aborted, world alive), its device
 * is this thread's current one, and c's stream waits for the work queued
 * before the call on the legacy default stream, which includes every
 * blocking stream's (the engine's compute stream is one): a buffer the
 * caller filled by a kernel or an asynchronous copy is read only after it
 * is written.  Work on a non-blocking stream of the caller's is not
 * covered: synchronise it before the call. */
dt_status dt__nccl_begin(dt_comm *c, const char *op);
/* After NCCL calls on c that returned `r`: wait while NCCL still sets them
 * up (ncclInProgress), up to c's deadline; abort on a timeout or an error. */
dt_status dt__nccl_settle(dt_comm *c, ncclResult_t r, const char *op, int64_t deadline);
/* Record `ev` on c's stream (after the calls just issued). */
dt_status dt__nccl_record(dt_comm *c, cudaEvent_t ev, const char *op);
/* Poll `ev` once: *done when it has completed; a failure (an asynchronous
 * NCCL error, a CUDA error, the deadline passed) aborts c and is returned. */
dt_status dt__nccl_poll(dt_comm *c, cudaEvent_t ev, const char *op, int64_t deadline, bool *done);
/* Record c's event and poll it until it completes or the deadline passes. */
dt_status dt__nccl_finish(dt_comm *c, const char *op, int64_t deadline);
/* Abort c's NCCL communicator; every later call fails with `s` and the
 * message set by dt__fail just before (which is returned). */
dt_status dt__nccl_break(dt_comm *c, dt_status s);
/* The back-off of a poll loop (spins, then short sleeps). */
void dt__nccl_pause(int64_t spins);

/* ---- dtypes, ops and buffers (nccl_types.c) ---- */

/* NCCL's type of a dtrain dtype; false for none. */
bool dt__nccl_type(dt_dtype t, ncclDataType_t *out);
ncclRedOp_t dt__nccl_op(dt_redop op);
/* Refuse what NCCL cannot do, by name. */
dt_status dt__nccl_check_type(const char *op, dt_dtype t);
/* `what` ("send buffer", "receive buffer", "buffer") of call `op` is device
 * memory of c's GPU; host, pinned host, managed or another GPU's memory is
 * refused by name.  NULL with no bytes passes. */
dt_status dt__nccl_check_buffer(dt_comm *c, const char *op, const char *what, const void *p, size_t bytes);

/* ---- the entries (nccl_coll.c, nccl_p2p.c) ---- */

dt_status dt__nccl_barrier(dt_comm *c);
dt_status dt__nccl_broadcast(void *buf, size_t count, dt_dtype t, int root, dt_comm *c);
dt_status dt__nccl_reduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, int root,
                          dt_comm *c);
dt_status dt__nccl_allreduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, dt_comm *c);
dt_status dt__nccl_reduce_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, dt_redop op,
                                  dt_comm *c);
dt_status dt__nccl_allgather(const void *send, void *recv, size_t sendcount, dt_dtype t, dt_comm *c);
dt_status dt__nccl_gather(const void *send, void *recv, size_t sendcount, dt_dtype t, int root, dt_comm *c);
dt_status dt__nccl_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, int root, dt_comm *c);
dt_status dt__nccl_alltoall(const void *send, void *recv, size_t count, dt_dtype t, dt_comm *c);
dt_status dt__nccl_allreduce_half(const float *send, float *recv, size_t count, dt_dtype wire, dt_redop op,
                                  dt_comm *c);
dt_status dt__nccl_isend(const void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c,
                         dt_request **req);
dt_status dt__nccl_irecv(void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req);
dt_status dt__nccl_wait(dt_request *req, size_t *received);
dt_status dt__nccl_test(dt_request *req, int *done, size_t *received);
dt_status dt__nccl_cancel(dt_request *req);
dt_status dt__nccl_waitany(dt_request **reqs, int n, int *index, size_t *received);
/* Release c's unmatched self messages (at its destruction). */
void dt__nccl_self_free(dt_comm *c);

#endif
