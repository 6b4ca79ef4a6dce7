/* A pool of float buffers taken and given back many times a step (ZeRO's
 * per-micro-batch gradient buffers), all of one size (the largest request
 * its owner will make), reserved once and kept until the pool is freed:
 * nothing is allocated per unit per micro-batch.  A take beyond the
 * reserve (the owner's bound was short) adds a buffer, which stays.  Not
 * thread-safe: one owner. */
#ifndef DT_PARALLEL_ZERO_BUF_POOL_H
#define DT_PARALLEL_ZERO_BUF_POOL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/base.h"

struct dt_compute_ops;

typedef struct {
    float *data;
    int64_t cap; /* floats */
    bool used;
} dt__pool_buf;

typedef struct {
    dt__pool_buf *b;
    int n, cap;
    int64_t size;     /* floats per buffer */
    size_t bytes;     /* allocated in all (dt_strategy_memory_bytes counts them) */
    uint64_t allocs;  /* buffers allocated so far (a test checks they stop growing) */
    /* whose memory the buffers are: NULL (or the cpu's) the host's; set
     * before the first reserve (ZeRO on a device: the device's) */
    const struct dt_compute_ops *ops;
} dt__buf_pool;

/* Buffers of `size` floats from now on; `count` of them allocated now. */
dt_status dt__pool_reserve(dt__buf_pool *p, int64_t size, int count);
/* A buffer of at least n floats (n <= the pool's size), its first n zeroed
 * when `zero`. */
dt_status dt__pool_take(dt__buf_pool *p, int64_t n, bool zero, float **out);
/* Give back a buffer dt__pool_take returned (NULL: nothing). */
void dt__pool_give(dt__buf_pool *p, float *buf);
/* Free every buffer (none may be in use by a transfer any more). */
void dt__pool_free(dt__buf_pool *p);

#endif
