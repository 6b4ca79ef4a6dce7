/* A parameter server (ps.h): holds its range of the parameters and the
 * optimizer over it, and serves the workers' requests (ps_proto.h) in the
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
#include "parallel/ps_proto.h"

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
    int ndeferred;
    bool joined, gone;
} worker;

typedef struct {
    dt_comm *c, *group;
    const dt_ps_config *pc;
    dt_params *p;
    int W, k, active;
    int64_t P, lo, n;
    float *values, *sum, *scratch;
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
} server;

static dt_status bsp_try(server *S);

/* Worker w's last reply has left (its buffers may be reused). */
static dt_status wait_worker(server *S, int w)
{
    dt_status st = DT_OK;
    for (int i = 0; i < 2; i++)
        if (S->w[w].out[i]) {
            dt_status r = dt_wait(S->w[w].out[i], NULL);
            S->w[w].out[i] = NULL;
            st = st != DT_OK ? st : r;
        }
    return st;
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
    S->w[w].gone = true; /* nothing more is read from it */
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

static float apply(server *S, float *grad, double scale, double lr, double clip, bool reduce_norm, dt_status *st)
{
    dt_vec_scale(grad, (float)scale, S->n);
    double sumsq = dt_vec_sumsq(grad, S->n);
    if (reduce_norm && (*st = dt_allreduce(&sumsq, &sumsq, 1, DT_F64, DT_SUM, S->group)) != DT_OK)
        return 0;
    float norm = (float)sqrt(sumsq);
    if (clip > 0 && norm > clip) /* torch's clip_grad_norm_ */
        dt_vec_scale(grad, (float)(clip / (norm + 1e-6)), S->n);
    *st = dt_optimizer_step(S->o, S->values, grad, S->n, (float)lr); /* replies send copies */
    dt_vec_zero(grad, S->n);
    return norm;
}

/* BSP: once every worker still in the job has pushed this step, one
 * update with their mean (also when the last one missing leaves). */
static dt_status bsp_try(server *S)
{
    if (S->pc->sync != DT_PS_BSP || S->complete == 0 || S->complete < S->active)
        return DT_OK;
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
    float *dst = S->pc->sync == DT_PS_BSP ? S->scratch : W->acc + (at - S->lo);
    size_t got = 0;
    DT_CHECK(dt_recv(dst, (size_t)count, DT_F32, w, PS_TAG_DATA, S->c, &got));
    if ((int64_t)got != count)
        return refuse(S, w, "a push announced %lld gradients at element %lld (tensor %s) and sent %zu",
                      (long long)count, (long long)at, dt__ps_tensor_at(S->p, at), got);
    if (S->pc->sync == DT_PS_BSP)
        dt_vec_axpy(S->sum + (at - S->lo), 1.0f, S->scratch, count);
    W->got += count;
    return DT_OK;
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
static dt_status answer(server *S, int w, const ps_header *h, int64_t since_ns)
{
    worker *W = &S->w[w];
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
    return DT_OK;
}

/* Answer every queued request whose condition holds now, oldest first per worker. */
static dt_status serve_deferred(server *S)
{
    for (int w = 0; w < S->W; w++) {
        worker *W = &S->w[w];
        while (W->ndeferred && !W->gone && ready(S, &W->deferred[0])) {
            DT_CHECK(answer(S, w, &W->deferred[0], W->deferred_at[0]));
            memmove(W->deferred, W->deferred + 1, (size_t)(--W->ndeferred) * sizeof *W->deferred);
            memmove(W->deferred_at, W->deferred_at + 1, (size_t)W->ndeferred * sizeof *W->deferred_at);
        }
    }
    return DT_OK;
}

static dt_status on_request(server *S, int w, const ps_header *h)
{
    worker *W = &S->w[w];
    if (h->clock != W->clock)
        return refuse(S, w, "a %s for step %lld while at step %lld", ps_op_of(h) == PS_PULL ? "pull" : "snapshot",
                      (long long)h->clock, (long long)W->clock);
    if (ps_op_of(h) == PS_SNAPSHOT && w != 0)
        return refuse(S, w, "a snapshot comes from worker 0 only");
    if (W->ndeferred == MAX_DEFERRED)
        return refuse(S, w, "more than %d requests waiting", MAX_DEFERRED);
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
        return on_request(S, w, &h);
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
    for (int w = 0; S->w && w < S->W; w++) {
        wait_worker(S, w);
        free(S->w[w].reply);
        free(S->w[w].piece);
        free(S->w[w].acc);
    }
    free(S->w);
    free(S->hreq);
    free(S->values);
    free(S->sum);
    free(S->scratch);
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
    dt_ps_range(S.P, pc->servers, S.k, &S.lo, &S.n);
    if (S.n == 0)
        return dt__fail(DT_ERR_INVALID, "parameter server: %d servers for %lld parameters leave server %d none",
                        pc->servers, (long long)S.P, S.k);
    dt_status st = make(user, m, S.lo, S.n, &S.o);
    bool bsp = pc->sync == DT_PS_BSP;
    if (st == DT_OK &&
        (!(S.values = calloc((size_t)S.n, sizeof(float))) || !(S.w = calloc((size_t)S.W, sizeof *S.w)) ||
         !(S.hreq = calloc((size_t)S.W, sizeof *S.hreq)) ||
         (bsp && (!(S.sum = calloc((size_t)S.n, sizeof(float))) || !(S.scratch = malloc((size_t)S.n * sizeof(float)))))))
        st = dt__fail(DT_ERR_NOMEM, "parameter server: out of memory for a range of %lld", (long long)S.n);
    for (int w = 0; st == DT_OK && !bsp && w < S.W; w++)
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
