/* The background checkpoint writer: the training thread copies the state at
 * a step boundary (a memcpy, milliseconds) and goes on; this thread writes
 * the copy, prunes old checkpoints and reports.  With defer_copy the copy
 * is this thread's too, in pieces, while the next step computes; the
 * optimizer's next update (its guard) takes the pieces left, if any, before
 * it changes the state.  Armed (dt_ckpt_writer_arm), the update before the
 * submit copies each piece it writes whole as it writes it (the tee), so
 * the state is read from memory once, by the update, and the copy after
 * the submit is only the pieces the update cut.  (Not a copier at the
 * lowest priority, which would take only idle CPU: a stopping rank's exit
 * then waited for its thread, which the kernel tears the address space
 * down on, for 1.5 s behind a busy core, and an update for a piece it
 * held.)  One write is in flight at a time: a submit while the previous
 * one still writes waits for it.  On tmpfs (memory snapshots) the copy goes
 * straight into the next snapshot's mapped files (dt__ckpt_staging), which
 * this thread then seals and moves into place: one copy of the state, not
 * two. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "base/trace.h"
#include "ckpt/ckpt_internal.h"

struct dt_ckpt_writer {
    char root[DT_CKPT_PATH_MAX];
    int keep;
    char *config, *model, *optimizer; /* copies of the caller's meta */
    void (*report)(void *user, const dt_ckpt_report *r);
    void *user;
    dt_params *p;
    dt_optimizer *o;
    bool stream_model;     /* the caller writes model.safetensors: no values in the snapshot */
    bool shards_elsewhere; /* other ranks' shard files may be on other hosts (set before any submit) */
    float *values, *m, *v; /* the snapshot: the heap's or the staging's */
    float *heap[3];        /* the heap's, allocated when first needed */
    bool want[3];          /* the model (unless streamed), the moments the optimizer has */
    bool try_staging;      /* tmpfs root: stage the files (until staging fails once) */
    bool staged;           /* values, m and v point into staging */
    dt__ckpt_staging staging;
    dt__ckpt_maps maps;    /* the staged files' mappings, kept for their return */
    uint32_t data_crc[3];  /* by slot: the CRC-32s of the staged data, taken in the copy */
    bool data_crc_taken;
    dt__state_copy copy;   /* the submitted state's copy, in pieces */
    bool defer;            /* defer_copy: this thread copies, o's updates help and wait for it */
    bool copying;          /* a deferred copy not done: the live state still to be read */
    int copy_next, copy_done; /* its pieces taken, and copied (or done by the tee) */
    bool arm_wanted;       /* dt_ckpt_writer_arm: the next update plans the copy and tees it */
    bool teeing;           /* planned, and the optimizer's tee copies what its updates write */
    double waited_s;       /* time updates and settles waited for copies (helping included) */
    int64_t teed_pieces, planned_pieces; /* deferred copies' pieces: copied by the tee, in all */
    _Atomic uint64_t tee_ns; /* the tee's time, the updating threads' together */
    dt_ckpt_progress pr;
    /* a sharded submit's sharding and shard files (sh.nranks 0: not sharded) */
    dt_ckpt_sharding sh;
    dt_ckpt_unit *units;
    char tensors[DT__CKPT_SHARD_TENSORS_MAX][40];
    const char *tensor_names[DT__CKPT_SHARD_TENSORS_MAX];
    dt_ckpt_shard_file *shards;
    char label[64];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool pending, busy, stop;
    dt_status failed; /* the last failed write's, DT_OK: none */
    char failed_why[DT__ERROR_LEN];
    char note[DT__ERROR_LEN + DT_CKPT_PATH_MAX]; /* the next report's note ("": none) */
    int64_t last_good; /* step of the newest checkpoint on disk, -1: none */
    char last_good_dir[DT_CKPT_PATH_MAX];
};

static double now_s(void)
{
    return (double)dt__now_ns() / 1e9;
}

/* Point values, m and v at the buffers the next submit copies into: a
 * fresh staging on tmpfs, else (or when staging fails: /dev/shm full, it
 * says why once) the heap's.  false when out of memory. */
