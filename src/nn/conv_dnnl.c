/* conv2d through oneDNN (Debian's libdnnl, 2.x C API): forward,
 * backward-data and backward-weights (with bias) primitives in oneDNN's own
 * layouts, with reorders from and to the plain NCHW / OIHW f32 tensors that
 * the layers around conv2d use.
 *
 * Why oneDNN: im2col + OpenBLAS spends ~61 ms per batch of 128 in conv2's
 * GEMMs alone (M = 64, N = 196, K = 800 per image, ~130 GFLOP/s), while a
 * direct convolution kernel (what PyTorch runs, through the same library)
 * keeps the input in cache and needs no column matrix.
 *
 * One CPU engine for the process, made once (pthread_once).  Streams and
 * primitives belong to the layer: a layer runs on one thread (its rank's),
 * and oneDNN does not promise that one stream may be used from several
 * threads at once (ranks as threads in one process).  Primitives are cached
 * per input shape, a few entries (training and evaluation batches differ),
 * and by thread count and precision.
 *
 * Threads: Debian's oneDNN runs on OpenMP, so each call first sets the
 * calling thread's OpenMP team size to dt_get_threads(), before it makes or
 * runs primitives.  oneDNN's results
 * are run-to-run repeatable for a given thread count (and CPU ISA), not
 * across counts: its kernels split the reductions of backward-weights by
 * thread.  docs/engine.md says the same.
 *
 * Gradients: backward-weights overwrites diff_weights (oneDNN has no sum
 * post-op for it), so the caller passes scratch buffers and adds them to the
 * accumulated gradients. */
#include "nn/conv_dnnl.h"

#include <stdlib.h>
#include <string.h>

#include "base/env.h"
#include "base/status.h"
#include "dtrain/tensor.h"
#include "tensor/threads.h"

bool dt__conv_dnnl_enabled(void)
{
#ifdef DT_HAVE_DNNL
    const char *v = dt__env_str("DT_CONV");
    return !v || strcmp(v, "im2col") != 0;
#else
    return false;
#endif
}

#ifndef DT_HAVE_DNNL

dt_status dt__conv_dnnl_forward(dt__conv_dnnl **cache, const char *name, const dt__conv_shape *s, dt_arena *tmp,
                                const float *x, const float *w, const float *b, float *y)
{
    (void)cache, (void)s, (void)tmp, (void)x, (void)w, (void)b, (void)y;
    return dt__fail(DT_ERR_INTERNAL, "%s: this build has no oneDNN", name);
}

dt_status dt__conv_dnnl_backward(dt__conv_dnnl **cache, const char *name, const dt__conv_shape *s, dt_arena *tmp,
                                 const float *x, const float *w, const float *dy, float *dx, float *dw, float *db)
{
    (void)cache, (void)s, (void)tmp, (void)x, (void)w, (void)dy, (void)dx, (void)dw, (void)db;
    return dt__fail(DT_ERR_INTERNAL, "%s: this build has no oneDNN", name);
}

void dt__conv_dnnl_free(dt__conv_dnnl *cache) { (void)cache; }

#else

#include <dnnl.h>
#include <dnnl_debug.h>
#include <pthread.h>

/* From libgomp, under oneDNN (not <omp.h>: the sources are not built with
 * -fopenmp). */
void omp_set_num_threads(int n);

/* The caller's (plain) tensors, by role. */
enum { M_X, M_W, M_B, M_Y, M_DX, M_DW, M_DB, M_DY, M_COUNT };

/* One tensor argument of one primitive.  The primitive is made with
 * format "any", so oneDNN picks its own layout (blocked: nChw16c, OIhw16i16o
 * and the like, for which it has direct kernels; on plain NCHW it runs
 * im2col + its GEMM, 1.3x slower on the cnn); where that differs from
 * the plain tensor, a reorder converts on the way in (or out) through a
 * buffer: the weights' allocated once by oneDNN, the activations' (x, y, dy,
 * dx: batch-sized, several per layer) taken from the caller's arena for the
 * call only. */
