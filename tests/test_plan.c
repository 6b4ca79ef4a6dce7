/* The planner (include/dtrain/plan.h): its cost model against figures
 * computed by hand, the memory plan against dt_layout_memory_plan on a real
 * model, the search's results, its speed on 10,000 ranks, the projection of
 * GPT-3 175B on 1024 A100s, the JSON files.  argv[1]: the A100 hardware file. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "dtrain/dtrain.h"
#include "dtrain/plan.h"

#define NEAR(got, want)                                                                              \
    do {                                                                                             \
        double g_ = (got), w_ = (want);                                                              \
        check_count++;                                                                               \
        if (!(fabs(g_ - w_) <= 1e-9 * fmax(fabs(w_), 1e-12))) {                                      \
            check_failures++;                                                                        \
            fprintf(stderr, "%s:%d: %s is %.12g, expected %.12g\n", __FILE__, __LINE__, #got, g_, w_); \
        }                                                                                            \
    } while (0)

static const char *hardware = "bench/plan/hardware/a100-dgx.json";

/* n equal blocks of `params` elements, 1 ms forward and 2 ms backward per sample. */
static void small_model(dt_plan_inputs *in, int n, int64_t params)
{
    memset(in, 0, sizeof *in);
    in->model.blocks = calloc((size_t)n, sizeof(dt_plan_block));
    in->model.nblocks = n;
    for (int i = 0; i < n; i++)
        in->model.blocks[i] = (dt_plan_block){"linear", params, 1e-3, 2e-3, 1000, 100, 1, 400, 2, 0, 0, 0, 0};
    in->model.tokens_per_sample = 1;
    in->model.optimizer_s_per_param = 1e-9;
    in->model.optimizer_state_floats = 2;
    in->links = (dt_plan_links){{1e-5, 1e9}, {1e-4, 1e8}, 2, 0, 0};
    in->world = 1;
    in->batch_size = 4;
}

static void test_one_rank(void)
{
    dt_plan_inputs in;
    small_model(&in, 3, 1000);
    dt_layout l;
    dt_layout_default(&l);
    dt_plan_estimate e;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.compute_s, 4 * 3 * 3e-3);                 /* 4 samples x 3 blocks x (1 + 2) ms */
    NEAR(e.optimizer_s, 3000 * 1e-9);
    NEAR(e.step_s, 4 * 3 * 3e-3 + 3000 * 1e-9);     /* nothing else on one rank */
    NEAR(e.params_bytes + e.grads_bytes + e.optimizer_bytes, 16 * 3000.0);
    NEAR(e.activation_bytes, 4 * 3 * 1000.0);        /* one micro-batch of 4 samples in flight */
    NEAR(e.samples_per_s, 4 / e.step_s);
    EXPECT(e.fits && e.mfu == 0);
    /* recompute blocks: one more forward, only the inputs kept (and one block rebuilt) */
    l.recompute = DT_RECOMPUTE_BLOCKS;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.recompute_s, 4 * 3 * 1e-3);
    NEAR(e.activation_bytes, 4 * (2 * 100.0 + 1000));
    dt_plan_model_free(&in.model);
}

static void test_dp2(void)
{
    dt_plan_inputs in;
    small_model(&in, 2, 500000); /* 4 MB of f32 gradients */
    in.world = 2;
    dt_layout l;
    dt_layout_default(&l);
    l.bucket_mb = 1;
    dt_plan_estimate e;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    /* 4 buckets: 3 of 1 MiB and the rest, each (<= 2 MiB on one host) halving-doubling over 2 ranks:
     * 2 log2(2) a + 2 N (1/2) b.  The buckets fill as the blocks' backwards end (4 samples x 2 ms each):
     * the second block's 2 MB fill one at 8 ms, reduced while the first block's backward runs; the first
     * block's end at 16 ms fills two more and leaves the rest: those three after the backward. */
    double a = 1e-5, b = 1e-9, G = 4e6, last = G - 3 * 1048576.0;
    double full = 2 * a + 1048576.0 * b, tail = 2 * a + last * b;
    NEAR(e.dp_s, 2 * full + tail);
    NEAR(e.step_s, e.compute_s + e.dp_s + e.optimizer_s);
    EXPECT_EQ(e.layout.dp, 2);
    NEAR(e.samples_per_s, 8 / e.step_s); /* 2 replicas of 4 samples */
    /* across hosts (1 rank per node), one bucket of 4 MB > 256 KiB: the ring, 2(n-1) a + 2N(n-1)/n b */
    in.links.ranks_per_node = 1;
    l.bucket_mb = 4;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.dp_s, 2 * 1e-4 + 4e6 / 1e8);
    dt_plan_model_free(&in.model);
}

