#include "comm/launch_env.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"
#include "base/local_ranks.h"
#include "base/status.h"
#include "comm/launch_slurm.h"
#include "dtrain/store.h"

/* The ranks on this host come from dt__local_ranks (base/local_ranks.c). */
typedef struct {
    const char *launcher, *rank, *size, *local_rank;
} source;

static const source sources[] = {
    {"dtrun", "DT_RANK", "DT_WORLD_SIZE", "DT_LOCAL_RANK"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
    {"pmi", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
};

static dt_status read_int(const char *name, int64_t min, int64_t max, int fallback, int *out)
{
    const char *v = dt__env_str(name);
    if (!v) {
        *out = fallback;
        return DT_OK;
    }
    int64_t x;
    if (dt__parse_int(v, min, max, &x) != DT_OK)
        return dt__wrap(DT_ERR_INVALID, "environment variable %s: ", name);
    *out = (int)x;
    return DT_OK;
}

/* Where the store's address came from, by whether Slurm gave its host
 * ([1][.]) and its port ([.][1]): for errors; NULL when both were given. */
static const char *const master_sources[2][2] = {
    {NULL, "the port from SLURM_JOB_ID; DT_MASTER_PORT overrides it"},
    {"the first node of the Slurm step; DT_MASTER_ADDR overrides it",
     "the first node of the Slurm step and a port from SLURM_JOB_ID; DT_MASTER_ADDR and DT_MASTER_PORT "
     "override them"},
};

/* DT_JOB_TOKEN, else the file DT_TOKEN_FILE names, else (under srun) the file
 * dtrain.token in the directory the job was submitted from, if there is one. */
static dt_status read_token(dt__launch_env *e, bool slurm)
{
    e->token = dt__env_str("DT_JOB_TOKEN");
    if (e->token)
        return DT_OK;
    const char *file = dt__env_str("DT_TOKEN_FILE");
    if (file) {
        DT_CHECK(dt_read_token_file(file, "DT_TOKEN_FILE", e->token_buf, sizeof e->token_buf));
        e->token = e->token_buf;
        return DT_OK;
    }
    const char *dir = dt__env_str("SLURM_SUBMIT_DIR");
    if (!slurm || !dir)
        return DT_OK;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s/" DT__SLURM_TOKEN_FILE, dir) >= sizeof path ||
        access(path, F_OK) != 0)
        return DT_OK;
    DT_CHECK(dt_read_token_file(path, "the job's submit directory", e->token_buf, sizeof e->token_buf));
    e->token = e->token_buf;
    return DT_OK;
}

/* dtrun's pair set by halves (a DT_RANK left in a shell, a DT_WORLD_SIZE
 * typed by hand) would run a single process in silence: refused, naming
 * both.  (The other launchers set both or none.) */
static dt_status dtrun_pair_whole(void)
{
    bool rank = dt__env_str("DT_RANK") != NULL, size = dt__env_str("DT_WORLD_SIZE") != NULL;
    if (rank == size)
        return DT_OK;
    return dt__fail(DT_ERR_INVALID, "%s is set but %s is not: a launcher (dtrun) sets both; unset it, or set both",
                    rank ? "DT_RANK" : "DT_WORLD_SIZE", rank ? "DT_WORLD_SIZE" : "DT_RANK");
}

dt_status dt_comm_env_world(int *rank, int *size)
{
    DT_CHECK(dtrun_pair_whole());
    int r = 0, n = 1;
    for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++) {
        const source *s = &sources[i];
        if (!dt__env_str(s->rank) || !dt__env_str(s->size))
            continue;
        DT_CHECK(read_int(s->size, 1, 1 << 20, 1, &n));
        DT_CHECK(read_int(s->rank, 0, n - 1, 0, &r));
        break;
    }
    if (rank)
        *rank = r;
    if (size)
        *size = n;
    return DT_OK;
}

dt_status dt__launch_env_read(dt__launch_env *e)
{
    memset(e, 0, sizeof *e);
    DT_CHECK(dtrun_pair_whole());
    e->size = 1;
    e->local_size = 1;
    e->launcher = "none";
    for (size_t i = 0; i < sizeof sources / sizeof sources[0]; i++) {
        const source *s = &sources[i];
        if (!dt__env_str(s->rank) || !dt__env_str(s->size))
            continue;
        e->launcher = s->launcher;
        DT_CHECK(read_int(s->size, 1, 1 << 20, 1, &e->size));
        DT_CHECK(read_int(s->rank, 0, e->size - 1, 0, &e->rank));
        DT_CHECK(read_int(s->local_rank, 0, e->size - 1, 0, &e->local_rank));
        DT_CHECK(dt__local_ranks(&e->local_size, NULL));
        if (e->local_size > e->size)
            e->local_size = e->size;
        break;
    }
    /* Under srun, without DT_MASTER_ADDR/MASTER_ADDR and DT_MASTER_PORT/
     * MASTER_PORT, the store's host and port come from Slurm itself. */
    bool slurm = strcmp(e->launcher, "slurm") == 0 && e->size > 1;
    const char *host = dt__env_str("DT_MASTER_ADDR");
    if (!host)
        host = dt__env_str("MASTER_ADDR");
    bool slurm_host = !host && slurm;
    if (slurm_host) {
        DT_CHECK(dt__slurm_store_host(e->master_host, sizeof e->master_host));
    } else {
        if (!host)
            host = "127.0.0.1";
        if (strlen(host) >= sizeof e->master_host)
            return dt__fail(DT_ERR_INVALID, "DT_MASTER_ADDR is too long");
        snprintf(e->master_host, sizeof e->master_host, "%s", host);
    }
    const char *port_var = dt__env_str("DT_MASTER_PORT") ? "DT_MASTER_PORT"
                           : dt__env_str("MASTER_PORT")  ? "MASTER_PORT"
                                                         : NULL;
    bool slurm_port = !port_var && slurm;
    if (slurm_port) {
        DT_CHECK(dt__slurm_store_port(&e->master_port));
    } else {
        int64_t port;
        DT_CHECK(dt__env_int(port_var ? port_var : "DT_MASTER_PORT", 1, 65535, &port));
        e->master_port = (int)port;
    }
    e->master_source = master_sources[slurm_host][slurm_port];
    int64_t timeout;
    DT_CHECK(dt__env_int("DT_TIMEOUT", 1, 365LL * 86400, &timeout));
    e->timeout_s = (double)timeout;
    DT_CHECK(read_token(e, slurm));
    /* The MPI backend makes no connections of its own: MPI authenticates its job. */
    const char *backend = dt__env_str("DT_BACKEND");
    bool mpi = backend && strcmp(backend, "mpi") == 0;
    if (!e->token && e->size > 1 && !mpi)
        return dt__fail(DT_ERR_INVALID,
                        "DT_JOB_TOKEN is not set: every rank of a %d-rank job needs the job's token "
                        "(dtrun sets it; under mpirun pass it with -x DT_JOB_TOKEN; under srun export it, "
                        "or put it in the file DT_TOKEN_FILE names or in dtrain.token in the submit directory)",
                        e->size);
    const char *store = dt__env_str("DT_STORE");
    if (store && strcmp(store, "rank0") != 0 && strcmp(store, "external") != 0)
        return dt__fail(DT_ERR_INVALID, "DT_STORE='%s': expected rank0 or external", store);
    e->serve_store = e->rank == 0 && e->size > 1 && !(store && strcmp(store, "external") == 0);
    return DT_OK;
}
