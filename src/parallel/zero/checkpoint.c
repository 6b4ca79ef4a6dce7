/* ZeRO checkpoints in shard files: each rank of the dp group writes its
 * shard of the optimizer state (and at stage 3 of the values) into the step
 * directory, rank 0 the whole weights (model.safetensors, with PyTorch's
 * names: stages 1 and 2 hold them whole on every rank; at stage 3 rank 0
 * writes the file block by block as each unit is gathered, never holding
 * the whole values) and the manifest, whose "sharding" describes the cut
 * (include/dtrain/ckpt.h).  No rank ever holds more of the optimizer state
 * than its own shard.  A resume on N' ranks at any stage reads from each
 * file only what overlaps its new shard; a resume without ZeRO (one
 * process, data parallelism, a mesh) puts the whole state together
 * (dt_ckpt_load). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "parallel/common/strategy.h"

/* The shard files' tensors: the values (stage 3), then the optimizer's
 * state buffers as the moments, in the order dt_optimizer_state_buffers
 * gives them (AdamW's exp_avg, exp_avg_sq; SGD's momentum_buffer). */
static const char *const moment_names[2] = {"optim_m", "optim_v"};

/* m's ZeRO units as the manifest records them (caller frees); *n: how many
 * (0: none, -1: out of memory). */
static dt_ckpt_unit *units_of(dt_model *m, int *n)
{
    *n = dt_zero_units(m, NULL, NULL, 0);
    if (*n <= 0)
        return NULL;
    int64_t *off = malloc((size_t)*n * sizeof *off), *numel = malloc((size_t)*n * sizeof *numel);
    dt_ckpt_unit *units = malloc((size_t)*n * sizeof *units);
    if (off && numel && units) {
        dt_zero_units(m, off, numel, *n);
        for (int k = 0; k < *n; k++)
            units[k] = (dt_ckpt_unit){off[k], numel[k]};
    } else {
        free(units);
        units = NULL;
        *n = -1;
    }
    free(off);
    free(numel);
    return units;
}

/* m's sharding over nranks: *units (caller frees) and the tensor names; 0
 * tensors when there is nothing to shard (stages 1-2 with plain SGD). */
static dt_status sharding_of(dt_model *m, int stage, int nranks, int nstate, dt_ckpt_sharding *sh,
                             dt_ckpt_unit **units, const char **names)
{
    int n;
    *units = units_of(m, &n);
    if (n <= 0 || nstate > 2)
        return dt__fail(DT_ERR_INVALID, "checkpoint: %s",
                        nstate > 2 ? "the optimizer keeps more than two state buffers"
                        : n < 0    ? "out of memory"
                                   : "the model has no parameters to shard");
    int nt = 0;
    if (stage == 3)
        names[nt++] = "values";
    for (int i = 0; i < nstate; i++)
        names[nt++] = moment_names[i];
    *sh = (dt_ckpt_sharding){stage, nranks, *units, n, names, nt};
    return DT_OK;
}

/* A shard file's tensors as dt_ckpt_shard_write_from reads them, piece by
 * piece: the values' shard (stage 3) from the strategy, the moments from
 * the optimizer; either may be on disk (offload), and stays there. */
typedef struct {
    dt_strategy *s;
    dt_optimizer *o;
    bool values; /* tensor 0 is the values */
} shard_source;

static dt_status read_piece(void *user, int tensor, int64_t offset, int64_t n, float *out)
{
    const shard_source *src = user;
    if (src->values && tensor == 0)
        return dt_strategy_zero_shard_read(src->s, offset, n, out);
    return dt_optimizer_state_read(src->o, tensor - src->values, offset, n, out);
}

/* Stage 3's model.safetensors, written on dp rank 0 unit by unit as ZeRO-3
 * gathers a block: each rank reads its slice of the unit (`mine`, the
 * largest slice) and rank 0 gathers the unit into `buf` (the largest unit)
 * and puts it into the file at its place, so no rank ever holds the whole
 * values, nor (offloaded) its whole shard.  Collective over dp: every rank
 * joins every gather, also after rank 0 failed to write (DT_OK then, and
 * *written false on rank 0 with the reason in dt_last_error). */
