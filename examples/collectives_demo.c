/* The `make demo` program: every rank allreduces, broadcasts and allgathers a
 * few numbers and prints what it got.  Run it with: dtrun -n 4 collectives_demo */
#include <stdio.h>
#include <stdlib.h>

#include "dtrain/dtrain.h"

static int fail(const char *what, dt_comm *c)
{
    fprintf(stderr, "collectives_demo: %s failed: %s\n", what, dt_last_error());
    dt_comm_destroy(c);
    return 1;
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        printf("usage: dtrun -n N %s\n\nAllreduce, broadcast and allgather a few numbers across the ranks\n"
               "of a dtrain job and print what every rank received.\n", argv[0]);
        return 0;
    }
    dt_comm *c;
    if (dt_comm_init_env(&c) != DT_OK) {
        fprintf(stderr, "collectives_demo: cannot join the job: %s\n", dt_last_error());
        return 1;
    }
    int rank = dt_comm_rank(c), size = dt_comm_size(c);

    float mine[4] = {(float)rank, (float)rank * 10, 1.0f, (float)(rank + 1)};
    float sum[4];
    if (dt_allreduce(mine, sum, 4, DT_F32, DT_SUM, c) != DT_OK)
        return fail("allreduce", c);
    printf("rank %d/%d allreduce(sum) of {r, 10r, 1, r+1} = {%g, %g, %g, %g}\n", rank, size, sum[0], sum[1],
           sum[2], sum[3]);

    char greeting[32] = "";
    if (rank == 0)
        snprintf(greeting, sizeof greeting, "hello from rank 0 of %d", size);
    if (dt_broadcast(greeting, sizeof greeting, DT_U8, 0, c) != DT_OK)
        return fail("broadcast", c);
    printf("rank %d/%d broadcast from rank 0: \"%s\"\n", rank, size, greeting);

    int32_t *all = malloc((size_t)size * sizeof *all);
    int32_t square = rank * rank;
    if (!all || dt_allgather(&square, all, 1, DT_I32, c) != DT_OK)
        return fail("allgather", c);
    char line[512];
    int n = snprintf(line, sizeof line, "rank %d/%d allgather of r*r = [", rank, size);
    for (int i = 0; i < size && n < (int)sizeof line - 16; i++)
        n += snprintf(line + n, sizeof line - (size_t)n, "%s%d", i ? ", " : "", all[i]);
    printf("%s]\n", line);
    free(all);
    return dt_comm_destroy(c) == DT_OK ? 0 : fail("destroy", NULL);
}
