/* The rendezvous of a job started by srun, from Slurm's own variables
 * (docs/launching.md, "Slurm"). */
#ifndef DT_COMM_LAUNCH_SLURM_H
#define DT_COMM_LAUNCH_SLURM_H

#include <stddef.h>

#include "dtrain/base.h"

#define DT__SLURM_PORT_BASE 10000
/* The token file looked for in SLURM_SUBMIT_DIR when no token is given. */
#define DT__SLURM_TOKEN_FILE "dtrain.token"

/* The first host of a Slurm host list ("n[01-04],gpu7" -> "n01"), copied to
 * out; var names the variable in errors. */
dt_status dt__slurm_first_host(const char *var, const char *list, char *out, size_t len);
/* The store's host: the first node of SLURM_STEP_NODELIST (else SLURM_JOB_NODELIST). */
dt_status dt__slurm_store_host(char *out, size_t len);
/* The store's port: 10000 + (SLURM_JOB_ID mod 2000) * 10 + (SLURM_STEP_ID mod 10). */
dt_status dt__slurm_store_port(int *out);

#endif
