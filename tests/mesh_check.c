/* The device mesh under dtrun: coordinates, groups and their order, every
 * group's allreduce over exactly its members, and the refusals.
 *
 * usage: mesh_check DIMS   e.g. "dp=0,tp=2" or "dp=2,pp=1,tp=3"
 * (exit 0: every check held on every rank) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain/dtrain.h"

static int failures;

#define EXPECT(cond, ...)                                                                              \
    do {                                                                                               \
        if (!(cond)) {                                                                                 \
            fprintf(stderr, "mesh_check rank %d: %s: ", rank, #cond);                                  \
            fprintf(stderr, __VA_ARGS__);                                                              \
            fprintf(stderr, "\n");                                                                     \
            failures++;                                                                                \
        }                                                                                              \
    } while (0)

#define CALL(x)                                                                                        \
    do {                                                                                               \
        if ((x) != DT_OK) {                                                                            \
            fprintf(stderr, "mesh_check: %s failed: %s\n", #x, dt_last_error());                      \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: mesh_check DIMS (e.g. dp=0,tp=2)\n");
        return 2;
    }
    dt_mesh_dim dims[DT_MESH_MAX_DIMS];
    char names[DT_MESH_MAX_DIMS][16];
    int nd = 0;
    char *spec = strdup(argv[1]);
    for (char *tok = strtok(spec, ","); tok && nd < DT_MESH_MAX_DIMS; tok = strtok(NULL, ",")) {
        char *eq = strchr(tok, '=');
        if (!eq)
            return 2;
        *eq = '\0';
        snprintf(names[nd], sizeof names[nd], "%s", tok);
        dims[nd] = (dt_mesh_dim){names[nd], atoi(eq + 1)};
        nd++;
    }
    dt_comm *world;
    CALL(dt_comm_init_env(&world));
    int rank = dt_comm_rank(world), size = dt_comm_size(world);

    /* Refusals, before any message (every rank refuses alike). */
    dt_mesh *bad = NULL;
    dt_mesh_dim three[] = {{"dp", 0}, {"tp", size + 1}};
    EXPECT(dt_mesh_create(world, three, 2, &bad) == DT_ERR_INVALID && !bad, "tp > world accepted");
    EXPECT(strstr(dt_last_error(), "not divisible"), "message: %s", dt_last_error());
    dt_mesh_dim exact[] = {{"dp", 1}, {"tp", size + 1}};
    EXPECT(dt_mesh_create(world, exact, 2, &bad) == DT_ERR_INVALID, "product != world accepted");
    EXPECT(strstr(dt_last_error(), "but the world has"), "message: %s", dt_last_error());
    dt_mesh_dim twice[] = {{"tp", 0}, {"tp", 1}};
    EXPECT(dt_mesh_create(world, twice, 2, &bad) == DT_ERR_INVALID, "a name twice accepted");
    EXPECT(strstr(dt_last_error(), "named twice"), "message: %s", dt_last_error());
    dt_mesh_dim two_rest[] = {{"dp", 0}, {"tp", 0}};
    EXPECT(dt_mesh_create(world, two_rest, 2, &bad) == DT_ERR_INVALID, "two rests accepted");
    dt_mesh_dim badname[] = {{"Tensor Parallel", 0}};
    EXPECT(dt_mesh_create(world, badname, 1, &bad) == DT_ERR_INVALID, "a bad name accepted");

    dt_mesh *m;
    CALL(dt_mesh_create(world, dims, nd, &m));
    char desc[256];
    if (rank == 0)
        printf("mesh_check: %s\n", dt_mesh_describe(m, 0, desc, sizeof desc));
    /* Coordinates are the digits of the rank, the last dimension fastest. */
    int coords[DT_MESH_MAX_DIMS], r = rank, product = 1;
    for (int i = nd - 1; i >= 0; i--) {
        const char *n = dt_mesh_dim_name(m, i);
        int sz = dt_mesh_size(m, n);
        coords[i] = r % sz;
        r /= sz;
        product *= sz;
        EXPECT(dt_mesh_coord(m, n) == coords[i], "%s coordinate %d, expected %d", n, dt_mesh_coord(m, n), coords[i]);
    }
    EXPECT(product == size, "sizes multiply to %d, not %d", product, size);
    EXPECT(dt_mesh_rank_at(m, coords) == rank, "rank_at %d", dt_mesh_rank_at(m, coords));
    EXPECT(dt_mesh_size(m, "nosuch") == 1 && dt_mesh_coord(m, "nosuch") == 0, "a missing dimension is not 1");
    EXPECT(dt_mesh_comm(m, "nosuch") == NULL, "a comm for a missing dimension");
    /* Each group: its size, my rank in it = my coordinate, and an allreduce
     * of world ranks sums exactly the ranks that differ only there. */
    for (int i = 0; i < nd; i++) {
        const char *n = dt_mesh_dim_name(m, i);
        dt_comm *g = dt_mesh_comm(m, n);
        EXPECT(dt_comm_size(g) == dt_mesh_size(m, n), "%s group of %d", n, dt_comm_size(g));
        EXPECT(dt_comm_rank(g) == coords[i], "%s group rank %d, coordinate %d", n, dt_comm_rank(g), coords[i]);
        int64_t mine = rank, sum = 0, want = 0;
        CALL(dt_allreduce(&mine, &sum, 1, DT_I64, DT_SUM, g));
        int c[DT_MESH_MAX_DIMS];
        memcpy(c, coords, sizeof c);
        for (int k = 0; k < dt_mesh_size(m, n); k++) {
            c[i] = k;
            want += dt_mesh_rank_at(m, c);
        }
        EXPECT(sum == want, "%s group sums ranks to %lld, expected %lld", n, (long long)sum, (long long)want);
    }
    printf("mesh_check rank %d: %s\n", rank, dt_mesh_describe(m, 1, desc, sizeof desc));
    dt_mesh_destroy(m);
    int all = 0;
    CALL(dt_allreduce(&failures, &all, 1, DT_I32, DT_SUM, world));
    if (rank == 0)
        printf("mesh_check: %d ranks: %s\n", size, all ? "FAILED" : "ok");
    CALL(dt_comm_destroy(world));
    free(spec);
    return all ? 1 : 0;
}
