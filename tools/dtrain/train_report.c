/* The training command's messages: the lead's start lines (what is
 * trained, how it is split, the kernels) and its end lines (traffic, memory,
 * offload, activations).  What they report comes from the strategy; here is
 * only how it reads. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_run.h"

/* The pipeline's stages as the partition cut them, with each one's share of
 * the cost hints. */
static void describe_stages(const dtrain_config *c, const dt_layout *l)
{
    dt_model_desc *d = NULL;
    int parts = l->pp * dt_layout_chunks(l), bounds[4096 + 1];
    if (parts > 4096 || dtrain_describe_model(c, NULL, &d) != DT_OK || dt_pipeline_partition(d, parts, bounds) != DT_OK) {
        dt_model_desc_destroy(d);
        return;
    }
    double total = 0, cost[4096];
    for (int k = 0; k < parts; k++) {
        cost[k] = 0;
        for (int b = bounds[k]; b < bounds[k + 1]; b++) {
            const dt_block_info *bi = dt_model_desc_block(d, b);
            cost[k] += bi->flops > 0 ? bi->flops : (double)bi->params;
        }
        total += cost[k];
    }
    char line[1024];
    int n = snprintf(line, sizeof line, "pipeline: %d stages%s, %s schedule, %lld micro-batches of %lld per step; "
                     "blocks by cost hints (forward FLOPs):", l->pp, parts > l->pp ? " x virtual stages" : "",
                     c->pipeline_schedule, (long long)(c->micro_batches * c->grad_accumulation),
                     (long long)(c->batch_size / c->micro_batches));
    for (int k = 0; k < parts && n > 0 && (size_t)n < sizeof line; k++)
        n += snprintf(line + n, sizeof line - (size_t)n, " %s%d [%d, %d) %.0f%%", parts > l->pp ? "v" : "", k,
                      bounds[k], bounds[k + 1], 100 * cost[k] / total);
    dtrain_progress_line("%s\n", line);
    dt_model_desc_destroy(d);
}

/* ", each batch cut into ...", ", ZeRO stage ...", ", parameter server ...", ", mesh ..." */
static void describe_shape(const train_run *t, char *shape, size_t len)
{
    const dtrain_config *c = t->c;
    const dt_layout *l = dt_strategy_layout(t->s);
    dt_model *m = dt_strategy_model(t->s);
    int n = 0;
    shape[0] = 0;
    if (c->micro_batches > 1)
        n = snprintf(shape, len, ", each batch cut into %lld micro-batches of %lld", (long long)c->micro_batches,
                     (long long)(c->batch_size / c->micro_batches));
    if (l->zero_stage > 0 && n >= 0 && (size_t)n < len)
        n += snprintf(shape + n, len - (size_t)n, ", ZeRO stage %d (%lld of the parameters' optimizer state%s on each "
                      "rank)", l->zero_stage, (long long)dt_zero_shard_numel(m, t->dpn),
                      l->zero_stage == 1 ? "" : l->zero_stage == 2 ? " and gradients" : ", gradients and values");
    if (l->servers > 0 && n >= 0 && (size_t)n < len)
        n += snprintf(shape + n, len - (size_t)n, ", parameter server: %d server%s, sync %s", l->servers,
                      l->servers == 1 ? "" : "s", c->sync);
    if (l->servers > 0 && l->sync == DT_PS_SSP && n >= 0 && (size_t)n < len)
        n += snprintf(shape + n, len - (size_t)n, " (staleness %d)", l->staleness);
    dt_mesh *mesh = dt_strategy_mesh(t->s);
    if (mesh && n >= 0 && (size_t)n < len) {
        char m_desc[96];
        snprintf(shape + n, len - (size_t)n, ", mesh %s (%lld parameters on %s)",
                 dt_mesh_describe(mesh, 0, m_desc, sizeof m_desc), (long long)dt_params_numel(dt_model_params(m)),
                 l->pp > 1 ? "rank 0, stage 0" : "each rank");
    }
}

