/* Element-wise reduction kernels used by every reducing collective.
 *
 * dt__reduce computes out[i] = a[i] OP b[i]; out may alias a or b.  The
 * argument order is part of the contract: collectives always pass the
 * lower-ranked contribution as `a`, which keeps results bitwise identical on
 * every rank even for non-commutative corner cases (NaN payloads).
 * f16/bf16 combine in f32 and round once per combine.  DT_AVG combines as a
 * sum; dt__reduce_finish divides by the number of contributions. */
#ifndef DT_BASE_REDOP_H
#define DT_BASE_REDOP_H

#include <stddef.h>

#include "dtrain/base.h"

void dt__reduce(void *out, const void *a, const void *b, size_t count, dt_dtype t, dt_redop op);
/* Final step of every reduction over n contributions, on its result: DT_AVG
 * divides by n (integer types truncate).  With one contribution (n <= 1:
 * nothing was combined) every float NaN becomes the one quiet NaN the
 * kernels return, so that a one-rank reduction follows the contract too. */
void dt__reduce_finish(void *buf, size_t count, dt_dtype t, dt_redop op, int n);

#endif
