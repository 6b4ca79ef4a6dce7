/* The trainer's device lines: the run (dt_strategy_create) moved the model
 * and the optimizer to the device; the start line names it, with its
 * memory, and the end line says the most its allocator held.  One rank per
 * GPU process; several ranks on one host share GPUs by DT_LOCAL_RANK
 * (dt_device_open). */
#include <stdio.h>
#include <string.h>

#include "dtrain_cli.h"

void dtrain_device_line(const dtrain_config *c)
{
    const dt_device *dev = NULL;
    char what[384] = "";
    size_t total = 0, free_b = 0;
    if (dt_device_open(c->device, &dev) != DT_OK || dt_device_describe(dev, what, sizeof what) != DT_OK)
        snprintf(what, sizeof what, "%s", c->device);
    else if (dt_device_memory(dev, &total, &free_b, NULL) == DT_OK) /* what the run starts with */
        snprintf(what + strlen(what), sizeof what - strlen(what), ", %s%.1f GiB free of %.1f GiB",
                 !strcmp(c->device, "emu") ? "host memory " : "", (double)free_b / 1073741824.0,
                 (double)total / 1073741824.0);
    const char *products = !strcmp(c->precision, "bf16") ? "bf16 (f32 sums)" : c->tf32 ? "TF32" : "f32";
    if (!strcmp(c->device, "emu"))
        dtrain_progress_line("device: %s; matrix products %s\n", what, products);
    else
        dtrain_progress_line("device: %s (%s); matrix products %s on cuBLASLt, attention, LayerNorm, GELU, dropout, "
                             "cross-entropy and %s as dtrain's CUDA kernels\n",
                             what, c->device, products, c->optimizer);
}

void dtrain_device_end_line(const dtrain_config *c)
{
    const dt_device *dev = NULL;
    size_t total = 0, free_b = 0, peak = 0;
    if (dt_device_open(c->device, &dev) != DT_OK || dt_device_is_host(dev) ||
        dt_device_memory(dev, &total, &free_b, &peak) != DT_OK)
        return;
    printf("device memory: at most %.1f MiB allocated at once on %s (the allocator's peak: weights, gradients, "
           "optimizer state, activations, batches), %.1f GiB free of %.1f GiB at the end\n",
           (double)peak / 1048576.0, c->device, (double)free_b / 1073741824.0, (double)total / 1073741824.0);
}
