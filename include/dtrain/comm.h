/* dtrain communicator: point-to-point and collective operations between the
 * ranks of a job.
 *
 * Conventions for every call below:
 *  - counts are in elements of `dtype`; any count including 0 is allowed, up
 *    to buffers of 2^56 bytes: a count whose byte size (times the number of
 *    ranks where a buffer holds one block per rank) overflows that is
 *    refused with DT_ERR_INVALID before anything is sent;
 *  - a NULL communicator, request pointer, or buffer of nonzero count is
 *    refused with DT_ERR_INVALID naming the argument;
 *  - in-place: pass the same pointer as send and receive buffer (see each
 *    collective for where the input is taken from);
 *  - every call returns DT_OK or a negative dt_status, with the detail in
 *    dt_last_error();
 *  - every blocking call has a deadline of DT_TIMEOUT seconds (default 600);
 *  - a peer that dies or disconnects, a deadline, or an abort makes this and
 *    every later call on the communicator (and on communicators split from
 *    the same job) fail, with DT_ERR_PEER / DT_ERR_TIMEOUT / DT_ERR_ABORTED
 *    and a message naming the rank and its host:port;
 *  - results are bitwise identical on every rank and from run to run (the
 *    reduction order is fixed by the algorithm and the settings, never by
 *    timing: the choices the start-up timing makes, the direct algorithms
 *    or not, recursive doubling or halving-doubling allreduce, alltoall's
 *    exchange, are between algorithms that give the same bits);
 *    a NaN result of a float reduction is always the positive quiet NaN
 *    with zero payload, and min/max return it when either operand is NaN;
 *  - collectives must be called by every rank of the communicator in the same
 *    order; ranks whose calls of the same number differ in kind, count,
 *    dtype, op or root fail with DT_ERR_INVALID "collective mismatch" naming
 *    both calls, in that call or (a rank that exchanged nothing with a
 *    differing rank in it) the next; the rooted ones (broadcast, reduce,
 *    gather, scatter) agree on the call before any data moves, so there
 *    every rank fails in that call, whichever roots the ranks name
 *    (always checked, docs/failures.md);
 *  - device buffers: every buffer may be device memory (a dt_device's:
 *    cuda, or the emu test device) once that device has been opened
 *    (dt_device_open), on any rank independently of the others, send and
 *    receive buffers of different kinds too.  The communicator learns a
 *    pointer's kind from the device layer (cudaPointerGetAttributes; the
 *    emu device's address range), not from a flag on the call, so that
 *    code above (the strategies) passes the same pointers it computes with
 *    and a wrong flag cannot make the host dereference device memory.  The
 *    native backend stages device buffers through host memory (pinned for
 *    cuda): results bitwise those of the same call on host buffers, the
 *    same mismatch checks and deadlines, data produced on the device's
 *    compute stream copied after it is done; DT_BACKEND=mpi refuses them
 *    with DT_ERR_INVALID naming the buffer (docs/gpu.md);
 *  - threads: different communicators (the world and ones split from it) may
 *    be used from different threads at the same time, and each makes
 *    progress on its own: a tensor-parallel group's small allreduces do not
 *    wait behind a data-parallel group's large one.  One communicator is
 *    used by one thread at a time (its nonblocking collectives run on its
 *    own progress thread; see below). */
#ifndef DTRAIN_COMM_H
#define DTRAIN_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "dtrain/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt_comm dt_comm;
typedef struct dt_request dt_request;

/* Largest user tag (tags are 0..DT_TAG_MAX). */
#define DT_TAG_MAX 0x3fffffff
/* Colour for dt_comm_split meaning "not in any new communicator". */
#define DT_UNDEFINED (-1)

/* Create the world communicator from the environment:
 *   DT_RANK, DT_WORLD_SIZE, DT_LOCAL_RANK, DT_LOCAL_WORLD_SIZE,
 *   DT_MASTER_ADDR, DT_MASTER_PORT, DT_JOB_TOKEN, DT_TIMEOUT, DT_STORE;
 * when DT_RANK/DT_WORLD_SIZE are absent they are taken from OpenMPI
 * (OMPI_COMM_WORLD_RANK/SIZE), PMI (PMI_RANK/PMI_SIZE) or Slurm
 * (SLURM_PROCID/SLURM_NTASKS); with none of them the world has one rank.
 * Ranks meet through the rendezvous store at DT_MASTER_ADDR:DT_MASTER_PORT,
 * served by rank 0 unless DT_STORE=external (dtrun serves it). */
dt_status dt_comm_init_env(dt_comm **out);
/* This process's rank and the world's size as dt_comm_init_env reads them
 * (the same variables, the same checks), without joining: what a rank can
 * check against the world before the communicator starts.  1 rank (rank 0)
 * without a launcher. */
dt_status dt_comm_env_world(int *rank, int *size);