static void test_pp2_bubble(void)
{
    dt_plan_inputs in;
    small_model(&in, 4, 1000);
    in.world = 2;
    in.batch_size = 8;
    for (int m = 1; m <= 8; m *= 2) {
        dt_layout l;
        dt_layout_default(&l);
        l.pp = 2;
        l.micro_batches = m;
        dt_plan_estimate e;
        EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
        NEAR(e.compute_s, 8 * 2 * 3e-3);                         /* the stage's 2 blocks, 8 samples */
        NEAR(e.bubble_s / (e.compute_s + e.bubble_s), 1.0 / (m + 1)); /* (p-1)/(m+p-1) */
        NEAR(e.activation_bytes, fmin(2, m) * (8 / m) * 2 * 1000.0);   /* stage 0 holds min(p, m) micro-batches */
        l.schedule = DT_PIPE_GPIPE;
        EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
        NEAR(e.activation_bytes, 8 * 2 * 1000.0);                      /* gpipe: all m */
        if (m % 2 == 0) {
            l.schedule = DT_PIPE_INTERLEAVED;
            l.virtual_stages = 2;
            EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
            NEAR(e.bubble_s, e.compute_s / (2.0 * m));                 /* (p-1)/(v m) */
        }
    }
    dt_plan_model_free(&in.model);
}

/* A pipeline across hosts whose link is slower than a micro-batch's compute: the link sets the pace. */
static void test_pp_slow_link(void)
{
    dt_plan_inputs in;
    small_model(&in, 4, 1000);
    in.world = 2;
    in.batch_size = 8;
    in.links.ranks_per_node = 1; /* the two stages on two hosts */
    dt_layout l;
    dt_layout_default(&l);
    l.pp = 2;
    l.micro_batches = 8; /* 1 sample each: 2 blocks x 3 ms = 6 ms a micro-batch on a stage */
    dt_plan_estimate e;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    double send = 1e-4 + 100 / 1e8; /* 100 bytes of activations a sample over 100 us and 1e8 B/s: hidden */
    NEAR(e.pp_s, 2 * send);
    in.links.inter.bandwidth_Bps = 1e4; /* 10 ms a message: the 7 micro-batches after the first wait 4 ms each */
    send = 1e-4 + 100 / 1e4;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.pp_s, 2 * send + 7 * (send - 6e-3));
    NEAR(e.step_s, e.compute_s + e.bubble_s + e.pp_s + e.optimizer_s);
    dt_plan_model_free(&in.model);
}

/* ZeRO-3's memory against the formula and against dt_layout_memory_plan on the model itself. */
static void test_zero3_memory(void)
{
    int64_t sizes[] = {30, 17, 9};
    dt_model_desc *d = NULL;
    dt_model *m = NULL;
    EXPECT_STATUS(dt_mlp_describe(sizes, 3, &d), DT_OK);
    EXPECT_STATUS(dt_model_instantiate(d, 0, dt_model_desc_blocks(d), &m), DT_OK);
    dt_plan_inputs in;
    small_model(&in, dt_model_desc_blocks(d), 0);
    for (int i = 0; i < in.model.nblocks; i++)
        in.model.blocks[i].params = dt_model_desc_block(d, i)->params;
    in.world = 4;
    dt_layout l;
    dt_layout_default(&l);
    dt_plan_estimate e;
    for (int z = 0; z <= 3; z++) {
        l.zero_stage = z;
        dt_memory_plan mp;
        EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
        EXPECT_STATUS(dt_layout_memory_plan(&l, m, 4, 2, &mp), DT_OK);
        NEAR(e.params_bytes, mp.params);
        NEAR(e.grads_bytes, mp.grads);
        NEAR(e.optimizer_bytes, mp.optimizer);
        NEAR(e.buffers_bytes, mp.buffers);
    }
    /* by hand: fc1 30x17+17 = 527, fc2 17x9+9 = 162; shard ceil(527/4) + ceil(162/4) = 132 + 41 = 173;
     * the largest unit 528; buffers 4 (3 x 528 + 2 x 528/4) + 4 x 3 x 528 */
    NEAR(e.params_bytes, 4 * 173.0);
    NEAR(e.grads_bytes, 4 * 173.0);
    NEAR(e.optimizer_bytes, 8 * 173.0);
    NEAR(e.buffers_bytes, 4 * (3 * 528.0 + 2 * 528.0 / 4) + 4 * 3 * 528.0);
    dt_model_destroy(m);
    dt_model_desc_destroy(d);
    dt_plan_model_free(&in.model);
}

