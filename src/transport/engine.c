/* The engine's queries and settings (engine.h).  The rest of the engine:
 * engine_internal.h lists its files. */

#include "transport/engine_internal.h"
#include "transport/heartbeat.h"
#include "transport/socket.h"

int dt__engine_rank(const dt__engine *e) { return e->rank; }
int dt__engine_size(const dt__engine *e) { return e->size; }
const char *dt__engine_peer_name(dt__engine *e, int p) { return e->peers[p].name; }
/* Per thread: the progress threads of nonblocking collectives never spin,
 * a caller waiting in a blocking call may (engine_poll.c). */
_Thread_local bool dt__poll_spin_off;

void dt__engine_allow_poll_spin(dt__engine *e, bool allow)
{
    (void)e;
    dt__poll_spin_off = !allow;
}

void dt__engine_shm_spin_policy(const dt__engine *e, int64_t *spin_ns, bool *yields)
{
    *spin_ns = e->shm_spin_ns;
    *yields = e->shm_spin_yields;
}

bool dt__engine_is_local(const dt__engine *e, int p)
{
    return p == e->rank || (e->peers[p].ch && e->peers[p].ch->ops->local);
}

bool dt__engine_tcp_probes_rtt(const dt__engine *e)
{
    for (int p = 0; p < e->size; p++)
        if (!dt__engine_is_local(e, p) && dt__peer_open(&e->peers[p]) && dt__sock_probes_rtt(e->peers[p].ch->fd))
            return true;
    return false;
}

void dt__engine_set_heartbeat(dt__engine *e, struct dt__heartbeat *h)
{
    e->heartbeat = h;
    e->heartbeat_period_ns = h ? (int64_t)(dt__heartbeat_period(h) * 1e9) : 0;
}

void dt__engine_set_sig_namer(dt__engine *e, dt__sig_namer namer) { e->sig_namer = namer; }

void dt__engine_set_fail_hook(dt__engine *e, void (*hook)(void *arg, dt_status code, const char *why), void *arg)
{
    e->fail_hook = hook;
    e->fail_hook_arg = arg;
}
