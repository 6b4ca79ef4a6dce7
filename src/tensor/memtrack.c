/* The allocators' high-water marks (memtrack.h): a pointer -> bytes table
 * with linear probing and backward-shift deletion, under one mutex (the
 * devices allocate at set-up and per run, not per kernel). */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "tensor/memtrack.h"

struct memtrack_slot {
    uintptr_t p; /* 0: empty */
    size_t bytes;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static size_t home(uintptr_t p, size_t cap) { return (size_t)((p >> 8) * 0x9E3779B97F4A7C15ULL) & (cap - 1); }

static void put(struct memtrack_slot *s, size_t cap, uintptr_t p, size_t bytes)
{
    size_t i = home(p, cap);
    while (s[i].p)
        i = (i + 1) & (cap - 1);
    s[i] = (struct memtrack_slot){p, bytes};
}

/* Room for one more entry at a load of at most a half. */
static void grow(dt__memtrack *t)
{
    if ((t->used + 1) * 2 <= t->cap)
        return;
    size_t cap = t->cap ? t->cap * 2 : 64;
    struct memtrack_slot *s = calloc(cap, sizeof *s);
    if (!s)
        return;
    for (size_t i = 0; i < t->cap; i++)
        if (t->slots[i].p)
            put(s, cap, t->slots[i].p, t->slots[i].bytes);
    free(t->slots);
    t->slots = s;
    t->cap = cap;
}

void dt__memtrack_add(dt__memtrack *t, const void *p, size_t bytes)
{
    if (!p)
        return;
    pthread_mutex_lock(&lock);
    grow(t);
    if ((t->used + 1) * 2 <= t->cap) {
        put(t->slots, t->cap, (uintptr_t)p, bytes);
        t->used++;
    }
    t->bytes += bytes;
    if (t->bytes > t->peak)
        t->peak = t->bytes;
    pthread_mutex_unlock(&lock);
}

void dt__memtrack_remove(dt__memtrack *t, const void *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&lock);
    size_t cap = t->cap, i = cap ? home((uintptr_t)p, cap) : 0;
    while (cap && t->slots[i].p && t->slots[i].p != (uintptr_t)p)
        i = (i + 1) & (cap - 1);
    if (cap && t->slots[i].p) {
        t->bytes -= t->slots[i].bytes;
        t->used--;
        /* backward shift: move later entries of the run into the hole where their home allows */
        size_t hole = i, j = i;
        for (;;) {
            j = (j + 1) & (cap - 1);
            if (!t->slots[j].p)
                break;
            size_t h = home(t->slots[j].p, cap);
            bool movable = hole <= j ? (h <= hole || h > j) : (h <= hole && h > j);
            if (movable) {
                t->slots[hole] = t->slots[j];
                hole = j;
            }
        }
        t->slots[hole].p = 0;
    }
    pthread_mutex_unlock(&lock);
}

size_t dt__memtrack_peak(dt__memtrack *t)
{
    pthread_mutex_lock(&lock);
    size_t v = t->peak;
    pthread_mutex_unlock(&lock);
    return v;
}