static void test_search_small(void)
{
    dt_plan_inputs in;
    small_model(&in, 4, 100000);
    in.world = 4;
    in.batch_size = 8;
    dt_plan_search_opts o = {.top = 50, .allow_servers = true, .allow_recompute = true};
    dt_plan_result r;
    EXPECT_STATUS(dt_plan_search(&in, &o, &r), DT_OK);
    printf("world 4: %d considered, %d valid, %d fitting, %d kept, %.3f ms\n", r.considered, r.valid, r.fitting,
           r.nbest, r.search_s * 1e3);
    EXPECT(r.nbest > 1 && r.fitting >= r.nbest && r.valid >= r.fitting && r.considered >= r.valid);
    for (int i = 0; i < r.nbest; i++) {
        const dt_plan_estimate *e = &r.best[i];
        int dp;
        EXPECT_STATUS(dt_layout_check(&e->layout, 4, &dp), DT_OK);
        EXPECT(e->fits);
        EXPECT(i == 0 || e->samples_per_s <= r.best[i - 1].samples_per_s);
        dt_plan_estimate again;
        EXPECT_STATUS(dt_plan_layout(&in, &e->layout, &again), DT_OK);
        NEAR(again.step_s, e->step_s);
    }
    char buf[160];
    printf("  best: %s, %.1f samples/s\n", dt_layout_describe(&r.best[0].layout, buf, sizeof buf), r.best[0].samples_per_s);
    int fitting = r.fitting;
    double fastest_memory = r.best[0].memory_bytes;
    dt_plan_result_free(&r);
    /* a limit below the fastest's memory: it goes, the new best fits, fewer fit */
    in.memory_limit = fastest_memory * 0.9;
    EXPECT_STATUS(dt_plan_search(&in, &o, &r), DT_OK);
    EXPECT(r.nbest >= 1 && r.fitting < fitting);
    EXPECT(r.best[0].fits && r.best[0].memory_bytes <= in.memory_limit);
    dt_plan_result_free(&r);
    /* nothing fits: refused, with the families' reasons */
    in.memory_limit = 1000;
    EXPECT_STATUS(dt_plan_search(&in, &o, &r), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "no layout of 4 ranks fits");
    EXPECT(r.nbest == 0 && r.nrejected > 0);
    for (int i = 0; i < r.nrejected && i < 3; i++)
        printf("  refused: %s\n", r.rejected[i]);
    if (r.nrejected)
        EXPECT_CONTAINS(r.rejected[0], "per rank, over the limit");
    dt_plan_result_free(&r);
    dt_plan_model_free(&in.model);
}

static void print_best(const dt_plan_result *r, int n)
{
    for (int i = 0; i < r->nbest && i < n; i++) {
        const dt_plan_estimate *e = &r->best[i];
        char buf[200];
        printf("  %d. %-62s step %7.3f s (compute %.3f bubble %.3f tp %.3f pp %.3f dp %.3f recompute %.3f) "
               "%6.1f samples/s MFU %.1f%% memory %.1f GiB\n",
               i + 1, dt_layout_describe(&e->layout, buf, sizeof buf), e->step_s, e->compute_s, e->bubble_s, e->tp_s,
               e->pp_s, e->dp_s, e->recompute_s, e->samples_per_s, 100 * e->mfu, e->memory_bytes / (1 << 30));
    }
}

static void gpt_inputs(dt_plan_inputs *in, const char *name, int world, int64_t global_batch)
{
    memset(in, 0, sizeof *in);
    EXPECT_STATUS(dt_plan_hardware_read(hardware, in), DT_OK);
    in->world = world;
    in->global_batch = global_batch;
    EXPECT_STATUS(dt_plan_model_gpt(name, in, 1, &in->model), DT_OK);
    double params = 0; /* the head's weight is the embedding's (tied): counted once */
    for (int i = 0; i + 1 < in->model.nblocks; i++)
        params += (double)in->model.blocks[i].params;
    in->model_flops_per_sample = 6 * params * 2048;
}