typedef struct {
    int role;                 /* M_* */
    dnnl_memory_t inner;      /* the primitive's layout; NULL: the caller's memory itself */
    dnnl_primitive_t reorder; /* plain -> inner for inputs, inner -> plain for outputs */
    size_t bytes;             /* > 0: inner's buffer comes from the arena (an activation's) */
} conv_port;

enum { P_FWD_X, P_FWD_W, P_FWD_Y, P_BWW_X, P_BWW_DY, P_BWW_DW, P_BWD_DY, P_BWD_W, P_BWD_DX, P_COUNT };

#define ENTRIES 4

typedef struct {
    int64_t n, h, w; /* the key (n == 0: empty), with: */
    int threads;     /* oneDNN sizes its kernels for the thread count at creation */
    bool bf16;       /* bf16 asked for (mixed precision) */
    dnnl_data_type_t lo; /* the operands' type: bf16 when asked for and this CPU has kernels, else f32 */
    bool dy_shared;  /* backward-data reads backward-weights' converted dy */
    dnnl_primitive_desc_t fwd_pd;
    dnnl_primitive_t fwd, bwd_data, bwd_weights;
    dnnl_memory_t mem[M_COUNT]; /* the caller's buffers (a new handle every call) */
    conv_port port[P_COUNT];
} conv_entry;

struct dt__conv_dnnl {
    dnnl_stream_t stream;
    conv_entry entry[ENTRIES];
    int next; /* the entry a new shape replaces (round robin) */
};

/* ---- the process's CPU engine ---- */
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static dnnl_engine_t engine;
static dnnl_status_t engine_status;

static void engine_create(void) { engine_status = dnnl_engine_create(&engine, dnnl_cpu, 0); }

static dt_status dnnl_fail(const char *layer, const char *call, dnnl_status_t st)
{
    return dt__fail(DT_ERR_INTERNAL, "%s: oneDNN %s failed: %s", layer, call, dnnl_status2str(st));
}

