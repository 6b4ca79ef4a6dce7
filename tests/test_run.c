/* Runs built from a layout through the library alone (dt_strategy_create,
 * include/dtrain/layout.h), under dtrun -n 4: every layout of the table below
 * follows the single-process trajectory of the same global batch (a
 * one-rank run over a split of the world, micro-batches standing for the data-
 * parallel ranks) within 1e-5 relative; evaluation equals the single run's;
 * a checkpoint written by dt_strategy_save is resumed by another layout on
 * the uninterrupted trajectory; a parameter server's rank serves; bad
 * arguments and layouts that do not fit are refused naming why. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "dtrain/dtrain.h"

#define TRY(call)                                                                        \
    do {                                                                                 \
        dt_status st_ = (call);                                                          \
        if (st_ != DT_OK)                                                                \
            return st_;                                                                  \
    } while (0)

enum { VOCAB = 32, CONTEXT = 8, PER_RANK = 4, STEPS = 4 };

static dt_status describe(void *user, dt_comm *tp, dt_model_desc **out)
{
    (void)user;
    dt_gpt_config g = {.vocab = VOCAB, .context = CONTEXT, .layers = 4, .heads = 2, .dim = 16};
    if (tp)
        g.tp = dt_tp_group_of_comm(tp);
    return dt_gpt_describe(&g, out);
}

static dt_status make_optimizer(void *user, int64_t n, dt_optimizer **o)
{
    (void)user;
    return dt_adamw_create(&(dt_adamw_config){0.9f, 0.999f, 1e-8f, 0.01f}, n, o);
}

/* Batches of PER_RANK sequences: sample i of step s is the same whoever
 * trains it; a data-parallel rank r of N takes its slice of the global batch,
 * the single run the whole batch as N micro-batches. */
typedef struct {
    int64_t step;
    int part, parts; /* this source's micro-batches: part .. part + parts - 1 of the global batch */
    int next;
    float x[PER_RANK * CONTEXT];
    int32_t y[PER_RANK * CONTEXT];
} source;

static dt_status next(void *user, dt_micro_batch *mb)
{
    source *s = user;
    int slot = s->part + s->next++ % s->parts;
    for (int i = 0; i < PER_RANK * CONTEXT; i++) {
        uint64_t h = (uint64_t)(s->step * 7919 + slot * 104729 + i) * 0x9E3779B97F4A7C15ull;
        s->x[i] = (float)((h >> 33) % VOCAB);
        s->y[i] = (int32_t)((h >> 17) % VOCAB);
    }
    mb->x = dt_tensor_view(s->x, 2, (int64_t[]){PER_RANK, CONTEXT});
    mb->targets = s->y;
    mb->ntargets = PER_RANK * CONTEXT;
    return DT_OK;
}

static dt_run_recipe recipe(void)
{
    return (dt_run_recipe){.describe = describe, .make_optimizer = make_optimizer, .seed = 7, .grad_clip = 1.0f,
                           .weight_decay = 0.01f};
}

/* Train `steps` from step `from`, each replica its micro-batches of the global
 * batch; losses[k] the mean loss over the ranks that train (as the trainer logs it). */
static dt_status train(dt_strategy *s, int64_t from, int steps, float *losses)
{
    dt_comm *dp, *tp, *pp, *all = dt_strategy_data_comm(s);
    dt_strategy_groups(s, &dp, &tp, &pp);
    if (dt_strategy_layout(s)->servers == 0)
        all = dt_strategy_job_comm(s);
    int micro = dt_layout_step_micro_batches(dt_strategy_layout(s));
    for (int64_t k = from; k < from + steps; k++) {
        source src = {k, dt_comm_rank(dp) * micro, micro, 0, {0}, {0}};
        dt_step_stats st;
        TRY(dt_strategy_step(s, k, 1e-2f, next, &src, &st));
        float l = st.loss;
        TRY(dt_allreduce(&l, &l, 1, DT_F32, DT_AVG, all));
        losses[k - from] = l;
    }
    return DT_OK;
}

static bool close_to(float a, float b) { return fabsf(a - b) <= 1e-5f * fmaxf(1.0f, fabsf(b)); }

