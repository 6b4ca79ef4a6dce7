/* Device memory between processes of one host (docs/gpu.md, "Device buffers
 * in communication"): the optional entries of a device memory resolver
 * (devmem.h) through which src/comm/ipc.c lets the ranks of a one-host
 * communicator read each other's device buffers directly (cuda: CUDA IPC;
 * emu: memfd mappings), instead of staging them through host memory.
 *
 * A resolver without this table (or a process where DT_DEVICE_IPC turns it
 * off) stages, as before.  The table is registered beside the resolver
 * (dt__devmem_ipc_register) rather than inside it, so that devmem.h's
 * struct stays as it is.
 *
 * Contract of the entries (every one required; all may run on any thread,
 * each communicator's calls on one thread at a time):
 *  - export_ptr(p, bytes, h, off): a handle of the allocation holding
 *    [p, p+bytes) and p's offset in it.  The same allocation gives the same
 *    handle bytes every time, and no later allocation gives the same place
 *    and gen again (the open cache is keyed by them).  DT_ERR_INVALID when p's memory cannot be
 *    exported (then every rank stages that call).
 *  - open(h, base): map a peer's allocation into this process; *base is
 *    its first byte here (device memory of the same kind).  close(h, base)
 *    unmaps it.  Opened once per handle and process (CUDA refuses a second
 *    open of one handle), and closed only when no call uses it.
 *  - ready(): the work queued on this process's compute stream so far is
 *    done, so that peers may read what it produced.
 *  - stream_create / stream_destroy: a stream of the communicator for the
 *    entries below (any opaque token; NULL is a valid stream).
 *  - copy(stream, dst, src, bytes): queue a device-to-device copy.
 *  - reduce(stream, dst, srcs, n, acc, count, t, op, finish): queue
 *    dst[i] = fold of srcs[0..n) in order with dt__reduce's combine
 *    (base/redop.h, the lower rank the left operand), where acc true makes
 *    dst itself the first operand (a fold longer than one launch takes);
 *    finish (0 or the number of ranks, at least 2) then applies
 *    dt__reduce_finish(dst, count, t, op, finish): DT_AVG's division.
 *    The bits are dt__reduce's: f16/bf16 round after each combine, NaNs
 *    canonical, DT_AVG divides once.
 *  - wait(stream): the stream's work is done; a failure of any of it is
 *    returned here (with the message set).
 *  - dev_alloc / dev_free: device memory for a temporary (in place). */
#ifndef DT_BASE_DEVMEM_IPC_H
#define DT_BASE_DEVMEM_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/devmem.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An allocation's handle: `key` what the device opens (a cudaIpcMemHandle_t
 * with the allocation's base and size; the emu device's pid, fd, offset and
 * size), `place` where the allocation sits in its exporter (cuda: pid,
 * device, base; emu: pid, fd, offset, size), `gen` which allocation holds
 * that place now (cuda: the driver's buffer id, never reused in a process).
 * The open cache keys by place: a handle whose place is cached under
 * another gen is a freed allocation's successor, so the cache closes the
 * old mapping before opening the new one (CUDA refuses to map one
 * allocation twice). */
#define DT__IPC_KEY_BYTES 96
typedef struct {
    uint8_t key[DT__IPC_KEY_BYTES];
    uint64_t place[4];
    uint64_t gen;
} dt__ipc_handle;

/* Most sources of one reduce launch. */
#define DT__IPC_MAX_SRCS 8

typedef struct dt__devmem_ipc {
    dt_status (*export_ptr)(const void *p, size_t bytes, dt__ipc_handle *h, uint64_t *off);
    dt_status (*open)(const dt__ipc_handle *h, void **base);
    void (*close)(const dt__ipc_handle *h, void *base);
    dt_status (*ready)(void);
    dt_status (*stream_create)(void **stream);
    void (*stream_destroy)(void *stream);
    dt_status (*copy)(void *stream, void *dst, const void *src, size_t bytes);
    dt_status (*reduce)(void *stream, void *dst, const void *const *srcs, int n, bool acc, size_t count, dt_dtype t,
                        dt_redop op, int finish);
    dt_status (*wait)(void *stream);
    void *(*dev_alloc)(size_t bytes);
    void (*dev_free)(void *p);
} dt__devmem_ipc;

/* Attach ipc to resolver r (both static storage; again: replaces). */
void dt__devmem_ipc_register(const dt__devmem *r, const dt__devmem_ipc *ipc);
/* r's table, or NULL: r's buffers are staged. */
const dt__devmem_ipc *dt__devmem_ipc_of(const dt__devmem *r);

/* DT_DEVICE_IPC: -1 unset or "auto" (on for cuda, off for emu, whose
 * exportable memory costs a memfd mapping per process), 0 off, 1 on for
 * every device that has the entries (emu included).  *mode -1 and
 * DT_ERR_INVALID naming the value when it is none of these. */
dt_status dt__device_ipc_mode(int *mode);

#ifdef __cplusplus
}
#endif
#endif
