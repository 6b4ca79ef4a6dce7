/* TEMPORARY (replaced by the layout helper's implementation at merge). */
#include <string.h>

#include "base/status.h"
#include "dtrain/layout.h"

void dt_layout_default(dt_layout *l)
{
    memset(l, 0, sizeof *l);
    l->tp = l->pp = 1;
    l->sync = DT_PS_BSP;
    l->staleness = 2;
    l->micro_batches = l->grad_accumulation = 1;
    l->schedule = DT_PIPE_1F1B;
    l->virtual_stages = 2;
    l->precision = l->grad_wire = DT_F32;
    strcpy(l->device, "cpu");
}

int dt_layout_chunks(const dt_layout *l) { return l->schedule == DT_PIPE_INTERLEAVED ? l->virtual_stages : 1; }

int dt_layout_step_micro_batches(const dt_layout *l) { return l->micro_batches * l->grad_accumulation; }

dt_status dt_layout_check(const dt_layout *l, int world, int *out_dp)
{
    int workers = world - l->servers;
    if (out_dp)
        *out_dp = workers / (l->tp * l->pp);
    return DT_OK;
}