/* Run a dnnl_* call; on failure report it by name and go to fail. */
#define DNNL_TRY(call)                            \
    do {                                          \
        dnnl_status_t st_ = (call);               \
        if (st_ != dnnl_success) {                \
            status = dnnl_fail(name, #call, st_); \
            goto fail;                            \
        }                                         \
    } while (0)

static void entry_clear(conv_entry *e)
{
    dnnl_primitive_desc_destroy(e->fwd_pd); /* each destroy accepts NULL */
    dnnl_primitive_destroy(e->fwd);
    dnnl_primitive_destroy(e->bwd_data);
    dnnl_primitive_destroy(e->bwd_weights);
    for (int i = 0; i < M_COUNT; i++)
        dnnl_memory_destroy(e->mem[i]);
    for (int i = 0; i < P_COUNT; i++) {
        dnnl_memory_destroy(e->port[i].inner);
        dnnl_primitive_destroy(e->port[i].reorder);
    }
    memset(e, 0, sizeof *e);
}

void dt__conv_dnnl_free(dt__conv_dnnl *c)
{
    if (!c)
        return;
    for (int i = 0; i < ENTRIES; i++)
        entry_clear(&c->entry[i]);
    dnnl_stream_destroy(c->stream);
    free(c);
}

typedef struct {
    dnnl_memory_desc_t x, w, b, y;  /* the caller's plain f32 tensors */
    dnnl_memory_desc_t lx, lw, ly;  /* oneDNN's choice of layout, in the operands' type (f32 or bf16) */
    dnnl_memory_desc_t fx, fw, fy;  /* the same in f32: the results */
    dnnl_dims_t strides, pad;
} conv_descs;

static dnnl_status_t descs_init(conv_descs *d, const dt__conv_shape *s, dnnl_data_type_t lo)
{
    int64_t oh = s->h + 2 * s->pad - s->k + 1, ow = s->w + 2 * s->pad - s->k + 1;
    dnnl_dims_t xd = {s->n, s->cin, s->h, s->w}, wd = {s->cout, s->cin, s->k, s->k}, yd = {s->n, s->cout, oh, ow};
    dnnl_status_t st;
    if ((st = dnnl_memory_desc_init_by_tag(&d->x, 4, xd, dnnl_f32, dnnl_nchw)) ||
        (st = dnnl_memory_desc_init_by_tag(&d->w, 4, wd, dnnl_f32, dnnl_oihw)) ||
        (st = dnnl_memory_desc_init_by_tag(&d->b, 1, (dnnl_dims_t){s->cout}, dnnl_f32, dnnl_x)) ||
        (st = dnnl_memory_desc_init_by_tag(&d->y, 4, yd, dnnl_f32, dnnl_nchw)) ||
        (st = dnnl_memory_desc_init_by_tag(&d->lx, 4, xd, lo, dnnl_format_tag_any)) ||
        (st = dnnl_memory_desc_init_by_tag(&d->lw, 4, wd, lo, dnnl_format_tag_any)) ||
        (st = dnnl_memory_desc_init_by_tag(&d->ly, 4, yd, lo, dnnl_format_tag_any)) ||
        (st = dnnl_memory_desc_init_by_tag(&d->fx, 4, xd, dnnl_f32, dnnl_format_tag_any)) ||
        (st = dnnl_memory_desc_init_by_tag(&d->fw, 4, wd, dnnl_f32, dnnl_format_tag_any)) ||
        (st = dnnl_memory_desc_init_by_tag(&d->fy, 4, yd, dnnl_f32, dnnl_format_tag_any)))
        return st;
    d->strides[0] = d->strides[1] = 1;
    d->pad[0] = d->pad[1] = s->pad;
    return dnnl_success;
}

/* Port p of argument `role`: the primitive (pd) wants `query` in its own
 * layout; a reorder when that is not the plain one. */
static dt_status port_init(conv_entry *e, const char *name, int p, int role, const_dnnl_primitive_desc_t pd,
                           dnnl_query_t query, bool output)
{
    dt_status status = DT_OK;
    conv_port *port = &e->port[p];
    dnnl_primitive_desc_t rpd = NULL;
    const dnnl_memory_desc_t *plain, *inner = dnnl_primitive_desc_query_md(pd, query, 0);
    port->role = role;
    DNNL_TRY(dnnl_memory_get_memory_desc(e->mem[role], &plain));
    if (dnnl_memory_desc_equal(plain, inner))
        return DT_OK;
    bool activation = role != M_W && role != M_DW;
    DNNL_TRY(dnnl_memory_create(&port->inner, inner, engine, activation ? DNNL_MEMORY_NONE : DNNL_MEMORY_ALLOCATE));
    port->bytes = activation ? dnnl_memory_desc_get_size(inner) : 0;
    DNNL_TRY(output ? dnnl_reorder_primitive_desc_create(&rpd, inner, engine, plain, engine, NULL)
                    : dnnl_reorder_primitive_desc_create(&rpd, plain, engine, inner, engine, NULL));
    DNNL_TRY(dnnl_primitive_create(&port->reorder, rpd));
    dnnl_primitive_desc_destroy(rpd);
    return DT_OK;
fail:
    dnnl_primitive_desc_destroy(rpd);
    return status;
}

/* The stream and the forward primitive of shape s (made on first use). */
static dt_status entry_get(dt__conv_dnnl **cache, const char *name, const dt__conv_shape *s, conv_entry **out)
{
    dt_status status = DT_OK;
    pthread_once(&engine_once, engine_create);
    if (engine_status != dnnl_success)
        return dnnl_fail(name, "dnnl_engine_create(dnnl_cpu)", engine_status);
    /* Before the primitives are made, not only before they run: a kernel
     * made for the default (every core) asks OpenMP for that many threads
     * whatever the team size is when it runs (on 1 thread that cost 5%, a
     * second OpenMP thread spinning). */
    int threads = dt_get_threads();
    omp_set_num_threads(threads);
    dt__pool_park(); /* the pool's idle workers leave oneDNN's team the cores */
    dt__conv_dnnl *c = *cache;
    if (!c) {
        if (!(c = calloc(1, sizeof *c)))
            return dt__fail(DT_ERR_NOMEM, "%s: out of memory", name);
        dnnl_status_t st = dnnl_stream_create(&c->stream, engine, dnnl_stream_default_flags);
        if (st != dnnl_success) {
            free(c);
            return dnnl_fail(name, "dnnl_stream_create", st);
        }
        *cache = c;
    }
    for (int i = 0; i < ENTRIES; i++)
        if (c->entry[i].n == s->n && c->entry[i].h == s->h && c->entry[i].w == s->w && c->entry[i].threads == threads &&
            c->entry[i].bf16 == s->bf16) {
            *out = &c->entry[i];
            return DT_OK;
        }
    conv_entry *e = &c->entry[c->next];
    c->next = (c->next + 1) % ENTRIES;
    entry_clear(e);
    conv_descs d;
    dnnl_convolution_desc_t fd;
    /* bf16 operands with f32 results (AMX or AVX512_BF16); a CPU without
     * bf16 kernels runs f32 (dnnl_unimplemented). */
    e->lo = s->bf16 ? dnnl_bf16 : dnnl_f32;
    for (;;) {
        DNNL_TRY(descs_init(&d, s, e->lo));
        DNNL_TRY(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct, &d.lx,
                                                    &d.lw, &d.b, &d.fy, d.strides, d.pad, d.pad));
        dnnl_status_t st = dnnl_primitive_desc_create(&e->fwd_pd, &fd, NULL, engine, NULL);
        if (st == dnnl_unimplemented && e->lo == dnnl_bf16) {
            e->lo = dnnl_f32;
            continue;
        }
        DNNL_TRY(st);
        break;
    }
    const dnnl_memory_desc_t *md[M_COUNT] = {&d.x, &d.w, &d.b, &d.y, &d.x, &d.w, &d.b, &d.y};
    for (int i = 0; i < M_COUNT; i++)
        DNNL_TRY(dnnl_memory_create(&e->mem[i], md[i], engine, DNNL_MEMORY_NONE));
    DNNL_TRY(dnnl_primitive_create(&e->fwd, e->fwd_pd));
    if ((status = port_init(e, name, P_FWD_X, M_X, e->fwd_pd, dnnl_query_src_md, false)) ||
        (status = port_init(e, name, P_FWD_W, M_W, e->fwd_pd, dnnl_query_weights_md, false)) ||
        (status = port_init(e, name, P_FWD_Y, M_Y, e->fwd_pd, dnnl_query_dst_md, true)))
        goto fail;
    e->n = s->n, e->h = s->h, e->w = s->w, e->threads = threads, e->bf16 = s->bf16;
    *out = e;
    return DT_OK;
fail:
    entry_clear(e);
    return status;
}

