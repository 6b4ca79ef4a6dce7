/* The trainer's configuration as the library's layout and model recipe:
 * the layout keys into a dt_layout, the model keys into the recipe's
 * description, the optimizer keys into its optimizer.  Everything a run
 * builds from them (mesh, stages, shards, optimizer sizing, resume, the
 * strategy) is the library's dt_strategy_create. */
#include <string.h>

#include "dtrain_cli.h"

void dtrain_layout_of(const dtrain_config *c, dt_layout *l)
{
    dt_layout_default(l);
    l->tp = (int)c->tp;
    l->pp = (int)c->pp;
    l->zero_stage = (int)c->zero_stage;
    l->servers = (int)c->servers;
    (void)dt_ps_sync_parse(c->sync, &l->sync); /* the configuration's choices: valid */
    l->staleness = (int)c->staleness;
    l->micro_batches = (int)c->micro_batches;
    l->grad_accumulation = (int)c->grad_accumulation;
    (void)dt_pipe_schedule_parse(c->pipeline_schedule, &l->schedule);
    l->virtual_stages = (int)c->virtual_stages;
    l->sequence_parallel = c->sequence_parallel;
    l->tp_copies = (int)c->tp_copies;
    l->recompute = !strcmp(c->recompute, "all") ? DT_RECOMPUTE_ALL
                   : !strcmp(c->recompute, "blocks") ? DT_RECOMPUTE_BLOCKS : DT_RECOMPUTE_OFF;
    l->offload = !strcmp(c->offload, "disk") ? DT_OFFLOAD_DISK : DT_OFFLOAD_NONE;
    l->precision = !strcmp(c->precision, "bf16") ? DT_BF16 : DT_F32;
    l->grad_wire = !strcmp(c->grad_compression, "f16")        ? DT_F16
                   : !strcmp(c->grad_compression, "bf16")     ? DT_BF16
                   : !strcmp(c->grad_compression, "powersgd") ? DT_GRAD_POWERSGD
                   : !strcmp(c->grad_compression, "topk")     ? DT_GRAD_TOPK
                                                              : DT_F32;
    l->powersgd_rank = (int)c->powersgd_rank;
    l->compress_start_step = (int)c->compress_start_step;
    l->topk_fraction = c->topk_fraction;
    l->bucket_mb = c->bucket_mb;
    snprintf(l->device, sizeof l->device, "%s", c->device);
    l->tf32 = c->tf32;
}

static dt_status describe(void *user, dt_comm *tp, dt_model_desc **out)
{
    return dtrain_describe_model(((dtrain_recipe_state *)user)->c, tp, out);
}

/* The optimizer for n elements, as the optimizer keys say. */
static dt_status make_optimizer(void *user, int64_t n, dt_optimizer **o)
{
    const dtrain_config *c = ((dtrain_recipe_state *)user)->c;
    if (strcmp(c->optimizer, "adagrad") == 0)
        return dt_adagrad_create(&(dt_adagrad_config){(float)c->lr_decay, (float)c->weight_decay,
                                                      (float)c->initial_accumulator_value, (float)c->adagrad_eps}, n, o);
    return strcmp(c->optimizer, "sgd") == 0
               ? dt_sgd_create(&(dt_sgd_config){(float)c->momentum, (float)c->weight_decay, c->nesterov}, n, o)
               : dt_adamw_create(&(dt_adamw_config){(float)c->beta1, (float)c->beta2, (float)c->eps,
                                                    (float)c->weight_decay}, n, o);
}

/* The memory plan against the limit (memory.c), before the optimizer is
 * allocated; a parameter server's workers hold no optimizer state: none. */
static dt_status check_model(void *user, dt_model *m, int dp, bool lead)
{
    dtrain_recipe_state *st = user;
    if (st->c->servers > 0 || dtrain_memory_plan(st->c, m, dp, lead) == 0)
        return DT_OK;
    st->memory_refused = true; /* printed */
    return DT_ERR_INVALID;
}

void dtrain_recipe_of(const dtrain_config *c, dtrain_recipe_state *st, dt_run_recipe *r)
{
    *st = (dtrain_recipe_state){c, false};
    *r = (dt_run_recipe){.describe = describe,
                         .make_optimizer = make_optimizer,
                         .check_model = check_model,
                         .user = st,
                         .seed = (uint64_t)c->seed,
                         .grad_clip = (float)c->grad_clip,
                         .weight_decay = (float)c->weight_decay,
                         .no_decay = c->no_decay,
                         .offload_dir = c->offload_dir,
                         .ps_clock_log = c->ps_clock_log[0] ? c->ps_clock_log : NULL};
}
