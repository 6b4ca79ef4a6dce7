/* What a rank started by srun can learn from Slurm alone, so that
 * `srun dtrain train ...` needs no DT_MASTER_ADDR or DT_MASTER_PORT: the
 * store's host is the step's first node (task 0 runs there under srun's block
 * and cyclic distributions) and its port follows from the job and step ids,
 * so that two jobs sharing a node, or two steps of one job, do not collide. */
#include "comm/launch_slurm.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "base/env.h"
#include "base/status.h"

dt_status dt__slurm_first_host(const char *var, const char *list, char *out, size_t len)
{
    size_t n = 0;
    const char *p = list;
    while (*p && *p != ',') {
        if (*p == '[') {
            /* A range set such as [001-004,010]: its first number, as written. */
            p++;
            if (!isdigit((unsigned char)*p))
                return dt__fail(DT_ERR_INVALID, "%s='%s': expected a number after '['", var, list);
            while (isdigit((unsigned char)*p)) {
                if (n + 1 >= len)
                    return dt__fail(DT_ERR_INVALID, "%s='%s': the first host name is too long", var, list);
                out[n++] = *p++;
            }
            while (*p && *p != ']') {
                if (!isdigit((unsigned char)*p) && *p != '-' && *p != ',')
                    return dt__fail(DT_ERR_INVALID, "%s='%s': unexpected '%c' inside [...]", var, list, *p);
                p++;
            }
            if (*p != ']')
                return dt__fail(DT_ERR_INVALID, "%s='%s': '[' without ']'", var, list);
            p++;
            continue;
        }
        if (*p == ']' || isspace((unsigned char)*p))
            return dt__fail(DT_ERR_INVALID, "%s='%s': unexpected '%c'", var, list, *p);
        if (n + 1 >= len)
            return dt__fail(DT_ERR_INVALID, "%s='%s': the first host name is too long", var, list);
        out[n++] = *p++;
    }
    if (n == 0)
        return dt__fail(DT_ERR_INVALID, "%s='%s': no host name", var, list);
    out[n] = '\0';
    return DT_OK;
}

dt_status dt__slurm_store_host(char *out, size_t len)
{
    const char *var = dt__env_str("SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
    const char *list = dt__env_str(var);
    if (!list)
        return dt__fail(DT_ERR_INVALID,
                        "started by Slurm (SLURM_PROCID is set) but neither SLURM_STEP_NODELIST nor "
                        "SLURM_JOB_NODELIST is: set DT_MASTER_ADDR to the host of task 0");
    return dt__slurm_first_host(var, list, out, len);
}

dt_status dt__slurm_store_port(int *out)
{
    const char *job = dt__env_str("SLURM_JOB_ID") ? "SLURM_JOB_ID" : "SLURM_JOBID";
    if (!dt__env_str(job))
        return dt__fail(DT_ERR_INVALID,
                        "started by Slurm (SLURM_PROCID is set) without SLURM_JOB_ID: set DT_MASTER_PORT");
    int64_t id, step = 0;
    if (dt__parse_int(dt__env_str(job), 0, INT64_MAX, &id) != DT_OK)
        return dt__wrap(DT_ERR_INVALID, "environment variable %s: ", job);
    /* Batch and interactive steps have names, not numbers: they count as 0. */
    const char *s = dt__env_str("SLURM_STEP_ID");
    if (s && isdigit((unsigned char)s[0]) && dt__parse_int(s, 0, INT64_MAX, &step) != DT_OK)
        return dt__wrap(DT_ERR_INVALID, "environment variable SLURM_STEP_ID: ");
    /* 10000..29999: below Linux's ephemeral range (32768 and up). */
    *out = DT__SLURM_PORT_BASE + (int)(id % 2000) * 10 + (int)(step % 10);
    return DT_OK;
}
