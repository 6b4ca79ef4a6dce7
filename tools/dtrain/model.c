/* The model a configuration describes: used by training, by eval and
 * generate, and by the checkpoint check of a manifest's configuration (kept
 * out of train.c, so that checkpoint.c does not depend on the loop). */
#include <stdio.h>
#include <string.h>

#include "dtrain_cli.h"

dt_status dtrain_build_model(const dtrain_config *c, dt_model **m) { return dtrain_build_model_tp(c, NULL, m); }

dt_status dtrain_build_model_tp(const dtrain_config *c, dt_comm *tp, dt_model **m)
{
    dt_status s;
    if (strcmp(c->model, "gpt") == 0)
        s = dt_gpt_create(&(dt_gpt_config){.vocab = c->vocab, .context = c->context, .layers = c->layers,
                                           .heads = c->heads, .dim = c->dim, .dropout = (float)c->dropout, .tp = tp,
                                           .sequence_parallel = tp && c->sequence_parallel},
                          m);
    else if (strcmp(c->model, "cnn") == 0)
        s = dt_cnn_create(28, c->conv1_channels, c->conv2_channels, 10, m);
    else if (tp) {
        dt_model_desc *d = NULL;
        s = dt_mlp_describe_tp(c->mlp_sizes, c->mlp_nsizes, tp, &d);
        if (s == DT_OK)
            s = dt_model_instantiate(d, 0, dt_model_desc_blocks(d), m);
        dt_model_desc_destroy(d);
    } else
        s = dt_mlp_create(c->mlp_sizes, c->mlp_nsizes, m);
    if (s != DT_OK)
        fprintf(stderr, "dtrain: cannot build the model: %s\n", dt_last_error());
    return s;
}
