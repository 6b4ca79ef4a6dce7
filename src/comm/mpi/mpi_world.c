/* The MPI backend's life cycle: MPI_Init_thread at the world's creation,
 * MPI_Comm_split for dt_comm_split, MPI_Finalize at the world's
 * destruction; the dtype/op mapping and the error conversion.
 *
 * Threads: nonblocking collectives run on each communicator's progress
 * thread (nonblocking.c) while the caller's thread sends and receives, so
 * the backend asks for MPI_THREAD_MULTIPLE.  An MPI that gives less makes
 * every MPI call take one lock (dt__mpi_serialise); then two communicators
 * used at once from two threads can deadlock (one rank's thread holds the
 * lock in a collective whose peer waits for the other), which a warning at
 * start-up says.
 *
 * Failures: the communicators return MPI's errors (MPI_ERRORS_RETURN) and
 * each becomes a dtrain status with MPI's error string.  A rank that dies
 * ends the whole job, which is MPI's behaviour (mpirun kills the other
 * ranks), not dtrain's DT_ERR_PEER naming the rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/redop.h"
#include "base/status.h"
#include "base/trace.h"
#include "comm/mpi/mpi_internal.h"

bool dt__mpi_serialise;
pthread_mutex_t dt__mpi_mu = PTHREAD_MUTEX_INITIALIZER;
static bool owns_mpi; /* this library called MPI_Init_thread, so it finalizes */

dt_status dt__mpi_error(int rc, const char *op)
{
    if (rc == MPI_SUCCESS)
        return DT_OK;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0, cls = MPI_ERR_OTHER;
    if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS)
        snprintf(text, sizeof text, "MPI error %d", rc);
    MPI_Error_class(rc, &cls);
    return dt__fail(cls == MPI_ERR_TRUNCATE ? DT_ERR_TRUNCATE : DT_ERR_PEER, "%s: MPI: %s", op, text);
}

/* ---- dtype and op mapping ---- */

static MPI_Datatype type_f16 = MPI_DATATYPE_NULL, type_bf16 = MPI_DATATYPE_NULL;
static MPI_Op ops[4] = {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}; /* sum prod min max on floats */

static dt_dtype dtype_of(MPI_Datatype d)
{
    if (d == MPI_FLOAT)
        return DT_F32;
    if (d == MPI_DOUBLE)
        return DT_F64;
    if (d == type_f16)
        return DT_F16;
    if (d == type_bf16)
        return DT_BF16;
    return DT_DTYPE_COUNT;
}

/* MPI passes the lower-ranked contribution as `in` (a), as dtrain's
 * kernels expect (base/redop.h). */
#define USER_OP(name, redop) \
    static void name(void *in, void *inout, int *len, MPI_Datatype *d) \
    { \
        dt__reduce(inout, in, inout, (size_t)*len, dtype_of(*d), redop); \
    }
USER_OP(op_sum, DT_SUM)
USER_OP(op_prod, DT_PROD)
USER_OP(op_min, DT_MIN)
USER_OP(op_max, DT_MAX)

dt_status dt__mpi_types_init(void)
{
    int rc = MPI_Type_contiguous(1, MPI_UINT16_T, &type_f16);
    if (rc == MPI_SUCCESS)
        rc = MPI_Type_commit(&type_f16);
    if (rc == MPI_SUCCESS)
        rc = MPI_Type_contiguous(1, MPI_UINT16_T, &type_bf16);
    if (rc == MPI_SUCCESS)
        rc = MPI_Type_commit(&type_bf16);
    MPI_User_function *fn[4] = {op_sum, op_prod, op_min, op_max};
    for (int i = 0; i < 4 && rc == MPI_SUCCESS; i++)
        rc = MPI_Op_create(fn[i], 1, &ops[i]);
    return dt__mpi_error(rc, "setting up the MPI reduction operations");
}

void dt__mpi_types_free(void)
{
    for (int i = 0; i < 4; i++)
        if (ops[i] != MPI_OP_NULL)
            MPI_Op_free(&ops[i]);
    if (type_f16 != MPI_DATATYPE_NULL)
        MPI_Type_free(&type_f16);
    if (type_bf16 != MPI_DATATYPE_NULL)
        MPI_Type_free(&type_bf16);
}

MPI_Datatype dt__mpi_type(dt_dtype t)
{
    switch (t) {
    case DT_F32: return MPI_FLOAT;
    case DT_F64: return MPI_DOUBLE;
    case DT_F16: return type_f16;
    case DT_BF16: return type_bf16;
    case DT_I32: return MPI_INT32_T;
    case DT_I64: return MPI_INT64_T;
    case DT_U8: return MPI_UINT8_T;
    default: return MPI_DATATYPE_NULL;
    }
}

