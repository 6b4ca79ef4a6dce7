/* dtbench: collective benchmark in the manner of nccl-tests.  See --help and
 * docs/dtbench.md.  Run under dtrun (or mpirun/srun). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain/dtrain.h"

static const char usage[] =
    "usage: dtrun -n N dtbench OP [options]\n"
    "\n"
    "Time a collective over a range of sizes; every rank checks its result.\n"
    "OP: allreduce, broadcast, reduce, reduce_scatter, allgather, gather, scatter,\n"
    "    alltoall, barrier, sendrecv (ring shift)\n"
    "\n"
    "options:\n"
    "  -b, --minbytes N   smallest size (default 8; K, M, G suffixes allowed)\n"
    "  -e, --maxbytes N   largest size (default 64M)\n"
    "  -f, --stepfactor F multiply the size by F each step (default 2)\n"
    "  -d, --dtype T      f32 (default), f64, f16, bf16, i32, i64, u8\n"
    "  -o, --op R         reduction: sum (default), prod, min, max, avg\n"
    "  -r, --root R       root of broadcast/reduce/gather/scatter (default 0)\n"
    "  -n, --iters N      timed iterations per size (default 20)\n"
    "  -w, --warmup N     untimed iterations per size (default 5)\n"
    "  -t, --mintime S    time each size for at least S seconds: while the calls so\n"
    "                     far took less, as many more as they say fill it (default 0)\n"
    "  -c, --check 0|1    verify results (default 1)\n"
    "      --device D     buffers in device D's memory: cuda, cuda:N, emu (the test\n"
    "                     device) or cpu (default: host memory); each call waits\n"
    "                     for the device, and the check copies the result back\n"
    "      --json         one JSON object per size instead of the table\n"
    "  -h, --help         this help\n"
    "      --version      print the version\n"
    "\n"
    "Each size is timed twice, as in nccl-tests: out of place (separate send and\n"
    "receive buffers), then in place (send == recv; sendrecv: N/A).  The last line\n"
    "is the mean busbw over every size and both columns.\n"
    "\n"
    "size is the total bytes of the operation as in nccl-tests: the buffer of\n"
    "allreduce/broadcast/reduce, the gathered output of allgather/gather, the input\n"
    "of reduce_scatter/scatter/alltoall.  time_us is the slowest rank's mean over\n"
    "the iters timed calls; algbw = size/time; busbw = algbw x (allreduce 2(n-1)/n;\n"
    "reduce_scatter, allgather, gather, scatter, alltoall (n-1)/n; broadcast, reduce,\n"
    "sendrecv 1).  #wrong counts elements that differ from the expected result,\n"
    "summed over ranks.\n";

enum { ALLREDUCE, BROADCAST, REDUCE, REDUCE_SCATTER, ALLGATHER, GATHER, SCATTER, ALLTOALL, BARRIER, SENDRECV };
static const char *op_names[] = {"allreduce", "broadcast", "reduce",   "reduce_scatter", "allgather",
                                 "gather",    "scatter",   "alltoall", "barrier",        "sendrecv"};

typedef struct {
    int op, root, iters, warmup, check, json;
    double mintime; /* seconds each size is timed for at least; 0: exactly iters calls */
    size_t minb, maxb;
    double factor;
    dt_dtype dtype;
    dt_redop redop;
    const char *device; /* --device; NULL: host buffers */
} options;

/* Exit 2 with "dtbench: MSG 'ARG'", or just MSG when there is no ARG. */
static void bad(const char *msg, const char *arg)
{
    if (arg)
        fprintf(stderr, "dtbench: %s '%s' (see dtbench --help)\n", msg, arg);
    else
        fprintf(stderr, "dtbench: %s (see dtbench --help)\n", msg);
    exit(2);
}

/* The option getopt refused: "-x" for a short one, else the word as given. */
static const char *refused_option(char **argv)
{
    static char shortopt[3];
    const char *word = argv[optind - 1];
    if (optopt && strncmp(word, "--", 2) != 0) {
        snprintf(shortopt, sizeof shortopt, "-%c", optopt);
        return shortopt;
    }
    return word;
}

