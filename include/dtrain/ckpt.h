/* dtrain checkpoints: tensor files, and the checkpoint directories built
 * from them.
 *
 * Tensors are stored in the safetensors format (8-byte little-endian header
 * length, a JSON header naming every tensor's dtype, shape and byte range,
 * then the raw data), which PyTorch's safetensors reader loads.  Every file is
 * written atomically: a temporary file in the same directory, fsync, rename,
 * then fsync of the directory, so a crash leaves the old file or the new one,
 * never a torn one.
 *
 * A checkpoint is a step directory, root/step-NNNNNNNN/ (the step, eight
 * digits or more), holding model.safetensors, the optimizer's moments in the
 * parameters' layout (optim_m.safetensors, optim_v.safetensors: those the
 * optimizer has) and manifest.json.  It is complete once its manifest exists,
 * and it appears whole: every file goes into root/.step-NNNNNNNN.tmp/, the
 * manifest last, and the directory is renamed into place.  A writer that dies
 * leaves a temporary directory, which lookups ignore and the next write of
 * that step removes.
 *
 * manifest.json ("format": "dtrain-checkpoint-2") holds "files" (each tensor
 * file's "bytes" and zlib "crc32"), "format", "step", "world_size",
 * "global_batch", "sampler" {"epoch", "position"}, "optimizer" {"kind",
 * "steps"}, "rng" (four 64-bit words as decimal strings), "config" (the
 * caller's, kept as given) and "manifest_crc32": the CRC-32 of the manifest's
 * canonical text (cJSON's compact print of it without that member) as eight
 * hex digits.  Format 1 manifests (no manifest_crc32) still open.
 *
 * Conventions: every call that can fail returns DT_OK or a negative
 * dt_status, with the detail in dt_last_error(), which names the file or
 * directory and the problem (the field and its value for a manifest);
 * nothing here prints.  Paths are limited to DT_CKPT_PATH_MAX bytes. */
#ifndef DTRAIN_CKPT_H
#define DTRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/base.h"
#include "dtrain/nn.h"
#include "dtrain/optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tensor files ---- */

/* Write `data` (a flat buffer laid out like the registry: its values, its
 * gradients, or any array of that layout) as one F32 tensor per parameter.
 * metadata: optional flat string map for "__metadata__" (NULL-terminated
 * key, value, key, value, ..., NULL). *crc (optional) gets the file's CRC-32. */
dt_status dt_safetensors_write(const char *path, dt_params *p, const float *data, const char *const *metadata,
                               uint32_t *crc);
/* Read every registry parameter from the file into `data` (same layout).
 * Names, dtypes and shapes must match; extra tensors in the file are an error.
 * Any inconsistency is an error naming the file and the tensor. */
dt_status dt_safetensors_read(const char *path, dt_params *p, float *data);

/* Atomically replace `path` with `len` bytes. */
dt_status dt_atomic_write(const char *path, const void *bytes, size_t len);
/* CRC-32 (zlib's) of a whole file; DT_ERR_INVALID naming it when unreadable. */
dt_status dt_file_crc32(const char *path, uint32_t *crc, uint64_t *size);

/* ---- checkpoint directories ---- */

#define DT_CKPT_PATH_MAX 4096

/* What a checkpoint holds besides the tensors. */
typedef struct {
    int64_t step;                     /* optimizer steps done: the directory's number */
    int64_t epoch, position;          /* the sampler's (dt_sampler_seek) */
    int64_t optimizer_steps;          /* dt_optimizer_steps */
    int64_t world_size, global_batch; /* of the run that wrote it; 0 when unknown (older manifests) */
    dt_rng rng;                       /* a generator state (not all zero) */
} dt_ckpt_progress;

/* The tensors of a checkpoint, each in the registry's flat layout: the
 * weights, and the optimizer's first and second moments (NULL when it has
 * none). */
typedef struct {
    const float *values, *m, *v;
} dt_ckpt_tensors;