/* The backward primitives of an entry (made on first use). */
static dt_status entry_backward(conv_entry *e, const char *name, const dt__conv_shape *s)
{
    dt_status status = DT_OK;
    dnnl_primitive_desc_t wpd = NULL, dpd = NULL;
    if (e->bwd_weights)
        return DT_OK;
    conv_descs d;
    dnnl_convolution_desc_t bd, wd;
    DNNL_TRY(descs_init(&d, s, e->lo));
    DNNL_TRY(dnnl_convolution_backward_weights_desc_init(&wd, dnnl_convolution_direct, &d.lx, &d.fw, &d.b, &d.ly,
                                                         d.strides, d.pad, d.pad));
    DNNL_TRY(dnnl_primitive_desc_create(&wpd, &wd, NULL, engine, e->fwd_pd));
    DNNL_TRY(dnnl_convolution_backward_data_desc_init(&bd, dnnl_convolution_direct, &d.fx, &d.lw, &d.ly, d.strides,
                                                      d.pad, d.pad));
    DNNL_TRY(dnnl_primitive_desc_create(&dpd, &bd, NULL, engine, e->fwd_pd));
    if ((status = port_init(e, name, P_BWW_X, M_X, wpd, dnnl_query_src_md, false)) ||
        (status = port_init(e, name, P_BWW_DY, M_DY, wpd, dnnl_query_diff_dst_md, false)) ||
        (status = port_init(e, name, P_BWW_DW, M_DW, wpd, dnnl_query_diff_weights_md, true)) ||
        (status = port_init(e, name, P_BWD_DY, M_DY, dpd, dnnl_query_diff_dst_md, false)) ||
        (status = port_init(e, name, P_BWD_W, M_W, dpd, dnnl_query_weights_md, false)) ||
        (status = port_init(e, name, P_BWD_DX, M_DX, dpd, dnnl_query_diff_src_md, true)))
        goto fail;
    conv_port *wdy = &e->port[P_BWW_DY], *ddy = &e->port[P_BWD_DY];
    const dnnl_memory_desc_t *wmd, *dmd;
    if (wdy->inner && ddy->inner && dnnl_memory_get_memory_desc(wdy->inner, &wmd) == dnnl_success &&
        dnnl_memory_get_memory_desc(ddy->inner, &dmd) == dnnl_success && dnnl_memory_desc_equal(wmd, dmd)) {
        dnnl_memory_destroy(ddy->inner); /* dy is converted once (1.5 ms of conv2's 80 ms step) */
        dnnl_primitive_destroy(ddy->reorder);
        ddy->inner = NULL, ddy->reorder = NULL;
        e->dy_shared = true;
    }
    DNNL_TRY(dnnl_primitive_create(&e->bwd_data, dpd));
    DNNL_TRY(dnnl_primitive_create(&e->bwd_weights, wpd));
    dnnl_primitive_desc_destroy(wpd);
    dnnl_primitive_desc_destroy(dpd);
    return DT_OK;
fail:
    dnnl_primitive_desc_destroy(wpd);
    dnnl_primitive_desc_destroy(dpd);
    dnnl_primitive_destroy(e->bwd_data);
    e->bwd_data = NULL;
    for (int p = P_BWW_X; p <= P_BWD_DX; p++) {
        dnnl_memory_destroy(e->port[p].inner);
        dnnl_primitive_destroy(e->port[p].reorder);
        e->port[p] = (conv_port){0};
    }
    e->dy_shared = false;
    return status;
}

