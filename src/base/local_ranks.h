/* How many ranks share this host, as the launcher says: dtrun's
 * DT_LOCAL_WORLD_SIZE, OpenMPI's OMPI_COMM_WORLD_LOCAL_SIZE, MPICH/PMI's
 * MPI_LOCALNRANKS, or Slurm's tasks on this node of the step. */
#ifndef DT_BASE_LOCAL_RANKS_H
#define DT_BASE_LOCAL_RANKS_H

#include "dtrain/base.h"

/* *out: the count (1 when no launcher says); *source (may be NULL): the
 * variable it came from, or NULL.  DT_ERR_INVALID names a malformed
 * DT_LOCAL_WORLD_SIZE; the other launchers' variables are machine-written and
 * a malformed one is passed over. */
dt_status dt__local_ranks(int *out, const char **source);

/* The count of Slurm's task list ("2(x3),1": 2 tasks on each of nodes 0-2,
 * 1 on node 3) for node `node`; 0 when the list cannot be read or has no such
 * node. */
int dt__slurm_tasks_on_node(const char *list, int node);

#endif