static dt_status write_values(const dt_ckpt_sharding *sh, dt_strategy *s, float *mine, float *buf, dt_comm *dp,
                              dt_ckpt_writer *w, int64_t step, bool *written)
{
    int N = sh->nranks, rank = dt_comm_rank(dp), root = rank == 0;
    dt_ckpt_model_file *f = NULL;
    dt_status fs = root ? dt_ckpt_writer_model_open(w, step, &f) : DT_OK, r = DT_OK;
    char why[512] = "";
    if (fs != DT_OK)
        snprintf(why, sizeof why, "%s", dt_last_error());
    int64_t at = 0;
    for (int k = 0; r == DT_OK && k < sh->nunits; k++) {
        const dt_ckpt_unit *u = &sh->units[k];
        int64_t slice = (u->numel + N - 1) / N;
        if ((r = dt_strategy_zero_shard_read(s, at, slice, mine)) == DT_OK)
            r = dt_gather(mine, root ? buf : mine, (size_t)slice, DT_F32, 0, dp);
        if (r != DT_OK) /* a collective or the shard's file failed: the job cannot go on */
            return dt__fail(r, "rank %d: checkpoint at step %lld: gathering the values: %s", rank, (long long)step,
                            dt_last_error());
        if (root && fs == DT_OK && (fs = dt_ckpt_model_put(f, u->offset, buf, u->numel)) != DT_OK)
            snprintf(why, sizeof why, "%s", dt_last_error());
        at += slice;
    }
    if (root) {
        dt_status cs = dt_ckpt_model_close(f, fs == DT_OK);
        if (fs == DT_OK && cs != DT_OK)
            snprintf(why, sizeof why, "%s", dt_last_error());
        *written = fs == DT_OK && cs == DT_OK;
        if (!*written)
            dt__fail(DT_ERR_SYSTEM, "checkpoint at step %lld: model.safetensors: %s", (long long)step, why);
    }
    return DT_OK;
}

/* Add text to a checkpoint's failure reasons, "; " between them. */
static void note(char *why, size_t len, const char *text)
{
    size_t at = strlen(why);
    snprintf(why + at, len - at, "%s%s", at ? "; " : "", text);
}

/* ZeRO's checkpoint in shard files (dt_strategy_save).  Collective over dp:
 * every rank writes its shard of the optimizer state (and at stage 3 of the
 * values) into the step's temporary directory, rank 0 submits the rest to
 * the writer.  A rank that cannot write its file drops this checkpoint
 * (*dropped, on it and on rank 0, which names it); DT_OK unless a
 * collective failed. */
