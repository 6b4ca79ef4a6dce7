#include "transport/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/status.h"

#define SEG_MAGIC 0x4d48535f4e525444ull /* "DTRN_SHM" */
#define SEG_VERSION 1u
#define PAGE 4096u

/* One side's set-up record in the segment header. */
typedef struct {
    _Atomic int32_t pid;
    _Atomic uint64_t probe_addr; /* where this side's mapping holds SEG_MAGIC */
} side_rec;

typedef struct {
    uint64_t magic;
    uint32_t version, pad;
    uint64_t ring_bytes;
    side_rec side[2];
} seg_header;

/* Ring control block; producer and consumer counters on their own lines. */
typedef struct {
    _Alignas(64) _Atomic uint64_t head; /* bytes ever written (producer) */
    _Alignas(64) _Atomic uint64_t tail; /* bytes ever read (consumer) */
    _Alignas(64) _Atomic uint32_t rx_sleep; /* consumer waits for data */
    _Atomic uint32_t tx_sleep;              /* producer waits for space */
} ring_ctl;

struct dt__shm_ring {
    ring_ctl *ctl;
    uint8_t *data;
    size_t cap, mask;
};

struct dt__shm_pair {
    void *base;
    size_t bytes;
    seg_header *hdr;
    dt__shm_ring ring[2]; /* ring[0]: side 0 -> side 1 */
};

static size_t seg_bytes(size_t ring_bytes) { return 3 * (size_t)PAGE + 2 * ring_bytes; }

static void map_rings(dt__shm_pair *p, size_t ring_bytes)
{
    uint8_t *b = p->base;
    p->hdr = p->base;
    for (int i = 0; i < 2; i++) {
        p->ring[i].ctl = (ring_ctl *)(b + PAGE * (size_t)(1 + i));
        p->ring[i].data = b + 3 * (size_t)PAGE + (size_t)i * ring_bytes;
        p->ring[i].cap = ring_bytes;
        p->ring[i].mask = ring_bytes - 1;
    }
}

/* Touch every page of the segment with a write now.  Neither MAP_POPULATE
 * (which maps a shared file's pages read-only) nor MADV_POPULATE_WRITE spared
 * the first real write to each page its fault on this VM, where a fault
 * costs tens of microseconds: the first pass of messages through a 1 MiB
 * ring ran 10x slower (an 8 KiB allreduce of 2 ranks took 30 us instead of
 * 3 for its first 130 iterations).  An atomic add of zero changes nothing,
 * even where the other side already writes. */
static void prefault_writable(void *base, size_t bytes)
{
    for (size_t off = 0; off < bytes; off += PAGE)
        atomic_fetch_add_explicit((_Atomic uint8_t *)((uint8_t *)base + off), 0, memory_order_relaxed);
}

static dt_status map_fd(int fd, size_t bytes, const char *name, void **base)
{
    void *b = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (b == MAP_FAILED)
        return dt__fail(DT_ERR_SYSTEM, "mapping shared segment %s (%zu bytes): %s", name, bytes, strerror(errno));
    prefault_writable(b, bytes);
    *base = b;
    return DT_OK;
}

dt_status dt__shm_segment_create(const char *name, size_t bytes, void **base)
{
    *base = NULL;
    shm_unlink(name); /* a stale segment of a crashed job with the same name */
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return dt__fail(DT_ERR_SYSTEM, "creating shared segment %s: %s", name, strerror(errno));
    /* Reserve every page now: on a full /dev/shm a lazily backed page would
     * be a SIGBUS in the middle of a collective instead of an error here. */
    int err = ftruncate(fd, (off_t)bytes) != 0 ? errno : posix_fallocate(fd, 0, (off_t)bytes);
    dt_status s = DT_OK;
    if (err)
        s = dt__fail(DT_ERR_SYSTEM, "reserving %zu bytes for shared segment %s: %s (is /dev/shm too small?)", bytes,
                     name, strerror(err));
    else
        s = map_fd(fd, bytes, name, base);
    close(fd);
    if (s != DT_OK)
        shm_unlink(name);
    return s;
}

