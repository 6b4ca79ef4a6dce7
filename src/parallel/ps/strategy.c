/* A parameter-server worker as a strategy (ps.h).  The common micro-batch
 * loop (common/strategy.c) runs forward and backward; the block hooks pull and the
 * registry's gradient-ready events (nn.h) push around it:
 *   before a block's forward: wait for the pulls (from the servers whose
 *     ranges hold the block's parameters, tied ones included) that the
 *     step before started;
 *   as the last of a block's own parameters becomes ready in the last
 *     micro-batch: its gradients (the micro-batches' mean) are sent to the
 *     servers whose ranges they cover, overlapping the blocks still
 *     running.
 * The update commits the step to every server (with the learning rate and
 * the clipping norm), waits for the pushes to leave, advances the clock and
 * starts the pulls for the next step into the registry's values; it waits
 * for the pulls' headers (the servers' answer, which under BSP and SSP is
 * the synchronisation), not for the values, which stream in while the
 * caller goes on and are waited for block by block.
 * Row-sparse tables (an embedding table at the front of the model) move by
 * rows: before the first block's forward the worker pulls the rows its
 * input names from the servers that hold them (row i on server i mod S),
 * and the update pushes the rows the step touched, with their ids. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "parallel/common/ready_groups.h"
#include "parallel/common/strategy.h"
#include "parallel/ps/protocol.h"

/* A row-sparse table as a worker moves it: per server, the ids of one
 * request and their rows going out or coming in. */
typedef struct {
    int param;
    int64_t rows, dim, offset; /* its rows, a row's length, where it starts in the flat buffers */
    uint32_t *stamp, tick;     /* per row: the last pull that named it */
    int64_t **ids, *nids;      /* per server: this request's ids */
    float **rowbuf;            /* per server: their rows */
    int64_t *cap;              /* per server: the buffers' room, in rows */
} ps_table;

typedef struct {
    dt_comm *c;
    dt_ps_config pc;
    ps_table *t;
    int ntables;
    int64_t dense_from;        /* the flat offset where the dense parameters start */
    ps_header *rrep;           /* per server: a row pull's answer */
    dt_request **rrq;          /* per server: its header's and its rows' receives */
    int W, S, rank, nb;
    int64_t P, *lo, *n;    /* each server's range */
    int64_t *blo, *bhi;    /* each block's own parameters [blo, bhi) of the flat buffer */
    uint8_t *uses;         /* nb x S: block b reads server k's range */
    bool *pushed;          /* this step, per block */
    dt__ready_groups ready; /* blocks by parameter (their own): a block's gradients are final when its group is */
    dt_subscription hook_sub, ready_sub;
    int backwards;
    int64_t clock;
    /* the pulls in flight: per server a header and the values */
    ps_header *rep;
    dt_request **rep_req, **val_req;
    /* sends in flight: headers live here until the update waits for them */
    ps_header *hdr;
    dt_request **send;
    int nsend, cap;
    float norm;
    bool failed;           /* a refused request: nothing more is waited for */
    double exposed, last_exposed;
    uint64_t sent, received;
} ps_worker;

static double since(int64_t t0) { return (double)(dt__now_ns() - t0) / 1e9; }

static int server_rank(const ps_worker *P, int k) { return P->W + k; }

/* The reason a server sent with PS_ERROR. */
static dt_status server_error(ps_worker *P, int k, const ps_header *h)
{
    char why[600] = "";
    size_t len = h->a > 0 && h->a < (int64_t)sizeof why ? (size_t)h->a : sizeof why - 1;
    P->failed = true;
    dt_status st = dt_recv(why, len, DT_U8, server_rank(P, k), PS_TAG_ERR, P->c, NULL);
    why[len] = 0;
    return dt__fail(DT_ERR_INVALID, "parameter server: %s", st == DT_OK ? why : "a request was refused");
}

static dt_status send_hdr(ps_worker *P, int k, ps_header h)
{
    if (P->nsend == P->cap)
        return dt__fail(DT_ERR_INVALID, "parameter server: more than %d messages in one step", P->cap);
    int i = P->nsend++;
    P->hdr[i] = h;
    P->sent += sizeof h;
    return dt_isend(&P->hdr[i], PS_HEADER_WORDS, DT_I64, server_rank(P, k), PS_TAG_REQ, P->c, &P->send[i]);
}

static dt_status send_data(ps_worker *P, int k, const float *data, int64_t n)
{
    if (P->nsend == P->cap)
        return dt__fail(DT_ERR_INVALID, "parameter server: more than %d messages in one step", P->cap);
    int i = P->nsend++;
    P->sent += (uint64_t)n * sizeof(float);
    return dt_isend(data, (size_t)n, DT_F32, server_rank(P, k), PS_TAG_DATA, P->c, &P->send[i]);
}

