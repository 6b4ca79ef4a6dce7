/* Collectives of a communicator whose ranks all share one host, through a
 * shared arena (transport/shm_arena.h) instead of messages.
 *
 * Every operation runs in rounds of at most one slot per rank.  A round g:
 * wait until every rank has finished reading round g-2 (which used the same
 * set of slots), copy this rank's part into its slot, publish READY, wait for
 * every rank's READY, then read what is needed straight out of the others'
 * slots and publish DONE.  Allreduce of more than a few KiB adds a middle
 * stage: rank j reduces the j-th block of every slot into its own slot and
 * publishes REDUCED, and everyone copies the reduced blocks out.
 *
 * Reductions always combine the slots in rank order (((s0 op s1) op s2) ...),
 * so every rank gets the same bits, whatever the size of a round. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/half_convert.h"
#include "base/log.h"
#include "base/redop.h"
#include "base/spin.h"
#include "base/status.h"
#include "comm/coll.h"
#include "transport/shm_arena.h"
#include "transport/heartbeat.h"

/* Up to this many bytes per round every rank reduces the whole round itself
 * (one wait instead of two; n times the reading).  4 ranks on 2 cores,
 * median of 3: 4 KiB 15.7 against 21.1 us, 32 KiB 29.5 against 41.2; 64 KiB
 * 78.8 against 49.9. */
#define ONE_SHOT_BYTES 32768
/* CPU pauses between looks at a flag while spinning: one, the engine's
 * cadence on its rings.  A look every 64 pauses had measured no slower on an
 * earlier host (2 ranks, 4 KiB allreduce, 1.9-2.1 us against 1.9-2.8), but
 * on this AMD EPYC one the wait outlasted the flag by most of a microsecond:
 * 2 ranks, 8 B allreduce, 1.10-1.14 us against 0.76-0.79. */
#define SPIN_PAUSES 1
/* A small-ring entry starts with the signature of its broadcast, on the
 * line of the first bytes the readers copy anyway. */
#define SMALL_SIG 8
/* Longest sleep between looks at the sockets (a peer's death) and the clock. */
#define SLEEP_SLICE_NS 5000000

typedef struct {
    dt__coll *k;
    dt__arena *a;
    int n, me;
    int64_t spin_ns;
    bool yields;
} arena_op;

/* Over a twin of c (comm_internal.h): the user's collectives keep their numbers. */
static dt_status setup_on_twin(dt_comm *c, dt_comm *twin)
{
    dt__coll k;
    DT_CHECK(dt__coll_begin(&k, twin, "shared-memory collectives set-up"));
    char name[64] = "";
    dt__arena *a = NULL;
    /* reduce_scatter and alltoall put n pieces of at least 64 elements in a slot. */
    size_t least = ((size_t)c->size * 64 * 8 + 4095) / 4096 * 4096;
    if (c->shm_coll_slot < least)
        c->shm_coll_slot = least;
    if (c->rank == 0) {
        snprintf(name, sizeof name, "/dtrain-arena-%ld-%08x-%llu", (long)getpid(), c->id,
                 (unsigned long long)k.seq);
        if (dt__arena_create(name, c->size, c->shm_coll_slot, &a) != DT_OK) {
            DT_WARN("shared-memory collectives off, the collectives of these %d ranks go as messages: %s", c->size,
                    dt_last_error());
            name[0] = '\0';
        }
    }
    DT_CHECK(dt__coll_error(&k, dt__tree_bcast(&k, name, sizeof name, 0)));
    name[sizeof name - 1] = '\0';
    if (c->rank != 0 && name[0] && dt__arena_attach(name, c->size, c->shm_coll_slot, &a) != DT_OK)
        DT_WARN("shared-memory collectives off, the collectives of these %d ranks go as messages: %s", c->size,
                dt_last_error());
    /* Every rank learns whether every rank has the arena before anyone uses it. */
    int32_t ok = a != NULL;
    dt__coll agree;
    DT_CHECK(dt__coll_begin(&agree, twin, "shared-memory collectives set-up"));
    dt_status s = dt__coll_error(&agree, dt__rd_allreduce(&agree, &ok, 1, DT_I32, DT_MIN));
    if (c->rank == 0 && name[0])
        dt__arena_unlink(name); /* everyone has mapped it or given up: nothing left behind in /dev/shm */
    if (s != DT_OK || !ok) {
        dt__arena_close(a);
        return s;
    }
    c->arena = a;
    c->arena_round = DT__ARENA_FIRST_ROUND - 1;
    DT_INFO("shared-memory collectives: an arena of 2 x %d slots of %zu bytes", c->size, c->shm_coll_slot);
    return DT_OK;
}

