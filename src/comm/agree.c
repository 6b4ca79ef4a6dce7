/* Rooted collectives (broadcast, reduce, gather, scatter) agree on the call
 * before any data moves.
 *
 * Every other collective finds a mismatch through its messages: each carries
 * the call's signature (collsig.c), and every rank receives from a rank
 * whose call differs, directly or through the failure it reports.  A rooted
 * call with differing roots need not: two ranks that each think they are
 * the root only send, a leaf whose root is another rank waits for a message
 * nobody sends (reduce and gather timed out), and in the shared arena two
 * "roots" both wrote the broadcast's entry while every rank returned DT_OK
 * (issue 43).  So the ranks first learn every rank's signature: each ends
 * with the smallest and the largest of them (and whose they are), and a
 * difference fails the call on every rank, naming both calls and so both
 * roots.  Nobody returns DT_OK unless every rank called the same.
 *
 * As messages, a dissemination exchange of 24 bytes: ceil(log2 n) rounds, in
 * round i to rank r+2^i and from rank r-2^i; after round i a rank knows the
 * signatures of ranks r-2^(i+1)+1 .. r, so after the last it knows all (min
 * and max may count a rank twice).  Through the arena, one round in which
 * every rank publishes its signature with READY and reads everyone's.  Cost:
 * that much latency before every rooted call (docs/algorithms.md,
 * "Determinism", has the figures); with DT_DEBUG=coll the descriptor
 * exchange (colltrace.c) agrees already and this is skipped. */
#include <stdint.h>

#include "base/status.h"
#include "comm/coll.h"
#include "transport/socket.h"

#define AGREE_SUBTAG (DT__SUBTAG_MAX - 4)
enum { AGREE_WIRE = 24 };

typedef struct {
    uint64_t lo, hi;      /* the smallest and largest signature seen */
    int32_t lo_rank, hi_rank; /* whose (communicator ranks) */
} view;

static void pack(const view *v, uint8_t *w)
{
    dt__put_u64(w, v->lo);
    dt__put_u64(w + 8, v->hi);
    dt__put_u32(w + 16, (uint32_t)v->lo_rank);
    dt__put_u32(w + 20, (uint32_t)v->hi_rank);
}

static void merge(view *v, const uint8_t *w)
{
    uint64_t lo = dt__get_u64(w), hi = dt__get_u64(w + 8);
    if (lo < v->lo) {
        v->lo = lo;
        v->lo_rank = (int32_t)dt__get_u32(w + 16);
    }
    if (hi > v->hi) {
        v->hi = hi;
        v->hi_rank = (int32_t)dt__get_u32(w + 20);
    }
}

static dt_status disseminate(dt__coll *k, view *v)
{
    int n = k->c->size, r = k->c->rank;
    uint8_t out[AGREE_WIRE], in[AGREE_WIRE];
    for (int dist = 1; dist < n; dist <<= 1) {
        dt__req rq[2];
        pack(v, out);
        DT_CHECK(dt__coll_recv(k, &rq[0], (r - dist + n) % n, AGREE_SUBTAG, in, sizeof in));
        DT_CHECK(dt__coll_send(k, &rq[1], (r + dist) % n, AGREE_SUBTAG, out, sizeof out));
        DT_CHECK(dt__coll_wait(k, rq, 2));
        merge(v, in);
    }
    return DT_OK;
}

dt_status dt__coll_agree(dt__coll *k)
{
    dt_comm *c = k->c;
    if (c->size == 1 || !k->sig || c->world->trace)
        return DT_OK;
    if (c->arena)
        return dt__shm_agree(k);
    view v = {k->sig, k->sig, c->rank, c->rank};
    dt_status s = disseminate(k, &v);
    if (s == DT_OK && v.lo != v.hi) {
        bool low = k->sig != v.lo; /* name a signature that is not this rank's */
        s = dt__engine_sig_mismatch(c->world->eng, c->ranks[low ? v.lo_rank : v.hi_rank], c->id, k->seq, k->sig,
                                    low ? v.lo : v.hi);
    }
    return dt__coll_error(k, s);
}