static dt_status wait_sends(ps_worker *P)
{
    dt_status st = DT_OK;
    int64_t t0 = dt__now_ns();
    for (int i = 0; i < P->nsend; i++) {
        dt_status r = dt_wait(P->send[i], NULL);
        st = st != DT_OK ? st : r;
    }
    P->nsend = 0;
    P->exposed += since(t0);
    return st;
}

/* ---- rows of the tables ---- */

static dt_status room(ps_table *T, int k, int64_t n)
{
    if (n <= T->cap[k])
        return DT_OK;
    int64_t want = n > 2 * T->cap[k] ? n : 2 * T->cap[k];
    int64_t *ids = realloc(T->ids[k], (size_t)want * sizeof *ids);
    if (ids)
        T->ids[k] = ids;
    float *rows = ids ? realloc(T->rowbuf[k], (size_t)(want * T->dim) * sizeof *rows) : NULL;
    if (!ids || !rows)
        return dt__fail(DT_ERR_NOMEM, "parameter server: out of memory for %lld rows", (long long)want);
    T->rowbuf[k] = rows;
    T->cap[k] = want;
    return DT_OK;
}

/* Pull the rows of each table that the model's input x ([batch, L] ids, -1
 * for none) names into the registry's values, from the servers that hold
 * them; blocking (the first block needs them at once). */
static dt_status pull_rows(dt_strategy *s, ps_worker *P, const dt_tensor *x)
{
    if (!x)
        return dt__fail(DT_ERR_INVALID, "parameter server: the first block runs without the model's input");
    float *v = dt_params_values(dt_model_params(s->model));
    int64_t n = dt_tensor_numel(x);
    for (int t = 0; t < P->ntables; t++) {
        ps_table *T = &P->t[t];
        if (++T->tick == 0) {
            memset(T->stamp, 0, (size_t)T->rows * sizeof *T->stamp);
            T->tick = 1;
        }
        memset(T->nids, 0, (size_t)P->S * sizeof *T->nids);
        for (int64_t i = 0; i < n; i++) { /* the input's ids, each once, by server */
            float f = x->data[i];
            if (f < 0)
                continue;
            int64_t id = (int64_t)f;
            if (id >= T->rows || (float)id != f)
                return dt__fail(DT_ERR_INVALID, "parameter server: input id %g is not a row of %s (%lld rows)", (double)f,
                                dt_params_info(dt_model_params(s->model), T->param)->name, (long long)T->rows);
            if (T->stamp[id] == T->tick)
                continue;
            T->stamp[id] = T->tick;
            int k = (int)(id % P->S);
            DT_CHECK(room(T, k, T->nids[k] + 1));
            T->ids[k][T->nids[k]++] = id;
        }
        for (int k = 0; k < P->S; k++) {
            if (!T->nids[k])
                continue;
            int r = server_rank(P, k);
            DT_CHECK(dt_irecv(&P->rrep[k], PS_HEADER_WORDS, DT_I64, r, PS_TAG_REP, P->c, &P->rrq[2 * k]));
            DT_CHECK(dt_irecv(T->rowbuf[k], (size_t)(T->nids[k] * T->dim), DT_F32, r, PS_TAG_REPDATA, P->c,
                              &P->rrq[2 * k + 1]));
            DT_CHECK(send_hdr(P, k, ps_make(PS_PULL_ROWS, P->clock, t, T->nids[k], 0)));
            int i = P->nsend++;
            DT_CHECK(dt_isend(T->ids[k], (size_t)T->nids[k], DT_I64, r, PS_TAG_DATA, P->c, &P->send[i]));
            P->sent += (uint64_t)T->nids[k] * sizeof(int64_t);
        }
        DT_CHECK(wait_sends(P));
        int64_t t0 = dt__now_ns();
        for (int k = 0; k < P->S; k++) {
            if (!T->nids[k])
                continue;
            dt_status st = dt_wait(P->rrq[2 * k], NULL);
            P->rrq[2 * k] = NULL;
            DT_CHECK(st);
            if (ps_op_of(&P->rrep[k]) == PS_ERROR)
                return server_error(P, k, &P->rrep[k]);
            st = dt_wait(P->rrq[2 * k + 1], NULL);
            P->rrq[2 * k + 1] = NULL;
            DT_CHECK(st);
            P->received += sizeof(ps_header) + (uint64_t)(T->nids[k] * T->dim) * sizeof(float);
            for (int64_t q = 0; q < T->nids[k]; q++)
                memcpy(v + T->offset + T->ids[k][q] * T->dim, T->rowbuf[k] + q * T->dim, (size_t)T->dim * sizeof(float));
        }
        P->exposed += since(t0);
    }
    return DT_OK;
}

