/* Device memory resolvers: how a layer that must not know tensors (src/comm)
 * learns whether a pointer is device memory, and how to move its bytes.
 *
 * src/tensor registers one resolver per device kind when that device is
 * first opened (dt_device_open: "emu", "cuda"); src/comm asks here for the
 * resolver owning each buffer it is handed.  A process that never opened a
 * device pays one relaxed atomic load per call (dt__devmem_active).
 *
 * Contract of a resolver's entries:
 *  - owns(p): p lies in this device's memory (the host cannot dereference
 *    it).  Cheap and thread-safe: the emu device tests an address bit, cuda
 *    asks cudaPointerGetAttributes.
 *  - to_host / to_device: copy bytes between a host buffer and device memory;
 *    they return when the copy is done, ordered after the work queued on the
 *    device (its compute stream), and may run on any thread.
 *  - host_alloc / host_free (optional, NULL: malloc/free): host memory for
 *    staging, page-locked where the device copies faster from it (cuda:
 *    cudaHostAlloc).
 *  - to_host_async / to_device_async / wait (optional, all three or none;
 *    NULL: the synchronous copies, through dt__devmem_copy_begin and
 *    dt__devmem_copy_wait below): start a copy and return a ticket for it;
 *    wait(ticket) returns when that copy is done and releases the ticket.
 *    The copy may happen at any time between the start and the wait (the
 *    emu device makes it at the wait, so that a caller who reads the host
 *    bytes of a download, or lets an upload's source change, before waiting
 *    gets wrong bits in the tests); neither buffer may be touched meanwhile.
 *    A copy to the host is ordered after the work queued on the device
 *    before it started; every started ticket must be waited exactly once,
 *    also on a failure path (cuda: copies on a copy stream of the resolver,
 *    after an event on the compute stream; the ticket is an event). */
#ifndef DT_BASE_DEVMEM_H
#define DT_BASE_DEVMEM_H

#include <stdbool.h>
#include <stddef.h>

#include "dtrain/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt__devmem {
    const char *name; /* "emu", "cuda": names the buffer's kind in messages */
    bool (*owns)(const void *p);
    dt_status (*to_host)(void *host_dst, const void *dev_src, size_t bytes);
    dt_status (*to_device)(void *dev_dst, const void *host_src, size_t bytes);
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    dt_status (*to_host_async)(void *host_dst, const void *dev_src, size_t bytes, void **ticket);
    dt_status (*to_device_async)(void *dev_dst, const void *host_src, size_t bytes, void **ticket);
    dt_status (*wait)(void *ticket);
} dt__devmem;

/* Register r (static storage; registering the same one again is a no-op).
 * At most 4 kinds; DT_ERR_INVALID beyond. */
dt_status dt__devmem_register(const dt__devmem *r);
/* Whether any resolver is registered (a relaxed load: the fast path). */
bool dt__devmem_active(void);
/* The resolver owning p, or NULL: host memory (or NULL p). */
const dt__devmem *dt__devmem_of(const void *p);
/* Staging memory from r's allocator (malloc when it has none). */
void *dt__devmem_host_alloc(const dt__devmem *r, size_t bytes);
void dt__devmem_host_free(const dt__devmem *r, void *p);
/* Start a copy of `bytes` through r (to_host: device src to host dst, else
 * host src to device dst): *ticket is what dt__devmem_copy_wait takes, NULL
 * when the copy was made at once (a resolver without asynchronous copies,
 * or 0 bytes).  On failure nothing is pending and *ticket is NULL. */
dt_status dt__devmem_copy_begin(const dt__devmem *r, bool to_host, void *dst, const void *src, size_t bytes,
                                void **ticket);
/* Wait for a ticket of dt__devmem_copy_begin and release it (NULL: DT_OK). */
dt_status dt__devmem_copy_wait(const dt__devmem *r, void *ticket);

#ifdef __cplusplus
}
#endif
#endif
