/* The fastText-style text classifier as a block description: an
 * EmbeddingBag (mean) over hashed feature ids, then a linear layer to the
 * classes (Joulin et al., "Bag of Tricks for Efficient Text Classification",
 * 2016, without the hierarchical softmax).  The table is row-sparse: a step
 * touches the rows of its batch's features only. */
#include <stdio.h>

#include "base/status.h"
#include "dtrain/nn.h"
#include "nn/model_internal.h"

static dt_status make_block(const dt_model_desc *d, int index, dt_params *p, dt_layer **out)
{
    const dt_textclf_config *c = dt__desc_config(d);
    if (index == 0)
        return dt_embedding_bag_create(p, "embedding", c->buckets, c->dim, out);
    return dt_linear_create(p, "fc", c->dim, c->classes, true, out);
}

dt_status dt_textclf_describe(const dt_textclf_config *cfg, dt_model_desc **out)
{
    if (!cfg || !out)
        return dt__fail(DT_ERR_INVALID, "textclf: %s is NULL", cfg ? "out" : "the configuration");
    if (cfg->buckets < 1 || cfg->buckets > (1 << 24) || cfg->dim < 1 || cfg->classes < 2)
        return dt__fail(DT_ERR_INVALID,
                        "textclf: buckets %lld (1..2^24), dim %lld (>= 1), classes %lld (>= 2)",
                        (long long)cfg->buckets, (long long)cfg->dim, (long long)cfg->classes);
    dt_model_desc *d = NULL;
    DT_CHECK(dt__desc_new(cfg, sizeof *cfg, &d));
    dt__desc_set_input(d, 1, (int64_t[]){32}, cfg->buckets); /* bags of up to 32 features (the width is the data's) */
    /* per sample, for a bag of ~100 features: the sums, then the product */
    double dim = (double)cfg->dim, classes = (double)cfg->classes;
    dt_status s = dt__desc_add(d, "embedding", "embedding_bag", make_block, cfg->buckets * cfg->dim,
                               100 * dim, 4 * dim);
    if (s == DT_OK)
        s = dt__desc_add(d, "fc", "linear", make_block, cfg->classes * (cfg->dim + 1), 2 * dim * classes,
                         4 * (dim + classes));
    if (s != DT_OK) {
        dt_model_desc_destroy(d);
        return s;
    }
    *out = d;
    return DT_OK;
}

dt_status dt_textclf_create(const dt_textclf_config *cfg, dt_model **out)
{
    dt_model_desc *d = NULL;
    return dt__build_whole(dt_textclf_describe(cfg, &d), &d, out);
}