/* Push the rows of each table this step touched (the micro-batches' mean of
 * their gradients), with their ids, to the servers that hold them. */
static dt_status push_rows(dt_strategy *s, ps_worker *P, float lr)
{
    dt_params *p = dt_model_params(s->model);
    float *g = dt_params_grads(p);
    for (int t = 0; t < P->ntables; t++) {
        ps_table *T = &P->t[t];
        const int64_t *rows;
        int64_t n = dt_param_touched_rows(p, T->param, &rows);
        memset(T->nids, 0, (size_t)P->S * sizeof *T->nids);
        for (int64_t i = 0; i < n; i++) {
            int64_t id = rows ? rows[i] : i; /* NULL: every row */
            int k = (int)(id % P->S);
            DT_CHECK(room(T, k, T->nids[k] + 1));
            float *row = T->rowbuf[k] + T->nids[k] * T->dim;
            memcpy(row, g + T->offset + id * T->dim, (size_t)T->dim * sizeof(float));
            if (s->cfg.micro_batches > 1)
                dt_vec_scale(row, 1.0f / (float)s->cfg.micro_batches, T->dim);
            T->ids[k][T->nids[k]++] = id;
        }
        for (int k = 0; k < P->S; k++) {
            if (!T->nids[k])
                continue;
            int r = server_rank(P, k);
            DT_CHECK(send_hdr(P, k, ps_make(PS_PUSH_ROWS, P->clock, t, T->nids[k], ps_bits(lr))));
            int i = P->nsend++;
            DT_CHECK(dt_isend(T->ids[k], (size_t)T->nids[k], DT_I64, r, PS_TAG_DATA, P->c, &P->send[i]));
            DT_CHECK(send_data(P, k, T->rowbuf[k], T->nids[k] * T->dim));
            P->sent += (uint64_t)T->nids[k] * sizeof(int64_t);
        }
    }
    return DT_OK;
}

/* ---- pulls ---- */

static dt_status pull_start(dt_strategy *s, ps_worker *P)
{
    float *v = dt_params_values(dt_model_params(s->model));
    for (int k = 0; k < P->S; k++) {
        DT_CHECK(dt_irecv(&P->rep[k], PS_HEADER_WORDS, DT_I64, server_rank(P, k), PS_TAG_REP, P->c, &P->rep_req[k]));
        DT_CHECK(dt_irecv(v + P->lo[k], (size_t)P->n[k], DT_F32, server_rank(P, k), PS_TAG_REPDATA, P->c,
                          &P->val_req[k]));
        DT_CHECK(send_hdr(P, k, ps_make(PS_PULL, P->clock, 0, 0, 0)));
    }
    return DT_OK;
}

/* The servers' answers to the pulls: the synchronisation point. */
static dt_status pull_headers(ps_worker *P)
{
    int64_t t0 = dt__now_ns();
    for (int k = 0; k < P->S; k++) {
        if (!P->rep_req[k])
            continue;
        dt_status st = dt_wait(P->rep_req[k], NULL);
        P->rep_req[k] = NULL;
        DT_CHECK(st);
        P->received += sizeof(ps_header);
        if (ps_op_of(&P->rep[k]) == PS_ERROR)
            return server_error(P, k, &P->rep[k]);
        if (ps_op_of(&P->rep[k]) != PS_VALUES || P->rep[k].clock != P->clock)
            return dt__fail(DT_ERR_INVALID, "parameter server %d answered a pull for step %lld with op %d for step %lld",
                            k, (long long)P->clock, ps_op_of(&P->rep[k]), (long long)P->rep[k].clock);
        if (k == 0 && P->pc.sync == DT_PS_BSP) /* the norm of the mean gradient the servers applied */
            P->norm = (float)ps_double(P->rep[k].a);
    }
    P->exposed += since(t0);
    return DT_OK;
}

static dt_status pull_wait(ps_worker *P, int k)
{
    if (!P->val_req[k] || P->failed)
        return DT_OK;
    if (P->rep_req[k]) /* its header first: an error instead of values must be seen */
        DT_CHECK(pull_headers(P));
    int64_t t0 = dt__now_ns();
    dt_status st = dt_wait(P->val_req[k], NULL);
    P->val_req[k] = NULL;
    P->exposed += since(t0);
    P->received += (uint64_t)P->n[k] * sizeof(float);
    return st == DT_OK ? st : dt__fail(st, "parameter server %d: pulling step %lld's parameters: %s", k,
                                       (long long)P->clock, dt_last_error());
}

static dt_status pull_wait_all(ps_worker *P)
{
    for (int k = 0; k < P->S; k++)
        DT_CHECK(pull_wait(P, k));
    return DT_OK;
}

/* ---- pushes ---- */

