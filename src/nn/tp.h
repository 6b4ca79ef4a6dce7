/* Tensor-parallel layers' internals shared between their files. */
#ifndef DT_NN_TP_H
#define DT_NN_TP_H

#include "dtrain/nn.h"

/* A group the layers can use (dt_tp_group's contract: size >= 1, rank in
 * range, every entry set), else DT_ERR_INVALID naming `who` and the fault. */
dt_status dt__tp_check(const dt_tp_group *g, const char *who);

/* The group's exchanges as the layers call them: blocking, except inside a
 * copy of a block run as copies (nn/copies.h), where a group with the
 * nonblocking entries starts the exchange and lets the next copy compute
 * while it travels.  The results are the same either way. */
dt_status dt__tp_allreduce_sum(const dt_tp_group *g, float *buf, int64_t n);
dt_status dt__tp_allgather(const dt_tp_group *g, const float *mine, float *all, int64_t n_each);
dt_status dt__tp_reduce_scatter_sum(const dt_tp_group *g, const float *all, float *mine, int64_t n_each);

/* dt_linear_parallel_create with a column layer's output cut into `groups`
 * equal groups first (attention's q, k, v: 3), each split t ways.  sp:
 * sequence parallel (seq_parallel.c): a column layer gathers its input's
 * sequence slices [B, T/t, in] and its backward reduce-scatters the input
 * gradient; a row layer reduce-scatters its output into slices (then adds
 * the bias, whose gradient is then partial: dt_param_info.tp_partial). */
dt_status dt__linear_parallel_create(dt_params *p, const char *name, int64_t in, int64_t out, bool bias,
                                     dt_tp_split split, int64_t groups, bool sp, const dt_tp_group *tp,
                                     dt_layer **l);

/* Sequence-parallel exchanges over tp (t ranks): slices [B, Tl, D] of every
 * rank into the whole [B, T = t Tl, D] (allgather), and the whole partial
 * sums into this rank's summed slice (reduce-scatter).  scratch holds
 * t B Tl D floats. */
dt_status dt__sp_gather(const dt_tp_group *tp, const float *local, float *whole, float *scratch, int64_t B,
                        int64_t Tl, int64_t D);
dt_status dt__sp_reduce_scatter(const dt_tp_group *tp, const float *whole, float *local, float *scratch,
                                int64_t B, int64_t Tl, int64_t D);
/* Attention with its heads split over tp, sequence parallel: its input
 * and output are this rank's slices [B, T/t, dim]. */
dt_status dt__attention_seq_create(dt_params *p, const char *name, int64_t dim, int64_t heads,
                                   const dt_tp_group *tp, dt_layer **l);
/* Dropout over sequence slices: element i of this rank's [B, Tl, D] slice
 * draws what element (b, r Tl + tl, d) of the whole [B, t Tl, D] tensor
 * draws without sequence parallelism (rank r of t). */
dt_status dt__dropout_seq_create(const char *name, float prob, int t, int r, dt_layer **l);

#endif
