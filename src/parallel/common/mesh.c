/* The device mesh (dtrain/mesh.h): coordinates are the digits of the world
 * rank in the mixed radix of the dimension sizes, the last dimension the
 * fastest; the group along dimension d is one dt_comm_split of the world,
 * coloured by the rank with coordinate d set to 0 and keyed by coordinate d. */
#include <ctype.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "dtrain/mesh.h"

struct dt_mesh {
    dt_comm *world;
    int ndims;
    char names[DT_MESH_MAX_DIMS][16];
    int sizes[DT_MESH_MAX_DIMS], coords[DT_MESH_MAX_DIMS];
    dt_comm *comms[DT_MESH_MAX_DIMS];
};

static int find(const dt_mesh *m, const char *dim)
{
    for (int i = 0; dim && i < m->ndims; i++)
        if (!strcmp(m->names[i], dim))
            return i;
    return -1;
}

static bool name_ok(const char *s)
{
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > 15)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(islower((unsigned char)s[i]) || isdigit((unsigned char)s[i]) || s[i] == '_'))
            return false;
    return true;
}

/* Sizes checked and the one 0 resolved against the world's size. */
static dt_status resolve(dt_mesh *m, const dt_mesh_dim *dims, int ndims, int world)
{
    if (ndims < 1 || ndims > DT_MESH_MAX_DIMS)
        return dt__fail(DT_ERR_INVALID, "mesh: %d dimensions (expected 1 to %d)", ndims, DT_MESH_MAX_DIMS);
    double product = 1;
    int rest = -1;
    m->ndims = ndims;
    for (int i = 0; i < ndims; i++) {
        if (!name_ok(dims[i].name))
            return dt__fail(DT_ERR_INVALID, "mesh: dimension %d's name '%s' (expected 1 to 15 of a-z, 0-9, _)", i,
                            dims[i].name ? dims[i].name : "(null)");
        snprintf(m->names[i], sizeof m->names[i], "%s", dims[i].name);
        if (find(m, dims[i].name) != i)
            return dt__fail(DT_ERR_INVALID, "mesh: dimension '%s' is named twice", dims[i].name);
        if (dims[i].size < 0 || (dims[i].size == 0 && rest >= 0))
            return dt__fail(DT_ERR_INVALID, "mesh: %s=%d (expected a size >= 1, or 0 in one dimension for the rest)",
                            dims[i].name, dims[i].size);
        if (dims[i].size == 0)
            rest = i;
        else
            product *= dims[i].size; /* a double: no overflow, exact up to 2^53 */
        m->sizes[i] = dims[i].size;
    }
    char shape[160];
    int n = 0;
    for (int i = 0; i < ndims && n < (int)sizeof shape; i++)
        n += m->sizes[i] ? snprintf(shape + n, sizeof shape - (size_t)n, "%s%s=%d", i ? " x " : "", m->names[i],
                                    m->sizes[i])
                         : snprintf(shape + n, sizeof shape - (size_t)n, "%s%s=?", i ? " x " : "", m->names[i]);
    if (rest >= 0) {
        if (product > world || world % (int)product)
            return dt__fail(DT_ERR_INVALID,
                            "mesh %s: the world's %d ranks are not divisible by %.0f (the product of the given sizes), "
                            "so %s cannot take the rest",
                            shape, world, product, m->names[rest]);
        m->sizes[rest] = world / (int)product;
    } else if (product != world) {
        return dt__fail(DT_ERR_INVALID, "mesh %s: %.0f ranks, but the world has %d", shape, product, world);
    }
    return DT_OK;
}

dt_status dt_mesh_check(const dt_mesh_dim *dims, int ndims, int world)
{
    if (!dims || world < 1)
        return dt__fail(DT_ERR_INVALID, "mesh: %s", dims ? "a world of no ranks" : "dims is NULL");
    dt_mesh m;
    memset(&m, 0, sizeof m);
    return resolve(&m, dims, ndims, world);
}

dt_status dt_mesh_create(dt_comm *world, const dt_mesh_dim *dims, int ndims, dt_mesh **out)
{
    if (!out)
        return dt__fail(DT_ERR_INVALID, "mesh: out is NULL");
    *out = NULL;
    if (!world || !dims)
        return dt__fail(DT_ERR_INVALID, "mesh: %s is NULL", world ? "dims" : "the world communicator");
    dt_mesh *m = calloc(1, sizeof *m);
    if (!m)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    m->world = world;
    dt_status s = resolve(m, dims, ndims, dt_comm_size(world));
    int rank = dt_comm_rank(world);
    for (int i = ndims - 1, r = rank; s == DT_OK && i >= 0; i--) {
        m->coords[i] = r % m->sizes[i];
        r /= m->sizes[i];
    }
    /* One split per dimension, in order, on every rank. */
    for (int i = 0; s == DT_OK && i < ndims; i++) {
        int c[DT_MESH_MAX_DIMS];
        memcpy(c, m->coords, sizeof c);
        c[i] = 0;
        s = dt_comm_split(world, dt_mesh_rank_at(m, c), m->coords[i], &m->comms[i]);
    }
    if (s != DT_OK) {
        char why[DT__ERROR_LEN];
        dt__error_save(why);
        dt_mesh_destroy(m);
        return dt__error_restore(s, why);
    }
    *out = m;
    return DT_OK;
}

int dt_mesh_ndims(const dt_mesh *m) { return m ? m->ndims : 0; }

const char *dt_mesh_dim_name(const dt_mesh *m, int i) { return m && i >= 0 && i < m->ndims ? m->names[i] : NULL; }

int dt_mesh_size(const dt_mesh *m, const char *dim)
{
    int i = m ? find(m, dim) : -1;
    return i < 0 ? 1 : m->sizes[i];
}

int dt_mesh_coord(const dt_mesh *m, const char *dim)
{
    int i = m ? find(m, dim) : -1;
    return i < 0 ? 0 : m->coords[i];
}

dt_comm *dt_mesh_comm(const dt_mesh *m, const char *dim)
{
    int i = m ? find(m, dim) : -1;
    if (i < 0) {
        dt__fail(DT_ERR_INVALID, "mesh: no dimension '%s'", dim ? dim : "(null)");
        return NULL;
    }
    return m->comms[i];
}

int dt_mesh_rank_at(const dt_mesh *m, const int *coords)
{
    if (!m || !coords)
        return -1;
    int r = 0;
    for (int i = 0; i < m->ndims; i++) {
        if (coords[i] < 0 || coords[i] >= m->sizes[i])
            return -1;
        r = r * m->sizes[i] + coords[i];
    }
    return r;
}

const char *dt_mesh_describe(const dt_mesh *m, int mine, char *buf, size_t len)
{
    size_t n = 0;
    buf[0] = '\0';
    for (int i = 0; m && i < m->ndims && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s=%d", i ? " x " : "", m->names[i], m->sizes[i]);
    for (int i = 0; mine && m && i < m->ndims && n < len; i++)
        n += (size_t)snprintf(buf + n, len - n, "%s%s %d%s", i ? ", " : " (this rank: ", m->names[i], m->coords[i],
                              i + 1 == m->ndims ? ")" : "");
    return buf;
}

void dt_mesh_destroy(dt_mesh *m)
{
    if (!m)
        return;
    for (int i = m->ndims - 1; i >= 0; i--)
        dt_comm_destroy(m->comms[i]);
    free(m);
}