static dt_status push_block(dt_strategy *s, ps_worker *P, int b)
{
    P->pushed[b] = true;
    int64_t lo = P->blo[b], hi = P->bhi[b];
    if (hi <= lo)
        return DT_OK;
    float *g = dt_params_grads(dt_model_params(s->model));
    if (s->cfg.micro_batches > 1) /* the mean over the micro-batches */
        dt_vec_scale(g + lo, 1.0f / (float)s->cfg.micro_batches, hi - lo);
    for (int k = 0; k < P->S; k++) {
        int64_t a = lo > P->lo[k] ? lo : P->lo[k], e = hi < P->lo[k] + P->n[k] ? hi : P->lo[k] + P->n[k];
        if (e <= a)
            continue;
        DT_CHECK(send_hdr(P, k, ps_make(PS_PUSH, P->clock, a, e - a, 0)));
        DT_CHECK(send_data(P, k, g + a, e - a));
    }
    return DT_OK;
}

static dt_status ps_hook(void *user, dt_hook_point at, int b, dt_ctx *ctx)
{
    dt_strategy *s = user;
    ps_worker *P = s->impl;
    switch (at) {
    case DT_BEFORE_FORWARD:
        if (b == 0 && P->ntables) { /* the tables' rows the input names, after the answer to the last pull (which
                                     * may be a refusal: then no row pull would ever be answered) */
            DT_CHECK(pull_headers(P));
            DT_CHECK(pull_rows(s, P, ctx->input));
        }
        for (int k = 0; k < P->S; k++)
            if (P->uses[(size_t)b * (size_t)P->S + (size_t)k])
                DT_CHECK(pull_wait(P, k));
        return DT_OK;
    case DT_BEFORE_BACKWARD:
        if (b == P->nb - 1) { /* a backward pass begins */
            P->backwards++;
            dt__ready_groups_reset(&P->ready);
        }
        return DT_OK;
    default: /* (a block's push leaves from ps_ready) */
        return DT_OK;
    }
}

/* A gradient-ready event: the last of block b's own parameters pushes the
 * block in the last micro-batch (blocks without any push at the update). */
static dt_status ps_ready(void *user, int param)
{
    dt_strategy *s = user;
    ps_worker *P = s->impl;
    int b = dt__ready_groups_mark(&P->ready, param);
    return b >= 0 && P->backwards >= s->cfg.micro_batches && !P->pushed[b] ? push_block(s, P, b) : DT_OK;
}

/* The groups for ps_ready: block b's own parameters. */
static dt_status ready_blocks(dt_strategy *s, ps_worker *P)
{
    dt_params *p = dt_model_params(s->model);
    int np = dt_params_count(p), *block_of = malloc((size_t)(np ? np : 1) * sizeof *block_of);
    if (!block_of)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int k = 0; k < np; k++)
        block_of[k] = -1;
    for (int b = 0; b < P->nb; b++) {
        int first, count;
        dt_model_block_params(s->model, b, &first, &count);
        for (int k = first; k < first + count; k++)
            block_of[k] = b;
    }
    dt_status st = dt__ready_groups_init(&P->ready, np, P->nb, block_of);
    free(block_of);
    return st;
}

/* ---- the update ---- */

static dt_status ps_update(dt_strategy *s, float lr, float max_norm, float *norm)
{
    ps_worker *P = s->impl;
    if (P->failed)
        return dt__fail(DT_ERR_INVALID, "parameter server: an earlier request was refused");
    for (int b = 0; b < P->nb; b++) /* blocks whose backward did not run in the last micro-batch */
        if (!P->pushed[b])
            DT_CHECK(push_block(s, P, b));
    DT_CHECK(push_rows(s, P, lr));
    for (int k = 0; k < P->S; k++)
        DT_CHECK(send_hdr(P, k, ps_make(PS_COMMIT, P->clock, ps_bits(lr), ps_bits(max_norm), 0)));
    DT_CHECK(wait_sends(P));
    if (P->pc.sync != DT_PS_BSP) { /* the norm of this worker's own gradient (the tables' touched rows) */
        dt_params *p = dt_model_params(s->model);
        const float *g = dt_params_grads(p);
        double sumsq = dt_vec_sumsq(g + P->dense_from, P->P - P->dense_from);
        for (int t = 0; t < P->ntables; t++)
            for (int k = 0; k < P->S; k++)
                sumsq += dt_vec_sumsq(P->t[t].rowbuf[k], P->t[t].nids[k] * P->t[t].dim);
        P->norm = (float)sqrt(sumsq);
    }
    P->clock++;
    P->backwards = 0;
    memset(P->pushed, 0, (size_t)P->nb * sizeof *P->pushed);
    DT_CHECK(pull_start(s, P));
    DT_CHECK(pull_headers(P));
    DT_CHECK(wait_sends(P)); /* the pull requests themselves */
    *norm = P->norm;
    P->last_exposed = P->exposed;
    P->exposed = 0;
    return DT_OK;
}