MPI_Op dt__mpi_op(dt_dtype t, dt_redop op)
{
    int i = op == DT_AVG ? DT_SUM : (int)op; /* DT_SUM .. DT_MAX are 0 .. 3 */
    if (t == DT_F32 || t == DT_F64 || t == DT_F16 || t == DT_BF16)
        return ops[i];
    static const MPI_Op builtin[4] = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
    return builtin[i];
}

/* ---- communicators ---- */

static dt_status wrap_comm(MPI_Comm comm, dt_comm *c)
{
    dt__mpi_comm *m = calloc(1, sizeof *m);
    if (!m)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    m->comm = comm;
    c->impl = m;
    int rc = MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    /* This host's members: those that share memory with this rank. */
    MPI_Comm node = MPI_COMM_NULL;
    if (rc == MPI_SUCCESS)
        rc = MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    if (rc == MPI_SUCCESS) {
        MPI_Comm_rank(node, &c->local_rank);
        MPI_Comm_size(node, &c->local_size);
        MPI_Comm_free(&node);
    }
    c->one_host = c->local_size == c->size;
    return dt__mpi_error(rc, "MPI communicator set-up");
}

static dt_status world_init(dt_comm *c, const dt__launch_env *env)
{
    int inited = 0, provided = MPI_THREAD_SINGLE, rc;
    MPI_Initialized(&inited);
    if (!inited) {
        rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
        if (rc != MPI_SUCCESS)
            return dt__fail(DT_ERR_SYSTEM, "DT_BACKEND=mpi: MPI_Init_thread failed (code %d): is this rank "
                                           "started by mpirun?", rc);
        owns_mpi = true;
    } else {
        MPI_Query_thread(&provided);
    }
    dt__mpi_serialise = provided < MPI_THREAD_MULTIPLE;
    if (dt__mpi_serialise)
        DT_WARN("DT_BACKEND=mpi: this MPI gives thread level %d, not MPI_THREAD_MULTIPLE: every MPI call takes "
                "one lock, and communicators used from two threads at once may deadlock",
                provided);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (strcmp(env->launcher, "none") != 0 && (env->rank != rank || env->size != size)) {
        dt_status s = dt__fail(DT_ERR_INVALID,
                               "DT_BACKEND=mpi: the environment (launcher %s) says rank %d of %d, MPI_COMM_WORLD "
                               "says rank %d of %d: start every rank with mpirun and leave DT_RANK/DT_WORLD_SIZE "
                               "unset or equal",
                               env->launcher, env->rank, env->size, rank, size);
        /* No MPI_Finalize: it waits for every rank; a rank that exits
         * without it makes mpirun end the whole job. */
        return s;
    }
    c->rank = rank;
    c->size = size;
    int *ranks = realloc(c->ranks, (size_t)size * sizeof *ranks);
    if (!ranks)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    c->ranks = ranks;
    for (int i = 0; i < size; i++)
        ranks[i] = i;
    DT_CHECK(dt__trace_from_env(rank)); /* dtrun --timeline's variables, if any */
    DT_CHECK(dt__mpi_types_init());
    MPI_Comm comm;
    rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm); /* the program's own MPI_COMM_WORLD stays untouched */
    if (rc != MPI_SUCCESS)
        return dt__mpi_error(rc, "MPI_Comm_dup");
    return wrap_comm(comm, c);
}

