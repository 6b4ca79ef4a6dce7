/* Point-to-point messages in chunks (p2p_chunk.h: the protocol). */
#include <stdlib.h>

#include "base/status.h"
#include "comm/p2p_chunk.h"

#define SEQ_MASK 0x7fffffffu
#define AHEAD 16 /* continuation receives posted ahead */

struct dt__p2pchunks {
    bool send;
    int peer;          /* world rank */
    uint32_t comm_id;
    int32_t tag;       /* the continuation tag */
    uint64_t seq;      /* frame 0's, DT__P2P_CHUNKED set */
    size_t chunk;      /* C */
    size_t total;      /* send: N; receive: bytes received so far */
    size_t frames;     /* send: K; receive: the most the buffer takes, its capacity / C */
    size_t posted;     /* continuation frames posted */
    size_t done;       /* receive: continuation frames consumed */
    bool ended;        /* receive: the short frame came */
    dt__req q[];       /* send: frame j in q[j-1]; receive: frame j in q[(j-1) % AHEAD] */
};

static int32_t cont_tag(int32_t tag) { return INT32_MIN + tag; }

uint64_t dt__p2p_next_seq(dt_comm *c) { return ++c->p2p_seq & SEQ_MASK; }

dt_status dt__p2p_isend_chunked(const void *first, size_t total, size_t chunk, dt_dtype t, int peer, int tag,
                                dt_comm *c, dt_request **req)
{
    size_t es = dt_dtype_size(t);
    if (!es || chunk == 0 || chunk % es || total / chunk < 2)
        return dt__fail(DT_ERR_INTERNAL, "send: %zu bytes in chunks of %zu is no chunked message", total, chunk);
    size_t frames = total / chunk;
    struct dt__p2pchunks *ch = calloc(1, sizeof *ch + frames * sizeof(dt__req));
    if (!ch)
        return dt__fail(DT_ERR_NOMEM, "send: out of memory for %zu chunks", frames + 1);
    uint64_t seq = dt__p2p_next_seq(c) | DT__P2P_CHUNKED;
    dt_status s = dt__p2p_post(c, true, (void *)first, chunk / es, t, peer, tag, seq, req);
    if (s != DT_OK) {
        free(ch);
        return s;
    }
    *ch = (struct dt__p2pchunks){.send = true, .peer = c->ranks[peer], .comm_id = c->id, .tag = cont_tag(tag),
                                 .seq = seq, .chunk = chunk, .total = total, .frames = frames};
    (*req)->chunks = ch;
    return DT_OK;
}

size_t dt__p2p_send_frames(const dt_request *r) { return r->chunks && r->chunks->send ? r->chunks->frames : 0; }
size_t dt__p2p_send_total(const dt_request *r) { return r->chunks && r->chunks->send ? r->chunks->total : 0; }

dt_status dt__p2p_send_more(dt_request *r, size_t j, const void *piece)
{
    struct dt__p2pchunks *ch = r->chunks;
    if (!ch || !ch->send || j != ch->posted + 1 || j > ch->frames)
        return dt__fail(DT_ERR_INTERNAL, "send: chunk %zu out of order", j);
    size_t off = j * ch->chunk, len = ch->total - off < ch->chunk ? ch->total - off : ch->chunk;
    dt_comm *c = r->comm;
    if (c->world->engine_closed)
        return dt__fail(DT_ERR_INVALID, "send: the communicator was destroyed");
    dt_status s = dt__engine_isend(c->world->eng, &ch->q[j - 1], ch->peer, ch->comm_id, ch->tag, ch->seq, 0, piece,
                                   len, true);
    if (s != DT_OK)
        return dt__wrap(s, "send: chunk %zu of %zu: ", j, ch->frames);
    ch->posted++;
    return DT_OK;
}

/* Post the continuation receives that fit in the window and the buffer. */
static dt_status recv_post_ahead(dt_request *r)
{
    struct dt__p2pchunks *ch = r->chunks;
    dt__engine *e = r->comm->world->eng;
    while (ch->posted < ch->frames && ch->posted - ch->done < AHEAD) {
        size_t j = ch->posted + 1, off = j * ch->chunk, cap = r->req.len - off;
        DT_CHECK(dt__engine_irecv(e, &ch->q[(j - 1) % AHEAD], ch->peer, ch->comm_id, ch->tag, ch->seq, 0, false,
                                  r->req.buf + off, cap < ch->chunk ? cap : ch->chunk));
        ch->posted++;
    }
    return DT_OK;
}

