/* The compute-thread pool: parallel_for over an index range. */
#ifndef DT_TENSOR_THREADS_H
#define DT_TENSOR_THREADS_H

#include <stdbool.h>
#include <stdint.h>

/* fn(begin, end, arg) runs on disjoint chunks covering [0, n); chunks are at
 * least `grain` long, so small ranges run on the calling thread alone. The
 * split depends only on n, grain and the thread count: results of a kernel
 * that writes only its own chunk are deterministic. */
typedef void (*dt__range_fn)(int64_t begin, int64_t end, void *arg);
void dt__parallel_for(int64_t n, int64_t grain, dt__range_fn fn, void *arg);
/* True on a thread that is running a parallel_for chunk (nested calls run inline). */
bool dt__in_parallel(void);
/* Another library's threads (oneDNN's OpenMP team) are about to compute:
 * idle pool workers stop looking for work and sleep at once, leaving them
 * the cores, until the next parallel_for. */
void dt__pool_park(void);

#endif
