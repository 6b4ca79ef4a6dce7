/* Groups of parameters ready together (see ready_groups.h). */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "parallel/common/ready_groups.h"

dt_status dt__ready_groups_init(dt__ready_groups *g, int nparams, int ngroups, const int *group_of)
{
    *g = (dt__ready_groups){.nparams = nparams, .ngroups = ngroups};
    size_t np = (size_t)(nparams ? nparams : 1), ng = (size_t)(ngroups ? ngroups : 1);
    if (!(g->group_of = malloc(np * sizeof *g->group_of)) || !(g->size = calloc(ng, sizeof *g->size)) ||
        !(g->pending = calloc(ng, sizeof *g->pending)) || !(g->seen = calloc(np, sizeof *g->seen))) {
        dt__ready_groups_free(g);
        return dt__fail(DT_ERR_NOMEM, "out of memory for the gradient-ready groups of %d parameters", nparams);
    }
    for (int k = 0; k < nparams; k++) {
        int u = group_of[k];
        if (u < -1 || u >= ngroups) {
            dt__ready_groups_free(g);
            return dt__fail(DT_ERR_INVALID, "gradient-ready groups: parameter %d in group %d of %d", k, u, ngroups);
        }
        g->group_of[k] = u;
        if (u >= 0)
            g->size[u]++;
    }
    dt__ready_groups_reset(g);
    return DT_OK;
}

void dt__ready_groups_reset(dt__ready_groups *g)
{
    if (g->ngroups)
        memcpy(g->pending, g->size, (size_t)g->ngroups * sizeof *g->pending);
    if (g->nparams)
        memset(g->seen, 0, (size_t)g->nparams * sizeof *g->seen);
}

int dt__ready_groups_mark(dt__ready_groups *g, int param)
{
    if (param < 0 || param >= g->nparams || g->seen[param] || g->group_of[param] < 0)
        return -1;
    g->seen[param] = true;
    int u = g->group_of[param];
    return --g->pending[u] == 0 ? u : -1;
}

void dt__ready_groups_free(dt__ready_groups *g)
{
    free(g->group_of);
    free(g->size);
    free(g->pending);
    free(g->seen);
    *g = (dt__ready_groups){0};
}
