/* Hierarchical collectives for jobs with several ranks on each of several
 * hosts: the host-local part goes through shared memory, and every local rank
 * runs its own ring across the hosts on 1/L of the data (L ranks per host),
 * so the L rings share each host's link.
 *
 * allreduce      = local reduce-scatter, cross-host allreduce of the slice,
 *                  local allgather;
 * reduce_scatter = local reduce-scatter (one pass per host), cross-host
 *                  reduce-scatter;
 * allgather      = cross-host allgather, local allgather (one pass per host).
 *
 * A host link then carries 2(H-1)/H N bytes for an allreduce of N bytes on H
 * hosts, against 2(n-1)/n N for the flat ring over all n = H*L ranks
 * (the flat ring crosses each host boundary with almost all the data); see
 * docs/algorithms.md for the measurements.
 *
 * Set up on the world communicator and on every communicator split from it
 * whose members span hosts, when each of its hosts has the same number L > 1
 * of its members and there is more than one host; otherwise the flat
 * algorithms run. */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/status.h"
#include "comm/coll.h"

/* Host of each rank = its lowest-numbered local rank. */
static int my_host_color(const dt_comm *c, int *local_count)
{
    int color = c->rank, cnt = 0;
    for (int i = 0; i < c->size; i++)
        if (dt__engine_is_local(c->world->eng, c->ranks[i])) {
            cnt++;
            if (i < color)
                color = i;
        }
    *local_count = cnt;
    return color;
}

/* Whether the colours describe equal hosts of more than one rank, more than
 * one host, and this rank's shared-memory peers are exactly its host. */
static bool hosts_valid(const dt_comm *c, const int32_t *colors, int color, int local_count, int *nhosts)
{
    int hosts = 0, in_mine = 0;
    for (int i = 0; i < c->size; i++) {
        if (colors[i] < 0 || colors[i] > i)
            return false; /* a colour is the lowest rank of its host */
        if (colors[i] == i)
            hosts++;
        if (colors[i] == color) {
            in_mine++;
            if (!dt__engine_is_local(c->world->eng, c->ranks[i]))
                return false;
        }
        if (colors[colors[i]] != colors[i])
            return false;
    }
    *nhosts = hosts;
    return in_mine == local_count && local_count > 1 && hosts > 1 && hosts * local_count == c->size;
}

static dt_status build_tables(dt_comm *c, const int32_t *colors)
{
    int H = c->nhosts, L = c->size / H;
    c->members = malloc((size_t)c->size * sizeof *c->members);
    if (!c->members)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    int h = 0;
    for (int first = 0; first < c->size; first++) {
        if (colors[first] != first)
            continue;
        int j = 0;
        for (int i = first; i < c->size; i++)
            if (colors[i] == first)
                c->members[h * L + j++] = i;
        h++;
    }
    return DT_OK;
}

dt_status dt__hier_setup(dt_comm *c)
{
    if (!c->hier_auto || c->size < 4)
        return DT_OK;
    int local_count, color = my_host_color(c, &local_count);
    int32_t *colors = malloc((size_t)c->size * sizeof *colors), mine = color;
    if (!colors)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_status s = dt_allgather(&mine, colors, 1, DT_I32, c);
    int nhosts = 0;
    int32_t ok = s == DT_OK && hosts_valid(c, colors, color, local_count, &nhosts), all_ok = 0;
    if (s == DT_OK)
        s = dt_allreduce(&ok, &all_ok, 1, DT_I32, DT_MIN, c);
    if (s == DT_OK && all_ok) {
        c->nhosts = nhosts;
        s = build_tables(c, colors);
        int local_index = 0;
        for (int i = 0; i < c->rank; i++)
            local_index += colors[i] == color;
        if (s == DT_OK)
            s = dt__comm_split(c, color, c->rank, false, &c->local);
        if (s == DT_OK)
            s = dt__comm_split(c, local_index, c->rank, false, &c->cross);
        if (s == DT_OK)
            DT_INFO("hierarchical collectives%s: %d hosts x %d ranks", c->id == 1 ? "" : " (split communicator)", nhosts,
                    c->size / nhosts);
    }
    free(colors);
    return s;
}

void dt__hier_destroy(dt_comm *c)
{
    dt_comm_destroy(c->local);
    dt_comm_destroy(c->cross);
    free(c->members);
    c->local = c->cross = NULL;
    c->members = NULL;
}

bool dt__hier_use(const dt_comm *c, size_t bytes)
{
    if (!c->local || c->algo != DT_ALGO_AUTO)
        return false;
    return bytes > dt__coll_small_bytes(c);
}