/* One argument of a call: the oneDNN argument, its port (or -1: the
 * caller's plain memory of role `role`), the caller's buffer and which way
 * it goes. */
enum { IN, OUT, CONVERTED /* an input the port already holds converted */ };
typedef struct {
    int arg, port, role;
    const void *data;
    int dir;
} conv_arg;

static dt_status exec(dt__conv_dnnl *c, const char *name, const char *what, dnnl_primitive_t p, int n,
                      const dnnl_exec_arg_t *args)
{
    dnnl_status_t st = dnnl_primitive_execute(p, c->stream, n, args);
    return st == dnnl_success ? DT_OK : dnnl_fail(name, what, st);
}

/* Point the entry's memory objects at the caller's buffers, convert the
 * inputs that need it, run p, convert the outputs back. */
static dt_status run(dt__conv_dnnl *c, conv_entry *e, const char *name, const char *what, dnnl_primitive_t p,
                     const conv_arg *a, int n)
{
    dt_status status = DT_OK;
    dnnl_exec_arg_t args[4] = {0};
    for (int i = 0; i < n; i++) {
        conv_port *port = a[i].port >= 0 ? &e->port[a[i].port] : NULL;
        dnnl_memory_t user = e->mem[a[i].role];
        DNNL_TRY(dnnl_memory_set_data_handle(user, (void *)a[i].data));
        args[i] = (dnnl_exec_arg_t){a[i].arg, port && port->inner ? port->inner : user};
        if (port && port->reorder && a[i].dir == IN &&
            (status = exec(c, name, "reorder (input)", port->reorder, 2,
                           (dnnl_exec_arg_t[]){{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, port->inner}})))
            return status;
    }
    if ((status = exec(c, name, what, p, n, args)))
        return status;
    for (int i = 0; i < n; i++) {
        conv_port *port = a[i].port >= 0 ? &e->port[a[i].port] : NULL;
        if (port && port->reorder && a[i].dir == OUT &&
            (status = exec(c, name, "reorder (output)", port->reorder, 2,
                           (dnnl_exec_arg_t[]){{DNNL_ARG_FROM, port->inner}, {DNNL_ARG_TO, e->mem[a[i].role]}})))
            return status;
    }
    DNNL_TRY(dnnl_stream_wait(c->stream));
    return DT_OK;
fail:
    return status;
}

static dt_status backward_bound(dt__conv_dnnl *c, conv_entry *e, const char *name, dt_arena *tmp, const float *x,
                                const float *w, const float *dy, float *dx, float *dw, float *db);

