/* Tensor-parallel layers' internals shared between their files. */
#ifndef DT_NN_TP_H
#define DT_NN_TP_H

#include "dtrain/comm.h"
#include "dtrain/nn.h"

/* dt_linear_parallel_create with a column layer's output cut into `groups`
 * equal groups first (attention's q, k, v: 3), each split t ways. */
dt_status dt__linear_parallel_create(dt_params *p, const char *name, int64_t in, int64_t out, bool bias,
                                     dt_tp_split split, int64_t groups, dt_comm *tp, dt_layer **l);

#endif
