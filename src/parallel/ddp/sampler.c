/* The data-parallel sampler (parallel.h): each rank of the communicator
 * takes its own shard of every epoch's shuffled order. */
#include "dtrain/parallel.h"

dt_status dt_dist_sampler_init(dt_sampler *s, int64_t size, uint64_t seed, const dt_comm *c)
{
    return dt_sampler_init(s, size, seed, dt_comm_rank(c), dt_comm_size(c), true, true);
}
