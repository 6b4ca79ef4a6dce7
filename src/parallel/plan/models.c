/* The GPT shapes built in for projections (dt_plan_model_gpt): each block's
 * parameters as dtrain's gpt describes them (src/nn/gpt.c), its time from
 * its FLOPs at the device's rate, its activations by Megatron-LM's count. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "parallel/plan/internal.h"

typedef struct {
    const char *name;
    int layers, dim, heads;
} gpt_shape;

/* Brown et al. 2020, table 2.1: context 2048, vocabulary 50257 (GPT-2's). */
static const gpt_shape shapes[] = {
    {"gpt3-1.3b", 24, 2048, 16},
    {"gpt3-13b", 40, 5120, 40},
    {"gpt3-175b", 96, 12288, 96},
};

static dt_plan_block block(const char *kind, double params, double flops, double rate, double act, double out,
                           double tp_bytes)
{
    dt_plan_block b = {0};
    snprintf(b.kind, sizeof b.kind, "%s", kind);
    b.params = (int64_t)params;
    b.flops = flops;
    b.fwd_s = flops / rate;
    b.bwd_s = 2 * b.fwd_s; /* the gradients of the inputs and of the weights: two products per forward one */
    b.act_bytes = act;
    b.out_bytes = out;
    b.tp_splittable = 1;
    b.tp_bytes = tp_bytes;
    b.tp_collectives = tp_bytes > 0 ? (!strcmp(kind, "gpt-block") ? 2 : 1) : 0;
    return b;
}

dt_status dt_plan_model_gpt(const char *name, const dt_plan_inputs *in, int64_t micro_batch, dt_plan_model *out)
{
    if (!name || !in || !out)
        return dt__fail(DT_ERR_INVALID, "plan_model_gpt: %s is NULL", !name ? "the name" : !in ? "in" : "out");
    const gpt_shape *g = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        if (!strcmp(name, shapes[i].name))
            g = &shapes[i];
    if (!g)
        return dt__fail(DT_ERR_INVALID, "plan: no built-in model '%s' (gpt3-1.3b, gpt3-13b, gpt3-175b)", name);
    if (!(in->flops_per_s > 0) || micro_batch < 1)
        return dt__fail(DT_ERR_INVALID, "plan_model_gpt: flops_per_s %g and micro_batch %lld must be positive",
                        in->flops_per_s, (long long)micro_batch);
    double eff = in->compute_efficiency > 0 ? in->compute_efficiency : 1, rate = in->flops_per_s * eff;
    double T = 2048, D = g->dim, V = 50257, A = g->heads;
    dt_plan_block *b = calloc((size_t)g->layers + 2, sizeof *b);
    if (!b)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    /* 16-bit activations (bf16, as Megatron-LM trains): between blocks T x D x 2 bytes per sample, which is
     * also what each tensor-parallel allreduce carries.  A transformer block keeps 34 T D + 5 A T^2 bytes
     * (Korthikanti et al. 2022, no recomputation, no sequence parallelism, b = 1). */
    double io = 2 * T * D;
    b[0] = block("gpt-embed", V * D + T * D, 0, rate, io, io, io);
    b[0].fwd_s = b[0].bwd_s = 0; /* a lookup: no products */
    b[0].flops = T * D;          /* gpt.c's hint, so stages are cut as the pipeline cuts them */
    for (int i = 1; i <= g->layers; i++) {
        b[i] = block("gpt-block", 12 * D * D + 13 * D, 24 * T * D * D + 4 * T * T * D, rate, 34 * T * D + 5 * A * T * T,
                     io, io);
        b[i].act_tp_whole_bytes = 10 * T * D; /* two layer norms' inputs, two dropouts' masks: whole on every tp rank */
    }
    /* the head: the tied embedding's product to V logits and the loss over them (f32: 4 T V bytes) */
    b[g->layers + 1] = block("gpt-head", V * D + 2 * D, 2 * T * D * V, rate, io + 4 * T * V, 0, io);
    *out = (dt_plan_model){.blocks = b,
                           .nblocks = g->layers + 2,
                           .samples = micro_batch,
                           .tokens_per_sample = (int64_t)T,
                           .threads = 1,
                           .optimizer_state_floats = 2};
    /* AdamW reads the parameter, gradient and two moments and writes three of them back: 28 bytes (f32) */
    if (in->memory_bandwidth_Bps > 0)
        out->optimizer_s_per_param = 28 / in->memory_bandwidth_Bps;
    return DT_OK;
}

void dt_plan_model_free(dt_plan_model *m)
{
    if (!m)
        return;
    free(m->blocks);
    *m = (dt_plan_model){0};
}