int main(void)
{
    dt_comm *world = NULL, *self = NULL;
    if (dt_comm_init_env(&world) != DT_OK) {
        fprintf(stderr, "test_run: %s\n", dt_last_error());
        return 1;
    }
    int rank = dt_comm_rank(world), n = dt_comm_size(world);
    EXPECT_STATUS(dt_comm_split(world, rank, 0, &self), DT_OK);
    dt_run_recipe r = recipe();
    dt_strategy *s = NULL;

    /* refusals, before any collective */
    dt_layout l;
    dt_layout_default(&l);
    EXPECT_STATUS(dt_strategy_create(NULL, &r, world, &s), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "the layout");
    dt_run_recipe bad = r;
    bad.describe = NULL;
    EXPECT_STATUS(dt_strategy_create(&l, &bad, world, &s), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "describe");
    l.tp = 3;
    EXPECT_STATUS(dt_strategy_create(&l, &r, world, &s), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "tp = 3");
    dt_layout_default(&l);
    l.pp = 8;
    l.dp = 0;
    EXPECT_STATUS(dt_strategy_create(&l, &r, self, &s), DT_ERR_INVALID); /* 6 blocks cannot make 8 stages */
    EXPECT_CONTAINS(dt_last_error(), "pp");

    /* the reference: one process, the global batch as n micro-batches */
    float ref[STEPS + 2], got[STEPS + 2];
    dt_layout_default(&l);
    l.micro_batches = n;
    EXPECT_STATUS(dt_strategy_create(&l, &r, self, &s), DT_OK);
    EXPECT_STATUS(train(s, 0, STEPS, ref), DT_OK);
    dt_eval_totals ref_eval; /* after STEPS steps, as the layouts' below */
    source es = {1000, 0, 1, 0, {0}, {0}};
    EXPECT_STATUS(dt_strategy_evaluate(s, 2, next, &es, &ref_eval), DT_OK);
    EXPECT_STATUS(train(s, STEPS, 2, ref + STEPS), DT_OK);
    dt_strategy_destroy(s);

    static const struct {
        const char *sets; /* the layout, in the trainer's --set form */
        int replicas;     /* data-parallel ranks (each trains its slice) */
    } layouts[] = {
        {"", 4},
        {"tp=2", 2},
        {"tp=2 sequence_parallel=true", 2},
        {"pp=2", 2},
        {"pp=2 pipeline_schedule=interleaved", 2},
        {"pp=2 tp=2", 1},
        {"zero_stage=1", 4},
        {"zero_stage=2", 4},
        {"zero_stage=3", 4},
        {"zero_stage=1 tp=2", 2},
        {"zero_stage=2 pp=2", 2},
    };
    char dir[] = "/tmp/dtrain-test-run.XXXXXX";
    if (rank == 0 && !mkdtemp(dir))
        EXPECT(false);
    EXPECT_STATUS(dt_broadcast(dir, sizeof dir, DT_U8, 0, world), DT_OK);
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0] && n == 4; i++) {
        dt_layout_default(&l);
        char words[256];
        snprintf(words, sizeof words, "%s", layouts[i].sets);
        for (char *w = strtok(words, " "); w; w = strtok(NULL, " ")) {
            char *eq = strchr(w, '=');
            *eq = 0;
            EXPECT_STATUS(dt_layout_set(&l, w, eq + 1), DT_OK);
        }
        l.micro_batches = 4 / layouts[i].replicas; /* each replica its share of the global batch's 4 */
        EXPECT_STATUS(dt_strategy_create(&l, &r, world, &s), DT_OK);
        if (!s)
            continue;
        EXPECT_EQ(dt_comm_size(dt_strategy_data_comm(s)), layouts[i].replicas);
        EXPECT_STATUS(train(s, 0, STEPS, got), DT_OK);
        bool same = true;
        for (int k = 0; k < STEPS; k++)
            same &= close_to(got[k], ref[k]);
        if (!same && rank == 0)
            fprintf(stderr, "test_run: '%s': step 1 loss %.9g against %.9g\n", layouts[i].sets, got[0], ref[0]);
        EXPECT(same);
        /* evaluation: the lead's replica scores the same batches */
        dt_eval_totals ev;
        source e2 = {1000, 0, 1, 0, {0}, {0}};
        EXPECT_STATUS(dt_strategy_evaluate(s, 2, next, &e2, &ev), DT_OK);
        if (dt_strategy_lead(s))
            EXPECT(fabs(ev.loss_sum / (double)ev.rows - ref_eval.loss_sum / (double)ref_eval.rows) <= 1e-5);
        /* a checkpoint of this layout, resumed by the plain data-parallel one */
        dt_params *wp;
        dt_optimizer *wo;
        bool stream, dropped = false;
        dt_strategy_checkpoint_state(s, &wp, &wo, &stream);
        dt_ckpt_writer *w = NULL;
        char root[128];
        snprintf(root, sizeof root, "%s/ck%zu", dir, i);
        if (dt_strategy_lead(s))
            EXPECT_STATUS(dt_ckpt_writer_start(&(dt_ckpt_writer_config){.root = root, .keep = 1, .kept_step = -1,
                                                                        .meta = {"{}", NULL, "adamw"},
                                                                        .stream_model = stream},
                                               wp, wo, &w),
                          DT_OK);
        dt_ckpt_progress pr = {.step = STEPS, .optimizer_steps = STEPS, .world_size = layouts[i].replicas};
        EXPECT_STATUS(dt_strategy_sync(s), DT_OK);
        EXPECT_STATUS(dt_strategy_save(s, w, root, &pr, "", NULL, &dropped), DT_OK);
        EXPECT(!dropped);
        if (w) {
            EXPECT_STATUS(dt_ckpt_writer_flush(w), DT_OK);
            dt_ckpt_writer_stop(w);
        }
        dt_strategy_destroy(s);
        s = NULL;
        EXPECT_STATUS(dt_barrier(world), DT_OK); /* the manifest is on disk */
        char step_dir[160];
        snprintf(step_dir, sizeof step_dir, "%s/step-%08d", root, STEPS);
        dt_layout_default(&l);
        l.micro_batches = 1;
        dt_run_recipe rr = r;
        rr.resume = step_dir;
        rr.resume_optimizer_steps = STEPS;
        EXPECT_STATUS(dt_strategy_create(&l, &rr, world, &s), DT_OK);
        if (s) {
            EXPECT_STATUS(train(s, STEPS, 2, got), DT_OK);
            if (!close_to(got[0], ref[STEPS]) && rank == 0)
                fprintf(stderr, "test_run: '%s' resumed: step %d loss %.9g against %.9g\n", layouts[i].sets,
                        STEPS + 1, got[0], ref[STEPS]);
            EXPECT(close_to(got[0], ref[STEPS]) && close_to(got[1], ref[STEPS + 1]));
            dt_strategy_destroy(s);
            s = NULL;
        }
    }

    /* a parameter server: the last rank serves, the others train in lockstep (bsp) */
    if (n == 4) {
        dt_layout_default(&l);
        l.servers = 1;
        EXPECT_STATUS(dt_strategy_create(&l, &r, world, &s), DT_OK);
        EXPECT_EQ(dt_strategy_serves(s), rank == 3);
        if (s && dt_strategy_serves(s)) {
            int64_t lo, cnt, total;
            EXPECT_EQ(dt_strategy_server_range(s, &lo, &cnt, &total), 0);
            EXPECT(lo == 0 && cnt == total && total > 0);
            EXPECT_STATUS(dt_strategy_serve(s), DT_OK);
        } else if (s) {
            EXPECT(dt_strategy_lockstep(s));
            EXPECT_STATUS(train(s, 0, 2, got), DT_OK); /* 3 workers: not the reference's batch; it runs */
            EXPECT(isfinite(got[0]) && isfinite(got[1]));
        }
        dt_strategy_destroy(s);
    }
    if (rank == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        EXPECT(system(cmd) == 0);
    }
    dt_comm_destroy(self);
    dt_comm_destroy(world);
    return CHECK_DONE("test_run");
}
