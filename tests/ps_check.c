/* The parameter server (ps.h) under dtrun, the last S ranks serving:
 *
 *   ps_check bsp       W workers, S servers: BSP beside allreduce data
 *                      parallelism over the workers from the same weights
 *                      (GPT with dropout 0.1 and tied embedding, then an
 *                      MLP; AdamW with weight-decay groups, 2 micro-batches,
 *                      clipping): every step's loss and norm within 1e-5,
 *                      the parameters after the last step within 1e-5 of
 *                      the largest.
 *   ps_check asp       1 worker: ASP equals single-process training, bitwise.
 *   ps_check ssp S LOG W workers, the last one slowed (a sleep each step):
 *                      SSP with staleness S; the servers' clock log (LOG)
 *                      must never show a pull answered for a step more than
 *                      S ahead of the slowest worker, and the fast workers
 *                      must have reached that bound (the bound bites).
 *   ps_check sparse    the text classifier (a row-sparse EmbeddingBag table,
 *                      Adagrad): with W workers and S servers under BSP
 *                      against allreduce data parallelism (the whole table
 *                      allreduced) within 1e-5, with one worker under ASP
 *                      against single-process training bitwise; only the
 *                      rows a batch touches travel (worker 0's bytes per
 *                      step against the dense part and the touched rows).
 *   ps_check hostile   4 ranks, the text classifier: after joining, worker 1
 *                      pushes a row outside the table and worker 2 gradients
 *                      outside the server's range (raw protocol messages);
 *                      each is refused naming it, the tensor and the fault,
 *                      and worker 0 trains on as if alone.
 *   ps_check refuse    worker 1 builds a different model: it is refused with
 *                      an error naming it and the tensor, and worker 0 trains
 *                      on, equal to single-process training (BSP over the
 *                      one worker left): its state was never touched.
 *
 * Exit 0: every check held on every rank. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dtrain/dtrain.h"
#include "parallel/ps/protocol.h" /* the hostile workers speak the protocol by hand */

#define SEED 4242
#define MB 2
#define MICRO 2
#define STEPS 30

static int failures, rank;

#include "check_models.h"

#define CALL(x)                                                                                        \
    do {                                                                                               \
        if ((x) != DT_OK) {                                                                            \
            fprintf(stderr, "ps_check rank %d: %s failed: %s\n", rank, #x, dt_last_error());           \
            exit(1);                                                                                   \
        }                                                                                              \
    } while (0)

static dt_model *build(int kind, int dim)
{
    dt_model *m;
    CALL(check_build(kind, dim, &m));
    return m;
}

/* AdamW over [offset, offset + numel) of m's registry, weight decay off for
 * biases and norms; for the text classifier Adagrad (user != NULL). */
static dt_status make_adamw(void *user, dt_model *m, int64_t offset, int64_t numel, dt_optimizer **out)
{
    if (user)
        return dt_adagrad_create(&(dt_adagrad_config){0, 0, 0, 1e-10f}, numel, out);
    dt_optim_group *g = NULL;
    int ng = 0;
    dt_status s = dt_decay_groups(dt_model_params(m), NULL, 0.1f, offset, numel, &g, &ng);
    if (s == DT_OK)
        s = dt_adamw_create(&(dt_adamw_config){0.9f, 0.95f, 1e-8f, 0.1f}, numel, out);
    if (s == DT_OK)
        s = dt_optimizer_set_groups(*out, g, ng);
    free(g);
    return s;
}

static void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* A worker's run beside a reference strategy (DDP over the workers, or
 * single-process); tol 0: bitwise. */
