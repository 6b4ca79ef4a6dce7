/* Planning a pipeline: the blocks cut into balanced stages, a rank's share
 * of them, and the order in which a rank runs its forwards and backwards
 * under each schedule (GPipe, 1F1B, interleaved 1F1B as Megatron-LM orders
 * it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/pipeline.h"
#include "parallel/pipe/partition.h"

static const char *const schedule_names[] = {NULL, "gpipe", "1f1b", "interleaved"};

dt_status dt_pipe_schedule_parse(const char *name, dt_pipe_schedule *out)
{
    for (int i = 1; i <= 3; i++)
        if (name && !strcmp(name, schedule_names[i])) {
            *out = (dt_pipe_schedule)i;
            return DT_OK;
        }
    return dt__fail(DT_ERR_INVALID, "pipeline schedule '%s' is not one of gpipe, 1f1b, interleaved",
                    name ? name : "(null)");
}

const char *dt_pipe_schedule_name(dt_pipe_schedule s)
{
    return s >= DT_PIPE_GPIPE && s <= DT_PIPE_INTERLEAVED ? schedule_names[s] : "(unknown)";
}

/* ---- partition: contiguous parts minimising the most costly one ---- */

static double block_cost(const dt_block_info *b)
{
    return b->flops > 0 ? b->flops : (double)b->params; /* backward: about twice forward, for every block alike */
}

dt_status dt__partition_costs(const double *cost, int n, int parts, int *bounds)
{
    /* prefix[i]: the cost of blocks [0, i).  best[k * (n+1) + i]: the least
     * possible most costly part cutting blocks [0, i) into k + 1 parts;
     * cut[.]: where that cut's last part starts. */
    double *prefix = malloc((size_t)(n + 1) * sizeof *prefix);
    double *best = malloc((size_t)parts * (size_t)(n + 1) * sizeof *best);
    int *cut = malloc((size_t)parts * (size_t)(n + 1) * sizeof *cut);
    if (!prefix || !best || !cut) {
        free(prefix);
        free(best);
        free(cut);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    prefix[0] = 0;
    for (int i = 0; i < n; i++)
        prefix[i + 1] = prefix[i] + cost[i];
    for (int i = 1; i <= n; i++) {
        best[i] = prefix[i];
        cut[i] = 0;
    }
    for (int k = 1; k < parts; k++)
        for (int i = k + 1; i <= n; i++) {
            double b = -1;
            int at = k;
            for (int j = k; j < i; j++) { /* the last part is [j, i) */
                double prev = best[(size_t)(k - 1) * (size_t)(n + 1) + (size_t)j], last = prefix[i] - prefix[j];
                double worst = prev > last ? prev : last;
                if (b < 0 || worst < b) {
                    b = worst;
                    at = j;
                }
            }
            best[(size_t)k * (size_t)(n + 1) + (size_t)i] = b;
            cut[(size_t)k * (size_t)(n + 1) + (size_t)i] = at;
        }
    bounds[parts] = n;
    for (int k = parts - 1, i = n; k >= 0; k--) {
        i = k > 0 ? cut[(size_t)k * (size_t)(n + 1) + (size_t)i] : 0;
        bounds[k] = i;
    }
    free(prefix);
    free(best);
    free(cut);
    return DT_OK;
}

dt_status dt_pipeline_partition(const dt_model_desc *d, int parts, int *bounds)
{
    int n = dt_model_desc_blocks(d);
    if (!d || !bounds)
        return dt__fail(DT_ERR_INVALID, "pipeline_partition: %s is NULL", d ? "bounds" : "the description");
    if (parts < 1 || parts > n)
        return dt__fail(DT_ERR_INVALID, "pipeline: %d stages but the model has %d blocks (at most one stage per block)",
                        parts, n);
    double *cost = malloc((size_t)n * sizeof *cost);
    if (!cost)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++)
        cost[i] = block_cost(dt_model_desc_block(d, i));
    dt_status s = dt__partition_costs(cost, n, parts, bounds);
    free(cost);
    return s;
}