dt_status dt__shm_coll_setup(dt_comm *c)
{
    if (!c->one_host || c->size < 2 || !c->shm_coll_on || (c->algo != DT_ALGO_AUTO && c->algo != DT_ALGO_SHM))
        return DT_OK;
    dt_comm twin;
    dt__comm_twin(c, dt__comm_child_id(c->id, UINT64_MAX, 0), &twin);
    dt_status s = setup_on_twin(c, &twin);
    dt__comm_twin_done(&twin);
    return s;
}

/* Also tells the engine which collective this rank is in: a peer that
 * sends it a message of this number from another collective (one that goes
 * as messages) is a mismatch too. */
static dt_status op_begin(arena_op *o, dt__coll *k)
{
    dt_comm *c = k->c;
    *o = (arena_op){k, c->arena, c->size, c->rank, 0, false};
    dt__engine_shm_spin_policy(c->world->eng, &o->spin_ns, &o->yields);
    return dt__coll_error(k, dt__engine_sig_enter(c->world->eng, c->id, k->seq, k->sig));
}

/* The bytes this rank wrote into the arena for the others: what it "sent"
 * (dt_comm_bytes_sent), as the messages of the other algorithms count. */
static void sent(const arena_op *o, size_t bytes) { dt__engine_count_sent(o->k->c->world->eng, bytes); }

static uint32_t next_round(arena_op *o)
{
    uint32_t g = ++o->k->c->arena_round;
    if (g % DT__ARENA_REFRESH_ROUNDS == 0)
        dt__arena_refresh(o->a, o->me, g);
    return g;
}

/* While asleep on a flag: the deadline, a peer's end (its socket closes) or
 * silence (heartbeat), an abort from anyone. */
static dt_status check_health(arena_op *o, int rank, int64_t waiting_since)
{
    dt__coll *k = o->k;
    dt__world *w = k->c->world;
    int peer = k->c->ranks[rank];
    if (dt__now_ns() >= k->deadline)
        return dt__engine_fail(w->eng, DT_ERR_TIMEOUT, "%s (collective #%llu) timed out after %.0f s waiting for %s",
                               k->op, (unsigned long long)k->seq, k->c->timeout_s,
                               dt__engine_peer_name(w->eng, peer));
    DT_CHECK(dt__engine_progress(w->eng, 0));
    if (w->heartbeat && dt__now_ns() - waiting_since > (int64_t)(dt__heartbeat_period(w->heartbeat) * 1e9) &&
        dt__heartbeat_check(w->heartbeat, peer, dt__engine_peer_name(w->eng, peer)) != DT_OK)
        return dt__engine_fail(w->eng, DT_ERR_PEER, "%s", dt_last_error());
    return DT_OK;
}

typedef struct {
    dt__arena *a;
    int rank;
    dt__arena_flag f;
    uint32_t g;
} flag_wait;

static bool flag_reached(void *arg)
{
    flag_wait *w = arg;
    return dt__arena_reached(w->a, w->rank, w->f, w->g);
}

static dt_status mismatch(arena_op *o, int j, uint32_t g, uint64_t theirs);

/* Waiting long for READY(g): a rank that is in another collective may never
 * publish it (a broadcast's reader does not, nor a rank whose collective goes
 * as messages, such as reduce or gather, and sends this rank none), so look
 * whether any rank is in another call of this number, or has published
 * READY(g) for another call.  Only on the slow path. */
static dt_status check_round_sigs(arena_op *o, uint32_t g)
{
    dt__coll *k = o->k;
    for (int j = 0; j < o->n && k->sig; j++) {
        uint64_t theirs;
        if (j == o->me)
            continue;
        if (dt__arena_call(o->a, j, k->c->id, k->seq, &theirs) && theirs && theirs != k->sig)
            return mismatch(o, j, g, theirs);
        if (!dt__arena_reached(o->a, j, DT__ARENA_READY, g))
            continue;
        bool slots = dt__arena_ready_sig(o->a, j, g, &theirs);
        if ((slots || theirs) && theirs != o->k->sig)
            return mismatch(o, j, g, theirs);
    }
    return DT_OK;
}