/* Point the activation ports first..last at temporaries of the arena (the
 * caller rewinds to a mark taken before). */
static dt_status ports_bind(conv_entry *e, const char *name, dt_arena *tmp, int first, int last)
{
    dt_status status = DT_OK;
    for (int p = first; p <= last; p++) {
        conv_port *port = &e->port[p];
        if (!port->inner || !port->bytes)
            continue;
        float *mem = dt_arena_alloc(tmp, (int64_t)((port->bytes + sizeof(float) - 1) / sizeof(float)));
        if (!mem)
            return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory for oneDNN's %zu-byte buffer", name,
                            port->bytes);
        DNNL_TRY(dnnl_memory_set_data_handle(port->inner, mem));
    }
    return DT_OK;
fail:
    return status;
}

dt_status dt__conv_dnnl_forward(dt__conv_dnnl **cache, const char *name, const dt__conv_shape *s, dt_arena *tmp,
                                const float *x, const float *w, const float *b, float *y)
{
    conv_entry *e;
    dt_status status = entry_get(cache, name, s, &e);
    if (status != DT_OK)
        return status;
    dt_arena_mark mark = dt_arena_get_mark(tmp);
    conv_arg a[] = {{DNNL_ARG_SRC, P_FWD_X, M_X, x, IN},
                    {DNNL_ARG_WEIGHTS, P_FWD_W, M_W, w, IN},
                    {DNNL_ARG_BIAS, -1, M_B, b, IN},
                    {DNNL_ARG_DST, P_FWD_Y, M_Y, y, OUT}};
    status = ports_bind(e, name, tmp, P_FWD_X, P_FWD_Y);
    if (status == DT_OK)
        status = run(*cache, e, name, "dnnl_primitive_execute(convolution forward)", e->fwd, a, 4);
    dt_arena_rewind(tmp, mark);
    return status;
}

dt_status dt__conv_dnnl_backward(dt__conv_dnnl **cache, const char *name, const dt__conv_shape *s, dt_arena *tmp,
                                 const float *x, const float *w, const float *dy, float *dx, float *dw, float *db)
{
    conv_entry *e;
    dt_status status = entry_get(cache, name, s, &e);
    if (status == DT_OK)
        status = entry_backward(e, name, s);
    if (status != DT_OK)
        return status;
    dt_arena_mark mark = dt_arena_get_mark(tmp);
    status = backward_bound(*cache, e, name, tmp, x, w, dy, dx, dw, db);
    dt_arena_rewind(tmp, mark);
    return status;
}

static dt_status backward_bound(dt__conv_dnnl *c, conv_entry *e, const char *name, dt_arena *tmp, const float *x,
                                const float *w, const float *dy, float *dx, float *dw, float *db)
{
    dt_status status = ports_bind(e, name, tmp, P_BWW_X, dx ? P_BWD_DX : P_BWW_DW);
    if (status != DT_OK)
        return status;
    conv_arg wa[] = {{DNNL_ARG_SRC, P_BWW_X, M_X, x, IN},
                     {DNNL_ARG_DIFF_DST, P_BWW_DY, M_DY, dy, IN},
                     {DNNL_ARG_DIFF_WEIGHTS, P_BWW_DW, M_DW, dw, OUT},
                     {DNNL_ARG_DIFF_BIAS, -1, M_DB, db, OUT}};
    status = run(c, e, name, "dnnl_primitive_execute(convolution backward weights)", e->bwd_weights, wa, 4);
    if (status != DT_OK || !dx)
        return status;
    conv_arg da[] = {e->dy_shared ? (conv_arg){DNNL_ARG_DIFF_DST, P_BWW_DY, M_DY, dy, CONVERTED}
                                  : (conv_arg){DNNL_ARG_DIFF_DST, P_BWD_DY, M_DY, dy, IN},
                     {DNNL_ARG_WEIGHTS, P_BWD_W, M_W, w, IN},
                     {DNNL_ARG_DIFF_SRC, P_BWD_DX, M_DX, dx, OUT}};
    return run(c, e, name, "dnnl_primitive_execute(convolution backward data)", e->bwd_data, da, 3);
}

#endif
