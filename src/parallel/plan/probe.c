/* dt_plan_links_probe: the planner's two link classes measured over a
 * communicator.  Rank 0 ping-pongs with the first rank on its own host
 * (intra) and with the first rank on another host (inter): 8 bytes for the
 * latency (half the round trip, the median of many), then 4 MiB each way
 * for the bandwidth (its one-way time less that latency; across hosts
 * divided by the ranks of a host, which share its link).  A host is the
 * ranks that share rank - local rank (launchers fill hosts in rank order).
 * A class with no such pair keeps its default; rank 0's figures are
 * broadcast, so every rank returns the same links.  The ranks whose boot
 * id is rank 0's share its machine's cores, whatever host they are in
 * (network namespaces of one box): ranks_per_machine.  The bulk exchange
 * across hosts also reads both processes' CPU time: what a byte sent
 * between hosts costs the cores (inter_cpu_s_per_byte), each process's
 * least over one round trip, so that other work on the machine does not
 * count. */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/boot_id.h"
#include "base/clock.h"
#include "base/hash.h"
#include "base/status.h"
#include "dtrain/plan.h"

enum { TAG = 4747, PINGS = 50, WARM = 5, BIG = 4 << 20, BIG_REPEATS = 3 };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double process_cpu_s(void)
{
    struct timespec t;
    return clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t) ? 0 : (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Round trips of `bytes` between this rank and peer, `n` timed after `warm`:
 * the median round trip (the initiator's figure; the echoing side returns 0);
 * cpu (NULL: not read): this process's least CPU time over one timed round
 * trip (other work on the machine only ever adds to it). */
static dt_status round_trips(dt_comm *c, int peer, bool initiator, char *buf, size_t bytes, int warm, int n,
                             double *rtt, double *cpu)
{
    double *t = malloc((size_t)n * sizeof *t);
    if (!t)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_status s = DT_OK;
    double least = -1;
    for (int i = -warm; s == DT_OK && i < n; i++) {
        int64_t t0 = dt__now_ns();
        double c0 = cpu ? process_cpu_s() : 0;
        if (initiator) {
            if ((s = dt_send(buf, bytes, DT_U8, peer, TAG, c)) == DT_OK)
                s = dt_recv(buf, bytes, DT_U8, peer, TAG, c, NULL);
        } else if ((s = dt_recv(buf, bytes, DT_U8, peer, TAG, c, NULL)) == DT_OK)
            s = dt_send(buf, bytes, DT_U8, peer, TAG, c);
        if (i >= 0) {
            t[i] = (double)(dt__now_ns() - t0) * 1e-9;
            double used = cpu ? process_cpu_s() - c0 : 0;
            if (cpu && (least < 0 || used < least))
                least = used;
        }
    }
    if (s == DT_OK) {
        qsort(t, (size_t)n, sizeof *t, cmp_double);
        *rtt = initiator ? t[n / 2] : 0;
        if (cpu)
            *cpu = least > 0 ? least : 0;
    }
    free(t);
    return s;
}

/* Latency and bandwidth between ranks a (< b) and b; the figures land on a.
 * cpu (NULL: not measured): the CPU seconds per byte sent, both processes'
 * CPU time (their threads', the kernel's TCP work done on their behalf
 * included) over the bulk exchange. */
static dt_status measure_pair(dt_comm *c, int a, int b, char *buf, dt_plan_link *out, double *cpu)
{
    int me = dt_comm_rank(c);
    if (me != a && me != b)
        return DT_OK;
    int peer = me == a ? b : a;
    double small = 0, big = 0;
    DT_CHECK(round_trips(c, peer, me == a, buf, 8, WARM, PINGS, &small, NULL));
    double used = 0; /* the least over one round trip: BIG bytes each way */
    DT_CHECK(round_trips(c, peer, me == a, buf, BIG, 1, BIG_REPEATS, &big, cpu ? &used : NULL));
    if (cpu && me == b)
        DT_CHECK(dt_send(&used, 1, DT_F64, a, TAG, c));
    if (cpu && me == a) {
        double theirs = 0;
        DT_CHECK(dt_recv(&theirs, 1, DT_F64, b, TAG, c, NULL));
        /* one round trip: BIG bytes each way */
        *cpu = (used + theirs) / (2.0 * BIG);
    }
    if (me == a) {
        double latency = small / 2, one_way = big / 2 - latency;
        out->latency_s = latency;
        out->bandwidth_Bps = one_way > 0 ? BIG / one_way : BIG / (big / 2);
    }
    return DT_OK;
}

dt_status dt_plan_links_probe(dt_comm *c, dt_plan_links *out)
{
    if (!c || !out)
        return dt__fail(DT_ERR_INVALID, "plan links probe: %s is NULL", c ? "out" : "the communicator");
    int n = dt_comm_size(c), me = dt_comm_rank(c);
    *out = (dt_plan_links){.intra = {2e-6, 5e9}, .inter = {50e-6, 1.25e9}, .ranks_per_node = dt_comm_local_size(c)};
    if (out->ranks_per_node < 1)
        out->ranks_per_node = 1;
    int32_t mine = me - dt_comm_local_rank(c), *host = malloc((size_t)n * sizeof *host);
    int64_t *machine = malloc((size_t)n * sizeof *machine), boot_hash;
    char *buf = calloc(1, BIG), boot[64];
    dt__boot_id(boot, sizeof boot);
    boot_hash = boot[0] ? (int64_t)(dt__fnv1a64(DT_FNV64_SEED, boot, strlen(boot)) >> 1) : -1 - me; /* unknown: its own */
    dt_status s = host && machine && buf ? dt_allgather(&mine, host, 1, DT_I32, c)
                                         : dt__fail(DT_ERR_NOMEM, "out of memory");
    if (s == DT_OK)
        s = dt_allgather(&boot_hash, machine, 1, DT_I64, c);
    int intra = -1, inter = -1;
    out->ranks_per_machine = 1;
    for (int r = 1; s == DT_OK && r < n; r++) {
        if (host[r] == host[0] && intra < 0)
            intra = r;
        if (host[r] != host[0] && inter < 0)
            inter = r;
        out->ranks_per_machine += machine[r] == machine[0];
    }
    if (out->ranks_per_machine < out->ranks_per_node)
        out->ranks_per_machine = out->ranks_per_node;
    /* [intra latency, bandwidth, inter latency, bandwidth], rank 0's, to every rank */
    double fig[5] = {out->intra.latency_s, out->intra.bandwidth_Bps, out->inter.latency_s, out->inter.bandwidth_Bps,
                     0};
    if (s == DT_OK && intra > 0)
        s = measure_pair(c, 0, intra, buf, &out->intra, NULL);
    if (s == DT_OK && inter > 0)
        s = measure_pair(c, 0, inter, buf, &out->inter, &out->inter_cpu_s_per_byte);
    /* one pair alone has the host's link to itself; the planner's inter class is what each rank gets while
     * all of its host's ranks send at once (the link shared) */
    if (s == DT_OK && me == 0 && inter > 0)
        out->inter.bandwidth_Bps /= out->ranks_per_node;
    if (s == DT_OK && me == 0) {
        fig[0] = out->intra.latency_s, fig[1] = out->intra.bandwidth_Bps;
        fig[2] = out->inter.latency_s, fig[3] = out->inter.bandwidth_Bps;
        fig[4] = out->inter_cpu_s_per_byte;
    }
    if (s == DT_OK)
        s = dt_broadcast(fig, 5, DT_F64, 0, c);
    if (s == DT_OK) {
        out->intra = (dt_plan_link){fig[0], fig[1]};
        out->inter = (dt_plan_link){fig[2], fig[3]};
        out->inter_cpu_s_per_byte = fig[4];
    }
    free(buf);
    free(host);
    free(machine);
    return s != DT_OK ? dt__fail(s, "plan links probe: %s", dt_last_error()) : DT_OK;
}