static dt_status wait_rank(arena_op *o, int rank, dt__arena_flag f, uint32_t g)
{
    flag_wait w = {o->a, rank, f, g};
    if (flag_reached(&w))
        return DT_OK;
    int64_t start = dt__now_ns();
    if (dt__spin_until(flag_reached, &w, o->spin_ns, o->yields, SPIN_PAUSES))
        return DT_OK;
    while (!flag_reached(&w)) {
        DT_CHECK(check_health(o, rank, start));
        if (f == DT__ARENA_READY)
            DT_CHECK(check_round_sigs(o, g));
        dt__arena_sleep(o->a, rank, f, g, SLEEP_SLICE_NS);
    }
    return DT_OK;
}

static dt_status wait_all(arena_op *o, dt__arena_flag f, uint32_t g)
{
    for (int j = 0; j < o->n; j++)
        if (j != o->me)
            DT_CHECK(wait_rank(o, j, f, g));
    return DT_OK;
}

/* Rank j's round g must belong to the same call as this rank's: its
 * signature, published with READY next to the flag (no extra line to
 * fetch), against k->sig.  A difference fails the engine, which tells every
 * rank, naming both calls (docs/failures.md). */
static dt_status mismatch(arena_op *o, int j, uint32_t g, uint64_t theirs)
{
    (void)g;
    dt__coll *k = o->k;
    return dt__engine_sig_mismatch(k->c->world->eng, k->c->ranks[j], k->c->id, k->seq, k->sig, theirs);
}

static dt_status check_sig(arena_op *o, int j, uint32_t g)
{
    uint64_t theirs;
    if (!o->k->sig || (dt__arena_ready_sig(o->a, j, g, &theirs) && theirs == o->k->sig))
        return DT_OK;
    return mismatch(o, j, g, theirs);
}

static void publish_ready(arena_op *o, uint32_t g) { dt__arena_publish_ready(o->a, o->me, g, o->k->sig, false); }

/* READY of rank j for round g, and the same call. */
static dt_status wait_ready(arena_op *o, int j, uint32_t g)
{
    DT_CHECK(wait_rank(o, j, DT__ARENA_READY, g));
    return check_sig(o, j, g);
}

static dt_status wait_all_ready(arena_op *o, uint32_t g)
{
    for (int j = 0; j < o->n; j++)
        if (j != o->me)
            DT_CHECK(wait_ready(o, j, g));
    return DT_OK;
}

/* Round g may overwrite its set once every rank has read round g-2.  A rank
 * publishes READY for round g-1 only after it has finished round g-2, so
 * READY(g-1) seen (in this rank's memory of the flags, after the previous
 * round's wait) answers without another look at the rank's flags, which it
 * has just written.  With each flag on a line of its own (shm_arena.c), 2 ranks,
 * 8 B allreduce: 0.41-0.45 us against 0.76-0.79 without either. */
static dt_status claim(arena_op *o, uint32_t g)
{
    for (int j = 0; j < o->n; j++)
        if (j != o->me && !dt__arena_seen(o->a, j, DT__ARENA_READY, g - 1))
            DT_CHECK(wait_rank(o, j, DT__ARENA_DONE, g - 2));
    return DT_OK;
}

static uint8_t *slot(const arena_op *o, uint32_t g, int rank) { return dt__arena_slot(o->a, g, rank); }

/* out = slot 0 op slot 1 op ... op slot n-1 over `count` elements at byte
 * offset `at` of each slot, lower rank first.  Partial results go to tmp
 * (private memory) so that out may be one of the slots still to be read. */
static void reduce_slots(const arena_op *o, uint32_t g, size_t at, size_t count, dt_dtype t, dt_redop op,
                         void *tmp, void *out)
{
    for (int j = 1; j < o->n; j++)
        dt__reduce(j == o->n - 1 ? out : tmp, j == 1 ? slot(o, g, 0) + at : tmp, slot(o, g, j) + at, count, t, op);
}

/* Block j of count elements cut into n (the first count % n get one more). */
static void block(size_t count, int n, int j, size_t *lo, size_t *len)
{
    size_t base = count / (size_t)n, rem = count % (size_t)n, b = (size_t)j;
    *lo = b * base + (b < rem ? b : rem);
    *len = base + (b < rem ? 1 : 0);
}

