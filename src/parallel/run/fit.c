/* The model against a layout: what dt_layout_check (the keys and the world)
 * cannot see.  A pipeline cuts the model's blocks into pp x chunks stages of
 * at least one block each. */
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "parallel/common/strategy.h"

dt_status dt_layout_check_model(const dt_layout *l, const dt_model_desc *d)
{
    if (!l || !d)
        return dt__fail(DT_ERR_INVALID, "layout_check_model: %s is NULL", !l ? "the layout" : "the model");
    bool blocks = false; /* tp_copies runs the transformer blocks as copies */
    for (int i = 0; i < dt_model_desc_blocks(d); i++)
        blocks |= !strcmp(dt_model_desc_block(d, i)->kind, "gpt-block");
    if (l->tp_copies > 1 && !blocks)
        return dt__fail(DT_ERR_INVALID, "key 'tp_copies' = %d is for the gpt's transformer blocks: this model has none",
                        l->tp_copies);
    if (l->pp <= 1)
        return DT_OK;
    int parts = l->pp * dt_layout_chunks(l), *bounds = malloc((size_t)(parts + 1) * sizeof *bounds);
    if (!bounds)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_status s = dt_pipeline_partition(d, parts, bounds);
    free(bounds);
    return s != DT_OK ? dt__fail(s, "pp = %d: %s", l->pp, dt_last_error()) : DT_OK;
}