dt_status dt_pipeline_stage_create(const dt_model_desc *d, int p, int v, int rank, dt_model **out)
{
    if (p < 1 || v < 1 || rank < 0 || rank >= p)
        return dt__fail(DT_ERR_INVALID, "pipeline: stage %d of %d stages with %d virtual stages each", rank, p, v);
    int parts = p * v, *bounds = malloc((size_t)(parts + 1) * sizeof *bounds);
    int *ranges = malloc((size_t)(2 * v) * sizeof *ranges);
    dt_status s = bounds && ranges ? DT_OK : dt__fail(DT_ERR_NOMEM, "out of memory");
    if (s == DT_OK && (s = dt_pipeline_partition(d, parts, bounds)) != DT_OK && v > 1)
        dt__fail(s, "pipeline: %d stages x %d virtual stages = %d chunks but the model has %d blocks", p, v, parts,
                 dt_model_desc_blocks(d));
    for (int c = 0; s == DT_OK && c < v; c++) {
        ranges[2 * c] = bounds[c * p + rank];
        ranges[2 * c + 1] = bounds[c * p + rank + 1];
    }
    if (s == DT_OK)
        s = dt_model_instantiate_chunks(d, ranges, v, out);
    free(bounds);
    free(ranges);
    return s;
}

/* ---- schedules ---- */

typedef struct {
    dt_pipe_action *a;
    int n;
} plan;

static void add(plan *pl, char kind, int micro, int chunk) { pl->a[pl->n++] = (dt_pipe_action){kind, micro, chunk}; }

/* The k-th forward or backward of an interleaved rank (Megatron-LM's order):
 * micro-batches go in groups of p, each group through chunk 0, 1, ...
 * forward and through the chunks in reverse backward. */
static dt_pipe_action interleaved_nth(int k, int p, int v, bool forward)
{
    int in_group = k % (p * v), chunk = in_group / p;
    return (dt_pipe_action){forward ? 'F' : 'B', (k / (p * v)) * p + k % p, forward ? chunk : v - 1 - chunk};
}

dt_status dt_pipe_schedule_build(dt_pipe_schedule s, int p, int v, int rank, int m, dt_pipe_action **out, int *n)
{
    if (p < 1 || rank < 0 || rank >= p || m < 1 || v < 1 || (s != DT_PIPE_INTERLEAVED && v != 1))
        return dt__fail(DT_ERR_INVALID, "pipeline schedule %s: rank %d of %d stages, %d micro-batches, %d virtual "
                        "stages (more than 1 only for interleaved)", dt_pipe_schedule_name(s), rank, p, m, v);
    if (s == DT_PIPE_INTERLEAVED && m % p)
        return dt__fail(DT_ERR_INVALID, "pipeline schedule interleaved: %d micro-batches are not a multiple of the %d "
                        "stages (it sends them through in groups of %d)", m, p, p);
    if (s < DT_PIPE_GPIPE || s > DT_PIPE_INTERLEAVED)
        return dt__fail(DT_ERR_INVALID, "pipeline schedule %d is not one of gpipe, 1f1b, interleaved", (int)s);
    plan pl = {malloc((size_t)(2 * m * v) * sizeof(dt_pipe_action)), 0};
    if (!pl.a)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    int total = m * v, warmup;
    if (s == DT_PIPE_GPIPE)
        warmup = total;
    else if (s == DT_PIPE_1F1B)
        warmup = p - rank - 1;
    else /* the first chunk's warm-up covers the ranks after this one, twice, plus a full round per extra chunk */
        warmup = m == p ? total : (p - rank - 1) * 2 + (v - 1) * p;
    if (warmup > total)
        warmup = total;
    for (int k = 0; k < warmup; k++) {
        dt_pipe_action a = interleaved_nth(k, p, v, true);
        add(&pl, 'F', a.micro, a.chunk);
    }
    for (int k = 0; k < total - warmup; k++) { /* steady state: one forward, one backward */
        dt_pipe_action f = interleaved_nth(warmup + k, p, v, true), b = interleaved_nth(k, p, v, false);
        add(&pl, 'F', f.micro, f.chunk);
        add(&pl, 'B', b.micro, b.chunk);
    }
    for (int k = total - warmup; k < total; k++) {
        dt_pipe_action b = interleaved_nth(k, p, v, false);
        add(&pl, 'B', b.micro, b.chunk);
    }
    *out = pl.a;
    *n = pl.n;
    return DT_OK;
}