/* The input comes from src (== buf: in place), the result goes to buf. */
static dt_status allreduce_round(arena_op *o, const uint8_t *src, uint8_t *buf, size_t count, dt_dtype t,
                                 dt_redop op)
{
    size_t es = dt_dtype_size(t), bytes = count * es;
    uint32_t g = next_round(o);
    DT_CHECK(claim(o, g));
    memcpy(slot(o, g, o->me), src, bytes);
    sent(o, bytes);
    publish_ready(o, g);
    DT_CHECK(wait_all_ready(o, g));
    if (bytes <= ONE_SHOT_BYTES) {
        reduce_slots(o, g, 0, count, t, op, buf, buf);
    } else {
        size_t lo, len;
        block(count, o->n, o->me, &lo, &len);
        /* buf's block is free scratch: its input is in the slot, and the
         * reduced block comes back into it below. */
        reduce_slots(o, g, lo * es, len, t, op, buf + lo * es, slot(o, g, o->me) + lo * es);
        sent(o, len * es);
        dt__arena_publish(o->a, o->me, DT__ARENA_REDUCED, g);
        for (int j = 0; j < o->n; j++) {
            if (j != o->me)
                DT_CHECK(wait_rank(o, j, DT__ARENA_REDUCED, g));
            block(count, o->n, j, &lo, &len);
            memcpy(buf + lo * es, slot(o, g, j) + lo * es, len * es);
        }
    }
    dt__arena_publish(o->a, o->me, DT__ARENA_DONE, g);
    return DT_OK;
}

static size_t min_size(size_t a, size_t b) { return a < b ? a : b; }

dt_status dt__shm_allreduce(dt__coll *k, const void *src, void *buf, size_t count, dt_dtype t, dt_redop op)
{
    arena_op o;
    DT_CHECK(op_begin(&o, k));
    size_t es = dt_dtype_size(t), per = dt__arena_slot_bytes(o.a) / es;
    for (size_t off = 0; off < count; off += per)
        DT_CHECK(dt__coll_error(k, allreduce_round(&o, (const uint8_t *)src + off * es, (uint8_t *)buf + off * es,
                                                   min_size(per, count - off), t, op)));
    return DT_OK;
}

/* One round of the f16/bf16-wire allreduce, with the bits of the message
 * version (allreduce_half.c): inputs rounded once into the slots, block j
 * summed in f32 in rank order by rank j and rounded once, widened by all. */
static dt_status allreduce_half_round(arena_op *o, const float *send, float *recv, size_t count, bool bf16,
                                      bool avg, float *acc)
{
    uint32_t g = next_round(o);
    uint16_t *mine = (uint16_t *)slot(o, g, o->me);
    DT_CHECK(claim(o, g));
    dt__to_half_n(mine, send, count, bf16);
    sent(o, count * sizeof *mine);
    publish_ready(o, g);
    DT_CHECK(wait_all_ready(o, g));
    size_t lo, len;
    block(count, o->n, o->me, &lo, &len);
    memset(acc, 0, len * sizeof *acc);
    for (int j = 0; j < o->n; j++)
        dt__add_half_n(acc, (const uint16_t *)slot(o, g, j) + lo, len, bf16);
    if (avg)
        for (size_t i = 0; i < len; i++)
            acc[i] /= (float)o->n;
    dt__to_half_n(mine + lo, acc, len, bf16);
    sent(o, len * sizeof *mine);
    dt__arena_publish(o->a, o->me, DT__ARENA_REDUCED, g);
    for (int j = 0; j < o->n; j++) {
        if (j != o->me)
            DT_CHECK(wait_rank(o, j, DT__ARENA_REDUCED, g));
        block(count, o->n, j, &lo, &len);
        dt__from_half_n(recv + lo, (const uint16_t *)slot(o, g, j) + lo, len, bf16);
    }
    dt__arena_publish(o->a, o->me, DT__ARENA_DONE, g);
    return DT_OK;
}