static bool next_buffers(dt_ckpt_writer *w)
{
    dt_ckpt_meta meta = {w->config, w->model, w->optimizer};
    w->staged = false;
    if (w->try_staging) {
        if (dt__ckpt_staging_open(&w->staging, w->root, w->p, &meta, w->want, &w->maps) == DT_OK) {
            w->staged = true;
            w->values = dt__ckpt_staging_data(&w->staging, 0);
            w->m = dt__ckpt_staging_data(&w->staging, 1);
            w->v = dt__ckpt_staging_data(&w->staging, 2);
            return true;
        }
        snprintf(w->note, sizeof w->note, "checkpoints in %s: %s; copying through the heap from now on", w->root,
                 dt_last_error());
        w->try_staging = false;
    }
    size_t bytes = (size_t)dt_params_numel(w->p) * sizeof(float);
    for (int i = 0; i < 3; i++)
        if (w->want[i] && !w->heap[i] && !(w->heap[i] = malloc(bytes)))
            return false;
    w->values = w->heap[0];
    w->m = w->heap[1];
    w->v = w->heap[2];
    return true;
}

/* A staged snapshot sealed (headers, CRCs) and moved into its step. */
static dt_status save_staged(dt_ckpt_writer *w, const dt_ckpt_meta *meta, char *where, size_t len)
{
    dt__ckpt_file files[3];
    dt_status s =
        dt__ckpt_staging_seal(&w->staging, w->p, meta, w->pr.step, w->data_crc_taken ? w->data_crc : NULL, files);
    dt__ckpt_staging_release(&w->staging);
    if (s == DT_OK)
        s = dt__ckpt_save_staged(w->root, w->p, meta, &w->pr, &w->staging, files, where, len);
    dt__ckpt_staging_close(&w->staging); /* (what was not moved) */
    return s;
}

/* Pieces of the deferred copy in flight, taken one at a time until none
 * is left (the mutex not held); the one that copies the last clears
 * copying. */
static void copy_pieces(dt_ckpt_writer *w)
{
    for (;;) {
        pthread_mutex_lock(&w->mu);
        if (!w->copying || w->copy_next >= w->copy.pieces) {
            pthread_mutex_unlock(&w->mu);
            return;
        }
        int k = w->copy_next++;
        if (dt__state_copy_done(&w->copy, k)) { /* (the tee's: counted at the submit) */
            pthread_mutex_unlock(&w->mu);
            continue;
        }
        pthread_mutex_unlock(&w->mu);
        dt__state_copy_piece(&w->copy, k);
        pthread_mutex_lock(&w->mu);
        if (++w->copy_done == w->copy.pieces) {
            w->copying = false;
            pthread_cond_broadcast(&w->cv);
        }
        pthread_mutex_unlock(&w->mu);
    }
}

/* Until a deferred copy is done, copying what is left meanwhile. */
static void help_copy(dt_ckpt_writer *w, double *waited)
{
    double t0 = now_s();
    copy_pieces(w);
    pthread_mutex_lock(&w->mu);
    while (w->copying)
        pthread_cond_wait(&w->cv, &w->mu);
    if (waited)
        *waited += now_s() - t0;
    pthread_mutex_unlock(&w->mu);
}

/* Take the mutex once no write is pending or in flight (copying a deferred
 * copy's pieces left meanwhile). */
static void lock_idle(dt_ckpt_writer *w)
{
    help_copy(w, NULL);
    pthread_mutex_lock(&w->mu);
    while (w->pending || w->busy)
        pthread_cond_wait(&w->cv, &w->mu);
}

/* help_copy, the time counted, when a copy is in flight. */
static void settle(dt_ckpt_writer *w)
{
    pthread_mutex_lock(&w->mu);
    bool copying = w->copying;
    pthread_mutex_unlock(&w->mu);
    double waited = 0;
    if (copying)
        help_copy(w, &waited);
    pthread_mutex_lock(&w->mu);
    w->waited_s += waited;
    pthread_mutex_unlock(&w->mu);
}

