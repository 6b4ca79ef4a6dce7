/* Device buffers between the processes of one host (docs/gpu.md, "Device
 * buffers in communication"): the native backend's allreduce,
 * reduce_scatter, allgather and broadcast read the peers' device buffers
 * directly (CUDA IPC on cuda, memfd mappings on emu: base/devmem_ipc.h)
 * instead of staging them through host memory.
 *
 * The api.c entries of those four come here when a device is registered.
 * A call takes the IPC path when, on this rank: the backend is native, the
 * communicator has 2 or more ranks and would run the call on its shared
 * arena (every rank on one host, DT_ALGO auto or shm, DT_SHM_COLL=auto: the
 * algorithm whose bits this path reproduces), every buffer of the call is
 * device memory of a device with IPC entries, and DT_DEVICE_IPC allows it.
 * Otherwise (and when some rank cannot export or open a buffer, which the
 * ranks learn together) the call is staged (stage.h), with the same bits.
 *
 * The protocol, one collective sequence number, three rounds of small
 * messages over the host transport (its deadlines, dead-peer detection and
 * signature checks, so a mismatched call fails as on the host path):
 *  1. each rank waits for its compute stream (its input is complete), then
 *     sends every peer a record: its input's handle and offset, or "stage";
 *  2. each rank opens the peers' handles (cached: ipc_cache.c) and tells
 *     every peer whether it could; any "no" makes every rank stage;
 *  3. each rank reads the peers' buffers on its communicator's stream (the
 *     reduce in rank order, slot 0 first, as the shared arena), writing its
 *     own output, or a temporary when the output is also an input others
 *     still read (in place), waits, and sends every peer "done": the closing
 *     barrier, after which nobody reads anybody's buffer and a temporary is
 *     copied to the output. */
#ifndef DT_COMM_IPC_H
#define DT_COMM_IPC_H

#include <stdbool.h>
#include <stdint.h>

#include "base/devmem_ipc.h"
#include "comm/comm_internal.h"

/* The public calls' contracts (dtrain/comm.h), by IPC or staged. */
dt_status dt__ipc_allreduce(const void *send, void *recv, size_t count, dt_dtype t, dt_redop op, dt_comm *c);
dt_status dt__ipc_reduce_scatter(const void *send, void *recv, size_t recvcount, dt_dtype t, dt_redop op,
                                 dt_comm *c);
dt_status dt__ipc_allgather(const void *send, void *recv, size_t sendcount, dt_dtype t, dt_comm *c);
dt_status dt__ipc_broadcast(void *buf, size_t count, dt_dtype t, int root, dt_comm *c);

/* c's stream and temporary, and the cached mappings it used last; the
 * process's last communicator (world) closes every mapping. */
void dt__ipc_comm_free(dt_comm *c, bool world);

/* Collectives this process ran by IPC, and peer allocations it opened
 * (tests: the path was taken, and a cached handle was not reopened). */
uint64_t dt__ipc_calls(void);
uint64_t dt__ipc_opens(void);

/* The open cache (ipc_cache.c).  get: the mapping of h here, opened on a
 * miss, held (pinned) until put(slot); release: close the unheld mappings
 * that comm_id used last (all: every unheld one). */
dt_status dt__ipc_cache_get(const dt__devmem_ipc *ipc, const dt__ipc_handle *h, uint32_t comm_id, void **base,
                            int *slot);
void dt__ipc_cache_put(int slot);
void dt__ipc_cache_release(uint32_t comm_id, bool all);

#endif