static void test_projection_175b(void)
{
    dt_plan_inputs in;
    gpt_inputs(&in, "gpt3-175b", 1024, 1536);
    EXPECT_EQ(in.links.ranks_per_node, 8);
    dt_plan_search_opts o = {.top = 5, .allow_recompute = true};
    dt_plan_result r;
    EXPECT_STATUS(dt_plan_search(&in, &o, &r), DT_OK);
    printf("gpt3-175b on 1024 A100 80GB, global batch 1536: %d considered, %d valid, %d fitting in %.3f s\n",
           r.considered, r.valid, r.fitting, r.search_s);
    print_best(&r, 5);
    if (r.nbest) {
        EXPECT(r.best[0].layout.tp <= 8);
        EXPECT(r.best[0].mfu > 0 && r.best[0].mfu < 1);
        EXPECT(r.best[0].fits);
    }
    /* Megatron-LM's layout (Narayanan et al. 2021): tp 8 x pp 16 x dp 8, interleaved, micro-batch 1 */
    dt_layout l;
    dt_layout_default(&l);
    l.tp = 8;
    l.pp = 16;
    l.schedule = DT_PIPE_INTERLEAVED;
    l.virtual_stages = 2;
    l.micro_batches = 192;
    l.recompute = DT_RECOMPUTE_BLOCKS;
    dt_plan_estimate e;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    dt_plan_result one = {.best = &e, .nbest = 1};
    printf("Megatron-LM's layout as the planner sees it:\n");
    print_best(&one, 1);
    dt_plan_result_free(&r);
    dt_plan_model_free(&in.model);
}

static void test_search_10000(void)
{
    dt_plan_inputs in;
    gpt_inputs(&in, "gpt3-175b", 10000, 0);
    in.batch_size = 16;
    dt_plan_search_opts o = {.top = 3, .allow_recompute = true, .allow_servers = true};
    dt_plan_result r;
    dt_status s = dt_plan_search(&in, &o, &r);
    EXPECT_STATUS(s, DT_OK);
    printf("gpt3-175b on 10,000 ranks: %d considered, %d valid, %d fitting in %.3f s\n", r.considered, r.valid,
           r.fitting, r.search_s);
    print_best(&r, 3);
    EXPECT(r.search_s < 1.0);
    dt_plan_result_free(&r);
    dt_plan_model_free(&in.model);
}

static void test_json(void)
{
    dt_plan_inputs in;
    small_model(&in, 3, 1234567);
    in.model.blocks[1].flops = 3.25e9;
    in.model.blocks[2].tp_splittable = 1;
    in.model.blocks[2].act_tp_whole_bytes = 300;
    in.model.samples = 8;
    in.model.threads = 4;
    char path[] = "/tmp/dt_plan_model_XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    EXPECT_STATUS(dt_plan_model_write(path, &in.model), DT_OK);
    dt_plan_model back;
    EXPECT_STATUS(dt_plan_model_read(path, &back), DT_OK);
    EXPECT_EQ(back.nblocks, 3);
    EXPECT(back.samples == 8 && back.threads == 4 && back.optimizer_state_floats == 2);
    EXPECT(back.optimizer_s_per_param == in.model.optimizer_s_per_param);
    EXPECT(back.nblocks == 3 && !memcmp(back.blocks, in.model.blocks, 3 * sizeof *back.blocks));
    EXPECT(back.shared_ranks == 0 && back.contention == 0); /* not measured: absent */
    dt_plan_model_free(&back);
    in.model.shared_ranks = 4;
    in.model.contention = 1.125;
    in.model.sync_s[1] = 0.002;
    EXPECT_STATUS(dt_plan_model_write(path, &in.model), DT_OK);
    EXPECT_STATUS(dt_plan_model_read(path, &back), DT_OK);
    EXPECT(back.shared_ranks == 4 && back.contention == 1.125 && back.sync_s[0] == 0 && back.sync_s[1] == 0.002);
    dt_plan_model_free(&back);
    /* links */
    FILE *f = fopen(path, "w");
    fputs("{\"intra\": {\"latency_us\": 2, \"bandwidth_GBps\": 10}, \"inter\": {\"latency_us\": 50, "
          "\"bandwidth_GBps\": 0.125}, \"ranks_per_node\": 4}",
          f);
    fclose(f);
    dt_plan_links links;
    EXPECT_STATUS(dt_plan_links_read(path, &links), DT_OK);
    NEAR(links.intra.latency_s, 2e-6);
    NEAR(links.inter.bandwidth_Bps, 0.125e9);
    EXPECT_EQ(links.ranks_per_node, 4);
    f = fopen(path, "w");
    fputs("{\"intra\": {\"latency_us\": 2}, \"ranks_per_node\": 4}", f);
    fclose(f);
    EXPECT_STATUS(dt_plan_links_read(path, &links), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "bandwidth_GBps");
    unlink(path);
    /* hardware */
    dt_plan_inputs hw = {0};
    EXPECT_STATUS(dt_plan_hardware_read(hardware, &hw), DT_OK);
    NEAR(hw.flops_per_s, 312e12);
    NEAR(hw.links.inter.bandwidth_Bps, 25e9);
    EXPECT(hw.memory_limit > 80e9 && hw.compute_efficiency > 0 && hw.compute_efficiency <= 1);
    /* an estimate */
    dt_layout l;
    dt_layout_default(&l);
    dt_plan_estimate e;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    char *j = dt_plan_estimate_json(&e);
    EXPECT(j != NULL);
    if (j) {
        EXPECT_CONTAINS(j, "\"step_s\":");
        EXPECT_CONTAINS(j, "\"layout\":{");
        EXPECT_CONTAINS(j, "\"fits\":true");
        free(j);
    }
    EXPECT_STATUS(dt_plan_model_gpt("gpt3-7b", &hw, 1, &back), DT_ERR_INVALID);
    close(fd);
    dt_plan_model_free(&in.model);
}

