/* The ranks on this host, from whichever launcher started this process (see
 * local_ranks.h): the default thread count divides the cores by it. */
#include "base/local_ranks.h"

#include <ctype.h>
#include <stdlib.h>

#include "base/env.h"
#include "base/status.h"

int dt__slurm_tasks_on_node(const char *list, int node)
{
    if (!list || node < 0)
        return 0;
    const char *p = list;
    long first = 0; /* the first node the current item covers */
    while (*p) {
        char *end;
        if (!isdigit((unsigned char)*p))
            return 0;
        long tasks = strtol(p, &end, 10), repeat = 1;
        p = end;
        if (p[0] == '(' && p[1] == 'x') {
            if (!isdigit((unsigned char)p[2]))
                return 0;
            repeat = strtol(p + 2, &end, 10);
            if (*end != ')')
                return 0;
            p = end + 1;
        }
        if (tasks < 1 || tasks > (1 << 20) || repeat < 1 || (*p && *p != ','))
            return 0;
        if (node < first + repeat)
            return (int)tasks;
        first += repeat;
        if (*p == ',')
            p++;
    }
    return 0;
}

static int positive(const char *name)
{
    int64_t v;
    const char *s = dt__env_str(name);
    return s && dt__parse_int(s, 1, 1 << 20, &v) == DT_OK ? (int)v : 0;
}

dt_status dt__local_ranks(int *out, const char **source)
{
    *out = 1;
    if (source)
        *source = NULL;
    if (dt__env_str("DT_LOCAL_WORLD_SIZE")) {
        int64_t v;
        DT_CHECK(dt__env_int("DT_LOCAL_WORLD_SIZE", 1, 1 << 16, &v));
        *out = (int)v;
        if (source)
            *source = "DT_LOCAL_WORLD_SIZE";
        return DT_OK;
    }
    static const char *const plain[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        int v = positive(plain[i]);
        if (v) {
            *out = v;
            if (source)
                *source = plain[i];
            return DT_OK;
        }
    }
    /* A task of srun: its step's task list and this node's index in the step. */
    if (dt__env_str("SLURM_PROCID")) {
        const char *list_var = dt__env_str("SLURM_STEP_TASKS_PER_NODE") ? "SLURM_STEP_TASKS_PER_NODE"
                                                                        : "SLURM_TASKS_PER_NODE";
        int64_t node = 0;
        const char *id = dt__env_str("SLURM_NODEID");
        if (id && dt__parse_int(id, 0, 1 << 20, &node) != DT_OK)
            node = -1;
        int v = dt__slurm_tasks_on_node(dt__env_str(list_var), (int)node);
        if (!v && (v = positive("SLURM_NTASKS_PER_NODE")))
            list_var = "SLURM_NTASKS_PER_NODE";
        if (v) {
            *out = v;
            if (source)
                *source = list_var;
        }
    }
    return DT_OK;
}