static dt_status ps_sync(dt_strategy *s) { return pull_wait_all(s->impl); }

static void ps_timing(const dt_strategy *s, double *comm, double *exposed)
{
    const ps_worker *P = s->impl;
    *comm = *exposed = P->last_exposed; /* what the step waited for */
}

/* A receive that will never be answered (after a refusal) is withdrawn. */
static void drop(dt_request **r)
{
    if (*r && dt_cancel(*r) != DT_OK)
        dt_wait(*r, NULL); /* matched already: it lands */
    *r = NULL;
}

static void ps_destroy(dt_strategy *s)
{
    ps_worker *P = s->impl;
    if (!P)
        return;
    if (s->model) {
        dt_model_remove_hook(s->model, P->hook_sub);
        dt_params_unsubscribe(dt_model_params(s->model), P->ready_sub);
    }
    dt__ready_groups_free(&P->ready);
    for (int k = 0; P->failed && P->lo && k < P->S; k++) {
        drop(&P->rep_req[k]);
        drop(&P->val_req[k]);
        if (P->rrq) {
            drop(&P->rrq[2 * k]);
            drop(&P->rrq[2 * k + 1]);
        }
    }
    if (P->failed)
        wait_sends(P);
    if (!P->failed && P->lo && pull_wait_all(P) == DT_OK && pull_headers(P) == DT_OK) {
        for (int k = 0; k < P->S; k++)
            if (send_hdr(P, k, ps_make(PS_BYE, P->clock, 0, 0, 0)) != DT_OK)
                break;
        wait_sends(P);
    }
    for (int t = 0; P->t && t < P->ntables; t++) {
        ps_table *T = &P->t[t];
        for (int k = 0; k < P->S; k++) {
            free(T->ids ? T->ids[k] : NULL);
            free(T->rowbuf ? T->rowbuf[k] : NULL);
        }
        free(T->ids);
        free(T->rowbuf);
        free(T->nids);
        free(T->cap);
        free(T->stamp);
    }
    free(P->t);
    free(P->rrep);
    free(P->rrq);
    free(P->lo);
    free(P->n);
    free(P->blo);
    free(P->bhi);
    free(P->uses);
    free(P->pushed);
    free(P->rep);
    free(P->rep_req);
    free(P->val_req);
    free(P->hdr);
    free(P->send);
    free(P);
}

dt_status dt__ps_save(dt_strategy *s, const dt__save_args *a); /* ps/save.c */

static void ps_io(const dt_strategy *s, dt_strategy_io *out)
{
    out->sent = ((const ps_worker *)s->impl)->sent;
    out->received = ((const ps_worker *)s->impl)->received;
}

static const dt__strategy_ops ps_ops = {.name = "ps",
                                        .no_optimizer = true,
                                        .update = ps_update,
                                        .sync = ps_sync,
                                        .timing = ps_timing,
                                        .save = dt__ps_save,
                                        .io = ps_io,
                                        .destroy = ps_destroy};

/* ---- joining and snapshots ---- */

/* Rows k, k + S, ... of table t of a flat array laid out as the registry
 * (values, or an optimizer's state buffer) to server k (send) or from it. */
static dt_status move_table_rows(ps_worker *P, int t, int k, float *flat, bool send)
{
    ps_table *T = &P->t[t];
    int64_t here = ps_rows_here(T->rows, P->S, k);
    DT_CHECK(room(T, k, here));
    float *buf = T->rowbuf[k], *base = flat + T->offset;
    if (send)
        for (int64_t j = 0; j < here; j++)
            memcpy(buf + j * T->dim, base + (k + j * P->S) * T->dim, (size_t)T->dim * sizeof(float));
    int r = server_rank(P, k);
    DT_CHECK(send ? dt_send(buf, (size_t)(here * T->dim), DT_F32, r, PS_TAG_DATA, P->c)
                  : dt_recv(buf, (size_t)(here * T->dim), DT_F32, r, PS_TAG_REPDATA, P->c, NULL));
    *(send ? &P->sent : &P->received) += (uint64_t)(here * T->dim) * sizeof(float);
    if (!send)
        for (int64_t j = 0; j < here; j++)
            memcpy(base + (k + j * P->S) * T->dim, buf + j * T->dim, (size_t)T->dim * sizeof(float));
    return DT_OK;
}