static void compare_run(dt_comm *world, dt_comm *workers, const dt_ps_config *pc, int kind, bool ddp, double tol,
                        const char *what)
{
    dt_model *ma = build(kind, 16), *mb = build(kind, 16);
    dt_optimizer *oa;
    CALL(make_adamw(kind == TEXT ? "adagrad" : NULL, ma, 0, dt_params_numel(dt_model_params(ma)), &oa));
    dt_strategy_config cfg = {.micro_batches = MICRO, .grad_clip = pc->sync == DT_PS_BSP ? 0.5f : 0, .seed = SEED};
    dt_strategy *sa, *sb;
    CALL(ddp ? dt_strategy_ddp_create(ma, oa, workers, &cfg, &sa) : dt_strategy_single_create(ma, oa, &cfg, &sa));
    CALL(dt_strategy_ps_create(mb, world, pc, &cfg, &sb));
    double worst_loss = 0, worst_norm = 0;
    for (int step = 0; step < STEPS; step++) {
        float lr = 3e-3f;
        feed fa = {kind, step, 0, {0}, {0}}, fb = fa;
        dt_step_stats a, b;
        CALL(dt_strategy_step(sa, step, lr, next_batch, &fa, &a));
        CALL(dt_strategy_step(sb, step, lr, next_batch, &fb, &b));
        worst_loss = fmax(worst_loss, fabs((double)a.loss - b.loss) / fabs((double)a.loss));
        worst_norm = fmax(worst_norm, fabs((double)a.grad_norm - b.grad_norm) / fabs((double)a.grad_norm));
    }
    CALL(dt_strategy_sync(sb));
    const float *va = dt_params_values(dt_model_params(ma)), *vb = dt_params_values(dt_model_params(mb));
    int64_t n = dt_params_numel(dt_model_params(ma));
    /* worker 0: the servers' parameters themselves (a snapshot); the others their pulled copy (not of a
     * table, of which a worker holds only the rows it pulled) */
    float *snap = NULL;
    if (rank == 0) {
        dt_optimizer *whole;
        CALL(make_adamw(kind == TEXT ? "adagrad" : NULL, mb, 0, n, &whole));
        snap = malloc((size_t)n * sizeof *snap);
        CALL(dt_strategy_ps_snapshot(sb, snap, whole));
        dt_optimizer_destroy(whole);
        vb = snap;
    } else if (kind == TEXT)
        vb = va;
    double params = 0;
    for (int64_t i = 0; i < n; i++)
        params = fmax(params, fabs((double)va[i] - vb[i]));
    params /= largest(va, n);
    free(snap);
    bool bad = worst_loss > tol || worst_norm > fmax(tol, 1e-6) || params > tol;
    if (kind == TEXT && rank == 0) { /* the bytes: the dense part and the touched rows, not the table */
        uint64_t sent, received;
        dt_strategy_ps_traffic(sb, &sent, &received);
        dt_params *p = dt_model_params(mb);
        const dt_param_info *table = dt_params_info(p, 0);
        double per_step = (double)sent / STEPS, table_bytes = 4.0 * (double)table->numel;
        double dense = 4.0 * (double)(dt_params_numel(p) - table->numel);
        /* at most MB x BAG rows a step, each 8 bytes of id and dim floats; headers and the start's values aside */
        double rows_most = (double)(MB * BAG) * (8.0 + 4.0 * (double)(table->numel / table->shape[0]));
        bool heavy = per_step > dense + rows_most + 4096 + (4.0 * (double)dt_params_numel(p) + 1024) / STEPS;
        bad |= heavy;
        fprintf(heavy ? stderr : stdout,
                "ps_check rank 0: sparse bytes: %.0f sent per step (the dense part %.0f, at most %.0f of rows; the whole "
                "table %.0f)%s\n", per_step, dense, rows_most, table_bytes, heavy ? " (FAILED: more than the rows)" : "");
    }
    failures += bad;
    fprintf(bad ? stderr : stdout,
            "ps_check rank %d: %s %s against %s, %d steps: losses within %.2g, norms within %.2g, parameters within "
            "%.2g of the largest%s\n",
            rank, what, kind_name[kind], ddp ? "allreduce data parallel" : "single-process", STEPS, worst_loss,
            worst_norm, params, bad ? " (FAILED)" : "");
    dt_strategy_destroy(sa);
    dt_strategy_destroy(sb);
    dt_optimizer_destroy(oa);
    dt_model_destroy(ma);
    dt_model_destroy(mb);
}

/* A server: serve one run (the workers' strategies' lifetime). */
static dt_status serve(dt_comm *world, dt_comm *group, const dt_ps_config *pc, int kind, int dim)
{
    dt_model *m = build(kind, dim);
    dt_status s = dt_ps_serve(world, group, pc, m, make_adamw, kind == TEXT ? "adagrad" : NULL);
    dt_model_destroy(m);
    return s;
}

