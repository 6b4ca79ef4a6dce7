/* dt_layout_check (dtrain/layout.h): every check across the layout's keys
 * and against the world's size, in one place.  The model's own limits
 * (heads and vocab against tp, the pipeline's stages against its blocks,
 * batch_size against micro_batches) are the model's: the trainer checks
 * those.  Messages keep the trainer's wording ("key 'servers' > 0 ..."),
 * followed by the values that conflict. */
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/mesh.h"
#include "parallel/layout/layout_internal.h"

/* A layout filled by hand holds what dt_layout_set would take, key by key. */
static dt_status keys_valid(const dt_layout *l)
{
    size_t n;
    const dt__layout_key *t = dt__layout_table(&n);
    for (size_t i = 0; i < n; i++) {
        char text[64];
        dt_layout scratch = *l;
        DT_CHECK(dt_layout_get(l, t[i].key, text, sizeof text));
        DT_CHECK(dt_layout_set(&scratch, t[i].key, text));
    }
    return DT_OK;
}

/* The first key a device other than cpu cannot train with yet, or NULL. */
static const char *device_conflict(const dt_layout *l, int *value)
{
    const struct {
        const char *key;
        int value;
    } uses[] = {{"sequence_parallel", l->sequence_parallel},
                {"tp_copies", l->tp_copies > 1 ? l->tp_copies : 0},
                {"servers", l->servers},
                {"offload", l->offload != DT_OFFLOAD_NONE},
                {"recompute", l->recompute != DT_RECOMPUTE_OFF}};
    for (size_t i = 0; i < sizeof uses / sizeof uses[0]; i++)
        if (uses[i].value) {
            *value = uses[i].value;
            return uses[i].key;
        }
    return NULL;
}

static dt_status keys_agree(const dt_layout *l)
{
    char v[64];
    int value = 0;
    const char *key = strcmp(l->device, "cpu") ? device_conflict(l, &value) : NULL;
    if (key) {
        dt_layout_get(l, key, v, sizeof v);
        return dt__fail(DT_ERR_INVALID, "key 'device' = \"%s\" with %s %s: training on a device with "
                        "sequence_parallel, tp_copies, servers, offload or recompute is not built yet (on a device: "
                        "data parallel, zero_stage 1 to 3, tp and pp)",
                        l->device, key, v);
    }
    if (l->sequence_parallel && l->tp < 2)
        return dt__fail(DT_ERR_INVALID, "key 'sequence_parallel' needs the gpt model and tp > 1: tp is %d", l->tp);
    if (l->tp_copies > 1 && l->tp < 2)
        return dt__fail(DT_ERR_INVALID, "key 'tp_copies' = %d needs the gpt model and tp > 1 (the copies overlap the "
                        "tensor-parallel exchanges): tp is %d", l->tp_copies, l->tp);
    if (l->zero_stage == 3 && (l->tp > 1 || l->pp > 1))
        return dt__fail(DT_ERR_INVALID, "key 'zero_stage' = 3 with tp %d and pp %d: zero_stage 3 inside a tensor- or "
                        "pipeline-parallel mesh is not built: use 1 or 2", l->tp, l->pp);
    if (l->servers > 0 && (l->zero_stage > 0 || l->tp > 1 || l->pp > 1))
        return dt__fail(DT_ERR_INVALID, "key 'servers' > 0 (a parameter server) replaces data parallelism by allreduce: "
                        "not with zero_stage, tp or pp (servers %d with %s %d)", l->servers,
                        l->zero_stage > 0 ? "zero_stage" : l->tp > 1 ? "tp" : "pp",
                        l->zero_stage > 0 ? l->zero_stage : l->tp > 1 ? l->tp : l->pp);
    dt_layout_get(l, "grad_compression", v, sizeof v);
    if (l->servers > 0 && l->grad_wire != DT_F32)
        return dt__fail(DT_ERR_INVALID, "key 'grad_compression' is for allreduce data parallelism (servers 0): "
                        "grad_compression %s with servers %d", v, l->servers);
    if (l->servers > 0 && l->offload != DT_OFFLOAD_NONE)
        return dt__fail(DT_ERR_INVALID, "key 'offload' is not for a parameter server's workers (servers 0): "
                        "offload disk with servers %d", l->servers);
    if (l->zero_stage > 0 && l->grad_wire != DT_F32)
        return dt__fail(DT_ERR_INVALID, "key 'grad_compression' is for data parallelism (zero_stage 0): "
                        "grad_compression %s with zero_stage %d", v, l->zero_stage);
    bool compressor = l->grad_wire == DT_GRAD_POWERSGD || l->grad_wire == DT_GRAD_TOPK;
    if (compressor && (l->tp > 1 || l->pp > 1))
        return dt__fail(DT_ERR_INVALID, "key 'grad_compression' = %s is built for plain data parallelism (tp 1, pp 1): "
                        "grad_compression %s with %s %d", v, v, l->tp > 1 ? "tp" : "pp", l->tp > 1 ? l->tp : l->pp);
    if (compressor && strcmp(l->device, "cpu"))
        return dt__fail(DT_ERR_INVALID, "key 'grad_compression' = %s compresses host gradients: not on device %.*s", v,
                        (int)sizeof l->device, l->device);
    if (!(l->topk_fraction > 0 && l->topk_fraction <= 1))
        return dt__fail(DT_ERR_INVALID, "key 'topk_fraction' = %g must be in (0, 1]", l->topk_fraction);
    long long per_step = (long long)l->micro_batches * l->grad_accumulation;
    if (l->pp > 1 && l->schedule == DT_PIPE_INTERLEAVED && per_step % l->pp)
        return dt__fail(DT_ERR_INVALID, "key 'pipeline_schedule' interleaved needs the micro-batches per step "
                        "(micro_batches x grad_accumulation = %lld) to be a multiple of pp = %d (micro_batches %d, "
                        "grad_accumulation %d)", per_step, l->pp, l->micro_batches, l->grad_accumulation);
    return DT_OK;
}