/* tp 2 splits the activations but the part kept whole, unless sequence parallel; the times halve, the tp
 * allreduces (2 per pass, 400 bytes a sample, 4 samples: 1600 B, recursive doubling on one host) are added. */
static void test_tp2(void)
{
    dt_plan_inputs in;
    small_model(&in, 2, 1000);
    in.world = 2;
    for (int i = 0; i < 2; i++) {
        in.model.blocks[i].tp_splittable = 1;
        in.model.blocks[i].act_tp_whole_bytes = 200;
    }
    dt_layout l;
    dt_layout_default(&l);
    l.tp = 2;
    dt_plan_estimate e;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.compute_s, 4 * 2 * 3e-3 / 2);
    NEAR(e.tp_s, 2 * 2 * 2 * (1e-5 + 1600 * 1e-9)); /* forward and backward, 2 blocks, 2 collectives each */
    NEAR(e.activation_bytes, 4 * 2 * (200 + 800 / 2.0));
    NEAR(e.params_bytes, 4 * 1000.0);                /* 2 blocks of 1000 / 2 */
    l.sequence_parallel = true;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.activation_bytes, 4 * 2 * 1000 / 2.0);
    dt_plan_model_free(&in.model);
}

/* tp_copies (multi-copy tp) on gpt blocks: with 2 copies the first takes 2/3 of the rows, the last 1/3, each
 * copy's exchanges their bytes with their own latency; exposed is the last copy's, or what the first copy's
 * compute (2/3 of the block's forward) cannot cover; the block's output and input gradient (out_bytes each)
 * are held once more. */
static void test_tp_copies(void)
{
    dt_plan_inputs in;
    small_model(&in, 2, 1000);
    in.world = 2;
    for (int i = 0; i < 2; i++) {
        snprintf(in.model.blocks[i].kind, sizeof in.model.blocks[i].kind, "gpt-block");
        in.model.blocks[i].tp_splittable = 1;
    }
    dt_layout l;
    dt_layout_default(&l);
    l.tp = 2;
    l.tp_copies = 2;
    dt_plan_estimate e;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.compute_s, 4 * 2 * 3e-3 / 2);
    NEAR(e.tp_s, 2 * 2 * 2 * (1e-5 + 1600 / 3.0 * 1e-9)); /* covered: the last copy's 2 exchanges of 533 B */
    NEAR(e.activation_bytes, 4 * 2 * (1000 / 2.0 + 2 * 100));
    /* a slow link (1 MB/s): 2 x (1e-5 + 1.067 ms) + 2 x (1e-5 + 0.533 ms) less 2/3 of the block's 2 ms forward */
    in.links.intra = (dt_plan_link){1e-5, 1e6};
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.tp_s, 2 * 2 * (2 * (1e-5 + 3200e-6 / 3) + 2 * (1e-5 + 1600e-6 / 3) - 2e-3 * 2 / 3));
    l.tp_copies = 1;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.tp_s, 2 * 2 * 2 * (1e-5 + 1600e-6));
    dt_plan_model_free(&in.model);
}

/* Refusals: a layout the world cannot hold, more stages than blocks, a batch micro_batches do not divide. */
static void test_refusals(void)
{
    dt_plan_inputs in;
    small_model(&in, 2, 1000);
    in.world = 4;
    dt_layout l;
    dt_layout_default(&l);
    dt_plan_estimate e;
    l.tp = 3;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_ERR_INVALID);
    l.tp = 1;
    l.pp = 4;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "blocks");
    l.pp = 1;
    l.micro_batches = 3;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "micro_batches 3");
    dt_plan_model_free(&in.model);
}

