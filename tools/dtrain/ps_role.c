/* The trainer's parameter-server keys (servers, sync, staleness,
 * ps_clock_log; dtrun --servers) as the library's configuration, for the
 * check before joining (layout.c).  The servers' side of a run is the
 * library's (dt_strategy_serve). */
#include <stdio.h>
#include <string.h>

#include "dtrain_cli.h"

dt_status dtrain_ps_config(const dtrain_config *c, dt_ps_config *out)
{
    memset(out, 0, sizeof *out);
    out->servers = (int)c->servers;
    out->staleness = (int)c->staleness;
    out->clock_log = c->ps_clock_log[0] ? c->ps_clock_log : NULL;
    return dt_ps_sync_parse(c->sync, &out->sync);
}
