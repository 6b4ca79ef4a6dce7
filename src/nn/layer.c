#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/status.h"
#include "nn/layer.h"

void *dt__layer_new(size_t size, const dt_layer_ops *ops, const char *fmt, ...)
{
    dt_layer *l = calloc(1, size);
    if (!l) {
        dt__fail(DT_ERR_NOMEM, "out of memory for a %s layer", ops->kind);
        return NULL;
    }
    l->ops = ops;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->name, sizeof l->name, fmt, ap);
    va_end(ap);
    return l;
}

dt_status dt__layer_param(dt_params *p, const dt_layer *l, const char *suffix, int ndim, const int64_t *shape,
                          int *index)
{
    char name[sizeof((dt_param_info *)0)->name];
    if (snprintf(name, sizeof name, "%s.%s", l->name, suffix) >= (int)sizeof name)
        return dt__fail(DT_ERR_INVALID, "parameter name %s.%s is longer than %zu characters", l->name, suffix,
                        sizeof name - 1);
    return dt_params_add(p, name, ndim, shape, index);
}