dt_status dt__shm_allreduce_half(dt__coll *k, const float *send, float *recv, size_t count, bool bf16, bool avg)
{
    arena_op o;
    DT_CHECK(op_begin(&o, k));
    size_t per = dt__arena_slot_bytes(o.a) / 2;
    float *acc = dt__comm_scratch(k->c, DT__SCRATCH_TMP, (per / (size_t)o.n + 1) * sizeof *acc);
    if (!acc)
        return dt__coll_error(k, dt__fail(DT_ERR_NOMEM, "%s: out of memory", k->op));
    for (size_t off = 0; off < count; off += per)
        DT_CHECK(dt__coll_error(
            k, allreduce_half_round(&o, send + off, recv + off, min_size(per, count - off), bf16, avg, acc)));
    return DT_OK;
}

/* A broadcast that fits one entry of the arena's small ring: the root may
 * fill it once every rank has read the broadcast DT__ARENA_SMALL_DEPTH
 * rounds back, so a loop of small broadcasts does not wait for its readers
 * every second round (4 ranks on 2 cores, 8 bytes: the readers run when the
 * scheduler gives them a core, and with 2 rounds of slack the root waited for
 * that each time: 8-16 us a call against OpenMPI's 0.7-3). */
static dt_status broadcast_small(arena_op *o, void *buf, size_t bytes, int root)
{
    uint32_t g = next_round(o);
    uint8_t *entry = dt__arena_small_entry(o->a, g);
    uint64_t sig = o->k->sig, theirs;
    if (o->me == root) {
        DT_CHECK(wait_all(o, DT__ARENA_DONE, g - DT__ARENA_SMALL_DEPTH));
        memcpy(entry, &sig, SMALL_SIG);
        memcpy(entry + SMALL_SIG, buf, bytes);
        sent(o, bytes);
        dt__arena_publish_ready(o->a, o->me, g, sig, true);
    } else {
        DT_CHECK(wait_rank(o, root, DT__ARENA_READY, g));
        /* The entry's signature, unless the root's round g was one of slots
         * (it is in another collective, whose signature that is). */
        if (!dt__arena_ready_sig(o->a, root, g, &theirs))
            memcpy(&theirs, entry, SMALL_SIG);
        if (sig && theirs != sig)
            return mismatch(o, root, g, theirs);
        memcpy(buf, entry + SMALL_SIG, bytes);
    }
    dt__arena_publish(o->a, o->me, DT__ARENA_DONE, g);
    return DT_OK;
}

/* The root fills its slot, the others copy it out.  Rounds of one slot, not
 * the whole set: the root fills the next round while the others read this
 * one (2 ranks, 4 MiB: 119 us against 662 with a set per round; 4 ranks on 2
 * cores: 524 against 1036). */
dt_status dt__shm_broadcast(dt__coll *k, void *buf, size_t bytes, int root)
{
    arena_op o;
    DT_CHECK(op_begin(&o, k));
    if (bytes <= DT__ARENA_SMALL_BYTES - SMALL_SIG)
        return dt__coll_error(k, broadcast_small(&o, buf, bytes, root));
    size_t per = dt__arena_slot_bytes(o.a);
    for (size_t off = 0; off < bytes; off += per) {
        size_t m = min_size(per, bytes - off);
        uint32_t g = next_round(&o);
        uint8_t *set = slot(&o, g, 0), *part = (uint8_t *)buf + off;
        if (o.me == root) {
            DT_CHECK(dt__coll_error(k, claim(&o, g)));
            memcpy(set, part, m);
            sent(&o, m);
            publish_ready(&o, g);
        } else {
            DT_CHECK(dt__coll_error(k, wait_ready(&o, root, g)));
            memcpy(part, set, m);
        }
        dt__arena_publish(o.a, o.me, DT__ARENA_DONE, g);
    }
    return DT_OK;
}

/* recv holds n blocks of `bytes`, this rank's already in place. */
dt_status dt__shm_allgather(dt__coll *k, void *recv, size_t bytes)
{
    arena_op o;
    DT_CHECK(op_begin(&o, k));
    uint8_t *out = recv;
    size_t per = dt__arena_slot_bytes(o.a);
    for (size_t off = 0; off < bytes; off += per) {
        size_t m = min_size(per, bytes - off);
        uint32_t g = next_round(&o);
        DT_CHECK(dt__coll_error(k, claim(&o, g)));
        memcpy(slot(&o, g, o.me), out + (size_t)o.me * bytes + off, m);
        sent(&o, m);
        publish_ready(&o, g);
        for (int j = 0; j < o.n; j++)
            if (j != o.me) {
                DT_CHECK(dt__coll_error(k, wait_ready(&o, j, g)));
                memcpy(out + (size_t)j * bytes + off, slot(&o, g, j), m);
            }
        dt__arena_publish(o.a, o.me, DT__ARENA_DONE, g);
    }
    return DT_OK;
}