dt_status dt__zero_save(dt_strategy *s, const dt__save_args *a)
{
    dt_comm *dp = s->run->dp;
    dt_model *m = s->model;
    dt_optimizer *o = s->opt;
    const dt_ckpt_progress *pr = a->pr;
    int N = dt_comm_size(dp), rank = dt_comm_rank(dp), stage = s->run->layout.zero_stage;
    /* stages 1, 2 on a device: the host's copy of the values (stage 3 reads
     * its shard piece by piece through the device's download) */
    if (!dt_device_is_host(dt_model_device(m)) && a->w && stage < 3) {
        dt_status d = dt_strategy_sync(s);
        if (d == DT_OK)
            d = dt_params_download(dt_model_params(m));
        if (d != DT_OK)
            return dt__fail(d, "checkpoint at step %lld: %s", (long long)pr->step, dt_last_error());
    }
    int nstate = dt_optimizer_state_count(o); /* read piece by piece below: an offloaded state stays on disk */
    const char *names[3];
    dt_ckpt_sharding sh;
    dt_ckpt_unit *units = NULL;
    dt_status r = sharding_of(m, stage, N, nstate, &sh, &units, names);
    int64_t S = r == DT_OK ? dt_ckpt_shard_numel(&sh) : -1;
    bool fits = r == DT_OK && S == dt_zero_shard_numel(m, N) && (nstate == 0 || dt_optimizer_numel(o) == S) &&
                (stage != 3 || dt_strategy_zero_shard_read(s, S, 0, NULL) == DT_OK);
    if (r == DT_OK && !fits) /* the strategy's and the optimizer's buffers are not the layout's shard */
        r = dt__fail(DT_ERR_INVALID, "checkpoint: a ZeRO shard of %lld elements, but the strategy's or the "
                     "optimizer's buffers differ", (long long)S);
    if (r != DT_OK) {
        free(units);
        return r;
    }
    if (sh.ntensors == 0) { /* plain SGD at stages 1-2: only the whole values, unsplit */
        if (a->w)
            dt_ckpt_writer_submit(a->w, pr, a->label, a->stall);
        free(units);
        return DT_OK;
    }
    /* rank 0 empties the temporary step directory, then every rank writes its file there (at stage 3 with
     * model.safetensors gathered a unit at a time onto rank 0 first: each rank holds a buffer for its slice
     * of the largest unit, rank 0 for that unit) */
    int ready = 1;
    char why[1536] = "";
    int64_t most = 1;
    for (int k = 0; k < sh.nunits; k++)
        most = (sh.units[k].numel + N - 1) / N > most ? (sh.units[k].numel + N - 1) / N : most;
    float *mine = stage == 3 ? malloc((size_t)most * sizeof *mine) : NULL;
    float *buf = stage == 3 && rank == 0 ? malloc((size_t)(most * N) * sizeof *buf) : NULL;
    if (rank == 0 && dt_ckpt_shard_prepare(a->dir, pr->step) != DT_OK) {
        snprintf(why, sizeof why, "checkpoint at step %lld failed: %s", (long long)pr->step, dt_last_error());
        ready = 0;
    } else if (rank == 0 && stage == 3 && !buf) {
        snprintf(why, sizeof why, "checkpoint at step %lld failed: out of memory for a block's values",
                 (long long)pr->step);
        dt_ckpt_shard_abandon(a->dir, pr->step);
        ready = 0;
    }
    if ((r = dt_broadcast(&ready, 1, DT_I32, 0, dp)) != DT_OK)
        r = dt__fail(r, "rank %d: checkpoint at step %lld: %s", rank, (long long)pr->step, dt_last_error());
    if (r == DT_OK && ready && stage == 3 && !mine) /* every rank holds a slice buffer, or none gathers */
        r = dt__fail(DT_ERR_NOMEM, "rank %d: checkpoint at step %lld: out of memory for a block's values", rank,
                     (long long)pr->step);
    dt_ckpt_shard_file mine_file = {0};
    int64_t got[3] = {0, 0, 0}, *all = rank == 0 ? calloc((size_t)N * 3, sizeof *all) : NULL;
    bool model_ok = true;
    if (r == DT_OK && ready && stage == 3 && /* model.safetensors, block by block */
        (r = write_values(&sh, s, mine, buf, dp, a->w, pr->step, &model_ok)) == DT_OK && !model_ok)
        note(why, sizeof why, dt_last_error());
    free(mine);
    free(buf);
    if (r == DT_OK && ready) {
        shard_source src = {s, o, stage == 3};
        got[0] = dt_ckpt_shard_write_from(a->dir, pr->step, &sh, rank, read_piece, &src, &mine_file) == DT_OK;
        if (!got[0]) /* the message names the rank */
            note(why, sizeof why, dt_last_error());
        got[0] &= model_ok;
        got[1] = (int64_t)mine_file.bytes;
        got[2] = (int64_t)mine_file.crc;
    }
    if (r == DT_OK && rank == 0 && !all)
        snprintf(why, sizeof why, "checkpoint at step %lld: out of memory", (long long)pr->step);
    /* what each rank wrote, to rank 0 for the manifest (every rank joins, also when rank 0 could not prepare) */
    if (r == DT_OK && (r = dt_gather(got, all ? all : got, 3, DT_I64, 0, dp)) != DT_OK)
        r = dt__fail(r, "rank %d: checkpoint at step %lld: %s", rank, (long long)pr->step, dt_last_error());
    if (r == DT_OK && rank == 0 && ready) {
        dt_ckpt_shard_file *files = all ? calloc((size_t)N, sizeof *files) : NULL;
        int bad = files ? -1 : 0, nbad = 0;
        for (int q = 0; files && q < N; q++) {
            if (!all[3 * q] && nbad++ == 0)
                bad = q;
            dt_ckpt_shard_name(q, N, files[q].name, sizeof files[q].name);
            files[q].bytes = (uint64_t)all[3 * q + 1];
            files[q].crc = (uint32_t)all[3 * q + 2];
        }
        if (bad >= 0) {
            char all_why[512];
            snprintf(all_why, sizeof all_why, "checkpoint at step %lld failed: rank %d%s could not write its shard (%s); "
                     "training continues with the previous checkpoints", (long long)pr->step, bad,
                     nbad > 1 ? " and others" : "", bad == 0 ? "above" : "in its output");
            note(why, sizeof why, all_why);
            dt_ckpt_shard_abandon(a->dir, pr->step);
        } else if (a->w)
            dt_ckpt_writer_submit_sharded(a->w, pr, a->label, &sh, files, a->stall);
        free(files);
    }
    free(all);
    free(units);
    if (r == DT_OK && why[0]) { /* this checkpoint is lost; the run goes on */
        *a->dropped = true;
        dt__fail(DT_ERR_SYSTEM, "%s", why);
    }
    return r;
}

dt_status dt__zero_load(const char *step_dir, dt_model *m, dt_optimizer *o, int nranks, int rank)
{
    int files = 0, stage = 0, ntensors = 0;
    dt_optim_state st[4];
    int nstate = dt_optimizer_state_buffers(o, st, 4);
    DT_CHECK(dt_ckpt_shards(step_dir, &files, &stage, &ntensors));
    DT_CHECK(dt_ckpt_load(step_dir, dt_model_params(m), NULL)); /* the whole values */
    if (ntensors - (stage == 3) != nstate || nstate > 2)
        return dt__fail(DT_ERR_INVALID, "%s: the checkpoint's shards hold %d optimizer state tensors, this optimizer "
                        "keeps %d", step_dir, ntensors - (stage == 3), nstate);
    for (int i = 0; i < nstate; i++)
        if (dt_ckpt_load_shard(step_dir, moment_names[i], nranks, rank, st[i].data, st[i].numel) != DT_OK)
            return dt__fail(DT_ERR_INVALID, "ZeRO resume: %s", dt_last_error());
    return DT_OK;
}

dt_status dt_zero_check_sharding(const dt_ckpt_manifest *man, dt_model *m)
{
    int n;
    dt_ckpt_unit *units = units_of(m, &n); /* none (n 0) passes an unsharded checkpoint only */
    dt_status s = n < 0 ? dt__fail(DT_ERR_NOMEM, "out of memory") : dt_ckpt_manifest_check_sharding(man, units, n, NULL);
    free(units);
    return s;
}