/* The live tensors of a registry and its optimizer (o NULL: weights only):
 * the moments are dt_optimizer_state's first and second numel floats. */
dt_ckpt_tensors dt_ckpt_tensors_live(dt_params *p, dt_optimizer *o);

/* What the caller adds to every checkpoint. */
typedef struct {
    const char *config_json; /* JSON text: the manifest's "config", kept as given (NULL: none) */
    const char *model_json;  /* the safetensors "model" metadata, what rebuilds the model (NULL: "{}") */
    const char *optimizer;   /* the manifest's optimizer.kind ("adamw") */
} dt_ckpt_meta;

/* root/step-NNNNNNNN for a step (DT_ERR_INVALID when it does not fit len). */
dt_status dt_ckpt_step_dir(const char *root, int64_t step, char *out, size_t len);

/* Write root/step-NNNNNNNN/ for pr->step (root is created when missing): the
 * tensor files t has (values required), each with the safetensors metadata
 * format "pt", producer "dtrain", dtrain_version, model and step, then the
 * manifest, then one rename.  A step directory already there for this step
 * is replaced; on failure (disk full, permissions) nothing already there is
 * touched and the temporary directory is removed.  written (may be NULL)
 * gets the step directory's path. */
dt_status dt_ckpt_save(const char *root, dt_params *p, const dt_ckpt_tensors *t, const dt_ckpt_meta *meta,
                       const dt_ckpt_progress *pr, char *written, size_t written_len);

/* Steps of the complete checkpoints (step-N/manifest.json) under root,
 * newest first: *steps (caller frees; NULL when none) and *n.  A root that
 * does not exist holds none. */
dt_status dt_ckpt_list(const char *root, int64_t **steps, int *n);
/* The newest complete checkpoint's step under root (not verified); -1: none. */
int64_t dt_ckpt_newest(const char *root);
/* Step directories of any state (complete, partial, a writer's temporary or
 * replaced one) under root. */
int dt_ckpt_count_any(const char *root);
/* Remove every step directory under root (each manifest first, so an
 * interrupted removal leaves nothing that looks complete); other files stay.
 * On failure the first directory that could not be removed is named, and
 * the others are still removed. */
dt_status dt_ckpt_clear(const char *root);
/* Remove all but the newest `keep` complete checkpoints (keep <= 0: none). */
dt_status dt_ckpt_prune(const char *root, int keep);

/* The caller's check of one step directory (dt_ckpt_find): DT_OK accepts it. */
typedef dt_status (*dt_ckpt_verify_fn)(void *user, const char *step_dir);
/* Told of a step directory that failed verify (why: dt_last_error() of the
 * failure); older_left says whether dt_ckpt_find tries an older one next. */
typedef void (*dt_ckpt_skip_fn)(void *user, const char *step_dir, const char *why, int older_left);

/* Resolve `path` to a checkpoint: a step directory (path/manifest.json
 * exists) is verified alone; otherwise path is a root and its complete
 * checkpoints are verified newest first until one passes, each failure told
 * to skipped (may be NULL).  step_dir gets the one accepted (or the last
 * tried).  DT_ERR_INVALID naming path when it holds no complete checkpoint;
 * else the last verify's failure when none passes. */
dt_status dt_ckpt_find(const char *path, dt_ckpt_verify_fn verify, dt_ckpt_skip_fn skipped, void *user,
                       char *step_dir, size_t len);

/* ---- the manifest ---- */

typedef struct dt_ckpt_manifest dt_ckpt_manifest;

/* Read step_dir/manifest.json and check it: the format, manifest_crc32
 * against its text, and every file it lists (inside step_dir, present, its
 * size and CRC-32; model.safetensors among them). */
dt_status dt_ckpt_manifest_open(const char *step_dir, dt_ckpt_manifest **out);
/* The manifest's "config" as compact JSON text (NULL when it has none);
 * valid until dt_ckpt_manifest_close. */
const char *dt_ckpt_manifest_config(const dt_ckpt_manifest *m);

