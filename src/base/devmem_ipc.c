/* The IPC entries beside the device memory resolvers (devmem_ipc.h). */
#include <stdatomic.h>
#include <string.h>

#include "base/devmem_ipc.h"
#include "base/env.h"
#include "base/status.h"

#define MAX_KINDS 4

static struct {
    const dt__devmem *_Atomic r;
    const dt__devmem_ipc *_Atomic ipc;
} table[MAX_KINDS];

void dt__devmem_ipc_register(const dt__devmem *r, const dt__devmem_ipc *ipc)
{
    for (int i = 0; i < MAX_KINDS; i++) {
        const dt__devmem *expect = NULL;
        if (atomic_load(&table[i].r) == r ||
            atomic_compare_exchange_strong(&table[i].r, &expect, r)) {
            atomic_store(&table[i].ipc, ipc);
            return;
        }
    }
}

const dt__devmem_ipc *dt__devmem_ipc_of(const dt__devmem *r)
{
    for (int i = 0; r && i < MAX_KINDS; i++)
        if (atomic_load(&table[i].r) == r)
            return atomic_load(&table[i].ipc);
    return NULL;
}

dt_status dt__device_ipc_mode(int *mode)
{
    *mode = -1;
    const char *v = dt__env_str("DT_DEVICE_IPC");
    if (!v || !strcmp(v, "auto"))
        return DT_OK;
    if (!strcmp(v, "0") || !strcmp(v, "1")) {
        *mode = v[0] - '0';
        return DT_OK;
    }
    return dt__fail(DT_ERR_INVALID, "DT_DEVICE_IPC='%s': expected auto, 0 or 1", v);
}
