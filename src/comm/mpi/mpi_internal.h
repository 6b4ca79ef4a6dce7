/* The MPI backend's shared pieces (src/comm/mpi/): one MPI communicator per
 * dt_comm, the dtype and reduction mapping, and the error conversion. */
#ifndef DT_COMM_MPI_INTERNAL_H
#define DT_COMM_MPI_INTERNAL_H

#include <mpi.h>
#include <pthread.h>
#include <stdbool.h>

#include "comm/backend.h"
#include "comm/comm_internal.h"

/* c->impl of a communicator of the MPI backend. */
typedef struct {
    MPI_Comm comm;
} dt__mpi_comm;

static inline MPI_Comm dt__mpi_of(const dt_comm *c) { return ((const dt__mpi_comm *)c->impl)->comm; }

/* Below MPI_THREAD_MULTIPLE every MPI call takes this lock (mpi_world.c). */
extern bool dt__mpi_serialise;
extern pthread_mutex_t dt__mpi_mu;
#define DT__MPI_LOCK() \
    do { \
        if (dt__mpi_serialise) \
            pthread_mutex_lock(&dt__mpi_mu); \
    } while (0)
#define DT__MPI_UNLOCK() \
    do { \
        if (dt__mpi_serialise) \
            pthread_mutex_unlock(&dt__mpi_mu); \
    } while (0)

/* An MPI return code as a dt_status: DT_OK, or a failure naming `op` and
 * MPI's error string (MPI_ERR_TRUNCATE: DT_ERR_TRUNCATE; others DT_ERR_PEER). */
dt_status dt__mpi_error(int rc, const char *op);

/* The MPI type and operation of a dtrain (dtype, op) pair: the float types
 * reduce through dtrain's own kernels (base/redop.c) as user-defined
 * operations, so NaNs and half-precision rounding are dtrain's; the integer
 * types use MPI's built-in operations.  DT_AVG reduces as DT_SUM (the caller
 * divides). */
MPI_Datatype dt__mpi_type(dt_dtype t);
MPI_Op dt__mpi_op(dt_dtype t, dt_redop op);
dt_status dt__mpi_types_init(void);
void dt__mpi_types_free(void);

/* Point to point (mpi_p2p.c). */
dt_status dt__mpi_isend(const void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req);
dt_status dt__mpi_irecv(void *buf, size_t count, dt_dtype t, int peer, int tag, dt_comm *c, dt_request **req);
dt_status dt__mpi_wait(dt_request *req, size_t *received);
dt_status dt__mpi_test(dt_request *req, int *done, size_t *received);
dt_status dt__mpi_cancel(dt_request *req);
/* Finish the detached sends (up to timeout_s, then withdraw them). */
void dt__mpi_p2p_flush(double timeout_s);
dt_status dt__mpi_waitany(dt_request **reqs, int n, int *index, size_t *received);

#endif