/* SSP with a straggler: the clock log's bound. */
static void check_ssp_log(const char *path, int s, int W)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "ps_check: no clock log %s\n", path);
        failures++;
        return;
    }
    int w, lines = 0, at_bound = 0, over = 0;
    long long c, slow;
    double waited;
    while (fscanf(f, "pull worker %d step %lld slowest %lld waited_ms %lf\n", &w, &c, &slow, &waited) == 4) {
        lines++;
        over += c - slow > s;
        at_bound += w < W - 1 && c - slow == s;
    }
    fclose(f);
    bool bad = lines < W * STEPS || over > 0 || at_bound == 0;
    failures += bad;
    fprintf(bad ? stderr : stdout,
            "ps_check: ssp staleness %d: %d pulls answered, %d more than %d steps ahead of the slowest, %d at the bound "
            "(fast workers waiting for the straggler)%s\n",
            s, lines, over, s, at_bound, bad ? " (FAILED)" : "");
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    dt_comm *world, *group;
    CALL(dt_comm_init_env(&world));
    rank = dt_comm_rank(world);
    int n = dt_comm_size(world);
    dt_ps_config pc = {.servers = 1, .sync = DT_PS_BSP};
    if (!strcmp(mode, "bsp"))
        pc.servers = n / 2;
    else if (!strcmp(mode, "asp"))
        pc.sync = DT_PS_ASP;
    else if (!strcmp(mode, "sparse"))
        pc.servers = n > 2 ? n / 2 : 1, pc.sync = n > 2 ? DT_PS_BSP : DT_PS_ASP;
    else if (!strcmp(mode, "ssp") && argc > 3) {
        pc.sync = DT_PS_SSP;
        pc.staleness = atoi(argv[2]);
        pc.clock_log = argv[3];
    } else if (strcmp(mode, "refuse") && strcmp(mode, "sparse") && strcmp(mode, "hostile")) {
        fprintf(stderr, "usage: ps_check bsp | asp | sparse | ssp STALENESS LOG | refuse | hostile\n");
        return 2;
    }
    CALL(dt_ps_split(world, &pc, &group));
    bool server = dt_ps_server_index(&pc, world) >= 0;
    int W = n - pc.servers;
    if (!strcmp(mode, "bsp") || !strcmp(mode, "asp")) {
        for (int kind = GPT; kind >= MLP; kind--) {
            if (server)
                CALL(serve(world, group, &pc, kind, 16));
            else
                compare_run(world, group, &pc, kind, pc.sync == DT_PS_BSP, pc.sync == DT_PS_BSP ? 1e-5 : 0, mode);
        }
    } else if (!strcmp(mode, "sparse")) {
        if (server)
            CALL(serve(world, group, &pc, TEXT, 16));
        else
            compare_run(world, group, &pc, TEXT, pc.sync == DT_PS_BSP, pc.sync == DT_PS_BSP ? 1e-5 : 0,
                        pc.sync == DT_PS_BSP ? "sparse bsp" : "sparse asp");
    } else if (!strcmp(mode, "ssp")) {
        if (server)
            CALL(serve(world, group, &pc, GPT, 16));
        else {
            dt_model *m = build(GPT, 16);
            dt_strategy *s;
            dt_strategy_config cfg = {.micro_batches = 1, .seed = SEED};
            CALL(dt_strategy_ps_create(m, world, &pc, &cfg, &s));
            for (int step = 0; step < STEPS; step++) {
                feed f = {GPT, step, 0, {0}, {0}};
                dt_step_stats st;
                if (rank == W - 1)
                    sleep_ms(30);
                CALL(dt_strategy_step(s, step, 3e-3f, next_batch, &f, &st));
            }
            dt_strategy_destroy(s);
            dt_model_destroy(m);
        }
        CALL(dt_barrier(world));
        if (rank == 0)
            check_ssp_log(pc.clock_log, pc.staleness, W);
    } else if (!strcmp(mode, "hostile")) {
        if (server) {
            dt_status s = serve(world, group, &pc, TEXT, 16);
            if (s == DT_OK || !strstr(dt_last_error(), "refused")) {
                fprintf(stderr, "ps_check: the server did not report the refused workers (%s)\n", dt_last_error());
                failures++;
            }
        } else if (rank == 1 || rank == 2) {
            dt_model *m = build(TEXT, 16);
            dt_strategy *s = NULL;
            dt_strategy_config cfg = {.micro_batches = 1, .seed = SEED};
            CALL(dt_strategy_ps_create(m, world, &pc, &cfg, &s));
            int srv = n - 1;
            float junk[64] = {0};
            if (rank == 1) { /* a row past the table's end */
                int64_t id = BUCKETS + 7;
                ps_header h = {PS_MAGIC | PS_PUSH_ROWS, 0, 0, 1, ps_bits(0.1), 0, 0, 0};
                CALL(dt_send(&h, PS_HEADER_WORDS, DT_I64, srv, PS_TAG_REQ, world));
                CALL(dt_send(&id, 1, DT_I64, srv, PS_TAG_DATA, world));
                CALL(dt_send(junk, 8, DT_F32, srv, PS_TAG_DATA, world));
            } else { /* gradients past the server's range */
                ps_header h = {PS_MAGIC | PS_PUSH, 0, dt_params_numel(dt_model_params(m)) - 4, 16, 0, 0, 0, 0};
                CALL(dt_send(&h, PS_HEADER_WORDS, DT_I64, srv, PS_TAG_REQ, world));
                CALL(dt_send(junk, 16, DT_F32, srv, PS_TAG_DATA, world));
            }
            feed f = {TEXT, 0, 0, {0}, {0}};
            dt_step_stats st;
            dt_status r = dt_strategy_step(s, 0, 0.1f, next_batch, &f, &st);
            char want[64];
            snprintf(want, sizeof want, "refused worker %d", rank);
            const char *what = rank == 1 ? "outside the table" : "outside this server's range";
            bool named = r == DT_ERR_INVALID && strstr(dt_last_error(), want) && strstr(dt_last_error(), what) &&
                         strstr(dt_last_error(), rank == 1 ? "embedding.weight" : "fc.");
            failures += !named;
            fprintf(named ? stdout : stderr, "ps_check rank %d: a hostile push refused: %s%s\n", rank, dt_last_error(),
                    named ? "" : " (FAILED: not naming the worker, the tensor and the fault)");
            dt_strategy_destroy(s);
            dt_model_destroy(m);
        } else
            compare_run(world, NULL, &pc, TEXT, false, 1e-5, "bsp after hostile workers");
    } else { /* refuse */
        if (server) {
            dt_status s = serve(world, group, &pc, GPT, 16);
            if (s == DT_OK || !strstr(dt_last_error(), "refused")) {
                fprintf(stderr, "ps_check: the server did not report the refused worker (%s)\n", dt_last_error());
                failures++;
            }
        } else if (rank == 1) {
            dt_model *m = build(GPT, 24);
            dt_strategy *s = NULL;
            dt_strategy_config cfg = {.micro_batches = 1, .seed = SEED};
            dt_status st = dt_strategy_ps_create(m, world, &pc, &cfg, &s);
            bool named = st == DT_ERR_INVALID && strstr(dt_last_error(), "worker 1") &&
                         strstr(dt_last_error(), "wte") && strstr(dt_last_error(), "differs");
            failures += !named;
            fprintf(named ? stdout : stderr, "ps_check rank 1: a different model refused: %s%s\n", dt_last_error(),
                    named ? "" : " (FAILED: not naming the worker and the tensor)");
            dt_model_destroy(m);
        } else
            compare_run(world, NULL, &pc, GPT, false, 1e-5, "bsp after a refused worker");
    }
    int all = 0;
    CALL(dt_allreduce(&failures, &all, 1, DT_I32, DT_SUM, world));
    CALL(dt_comm_destroy(group));
    CALL(dt_comm_destroy(world));
    if (rank == 0)
        printf("ps_check %s: %s\n", mode, all ? "FAILED" : "ok");
    return all ? 1 : 0;
}
