/* The shared arena's round counter wraps about 1024 rounds into every job
 * (transport/shm_arena.h: DT__ARENA_FIRST_ROUND); a job that starts with a loop
 * of small broadcasts crosses the wrap in them.
 *
 * usage: arena_wrap SHIFT   (under dtrun, one host)
 *   SHIFT allreduces first (0 or 1: the broadcasts' rounds then fall on
 *   either parity), then 1500 broadcasts of 8 bytes from rank 0, each
 *   checked, then 1500 from the last rank.
 * Before the fix a reader of the small broadcast at round 0 took the root's
 * never-written signature line (zeroed memory) for round 0's and failed with
 * a collective mismatch against "an unknown collective (signature 0)":
 * `dtbench broadcast -b 8 -e 8 -n 1000` on 2 ranks, every run.
 * Exit 0 when every call returned DT_OK with the root's data. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "dtrain/dtrain.h"

int main(int argc, char **argv)
{
    int shift = argc > 1 ? atoi(argv[1]) : 0;
    dt_comm *c;
    if (dt_comm_init_env(&c) != DT_OK) {
        fprintf(stderr, "arena_wrap: init: %s\n", dt_last_error());
        return 1;
    }
    int rank = dt_comm_rank(c), size = dt_comm_size(c), bad = 0;
    dt_status s = DT_OK;
    for (int i = 0; i < shift && s == DT_OK; i++) {
        int32_t one = 1, total = 0;
        s = dt_allreduce(&one, &total, 1, DT_I32, DT_SUM, c);
    }
    for (int i = 0; i < 3000 && s == DT_OK; i++) {
        int root = i < 1500 ? 0 : size - 1;
        uint64_t v = rank == root ? 0x1234567800000000ull + (uint64_t)i : 0;
        s = dt_broadcast(&v, 1, DT_I64, root, c);
        if (s == DT_OK && v != 0x1234567800000000ull + (uint64_t)i && !bad++)
            fprintf(stderr, "arena_wrap: rank %d: broadcast %d gave %llx\n", rank, i, (unsigned long long)v);
    }
    if (s != DT_OK)
        fprintf(stderr, "arena_wrap: rank %d: %s: %s\n", rank, dt_status_name(s), dt_last_error());
    else if (!bad)
        printf("arena_wrap: rank %d: 3000 broadcasts right\n", rank);
    dt_comm_destroy(c);
    return s == DT_OK && !bad ? 0 : 1;
}