static void tee(void *user, int64_t offset, int64_t n, const float *const written[3])
{
    dt_ckpt_writer *w = user;
    uint64_t t0 = dt__now_ns();
    dt__state_copy_tee(&w->copy, offset, n, written);
    atomic_fetch_add_explicit(&w->tee_ns, dt__now_ns() - t0, memory_order_relaxed);
}

/* The copy of the live state (src: its arrays by slot) into values, m and v. */
static dt_status plan(dt_ckpt_writer *w, const float *const src[3], bool crc)
{
    float *dst[3] = {w->values, w->m, w->v};
    w->data_crc_taken = crc;
    return dt__state_copy_plan(&w->copy, src, dst, (size_t)dt_params_numel(w->p) * sizeof(float), crc);
}

/* The submit's copy planned before the update that writes the state, for
 * the update's tee (the live state's arrays: the submit checks that they
 * are still the same ones). */
static void arm_now(dt_ckpt_writer *w)
{
    lock_idle(w);
    bool on_disk = false; /* (an offloaded state would be read here, and is not where the update writes) */
    dt_optimizer_state_floats(w->o, &on_disk);
    dt_ckpt_tensors live = on_disk ? (dt_ckpt_tensors){0} : dt_ckpt_tensors_live(w->p, w->o);
    const float *src[3] = {live.values, live.m, live.v};
    if (w->arm_wanted && !w->teeing && w->staged && !on_disk && plan(w, src, true) == DT_OK) {
        w->teeing = true;
        dt_optimizer_set_tee(w->o, DT__STATE_COPY_PIECE_FLOATS, tee, w);
    }
    w->arm_wanted = false;
    pthread_mutex_unlock(&w->mu);
}

/* Before every update: the previous copy finished; the next one armed when asked. */
static void settle_guard(void *user)
{
    dt_ckpt_writer *w = user;
    settle(w);
    pthread_mutex_lock(&w->mu);
    bool arm = w->arm_wanted;
    pthread_mutex_unlock(&w->mu);
    if (arm)
        arm_now(w);
}

/* On the writer thread, with busy set: the fields it touches are the
 * submitter's only while busy and pending are both clear. */
static void write_one(dt_ckpt_writer *w)
{
    dt_ckpt_tensors snap = {w->values, w->m, w->v};
    dt_ckpt_meta meta = {w->config, w->model, w->optimizer};
    char where[DT_CKPT_PATH_MAX] = "";
    double t0 = now_s();
    if (w->defer && !w->sh.nranks) { /* deferred: copied here (and by an update that comes first) */
        help_copy(w, NULL);
        if (w->data_crc_taken)
            dt__state_copy_crcs(&w->copy, w->data_crc);
    }
    bool staged = w->staged && !w->sh.nranks; /* (a sharded write reads the staging like the heap) */
    dt_status s = w->sh.nranks ? dt__ckpt_save_sharded(w->root, w->p, &snap, &meta, &w->pr, &w->sh, w->shards,
                                                       w->shards_elsewhere, where, sizeof where)
                  : staged     ? save_staged(w, &meta, where, sizeof where)
                               : dt_ckpt_save(w->root, w->p, &snap, &meta, &w->pr, where, sizeof where);
    if (s == DT_OK)
        dt_ckpt_prune(w->root, w->keep); /* (first: its files become the next staging's) */
    if (staged && !next_buffers(w) && s == DT_OK)
        s = dt__fail(DT_ERR_NOMEM, "out of memory for the next checkpoint's copy");
    if (s == DT_OK) {
        w->last_good = w->pr.step;
        snprintf(w->last_good_dir, sizeof w->last_good_dir, "%s", where);
    } else {
        w->failed = s;
        snprintf(w->failed_why, sizeof w->failed_why, "%s", dt_last_error());
    }
    dt_ckpt_report r = {.step = w->pr.step,
                        .label = w->label,
                        .status = s,
                        .error = s == DT_OK ? "" : w->failed_why,
                        .dir = where,
                        .seconds = now_s() - t0,
                        .kept_step = w->last_good,
                        .kept_dir = w->last_good_dir,
                        .note = w->note};
    if (w->report)
        w->report(w->user, &r);
    w->note[0] = '\0';
}