int dt_comm_rank(const dt_comm *c);
int dt_comm_size(const dt_comm *c);
/* Rank among the ranks on this host, and their number (from the launcher). */
int dt_comm_local_rank(const dt_comm *c);
int dt_comm_local_size(const dt_comm *c);

/* MPI_Comm_split: ranks with the same colour form a new communicator, ordered
 * by (key, rank in c).  Collective over c.  A rank passing DT_UNDEFINED gets
 * *out = NULL.  Sub-communicators share the parent's connections. */
dt_status dt_comm_split(dt_comm *c, int color, int key, dt_comm **out);

/* ---- per-communicator options (beside the environment) ----
 * A communicator starts with DT_TIMEOUT and DT_ALGO; one made by
 * dt_comm_split starts with its parent's options. */
/* Deadline of each blocking call on c, and of each nonblocking collective
 * started on it from now on, in seconds (> 0, at most 1e7).  Local: the ranks
 * may set different deadlines. */
dt_status dt_comm_set_timeout(dt_comm *c, double seconds);
double dt_comm_timeout(const dt_comm *c);
/* Algorithm of c's collectives: "auto" (chosen by size and topology,
 * docs/algorithms.md) or one of DT_ALGO's names: "ring", "rd", "rhd",
 * "direct", "shm".  Collective over c: every rank must pass the same name;
 * otherwise every rank gets DT_ERR_INVALID naming two of the choices and c
 * keeps its algorithm.  An unknown name is refused before any message. */
dt_status dt_comm_set_algorithm(dt_comm *c, const char *name);
/* The name set last ("auto" unless DT_ALGO or dt_comm_set_algorithm said otherwise). */
const char *dt_comm_algorithm(const dt_comm *c);

/* Label the following collectives on c (up to 31 characters are kept; NULL
 * or "" clears it).  With DT_DEBUG=coll the label is recorded with each
 * call and shown in mismatch reports and failure dumps, e.g. "step 12" or
 * "grad bucket 3".  Costs nothing otherwise. */
dt_status dt_comm_set_tag(dt_comm *c, const char *tag);

/* Tell every rank the job is aborting (they fail with DT_ERR_ABORTED and see
 * `reason`), then fail locally.  Returns DT_ERR_ABORTED.  The caller decides
 * whether to exit; the communicator must still be destroyed. */
dt_status dt_comm_abort(dt_comm *c, const char *reason);

/* Give c a communicator of its own for device buffers (docs/gpu.md):
 * `backend` "nccl" (an NCCL communicator over c's members, its unique id
 * broadcast over c; a build with NCCL and one GPU per rank on each host) or
 * "native" (a second native communicator: device buffers staged through
 * host memory apart from c's host traffic; what tests use without a GPU).
 * From then on each call on c (collective, nonblocking or point to point)
 * whose buffer is device memory runs on it, host buffers stay on c, and
 * every split of c splits it too, so the children carry theirs.  Collective
 * over c, once, before c is split; DT_ERR_INVALID for an unknown backend,
 * a second attachment or a build without it. */
dt_status dt_comm_attach_device(dt_comm *c, const char *backend);
/* Whether this build has the backend `name` ("native", "mpi", "nccl"). */
bool dt_comm_backend_built(const char *name);
/* The name of the backend carrying c's device buffers: the attached one's,
 * or c's own ("native", "mpi", "nccl"). */
const char *dt_comm_device_backend(const dt_comm *c);

/* Free a communicator.  For the world communicator this waits until every
 * rank has destroyed it too (so no message is lost), then closes all
 * connections.  Returns the first error the communicator saw, if any. */
dt_status dt_comm_destroy(dt_comm *c);

/* ---- point to point (tag 0..DT_TAG_MAX; messages between a pair of ranks
 * with the same tag arrive in the order sent) ---- */
dt_status dt_send(const void *buf, size_t count, dt_dtype dtype, int peer, int tag, dt_comm *c);
/* Receives at most count elements; *received (optional) gets the count.  A
 * message larger than the buffer fails the communicator (DT_ERR_TRUNCATE); one
 * whose byte count is not a whole number of elements (sender and receiver
 * disagree on the dtype) returns DT_ERR_TRUNCATE naming both byte counts. */
dt_status dt_recv(void *buf, size_t count, dt_dtype dtype, int peer, int tag, dt_comm *c,
                  size_t *received);
/* Nonblocking versions; the buffer must stay valid until dt_wait/dt_test
 * reports completion, which also frees the request. */
dt_status dt_isend(const void *buf, size_t count, dt_dtype dtype, int peer, int tag, dt_comm *c,
                   dt_request **req);
dt_status dt_irecv(void *buf, size_t count, dt_dtype dtype, int peer, int tag, dt_comm *c,
                   dt_request **req);
