/* DT_DEBUG=coll: a record of this process's recent collectives, a check that
 * every rank of a communicator issues the same one, and a dump of every
 * rank's recent collectives when the job fails.
 *
 * Each public collective call (not the pieces a hierarchical one is built
 * from) is described by its operation, element count, dtype, reduction,
 * root and the caller's tag (dt_comm_set_tag).  Before running it, the ranks
 * of the communicator exchange descriptors (one small message to each peer,
 * on a sub-tag of its own); a difference fails the call on every rank with
 * DT_ERR_INVALID naming the first rank whose call differs from rank 0's and
 * both calls.  The newest entries are handed to the heartbeat thread, which
 * publishes them in the store, so that a failing rank can print where every
 * other rank stopped, even one that is frozen or stuck in its own code. */
#ifndef DT_COMM_COLLTRACE_H
#define DT_COMM_COLLTRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "comm/coll.h"

enum { DT__COLLTRACE_TAG = 32, DT__COLLTRACE_OP = 24 };

typedef struct {
    char op[DT__COLLTRACE_OP];
    uint64_t count;
    int32_t dtype, redop, root; /* -1: not part of this operation */
    uint32_t comm_id;
    int32_t comm_size;
    uint64_t seq;
    char tag[DT__COLLTRACE_TAG];
} dt__colldesc;

typedef struct dt__colltrace dt__colltrace;

/* NULL (and DT_OK) unless DT_DEBUG names coll. */
dt_status dt__colltrace_create(dt__colltrace **out);
void dt__colltrace_destroy(dt__colltrace *t);

/* "#41 allreduce(1024 x f32, sum) 'step 3'" */
void dt__colldesc_format(const dt__colldesc *d, char *buf, size_t len);

/* Start of a public collective on k's communicator (after dt__coll_begin):
 * set k->sig (always checked, by the receivers of its messages); with
 * tracing on, also record the call and check, with one exchange of full
 * descriptors, that every rank issues the same call.  redop/root: -1 when
 * the call has none. */
dt_status dt__coll_trace(dt__coll *k, size_t count, dt_dtype dtype, int redop, int root);

/* Print this rank's recent collectives and those the other ranks published
 * (the engine calls it once, at its first failure). */
void dt__colltrace_dump(void *world, dt_status code, const char *why);

#endif