/* Round g of reduce_scatter or alltoall: claim its set, put n pieces of m
 * bytes side by side in this rank's slot (piece j from in + j * stride;
 * not piece `skip`, where that is a rank), publish READY. */
static dt_status post_pieces(arena_op *o, uint32_t g, const uint8_t *in, size_t stride, size_t m, int skip)
{
    DT_CHECK(claim(o, g));
    for (int j = 0; j < o->n; j++)
        if (j != skip)
            memcpy(slot(o, g, o->me) + (size_t)j * m, in + (size_t)j * stride, m);
    sent(o, (size_t)(skip >= 0 && skip < o->n ? o->n - 1 : o->n) * m);
    publish_ready(o, g);
    return DT_OK;
}

/* Each round moves `per` elements of every block: a rank's slot holds its n
 * pieces side by side, and rank j reduces piece j of every slot.  In place
 * (send == recv) is safe: a round writes recv only where this round or an
 * earlier one has already read. */
dt_status dt__shm_reduce_scatter(dt__coll *k, const void *send, void *recv, size_t recvcount, dt_dtype t,
                                 dt_redop op)
{
    arena_op o;
    DT_CHECK(op_begin(&o, k));
    size_t es = dt_dtype_size(t), per = dt__arena_slot_bytes(o.a) / ((size_t)o.n * es);
    const uint8_t *in = send;
    uint8_t *out = recv;
    for (size_t off = 0; off < recvcount; off += per) {
        size_t m = min_size(per, recvcount - off);
        uint32_t g = next_round(&o);
        DT_CHECK(dt__coll_error(k, post_pieces(&o, g, in + off * es, recvcount * es, m * es, -1)));
        DT_CHECK(dt__coll_error(k, wait_all_ready(&o, g)));
        reduce_slots(&o, g, (size_t)o.me * m * es, m, t, op, out + off * es, out + off * es);
        dt__arena_publish(o.a, o.me, DT__ARENA_DONE, g);
    }
    return DT_OK;
}

/* As reduce_scatter, without the reduction: piece j of rank i's slot is
 * rank i's block for rank j.  A rank's block for itself goes straight from
 * send to recv, not through its slot (2 ranks, 2-8 MiB: 1.5 copies of the
 * buffer instead of 2). */
dt_status dt__shm_alltoall(dt__coll *k, const void *send, void *recv, size_t bytes)
{
    arena_op o;
    DT_CHECK(op_begin(&o, k));
    size_t per = dt__arena_slot_bytes(o.a) / (size_t)o.n;
    const uint8_t *in = send;
    uint8_t *out = recv;
    size_t mine = (size_t)o.me * bytes;
    if (in != out)
        memcpy(out + mine, in + mine, bytes);
    for (size_t off = 0; off < bytes; off += per) {
        size_t m = min_size(per, bytes - off);
        uint32_t g = next_round(&o);
        DT_CHECK(dt__coll_error(k, post_pieces(&o, g, in + off, bytes, m, o.me)));
        for (int j = 0; j < o.n; j++) {
            if (j == o.me)
                continue;
            DT_CHECK(dt__coll_error(k, wait_ready(&o, j, g)));
            memcpy(out + (size_t)j * bytes + off, slot(&o, g, j) + (size_t)o.me * m, m);
        }
        dt__arena_publish(o.a, o.me, DT__ARENA_DONE, g);
    }
    return DT_OK;
}

dt_status dt__shm_agree(dt__coll *k)
{
    arena_op o;
    DT_CHECK(op_begin(&o, k));
    uint32_t g = next_round(&o);
    DT_CHECK(dt__coll_error(k, claim(&o, g)));
    publish_ready(&o, g);
    DT_CHECK(dt__coll_error(k, wait_all_ready(&o, g)));
    dt__arena_publish(o.a, o.me, DT__ARENA_DONE, g);
    return DT_OK;
}

void dt__shm_coll_destroy(dt_comm *c)
{
    dt__arena_close(c->arena);
    c->arena = NULL;
}