void train_report_start(const train_run *t, int64_t nparams)
{
    const dtrain_config *c = t->c;
    if (dt_strategy_layout(t->s)->pp > 1)
        describe_stages(c, dt_strategy_layout(t->s));
    int nt = dt_get_threads(), dpn = t->dpn;
    int64_t k = c->grad_accumulation;
    char shape[256];
    describe_shape(t, shape, sizeof shape);
    dtrain_progress_line("training %s (%lld parameters) on %s: %lld steps, batch %lld x %d rank%s x %lld "
                         "accumulation step%s = %lld, %d thread%s per rank (from %s)%s%s%s\n",
                         c->model, (long long)nparams, c->data, (long long)c->steps, (long long)c->batch_size, dpn,
                         dpn > 1 ? "s" : "", (long long)k, k > 1 ? "s" : "", (long long)(c->batch_size * dpn * k), nt,
                         nt == 1 ? "" : "s", t->thread_source, shape,
                         strcmp(c->grad_compression, "none") ? ", gradients as " : "",
                         strcmp(c->grad_compression, "none") ? c->grad_compression : "");
    /* one line a benchmark can read back (bench/train/run.sh): the kernels OpenBLAS runs */
    const char *blas_core, *blas_config, *coretype = getenv("OPENBLAS_CORETYPE");
    int blas_threads;
    dt_blas_describe(&blas_core, &blas_threads, &blas_config);
    dtrain_progress_line("blas: core %s, OpenBLAS threads %d, OPENBLAS_CORETYPE %s, config %s; conv: %s\n",
                         blas_core ? blas_core : "?", blas_threads, coretype && *coretype ? coretype : "-",
                         blas_config ? blas_config : "?", dt_conv2d_backend());
    if (!strcmp(c->precision, "bf16") && !strcmp(c->device, "cpu")) { /* a device's start line says its own */
        const char *kern = dt_bf16_gemm_kernel();
        if (!strcmp(kern, "emulated"))
            dtrain_progress_line("precision: bf16 emulated: this CPU has neither AMX nor AVX512_BF16 (or the "
                                 "kernel refused them), so the matrix products round their operands to bf16 "
                                 "and run at f32 speed; weights, gradients and optimizer state stay f32\n");
        else /* kern: the kernel (DT_BF16_GEMM=onednn: "onednn") */
            dtrain_progress_line("precision: bf16 matrix products on %s (f32 sums); weights, gradients and "
                                 "optimizer state f32; bf16 gemm: %s\n",
                                 strstr(kern, "amx")           ? "AMX tiles"
                                 : strstr(kern, "avx512_bf16") ? "AVX512_BF16"
                                                               : "oneDNN",
                                 kern);
    }
}

void train_report_end(const train_run *t)
{
    const dtrain_config *c = t->c;
    const dt_layout *l = dt_strategy_layout(t->s);
    int64_t ran = t->pr.step - t->first_step;
    dt_strategy_io io;
    dt_strategy_io_bytes(t->s, &io);
    if (l->servers > 0 && ran > 0)
        printf("parameter server: rank 0 sent %.2f MB and received %.2f MB per step\n",
               (double)io.sent / 1e6 / (double)ran, (double)io.received / 1e6 / (double)ran);
    if (t->writer) /* the peak below counts the final checkpoint's write: it is on disk first */
        (void)dt_ckpt_writer_flush(t->writer); /* (a failure is reported by dt_ckpt_writer_last_good) */
    dtrain_memory_report(dt_strategy_model(t->s), dt_strategy_optimizer(t->s), t->s, t->writer, data_bytes(&t->d),
                         t->act_peak);
    dtrain_device_end_line(c);
    uint64_t rd, wr;
    dt_optimizer_offload_io(dt_strategy_optimizer(t->s), &rd, &wr);
    if (l->offload == DT_OFFLOAD_DISK && ran > 0)
        printf("offload: the optimizer state%s on disk (%s): %.1f MiB read and %.1f MiB written per step\n",
               l->zero_stage == 3 ? " and the parameter shard" : "", c->offload_dir[0] ? c->offload_dir : "/var/tmp",
               (double)(rd + io.disk_read) / 1048576.0 / (double)ran, (double)(wr + io.disk_written) / 1048576.0 / (double)ran);
    if (t->predicted_step_s > 0 && t->steady_steps > 0) {
        double measured = t->steady_s / (double)t->steady_steps;
        printf("layout auto: measured %.4f s/step (mean of %lld steps after the first two), predicted %.4f: "
               "measured / predicted %.2f\n", measured, (long long)t->steady_steps, t->predicted_step_s,
               measured / t->predicted_step_s);
    }
    if (t->act_peak && l->pp > 1)
        printf("activation memory: at most %.1f MiB held at once, %d micro-batch%s in flight (stage 0, %s schedule, "
               "recompute %s)\n", (double)t->act_peak / 1048576.0, t->flight_peak, t->flight_peak == 1 ? "" : "es",
               c->pipeline_schedule, c->recompute);
    else if (t->act_peak)
        printf("activation memory: at most %.1f MiB per micro-batch (recompute %s)\n", (double)t->act_peak / 1048576.0,
               c->recompute);
}
