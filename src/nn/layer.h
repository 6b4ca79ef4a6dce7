/* What every layer constructor does: allocate the layer object with its
 * operations and name, and register parameters under "<name>.<suffix>". */
#ifndef DT_NN_LAYER_H
#define DT_NN_LAYER_H

#include <stddef.h>

#include "dtrain/nn.h"

/* A zeroed object of `size` bytes, which must begin with a dt_layer, with
 * ops and a printf-formatted name; NULL with the error set when out of memory. */
void *dt__layer_new(size_t size, const dt_layer_ops *ops, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Register parameter "<l->name>.<suffix>" with the given shape in p. */
dt_status dt__layer_param(dt_params *p, const dt_layer *l, const char *suffix, int ndim, const int64_t *shape,
                          int *index);

#endif
