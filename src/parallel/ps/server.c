/* A parameter server (ps.h): holds its range of the parameters and the
 * optimizer over it, and serves the workers' requests (protocol.h) in the
 * order they arrive from any worker (dt_waitany over one posted header
 * receive per worker).  Pushes arrive block by block and are checked
 * against the range, the worker's clock and the pieces already received;
 * a push is complete at the worker's COMMIT, which carries the learning
 * rate.  BSP sums the workers' pushes and updates once with their mean;
 * ASP and SSP update with each push as it completes.  A pull (or worker
 * 0's snapshot) whose synchronisation condition does not hold yet waits
 * in the worker's queue and is answered as soon as it does. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "parallel/ps/protocol.h"

#define MAX_DEFERRED 4
#define MAX_STATE 4

typedef struct {
    ps_header hdr;        /* the request being received */
    ps_header rep;        /* the reply being sent */
    float *reply;         /* the values being sent (a copy: updates go on while a slow worker takes them) */
    dt_request *out[2];   /* the reply's header and values in flight */
    int64_t clock;        /* pushes completed */
    int64_t got;          /* elements of the current push received */
    int64_t (*piece)[2];  /* the current push's pieces [lo, hi) */
    int npieces, cap;
    float *acc;           /* ASP, SSP: the current push */
    ps_header deferred[MAX_DEFERRED];
    int64_t deferred_at[MAX_DEFERRED];
    int64_t *deferred_ids[MAX_DEFERRED]; /* a row pull's ids */
    int ndeferred;
    ps_header rows_rep;   /* a row pull's answer: its header, its rows (a copy), in flight */
    float *rows_reply;
    int64_t rows_cap;
    dt_request *rows_out[2];
    bool joined, gone;
} worker;

/* A row-sparse table's rows on this server (protocol.h): local row j is the
 * table's row k + j x S. */
typedef struct {
    int param;
    int64_t rows, dim, here; /* the table's rows, a row's length, the rows here */
    float *values, *grad;    /* here x dim */
    dt_optimizer *o;
    bool exact;              /* its optimizer may update the touched rows alone (dt_optimizer_rows_exact) */
    int64_t *touched, ntouched; /* BSP: local rows with gradients summed this step */
    uint8_t *mark;           /* BSP: per local row, in touched */
    uint32_t *stamp;         /* per local row: the last request that named it (repeats in one are refused) */
    uint32_t tick;
    int64_t *ids;            /* a request's ids (here at most) */
    float *buf;              /* a push's rows (here x dim at most) */
} table;

typedef struct {
    dt_comm *c, *group;
    const dt_ps_config *pc;
    dt_params *p;
    int W, k, active;
    int64_t P, lo, n;
    float *values, *sum;
    dt_optimizer *o;
    int64_t applied;      /* BSP: updates made */
    int complete;         /* BSP: workers whose push of this clock is complete */
    double lr, clip;      /* BSP: of the pushes being summed */
    float norm;           /* BSP: the last update's gradient norm */
    bool initialized;
    worker *w;
    dt_request **hreq;    /* one header receive per worker */
    FILE *log;
    int byes;
    char refused[512]; /* the first refusal, for the server's own error */
    table *t;
    int ntables;
} server;

static dt_status bsp_try(server *S);

/* Worker w's last reply has left (its buffers may be reused). */
static dt_status wait_requests(dt_request **r, int n)
{
    dt_status st = DT_OK;
    for (int i = 0; i < n; i++)
        if (r[i]) {
            dt_status q = dt_wait(r[i], NULL);
            r[i] = NULL;
            st = st != DT_OK ? st : q;
        }
    return st;
}

static dt_status wait_worker(server *S, int w)
{
    dt_status st = wait_requests(S->w[w].out, 2);
    dt_status r = wait_requests(S->w[w].rows_out, 2);
    return st != DT_OK ? st : r;
}

/* Refuse worker w's request: it gets PS_ERROR and the reason; the server's
 * state is untouched and the worker's messages are no longer read (its call
 * fails, and with it the worker). */
