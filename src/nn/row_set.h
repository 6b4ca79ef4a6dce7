/* The rows of a row-sparse parameter whose gradient may be nonzero: a bit
 * per row (so a row is recorded once however often a batch touches it) and
 * the list of recorded rows, sorted when asked.  Clearing costs the rows
 * recorded, not the table: the registry zeroes only those rows' gradients. */
#ifndef DT_NN_ROW_SET_H
#define DT_NN_ROW_SET_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/base.h"

typedef struct {
    int64_t rows;   /* of the parameter */
    uint64_t *bits; /* rows bits */
    int64_t *ids;   /* the recorded rows, n of them (sorted when `sorted`) */
    int64_t n, cap;
    bool sorted;
    bool all; /* every row may be nonzero (dt_param_touch_all) */
} dt__row_set;

dt_status dt__row_set_init(dt__row_set *s, int64_t rows);
/* Record rows[0..n); each must be in [0, s->rows) (the caller checked). */
dt_status dt__row_set_add(dt__row_set *s, const int64_t *rows, int64_t n);
/* The recorded rows in increasing order. */
dt_status dt__row_set_sort(dt__row_set *s);
/* Forget every row (the bits of the recorded ones only, unless `all`). */
void dt__row_set_clear(dt__row_set *s);
void dt__row_set_free(dt__row_set *s);

#endif
