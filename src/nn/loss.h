/* What the two cross-entropies (loss.c, loss_parallel.c) share. */
#ifndef DT_NN_LOSS_H
#define DT_NN_LOSS_H

#include <stdint.h>

#include "dtrain/base.h"

/* Every target is -1 (ignored) or a class in 0..classes-1; *counted gets
 * the rows not ignored.  DT_ERR_INVALID naming the first bad row. */
dt_status dt__ce_count_targets(const int32_t *targets, int64_t rows, int64_t classes, int64_t *counted);

#endif
