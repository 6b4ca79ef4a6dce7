/* Payloads sent by reference between ranks of one host (DATA_REF).
 *
 * The sender's DATA_REF frame carries the payload's address and an id; the
 * receiver copies the payload straight out of the sender's memory
 * (process_vm_readv) and answers with an ACK carrying the id, which
 * completes the send.  A frame whose receive is not posted yet leaves its
 * payload where it is, and the copy happens when the receive is posted,
 * straight into the caller's buffer: copying it at once into a buffer of our
 * own would cost a second copy and, in fresh pages, a fault per page.  So
 * ACKs come back in any order, hence the ids.
 *
 * A receive may never come (a message nobody asked for yet, or two ranks
 * that both send before they receive): a payload left waiting longer than
 * DT__REF_WAIT_NS while this rank is progressing is copied into a buffer of
 * its own and acknowledged, so a send never waits on the receiver's program
 * for more than that, as if the message had been buffered on arrival. */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "transport/engine_internal.h"
#include "transport/socket.h"

dt_status dt__ref_copy(dt__engine *e, peer *p, uint64_t addr, uint64_t id, void *dst, size_t len)
{
    e->refs_copied++;
    if (dst && len) {
        dt_status s = p->ch->ops->read_remote(p->ch, addr, dst, len);
        if (s != DT_OK)
            return dt__engine_fail(e, DT_ERR_PEER, "copying a %zu-byte message out of %s's memory: %s", len, p->name,
                                   dt_last_error());
    }
    if (p->acks_head + p->acks_owed == p->acks_cap) {
        if (p->acks_head > 0) {
            memmove(p->acks, p->acks + p->acks_head, p->acks_owed * sizeof *p->acks);
            p->acks_head = 0;
        } else {
            size_t cap = p->acks_cap ? 2 * p->acks_cap : 16;
            uint64_t *grown = realloc(p->acks, cap * sizeof *grown);
            if (!grown)
                return dt__engine_fail(e, DT_ERR_NOMEM, "out of memory for acknowledgements to %s", p->name);
            p->acks = grown;
            p->acks_cap = cap;
        }
    }
    p->acks[p->acks_head + p->acks_owed++] = id;
    return DT_OK;
}

uint64_t dt__ref_ack_taken(peer *p)
{
    uint64_t id = p->acks[p->acks_head++];
    if (--p->acks_owed == 0)
        p->acks_head = 0;
    return id;
}

dt__req *dt__ref_take_unacked(peer *p, uint64_t id)
{
    dt__req *prev = NULL;
    for (dt__req *r = p->unacked; r; prev = r, r = r->next) {
        if (dt__frame_seq_eq(dt__get_u64(r->ref + 8), id)) /* an ACK carries the id in its sequence field */
            return dt__req_unlink(&p->unacked, &p->unacked_tail, prev, r);
    }
    return NULL;
}

void dt__ref_defer(dt__engine *e, unexpected *u, uint64_t addr, uint64_t id)
{
    u->in_sender = true;
    u->ref_addr = addr;
    u->ref_id = id;
    u->since = dt__now_ns();
    e->refs_waiting++;
    e->refs_deferred++;
}

dt_status dt__ref_fetch(dt__engine *e, peer *p, unexpected *u, void *dst)
{
    u->in_sender = false;
    e->refs_waiting--;
    return dt__ref_copy(e, p, u->ref_addr, u->ref_id, dst, (size_t)u->f.len);
}

dt_status dt__ref_fetch_stale(dt__engine *e)
{
    int64_t now = dt__now_ns();
    for (int i = 0; i < e->size && e->refs_waiting > 0; i++) {
        peer *p = &e->peers[i];
        for (unexpected *u = p->unexp; u; u = u->next) {
            if (!u->in_sender || now - u->since < DT__REF_WAIT_NS)
                continue;
            size_t len = (size_t)u->f.len;
            uint8_t *data = len ? dt__bufcache_get(&e->early, len, &u->cap) : NULL;
            if (len && !data)
                return dt__engine_fail(e, DT_ERR_NOMEM, "cannot buffer a %zu-byte message from %s", len, p->name);
            u->data = data;
            e->refs_buffered++;
            DT_CHECK(dt__ref_fetch(e, p, u, data));
        }
    }
    return DT_OK;
}
