/* A communicator's companion for device buffers (dt_comm_attach_device):
 * the host traffic of a job (its control messages, the loss for the log,
 * agreement checks) stays on the communicator the job joined with, and the
 * device buffers of the same calls go to a communicator of another backend
 * over the same members, NCCL when every rank has a GPU of its own.  The
 * public layer routes each call by its buffers (api.c, nonblocking.c);
 * splits, aborts and destruction follow the pair (split.c, comm.c). */
#include <string.h>

#include "base/devmem.h"
#include "base/status.h"
#include "comm/backend.h"
#include "comm/coll.h"
#include "comm/comm_internal.h"

/* The companion's id: a child id no split of c takes (split numbers count
 * up from 0; this one is the top of the range, below the twins'). */
static uint32_t companion_id(const dt_comm *c) { return dt__comm_child_id(c->id, UINT64_MAX - 1, 0); }

dt_comm *dt__comm_device_route(const dt_comm *c, const void *a, const void *b)
{
    if (!c || !c->device_comm || !dt__devmem_active())
        return NULL;
    return dt__devmem_of(a) || dt__devmem_of(b) ? c->device_comm : NULL;
}

dt_status dt_comm_attach_device(dt_comm *c, const char *backend)
{
    if (!c)
        return dt__fail(DT_ERR_INVALID, "dt_comm_attach_device: communicator is NULL");
    if (!backend || (strcmp(backend, "native") && strcmp(backend, "nccl")))
        return dt__fail(DT_ERR_INVALID, "dt_comm_attach_device: backend '%s': expected nccl or native",
                        backend ? backend : "(null)");
    if (c->device_comm)
        return dt__fail(DT_ERR_INVALID, "dt_comm_attach_device: this communicator carries its device buffers on "
                                        "%s already", c->device_comm->backend->name);
    if (c->backend != &dt__native_backend)
        return dt__fail(DT_ERR_INVALID, "dt_comm_attach_device: only a communicator of the native backend takes a "
                                        "companion (this one is %s)", c->backend->name);
    DT_CHECK(dt__comm_check(c, "attach_device"));
    if (!strcmp(backend, "native")) {
        /* A second native communicator: a split keeping every member, in
         * order (no companion of its own: c has none yet). */
        dt_comm *d = NULL;
        DT_CHECK(dt_comm_split(c, 0, c->rank, &d));
        c->device_comm = d;
        return DT_OK;
    }
#ifdef DT_NCCL_IN_MODULE
    return dt__nccl_comm_over(c, companion_id(c), &c->device_comm);
#else
    (void)companion_id;
    return dt__fail(DT_ERR_INVALID, "dt_comm_attach_device: this build has no NCCL backend (configure with the CUDA "
                                    "toolkit and NCCL found: docs/gpu.md)");
#endif
}

const char *dt_comm_device_backend(const dt_comm *c)
{
    if (!c)
        return NULL;
    return c->device_comm ? c->device_comm->backend->name : c->backend->name;
}

dt_status dt__device_comm_split(dt_comm *parent, int color, int key, dt_comm *child)
{
    if (!parent->device_comm)
        return DT_OK;
    dt_comm *d = NULL;
    dt_status s = dt_comm_split(parent->device_comm, color, key, &d);
    if (s != DT_OK)
        return dt__wrap(s, "the communicator for device buffers (%s): ", parent->device_comm->backend->name);
    if (child)
        child->device_comm = d;
    else if (d) /* cannot happen: the same colour on both */
        dt_comm_destroy(d);
    return DT_OK;
}