static dt_status refuse(server *S, int w, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static dt_status refuse(server *S, int w, const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    int len = snprintf(why, sizeof why, "server %d refused worker %d: ", S->k, w);
    vsnprintf(why + len, sizeof why - (size_t)len, fmt, ap);
    va_end(ap);
    if (!S->refused[0])
        snprintf(S->refused, sizeof S->refused, "%s", why);
    DT_CHECK(wait_worker(S, w));
    S->w[w].rep = ps_make(PS_ERROR, 0, (int64_t)strlen(why), 0, 0);
    DT_CHECK(dt_send(&S->w[w].rep, PS_HEADER_WORDS, DT_I64, w, PS_TAG_REP, S->c));
    DT_CHECK(dt_send(why, strlen(why), DT_U8, w, PS_TAG_ERR, S->c));
    S->w[w].gone = true; /* nothing more is read from it, and nothing it pushed this step is kept */
    dt_vec_zero(S->w[w].acc, S->n);
    S->active--;
    return bsp_try(S);
}

static int64_t slowest(const server *S)
{
    int64_t m = INT64_MAX;
    for (int i = 0; i < S->W; i++)
        if (!S->w[i].gone)
            m = S->w[i].clock < m ? S->w[i].clock : m;
    return m == INT64_MAX ? 0 : m;
}

/* ---- updates ---- */

/* A table's update of its local rows rows[0..n) (their gradients in T->grad),
 * then those gradients zeroed; a table whose optimizer moves untouched rows
 * too (momentum, decay, AdamW) updates every row here, as a dense one. */
static dt_status table_update(table *T, const int64_t *rows, int64_t n, double lr)
{
    dt_status st = T->exact ? dt_optimizer_update_rows(T->o, T->values, T->grad, 0, T->dim, rows, n, T->here, (float)lr)
                            : dt_optimizer_update_range(T->o, T->values, T->grad, 0, T->here * T->dim, (float)lr);
    dt_optimizer_end_step(T->o);
    for (int64_t i = 0; i < n; i++)
        dt_vec_zero(T->grad + rows[i] * T->dim, T->dim);
    return st;
}

/* An update of the dense range with grad scaled by `scale` (ASP, SSP: one
 * push; BSP, reduce_norm: the sum of every worker's, and with it this step's
 * touched rows of the tables, clipped to the norm over every server). */
static float apply(server *S, float *grad, double scale, double lr, double clip, bool reduce_norm, dt_status *st)
{
    dt_vec_scale(grad, (float)scale, S->n);
    double sumsq = dt_vec_sumsq(grad, S->n);
    for (int t = 0; reduce_norm && t < S->ntables; t++)
        for (int64_t i = 0; i < S->t[t].ntouched; i++) {
            float *g = S->t[t].grad + S->t[t].touched[i] * S->t[t].dim;
            dt_vec_scale(g, (float)scale, S->t[t].dim);
            sumsq += dt_vec_sumsq(g, S->t[t].dim);
        }
    if (reduce_norm && (*st = dt_allreduce(&sumsq, &sumsq, 1, DT_F64, DT_SUM, S->group)) != DT_OK)
        return 0;
    float norm = (float)sqrt(sumsq), c = clip > 0 && norm > clip ? (float)(clip / (norm + 1e-6)) : 1.0f;
    if (c != 1.0f) { /* torch's clip_grad_norm_, here in f64 (optim/clip.h's dt__clip_coefficient is f32) */
        dt_vec_scale(grad, c, S->n);
        for (int t = 0; t < S->ntables; t++)
            for (int64_t i = 0; i < S->t[t].ntouched; i++)
                dt_vec_scale(S->t[t].grad + S->t[t].touched[i] * S->t[t].dim, c, S->t[t].dim);
    }
    *st = dt_optimizer_step(S->o, S->values, grad, S->n, (float)lr); /* replies send copies */
    dt_vec_zero(grad, S->n);
    for (int t = 0; reduce_norm && t < S->ntables; t++) {
        table *T = &S->t[t];
        dt_status r = table_update(T, T->touched, T->ntouched, lr);
        *st = *st != DT_OK ? *st : r;
        for (int64_t i = 0; i < T->ntouched; i++)
            T->mark[T->touched[i]] = 0;
        T->ntouched = 0;
    }
    return norm;
}

/* BSP: once every worker still in the job has pushed this step, one
 * update with their mean (also when the last one missing leaves). */
static dt_status bsp_try(server *S)
{
    if (S->pc->sync != DT_PS_BSP || S->complete == 0 || S->complete < S->active)
        return DT_OK;
    dt_vec_zero(S->sum, S->n); /* the workers' pushes summed in worker order: the same bits whatever order they came in */
    for (int w = 0; w < S->W; w++) {
        if (!S->w[w].gone)
            dt_vec_axpy(S->sum, 1.0f, S->w[w].acc, S->n);
        dt_vec_zero(S->w[w].acc, S->n);
    }
    dt_status st = DT_OK;
    S->norm = apply(S, S->sum, 1.0 / S->complete, S->lr, S->clip, true, &st);
    S->complete = 0;
    S->applied++;
    return st;
}

/* Worker w's push of its clock is complete. */
static dt_status push_complete(server *S, int w, double lr, double clip)
{
    worker *W = &S->w[w];
    W->clock++;
    W->got = 0;
    W->npieces = 0;
    dt_status st = DT_OK;
    if (S->pc->sync != DT_PS_BSP) {
        apply(S, W->acc, 1.0 / S->W, lr, 0, false, &st);
        return st;
    }
    S->lr = lr;
    S->clip = clip;
    S->complete++;
    return bsp_try(S);
}

static dt_status on_push(server *S, int w, const ps_header *h)
{
    worker *W = &S->w[w];
    int64_t at = h->a, count = h->b;
    if (h->clock != W->clock)
        return refuse(S, w, "a push for step %lld while at step %lld", (long long)h->clock, (long long)W->clock);
    if (count <= 0 || at < S->lo || count > S->n || at > S->lo + S->n - count)
        return refuse(S, w, "a push of %lld gradients at element %lld (tensor %s) outside this server's range "
                            "[%lld, %lld)", (long long)count, (long long)at, dt__ps_tensor_at(S->p, at),
                      (long long)S->lo, (long long)(S->lo + S->n));
    for (int i = 0; i < W->npieces; i++)
        if (at < W->piece[i][1] && at + count > W->piece[i][0])
            return refuse(S, w, "a push of %lld gradients at element %lld (tensor %s) overlaps one already "
                                "received for step %lld", (long long)count, (long long)at,
                          dt__ps_tensor_at(S->p, at), (long long)h->clock);
    if (W->npieces == W->cap) {
        int cap = W->cap ? 2 * W->cap : 16;
        void *q = realloc(W->piece, (size_t)cap * sizeof *W->piece);
        if (!q)
            return dt__fail(DT_ERR_NOMEM, "parameter server: out of memory");
        W->piece = q;
        W->cap = cap;
    }
    W->piece[W->npieces][0] = at;
    W->piece[W->npieces++][1] = at + count;
    float *dst = W->acc + (at - S->lo); /* the worker's own until its commit: a refusal leaves no trace */
    size_t got = 0;
    DT_CHECK(dt_recv(dst, (size_t)count, DT_F32, w, PS_TAG_DATA, S->c, &got));
    if ((int64_t)got != count)
        return refuse(S, w, "a push announced %lld gradients at element %lld (tensor %s) and sent %zu",
                      (long long)count, (long long)at, dt__ps_tensor_at(S->p, at), got);
    W->got += count;
    return DT_OK;
}

/* A row request's ids, received and checked: each a row of the table this
 * server holds, none twice; their local rows into T->ids.  *out stays NULL
 * when the request was refused. */
static dt_status take_ids(server *S, int w, const ps_header *h, table **out)
{
    *out = NULL;
    if (h->a < 0 || h->a >= S->ntables)
        return refuse(S, w, "rows of table %lld (the model has %d row-sparse tables)", (long long)h->a, S->ntables);
    table *T = &S->t[h->a];
    const char *name = dt_params_info(S->p, T->param)->name;
    if (h->b < 0 || h->b > T->here)
        return refuse(S, w, "%lld rows of %s (this server holds %lld of its %lld)", (long long)h->b, name,
                      (long long)T->here, (long long)T->rows);
    size_t got = 0;
    DT_CHECK(dt_recv(T->ids, (size_t)h->b, DT_I64, w, PS_TAG_DATA, S->c, &got));
    if ((int64_t)got != h->b)
        return refuse(S, w, "%lld row ids of %s announced, %zu sent", (long long)h->b, name, got);
    if (++T->tick == 0) { /* the stamps wrapped: start over */
        memset(T->stamp, 0, (size_t)T->here * sizeof *T->stamp);
        T->tick = 1;
    }
    int nserv = S->pc->servers;
    for (int64_t i = 0; i < h->b; i++) {
        int64_t id = T->ids[i];
        if (id < 0 || id >= T->rows || id % nserv != S->k)
            return refuse(S, w, "row %lld of %s: %s", (long long)id, name,
                          id < 0 || id >= T->rows ? "outside the table" : "not a row this server holds");
        int64_t j = id / nserv;
        if (T->stamp[j] == T->tick)
            return refuse(S, w, "row %lld of %s named twice in one request", (long long)id, name);
        T->stamp[j] = T->tick;
        T->ids[i] = j;
    }
    *out = T;
    return DT_OK;
}

static dt_status on_push_rows(server *S, int w, const ps_header *h)
{
    worker *W = &S->w[w];
    if (h->clock != W->clock)
        return refuse(S, w, "a push of rows for step %lld while at step %lld", (long long)h->clock, (long long)W->clock);
    table *T = NULL;
    DT_CHECK(take_ids(S, w, h, &T));
    if (!T) /* refused */
        return DT_OK;
    int64_t n = h->b;
    size_t got = 0;
    DT_CHECK(dt_recv(T->buf, (size_t)(n * T->dim), DT_F32, w, PS_TAG_DATA, S->c, &got));
    if ((int64_t)got != n * T->dim)
        return refuse(S, w, "%lld rows of %s announced, %zu gradient values sent", (long long)n,
                      dt_params_info(S->p, T->param)->name, got);
    bool bsp = S->pc->sync == DT_PS_BSP;
    for (int64_t i = 0; i < n; i++) {
        int64_t j = T->ids[i];
        dt_vec_axpy(T->grad + j * T->dim, bsp ? 1.0f : 1.0f / (float)S->W, T->buf + i * T->dim, T->dim);
        if (bsp && !T->mark[j]) {
            T->mark[j] = 1;
            T->touched[T->ntouched++] = j;
        }
    }
    /* ASP, SSP: applied now, alone, as a dense push is at its commit */
    return bsp ? DT_OK : table_update(T, T->ids, n, ps_double(h->c));
}

static dt_status on_commit(server *S, int w, const ps_header *h)
{
    worker *W = &S->w[w];
    if (h->clock != W->clock || W->got != S->n)
        return refuse(S, w, "step %lld committed with %lld of this server's %lld gradients pushed (at step %lld)",
                      (long long)h->clock, (long long)W->got, (long long)S->n, (long long)W->clock);
    return push_complete(S, w, ps_double(h->a), ps_double(h->b));
}

/* ---- replies ---- */

static bool ready(const server *S, const ps_header *h)
{
    if (!S->initialized)
        return false;
    int64_t c = h->clock, low = slowest(S);
    if (ps_op_of(h) == PS_SNAPSHOT)
        return low >= c && (S->pc->sync != DT_PS_BSP || S->applied >= c);
    switch (S->pc->sync) {
    case DT_PS_BSP:
        return S->applied >= c;
    case DT_PS_SSP:
        return low >= c - S->pc->staleness;
    default:
        return true;
    }
}

/* A pull's answer goes from a copy of the values, so that neither an update
 * nor the other workers wait until a slow worker has taken it in; a
 * snapshot (worker 0, for a checkpoint, which waits for it) is sent before
 * the server goes on. */
static dt_status answer(server *S, int w, const ps_header *h, int64_t since_ns, const int64_t *ids)
{
    worker *W = &S->w[w];
    if (ps_op_of(h) == PS_PULL_ROWS) { /* the rows, copied (a later update may change them) */
        const table *T = &S->t[h->a];
        DT_CHECK(wait_requests(W->rows_out, 2));
        if (h->b * T->dim > W->rows_cap) {
            float *b = realloc(W->rows_reply, (size_t)(h->b * T->dim) * sizeof *b);
            if (!b)
                return dt__fail(DT_ERR_NOMEM, "parameter server: out of memory for worker %d's rows", w);
            W->rows_reply = b;
            W->rows_cap = h->b * T->dim;
        }
        for (int64_t i = 0; i < h->b; i++)
            memcpy(W->rows_reply + i * T->dim, T->values + ids[i] * T->dim, (size_t)T->dim * sizeof(float));
        W->rows_rep = ps_make(PS_ROWS, h->clock, h->a, h->b, 0);
        DT_CHECK(dt_isend(&W->rows_rep, PS_HEADER_WORDS, DT_I64, w, PS_TAG_REP, S->c, &W->rows_out[0]));
        return dt_isend(W->rows_reply, (size_t)(h->b * T->dim), DT_F32, w, PS_TAG_REPDATA, S->c, &W->rows_out[1]);
    }
    DT_CHECK(wait_worker(S, w)); /* its last reply's buffers are reused */
    int64_t steps = dt_optimizer_steps(S->o);
    if (ps_op_of(h) == PS_PULL) {
        if (S->log)
            fprintf(S->log, "pull worker %d step %lld slowest %lld waited_ms %.1f\n", w, (long long)h->clock,
                    (long long)slowest(S), (double)(dt__now_ns() - since_ns) / 1e6);
        if (!W->reply && !(W->reply = malloc((size_t)S->n * sizeof(float))))
            return dt__fail(DT_ERR_NOMEM, "parameter server: out of memory for worker %d's answers", w);
        memcpy(W->reply, S->values, (size_t)S->n * sizeof(float));
        W->rep = ps_make(PS_VALUES, h->clock, ps_bits(S->norm), steps, 0);
        DT_CHECK(dt_isend(&W->rep, PS_HEADER_WORDS, DT_I64, w, PS_TAG_REP, S->c, &W->out[0]));
        return dt_isend(W->reply, (size_t)S->n, DT_F32, w, PS_TAG_REPDATA, S->c, &W->out[1]);
    }
    dt_optim_state st[MAX_STATE];
    int ns = dt_optimizer_state_buffers(S->o, st, MAX_STATE);
    W->rep = ps_make(PS_STATE, h->clock, ns, steps, 0);
    DT_CHECK(dt_send(&W->rep, PS_HEADER_WORDS, DT_I64, w, PS_TAG_REP, S->c));
    DT_CHECK(dt_send(S->values, (size_t)S->n, DT_F32, w, PS_TAG_REPDATA, S->c));
    for (int i = 0; i < ns; i++)
        DT_CHECK(dt_send(st[i].data, (size_t)S->n, DT_F32, w, PS_TAG_REPDATA, S->c));
    for (int t = 0; t < S->ntables; t++) { /* each table's rows here, then their state */
        table *T = &S->t[t];
        dt_optim_state ts[MAX_STATE];
        int nt = dt_optimizer_state_buffers(T->o, ts, MAX_STATE);
        if (nt != ns)
            return dt__fail(DT_ERR_INVALID, "parameter server %d: table %s's optimizer keeps %d state buffers, the "
                                            "range's %d", S->k, dt_params_info(S->p, T->param)->name, nt, ns);
        DT_CHECK(dt_send(T->values, (size_t)(T->here * T->dim), DT_F32, w, PS_TAG_REPDATA, S->c));
        for (int i = 0; i < nt; i++)
            DT_CHECK(dt_send(ts[i].data, (size_t)(T->here * T->dim), DT_F32, w, PS_TAG_REPDATA, S->c));
    }
    return DT_OK;
}

/* Answer every queued request whose condition holds now, oldest first per worker. */
static dt_status serve_deferred(server *S)
{
    for (int w = 0; w < S->W; w++) {
        worker *W = &S->w[w];
        while (W->ndeferred && !W->gone && ready(S, &W->deferred[0])) {
            dt_status st = answer(S, w, &W->deferred[0], W->deferred_at[0], W->deferred_ids[0]);
            free(W->deferred_ids[0]);
            memmove(W->deferred, W->deferred + 1, (size_t)(--W->ndeferred) * sizeof *W->deferred);
            memmove(W->deferred_at, W->deferred_at + 1, (size_t)W->ndeferred * sizeof *W->deferred_at);
            memmove(W->deferred_ids, W->deferred_ids + 1, (size_t)W->ndeferred * sizeof *W->deferred_ids);
            DT_CHECK(st);
        }
    }
    return DT_OK;
}

static dt_status on_request(server *S, int w, const ps_header *h)
{
    worker *W = &S->w[w];
    if (h->clock != W->clock)
        return refuse(S, w, "a %s for step %lld while at step %lld", ps_op_of(h) == PS_SNAPSHOT ? "snapshot" : "pull",
                      (long long)h->clock, (long long)W->clock);
    if (ps_op_of(h) == PS_SNAPSHOT && w != 0)
        return refuse(S, w, "a snapshot comes from worker 0 only");
    if (W->ndeferred == MAX_DEFERRED)
        return refuse(S, w, "more than %d requests waiting", MAX_DEFERRED);
    int64_t *ids = NULL;
    if (ps_op_of(h) == PS_PULL_ROWS) { /* its ids now: they follow the header */
        table *T = NULL;
        DT_CHECK(take_ids(S, w, h, &T));
        if (!T)
            return DT_OK;
        if (!(ids = malloc((size_t)(h->b ? h->b : 1) * sizeof *ids)))
            return dt__fail(DT_ERR_NOMEM, "parameter server: out of memory");
        memcpy(ids, T->ids, (size_t)h->b * sizeof *ids);
    }
    W->deferred_ids[W->ndeferred] = ids;
    W->deferred[W->ndeferred] = *h;
    W->deferred_at[W->ndeferred++] = dt__now_ns();
    return DT_OK;
}

/* ---- joining ---- */

static dt_status on_hello(server *S, int w, const ps_header *h)
{
    worker *W = &S->w[w];
    int np = dt_params_count(S->p);
    if (W->joined)
        return refuse(S, w, "joined twice");
    if (h->c != np || h->c < 0 || h->c > 1 << 20)
        return refuse(S, w, "its model has %lld tensors, the servers' %d", (long long)h->c, np);
    int64_t *numel = malloc((size_t)(np ? np : 1) * sizeof *numel);
    if (!numel)
        return dt__fail(DT_ERR_NOMEM, "parameter server: out of memory");
    dt_status st = dt_recv(numel, (size_t)np, DT_I64, w, PS_TAG_DATA, S->c, NULL);
    int bad = -1;
    for (int i = 0; st == DT_OK && bad < 0 && i < np; i++)
        bad = numel[i] == dt_params_info(S->p, i)->numel ? -1 : i;
    int64_t theirs = bad >= 0 ? numel[bad] : 0;
    free(numel);
    DT_CHECK(st);
    if (bad >= 0)
        return refuse(S, w, "its model differs from the servers': tensor %s has %lld elements in worker %d's model "
                            "and %lld in the servers'", dt_params_info(S->p, bad)->name, (long long)theirs, w,
                      (long long)dt_params_info(S->p, bad)->numel);
    if (h->a != S->P || (uint64_t)h->b != dt__ps_layout_hash(S->p))
        return refuse(S, w, "its model's tensors are named or ordered differently from the servers' (%lld parameters, "
                            "the servers' %lld)", (long long)h->a, (long long)S->P);
    W->joined = true;
    W->rep = ps_make(PS_OK, 0, 0, 0, 0);
    return dt_send(&W->rep, PS_HEADER_WORDS, DT_I64, w, PS_TAG_REP, S->c);
}

static dt_status on_init(server *S, int w, const ps_header *h)
{
    dt_optim_state st[MAX_STATE];
    int ns = dt_optimizer_state_buffers(S->o, st, MAX_STATE);
    if (w != 0 || S->initialized)
        return refuse(S, w, "%s", w ? "only worker 0 sends the initial values" : "initial values sent twice");
    if (h->a != S->n || (h->b != 0 && h->b != ns))
        return refuse(S, w, "initial values of %lld elements with %lld state buffers for a range of %lld with %d",
                      (long long)h->a, (long long)h->b, (long long)S->n, ns);
    DT_CHECK(dt_recv(S->values, (size_t)S->n, DT_F32, w, PS_TAG_DATA, S->c, NULL));
    for (int i = 0; i < h->b; i++)
        DT_CHECK(dt_recv(st[i].data, (size_t)S->n, DT_F32, w, PS_TAG_DATA, S->c, NULL));
    dt_optimizer_set_steps(S->o, h->c);
    for (int t = 0; t < S->ntables; t++) { /* each table's rows here, then their state */
        table *T = &S->t[t];
        dt_optim_state ts[MAX_STATE];
        int nt = dt_optimizer_state_buffers(T->o, ts, MAX_STATE);
        if (h->b && nt != h->b)
            return refuse(S, w, "%lld state buffers for table %s, whose optimizer keeps %d", (long long)h->b,
                          dt_params_info(S->p, T->param)->name, nt);
        DT_CHECK(dt_recv(T->values, (size_t)(T->here * T->dim), DT_F32, w, PS_TAG_DATA, S->c, NULL));
        for (int i = 0; i < h->b; i++)
            DT_CHECK(dt_recv(ts[i].data, (size_t)(T->here * T->dim), DT_F32, w, PS_TAG_DATA, S->c, NULL));
        dt_optimizer_set_steps(T->o, h->c);
    }
    S->initialized = true;
    return DT_OK;
}

static dt_status handle(server *S, int w)
{
    ps_header h = S->w[w].hdr;
    int op = ps_op_of(&h);
    if (op != PS_HELLO && op != PS_BYE && !S->w[w].joined && op >= 0)
        return refuse(S, w, "a request before joining");
    switch (op) {
    case PS_HELLO:
        return on_hello(S, w, &h);
    case PS_INIT:
        return on_init(S, w, &h);
    case PS_PUSH:
        return on_push(S, w, &h);
    case PS_COMMIT:
        return on_commit(S, w, &h);
    case PS_PULL:
    case PS_SNAPSHOT:
    case PS_PULL_ROWS:
        return on_request(S, w, &h);
    case PS_PUSH_ROWS:
        return on_push_rows(S, w, &h);
    case PS_BYE:
        S->w[w].gone = true;
        S->active--;
        S->byes++;
        return bsp_try(S);
    default:
        return refuse(S, w, "an unknown request (op word %#llx)", (unsigned long long)h.op);
    }
}

static void server_free(server *S)
{
    for (int t = 0; S->t && t < S->ntables; t++) {
        table *T = &S->t[t];
        free(T->values);
        free(T->grad);
        free(T->touched);
        free(T->mark);
        free(T->stamp);
        free(T->ids);
        free(T->buf);
        dt_optimizer_destroy(T->o);
    }
    free(S->t);
    for (int w = 0; S->w && w < S->W; w++) {
        wait_worker(S, w);
        for (int i = 0; i < S->w[w].ndeferred; i++)
            free(S->w[w].deferred_ids[i]);
        free(S->w[w].rows_reply);
        free(S->w[w].reply);
        free(S->w[w].piece);
        free(S->w[w].acc);
    }
    free(S->w);
    free(S->hreq);
    free(S->values);
    free(S->sum);
    dt_optimizer_destroy(S->o);
    if (S->log)
        fclose(S->log);
}

dt_status dt_ps_serve(dt_comm *c, dt_comm *group, const dt_ps_config *pc, dt_model *m, dt_ps_optimizer_fn make,
                      void *user)
{
    if (!c || !group || !pc || !m || !make)
        return dt__fail(DT_ERR_INVALID, "ps_serve: %s is NULL", !c ? "the communicator" : !group ? "the servers' group"
                                                                 : !pc ? "the config" : !m ? "the model" : "make");
    server S = {.c = c, .group = group, .pc = pc, .p = dt_model_params(m)};
    S.k = dt_ps_server_index(pc, c);
    S.W = S.active = dt_comm_size(c) - pc->servers;
    S.P = dt_params_numel(S.p);
    if (S.k < 0)
        return dt__fail(DT_ERR_INVALID, "ps_serve: rank %d is a worker (the last %d ranks serve)", dt_comm_rank(c),
                        pc->servers);
    int64_t dense_from = 0;
    DT_CHECK(dt__ps_tables(S.p, &S.ntables, &dense_from));
    dt__ps_dense_range(S.P, dense_from, pc->servers, S.k, &S.lo, &S.n);
    dt_status st = make(user, m, S.lo, S.n, &S.o);
    if (st == DT_OK && S.ntables && !(S.t = calloc((size_t)S.ntables, sizeof *S.t)))
        st = dt__fail(DT_ERR_NOMEM, "parameter server: out of memory");
    for (int t = 0; st == DT_OK && t < S.ntables; t++) { /* rows k, k + S, ... of each table */
        table *T = &S.t[t];
        const dt_param_info *in = dt_params_info(S.p, t);
        T->param = t;
        T->rows = in->shape[0];
        T->dim = in->numel / in->shape[0];
        T->here = ps_rows_here(T->rows, pc->servers, S.k);
        size_t cells = (size_t)(T->here ? T->here : 1);
        if ((st = make(user, m, in->offset, T->here * T->dim, &T->o)) != DT_OK)
            break;
        T->exact = dt_optimizer_rows_exact(T->o, 0, T->here * T->dim);
        if (!(T->values = calloc(cells * (size_t)T->dim, sizeof(float))) ||
            !(T->grad = calloc(cells * (size_t)T->dim, sizeof(float))) || !(T->touched = malloc(cells * sizeof(int64_t))) ||
            !(T->mark = calloc(cells, 1)) || !(T->stamp = calloc(cells, sizeof(uint32_t))) ||
            !(T->ids = malloc(cells * sizeof(int64_t))) || !(T->buf = malloc(cells * (size_t)T->dim * sizeof(float))))
            st = dt__fail(DT_ERR_NOMEM, "parameter server: out of memory for %lld rows of %s", (long long)T->here,
                          in->name);
    }
    if (st == DT_OK && S.n == 0 && !S.ntables)
        st = dt__fail(DT_ERR_INVALID, "parameter server: %d servers for %lld parameters leave server %d none",
                      pc->servers, (long long)S.P, S.k);
    bool bsp = pc->sync == DT_PS_BSP;
    if (st == DT_OK &&
        (!(S.values = calloc((size_t)S.n, sizeof(float))) || !(S.w = calloc((size_t)S.W, sizeof *S.w)) ||
         !(S.hreq = calloc((size_t)S.W, sizeof *S.hreq)) ||
         (bsp && !(S.sum = calloc((size_t)S.n ? (size_t)S.n : 1, sizeof(float))))))
        st = dt__fail(DT_ERR_NOMEM, "parameter server: out of memory for a range of %lld", (long long)S.n);
    for (int w = 0; st == DT_OK && w < S.W; w++)
        if (!(S.w[w].acc = calloc((size_t)S.n, sizeof(float))))
            st = dt__fail(DT_ERR_NOMEM, "parameter server: out of memory for worker %d's pushes", w);
    if (st == DT_OK && pc->clock_log && pc->clock_log[0] && !(S.log = fopen(pc->clock_log, "a")))
        st = dt__fail_errno(DT_ERR_SYSTEM, "parameter server: cannot open the clock log %s", pc->clock_log);
    for (int w = 0; st == DT_OK && w < S.W; w++)
        st = dt_irecv(&S.w[w].hdr, PS_HEADER_WORDS, DT_I64, w, PS_TAG_REQ, c, &S.hreq[w]);
    while (st == DT_OK && S.byes < S.W) {
        int w = -1;
        size_t got = 0;
        if ((st = dt_waitany(S.hreq, S.W, &w, &got)) != DT_OK || w < 0)
            break;
        if (got != PS_HEADER_WORDS)
            st = refuse(&S, w, "a request of %zu words (a header has %d)", got, PS_HEADER_WORDS);
        else
            st = handle(&S, w);
        if (st == DT_OK && !S.w[w].gone)
            st = dt_irecv(&S.w[w].hdr, PS_HEADER_WORDS, DT_I64, w, PS_TAG_REQ, c, &S.hreq[w]);
        if (st == DT_OK)
            st = serve_deferred(&S);
        if (S.log)
            fflush(S.log);
    }
    if (st == DT_OK && S.active < S.W - S.byes)
        st = dt__fail(DT_ERR_INVALID, "parameter server: %s", S.refused);
    if (st != DT_OK && !strstr(dt_last_error(), "server"))
        st = dt__fail(st, "parameter server %d: %s", S.k, dt_last_error());
    server_free(&S);
    return st;
}
