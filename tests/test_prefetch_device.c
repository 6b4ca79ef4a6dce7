/* The prefetcher on a device (issue 45: "batches copied in by the prefetch
 * thread on their own stream"), on the emu device, whose memory the host
 * cannot touch and whose uploads are counted per thread:
 *  - each batch arrives with x_dev and y_dev in emu memory holding the host
 *    batch's bytes, in the sampler's order across epochs (a short last
 *    batch included), and the consumer thread ran no upload for them;
 *  - a single-strategy step fed those batches runs no upload on its thread
 *    (no host-to-device copy inside the step), and trains to the same bits
 *    as steps fed the host batches only (which copy them in themselves);
 *  - dt_prefetch_start_on the cpu (or NULL) hands out host batches only;
 *  - the emu allocator's high-water mark (dt_device_memory's peak). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/devmem.h"
#include "check.h"
#include "dtrain/data.h"
#include "dtrain/nn.h"
#include "dtrain/optim.h"
#include "dtrain/parallel.h"
#include "tensor/backend.h"

enum { B = 3, T = 8, VOCAB = 13 };

/* Sample i: token ids and targets from i alone, so any order check sees it. */
static void fill_tokens(void *user, const int64_t *idx, int64_t n, float *x, int32_t *y)
{
    (void)user;
    for (int64_t i = 0; i < n; i++)
        for (int t = 0; t < T; t++) {
            x[i * T + t] = (float)((idx[i] * 7 + t) % VOCAB);
            y[i * T + t] = (int32_t)((idx[i] * 5 + t + 1) % VOCAB);
        }
}

static void test_batches_on_emu(const dt_device *emu)
{
    dt_sampler a, b;
    EXPECT_STATUS(dt_sampler_init(&a, 10, 4, 0, 1, true, false), DT_OK);
    EXPECT_STATUS(dt_sampler_init(&b, 10, 4, 0, 1, true, false), DT_OK);
    dt_prefetcher *p;
    EXPECT_STATUS(dt_prefetch_start_on(emu, &a, 4, T, T, fill_tokens, NULL, &p), DT_OK);
    int64_t uploads = dt__emu_uploads_on_this_thread();
    float xd[4 * T], xh[4 * T];
    int32_t yd[4 * T], yh[4 * T];
    for (int k = 0; k < 7; k++) { /* 10 samples in batches of 4: 4, 4, 2, then the next epoch */
        const dt_batch *got = dt_prefetch_next(p);
        EXPECT(got != NULL);
        if (!got)
            break;
        int64_t want[4];
        int64_t n = dt_sampler_next(&b, 4, want);
        if (n == 0)
            n = dt_sampler_next(&b, 4, want);
        EXPECT_EQ(got->n, n);
        EXPECT(got->epoch == b.epoch && got->position == b.position);
        fill_tokens(NULL, want, n, xh, yh);
        EXPECT(memcmp(got->x, xh, (size_t)(n * T) * sizeof *xh) == 0);
        EXPECT(got->x_dev && got->y_dev && dt__devmem_of(got->x_dev) && dt__devmem_of(got->y_dev));
        EXPECT_STATUS(dt_device_download(emu, xd, got->x_dev, (size_t)(n * T) * sizeof *xd), DT_OK);
        EXPECT_STATUS(dt_device_download(emu, yd, got->y_dev, (size_t)(n * T) * sizeof *yd), DT_OK);
        EXPECT(memcmp(xd, xh, (size_t)(n * T) * sizeof *xd) == 0);
        EXPECT(memcmp(yd, yh, (size_t)(n * T) * sizeof *yd) == 0);
    }
    EXPECT_EQ(dt__emu_uploads_on_this_thread() - uploads, 0); /* every upload ran on the prefetch thread */
    dt_prefetch_stop(p);

    /* the cpu: host batches only, as dt_prefetch_start */
    EXPECT_STATUS(dt_prefetch_start_on(&dt__cpu_ops, &a, 4, T, T, fill_tokens, NULL, &p), DT_OK);
    const dt_batch *got = dt_prefetch_next(p);
    EXPECT(got && got->x && !got->x_dev && !got->y_dev);
    dt_prefetch_stop(p);
    dt_sampler_free(&a);
    dt_sampler_free(&b);
}

/* The trainer's batch source: the prefetcher's batch, with its device copies or not. */
typedef struct {
    dt_prefetcher *pf;
    bool use_dev;
    int64_t step_uploads; /* the uploads the consumer thread ran inside the steps */
} feeder;

static dt_status feed(void *user, dt_micro_batch *mb)
{
    feeder *f = user;
    const dt_batch *b = dt_prefetch_next(f->pf);
    if (!b)
        return DT_ERR_SYSTEM;
    mb->x = dt_tensor_view(b->x, 2, (int64_t[]){b->n, T});
    mb->targets = b->y;
    mb->ntargets = b->n * T;
    mb->x_dev = f->use_dev ? b->x_dev : NULL;
    mb->targets_dev = f->use_dev ? b->y_dev : NULL;
    return DT_OK;
}

