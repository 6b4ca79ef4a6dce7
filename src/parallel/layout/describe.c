/* dt_layout_describe (dtrain/layout.h): a layout in one line for people,
 * only what differs from one process's worth after the mesh, e.g.
 * "dp 2 x pp 2 x tp 2, ZeRO-1, 1f1b (4 micro-batches), recompute blocks, bf16". */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "dtrain/layout.h"

typedef struct {
    char *buf;
    size_t len, n;
} line;

static void add(line *o, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add(line *o, const char *fmt, ...)
{
    if (o->n >= o->len) /* full: the text stays cut where it was */
        return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(o->buf + o->n, o->len - o->n, fmt, ap);
    va_end(ap);
    o->n = k < 0 ? o->len : o->n + (size_t)k;
}

static const char *recompute_name(dt_recompute r) { return r == DT_RECOMPUTE_ALL ? "all" : "blocks"; }

const char *dt_layout_describe(const dt_layout *l, char *buf, size_t len)
{
    if (!buf || !len)
        return "";
    buf[0] = '\0';
    line o = {buf, len, 0};
    if (l->dp > 0)
        add(&o, "dp %d", l->dp);
    else
        add(&o, "dp auto"); /* what the world leaves */
    if (l->pp > 1)
        add(&o, " x pp %d", l->pp);
    if (l->tp > 1)
        add(&o, " x tp %d%s", l->tp, l->sequence_parallel ? " (sequence parallel)" : "");
    if (l->tp > 1 && l->tp_copies > 1)
        add(&o, ", %d copies", l->tp_copies);
    if (l->servers > 0) {
        add(&o, " + %d server%s, %s", l->servers, l->servers == 1 ? "" : "s", dt_ps_sync_name(l->sync));
        if (l->sync == DT_PS_SSP)
            add(&o, " (staleness %d)", l->staleness);
    }
    if (l->zero_stage > 0)
        add(&o, ", ZeRO-%d", l->zero_stage);
    if (l->offload == DT_OFFLOAD_DISK)
        add(&o, ", offload disk");
    if (l->pp > 1) {
        add(&o, ", %s", dt_pipe_schedule_name(l->schedule));
        if (l->schedule == DT_PIPE_INTERLEAVED)
            add(&o, " x%d", l->virtual_stages);
    }
    if (l->pp > 1 || l->micro_batches > 1 || l->grad_accumulation > 1) {
        add(&o, "%s%d micro-batch%s", l->pp > 1 ? " (" : ", ", l->micro_batches, l->micro_batches == 1 ? "" : "es");
        if (l->grad_accumulation > 1)
            add(&o, " x %d accumulated", l->grad_accumulation);
        if (l->pp > 1)
            add(&o, ")");
    }
    if (l->recompute != DT_RECOMPUTE_OFF)
        add(&o, ", recompute %s", recompute_name(l->recompute));
    add(&o, ", %s", l->precision == DT_BF16 ? "bf16" : "f32");
    if (l->grad_wire == DT_GRAD_POWERSGD)
        add(&o, ", powersgd rank %d gradients", l->powersgd_rank);
    else if (l->grad_wire == DT_GRAD_TOPK)
        add(&o, ", top-%g gradients", l->topk_fraction);
    else if (l->grad_wire != DT_F32)
        add(&o, ", %s gradients", dt_dtype_name(l->grad_wire) ? dt_dtype_name(l->grad_wire) : "?");
    if (l->bucket_mb > 0)
        add(&o, ", %g MiB buckets", l->bucket_mb);
    if (strcmp(l->device, "cpu"))
        add(&o, ", on %.*s", (int)sizeof l->device, l->device);
    return buf;
}