/* Ranks sharing cores (docs/planner.md, "Ranks sharing cores"). */
static void test_shared_cores(void)
{
    dt_plan_inputs in;
    small_model(&in, 2, 1000);
    in.model.threads = 1;
    in.world = 2;
    in.links.ranks_per_node = 2;
    dt_layout l;
    dt_layout_default(&l);
    l.pp = 2;
    l.micro_batches = 2;
    dt_plan_estimate alone, e;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &alone), DT_OK); /* a core each */
    NEAR(alone.compute_s + alone.bubble_s, 1.5 * 2 * 2 * 3e-3); /* (m+p-1)/m x m b (F+B) */
    /* 2 ranks on 1 core: the one core is never idle (a stage waiting leaves it to the other), so the pipelined
     * part takes the two stages' work, 2 x m b (F + B) = 24 ms, not 2 x alone's 18 ms, the old ranks / cores
     * applied to every rank */
    in.cores_per_node = 1;
    for (int gpipe = 0; gpipe < 2; gpipe++) {
        l.schedule = gpipe ? DT_PIPE_GPIPE : DT_PIPE_1F1B;
        EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
        NEAR(e.compute_s + e.bubble_s + e.tp_s + e.recompute_s, 2 * 2 * 2 * 3e-3);
        EXPECT(e.compute_s + e.bubble_s < 2 * (alone.compute_s + alone.bubble_s) - 1e-3);
        EXPECT(e.bubble_s >= 0 && e.compute_s > alone.compute_s);
        NEAR(e.optimizer_s, 2 * alone.optimizer_s); /* every rank updates at once: ranks / cores */
    }
    /* 4 stages of 1 block, 4 micro-batches, 4 ranks on 2 cores: at least the work over the cores, less than
     * ranks / cores x the pipeline alone */
    dt_plan_model_free(&in.model);
    small_model(&in, 4, 1000);
    in.model.threads = 1;
    in.world = 4;
    in.links.ranks_per_node = 4;
    in.cores_per_node = 2;
    l.pp = 4;
    l.micro_batches = 4;
    l.schedule = DT_PIPE_1F1B;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    double work = 4 * 4 * 1 * 3e-3, pipelined = e.compute_s + e.bubble_s;
    EXPECT(pipelined >= work / 2 - 1e-12);
    EXPECT(pipelined < 2 * (7.0 / 4) * 4 * 3e-3 - 1e-3); /* 2 x (m+p-1)/m x m b (F+B) = 42 ms */
    /* without a pipeline every rank is always busy: ranks / cores exactly */
    dt_plan_model_free(&in.model);
    small_model(&in, 2, 1000);
    in.model.threads = 1;
    in.world = 4;
    in.links.ranks_per_node = 4;
    dt_layout_default(&l);
    EXPECT_STATUS(dt_plan_layout(&in, &l, &alone), DT_OK);
    in.cores_per_node = 2;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.compute_s, 2 * alone.compute_s);
    NEAR(e.bubble_s, 0);
    /* the measured contention and barriers, for this host's 4 ranks: compute x 1.1, a tp collective + 1 ms
     * (a group of 2: sync_s[0]); measured for other ranks, they do not count */
    in.model.shared_ranks = 4;
    in.model.contention = 1.1;
    in.model.sync_s[0] = 1e-3;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.compute_s, 2 * 1.1 * alone.compute_s);
    NEAR(e.optimizer_s, 2 * 1.1 * alone.optimizer_s);
    l.tp = 2;
    dt_plan_estimate tp_alone;
    in.cores_per_node = 0;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &tp_alone), DT_OK);
    in.cores_per_node = 2;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    /* the compute x 1.1 x 2, the collectives x 2 (the ranks take turns in them too), and per micro-batch 2 blocks
     * x 2 collectives x 2 passes, each 1 ms more: the barrier's wall time, measured among ranks taking turns */
    NEAR(e.compute_s + e.tp_s, 2 * (1.1 * tp_alone.compute_s + tp_alone.tp_s) + 2 * 2 * 2 * 1e-3);
    in.model.shared_ranks = 2;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.compute_s + e.tp_s, 2 * (tp_alone.compute_s + tp_alone.tp_s));
    dt_plan_model_free(&in.model);
}

/* The dp traffic's CPU across hosts (both ends' TCP work, 2 ns a byte): 4 namespace hosts of a 2-core machine,
 * DDP over 4 blocks of 1M parameters (16 MB of f32 gradients, 8 buckets of 2 MB, each ring allreduce 3.006 ms
 * at 1 GB/s: 24 ms on the wire, mostly under the 32 ms backward).  Each rank sends 2 x 3/4 x 16 MB = 24 MB:
 * 4 ranks x 24 MB x 2 ns / 2 cores = 96 ms of each core, of which the part that flows while the cores compute
 * (1 - exposed / wire) lengthens the step; with a core to spare, or on one host (shared memory), nothing. */