/* Frame 0 of a receive is done with a chunked message's sequence. */
static dt_status recv_begin(dt_request *r)
{
    size_t chunk = r->req.received;
    if (chunk == 0) /* a sender never makes it: no chunk size to go on */
        return dt__fail(DT_ERR_INVALID, "receive from rank %d: a chunked message whose first chunk is empty",
                        r->req.peer);
    struct dt__p2pchunks *ch = calloc(1, sizeof *ch + AHEAD * sizeof(dt__req));
    if (!ch)
        return dt__fail(DT_ERR_NOMEM, "receive: out of memory for a chunked message");
    *ch = (struct dt__p2pchunks){.peer = r->req.peer, .comm_id = r->req.comm_id, .tag = cont_tag(r->req.tag),
                                 .seq = r->req.seq, .chunk = chunk, .total = chunk, .frames = r->req.len / chunk};
    r->chunks = ch;
    return recv_post_ahead(r);
}

/* Whether q is done, waiting for it (block) or progressing once. */
static dt_status settle(dt_request *r, dt__req *q, bool block, int64_t deadline_ns, bool *done)
{
    dt_comm *c = r->comm;
    *done = dt__req_done(q);
    if (*done)
        return DT_OK;
    if (c->world->engine_closed)
        return dt__fail(DT_ERR_INVALID, "dt_wait: the communicator was destroyed");
    if (block)
        dt__engine_wait(c->world->eng, q, deadline_ns);
    else
        dt__engine_progress(c->world->eng, 0);
    *done = dt__req_done(q);
    return DT_OK;
}

/* r's status takes the first failure of its frames. */
static void take_failure(dt_request *r, dt_status s)
{
    if (r->req.status == DT_OK)
        r->req.status = s;
}

dt_status dt__p2p_recv_next(dt_request *r, bool block, int64_t deadline_ns, bool *got, size_t *off, size_t *len,
                            bool *more)
{
    *got = *more = false;
    struct dt__p2pchunks *ch = r->chunks;
    bool done;
    if (!ch) {
        DT_CHECK(settle(r, &r->req, block, deadline_ns, &done));
        if (!done)
            return DT_OK;
        *got = true;
        *off = 0;
        *len = r->req.received;
        if (r->req.status != DT_OK || !(r->req.seq & DT__P2P_CHUNKED))
            return DT_OK;
        dt_status s = recv_begin(r);
        if (s != DT_OK) {
            take_failure(r, s);
            return DT_OK;
        }
        *more = true;
        return DT_OK;
    }
    if (ch->ended || ch->done == ch->posted)
        return dt__fail(DT_ERR_INTERNAL, "receive: no chunk left to wait for");
    size_t j = ch->done + 1;
    dt__req *q = &ch->q[(j - 1) % AHEAD];
    DT_CHECK(settle(r, q, block, deadline_ns, &done));
    if (!done)
        return DT_OK;
    ch->done++;
    *got = true;
    *off = j * ch->chunk;
    *len = q->received;
    if (q->status != DT_OK) {
        take_failure(r, q->status);
        ch->ended = true;
        return DT_OK;
    }
    ch->total += q->received;
    if (q->received < ch->chunk) {
        ch->ended = true;
        r->req.received = ch->total;
        return DT_OK;
    }
    dt_status s = recv_post_ahead(r);
    if (s != DT_OK) {
        take_failure(r, s);
        ch->ended = true;
        return DT_OK;
    }
    *more = true;
    return DT_OK;
}

size_t dt__p2p_recv_taken(const dt_request *r) { return r->chunks && !r->chunks->send ? r->chunks->total : 0; }

dt_status dt__p2p_rest(dt_request *r, bool block, int64_t deadline_ns, bool *done)
{
    struct dt__p2pchunks *ch = r->chunks;
    *done = true;
    if (r->req.kind == DT_REQ_SEND) {
        for (size_t k = 0; ch && k < ch->posted; k++) {
            DT_CHECK(settle(r, &ch->q[k], block, deadline_ns, done));
            if (!*done)
                return DT_OK;
            take_failure(r, ch->q[k].status);
        }
        return DT_OK;
    }
    if (!ch && (r->req.status != DT_OK || !(r->req.seq & DT__P2P_CHUNKED)))
        return DT_OK; /* a plain message */
    if (!ch) { /* frame 0 was taken by the engine's wait, not by dt__p2p_recv_next */
        dt_status s = recv_begin(r);
        if (s != DT_OK) {
            take_failure(r, s);
            return DT_OK;
        }
        ch = r->chunks;
    }
    while (!ch->ended) {
        bool got, more;
        size_t off, len;
        DT_CHECK(dt__p2p_recv_next(r, block, deadline_ns, &got, &off, &len, &more));
        if (!got) {
            *done = false;
            return DT_OK;
        }
    }
    return DT_OK;
}

void dt__p2p_chunks_free(dt_request *r)
{
    struct dt__p2pchunks *ch = r->chunks;
    if (!ch)
        return;
    /* Receives posted ahead past the short frame never match: withdraw them
     * before their memory goes (a failed engine has completed them). */
    if (!ch->send && !r->comm->world->engine_closed)
        for (size_t j = ch->done + 1; j <= ch->posted; j++)
            (void)dt__engine_cancel(r->comm->world->eng, &ch->q[(j - 1) % AHEAD]);
    free(ch);
    r->chunks = NULL;
}
