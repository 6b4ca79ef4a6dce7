/* dt_comm_split: allgather (colour, key), then every rank derives the same
 * membership, order and communicator id locally. */
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "base/status.h"
#include "comm/backend.h"
#include "comm/coll.h"

typedef struct {
    int key, rank;
} member;

static int by_key_then_rank(const void *a, const void *b)
{
    const member *x = a, *y = b;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->rank - y->rank;
}

/* Ids 0 to 2 are reserved (none, world, the world's start-up timing);
 * FNV-1a of (parent, split number, colour). */
uint32_t dt__comm_child_id(uint32_t parent, uint64_t split_seq, int color)
{
    uint8_t bytes[16];
    memcpy(bytes, &parent, 4);
    memcpy(bytes + 4, &split_seq, 8);
    memcpy(bytes + 12, &color, 4);
    uint32_t h = dt__fnv1a32(DT_FNV32_SEED, bytes, sizeof bytes);
    return h < 3 ? h + 3 : h;
}

static dt_status make_child(dt_comm *c, const int32_t *pairs, int color, dt_comm **out)
{
    member *m = malloc((size_t)c->size * sizeof *m);
    if (!m)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    int cnt = 0;
    for (int i = 0; i < c->size; i++)
        if (pairs[2 * i] == color)
            m[cnt++] = (member){pairs[2 * i + 1], i};
    qsort(m, (size_t)cnt, sizeof *m, by_key_then_rank);
    dt_comm *sub = calloc(1, sizeof *sub);
    int *ranks = malloc((size_t)cnt * sizeof *ranks);
    if (!sub || !ranks) {
        free(sub);
        free(ranks);
        free(m);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    *sub = *c;
    sub->ranks = ranks;
    sub->size = cnt;
    sub->coll_seq = sub->split_seq = sub->p2p_seq = 0;
    sub->progress = NULL; /* its own, started by its first nonblocking collective */
    sub->coll_sig = 0;
    sub->stall_slot = NULL; /* its own id: its own record (stall.c) */
    memset(sub->scratch, 0, sizeof sub->scratch);
    sub->stage = NULL; /* its own staging buffer (stage.c) */
    sub->device_comm = NULL; /* its own, split from the parent's: dt__device_comm_split */
    sub->ipc = NULL;   /* its own stream and temporary (ipc.c) */
    sub->local = sub->cross = NULL; /* its own hierarchy, if any: dt__hier_setup */
    sub->members = NULL;
    sub->nhosts = 0;
    sub->arena = NULL; /* its own: dt_comm_split sets it up */
    sub->arena_round = 0;
    memset(sub->scratch_size, 0, sizeof sub->scratch_size);
    sub->id = dt__comm_child_id(c->id, c->split_seq, color);
    for (int i = 0; i < cnt; i++) {
        ranks[i] = c->ranks[m[i].rank];
        if (m[i].rank == c->rank)
            sub->rank = i;
    }
    free(m);
    sub->one_host = dt__comm_one_host(sub);
    __atomic_add_fetch(&c->world->refs, 1, __ATOMIC_ACQ_REL);
    *out = sub;
    return DT_OK;
}

dt_status dt__comm_split(dt_comm *c, int color, int key, bool hier, dt_comm **out)
{
    if (!out)
        return dt__fail(DT_ERR_INVALID, "dt_comm_split: out is NULL");
    *out = NULL;
    if (color < 0 && color != DT_UNDEFINED)
        return dt__fail(DT_ERR_INVALID, "dt_comm_split: colour %d is negative (use DT_UNDEFINED to opt out)", color);
    DT_CHECK(dt__comm_check(c, "split"));
    if (c->backend->split) /* a backend of its own (MPI_Comm_split) */
        return c->backend->split(c, color, key, out);
    int32_t *pairs = malloc(2 * (size_t)c->size * sizeof *pairs);
    if (!pairs)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    int32_t mine[2] = {color, key};
    dt_status s = dt_allgather(mine, pairs, 2, DT_I32, c);
    c->split_seq++;
    if (s == DT_OK && color != DT_UNDEFINED)
        s = make_child(c, pairs, color, out);
    free(pairs);
    if (s == DT_OK && *out)
        s = dt__shm_coll_setup(*out);
    /* Members on several hosts keep the host-aware algorithms (hier.c); the
     * hierarchy's own parts (one host; one rank per host) need none.  All
     * members agree on one_host, so they all take part or none does. */
    if (s == DT_OK && *out && hier && !(*out)->one_host)
        s = dt__hier_setup(*out);
    /* A user's split (hier) of a communicator with a companion for device
     * buffers splits the companion alike; the hierarchy's own parts carry
     * host buffers only. */
    if (s == DT_OK && hier)
        s = dt__device_comm_split(c, color, key, *out);
    if (s != DT_OK && *out) {
        char why[DT__ERROR_LEN];
        dt__error_save(why);
        dt_comm_destroy(*out);
        *out = NULL;
        dt__error_restore(s, why);
    }
    return s == DT_OK ? DT_OK : dt__wrap(s, "split: ");
}

dt_status dt_comm_split(dt_comm *c, int color, int key, dt_comm **out)
{
    return dt__comm_split(c, color, key, true, out);
}
