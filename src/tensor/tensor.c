#include <string.h>

#include "dtrain/tensor.h"

dt_tensor dt_tensor_view(float *data, int ndim, const int64_t *shape)
{
    dt_tensor t = {.data = data, .ndim = ndim};
    for (int i = 0; i < ndim && i < DT_MAX_DIMS; i++)
        t.shape[i] = shape[i];
    return t;
}

int64_t dt_tensor_numel(const dt_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++)
        n *= t->shape[i];
    return n;
}