dt_status dt__shm_segment_attach(const char *name, size_t min_bytes, void **base, size_t *bytes)
{
    *base = NULL;
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return dt__fail(DT_ERR_SYSTEM, "opening shared segment %s: %s", name, strerror(errno));
    struct stat st;
    dt_status s = DT_OK;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < min_bytes)
        s = dt__fail(DT_ERR_PROTOCOL, "shared segment %s is too small (%lld bytes)", name, (long long)st.st_size);
    else
        s = map_fd(fd, (size_t)st.st_size, name, base);
    close(fd);
    *bytes = s == DT_OK ? (size_t)st.st_size : 0;
    return s;
}

static dt_status new_pair(void *base, size_t bytes, dt__shm_pair **out)
{
    dt__shm_pair *p = calloc(1, sizeof *p);
    if (!p) {
        munmap(base, bytes);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    p->base = base;
    p->bytes = bytes;
    *out = p;
    return DT_OK;
}

dt_status dt__shm_create(const char *name, size_t ring_bytes, dt__shm_pair **out)
{
    *out = NULL;
    if (ring_bytes < PAGE || (ring_bytes & (ring_bytes - 1)))
        return dt__fail(DT_ERR_INVALID, "shared-memory ring of %zu bytes: need a power of two of at least %u",
                        ring_bytes, PAGE);
    size_t bytes = seg_bytes(ring_bytes);
    void *base;
    DT_CHECK(dt__shm_segment_create(name, bytes, &base));
    DT_CHECK(new_pair(base, bytes, out));
    dt__shm_pair *p = *out;
    map_rings(p, ring_bytes);
    p->hdr->version = SEG_VERSION;
    p->hdr->ring_bytes = ring_bytes;
    __atomic_store_n(&p->hdr->magic, SEG_MAGIC, __ATOMIC_RELEASE);
    return DT_OK;
}

dt_status dt__shm_attach(const char *name, dt__shm_pair **out)
{
    *out = NULL;
    void *base;
    size_t bytes;
    DT_CHECK(dt__shm_segment_attach(name, seg_bytes(PAGE), &base, &bytes));
    DT_CHECK(new_pair(base, bytes, out));
    dt__shm_pair *p = *out;
    seg_header *h = p->base;
    uint64_t rb = h->ring_bytes;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != SEG_MAGIC || h->version != SEG_VERSION || rb < PAGE ||
        (rb & (rb - 1)) || seg_bytes(rb) != p->bytes) {
        dt__shm_close(p);
        *out = NULL;
        return dt__fail(DT_ERR_PROTOCOL, "shared segment %s has a wrong header (another program's, or another version)",
                        name);
    }
    map_rings(p, rb);
    return DT_OK;
}

void dt__shm_unlink(const char *name) { shm_unlink(name); }

void dt__shm_close(dt__shm_pair *p)
{
    if (!p)
        return;
    munmap(p->base, p->bytes);
    free(p);
}

void dt__shm_announce(dt__shm_pair *p, int side)
{
    side_rec *me = &p->hdr->side[side];
    atomic_store(&me->pid, (int32_t)getpid());
    atomic_store(&me->probe_addr, (uint64_t)(uintptr_t)&p->hdr->magic);
}

pid_t dt__shm_peer_pid(const dt__shm_pair *p, int side) { return atomic_load(&p->hdr->side[1 - side].pid); }

bool dt__shm_probe_peer(const dt__shm_pair *p, int side)
{
    const side_rec *other = &p->hdr->side[1 - side];
    uint64_t word = 0;
    return dt__shm_read_remote(atomic_load(&other->pid), atomic_load(&other->probe_addr), &word, sizeof word) ==
               DT_OK &&
           word == SEG_MAGIC;
}

dt__shm_ring *dt__shm_tx(dt__shm_pair *p, int side) { return &p->ring[side]; }
dt__shm_ring *dt__shm_rx(dt__shm_pair *p, int side) { return &p->ring[1 - side]; }

size_t dt__shm_readable(const dt__shm_ring *r)
{
    return (size_t)(atomic_load_explicit(&r->ctl->head, memory_order_acquire) -
                    atomic_load_explicit(&r->ctl->tail, memory_order_relaxed));
}