static void test_traffic_cpu(void)
{
    dt_plan_inputs in;
    small_model(&in, 4, 1000000);
    in.model.threads = 1;
    in.world = 4;
    in.cores_per_node = 2;
    in.links.ranks_per_node = 1;
    in.links.ranks_per_machine = 4;
    in.links.inter = (dt_plan_link){1e-6, 1e9};
    dt_layout l;
    dt_layout_default(&l);
    dt_plan_estimate own, e;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &own), DT_OK);
    double wire = 8 * (6e-6 + 2 * 0.75 * 2e6 * 1e-9), cpu = 4 * 24e6 * 2e-9 / 2;
    EXPECT(own.dp_s > 0 && own.dp_s < wire / 2);
    in.links.inter_cpu_s_per_byte = 2e-9;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.dp_s, own.dp_s + cpu * (1 - own.dp_s / wire));
    NEAR(e.step_s - e.dp_s, own.step_s - own.dp_s);
    in.cores_per_node = 8; /* cores to spare */
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.dp_s, own.dp_s);
    in.cores_per_node = 2;
    in.links.ranks_per_node = 4; /* one host */
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    in.links.inter_cpu_s_per_byte = 0;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &own), DT_OK);
    NEAR(e.dp_s, own.dp_s);
    dt_plan_model_free(&in.model);
}

/* ZeRO-1's transfers on a slow link, one at a time: 4 blocks of 1000 parameters on dp 2 across hosts, each
 * block's reduce-scatter and allgather 20 ms (2000 bytes each way at 100 kB/s), its backward 8 ms and forward
 * 4 ms (4 samples).  The reduce-scatters start as the blocks' backwards end (8, 16, 24, 32 ms) and end at
 * 8 + 4 x 20 = 88 ms: 56 ms after the backward (the sums alone said 80 - 32 = 48); the forwards wait for their
 * gathers, the last ends at 4 x 20 + 4 = 84 ms, 68 ms after its 16 ms of compute (the sums: 80 - 16 = 64). */
static void test_zero_streams(void)
{
    dt_plan_inputs in;
    small_model(&in, 4, 1000);
    in.world = 2;
    in.links.ranks_per_node = 1;
    in.links.inter = (dt_plan_link){1e-12, 1e5};
    dt_layout l;
    dt_layout_default(&l);
    l.zero_stage = 1;
    dt_plan_estimate e;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.dp_s, 56e-3 + 68e-3 - e.optimizer_s);
    /* ZeRO-3: the forward's gathers one block ahead (block k + 1's started as block k's forward begins: the
     * forwards start at 20, 40, 60, 80 ms and end at 84), the last block's gather again at 84, then in the
     * backward the block before's gather as each backward begins and each block's reduce-scatter as it ends,
     * in that order on the link: the backwards start at 104, 124, 164, 204 ms, the last reduce-scatter ends
     * at 244 ms, 196 ms after the 48 ms of compute */
    l.zero_stage = 3;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &e), DT_OK);
    NEAR(e.dp_s, 196e-3);
    dt_plan_model_free(&in.model);
}

/* Hosts that are network namespaces of one machine (links.ranks_per_machine): 4 hosts of 1 rank on 2 cores
 * take turns as 4 ranks of one host would, while their collectives stay inter-host; without it each has a
 * core of its own. */