/* The layout check with every server, then worker 0's values (and state). */
static dt_status join(dt_strategy *s, ps_worker *P)
{
    dt_params *p = dt_model_params(s->model);
    int np = dt_params_count(p);
    int64_t *numel = malloc((size_t)(np ? np : 1) * sizeof *numel);
    if (!numel)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < np; i++)
        numel[i] = dt_params_info(p, i)->numel;
    dt_status st = DT_OK;
    for (int k = 0; st == DT_OK && k < P->S; k++) {
        st = send_hdr(P, k, ps_make(PS_HELLO, 0, P->P, (int64_t)dt__ps_layout_hash(p), np));
        if (st == DT_OK)
        {
            int i = P->nsend++;
            st = dt_isend(numel, (size_t)np, DT_I64, server_rank(P, k), PS_TAG_DATA, P->c, &P->send[i]);
        }
    }
    for (int k = 0; st == DT_OK && k < P->S; k++) {
        ps_header h;
        st = dt_recv(&h, PS_HEADER_WORDS, DT_I64, server_rank(P, k), PS_TAG_REP, P->c, NULL);
        if (st == DT_OK && ps_op_of(&h) == PS_ERROR)
            st = server_error(P, k, &h);
        else if (st == DT_OK && ps_op_of(&h) != PS_OK)
            st = dt__fail(DT_ERR_INVALID, "parameter server %d: answered joining with op %d", k, ps_op_of(&h));
    }
    dt_status w = wait_sends(P);
    free(numel);
    DT_CHECK(st);
    DT_CHECK(w);
    if (P->rank != 0)
        return DT_OK;
    dt_optim_state state[4];
    int ns = P->pc.resume_state ? dt_optimizer_state_buffers(P->pc.resume_state, state, 4) : 0;
    int64_t steps = P->pc.resume_state ? dt_optimizer_steps(P->pc.resume_state) : 0;
    if (P->pc.resume_state && dt_optimizer_numel(P->pc.resume_state) != P->P)
        return dt__fail(DT_ERR_INVALID, "parameter server: the resumed optimizer holds %lld parameters, the model %lld",
                        (long long)dt_optimizer_numel(P->pc.resume_state), (long long)P->P);
    const float *v = dt_params_values(p);
    for (int k = 0; k < P->S; k++) {
        DT_CHECK(dt_send(&(ps_header){PS_MAGIC | PS_INIT, 0, P->n[k], ns, steps, 0, 0, 0}, PS_HEADER_WORDS, DT_I64,
                         server_rank(P, k), PS_TAG_REQ, P->c));
        DT_CHECK(dt_send(v + P->lo[k], (size_t)P->n[k], DT_F32, server_rank(P, k), PS_TAG_DATA, P->c));
        for (int i = 0; i < ns; i++)
            DT_CHECK(dt_send(state[i].data + P->lo[k], (size_t)P->n[k], DT_F32, server_rank(P, k), PS_TAG_DATA, P->c));
        P->sent += (uint64_t)(1 + ns) * (uint64_t)P->n[k] * sizeof(float);
        for (int t = 0; t < P->ntables; t++) /* each table's rows k, k + S, ..., then their state */
            for (int a = -1; a < ns; a++)
                DT_CHECK(move_table_rows(P, t, k, a < 0 ? (float *)v : state[a].data, true));
    }
    return DT_OK;
}

/* Each block's own range, and which servers' ranges it reads (its own
 * parameters and the tied ones it uses). */
static dt_status block_ranges(dt_strategy *s, ps_worker *P)
{
    dt_model *m = s->model;
    dt_params *p = dt_model_params(m);
    int64_t covered = 0, lo_block, hi_block;
    int mlo, mhi;
    dt_model_block_range(m, &mlo, &mhi);
    const dt_shared_param *sh;
    int ns = dt_model_shared_params(m, &sh);
    for (int b = 0; b < P->nb; b++) {
        int first, count;
        dt_model_block_params(m, b, &first, &count);
        lo_block = hi_block = 0;
        if (count) { /* its dense parameters (the tables at the front move by rows) */
            lo_block = dt_params_info(p, first)->offset;
            hi_block = dt_params_info(p, first + count - 1)->offset + dt_params_info(p, first + count - 1)->numel;
            lo_block = lo_block > P->dense_from ? lo_block : P->dense_from;
            hi_block = hi_block > lo_block ? hi_block : lo_block;
        }
        P->blo[b] = lo_block;
        P->bhi[b] = hi_block;
        covered += hi_block - lo_block;
        for (int k = 0; k < P->S; k++) {
            bool use = hi_block > P->lo[k] && lo_block < P->lo[k] + P->n[k];
            for (int j = 0; j < ns; j++) {
                const dt_param_info *in = dt_params_info(p, sh[j].param);
                bool mine = sh[j].first_block == mlo + b || sh[j].last_block == mlo + b;
                use |= mine && in->offset + in->numel > P->lo[k] && in->offset < P->lo[k] + P->n[k];
            }
            P->uses[(size_t)b * (size_t)P->S + (size_t)k] = use;
        }
    }
    if (covered != P->P - P->dense_from)
        return dt__fail(DT_ERR_INVALID, "parameter server: the model's blocks hold %lld of its %lld dense parameters",
                        (long long)covered, (long long)(P->P - P->dense_from));
    int first0 = 0, count0 = 0;
    if (P->nb > 0)
        dt_model_block_params(m, 0, &first0, &count0);
    if (P->ntables && (P->nb == 0 || first0 != 0 || count0 < P->ntables))
        return dt__fail(DT_ERR_INVALID, "parameter server: the row-sparse tables must belong to the first block (the "
                                        "rows its input names are pulled before it runs)");
    return DT_OK;
}

