/* The model a configuration describes: used by training, by eval and
 * generate, and by the checkpoint check of a manifest's configuration (kept
 * out of train.c, so that checkpoint.c does not depend on the loop). */
#include <stdio.h>
#include <string.h>

#include "dtrain_cli.h"


dt_status dtrain_describe_model(const dtrain_config *c, dt_comm *tp, dt_model_desc **d)
{
    dt_status s;
    dt_tp_group group = dt_tp_group_of_comm(tp); /* zeroed without tp: none */
    if (strcmp(c->model, "gpt") == 0)
        s = dt_gpt_describe(&(dt_gpt_config){.vocab = c->vocab, .context = c->context, .layers = c->layers,
                                             .heads = c->heads, .dim = c->dim, .dropout = (float)c->dropout,
                                             .tp = group, .sequence_parallel = tp && c->sequence_parallel},
                            d);
    else if (strcmp(c->model, "textclf") == 0)
        s = dt_textclf_describe(&(dt_textclf_config){c->buckets, c->dim, c->classes}, d);
    else if (strcmp(c->model, "cnn") == 0)
        s = dt_cnn_describe(28, c->conv1_channels, c->conv2_channels, 10, d);
    else if (tp)
        s = dt_mlp_describe_tp(c->mlp_sizes, c->mlp_nsizes, &group, d);
    else
        s = dt_mlp_describe(c->mlp_sizes, c->mlp_nsizes, d);
    if (s != DT_OK)
        fprintf(stderr, "dtrain: cannot build the model: %s\n", dt_last_error());
    return s;
}

dt_status dtrain_build_model(const dtrain_config *c, dt_model **m)
{
    dt_model_desc *d = NULL;
    if (dtrain_describe_model(c, NULL, &d) != DT_OK)
        return DT_ERR_INVALID;
    dt_status s = dt_model_instantiate(d, 0, dt_model_desc_blocks(d), m);
    if (s != DT_OK)
        fprintf(stderr, "dtrain: cannot build the model: %s\n", dt_last_error());
    dt_model_desc_destroy(d);
    return s;
}