/* Wait for completion (freeing the request); *received is optional. */
dt_status dt_wait(dt_request *req, size_t *received);
/* *done = 1 (request freed, result returned) or 0 (still pending). */
dt_status dt_test(dt_request *req, int *done, size_t *received);
/* MPI_Waitany for point-to-point requests of one job: waits until one of
 * reqs[0..n) (at most 1024; NULL entries are skipped) completes, sets
 * *index to it, frees it and sets reqs[*index] to NULL, and returns its
 * result (*received as dt_wait).  With no request left: *index = -1 and
 * DT_OK.  The deadline is the longest of their communicators' timeouts
 * (dt_comm_set_timeout: a server that waits on its workers sets a long
 * one).  Nonblocking collectives are refused. */
dt_status dt_waitany(dt_request **reqs, int n, int *index, size_t *received);
/* MPI_Cancel for a receive no message has matched yet: withdraws it and
 * frees the request (DT_OK).  A send, a receive already matched (wait for
 * it) or a nonblocking collective: DT_ERR_INVALID, the request untouched. */
dt_status dt_cancel(dt_request *req);

/* ---- collectives ---- */
dt_status dt_barrier(dt_comm *c);
/* buf on root is sent to every rank's buf. */
dt_status dt_broadcast(void *buf, size_t count, dt_dtype dtype, int root, dt_comm *c);
/* recv (significant on root only) = OP over ranks of send. */
dt_status dt_reduce(const void *send, void *recv, size_t count, dt_dtype dtype, dt_redop op,
                    int root, dt_comm *c);
dt_status dt_allreduce(const void *send, void *recv, size_t count, dt_dtype dtype, dt_redop op,
                       dt_comm *c);
/* send holds size*recvcount elements; rank r gets block r of the reduction.
 * In place (send == recv): input in recv, result at the start of recv. */
dt_status dt_reduce_scatter(const void *send, void *recv, size_t recvcount, dt_dtype dtype,
                            dt_redop op, dt_comm *c);
/* recv holds size*sendcount elements, block r from rank r.  In place
 * (send == recv): each rank's input is already at its block of recv. */
dt_status dt_allgather(const void *send, void *recv, size_t sendcount, dt_dtype dtype, dt_comm *c);
/* Like allgather, result on root only (recv ignored elsewhere).  In place on
 * root: its input is already at its block. */
dt_status dt_gather(const void *send, void *recv, size_t sendcount, dt_dtype dtype, int root,
                    dt_comm *c);
/* Root's send holds size*recvcount elements; rank r receives block r.  In
 * place on root (recv == send): root's block stays where it is. */
dt_status dt_scatter(const void *send, void *recv, size_t recvcount, dt_dtype dtype, int root,
                     dt_comm *c);
/* Block j of send goes to rank j, arriving as block r of its recv.
 * In place: send == recv. */
dt_status dt_alltoall(const void *send, void *recv, size_t count, dt_dtype dtype, dt_comm *c);

/* Allreduce of f32 data sent as f16 or bf16 (`wire`): half the bytes on the
 * wire, every sum in f32 (each input is rounded once, each result once; see
 * docs/algorithms.md).  op is DT_SUM or DT_AVG.  For gradient compression. */
dt_status dt_allreduce_half(const float *send, float *recv, size_t count, dt_dtype wire, dt_redop op, dt_comm *c);

/* ---- nonblocking collectives ----
 * Start the operation and return at once; it runs, in the order started, on
 * the communicator's own progress thread while the caller computes.  Buffers must
 * stay untouched until dt_wait (or a dt_test that reports done) returns the
 * operation's status; argument errors are reported there too, and `received`
 * is not set for collectives.  Every rank must start the same collectives in
 * the same order.  Any other collective on the communicator first waits for
 * the started ones to finish; other communicators' calls, and point-to-point
 * on this one, do not wait (they run beside them, from any thread). */
dt_status dt_iallreduce(const void *send, void *recv, size_t count, dt_dtype dtype, dt_redop op, dt_comm *c,
                        dt_request **req);
dt_status dt_iallreduce_half(const float *send, float *recv, size_t count, dt_dtype wire, dt_redop op, dt_comm *c,
                             dt_request **req);
dt_status dt_ibroadcast(void *buf, size_t count, dt_dtype dtype, int root, dt_comm *c, dt_request **req);
dt_status dt_iallgather(const void *send, void *recv, size_t sendcount, dt_dtype dtype, dt_comm *c, dt_request **req);
dt_status dt_ireduce_scatter(const void *send, void *recv, size_t recvcount, dt_dtype dtype, dt_redop op, dt_comm *c,
                             dt_request **req);
/* Seconds c's progress thread has spent running c's nonblocking
 * collectives so far (0 before the first). */
double dt_comm_async_seconds(dt_comm *c);
/* Payload bytes this rank has sent to other ranks so far, through c's world
 * and every communicator split from it (collectives, point-to-point and the
 * start-up timing; the shared-memory collectives count what this rank
 * writes into their arena; frame headers and heartbeats not counted).  A cheap
 * relaxed counter: the metrics' bytes_sent and dtrun --monitor read it. */
uint64_t dt_comm_bytes_sent(const dt_comm *c);

#ifdef __cplusplus
}
#endif
#endif
