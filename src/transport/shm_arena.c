#include "transport/shm_arena.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/status.h"
#include "transport/shm.h"

#define ARENA_MAGIC 0x414e52414e525444ull /* "DTRNARNA" */
/* 2: the ring of small entries after the slots; 3: a line per flag; 4: signatures; 5: each rank's call */
#define ARENA_VERSION 6u
#define PAGE 4096u

/* A flag line says whose signature it holds as a round tagged with
 * ROUND_VALID: every 32-bit value is some round (the counters wrap), so
 * neither the zeroed memory of a fresh arena nor the seqlock's writing
 * state (ROUND_WRITING) may be one.  With bare rounds, round 0 (the first
 * after the wrap, about 1024 rounds in) read an unwritten line as its own
 * with signature 0, and a reader of a small broadcast reported a mismatch
 * against "an unknown collective"; round UINT32_MAX read a line being
 * rewritten as settled. */
#define ROUND_VALID (1ull << 32)
#define ROUND_WRITING 0ull
static uint64_t tagged(uint32_t g) { return ROUND_VALID | g; }

typedef struct {
    uint64_t magic;
    uint32_t version, nranks;
    uint64_t slot_bytes;
} arena_header;

/* One flag on a line (two, for the adjacent-line prefetcher) of its own.
 * READY's line also holds the signature of the rounds (g & 1), on the same
 * 64 bytes as the flag: the reader that sees the flag has the signature
 * without another line moving between cores. */
typedef struct {
    _Alignas(128) _Atomic uint32_t v;
    _Atomic uint64_t round[2], small_round; /* whose signature sig[] and small_sig hold (tagged) */
    _Atomic uint64_t sig[2], small_sig;
} flag_line;

/* One rank's flags: only that rank writes them.  Each on its own line, so
 * that publishing one (DONE, which few wait for) does not take away the line
 * of another that peers are polling (READY); figures in shm_coll.c's claim. */
typedef struct {
    flag_line flag[DT__ARENA_NFLAGS];
    _Alignas(128) _Atomic uint32_t sleepers; /* ranks in (or about to enter) a futex wait on a flag */
    /* The collective call this rank is in (dt__arena_publish_call), behind a
     * version that is odd while it is being written (a seqlock: one writer,
     * readers only on the slow path of a wait). */
    _Alignas(128) _Atomic uint32_t call_ver;
    _Atomic uint32_t call_comm;
    _Atomic uint64_t call_seq, call_sig;
} rank_ctl;

struct dt__arena {
    void *base;
    size_t bytes, slot_bytes;
    int nranks;
    rank_ctl *ctl;
    uint8_t *slots, *small;
    /* This process's last look at every rank's flags (nranks x NFLAGS): a
     * flag only moves forward, so a round seen reached stays reached, and
     * the look needs no read of the other rank's line, which that rank keeps
     * writing (a line moving between cores each time). */
    _Atomic uint32_t *seen;
};

static size_t ctl_bytes(int nranks) { return ((size_t)nranks * sizeof(rank_ctl) + PAGE - 1) / PAGE * PAGE; }

static size_t arena_bytes(int nranks, size_t slot_bytes)
{
    return PAGE + ctl_bytes(nranks) + 2 * (size_t)nranks * slot_bytes +
           (size_t)DT__ARENA_SMALL_DEPTH * DT__ARENA_SMALL_BYTES;
}

static dt_status check_geometry(int nranks, size_t slot_bytes)
{
    if (nranks < 1 || nranks > 4096 || slot_bytes < PAGE || slot_bytes % PAGE || slot_bytes > ((size_t)1 << 30))
        return dt__fail(DT_ERR_INVALID,
                        "shared-memory collectives for %d ranks with slots of %zu bytes: need 1-4096 ranks and a "
                        "multiple of %u bytes up to 1 GiB",
                        nranks, slot_bytes, PAGE);
    return DT_OK;
}

static dt_status wrap(void *base, size_t bytes, int nranks, size_t slot_bytes, dt__arena **out)
{
    dt__arena *a = calloc(1, sizeof *a);
    _Atomic uint32_t *seen = calloc((size_t)nranks * DT__ARENA_NFLAGS, sizeof *seen);
    if (!a || !seen) {
        free(a);
        free(seen);
        munmap(base, bytes);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < (size_t)nranks * DT__ARENA_NFLAGS; i++)
        atomic_init(&seen[i], DT__ARENA_FIRST_ROUND - 1);
    a->base = base;
    a->seen = seen;
    a->bytes = bytes;
    a->nranks = nranks;
    a->slot_bytes = slot_bytes;
    a->ctl = (rank_ctl *)((uint8_t *)base + PAGE);
    a->slots = (uint8_t *)base + PAGE + ctl_bytes(nranks);
    a->small = a->slots + 2 * (size_t)nranks * slot_bytes;
    *out = a;
    return DT_OK;
}