static void test_machine_hosts(void)
{
    dt_plan_inputs in;
    small_model(&in, 4, 1000);
    in.model.threads = 1;
    in.world = 4;
    in.links.ranks_per_node = 1;
    in.cores_per_node = 2;
    dt_layout l;
    dt_layout_default(&l);
    dt_plan_estimate own, shared, host;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &own), DT_OK); /* 1 rank per host, 2 cores: a core each */
    in.links.ranks_per_machine = 4;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &shared), DT_OK);
    NEAR(shared.compute_s, 2 * own.compute_s); /* dp 4: always busy, 4 ranks / 2 cores */
    NEAR(shared.dp_s, own.dp_s);               /* the same inter-host allreduce */
    /* a pipeline over the 4 hosts: the same turns as 4 ranks of one host, across the slower link */
    l.pp = 4;
    l.micro_batches = 4;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &shared), DT_OK);
    in.links.ranks_per_machine = 0;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &own), DT_OK);
    in.links.ranks_per_node = 4;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &host), DT_OK);
    NEAR(shared.compute_s + shared.bubble_s, host.compute_s + host.bubble_s);
    EXPECT(shared.compute_s + shared.bubble_s > own.compute_s + own.bubble_s + 1e-3);
    EXPECT(shared.pp_s > host.pp_s);
    /* tp across the hosts: its collectives are waits on the link, not stretched by the turns on the cores
     * (measured: tp=4 on 4 namespace hosts of 2 cores 0.416 s/step, 0.416 predicted so, 0.674 stretched) */
    dt_layout_default(&l);
    l.tp = 2;
    in.links.ranks_per_node = 1;
    in.links.ranks_per_machine = 0;
    in.model.blocks[0].tp_splittable = in.model.blocks[1].tp_splittable = 1;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &own), DT_OK);
    in.links.ranks_per_machine = 4;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &shared), DT_OK);
    EXPECT(own.tp_s > 0);
    NEAR(shared.tp_s, own.tp_s);
    NEAR(shared.compute_s, 2 * own.compute_s);
    /* on one host the same collectives are shared-memory copies, work of the cores: stretched */
    in.links.ranks_per_node = 4;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &own), DT_OK);
    in.cores_per_node = 0;
    EXPECT_STATUS(dt_plan_layout(&in, &l, &host), DT_OK);
    NEAR(own.tp_s, 2 * host.tp_s);
    in.cores_per_node = 2;
    /* a links file can say so, and not less than a host's ranks */
    char path[] = "/tmp/dtrain-plan-links.XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    FILE *f = fdopen(fd, "w");
    fputs("{\"intra\": {\"latency_us\": 2, \"bandwidth_GBps\": 5}, \"inter\": {\"latency_us\": 20, "
          "\"bandwidth_GBps\": 0.1}, \"ranks_per_node\": 1, \"ranks_per_machine\": 4}", f);
    fclose(f);
    dt_plan_links links;
    EXPECT_STATUS(dt_plan_links_read(path, &links), DT_OK);
    EXPECT(links.ranks_per_node == 1 && links.ranks_per_machine == 4);
    f = fopen(path, "w");
    fputs("{\"intra\": {\"latency_us\": 2, \"bandwidth_GBps\": 5}, \"inter\": {\"latency_us\": 20, "
          "\"bandwidth_GBps\": 0.1}, \"ranks_per_node\": 2, \"ranks_per_machine\": 1}", f);
    fclose(f);
    EXPECT_STATUS(dt_plan_links_read(path, &links), DT_ERR_INVALID);
    EXPECT(strstr(dt_last_error(), "ranks_per_machine 1") != NULL);
    remove(path);
    dt_plan_model_free(&in.model);
}

/* The profile's sharing probe on a small model: 2 ranks at once, its figures present and sane (their values
 * are this machine's). */
static void test_sharing_probe(void)
{
    int64_t sizes[] = {64, 128, 64, 10};
    dt_model_desc *d = NULL;
    EXPECT_STATUS(dt_mlp_describe(sizes, 4, &d), DT_OK);
    dt_plan_model m = {0};
    int threads = dt_get_threads();
    dt_set_threads(1); /* 2 copies of 1 thread: groups of 2 measured, none of 4 */
    EXPECT_STATUS(dt_plan_profile_model(d, &(dt_plan_profile_opts){4, 2, "sgd", 2}, &m), DT_OK);
    EXPECT_EQ(dt_get_threads(), 1);
    EXPECT_EQ(m.shared_ranks, 2);
    EXPECT(m.contention >= 1 && m.contention < 100);
    EXPECT(m.sync_s[0] >= 0 && m.sync_s[0] < 1 && m.sync_s[1] == 0);
    dt_plan_model_free(&m);
    EXPECT_STATUS(dt_plan_profile_model(d, &(dt_plan_profile_opts){4, 2, "sgd", 1}, &m), DT_OK);
    EXPECT(m.shared_ranks == 0 && m.contention == 0);
    dt_plan_model_free(&m);
    dt_set_threads(threads);
    dt_model_desc_destroy(d);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        hardware = argv[1];
    test_one_rank();
    test_dp2();
    test_pp2_bubble();
    test_pp_slow_link();
    test_zero3_memory();
    test_tp2();
    test_tp_copies();
    test_shared_cores();
    test_machine_hosts();
    test_zero_streams();
    test_traffic_cpu();
    test_sharing_probe();
    test_refusals();
    test_search_small();
    test_json();
    test_projection_175b();
    test_search_10000();
    return CHECK_DONE("test_plan");
}
