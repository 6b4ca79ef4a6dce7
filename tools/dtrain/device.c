/* The trainer's device: `device = cuda` moves the model and the optimizer
 * (initialised or loaded on the host) to the GPU and names it on the start
 * line.  One rank per GPU process; several ranks on one host share GPUs by
 * DT_LOCAL_RANK (dt_device_open). */
#include <stdio.h>
#include <string.h>

#include "dtrain_cli.h"

dt_status dtrain_move_to_device(const dtrain_config *c, dt_model *m, dt_optimizer *o, int nranks, bool lead)
{
    if (nranks > 1) {
        fprintf(stderr, "dtrain: device %s: %d ranks: training on GPUs across ranks is not built yet (this build "
                        "trains one rank per GPU job; set device=cpu for data-parallel runs)\n", c->device, nranks);
        return DT_ERR_INVALID;
    }
    const dt_device *dev = NULL;
    char what[256] = "";
    dt_status s = dt_device_open(c->device, &dev);
    if (s == DT_OK)
        s = dt_device_set_tf32(dev, c->tf32);
    if (s == DT_OK)
        s = dt_device_describe(dev, what, sizeof what);
    if (s == DT_OK)
        s = dt_model_to_device(m, dev);
    if (s == DT_OK)
        s = dt_optimizer_set_device(o, dev);
    if (s != DT_OK) {
        fprintf(stderr, "dtrain: device %s: %s\n", c->device, dt_last_error());
        return s;
    }
    const char *products = !strcmp(c->precision, "bf16") ? "bf16 (f32 sums)" : c->tf32 ? "TF32" : "f32";
    if (lead && !strcmp(c->device, "emu"))
        dtrain_progress_line("device: %s; matrix products %s\n", what, products);
    else if (lead)
        dtrain_progress_line("device: %s (%s); matrix products %s on cuBLASLt, attention, LayerNorm, GELU, dropout, "
                             "cross-entropy and %s as dtrain's CUDA kernels\n",
                             what, c->device, products, c->optimizer);
    return DT_OK;
}
