/* Collective signatures on frames (frame.h): a message and a receive of the
 * same communicator and sequence number belong to the same collective call,
 * so their signatures must agree.  Messages match on (communicator, tag,
 * sequence), and ranks in different collectives use different tags or
 * peers, so the check is not on the matched pair alone: the engine keeps
 * the collectives this rank is in (the last DT__SIG_ACTIVE), compares each
 * arriving signed message with them, and when it enters a new one, the
 * messages already buffered for it from every peer (once per collective;
 * the lists hold the few messages of the collectives in flight). */
#include <stdio.h>

#include "base/status.h"
#include "transport/engine_internal.h"

static bool same_call(uint32_t comm_id, uint64_t seq, uint32_t comm_id2, uint64_t seq2)
{
    return comm_id == comm_id2 && dt__frame_seq_eq(seq, seq2);
}

static dt_status sig_enter_locked(dt__engine *e, uint32_t comm_id, uint64_t seq, uint64_t sig)
{
    unsigned last = (e->active_next - 1) % DT__SIG_ACTIVE;
    if (e->active_next && e->active[last].sig == sig && same_call(e->active[last].comm_id, e->active[last].seq,
                                                                  comm_id, seq))
        return DT_OK; /* the common case: the collective's next message */
    for (int i = 0; i < DT__SIG_ACTIVE; i++)
        if (same_call(e->active[i].comm_id, e->active[i].seq, comm_id, seq) && e->active[i].sig == sig)
            return DT_OK;
    unsigned at = e->active_next++ % DT__SIG_ACTIVE;
    e->active[at].comm_id = comm_id;
    e->active[at].seq = (uint32_t)seq;
    e->active[at].sig = sig;
    /* Messages of this collective that came before this rank got here. */
    for (int pi = 0; pi < e->size; pi++)
        for (const unexpected *u = e->peers[pi].unexp; u; u = u->next)
            if (same_call(comm_id, seq, u->f.comm_id, u->f.seq) && dt__sig_differs(sig, u->f.sig))
                return dt__engine_sig_mismatch(e, pi, comm_id, seq, sig, u->f.sig);
    return DT_OK;
}

dt_status dt__engine_sig_enter(dt__engine *e, uint32_t comm_id, uint64_t seq, uint64_t sig)
{
    if (!sig)
        return DT_OK;
    dt__engine_lock(e);
    dt_status s = sig_enter_locked(e, comm_id, seq, sig);
    dt__engine_unlock(e);
    return s;
}

dt_status dt__sig_check_arrival(dt__engine *e, int pi, const dt__frame *f)
{
    for (int i = 0; i < DT__SIG_ACTIVE; i++)
        if (same_call(e->active[i].comm_id, e->active[i].seq, f->comm_id, f->seq) &&
            dt__sig_differs(e->active[i].sig, f->sig))
            return dt__engine_sig_mismatch(e, pi, f->comm_id, f->seq, e->active[i].sig, f->sig);
    return DT_OK;
}

static void name(const dt__engine *e, uint64_t sig, char *buf, size_t len)
{
    if (e->sig_namer)
        e->sig_namer(sig, buf, len);
    else
        snprintf(buf, len, "signature %016llx", (unsigned long long)sig);
}

dt_status dt__engine_sig_mismatch(dt__engine *e, int pi, uint32_t comm_id, uint64_t seq, uint64_t mine,
                                  uint64_t theirs)
{
    char a[160], b[160];
    name(e, mine, a, sizeof a);
    name(e, theirs, b, sizeof b);
    return dt__engine_fail(e, DT_ERR_INVALID,
                           "collective mismatch: rank %d calls %s but %s calls %s (collective #%llu on communicator "
                           "%u); every rank of a communicator must issue the same collectives in the same order",
                           e->rank, a, dt__engine_peer_name(e, pi), b, (unsigned long long)(uint32_t)seq, comm_id);
}