size_t dt__shm_writable(const dt__shm_ring *r)
{
    return r->cap - (size_t)(atomic_load_explicit(&r->ctl->head, memory_order_relaxed) -
                             atomic_load_explicit(&r->ctl->tail, memory_order_acquire));
}

size_t dt__shm_write(dt__shm_ring *r, const struct iovec *iov, int n)
{
    uint64_t head = atomic_load_explicit(&r->ctl->head, memory_order_relaxed);
    size_t room = dt__shm_writable(r), done = 0;
    for (int i = 0; i < n && done < room; i++) {
        const uint8_t *src = iov[i].iov_base;
        size_t len = iov[i].iov_len < room - done ? iov[i].iov_len : room - done;
        while (len > 0) {
            size_t at = (size_t)(head + done) & r->mask;
            size_t chunk = r->cap - at < len ? r->cap - at : len;
            memcpy(r->data + at, src, chunk);
            src += chunk;
            len -= chunk;
            done += chunk;
        }
    }
    if (done)
        atomic_store_explicit(&r->ctl->head, head + done, memory_order_seq_cst);
    return done;
}

size_t dt__shm_read(dt__shm_ring *r, void *dst, size_t len)
{
    uint64_t tail = atomic_load_explicit(&r->ctl->tail, memory_order_relaxed);
    size_t avail = dt__shm_readable(r);
    size_t take = len < avail ? len : avail, done = 0;
    uint8_t *d = dst;
    while (d && done < take) {
        size_t at = (size_t)(tail + done) & r->mask;
        size_t chunk = r->cap - at < take - done ? r->cap - at : take - done;
        memcpy(d + done, r->data + at, chunk);
        done += chunk;
    }
    if (take)
        atomic_store_explicit(&r->ctl->tail, tail + take, memory_order_seq_cst);
    return take;
}

/* The sleep announcements and the re-checks after them are sequentially
 * consistent, pairing with the counter stores in write/read (see shm.h). */
bool dt__shm_sleep_rx(dt__shm_ring *r)
{
    atomic_store(&r->ctl->rx_sleep, 1);
    if (atomic_load(&r->ctl->head) == atomic_load(&r->ctl->tail))
        return true;
    atomic_store(&r->ctl->rx_sleep, 0);
    return false;
}

bool dt__shm_sleep_tx(dt__shm_ring *r, size_t need)
{
    atomic_store(&r->ctl->tx_sleep, 1);
    if (r->cap - (size_t)(atomic_load(&r->ctl->head) - atomic_load(&r->ctl->tail)) < need)
        return true;
    atomic_store(&r->ctl->tx_sleep, 0);
    return false;
}

void dt__shm_awake_rx(dt__shm_ring *r)
{
    if (atomic_load_explicit(&r->ctl->rx_sleep, memory_order_relaxed))
        atomic_store(&r->ctl->rx_sleep, 0);
}

void dt__shm_awake_tx(dt__shm_ring *r)
{
    if (atomic_load_explicit(&r->ctl->tx_sleep, memory_order_relaxed))
        atomic_store(&r->ctl->tx_sleep, 0);
}

bool dt__shm_wake_consumer(dt__shm_ring *r)
{
    return atomic_load(&r->ctl->rx_sleep) && atomic_exchange(&r->ctl->rx_sleep, 0);
}

bool dt__shm_wake_producer(dt__shm_ring *r)
{
    return atomic_load(&r->ctl->tx_sleep) && atomic_exchange(&r->ctl->tx_sleep, 0);
}

dt_status dt__shm_read_remote(pid_t pid, uint64_t addr, void *dst, size_t len)
{
    size_t done = 0;
    while (done < len) {
        struct iovec local = {(uint8_t *)dst + done, len - done};
        struct iovec remote = {(void *)(uintptr_t)(addr + done), len - done};
        ssize_t n = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return dt__fail(DT_ERR_SYSTEM, "reading %zu bytes from process %d: %s", len, (int)pid,
                            n < 0 ? strerror(errno) : "nothing read");
        done += (size_t)n;
    }
    return DT_OK;
}
