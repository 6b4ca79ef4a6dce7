/* The collectives' costs over the planner's two link classes, by the
 * formulas of docs/algorithms.md and the size rule of src/comm/algo.c:
 *
 *   recursive doubling    N <= small      ceil(log2 n) (a + N b)
 *   halving-doubling      N <= ring       2 log2 n a + 2 N (n-1)/n b   (+2 steps, +N folded: n not a power of 2)
 *   ring                  above           2 (n-1) a + 2 N (n-1)/n b
 *   hierarchical (hosts x L > 1 ranks, N > small): local reduce-scatter,
 *                         the hosts' allreduce of N/L, local allgather
 *
 * Reduce-scatter and allgather run the ring's half: (n-1) a + N (n-1)/n b,
 * over the inter-host link as soon as the group spans hosts (the ring's
 * slowest hop sets its pace).  Thresholds: one host 64 KiB / 2 MiB,
 * across hosts 16 KiB / 256 KiB (docs/algorithms.md, "Choosing"). */
#include <math.h>

#include "parallel/plan/internal.h"

#define SMALL_INTRA (64.0 * 1024)
#define RING_INTRA (2.0 * 1048576)
#define SMALL_INTER (16.0 * 1024)
#define RING_INTER (256.0 * 1024)

/* Members on one host (L) and hosts (H) of a group. */
static void placement(dt__plan_group g, int *L, int *H)
{
    int R = g.links->ranks_per_node > 0 ? g.links->ranks_per_node : 1;
    int l = 1;
    if (g.stride < R && R % g.stride == 0)
        l = R / g.stride < g.n ? R / g.stride : g.n;
    *L = l;
    *H = (g.n + l - 1) / l;
}

static bool pow2(int n) { return n > 0 && (n & (n - 1)) == 0; }

/* A flat allreduce over n ranks on one link class. */
static double flat_allreduce(int n, double N, dt_plan_link k, bool inter)
{
    if (n <= 1 || N <= 0)
        return 0;
    double a = k.latency_s, b = 1 / k.bandwidth_Bps, lg = ceil(log2((double)n));
    if (N <= (inter ? SMALL_INTER : SMALL_INTRA))
        return lg * (a + N * b);
    if (N <= (inter ? RING_INTER : RING_INTRA)) {
        double t = 2 * floor(log2((double)n)) * a + 2 * N * (n - 1) / n * b;
        return pow2(n) ? t : t + 2 * a + N * b; /* the extra ranks fold in first and get the sum back */
    }
    return 2.0 * (n - 1) * a + 2 * N * (n - 1) / n * b;
}

static double half_ring(int n, double N, dt_plan_link k)
{
    return n <= 1 || N <= 0 ? 0 : (n - 1) * k.latency_s + N * (n - 1) / n / k.bandwidth_Bps;
}

double dt__plan_allreduce_s(dt__plan_group g, double bytes)
{
    int L, H;
    placement(g, &L, &H);
    if (H == 1)
        return flat_allreduce(g.n, bytes, g.links->intra, false);
    if (L == 1)
        return flat_allreduce(g.n, bytes, g.links->inter, true);
    if (bytes <= SMALL_INTER) /* flat recursive doubling; its steps cross hosts */
        return flat_allreduce(g.n, bytes, g.links->inter, true);
    return 2 * half_ring(L, bytes, g.links->intra) + flat_allreduce(H, bytes / L, g.links->inter, true);
}

double dt__plan_reduce_scatter_s(dt__plan_group g, double bytes)
{
    int L, H;
    placement(g, &L, &H);
    return half_ring(g.n, bytes, H == 1 ? g.links->intra : g.links->inter);
}

double dt__plan_allgather_s(dt__plan_group g, double bytes) { return dt__plan_reduce_scatter_s(g, bytes); }

double dt__plan_p2p_s(const dt_plan_links *links, int a, int b, double bytes)
{
    int R = links->ranks_per_node > 0 ? links->ranks_per_node : 1;
    dt_plan_link k = a / R == b / R ? links->intra : links->inter;
    return bytes > 0 ? k.latency_s + bytes / k.bandwidth_Bps : 0;
}
