/* The open cache of the IPC path (ipc.h): a peer's allocation is opened
 * once per process, whichever communicator meets it first, and kept open
 * for the next call on the same buffer, since opening costs a driver call
 * and a mapping (CUDA also refuses to open one handle twice in a process).
 *
 * At most CACHE_MAX mappings: past that the least recently used one that
 * no call holds is closed.  A communicator's destroy closes the mappings it
 * used last that no call holds; the rest stay until evicted or until the
 * process's last communicator goes. */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "base/status.h"
#include "comm/ipc.h"

#define CACHE_MAX 64

typedef struct {
    bool live;
    dt__ipc_handle h;
    const dt__devmem_ipc *ipc;
    void *base;
    int pins;         /* calls holding it now */
    uint32_t comm_id; /* the communicator that used it last */
    uint64_t used;    /* tick of its last use, for LRU */
} entry;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static entry cache[CACHE_MAX];
static uint64_t tick;
static uint64_t opens; /* dt__ipc_opens */

static void drop(entry *e)
{
    e->ipc->close(&e->h, e->base);
    e->live = false;
}

dt_status dt__ipc_cache_get(const dt__devmem_ipc *ipc, const dt__ipc_handle *h, uint32_t comm_id, void **base,
                            int *slot)
{
    dt_status s = DT_OK;
    pthread_mutex_lock(&mu);
    int hit = -1, free_slot = -1, lru = -1;
    for (int i = 0; i < CACHE_MAX; i++) {
        entry *e = &cache[i];
        if (!e->live) {
            free_slot = free_slot < 0 ? i : free_slot;
            continue;
        }
        if (e->ipc == ipc && !memcmp(e->h.place, h->place, sizeof h->place)) {
            if (e->h.gen == h->gen) {
                hit = i;
                break;
            }
            /* The same place under another allocation: the old one was
             * freed by its owner, and its mapping must go before the new
             * open. */
            if (e->pins) {
                s = dt__fail(DT_ERR_INTERNAL, "ipc: a peer's device allocation was replaced while a call "
                                              "still reads it");
                break;
            }
            drop(e);
            free_slot = free_slot < 0 ? i : free_slot;
            continue;
        }
        if (!e->pins && (lru < 0 || e->used < cache[lru].used))
            lru = i;
    }
    if (s == DT_OK && hit < 0) {
        if (free_slot < 0 && lru >= 0) {
            drop(&cache[lru]);
            free_slot = lru;
        }
        if (free_slot < 0)
            s = dt__fail(DT_ERR_NOMEM, "ipc: all %d cached peer mappings are in use", CACHE_MAX);
        else {
            void *b = NULL;
            s = ipc->open(h, &b);
            if (s == DT_OK) {
                cache[free_slot] = (entry){true, *h, ipc, b, 0, comm_id, 0};
                hit = free_slot;
                opens++;
            }
        }
    }
    if (s == DT_OK) {
        cache[hit].pins++;
        cache[hit].used = ++tick;
        cache[hit].comm_id = comm_id;
        *base = cache[hit].base;
        *slot = hit;
    }
    pthread_mutex_unlock(&mu);
    return s;
}

void dt__ipc_cache_put(int slot)
{
    if (slot < 0 || slot >= CACHE_MAX)
        return;
    pthread_mutex_lock(&mu);
    if (cache[slot].pins > 0)
        cache[slot].pins--;
    pthread_mutex_unlock(&mu);
}

void dt__ipc_cache_release(uint32_t comm_id, bool all)
{
    pthread_mutex_lock(&mu);
    for (int i = 0; i < CACHE_MAX; i++)
        if (cache[i].live && !cache[i].pins && (all || cache[i].comm_id == comm_id))
            drop(&cache[i]);
    pthread_mutex_unlock(&mu);
}

uint64_t dt__ipc_opens(void)
{
    pthread_mutex_lock(&mu);
    uint64_t n = opens;
    pthread_mutex_unlock(&mu);
    return n;
}
