/* The emu device between processes (base/devmem_ipc.h), so that the IPC
 * path of src/comm/ipc.c runs on machines without a GPU.
 *
 * With DT_DEVICE_IPC=1 the emu device's allocations come from one shared
 * heap per process: a memfd of HEAP_BYTES (sparse: only touched pages take
 * memory), mapped once, handed out page by page from a bump pointer and
 * never reused (a freed allocation's pages are returned with a punched
 * hole), so (pid, fd, offset) names one allocation for the life of the
 * process, as the open cache needs.  A peer opens it through
 * /proc/PID/fd/FD and maps the allocation's range: the mapping is the same
 * memory, as CUDA IPC's is the same device memory.  The "kernels" are CPU
 * loops: the reduce is dt__reduce in rank order, the very combine of the
 * host collectives, so its bits are theirs.  Without DT_DEVICE_IPC=1 emu
 * memory is plain host memory and nothing here runs. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/devmem_ipc.h"
#include "base/redop.h"
#include "base/status.h"
#include "tensor/backend.h"

#define TAG (1ULL << 62)
#define PAGE ((size_t)4096)
#define HEAP_BYTES ((size_t)1 << 38) /* 256 GiB of address space; memory only as touched */
#define MAGIC 0x31756d65u            /* "emu1" */

typedef struct {
    uint32_t magic;
    int32_t pid, fd;
    uint32_t pad;
    uint64_t start, len; /* the allocation's pages in the heap */
} emu_handle;

static struct {
    pthread_mutex_t mu;
    int state; /* 0 not yet decided, 1 on, -1 off */
    int fd;
    uint8_t *base;
    size_t next;
    /* Allocations in address order (the bump pointer only grows): start,
     * length, live. */
    struct alloc {
        size_t start, len;
        bool live;
    } *allocs;
    size_t n, cap;
} heap = {.mu = PTHREAD_MUTEX_INITIALIZER};

static void *tagged(void *p) { return (void *)((uintptr_t)p | (uintptr_t)TAG); }
static void *plain(const void *p) { return (void *)((uintptr_t)p & ~(uintptr_t)TAG); }

/* Under heap.mu. */
static bool heap_ready(void)
{
    if (heap.state)
        return heap.state > 0;
    heap.state = -1;
    int mode;
    if (dt__device_ipc_mode(&mode) != DT_OK || mode != 1)
        return false;
    int fd = memfd_create("dtrain-emu", MFD_CLOEXEC);
    if (fd < 0)
        return false;
    void *b = MAP_FAILED;
    if (ftruncate(fd, (off_t)HEAP_BYTES) == 0)
        b = mmap(NULL, HEAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
    if (b == MAP_FAILED) {
        close(fd);
        return false;
    }
    heap.fd = fd;
    heap.base = b;
    heap.state = 1;
    return true;
}

void *dt__emu_heap_alloc(size_t bytes)
{
    size_t len = bytes > HEAP_BYTES ? 0 : (bytes + PAGE - 1) / PAGE * PAGE;
    len = len ? len : PAGE;
    void *p = NULL;
    pthread_mutex_lock(&heap.mu);
    if (heap_ready() && bytes <= HEAP_BYTES && heap.next + len <= HEAP_BYTES) {
        if (heap.n == heap.cap) {
            size_t cap = heap.cap ? 2 * heap.cap : 256;
            struct alloc *a = realloc(heap.allocs, cap * sizeof *a);
            if (a) {
                heap.allocs = a;
                heap.cap = cap;
            }
        }
        if (heap.n < heap.cap) {
            heap.allocs[heap.n++] = (struct alloc){heap.next, len, true};
            p = heap.base + heap.next;
            heap.next += len;
        }
    }
    pthread_mutex_unlock(&heap.mu);
    return p; /* NULL: the caller takes plain memory */
}

/* The allocation holding heap offset off, or NULL.  Under heap.mu. */
static struct alloc *find(size_t off)
{
    size_t lo = 0, hi = heap.n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (heap.allocs[mid].start + heap.allocs[mid].len <= off)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < heap.n && heap.allocs[lo].start <= off ? &heap.allocs[lo] : NULL;
}

static bool in_heap(const void *p)
{
    return heap.state > 0 && (const uint8_t *)p >= heap.base && (const uint8_t *)p < heap.base + HEAP_BYTES;
}

bool dt__emu_heap_free(void *p)
{
    pthread_mutex_lock(&heap.mu);
    bool mine = in_heap(p);
    struct alloc *a = mine ? find((size_t)((uint8_t *)p - heap.base)) : NULL;
    if (a && a->live) {
        a->live = false;
        /* The pages go back; a peer still mapping them sees zeros, and no
         * later allocation reuses the range. */
        (void)fallocate(heap.fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)a->start, (off_t)a->len);
    }
    pthread_mutex_unlock(&heap.mu);
    return mine;
}