/* world = servers + dp x pp x tp: the servers' roles, then the mesh. */
static dt_status fits_world(const dt_layout *l, int world, int *dp)
{
    int workers = world;
    char less[96] = "";
    if (l->servers > 0) {
        dt_ps_config pc = {.servers = l->servers, .sync = l->sync, .staleness = l->staleness};
        DT_CHECK(dt_ps_check(&pc, world));
        workers = world - l->servers;
        snprintf(less, sizeof less, " (the world's %d ranks less %d server%s)", world, l->servers,
                 l->servers == 1 ? "" : "s");
    }
    if (l->tp > 1 || l->pp > 1) { /* dp x pp x tp, as the strategies make the mesh */
        dt_mesh_dim dims[3];
        int nd = dt__layout_mesh_dims(l, dims);
        dt_status s = dt_mesh_check(dims, nd, workers);
        if (s != DT_OK)
            return dt__wrap(s, "pp = %d, tp = %d: ", l->pp, l->tp);
    }
    *dp = workers / (l->pp * l->tp);
    if (l->dp > 0 && l->dp != *dp)
        return dt__fail(DT_ERR_INVALID, "key 'dp' = %d, but the world leaves dp %d: %d worker%s%s / (pp %d x tp %d)",
                        l->dp, *dp, workers, workers == 1 ? "" : "s", less, l->pp, l->tp);
    return DT_OK;
}

dt_status dt_layout_check(const dt_layout *l, int world, int *out_dp)
{
    if (!l)
        return dt__fail(DT_ERR_INVALID, "layout check: the layout is NULL");
    DT_CHECK(keys_valid(l));
    DT_CHECK(keys_agree(l));
    int dp = l->dp;
    if (world > 0)
        DT_CHECK(fits_world(l, world, &dp));
    if (out_dp)
        *out_dp = dp;
    return DT_OK;
}

int dt__layout_mesh_dims(const dt_layout *l, dt_mesh_dim dims[3])
{
    int nd = 0;
    dims[nd++] = (dt_mesh_dim){"dp", 0};
    if (l->pp > 1)
        dims[nd++] = (dt_mesh_dim){"pp", l->pp};
    if (l->tp > 1)
        dims[nd++] = (dt_mesh_dim){"tp", l->tp};
    return nd;
}
