/* The trainer's device line: the run (dt_strategy_create) moved the model
 * and the optimizer to the device; the start line names it.  One rank per
 * GPU process; several ranks on one host share GPUs by DT_LOCAL_RANK
 * (dt_device_open). */
#include <stdio.h>
#include <string.h>

#include "dtrain_cli.h"

void dtrain_device_line(const dtrain_config *c)
{
    const dt_device *dev = NULL;
    char what[256] = "";
    if (dt_device_open(c->device, &dev) != DT_OK || dt_device_describe(dev, what, sizeof what) != DT_OK)
        snprintf(what, sizeof what, "%s", c->device);
    const char *products = !strcmp(c->precision, "bf16") ? "bf16 (f32 sums)" : c->tf32 ? "TF32" : "f32";
    if (!strcmp(c->device, "emu"))
        dtrain_progress_line("device: %s; matrix products %s\n", what, products);
    else
        dtrain_progress_line("device: %s (%s); matrix products %s on cuBLASLt, attention, LayerNorm, GELU, dropout, "
                             "cross-entropy and %s as dtrain's CUDA kernels\n",
                             what, c->device, products, c->optimizer);
}
