/* Per-communicator options, set beside the environment: the deadline of
 * its blocking calls and the algorithm of its collectives.  A communicator
 * starts from DT_TIMEOUT and DT_ALGO; a split one from its parent's. */
#include <math.h>
#include <string.h>

#include "base/status.h"
#include "comm/coll.h"

static const char *const algo_names[] = {"auto", "ring", "rd", "rhd", "direct", "shm"};

bool dt__algo_parse(const char *name, dt__algo *out)
{
    for (size_t i = 0; i < sizeof algo_names / sizeof algo_names[0]; i++)
        if (!strcmp(name, algo_names[i])) {
            *out = (dt__algo)i;
            return true;
        }
    return false;
}

const char *dt__algo_name(dt__algo a)
{
    return (size_t)a < sizeof algo_names / sizeof algo_names[0] ? algo_names[a] : "?";
}

dt_status dt_comm_set_timeout(dt_comm *c, double seconds)
{
    if (!c)
        return dt__fail(DT_ERR_INVALID, "dt_comm_set_timeout: communicator is NULL");
    if (!isfinite(seconds) || seconds <= 0 || seconds > 1e7)
        return dt__fail(DT_ERR_INVALID, "dt_comm_set_timeout: %g seconds: expected more than 0 and at most 1e7",
                        seconds);
    dt__progress_drain(c); /* collectives already started keep the deadline they started with */
    c->timeout_s = seconds;
    return DT_OK;
}

double dt_comm_timeout(const dt_comm *c) { return c ? c->timeout_s : 0; }

dt_status dt_comm_set_algorithm(dt_comm *c, const char *name)
{
    dt__algo a;
    if (!name || !dt__algo_parse(name, &a))
        return dt__fail(DT_ERR_INVALID, "dt_comm_set_algorithm: '%s': expected %s", name ? name : "(null)",
                        DT__ALGO_NAMES);
    DT_CHECK(dt__comm_check(c, "dt_comm_set_algorithm"));
    /* Collective: ranks running different algorithms would wait for
     * messages the others never send, so every rank's choice is compared. */
    int32_t mine = (int32_t)a, lo = 0, hi = 0;
    DT_CHECK(dt_allreduce(&mine, &lo, 1, DT_I32, DT_MIN, c));
    DT_CHECK(dt_allreduce(&mine, &hi, 1, DT_I32, DT_MAX, c));
    if (lo != hi)
        return dt__fail(DT_ERR_INVALID,
                        "dt_comm_set_algorithm: the ranks of the communicator chose different algorithms (this rank "
                        "'%s'; others include '%s'): every rank must choose the same; the old one stays",
                        name, dt__algo_name((dt__algo)(lo == mine ? hi : lo)));
    c->algo = a;
    return DT_OK;
}

const char *dt_comm_algorithm(const dt_comm *c) { return c ? dt__algo_name(c->algo) : NULL; }