static void *writer_main(void *arg)
{
    dt__trace_thread_name("checkpoint writer");
    dt_ckpt_writer *w = arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (!w->pending && !w->stop)
            pthread_cond_wait(&w->cv, &w->mu);
        if (!w->pending)
            break;
        w->pending = false;
        w->busy = true;
        pthread_mutex_unlock(&w->mu);
        write_one(w);
        pthread_mutex_lock(&w->mu);
        w->busy = false;
        pthread_cond_broadcast(&w->cv);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static void writer_free(dt_ckpt_writer *w)
{
    free(w->config);
    free(w->model);
    free(w->optimizer);
    if (w->staged)
        dt__ckpt_staging_close(&w->staging);
    dt__ckpt_maps_clear(&w->maps);
    dt__state_copy_free(&w->copy);
    for (int i = 0; i < 3; i++)
        free(w->heap[i]);
    free(w->units);
    free(w->shards);
    free(w);
}

/* strdup that keeps NULL; false when out of memory. */
static bool copy(const char *s, char **out)
{
    *out = s ? strdup(s) : NULL;
    return !s || *out;
}

dt_status dt_ckpt_writer_start(const dt_ckpt_writer_config *cfg, dt_params *p, dt_optimizer *o,
                               dt_ckpt_writer **out)
{
    *out = NULL;
    if (!cfg || !cfg->root || !p)
        return dt__fail(DT_ERR_INVALID, "dt_ckpt_writer_start: cfg, cfg->root and p are required");
    dt_ckpt_writer *w = calloc(1, sizeof *w);
    if (!w)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    dt_status s = dt__ckpt_path(w->root, sizeof w->root, "%s", cfg->root);
    if (s != DT_OK) {
        free(w);
        return s;
    }
    dt_ckpt_tensors live = dt_ckpt_tensors_live(p, o);
    size_t bytes = (size_t)dt_params_numel(p) * sizeof(float);
    if (cfg->stream_model && o) {
        free(w);
        return dt__fail(DT_ERR_INVALID, "dt_ckpt_writer_start: stream_model writes sharded checkpoints: no optimizer");
    }
    w->stream_model = cfg->stream_model;
    w->p = p;
    w->want[0] = !cfg->stream_model;
    w->want[1] = live.m != NULL;
    w->want[2] = live.v != NULL;
    w->try_staging = !cfg->stream_model && dt__ckpt_in_memory(w->root);
    w->defer = cfg->defer_copy && o && !cfg->stream_model;
    w->maps.horizon = cfg->keep > 0 ? cfg->keep + 1 : 1; /* a kept snapshot's files return keep+1 later */
    bool ok = copy(cfg->meta.config_json, &w->config) && copy(cfg->meta.model_json, &w->model) &&
              copy(cfg->meta.optimizer, &w->optimizer);
    if (!ok || !next_buffers(w)) {
        writer_free(w);
        return dt__fail(DT_ERR_NOMEM, "out of memory for the checkpoint snapshot (%zu bytes)", 3 * bytes);
    }
    w->keep = cfg->keep;
    w->report = cfg->report;
    w->user = cfg->user;
    w->o = o;
    w->last_good = cfg->kept_step;
    snprintf(w->last_good_dir, sizeof w->last_good_dir, "%s", cfg->kept_dir ? cfg->kept_dir : "");
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    int rc = pthread_create(&w->thread, NULL, writer_main, w);
    if (rc != 0) {
        pthread_mutex_destroy(&w->mu);
        pthread_cond_destroy(&w->cv);
        writer_free(w);
        return dt__fail(DT_ERR_SYSTEM, "cannot start the checkpoint writer thread: %s", strerror(rc));
    }
    if (w->defer)
        dt_optimizer_set_guard(o, settle_guard, w);
    *out = w;
    return DT_OK;
}

/* submit's work; sh NULL: not sharded. */
static dt_status submit(dt_ckpt_writer *w, const dt_ckpt_progress *pr, const char *label,
                        const dt_ckpt_sharding *sh, const dt_ckpt_shard_file *files, double *stall_s)
{
    double t0 = now_s();
    lock_idle(w);
    w->sh.nranks = 0;
    if (sh) { /* copied: the caller's arrays need not outlive the call */
        dt_ckpt_unit *units = realloc(w->units, (size_t)(sh->nunits ? sh->nunits : 1) * sizeof *units);
        dt_ckpt_shard_file *shards = units ? realloc(w->shards, (size_t)sh->nranks * sizeof *shards) : NULL;
        w->units = units ? units : w->units;
        w->shards = shards ? shards : w->shards;
        if (!units || !shards || sh->ntensors < 1 || sh->ntensors > DT__CKPT_SHARD_TENSORS_MAX) {
            pthread_mutex_unlock(&w->mu);
            return dt__fail(DT_ERR_NOMEM,
                            "checkpoint at step %lld not written: out of memory, or %d shard tensors",
                            (long long)pr->step, sh->ntensors);
        }
        memcpy(w->units, sh->units, (size_t)sh->nunits * sizeof *units);
        memcpy(w->shards, files, (size_t)sh->nranks * sizeof *shards);
        for (int i = 0; i < sh->ntensors; i++) {
            snprintf(w->tensors[i], sizeof w->tensors[i], "%s", sh->tensors[i]);
            w->tensor_names[i] = w->tensors[i];
        }
        w->sh = *sh;
        w->sh.units = w->units;
        w->sh.tensors = w->tensor_names;
    }
    /* the live state's pointers taken here (an offloaded state is read on
     * this thread); into staged files (not for a sharded write) each
     * piece's CRC is taken as it is copied, so the seal reads nothing back.
     * Armed (dt_ckpt_writer_arm), the plan was made before the update, and
     * its tee has copied the pieces the update wrote whole. */
    dt_ckpt_tensors live = dt_ckpt_tensors_live(w->p, w->o);
    const float *src[3] = {live.values, live.m, live.v};
    bool teed = w->teeing && !sh && dt__state_copy_reads(&w->copy, src); /* (an offloaded state moves) */
    if (w->teeing)
        dt_optimizer_set_tee(w->o, 0, NULL, NULL);
    w->teeing = w->arm_wanted = false;
    dt_status s = teed ? DT_OK : plan(w, src, w->staged && !sh);
    if (s != DT_OK) {
        pthread_mutex_unlock(&w->mu);
        return dt__wrap(s, "checkpoint at step %lld not written: ", (long long)pr->step);
    }
    if (w->defer && !sh) { /* the writer thread's, from now on */
        w->copy_next = w->copy_done = 0;
        for (int k = 0; k < w->copy.pieces; k++)
            w->copy_done += dt__state_copy_done(&w->copy, k);
        w->copying = w->copy_done < w->copy.pieces;
        w->teed_pieces += w->copy_done;
        w->planned_pieces += w->copy.pieces;
    } else {
        for (int k = 0; k < w->copy.pieces; k++)
            dt__state_copy_piece(&w->copy, k);
        if (w->data_crc_taken)
            dt__state_copy_crcs(&w->copy, w->data_crc);
    }
    w->pr = *pr;
    snprintf(w->label, sizeof w->label, "%s", label ? label : "");
    w->pending = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    if (stall_s)
        *stall_s = now_s() - t0;
    return DT_OK;
}

dt_status dt_ckpt_writer_submit(dt_ckpt_writer *w, const dt_ckpt_progress *pr, const char *label,
                                double *stall_s)
{
    if (w->stream_model)
        return dt__fail(DT_ERR_INVALID, "dt_ckpt_writer_submit: a writer started with stream_model submits "
                                        "sharded checkpoints only");
    return submit(w, pr, label, NULL, NULL, stall_s);
}

dt_status dt_ckpt_writer_model_open(dt_ckpt_writer *w, int64_t step, dt_ckpt_model_file **out)
{
    if (!w || !w->stream_model)
        return dt__fail(DT_ERR_INVALID, "dt_ckpt_writer_model_open: %s", w ? "the writer was started without "
                                        "stream_model (it writes model.safetensors itself)" : "the writer is NULL");
    dt_ckpt_meta meta = {w->config, w->model, w->optimizer};
    return dt_ckpt_model_open(w->root, step, w->p, &meta, out);
}

dt_status dt_ckpt_writer_submit_sharded(dt_ckpt_writer *w, const dt_ckpt_progress *pr, const char *label,
                                        const dt_ckpt_sharding *sh, const dt_ckpt_shard_file *files,
                                        double *stall_s)
{
    if (!sh || !files || sh->nranks < 1 || w->m || w->v)
        return dt__fail(DT_ERR_INVALID,
                        "dt_ckpt_writer_submit_sharded: a sharding with its files, and a writer "
                        "started without the optimizer, are required");
    return submit(w, pr, label, sh, files, stall_s);
}

dt_status dt_ckpt_writer_flush(dt_ckpt_writer *w)
{
    lock_idle(w);
    dt_status s = w->failed;
    if (s != DT_OK)
        dt__fail(s, "%s", w->failed_why);
    pthread_mutex_unlock(&w->mu);
    return s;
}

int64_t dt_ckpt_writer_last_good(dt_ckpt_writer *w, char *dir, size_t len)
{
    lock_idle(w);
    int64_t step = w->last_good;
    snprintf(dir, len, "%s", w->last_good_dir);
    pthread_mutex_unlock(&w->mu);
    return step;
}

void dt_ckpt_writer_stop(dt_ckpt_writer *w)
{
    if (!w)
        return;
    pthread_mutex_lock(&w->mu);
    w->stop = true;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
    help_copy(w, NULL);
    pthread_join(w->thread, NULL); /* a pending write still completes */
    if (w->defer)
        dt_optimizer_set_guard(w->o, NULL, NULL);
    if (w->teeing)
        dt_optimizer_set_tee(w->o, 0, NULL, NULL);
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    writer_free(w);
}

dt_status dt_ckpt_writer_shards_elsewhere(dt_ckpt_writer *w, bool on)
{
    if (!w)
        return dt__fail(DT_ERR_INVALID, "dt_ckpt_writer_shards_elsewhere: the writer is NULL");
    pthread_mutex_lock(&w->mu);
    w->shards_elsewhere = on;
    pthread_mutex_unlock(&w->mu);
    return DT_OK;
}

const dt__ckpt_maps *dt__ckpt_writer_maps(dt_ckpt_writer *w)
{
    return &w->maps;
}

void dt_ckpt_writer_settle(dt_ckpt_writer *w)
{
    if (w)
        settle(w);
}

void dt_ckpt_writer_arm(dt_ckpt_writer *w)
{
    if (!w || !w->defer)
        return;
    pthread_mutex_lock(&w->mu);
    w->arm_wanted = true;
    pthread_mutex_unlock(&w->mu);
}

double dt_ckpt_writer_teed(dt_ckpt_writer *w, double *seconds)
{
    pthread_mutex_lock(&w->mu);
    double f = w->planned_pieces ? (double)w->teed_pieces / (double)w->planned_pieces : 0;
    pthread_mutex_unlock(&w->mu);
    if (seconds)
        *seconds = (double)atomic_load_explicit(&w->tee_ns, memory_order_relaxed) / 1e9;
    return f;
}

size_t dt_ckpt_writer_heap(dt_ckpt_writer *w, const void *bufs[3])
{
    for (int i = 0; i < 3; i++)
        bufs[i] = NULL;
    if (!w)
        return 0;
    pthread_mutex_lock(&w->mu); /* (the heap's buffers are allocated on the writer's thread) */
    for (int i = 0; i < 3; i++)
        bufs[i] = w->heap[i];
    pthread_mutex_unlock(&w->mu);
    return (size_t)dt_params_numel(w->p) * sizeof(float);
}

double dt_ckpt_writer_waited(dt_ckpt_writer *w)
{
    pthread_mutex_lock(&w->mu);
    double s = w->waited_s;
    pthread_mutex_unlock(&w->mu);
    return s;
}
