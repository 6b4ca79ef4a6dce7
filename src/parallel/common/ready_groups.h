/* Groups of parameters whose gradients become final together, told from
 * the registry's gradient-ready events (nn.h): ZeRO's units and the
 * parameter server's blocks each act once all their parameters are ready
 * in a backward pass.  A parameter heard twice in a pass counts once; one
 * in no group (-1) is ignored. */
#ifndef DT_PARALLEL_COMMON_READY_GROUPS_H
#define DT_PARALLEL_COMMON_READY_GROUPS_H

#include <stdbool.h>

#include "dtrain/base.h"

typedef struct {
    int nparams, ngroups;
    int *group_of; /* per parameter: its group, or -1 */
    int *size;     /* per group: its parameters */
    int *pending;  /* per group: not yet ready this pass */
    bool *seen;    /* per parameter: ready this pass */
} dt__ready_groups;

/* group_of[0..nparams) in [-1, ngroups); copied. */
dt_status dt__ready_groups_init(dt__ready_groups *g, int nparams, int ngroups, const int *group_of);
/* A backward pass begins: nothing is ready. */
void dt__ready_groups_reset(dt__ready_groups *g);
/* Parameter `param` is ready: the group it completes, or -1. */
int dt__ready_groups_mark(dt__ready_groups *g, int param);
void dt__ready_groups_free(dt__ready_groups *g);

#endif
