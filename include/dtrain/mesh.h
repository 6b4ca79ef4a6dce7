/* dtrain device mesh: the world's ranks arranged as a grid with named
 * dimensions (data parallel "dp", pipeline "pp", tensor parallel "tp", ...),
 * each rank's coordinates, and one communicator per dimension group.
 *
 *   dt_mesh_dim dims[] = {{"dp", 0}, {"tp", 2}};   // dp: the rest of the world
 *   dt_mesh *m;  dt_mesh_create(world, dims, 2, &m);
 *   dt_comm *tp = dt_mesh_comm(m, "tp");           // my tensor-parallel group
 *   int r = dt_mesh_coord(m, "tp");                // my place in it
 *
 * Dimensions are listed outermost first and the last one is innermost:
 * ranks that differ only in the last coordinate are consecutive world ranks.
 * Launchers place ranks host by host (dtrun -n L on each node), so with tp
 * last a tensor-parallel group stays on one host, where its per-layer
 * allreduces go through shared memory (docs/parallelism.md has the
 * measurement).  The communicator of dimension d holds the ranks whose other
 * coordinates equal this rank's, ordered by their coordinate in d. */
#ifndef DTRAIN_MESH_H
#define DTRAIN_MESH_H

#include <stddef.h>

#include "dtrain/comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DT_MESH_MAX_DIMS 8

typedef struct dt_mesh dt_mesh;

typedef struct {
    const char *name; /* 1..15 characters of [a-z0-9_], unique in the mesh */
    int size;         /* >= 1; 0 in at most one dimension: the world divided by the others */
} dt_mesh_dim;

/* Collective over world (every rank passes the same dimensions).  Sizes
 * whose product is not the world's size, or that do not divide it, are
 * refused with DT_ERR_INVALID naming the numbers, before any message.
 * The mesh keeps world (not owned) and owns the dimension communicators. */
dt_status dt_mesh_create(dt_comm *world, const dt_mesh_dim *dims, int ndims, dt_mesh **out);
/* dt_mesh_create's checks of the sizes against a world of `world` ranks,
 * with its messages, without a communicator: what a launcher's rank can
 * refuse before joining the job (dt_comm_env_world gives the size). */
dt_status dt_mesh_check(const dt_mesh_dim *dims, int ndims, int world);
int dt_mesh_ndims(const dt_mesh *m);
/* Name of dimension i (outermost 0), NULL outside 0..ndims-1. */
const char *dt_mesh_dim_name(const dt_mesh *m, int i);
/* Size of / this rank's coordinate in the named dimension; a name the mesh
 * does not have counts as a dimension of size 1 (coordinate 0), so code
 * written for "dp x tp" runs on a mesh without tp. */
int dt_mesh_size(const dt_mesh *m, const char *dim);
int dt_mesh_coord(const dt_mesh *m, const char *dim);
/* The communicator of this rank's group along dim; NULL (error set) for a
 * name the mesh does not have. */
dt_comm *dt_mesh_comm(const dt_mesh *m, const char *dim);
/* World rank of the rank at `coords` (one per dimension, outermost first);
 * -1 for a coordinate outside its dimension. */
int dt_mesh_rank_at(const dt_mesh *m, const int *coords);
/* "dp=2 x tp=2" (and " (this rank: dp 1, tp 0)" with mine != 0). */
const char *dt_mesh_describe(const dt_mesh *m, int mine, char *buf, size_t len);
/* Destroys the dimension communicators (collective, like dt_comm_destroy). */
void dt_mesh_destroy(dt_mesh *m);

#ifdef __cplusplus
}
#endif
#endif