dt_status dt_strategy_ps_create(dt_model *m, dt_comm *c, const dt_ps_config *pc, const dt_strategy_config *cfg,
                                dt_strategy **out)
{
    if (!m || !c || !pc || !cfg || !out)
        return dt__fail(DT_ERR_INVALID, "strategy ps: %s is NULL", !m ? "the model" : !c ? "the communicator"
                                                                   : !pc ? "the ps config" : !cfg ? "the config" : "out");
    if (cfg->micro_batches < 1 || !(cfg->grad_clip >= 0))
        return dt__fail(DT_ERR_INVALID, "strategy ps: micro_batches %d (>= 1), grad_clip %g (>= 0)", cfg->micro_batches,
                        cfg->grad_clip);
    if (cfg->grad_clip > 0 && pc->sync != DT_PS_BSP)
        return dt__fail(DT_ERR_INVALID, "strategy ps: grad_clip needs sync bsp (%s applies each worker's push alone, "
                                        "with no global norm to clip to)", dt_ps_sync_name(pc->sync));
    if (cfg->tp)
        return dt__fail(DT_ERR_INVALID, "strategy ps: tensor-parallel shards are not served yet (tp)");
    if (dt_ps_server_index(pc, c) >= 0)
        return dt__fail(DT_ERR_INVALID, "strategy ps: rank %d serves (the last %d ranks); call dt_ps_serve there",
                        dt_comm_rank(c), pc->servers);
    dt_params *p = dt_model_params(m);
    if (!dt_params_values(p) || !dt_params_grads(p))
        return dt__fail(DT_ERR_INVALID, "strategy ps: the model must hold its parameters and gradients");
    dt_strategy *s = NULL;
    DT_CHECK(dt__strategy_new(&ps_ops, sizeof(ps_worker), m, NULL, cfg, &s));
    ps_worker *P = s->impl;
    P->c = c;
    P->pc = *pc;
    P->S = pc->servers;
    P->W = dt_comm_size(c) - pc->servers;
    P->rank = dt_comm_rank(c);
    s->key_group = (uint32_t)P->rank;
    P->nb = dt_model_num_layers(m);
    P->P = dt_params_numel(p);
    dt_status st = dt__ps_tables(p, &P->ntables, &P->dense_from);
    P->cap = 2 * (P->nb + 2) * P->S + 4 * (P->ntables + 1) * P->S + 4;
    if (st == DT_OK && P->P - P->dense_from < P->S && !P->ntables)
        st = dt__fail(DT_ERR_INVALID, "parameter server: %d servers for %lld parameters", P->S, (long long)P->P);
    if (st == DT_OK &&
        (!(P->lo = calloc((size_t)P->S, sizeof *P->lo)) || !(P->n = calloc((size_t)P->S, sizeof *P->n)) ||
         !(P->blo = calloc((size_t)P->nb + 1, sizeof *P->blo)) || !(P->bhi = calloc((size_t)P->nb + 1, sizeof *P->bhi)) ||
         !(P->uses = calloc((size_t)(P->nb + 1) * (size_t)P->S, 1)) ||
         !(P->pushed = calloc((size_t)P->nb + 1, sizeof *P->pushed)) ||
         !(P->rep = calloc((size_t)P->S, sizeof *P->rep)) || !(P->rep_req = calloc((size_t)P->S, sizeof *P->rep_req)) ||
         !(P->val_req = calloc((size_t)P->S, sizeof *P->val_req)) ||
         !(P->hdr = calloc((size_t)P->cap, sizeof *P->hdr)) || !(P->send = calloc((size_t)P->cap, sizeof *P->send))))
        st = dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int k = 0; st == DT_OK && k < P->S; k++)
        dt__ps_dense_range(P->P, P->dense_from, P->S, k, &P->lo[k], &P->n[k]);
    if (st == DT_OK && P->ntables &&
        (!(P->t = calloc((size_t)P->ntables, sizeof *P->t)) || !(P->rrep = calloc((size_t)P->S, sizeof *P->rrep)) ||
         !(P->rrq = calloc(2 * (size_t)P->S, sizeof *P->rrq))))
        st = dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int t = 0; st == DT_OK && t < P->ntables; t++) {
        ps_table *T = &P->t[t];
        const dt_param_info *in = dt_params_info(p, t);
        T->param = t;
        T->rows = in->shape[0];
        T->dim = in->numel / in->shape[0];
        T->offset = in->offset;
        if (!(T->stamp = calloc((size_t)T->rows, sizeof *T->stamp)) || !(T->ids = calloc((size_t)P->S, sizeof *T->ids)) ||
            !(T->nids = calloc((size_t)P->S, sizeof *T->nids)) || !(T->rowbuf = calloc((size_t)P->S, sizeof *T->rowbuf)) ||
            !(T->cap = calloc((size_t)P->S, sizeof *T->cap)))
            st = dt__fail(DT_ERR_NOMEM, "out of memory for table %s", in->name);
    }
    if (st == DT_OK)
        st = block_ranges(s, P);
    if (st == DT_OK)
        st = join(s, P);
    P->sent = P->received = 0; /* the traffic of the steps, not of worker 0's initial values */
    if (st == DT_OK)
        st = pull_start(s, P); /* step 0's parameters: worker 0's, from the servers */
    if (st == DT_OK)
        st = wait_sends(P);
    if (st == DT_OK)
        st = ready_blocks(s, P);
    if (st == DT_OK)
        st = dt_model_add_hook(m, ps_hook, s, &P->hook_sub);
    if (st == DT_OK)
        st = dt_params_subscribe_grad_ready(p, ps_ready, s, &P->ready_sub);
    if (st != DT_OK)
        P->failed = true; /* ps_destroy drops what is in flight */
    return dt__strategy_finish(s, st, out);
}