static size_t parse_size(const char *s)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mult = 1;
    if (*end == 'K' || *end == 'k')
        mult = 1024, end++;
    else if (*end == 'M' || *end == 'm')
        mult = 1024.0 * 1024, end++;
    else if (*end == 'G' || *end == 'g')
        mult = 1024.0 * 1024 * 1024, end++;
    if (errno || *end || end == s || !(v >= 0))
        bad("not a size:", s);
    if (v * mult > 1e12) /* (the buffers are allocated whole) */
        bad("a size above the limit of 1e12 bytes:", s);
    return (size_t)(v * mult);
}

static int parse_int(const char *s, int min, int max)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < min || v > max)
        bad("not an integer in range:", s);
    return (int)v;
}

static void parse(int argc, char **argv, options *o)
{
    *o = (options){.root = 0, .iters = 20, .warmup = 5, .check = 1, .minb = 8, .maxb = 64u << 20,
                   .factor = 2, .dtype = DT_F32, .redop = DT_SUM, .op = -1};
    static const struct option longopts[] = {
        {"minbytes", 1, 0, 'b'}, {"maxbytes", 1, 0, 'e'}, {"stepfactor", 1, 0, 'f'}, {"dtype", 1, 0, 'd'},
        {"op", 1, 0, 'o'},       {"root", 1, 0, 'r'},     {"iters", 1, 0, 'n'},      {"warmup", 1, 0, 'w'},
        {"check", 1, 0, 'c'},    {"json", 0, 0, 'j'},     {"help", 0, 0, 'h'},       {"mintime", 1, 0, 't'},
        {"version", 0, 0, 'V'},  {"device", 1, 0, 'D'},   {0, 0, 0, 0}};
    int c;
    char *end;
    opterr = 0; /* the messages below name the option themselves */
    while ((c = getopt_long(argc, argv, ":b:e:f:d:o:r:n:w:t:c:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b': o->minb = parse_size(optarg); break;
        case 'e': o->maxb = parse_size(optarg); break;
        case 'f':
            o->factor = strtod(optarg, NULL);
            if (!(o->factor > 1.0))
                bad("the step factor must be above 1, got", optarg);
            break;
        case 'd':
            if (dt_dtype_parse(optarg, &o->dtype) != DT_OK)
                bad("unknown dtype", optarg);
            break;
        case 'o':
            if (dt_redop_parse(optarg, &o->redop) != DT_OK)
                bad("unknown reduction op", optarg);
            break;
        case 'r': o->root = parse_int(optarg, 0, 1 << 20); break;
        case 'n': o->iters = parse_int(optarg, 1, 1000000); break;
        case 'w': o->warmup = parse_int(optarg, 0, 1000000); break;
        case 't':
            o->mintime = strtod(optarg, &end);
            if (*end || end == optarg || !(o->mintime >= 0 && o->mintime <= 3600))
                bad("the minimum time must be 0 to 3600 seconds, got", optarg);
            break;
        case 'c': o->check = parse_int(optarg, 0, 1); break;
        case 'j': o->json = 1; break;
        case 'D': o->device = optarg; break;
        case 'h': fputs(usage, stdout); exit(0);
        case 'V': printf("dtbench %s\n", DTRAIN_VERSION); exit(0);
        case ':': bad("missing the value of option", refused_option(argv)); break;
        default: bad("invalid option", refused_option(argv));
        }
    }
    if (optind >= argc)
        bad("missing OP (allreduce, broadcast, ...)", NULL);
    for (int i = 0; i < (int)(sizeof op_names / sizeof *op_names); i++)
        if (!strcmp(argv[optind], op_names[i]))
            o->op = i;
    if (o->op < 0)
        bad("unknown OP", argv[optind]);
    if (optind + 1 < argc)
        bad("unexpected argument", argv[optind + 1]);
    if (o->minb > o->maxb)
        bad("the smallest size (-b) is larger than the largest (-e)", NULL);
    if (o->minb == 0) /* (0 times the step factor stays 0: the sizes would never grow) */
        bad("the smallest size (-b) must be at least 1 byte", NULL);
}

/* Most calls one size may take under --mintime. */
#define MAX_ITERS 1000000
/* Most batches after the first under --mintime (each costs an untimed
 * allreduce; MAX_ITERS bounds the calls whatever happens). */
#define MAX_ROUNDS 32

/* Calls to add to `done` calls that took `took` seconds so that all of them
 * take at least mintime; at most MAX_ITERS in all. */
static int more_calls(double mintime, double took, int done)
{
    if (took >= mintime)
        return 0;
    /* 2% beyond the estimate: calls that speed up as they warm would
     * otherwise leave each batch a little short of the time. */
    double want = took > 0 ? ceil(1.02 * mintime * done / took) : MAX_ITERS;
    return want >= MAX_ITERS ? MAX_ITERS - done : (int)want - done;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- inputs and expected values (exact small integers in every dtype) ---- */

static double value(int rank, size_t i, dt_redop op)
{
    if (op == DT_PROD)
        return (rank + (long)i) % 7 == 0 ? 2 : 1;
    return (double)((rank + (long)i) % 5) - ((op == DT_MIN || op == DT_MAX) ? 2 : 0);
}

static void store(void *buf, dt_dtype t, size_t i, double v, uint64_t iv)
{
    switch (t) {
    case DT_F32: ((float *)buf)[i] = (float)v; break;
    case DT_F64: ((double *)buf)[i] = v; break;
    case DT_F16: ((uint16_t *)buf)[i] = dt_f32_to_f16((float)v); break;
    case DT_BF16: ((uint16_t *)buf)[i] = dt_f32_to_bf16((float)v); break;
    case DT_I32: ((uint32_t *)buf)[i] = (uint32_t)iv; break;
    case DT_I64: ((uint64_t *)buf)[i] = iv; break;
    case DT_U8: ((uint8_t *)buf)[i] = (uint8_t)iv; break;
    default: break;
    }
}

static void fill(void *buf, dt_dtype t, size_t n, size_t base, int rank, dt_redop op)
{
    for (size_t i = 0; i < n; i++) {
        double v = value(rank, base + i, op);
        store(buf, t, i, v, (uint64_t)(int64_t)v);
    }
}

static int is_float(dt_dtype t) { return t == DT_F32 || t == DT_F64 || t == DT_F16 || t == DT_BF16; }

/* Expected reduction of element base+i over `size` ranks. */
static void expect(void *buf, dt_dtype t, size_t n, size_t base, int size, dt_redop op)
{
    unsigned bits = t == DT_U8 ? 8 : t == DT_I32 ? 32 : 64;
    uint64_t mask = bits == 64 ? ~0ull : ((1ull << bits) - 1);
    for (size_t i = 0; i < n; i++) {
        double d = value(0, base + i, op);
        int64_t si = (int64_t)d;
        uint64_t u = (uint64_t)si & mask;
        for (int r = 1; r < size; r++) {
            double x = value(r, base + i, op);
            uint64_t xu = (uint64_t)(int64_t)x & mask;
            int64_t xs = (int64_t)x;
            switch (op) {
            case DT_SUM:
            case DT_AVG: d += x, u = (u + xu) & mask, si += xs; break;
            case DT_PROD: d *= x, u = (u * xu) & mask, si *= xs; break;
            case DT_MIN: d = fmin(d, x), si = si < xs ? si : xs; break;
            case DT_MAX: d = fmax(d, x), si = si > xs ? si : xs; break;
            default: break;
            }
        }
        if (op == DT_MIN || op == DT_MAX)
            u = (uint64_t)si & mask;
        if (op == DT_AVG && is_float(t))
            d = (double)(float)d / size;
        if (op == DT_AVG && !is_float(t)) {
            if (t == DT_U8)
                u = (u & 0xff) / (uint64_t)size;
            else if (t == DT_I32)
                u = (uint64_t)(int64_t)((int32_t)(uint32_t)u / size);
            else
                u = (uint64_t)((int64_t)u / size);
        }
        if (op == DT_AVG && (t == DT_F16 || t == DT_BF16))
            d = (float)d;
        store(buf, t, i, t == DT_F32 || t == DT_F16 || t == DT_BF16 ? (double)(float)d : d, u);
    }
}

static size_t count_wrong(const void *got, const void *want, size_t n, size_t es)
{
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++)
        wrong += memcmp((const char *)got + i * es, (const char *)want + i * es, es) != 0;
    return wrong;
}

/* ---- running one size ---- */

typedef struct {
    options *o;
    dt_comm *c;
    int rank, size;
    size_t es, count; /* count: elements per rank's block (see usage) */
    uint8_t *send, *recv, *want;
    const dt_device *dev; /* --device: the calls take dsend and drecv, copies of send and recv */
    uint8_t *dsend, *drecv;
    size_t cap_bytes; /* of each buffer */
    int inplace; /* send == recv, the input where each collective takes it from (dtrain/comm.h) */
} bench;

/* sendrecv's isend and irecv cannot share one buffer; broadcast and barrier
 * have only one, so their two columns time the same call. */
static int has_inplace(int op) { return op != SENDRECV; }

static dt_status run_once(bench *b)
{
    const options *o = b->o;
    dt_comm *c = b->c;
    size_t n = b->count;
    uint8_t *out = b->dev ? b->drecv : b->recv, *in = b->dev ? b->dsend : b->send;
    const uint8_t *send = b->inplace ? out : in;
    switch (o->op) {
    case ALLREDUCE: return dt_allreduce(send, out, n, o->dtype, o->redop, c);
    case BROADCAST: return dt_broadcast(out, n, o->dtype, o->root, c);
    case REDUCE: return dt_reduce(send, out, n, o->dtype, o->redop, o->root, c);
    case REDUCE_SCATTER: return dt_reduce_scatter(send, out, n, o->dtype, o->redop, c);
    case ALLGATHER: return dt_allgather(send, out, n, o->dtype, c);
    case GATHER: return dt_gather(send, out, n, o->dtype, o->root, c);
    case SCATTER: return dt_scatter(send, out, n, o->dtype, o->root, c);
    case ALLTOALL: return dt_alltoall(send, out, n, o->dtype, c);
    case BARRIER: return dt_barrier(c);
    case SENDRECV: {
        dt_request *rq[2];
        int right = (b->rank + 1) % b->size, left = (b->rank - 1 + b->size) % b->size;
        dt_status s = dt_irecv(out, n, o->dtype, left, 1, c, &rq[0]);
        if (s == DT_OK)
            s = dt_isend(in, n, o->dtype, right, 1, c, &rq[1]);
        if (s == DT_OK)
            s = dt_wait(rq[1], NULL);
        if (s == DT_OK)
            s = dt_wait(rq[0], NULL);
        return s;
    }
    }
    return DT_ERR_INVALID;
}

/* --device: the host buffers' first `bytes` to the device's copies (the
 * calls' inputs and, in place, recv's old contents), or recv back. */
static dt_status to_device(bench *b, size_t bytes)
{
    if (!b->dev)
        return DT_OK;
    dt_status s = dt_device_upload(b->dev, b->dsend, b->send, bytes);
    return s == DT_OK ? dt_device_upload(b->dev, b->drecv, b->recv, bytes) : s;
}
static dt_status from_device(bench *b)
{
    return b->dev ? dt_device_download(b->dev, b->recv, b->drecv, b->cap_bytes) : DT_OK;
}
/* Every call's device work done before the clock is read. */
static dt_status settle(bench *b)
{
    return b->dev ? dt_device_sync(b->dev) : DT_OK;
}

/* Fill inputs, run once, compare; returns wrong elements on this rank.  In
 * place the input goes into recv, where dtrain/comm.h says each collective
 * takes it from. */
static size_t verify(bench *b)
{
    const options *o = b->o;
    int r = b->rank, n = b->size;
    size_t cnt = b->count, es = b->es, total = cnt * (size_t)n;
    dt_redop op = o->redop;
    size_t check_n = 0;
    uint8_t *check_at = b->recv, *in = b->inplace ? b->recv : b->send;
    uint8_t *my_block = b->recv + (size_t)r * cnt * es; /* rank r's block of a gathered or scattered buffer */
    int blocks = o->op == REDUCE_SCATTER || o->op == ALLGATHER || o->op == GATHER || o->op == SCATTER ||
                 o->op == ALLTOALL;
    memset(b->recv, 0, (blocks ? total : cnt) * es);
    switch (o->op) {
    case ALLREDUCE:
    case REDUCE:
        fill(in, o->dtype, cnt, 0, r, op);
        expect(b->want, o->dtype, cnt, 0, n, op);
        check_n = (o->op == ALLREDUCE || r == o->root) ? cnt : 0;
        break;
    case REDUCE_SCATTER:
        fill(in, o->dtype, total, 0, r, op);
        expect(b->want, o->dtype, cnt, (size_t)r * cnt, n, op);
        check_n = cnt;
        break;
    case BROADCAST:
        fill(b->recv, o->dtype, cnt, 0, r == o->root ? 0 : r + 1, DT_SUM);
        fill(b->want, o->dtype, cnt, 0, 0, DT_SUM);
        check_n = cnt;
        break;
    case ALLGATHER:
    case GATHER:
        check_n = (o->op == ALLGATHER || r == o->root) ? total : 0;
        fill(b->inplace && check_n ? my_block : in, o->dtype, cnt, 0, r, DT_SUM);
        for (int j = 0; j < n; j++)
            fill(b->want + (size_t)j * cnt * es, o->dtype, cnt, 0, j, DT_SUM);
        break;
    case SCATTER:
        if (r == o->root || !b->inplace)
            for (int j = 0; j < n; j++)
                fill(in + (size_t)j * cnt * es, o->dtype, cnt, 0, j, DT_SUM);
        if (b->inplace && r == o->root)
            check_at = my_block; /* the root's block stays where it is */
        fill(b->want, o->dtype, cnt, 0, r, DT_SUM);
        check_n = cnt;
        break;
    case ALLTOALL:
        for (int j = 0; j < n; j++) {
            fill(in + (size_t)j * cnt * es, o->dtype, cnt, (size_t)j * 7, r, DT_SUM);
            fill(b->want + (size_t)j * cnt * es, o->dtype, cnt, (size_t)r * 7, j, DT_SUM);
        }
        check_n = total;
        break;
    case SENDRECV:
        fill(b->send, o->dtype, cnt, 0, r, DT_SUM);
        fill(b->want, o->dtype, cnt, 0, (r - 1 + n) % n, DT_SUM);
        check_n = cnt;
        break;
    default: break;
    }
    if (to_device(b, b->cap_bytes) != DT_OK || run_once(b) != DT_OK || settle(b) != DT_OK || from_device(b) != DT_OK)
        return (size_t)-1;
    return count_wrong(check_at, b->want, check_n, es);
}

static double bus_factor(int op, int n)
{
    switch (op) {
    case ALLREDUCE: return 2.0 * (n - 1) / n;
    case REDUCE_SCATTER:
    case ALLGATHER:
    case GATHER:
    case SCATTER:
    case ALLTOALL: return (double)(n - 1) / n;
    default: return 1.0;
    }
}

static int fail(dt_comm *c, const char *what)
{
    fprintf(stderr, "dtbench: rank %d: %s: %s\n", dt_comm_rank(c), what, dt_last_error());
    dt_comm_destroy(c);
    return 1;
}

/* One column of a row: mean time of one call on the slowest rank, and the
 * wrong elements summed over ranks. */
typedef struct {
    double time_s;
    int64_t wrong;
} column;

/* Time `*iters` calls (under --mintime, when `grow`, as many more as fill it:
 * every rank makes the same calls, the agreement is not timed), then check
 * one call. */
static int time_column(bench *b, int grow, int *iters, column *out)
{
    const options *o = b->o;
    dt_comm *c = b->c;
    if (dt_barrier(c) != DT_OK)
        return fail(c, "barrier");
    double elapsed = 0;
    int done = 0;
    for (int batch = *iters, round = 0; batch > 0; round++) {
        double t0 = now_s();
        for (int i = 0; i < batch; i++)
            if (run_once(b) != DT_OK)
                return fail(c, op_names[o->op]);
        if (settle(b) != DT_OK)
            return fail(c, "waiting for the device");
        elapsed += now_s() - t0;
        done += batch;
        batch = 0;
        if (grow && o->mintime > 0 && round < MAX_ROUNDS) {
            double slowest_elapsed;
            if (dt_allreduce(&elapsed, &slowest_elapsed, 1, DT_F64, DT_MAX, c) != DT_OK)
                return fail(c, "sharing the time taken");
            batch = more_calls(o->mintime, slowest_elapsed, done);
        }
    }
    *iters = done;
    double mine = elapsed / done;
    int64_t wrong = 0;
    if (o->check && o->op != BARRIER) {
        size_t w = verify(b);
        if (w == (size_t)-1)
            return fail(c, "verification run");
        wrong = (int64_t)w;
    }
    if (dt_allreduce(&mine, &out->time_s, 1, DT_F64, DT_MAX, c) != DT_OK ||
        dt_allreduce(&wrong, &out->wrong, 1, DT_I64, DT_SUM, c) != DT_OK)
        return fail(c, "collecting results");
    return 0;
}

int main(int argc, char **argv)
{
    options o;
    parse(argc, argv, &o);
    dt_comm *c;
    if (dt_comm_init_env(&c) != DT_OK) {
        fprintf(stderr, "dtbench: cannot join the job: %s\n", dt_last_error());
        return 1;
    }
    bench b = {.o = &o, .c = c, .rank = dt_comm_rank(c), .size = dt_comm_size(c), .es = dt_dtype_size(o.dtype)};
    if (o.root >= b.size) {
        fprintf(stderr, "dtbench: root %d is outside the job of %d ranks\n", o.root, b.size);
        return 2;
    }
    int per_rank_blocks = o.op == REDUCE_SCATTER || o.op == ALLGATHER || o.op == GATHER || o.op == SCATTER ||
                          o.op == ALLTOALL;
    int rooted = o.op == BROADCAST || o.op == REDUCE || o.op == GATHER || o.op == SCATTER;
    size_t cap = o.maxb / b.es + (size_t)b.size + 1;
    b.send = malloc(cap * b.es);
    b.recv = malloc(cap * b.es);
    b.want = malloc(cap * b.es);
    if (!b.send || !b.recv || !b.want)
        return fail(c, "out of memory for the buffers");
    b.cap_bytes = cap * b.es;
    if (o.device) {
        if (dt_device_open(o.device, &b.dev) != DT_OK) {
            fprintf(stderr, "dtbench: --device %s: %s\n", o.device, dt_last_error());
            dt_comm_destroy(c);
            return 2;
        }
        b.dsend = dt_device_alloc(b.dev, b.cap_bytes);
        b.drecv = b.dsend ? dt_device_alloc(b.dev, b.cap_bytes) : NULL;
        if (!b.drecv)
            return fail(c, "device memory for the buffers");
    }
    if (b.rank == 0 && !o.json) {
        /* nccl-tests' layout: size count type redop root, then time algbw
         * busbw #wrong out of place and in place; iters is dtbench's own. */
        const char *algo = getenv("DT_ALGO");
        char timed[64] = "";
        if (o.mintime > 0)
            snprintf(timed, sizeof timed, " (more to last %g s)", o.mintime);
        printf("# dtbench %s %s: %d ranks, dtype %s, redop %s, %d iterations%s after %d warm-up, algorithm %s, "
               "buffers %s\n",
               DTRAIN_VERSION, op_names[o.op], b.size, dt_dtype_name(o.dtype), dt_redop_name(o.redop), o.iters,
               timed, o.warmup, algo ? algo : "auto", o.device ? o.device : "host");
        printf("#%12s %13s %6s %6s %5s %38s %38s\n", "", "", "", "", "", "out-of-place                 ",
               "in-place                 ");
        printf("#%12s %13s %6s %6s %5s %10s %9s %9s %7s %10s %9s %9s %7s %8s\n", "size", "count", "type", "redop",
               "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong", "iters");
        printf("#%12s %13s %6s %6s %5s %10s %9s %9s %7s %10s %9s %9s %7s %8s\n", "(B)", "(elements)", "", "", "",
               "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "", "");
        fflush(stdout);
    }
    /* Touch every page once, then wait for everyone: the page faults of
     * these buffers take a second or more per rank here and end at different
     * times, and a first size timed right after them began with a stall of
     * 40-90 ms on some ranks (4 ranks, 64 MiB buffers: 8-byte broadcast
     * 9 ms a call for 10 calls). */
    memset(b.send, 1, cap * b.es);
    memset(b.recv, 1, cap * b.es);
    memset(b.want, 0, cap * b.es);
    if (to_device(&b, b.cap_bytes) != DT_OK)
        return fail(c, "copying the buffers to the device");
    if (dt_barrier(c) != DT_OK)
        return fail(c, "barrier");
    size_t total_wrong = 0;
    double busbw_sum = 0;
    int busbw_n = 0;
    size_t prev_elems = SIZE_MAX;
    for (double sz = (double)o.minb; sz <= (double)o.maxb * 1.0000001; sz *= o.factor) {
        size_t elems = (size_t)sz / b.es;
        if (elems == prev_elems) /* a factor near 1: this size again, after rounding to elements */
            continue;
        prev_elems = elems;
        b.count = per_rank_blocks ? elems / (size_t)b.size : elems;
        size_t bytes = (per_rank_blocks ? b.count * (size_t)b.size : b.count) * b.es;
        if (o.op == BARRIER)
            bytes = b.count = 0;
        memset(b.send, 1, bytes + b.es);
        memset(b.recv, 1, bytes + b.es);
        if (to_device(&b, bytes + b.es) != DT_OK)
            return fail(c, "copying the buffers to the device");
        b.inplace = 0;
        for (int i = 0; i < o.warmup; i++)
            if (run_once(&b) != DT_OK)
                return fail(c, "warm-up");
        /* Out of place sets the number of calls (-n, more under -t); in
         * place makes as many. */
        int iters = o.iters;
        column col[2] = {{0, 0}, {0, 0}};
        if (time_column(&b, 1, &iters, &col[0]))
            return 1;
        int with_inplace = has_inplace(o.op);
        if (with_inplace) {
            b.inplace = 1;
            if (time_column(&b, 0, &iters, &col[1]))
                return 1;
        }
        double algbw[2], busbw[2];
        for (int k = 0; k < 2; k++) {
            algbw[k] = bytes / col[k].time_s / 1e9;
            busbw[k] = algbw[k] * bus_factor(o.op, b.size);
        }
        total_wrong += (size_t)(col[0].wrong + col[1].wrong);
        busbw_sum += busbw[0] + (with_inplace ? busbw[1] : 0);
        busbw_n += 1 + with_inplace;
        if (b.rank == 0) {
            if (o.json) {
                cJSON *j = cJSON_CreateObject();
                cJSON_AddStringToObject(j, "op", op_names[o.op]);
                cJSON_AddStringToObject(j, "buffers", o.device ? o.device : "host");
                cJSON_AddNumberToObject(j, "ranks", b.size);
                cJSON_AddNumberToObject(j, "size", (double)bytes);
                cJSON_AddNumberToObject(j, "count", (double)b.count);
                cJSON_AddStringToObject(j, "type", dt_dtype_name(o.dtype));
                cJSON_AddStringToObject(j, "redop", dt_redop_name(o.redop));
                cJSON_AddNumberToObject(j, "root", rooted ? o.root : -1);
                cJSON_AddNumberToObject(j, "time_us", col[0].time_s * 1e6);
                cJSON_AddNumberToObject(j, "algbw", algbw[0]);
                cJSON_AddNumberToObject(j, "busbw", busbw[0]);
                cJSON_AddNumberToObject(j, "wrong", (double)col[0].wrong);
                if (with_inplace) {
                    cJSON_AddNumberToObject(j, "time_us_inplace", col[1].time_s * 1e6);
                    cJSON_AddNumberToObject(j, "algbw_inplace", algbw[1]);
                    cJSON_AddNumberToObject(j, "busbw_inplace", busbw[1]);
                    cJSON_AddNumberToObject(j, "wrong_inplace", (double)col[1].wrong);
                }
                cJSON_AddNumberToObject(j, "iters", iters);
                char *text = cJSON_PrintUnformatted(j);
                printf("%s\n", text);
                free(text);
                cJSON_Delete(j);
            } else {
                printf("%13zu %13zu %6s %6s %5d %10.2f %9.3f %9.3f %7lld ", bytes, b.count, dt_dtype_name(o.dtype),
                       dt_redop_name(o.redop), rooted ? o.root : -1, col[0].time_s * 1e6, algbw[0], busbw[0],
                       (long long)col[0].wrong);
                if (with_inplace)
                    printf("%10.2f %9.3f %9.3f %7lld", col[1].time_s * 1e6, algbw[1], busbw[1],
                           (long long)col[1].wrong);
                else
                    printf("%10s %9s %9s %7s", "N/A", "N/A", "N/A", "N/A");
                printf(" %8d\n", iters);
            }
            fflush(stdout);
        }
        if (o.op == BARRIER)
            break;
    }
    if (b.rank == 0 && !o.json) {
        printf("# total #wrong: %zu\n", total_wrong);
        printf("# Avg bus bandwidth    : %.3f\n", busbw_n ? busbw_sum / busbw_n : 0.0);
    }
    free(b.send);
    free(b.recv);
    free(b.want);
    dt_device_free(b.dev, b.dsend);
    dt_device_free(b.dev, b.drecv);
    if (dt_comm_destroy(c) != DT_OK)
        return fail(c, "destroy");
    return total_wrong ? 3 : 0;
}