static dt_status split(dt_comm *c, int color, int key, dt_comm **out)
{
    MPI_Comm sub = MPI_COMM_NULL;
    DT__MPI_LOCK();
    int rc = MPI_Comm_split(dt__mpi_of(c), color == DT_UNDEFINED ? MPI_UNDEFINED : color, key, &sub);
    DT__MPI_UNLOCK();
    uint64_t seq = c->split_seq++;
    if (rc != MPI_SUCCESS)
        return dt__wrap(dt__mpi_error(rc, "MPI_Comm_split"), "split: ");
    if (sub == MPI_COMM_NULL)
        return DT_OK;
    dt_comm *d = calloc(1, sizeof *d);
    int size = 0;
    MPI_Comm_size(sub, &size);
    int *ranks = malloc((size_t)size * sizeof *ranks), *mine = malloc((size_t)size * sizeof *mine);
    if (!d || !ranks || !mine) {
        free(d);
        free(ranks);
        free(mine);
        MPI_Comm_free(&sub);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    /* comm rank -> world rank: through the parent's own table. */
    MPI_Group g_sub, g_parent;
    MPI_Comm_group(sub, &g_sub);
    MPI_Comm_group(dt__mpi_of(c), &g_parent);
    for (int i = 0; i < size; i++)
        mine[i] = i;
    MPI_Group_translate_ranks(g_sub, size, mine, g_parent, ranks);
    MPI_Group_free(&g_sub);
    MPI_Group_free(&g_parent);
    for (int i = 0; i < size; i++)
        ranks[i] = c->ranks[ranks[i]];
    free(mine);
    d->world = c->world;
    d->backend = c->backend;
    d->ranks = ranks;
    d->size = size;
    MPI_Comm_rank(sub, &d->rank);
    d->id = dt__comm_child_id(c->id, seq, color);
    d->timeout_s = c->timeout_s;
    d->algo = c->algo;
    d->segment_bytes = c->segment_bytes;
    d->direct_bytes = c->direct_bytes;
    d->small_bytes = c->small_bytes;
    d->ring_bytes = c->ring_bytes;
    __atomic_add_fetch(&c->world->refs, 1, __ATOMIC_ACQ_REL);
    dt_status s = wrap_comm(sub, d);
    if (s != DT_OK) {
        char why[DT__ERROR_LEN];
        dt__error_save(why);
        dt_comm_destroy(d);
        return dt__error_restore(s, why);
    }
    *out = d;
    return DT_OK;
}

static dt_status comm_free(dt_comm *c, bool world)
{
    dt__mpi_comm *m = c->impl;
    int finalized = 0;
    MPI_Finalized(&finalized);
    dt_status s = DT_OK;
    if (m && !finalized) {
        if (world)
            dt__mpi_p2p_flush(c->timeout_s);
        DT__MPI_LOCK();
        if (world) /* like the native world: every rank gets here before any leaves */
            s = dt__mpi_error(MPI_Barrier(m->comm), "destroying the world communicator");
        MPI_Comm_free(&m->comm);
        if (world && owns_mpi) {
            dt__mpi_types_free();
            MPI_Finalize();
        }
        DT__MPI_UNLOCK();
    }
    free(m);
    c->impl = NULL;
    return s;
}

static dt_status mpi_abort(dt_comm *c, const char *reason)
{
    c->world->aborted = true;
    return dt__fail(DT_ERR_ABORTED, "aborted: %s (DT_BACKEND=mpi: the other ranks learn of it when this rank "
                                    "exits and mpirun ends the job)",
                    reason ? reason : "");
}

/* The collectives (mpi_coll.c). */
dt_status dt__mpi_barrier(dt_comm *c);
dt_status dt__mpi_broadcast(void *buf, size_t count, dt_dtype t, int root, dt_comm *c);
dt_status dt__mpi_reduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, int root, dt_comm *c);
dt_status dt__mpi_allreduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, dt_comm *c);
dt_status dt__mpi_reduce_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, dt_redop op,
                                 dt_comm *c);
dt_status dt__mpi_allgather(const void *send, void *recv, size_t sendcount, dt_dtype t, dt_comm *c);
dt_status dt__mpi_gather(const void *send, void *recv, size_t sendcount, dt_dtype t, int root, dt_comm *c);
dt_status dt__mpi_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, int root, dt_comm *c);
dt_status dt__mpi_alltoall(const void *send, void *recv, size_t count, dt_dtype t, dt_comm *c);
dt_status dt__mpi_allreduce_half(const float *send, float *recv, size_t count, dt_dtype wire, dt_redop op,
                                 dt_comm *c);

const dt__backend dt__mpi_backend = {
    .name = "mpi",
    .barrier = dt__mpi_barrier,
    .broadcast = dt__mpi_broadcast,
    .reduce = dt__mpi_reduce,
    .allreduce = dt__mpi_allreduce,
    .reduce_scatter = dt__mpi_reduce_scatter,
    .allgather = dt__mpi_allgather,
    .gather = dt__mpi_gather,
    .scatter = dt__mpi_scatter,
    .alltoall = dt__mpi_alltoall,
    .allreduce_half = dt__mpi_allreduce_half,
    .isend = dt__mpi_isend,
    .irecv = dt__mpi_irecv,
    .wait = dt__mpi_wait,
    .test = dt__mpi_test,
    .cancel = dt__mpi_cancel,
    .waitany = dt__mpi_waitany,
    .world_init = world_init,
    .split = split,
    .comm_free = comm_free,
    .abort = mpi_abort,
    .device_buffers = DT__DEVBUF_REFUSE,
};