dt_status dt__arena_create(const char *name, int nranks, size_t slot_bytes, dt__arena **out)
{
    *out = NULL;
    DT_CHECK(check_geometry(nranks, slot_bytes));
    size_t bytes = arena_bytes(nranks, slot_bytes);
    void *base;
    DT_CHECK(dt__shm_segment_create(name, bytes, &base));
    DT_CHECK(wrap(base, bytes, nranks, slot_bytes, out));
    for (int r = 0; r < nranks; r++)
        for (int f = 0; f < DT__ARENA_NFLAGS; f++)
            atomic_store(&(*out)->ctl[r].flag[f].v, DT__ARENA_FIRST_ROUND - 1);
    arena_header *h = base;
    h->version = ARENA_VERSION;
    h->nranks = (uint32_t)nranks;
    h->slot_bytes = slot_bytes;
    __atomic_store_n(&h->magic, ARENA_MAGIC, __ATOMIC_RELEASE);
    return DT_OK;
}

dt_status dt__arena_attach(const char *name, int nranks, size_t slot_bytes, dt__arena **out)
{
    *out = NULL;
    DT_CHECK(check_geometry(nranks, slot_bytes));
    void *base;
    size_t bytes;
    DT_CHECK(dt__shm_segment_attach(name, PAGE, &base, &bytes));
    const arena_header *h = base;
    if (__atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) != ARENA_MAGIC || h->version != ARENA_VERSION ||
        h->nranks != (uint32_t)nranks || h->slot_bytes != slot_bytes || bytes != arena_bytes(nranks, slot_bytes)) {
        munmap(base, bytes);
        return dt__fail(DT_ERR_PROTOCOL,
                        "shared segment %s is not an arena for %d ranks with %zu-byte slots (another program's, or "
                        "another version or setting)",
                        name, nranks, slot_bytes);
    }
    return wrap(base, bytes, nranks, slot_bytes, out);
}

void dt__arena_unlink(const char *name) { dt__shm_unlink(name); }

void dt__arena_close(dt__arena *a)
{
    if (!a)
        return;
    munmap(a->base, a->bytes);
    free(a->seen);
    free(a);
}

size_t dt__arena_slot_bytes(const dt__arena *a) { return a->slot_bytes; }

uint8_t *dt__arena_slot(const dt__arena *a, uint32_t g, int rank)
{
    return a->slots + ((size_t)(g & 1) * (size_t)a->nranks + (size_t)rank) * a->slot_bytes;
}

uint8_t *dt__arena_small_entry(const dt__arena *a, uint32_t g)
{
    return a->small + (size_t)(g % DT__ARENA_SMALL_DEPTH) * DT__ARENA_SMALL_BYTES;
}

/* Whether counter value v is round g or later, across wrap-around (shm_arena.h). */
static bool at_least(uint32_t v, uint32_t g) { return v - g < DT__ARENA_AHEAD; }

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *timeout)
{
    /* Shared between processes, so not FUTEX_PRIVATE_FLAG. */
    return syscall(SYS_futex, (uint32_t *)word, op, val, timeout, NULL, 0);
}

void dt__arena_publish(dt__arena *a, int rank, dt__arena_flag f, uint32_t g)
{
    rank_ctl *c = &a->ctl[rank];
    /* Both sequentially consistent, against the sleeper's increment and
     * re-check in dt__arena_sleep: one of the two sides sees the other. */
    atomic_store(&c->flag[f].v, g);
    if (atomic_load(&c->sleepers))
        futex(&c->flag[f].v, FUTEX_WAKE, INT_MAX, NULL);
}

