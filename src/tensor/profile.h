/* DT_KERNEL_PROFILE=1: a device's table wrapped so each entry is timed
 * (profile.c; dt_device_profile_print reports). */
#ifndef DT_TENSOR_PROFILE_H
#define DT_TENSOR_PROFILE_H

#include <stdbool.h>

#include "tensor/backend.h"

/* Whether DT_KERNEL_PROFILE=1. */
bool dt__profile_on(void);
/* The profiling table around ops (a device's, not the host's: that one is
 * returned as is; so is a second device kind's). */
const dt_compute_ops *dt__profile_wrap(const dt_compute_ops *ops);
/* The table behind ops when ops is the profiling one, else ops. */
const dt_compute_ops *dt__profile_inner(const dt_compute_ops *ops);

#endif