static dt_status emu_export(const void *p, size_t bytes, dt__ipc_handle *h, uint64_t *off)
{
    const uint8_t *q = plain(p);
    dt_status s = DT_OK;
    pthread_mutex_lock(&heap.mu);
    struct alloc *a = in_heap(q) ? find((size_t)(q - heap.base)) : NULL;
    size_t at = a ? (size_t)(q - heap.base) - a->start : 0;
    if (!a || !a->live || bytes > a->len - at) {
        s = dt__fail(DT_ERR_INVALID, "emu: %p is not exportable memory (allocated before DT_DEVICE_IPC=1 took "
                                     "effect, or not by the emu device)", p);
    } else {
        emu_handle e = {MAGIC, (int32_t)getpid(), heap.fd, 0, a->start, a->len};
        memset(h, 0, sizeof *h);
        memcpy(h->key, &e, sizeof e);
        /* gen 0: a later allocation of the same pages maps the same memfd range, so a cached mapping serves it */
        h->place[0] = (uint64_t)e.pid, h->place[1] = (uint64_t)e.fd, h->place[2] = e.start, h->place[3] = e.len;
        *off = at;
    }
    pthread_mutex_unlock(&heap.mu);
    return s;
}

static dt_status emu_open(const dt__ipc_handle *h, void **base)
{
    emu_handle e;
    memcpy(&e, h->key, sizeof e);
    if (e.magic != MAGIC || e.len == 0 || e.len % PAGE || e.start % PAGE || e.len > HEAP_BYTES)
        return dt__fail(DT_ERR_PROTOCOL, "emu: a peer's memory handle is malformed");
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)e.pid, (int)e.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return dt__fail(DT_ERR_SYSTEM, "emu: cannot open the memory of process %d (%s): %s", (int)e.pid, path,
                        strerror(errno));
    void *m = mmap(NULL, e.len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)e.start);
    int err = errno;
    close(fd);
    if (m == MAP_FAILED)
        return dt__fail(DT_ERR_SYSTEM, "emu: cannot map %llu bytes of process %d's memory: %s",
                        (unsigned long long)e.len, (int)e.pid, strerror(err));
    *base = tagged(m);
    return DT_OK;
}

static void emu_close(const dt__ipc_handle *h, void *base)
{
    emu_handle e;
    memcpy(&e, h->key, sizeof e);
    munmap(plain(base), e.len);
}

static dt_status emu_ready(void) { return DT_OK; }
static dt_status emu_stream_create(void **stream)
{
    *stream = NULL;
    return DT_OK;
}
static void emu_stream_destroy(void *stream) { (void)stream; }

static dt_status emu_copy(void *stream, void *dst, const void *src, size_t bytes)
{
    (void)stream;
    memmove(plain(dst), plain(src), bytes);
    return DT_OK;
}

static dt_status emu_reduce(void *stream, void *dst, const void *const *srcs, int n, bool acc, size_t count,
                            dt_dtype t, dt_redop op, int finish)
{
    (void)stream;
    void *d = plain(dst);
    int i = 0;
    if (!acc && n > 0)
        memmove(d, plain(srcs[i++]), count * dt_dtype_size(t));
    for (; i < n; i++)
        dt__reduce(d, d, plain(srcs[i]), count, t, op);
    if (finish > 1)
        dt__reduce_finish(d, count, t, op, finish);
    return DT_OK;
}

static dt_status emu_wait(void *stream)
{
    (void)stream;
    return DT_OK;
}

static void *emu_dev_alloc(size_t bytes) { return dt__emu_ops.alloc(bytes); }
static void emu_dev_free(void *p) { dt__emu_ops.free(p); }

const dt__devmem_ipc dt__emu_ipc = {
    .export_ptr = emu_export,
    .open = emu_open,
    .close = emu_close,
    .ready = emu_ready,
    .stream_create = emu_stream_create,
    .stream_destroy = emu_stream_destroy,
    .copy = emu_copy,
    .reduce = emu_reduce,
    .wait = emu_wait,
    .dev_alloc = emu_dev_alloc,
    .dev_free = emu_dev_free,
};
