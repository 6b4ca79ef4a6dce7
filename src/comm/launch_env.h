/* Where a rank learns who it is: dtrun's DT_* variables, or those of mpirun,
 * PMI or Slurm, mapped onto one struct. */
#ifndef DT_COMM_LAUNCH_ENV_H
#define DT_COMM_LAUNCH_ENV_H

#include "dtrain/base.h"

typedef struct {
    int rank, size, local_rank, local_size;
    char master_host[256];
    int master_port;
    /* Where master_host/master_port came from when not given (under srun:
     * "Slurm: ..."), for errors; NULL when given. */
    const char *master_source;
    const char *token; /* NULL when unset; may point into token_buf */
    char token_buf[256];
    int serve_store;   /* 1: this rank serves the store (rank 0 without DT_STORE=external) */
    double timeout_s;
    const char *launcher; /* "dtrun", "openmpi", "pmi", "slurm" or "none" */
} dt__launch_env;

dt_status dt__launch_env_read(dt__launch_env *out);

#endif