/* The ranges a manifest's values must lie in, from the configuration it
 * carries (which only the caller understands). */
typedef struct {
    int64_t max_step;       /* step in [0, max_step] (the run's steps) */
    int64_t train_samples;  /* > 0: the sampler's position lies in an epoch of this many samples
                             * (padded to the writer's world size), its epoch no further than twice
                             * the samples the steps consumed allow; 0: not checked */
    int64_t batch_per_rank; /* batch x accumulation: the global batch of a manifest without one */
} dt_ckpt_limits;

/* The manifest's progress, every value range-checked: step, optimizer.steps
 * (up to step), world_size and global_batch (when present), sampler.epoch and
 * .position, the four rng words (64-bit decimals, not all zero). */
dt_status dt_ckpt_manifest_progress(const dt_ckpt_manifest *m, const dt_ckpt_limits *lim,
                                    dt_ckpt_progress *out);
/* Every tensor file holds exactly p's parameters with their shapes; model
 * names the model in the message ("mlp"). */
dt_status dt_ckpt_manifest_check_tensors(const dt_ckpt_manifest *m, dt_params *p, const char *model);
void dt_ckpt_manifest_close(dt_ckpt_manifest *m);

/* Read the weights (and, o non-NULL, the moments the optimizer has) from a
 * step directory, normally one dt_ckpt_find accepted. */
dt_status dt_ckpt_load(const char *step_dir, dt_params *p, dt_optimizer *o);

/* ---- the background writer ----
 *
 * Submit copies the live state at a step boundary (a memcpy) and returns; a
 * thread writes the copy (dt_ckpt_save), prunes to `keep` and reports.  One
 * write is in flight at a time: a submit while the previous one still writes
 * waits for it.  A failed write is reported and the previous checkpoints
 * stay. */
typedef struct dt_ckpt_writer dt_ckpt_writer;

/* The outcome of one write, given to the report callback. */
typedef struct {
    int64_t step;         /* the step submitted */
    const char *label;    /* as given to submit ("" for NULL) */
    dt_status status;     /* DT_OK: written */
    const char *error;    /* why not ("" when written) */
    const char *dir;      /* the step directory written ("" when not) */
    double seconds;       /* the write's duration */
    int64_t kept_step;    /* the newest checkpoint on disk after it, -1: none */
    const char *kept_dir; /* and its directory */
} dt_ckpt_report;

typedef struct {
    const char *root;  /* the checkpoint directory */
    int keep;          /* complete checkpoints kept after each write (0: all) */
    dt_ckpt_meta meta; /* copied */
    int64_t kept_step; /* the checkpoint already on disk (the one resumed from), -1: none */
    const char *kept_dir;
    /* called on the writer thread after each write (NULL: none) */
    void (*report)(void *user, const dt_ckpt_report *r);
    void *user;
} dt_ckpt_writer_config;

/* Start the writer thread; p and o (may be NULL) are read at each submit. */
dt_status dt_ckpt_writer_start(const dt_ckpt_writer_config *cfg, dt_params *p, dt_optimizer *o,
                               dt_ckpt_writer **out);
/* Wait for the write in flight (if any), then snapshot the state with pr;
 * *stall_s (may be NULL) is the time the caller was held up. */
dt_status dt_ckpt_writer_submit(dt_ckpt_writer *w, const dt_ckpt_progress *pr, const char *label,
                                double *stall_s);
/* Wait for the write in flight; DT_OK when every write so far succeeded,
 * else the last failure (its message in dt_last_error()). */
dt_status dt_ckpt_writer_flush(dt_ckpt_writer *w);
/* After waiting like flush: the step of the newest checkpoint on disk (-1:
 * none) and its directory in dir. */
int64_t dt_ckpt_writer_last_good(dt_ckpt_writer *w, char *dir, size_t len);
/* A pending write still completes; then the thread ends (w may be NULL). */
void dt_ckpt_writer_stop(dt_ckpt_writer *w);

#ifdef __cplusplus
}
#endif
#endif
