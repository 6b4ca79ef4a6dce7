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

/* false with the reason in why: the layout against the world (the library's
 * dt_layout_check: the servers among the ranks, the mesh's dp x pp x tp),
 * then the model against the layout (the pipeline's stages and its blocks). */
static bool fits(const dtrain_config *c, int world, char *why, size_t len)
{
    dt_layout l;
    dtrain_layout_of(c, &l);
    dt_model_desc *d = NULL;
    bool ok = dt_layout_check(&l, world, NULL) == DT_OK;
    if (ok && l.pp > 1 && dtrain_describe_model(c, NULL, &d) != DT_OK) {
        snprintf(why, len, "pp = %d: the model cannot be described (above)", l.pp);
        return false;
    }
    ok = ok && (!d || dt_layout_check_model(&l, d) == DT_OK);
    if (!ok) {
        int group = l.tp * l.pp, workers = world - l.servers;
        if (l.dp == 0 && group > 1 && (workers < group || workers % group)) /* say what would fit */
            snprintf(why, len,
                     "%s; start %s%d ranks%s (e.g. dtrun -n %d dtrain train ...), or give a layout this world "
                     "fits (--set tp=1 --set pp=1 fits any; a checkpoint resumes in any layout)",
                     dt_last_error(), l.servers ? "the servers plus " : "a multiple of tp x pp = ", group,
                     l.servers ? " per data-parallel copy" : "", l.servers + group);
        else
            snprintf(why, len, "%s", dt_last_error());
    }
    dt_model_desc_destroy(d);
    return ok;
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
