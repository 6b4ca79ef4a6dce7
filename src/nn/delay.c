/* A synthetic model for measuring pipeline schedules: each block copies its
 * input to its output and then sleeps, so a stage's compute time is set by
 * the caller and does not depend on how many cores the machine has or how
 * many ranks share them (eight sleeping ranks fit on two cores).  Backward
 * passes the gradient through unchanged and sleeps.  The sleeps run to an
 * absolute deadline on CLOCK_MONOTONIC: an interrupted sleep resumes, and
 * each block overshoots by one wake-up latency only (tens of microseconds
 * with the default timer slack of 50 us). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/init.h"
#include "nn/layer.h"
#include "nn/model_internal.h"

typedef struct {
    int blocks;
    int64_t dim;
    double forward_ms, backward_ms;
} delay_config;

typedef struct {
    dt_layer base;
    int64_t dim;
    int64_t forward_ns, backward_ns;
    int w; /* "delay.<i>.weight": one element, so the registry is not empty */
} delay_layer;

static dt_status sleep_ns(const dt_layer *l, int64_t ns)
{
    if (ns <= 0)
        return DT_OK;
    struct timespec until;
    if (clock_gettime(CLOCK_MONOTONIC, &until) != 0)
        return dt__fail(DT_ERR_SYSTEM, "%s: clock_gettime: %s", l->name, strerror(errno));
    int64_t t = (int64_t)until.tv_sec * 1000000000 + until.tv_nsec + ns;
    until.tv_sec = (time_t)(t / 1000000000);
    until.tv_nsec = (long)(t % 1000000000);
    int e;
    while ((e = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL)) == EINTR)
        ;
    return e == 0 ? DT_OK : dt__fail(DT_ERR_SYSTEM, "%s: clock_nanosleep: %s", l->name, strerror(e));
}

static dt_status forward(dt_layer *l, dt_ctx *ctx, const dt_tensor *x, dt_tensor *y)
{
    delay_layer *L = (delay_layer *)l;
    if (x->ndim < 1 || x->shape[x->ndim - 1] != L->dim)
        return dt__fail(DT_ERR_INVALID, "%s: input's last dimension is %lld, expected %lld", l->name,
                        x->ndim < 1 ? 0LL : (long long)x->shape[x->ndim - 1], (long long)L->dim);
    *y = *x;
    int64_t n = dt_tensor_numel(x);
    if (!(y->data = dt_arena_alloc(ctx->arena, n)))
        return dt__fail(DT_ERR_NOMEM, "%s: out of activation memory", l->name);
    DT_CHECK(dt__ops(ctx)->copy(y->data, x->data, (size_t)n * sizeof(float)));
    return sleep_ns(l, L->forward_ns);
}

static dt_status backward(dt_layer *l, dt_ctx *ctx, const dt_tensor *dy, dt_tensor *dx, bool need_dx)
{
    delay_layer *L = (delay_layer *)l;
    *dt_param_grad(ctx->params, L->w) = 0.0f; /* the output does not depend on it */
    dt_params_grad_ready(ctx->params, L->w);
    if (need_dx)
        *dx = *dy; /* the identity's gradient: the same buffer, which the caller's arena holds */
    return sleep_ns(l, L->backward_ns);
}

static void init(dt_layer *l, dt_params *p, uint64_t seed)
{
    (void)seed;
    dt__init_const(p, ((delay_layer *)l)->w, 1.0f);
}

static void destroy(dt_layer *l) { free(l); }

static const dt_layer_ops ops = {"delay", forward, backward, init, destroy};

static dt_status make_delay_block(const dt_model_desc *d, int index, dt_params *p, dt_layer **out)
{
    const delay_config *c = dt__desc_config(d);
    delay_layer *L = dt__layer_new(sizeof *L, &ops, "delay.%d", index);
    if (!L)
        return DT_ERR_NOMEM;
    L->dim = c->dim;
    L->forward_ns = (int64_t)(c->forward_ms * 1e6);
    L->backward_ns = (int64_t)(c->backward_ms * 1e6);
    dt_status s = dt__layer_param(p, &L->base, "weight", 1, (int64_t[]){1}, &L->w);
    if (s != DT_OK) {
        free(L);
        return s;
    }
    *out = &L->base;
    return DT_OK;
}

dt_status dt_delay_describe(int blocks, int64_t dim, double forward_ms, double backward_ms, dt_model_desc **out)
{
    if (!out)
        return dt__fail(DT_ERR_INVALID, "delay: out is NULL");
    if (blocks < 1 || dim < 1 || !(forward_ms >= 0) || !(backward_ms >= 0) || forward_ms > 60e3 || backward_ms > 60e3)
        return dt__fail(DT_ERR_INVALID, "delay: %d blocks (>= 1) of width %lld (>= 1), %g ms forward and %g ms "
                        "backward (0 to 60000)", blocks, (long long)dim, forward_ms, backward_ms);
    delay_config c = {blocks, dim, forward_ms, backward_ms};
    dt_model_desc *d = NULL;
    DT_CHECK(dt__desc_new(&c, sizeof c, &d));
    dt__desc_set_input(d, 1, &dim, 0);
    dt_status s = DT_OK;
    for (int i = 0; s == DT_OK && i < blocks; i++) {
        char name[32];
        snprintf(name, sizeof name, "delay.%d", i);
        /* equal nominal FLOPs (a dim x dim layer's) so the partition is uniform;
         * the output copy stays in the arena until the micro-batch's backward */
        s = dt__desc_add(d, name, "delay", make_delay_block, 1, 2.0 * (double)dim * (double)dim, 4.0 * (double)dim);
    }
    if (s != DT_OK) {
        dt_model_desc_destroy(d);
        return s;
    }
    *out = d;
    return DT_OK;
}