void dt__arena_publish_ready(dt__arena *a, int rank, uint32_t g, uint64_t sig, bool small)
{
    /* (round, signature) as a seqlock whose odd state is ROUND_WRITING: a
     * reader of round g must not pair g with a later round's signature (a
     * root may run rounds ahead of its readers). */
    flag_line *l = &a->ctl[rank].flag[DT__ARENA_READY];
    _Atomic uint64_t *round = small ? &l->small_round : &l->round[g & 1];
    atomic_store_explicit(round, ROUND_WRITING, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(small ? &l->small_sig : &l->sig[g & 1], sig, memory_order_relaxed);
    atomic_store_explicit(round, tagged(g), memory_order_release);
    dt__arena_publish(a, rank, DT__ARENA_READY, g);
}

void dt__arena_publish_call(dt__arena *a, int rank, uint32_t comm_id, uint64_t seq, uint64_t sig)
{
    rank_ctl *c = &a->ctl[rank];
    uint32_t v = atomic_load_explicit(&c->call_ver, memory_order_relaxed);
    atomic_store_explicit(&c->call_ver, v + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release); /* odd before any field changes */
    atomic_store_explicit(&c->call_comm, comm_id, memory_order_relaxed);
    atomic_store_explicit(&c->call_seq, seq, memory_order_relaxed);
    atomic_store_explicit(&c->call_sig, sig, memory_order_relaxed);
    atomic_store_explicit(&c->call_ver, v + 2, memory_order_release);
}

bool dt__arena_call(const dt__arena *a, int rank, uint32_t comm_id, uint64_t seq, uint64_t *sig)
{
    const rank_ctl *c = &a->ctl[rank];
    uint32_t v = atomic_load_explicit(&c->call_ver, memory_order_acquire);
    if (v & 1)
        return false;
    uint32_t comm = atomic_load_explicit(&c->call_comm, memory_order_relaxed);
    uint64_t s = atomic_load_explicit(&c->call_seq, memory_order_relaxed);
    uint64_t theirs = atomic_load_explicit(&c->call_sig, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire); /* the fields before the second look */
    if (atomic_load_explicit(&c->call_ver, memory_order_relaxed) != v || comm != comm_id || s != seq)
        return false;
    *sig = theirs;
    return true;
}

/* The signature stored for round g, read consistently (the seqlock of
 * dt__arena_publish_ready): false when the line holds another round or is
 * being rewritten. */
static bool read_round_sig(const _Atomic uint64_t *round, const _Atomic uint64_t *sig, uint32_t g, uint64_t *out)
{
    if (atomic_load_explicit(round, memory_order_acquire) != tagged(g))
        return false;
    uint64_t s = atomic_load_explicit(sig, memory_order_relaxed);
    atomic_thread_fence(memory_order_acquire);
    if (atomic_load_explicit(round, memory_order_relaxed) != tagged(g))
        return false;
    *out = s;
    return true;
}

bool dt__arena_ready_sig(const dt__arena *a, int rank, uint32_t g, uint64_t *sig)
{
    const flag_line *l = &a->ctl[rank].flag[DT__ARENA_READY];
    uint64_t s;
    if (read_round_sig(&l->round[g & 1], &l->sig[g & 1], g, &s)) {
        *sig = s;
        return true;
    }
    *sig = read_round_sig(&l->small_round, &l->small_sig, g, &s) ? s : 0;
    return false;
}

bool dt__arena_reached(const dt__arena *a, int rank, dt__arena_flag f, uint32_t g)
{
    /* Acquire and release on `seen` too: another thread of this process
     * that trusts it sees what the flag's owner wrote before publishing. */
    _Atomic uint32_t *seen = &a->seen[(size_t)rank * DT__ARENA_NFLAGS + f];
    if (at_least(atomic_load_explicit(seen, memory_order_acquire), g))
        return true;
    uint32_t now = atomic_load_explicit(&a->ctl[rank].flag[f].v, memory_order_acquire);
    atomic_store_explicit(seen, now, memory_order_release);
    return at_least(now, g);
}

bool dt__arena_seen(const dt__arena *a, int rank, dt__arena_flag f, uint32_t g)
{
    return at_least(atomic_load_explicit(&a->seen[(size_t)rank * DT__ARENA_NFLAGS + f], memory_order_acquire), g);
}

void dt__arena_refresh(dt__arena *a, int me, uint32_t g)
{
    dt__arena_publish(a, me, DT__ARENA_REDUCED, g - 1);
    for (int r = 0; r < a->nranks; r++)
        for (int f = 0; f < DT__ARENA_NFLAGS; f++)
            atomic_store_explicit(&a->seen[(size_t)r * DT__ARENA_NFLAGS + f],
                                  atomic_load_explicit(&a->ctl[r].flag[f].v, memory_order_acquire),
                                  memory_order_release);
}

void dt__arena_sleep(dt__arena *a, int rank, dt__arena_flag f, uint32_t g, int64_t timeout_ns)
{
    rank_ctl *c = &a->ctl[rank];
    atomic_fetch_add(&c->sleepers, 1);
    uint32_t seen = atomic_load(&c->flag[f].v);
    if (!at_least(seen, g) && timeout_ns > 0) {
        struct timespec ts = {(time_t)(timeout_ns / 1000000000), (long)(timeout_ns % 1000000000)};
        /* Returns at once when the flag moved since `seen` (EAGAIN). */
        futex(&c->flag[f].v, FUTEX_WAIT, seen, &ts);
    }
    atomic_fetch_sub(&c->sleepers, 1);
}
