/* The registry of device memory resolvers (devmem.h): a fixed array filled
 * once per device kind, read without a lock. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/devmem.h"
#include "base/status.h"

#define MAX_KINDS 4

static const dt__devmem *_Atomic kinds[MAX_KINDS];
static atomic_int nkinds;
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;

dt_status dt__devmem_register(const dt__devmem *r)
{
    if (!r || !r->owns || !r->to_host || !r->to_device)
        return dt__fail(DT_ERR_INVALID, "devmem_register: incomplete resolver");
    if (!r->to_host_async != !r->wait || !r->to_device_async != !r->wait)
        return dt__fail(DT_ERR_INVALID, "devmem_register: %s has some of the asynchronous copies, not all three",
                        r->name);
    dt_status s = DT_OK;
    pthread_mutex_lock(&reg_mu);
    int n = atomic_load(&nkinds);
    bool known = false;
    for (int i = 0; i < n; i++)
        known |= atomic_load(&kinds[i]) == r;
    if (!known && n == MAX_KINDS)
        s = dt__fail(DT_ERR_INVALID, "devmem_register: %s would be device kind %d, at most %d", r->name, n + 1,
                     MAX_KINDS);
    else if (!known) {
        atomic_store(&kinds[n], r);
        atomic_store(&nkinds, n + 1); /* after the slot: a reader that sees n+1 sees it */
    }
    pthread_mutex_unlock(&reg_mu);
    return s;
}

bool dt__devmem_active(void) { return atomic_load_explicit(&nkinds, memory_order_relaxed) != 0; }

const dt__devmem *dt__devmem_of(const void *p)
{
    if (!p)
        return NULL;
    int n = atomic_load(&nkinds);
    for (int i = 0; i < n; i++) {
        const dt__devmem *r = atomic_load(&kinds[i]);
        if (r->owns(p))
            return r;
    }
    return NULL;
}

void *dt__devmem_host_alloc(const dt__devmem *r, size_t bytes)
{
    if (r && r->host_alloc)
        return r->host_alloc(bytes ? bytes : 1);
    return malloc(bytes ? bytes : 1);
}

void dt__devmem_host_free(const dt__devmem *r, void *p)
{
    if (!p)
        return;
    if (r && r->host_alloc)
        r->host_free(p);
    else
        free(p);
}

dt_status dt__devmem_copy_begin(const dt__devmem *r, bool to_host, void *dst, const void *src, size_t bytes,
                                void **ticket)
{
    *ticket = NULL;
    if (bytes == 0)
        return DT_OK;
    if (!r->wait)
        return to_host ? r->to_host(dst, src, bytes) : r->to_device(dst, src, bytes);
    dt_status s = to_host ? r->to_host_async(dst, src, bytes, ticket) : r->to_device_async(dst, src, bytes, ticket);
    if (s != DT_OK)
        *ticket = NULL;
    return s;
}

dt_status dt__devmem_copy_wait(const dt__devmem *r, void *ticket)
{
    return ticket ? r->wait(ticket) : DT_OK;
}
