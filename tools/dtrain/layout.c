/* What a rank can refuse before it joins the job: the configuration
 * against the world's size (the launcher's environment), which every rank
 * computes alone and alike.  Refusing here, before the communicator starts,
 * every rank stops with the same reason and exit code 2, instead of one
 * rank failing inside a collective set-up and the others reporting its
 * abort ("... aborted the job") first. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_cli.h"

int dtrain_local_rank(void)
{
    static const char *const vars[] = {"DT_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                       "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            return atoi(v);
    }
    return 0;
}

/* false with the reason in why: the parameter server's roles, the mesh's
 * sizes and the pipeline's stages against the model's blocks. */
static bool fits(const dtrain_config *c, int world, char *why, size_t len)
{
    int workers = world;
    if (c->servers > 0) {
        dt_ps_config pc;
        if (dtrain_ps_config(c, &pc) != DT_OK || dt_ps_check(&pc, world) != DT_OK) {
            snprintf(why, len, "%s", dt_last_error());
            return false;
        }
        workers = world - (int)c->servers;
    }
    if (c->tp > 1 || c->pp > 1) { /* dp x pp x tp, as train.c makes the mesh */
        dt_mesh_dim dims[3] = {{"dp", 0}};
        int nd = 1;
        if (c->pp > 1)
            dims[nd++] = (dt_mesh_dim){"pp", (int)c->pp};
        if (c->tp > 1)
            dims[nd++] = (dt_mesh_dim){"tp", (int)c->tp};
        if (dt_mesh_check(dims, nd, workers) != DT_OK) {
            snprintf(why, len, "pp = %lld, tp = %lld: %s", (long long)c->pp, (long long)c->tp, dt_last_error());
            return false;
        }
    }
    if (c->pp > 1) { /* the stages the partition cuts: at most one per block */
        dt_model_desc *d = NULL;
        if (dtrain_describe_model(c, NULL, &d) != DT_OK) {
            snprintf(why, len, "pp = %lld: the model cannot be described (above)", (long long)c->pp);
            return false;
        }
        int parts = (int)c->pp * dtrain_chunks(c), *bounds = malloc((size_t)(parts + 1) * sizeof *bounds);
        bool ok = bounds && dt_pipeline_partition(d, parts, bounds) == DT_OK;
        if (!ok)
            snprintf(why, len, "pp = %lld: %s", (long long)c->pp, bounds ? dt_last_error() : "out of memory");
        free(bounds);
        dt_model_desc_destroy(d);
        if (!ok)
            return false;
    }
    return true;
}

int dtrain_check_world(const dtrain_config *c)
{
    int rank = 0, world = 1;
    if (dt_comm_env_world(&rank, &world) != DT_OK) /* the communicator's start says so */
        return 0;
    char why[1024];
    if (fits(c, world, why, sizeof why))
        return 0;
    if (dtrain_local_rank() == 0) /* once per host: the others' line would only repeat it */
        fprintf(stderr, "dtrain: %s (the configuration does not fit the job's %d rank%s)\n", why, world,
                world == 1 ? "" : "s");
    return 2;
}