/* Four steps of two micro-batches of a tiny GPT on emu; the final weights. */
static float *train(const dt_device *emu, bool use_dev, int64_t *step_uploads)
{
    static const dt_gpt_config tiny = {.vocab = VOCAB, .context = T, .layers = 2, .heads = 2, .dim = 16,
                                       .dropout = 0.1f};
    dt_model *m;
    EXPECT_STATUS(dt_gpt_create(&tiny, &m), DT_OK);
    dt_model_init(m, 8);
    dt_params *params = dt_model_params(m);
    int64_t n = dt_params_numel(params);
    dt_optimizer *o;
    EXPECT_STATUS(dt_adamw_create(&(dt_adamw_config){0.9f, 0.95f, 1e-8f, 0.1f}, n, &o), DT_OK);
    EXPECT_STATUS(dt_model_to_device(m, emu), DT_OK);
    EXPECT_STATUS(dt_optimizer_set_device(o, emu), DT_OK);
    dt_strategy *s = NULL;
    EXPECT_STATUS(dt_strategy_single_create(m, o, &(dt_strategy_config){.micro_batches = 2, .grad_clip = 1.0f,
                                                                         .seed = 3}, &s), DT_OK);
    dt_sampler smp;
    EXPECT_STATUS(dt_sampler_init(&smp, 50, 9, 0, 1, true, false), DT_OK);
    feeder f = {.use_dev = use_dev};
    EXPECT_STATUS(dt_prefetch_start_on(emu, &smp, B, T, T, fill_tokens, NULL, &f.pf), DT_OK);
    *step_uploads = 0;
    for (int step = 0; s && f.pf && step < 4; step++) {
        dt_step_stats st;
        int64_t before = dt__emu_uploads_on_this_thread();
        EXPECT_STATUS(dt_strategy_step(s, step, 1e-2f, feed, &f, &st), DT_OK);
        *step_uploads += dt__emu_uploads_on_this_thread() - before;
        EXPECT(st.loss > 0);
    }
    dt_prefetch_stop(f.pf);
    dt_sampler_free(&smp);
    float *w = malloc((size_t)n * sizeof *w);
    EXPECT_STATUS(dt_params_download(params), DT_OK);
    memcpy(w, dt_params_values(params), (size_t)n * sizeof *w);
    dt_strategy_destroy(s);
    dt_optimizer_destroy(o);
    dt_model_destroy(m);
    return w;
}

static void test_step_copies_nothing(const dt_device *emu)
{
    int64_t with = -1, without = -1;
    float *a = train(emu, true, &with), *b = train(emu, false, &without);
    EXPECT_EQ(with, 0);      /* the step found its batches in device memory */
    EXPECT(without > 0);     /* the counter does see a step's own copies */
    dt_model *m;
    dt_gpt_create(&(dt_gpt_config){.vocab = VOCAB, .context = T, .layers = 2, .heads = 2, .dim = 16}, &m);
    int64_t n = dt_params_numel(dt_model_params(m));
    dt_model_destroy(m);
    EXPECT(memcmp(a, b, (size_t)n * sizeof *a) == 0);
    free(a);
    free(b);
}

/* The allocator's high-water mark (mem_peak, dt_device_memory): the most
 * bytes held at once, through many allocations freed out of order (the
 * pointer table's deletions).  Run first: nothing else is held yet. */
static void test_mem_peak(const dt_device *emu)
{
    size_t total = 0, free_b = 0, peak = 1;
    EXPECT_STATUS(dt_device_memory(emu, &total, &free_b, &peak), DT_OK);
    EXPECT(peak == 0 && total > 0 && free_b <= total);
    enum { N = 1000 };
    void **p = malloc(N * sizeof *p);
    for (int i = 0; i < N; i++)
        p[i] = emu->alloc(1000);
    for (int i = 0; i < N; i += 2) /* every other one, then the rest backwards */
        emu->free(p[i]);
    for (int i = N - 1; i > 0; i -= 2)
        emu->free(p[i]);
    EXPECT_STATUS(dt_device_memory(emu, &total, &free_b, &peak), DT_OK);
    EXPECT_EQ(peak, N * 1000);
    void *a = emu->alloc(600000), *b = emu->alloc(500000);
    EXPECT_STATUS(dt_device_memory(emu, &total, &free_b, &peak), DT_OK);
    EXPECT_EQ(peak, 1100000); /* only what is held counts: the thousand were freed */
    emu->free(a);
    void *c = emu->alloc(400000);
    EXPECT_STATUS(dt_device_memory(emu, &total, &free_b, &peak), DT_OK);
    EXPECT_EQ(peak, 1100000);
    emu->free(b);
    emu->free(c);
    free(p);
    EXPECT_STATUS(dt_device_memory(&dt__cpu_ops, &total, &free_b, &peak), DT_OK);
    EXPECT(peak == 0 && total > 0); /* the cpu does not count */
}

int main(void)
{
    const dt_device *emu = NULL;
    if (dt_device_open("emu", &emu) != DT_OK) {
        printf("%s\n", dt_last_error()); /* no emu on this architecture: a skip */
        return 77;
    }
    test_mem_peak(emu);
    test_batches_on_emu(emu);
    test_step_copies_nothing(emu);
    return CHECK_DONE("test_prefetch_device");
}