/* Begin one piece of c's public collective on a sub-communicator: its own
 * sequence number, the public call's signature (so a mismatch between the
 * ranks is still noticed inside the hierarchy). */
static dt_status piece(dt__coll *k, const dt_comm *c, dt_comm *sub, const char *what, bool reduces)
{
    DT_CHECK(dt__coll_begin(k, sub, what));
    k->reduces = reduces;
    k->sig = c->coll_sig;
    return DT_OK;
}

/* One local ring pass per host h, hosts in the same order on every rank: on
 * pass h, local rank j's block is that of rank members[h][j] (`unit`
 * elements per rank). */
static dt_status local_passes(dt_comm *c, uint8_t *buf, size_t unit, dt_dtype t, dt_redop op, int phase,
                              const char *what, size_t *off)
{
    int L = c->local->size;
    for (int h = 0; h < c->nhosts; h++) {
        for (int j = 0; j < L; j++) {
            off[j] = (size_t)c->members[h * L + j] * unit;
            off[L + j] = unit;
        }
        dt__coll k;
        DT_CHECK(piece(&k, c, c->local, what, (phase & DT_RING_RS) != 0));
        DT_CHECK(dt__ring_run(&k, buf, off, off + L, t, op, phase));
    }
    return DT_OK;
}

dt_status dt__hier_allreduce(dt_comm *c, void *buf, size_t count, dt_dtype t, dt_redop op)
{
    int L = c->local->size, li = c->local->rank;
    size_t es = dt_dtype_size(t), *off = malloc(2 * (size_t)L * sizeof *off);
    if (!off)
        return dt__fail(DT_ERR_NOMEM, "allreduce: out of memory");
    dt__split_blocks(count, L, off, off + L);
    dt__coll k;
    dt_status s = piece(&k, c, c->local, "allreduce (within the host)", true);
    if (s == DT_OK)
        s = dt__ring_run(&k, buf, off, off + L, t, op, DT_RING_RS);
    if (s == DT_OK)
        s = piece(&k, c, c->cross, "allreduce (across hosts)", true);
    if (s == DT_OK)
        s = dt__allreduce_flat(&k, (uint8_t *)buf + off[li] * es, off[L + li], t, op);
    if (s == DT_OK)
        s = piece(&k, c, c->local, "allreduce (within the host)", true);
    if (s == DT_OK)
        s = dt__ring_run(&k, buf, off, off + L, t, op, DT_RING_AG);
    free(off);
    return s;
}

dt_status dt__hier_reduce_scatter(dt_comm *c, void *work, size_t recvcount, dt_dtype t, dt_redop op)
{
    int L = c->local->size, X = c->cross->size;
    size_t *off = malloc(2 * (size_t)(L > X ? L : X) * sizeof *off);
    if (!off)
        return dt__fail(DT_ERR_NOMEM, "reduce_scatter: out of memory");
    dt_status s = local_passes(c, work, recvcount, t, op, DT_RING_RS, "reduce_scatter (within the host)", off);
    dt__coll k;
    if (s == DT_OK)
        s = piece(&k, c, c->cross, "reduce_scatter (across hosts)", true);
    for (int b = 0; s == DT_OK && b < X; b++) {
        off[b] = (size_t)c->cross->ranks[b] * recvcount;
        off[X + b] = recvcount;
    }
    if (s == DT_OK)
        s = dt__ring_run(&k, work, off, off + X, t, op, DT_RING_RS);
    free(off);
    return s;
}

dt_status dt__hier_allgather(dt_comm *c, void *recv, size_t sendcount, dt_dtype t)
{
    int L = c->local->size, X = c->cross->size;
    size_t *off = malloc(2 * (size_t)(L > X ? L : X) * sizeof *off);
    if (!off)
        return dt__fail(DT_ERR_NOMEM, "allgather: out of memory");
    dt__coll k;
    dt_status s = piece(&k, c, c->cross, "allgather (across hosts)", false);
    for (int b = 0; s == DT_OK && b < X; b++) {
        off[b] = (size_t)c->cross->ranks[b] * sendcount;
        off[X + b] = sendcount;
    }
    if (s == DT_OK)
        s = dt__ring_run(&k, recv, off, off + X, t, DT_SUM, DT_RING_AG);
    if (s == DT_OK)
        s = local_passes(c, recv, sendcount, t, DT_SUM, DT_RING_AG, "allgather (within the host)", off);
    free(off);
    return s;
}