dt_status dt_strategy_ps_snapshot(dt_strategy *s, float *values, dt_optimizer *whole)
{
    if (!s || s->ops != &ps_ops || !values || !whole)
        return dt__fail(DT_ERR_INVALID, "ps_snapshot: %s", !s || s->ops != &ps_ops ? "not a parameter-server strategy"
                                                         : !values ? "values is NULL" : "whole is NULL");
    ps_worker *P = s->impl;
    if (P->rank != 0)
        return dt__fail(DT_ERR_INVALID, "ps_snapshot: only worker 0 takes snapshots (this is worker %d)", P->rank);
    if (dt_optimizer_numel(whole) != P->P)
        return dt__fail(DT_ERR_INVALID, "ps_snapshot: the optimizer holds %lld parameters, the model %lld",
                        (long long)dt_optimizer_numel(whole), (long long)P->P);
    DT_CHECK(pull_wait_all(P)); /* this step's values come first on the same tag */
    dt_optim_state st[4];
    int ns = dt_optimizer_state_buffers(whole, st, 4);
    for (int k = 0; k < P->S; k++)
        DT_CHECK(send_hdr(P, k, ps_make(PS_SNAPSHOT, P->clock, 0, 0, 0)));
    DT_CHECK(wait_sends(P));
    int64_t steps = 0;
    for (int k = 0; k < P->S; k++) {
        ps_header h;
        int r = server_rank(P, k);
        DT_CHECK(dt_recv(&h, PS_HEADER_WORDS, DT_I64, r, PS_TAG_REP, P->c, NULL));
        if (ps_op_of(&h) == PS_ERROR)
            return server_error(P, k, &h);
        if (ps_op_of(&h) != PS_STATE || h.a != ns)
            return dt__fail(DT_ERR_INVALID, "parameter server %d: a snapshot of %lld state buffers (op %d), the "
                                            "optimizer here keeps %d", k, (long long)h.a, ps_op_of(&h), ns);
        steps = h.b;
        DT_CHECK(dt_recv(values + P->lo[k], (size_t)P->n[k], DT_F32, r, PS_TAG_REPDATA, P->c, NULL));
        for (int i = 0; i < ns; i++)
            DT_CHECK(dt_recv(st[i].data + P->lo[k], (size_t)P->n[k], DT_F32, r, PS_TAG_REPDATA, P->c, NULL));
        P->received += (uint64_t)(1 + ns) * (uint64_t)P->n[k] * sizeof(float) + sizeof h;
        for (int t = 0; t < P->ntables; t++)
            for (int a = -1; a < ns; a++)
                DT_CHECK(move_table_rows(P, t, k, a < 0 ? values : st[a].data, false));
    }
    dt_optimizer_set_steps(whole, steps);
    return DT_OK;
}

void dt_strategy_ps_traffic(const dt_strategy *s, uint64_t *sent, uint64_t *received)
{
    dt_strategy_io io;
    dt_strategy_io_bytes(s && s->ops == &ps_ops ? s : NULL, &io);
    *sent = io.sent;
    *received = io.received;
}
