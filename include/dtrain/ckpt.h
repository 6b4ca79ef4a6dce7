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
 * "steps"}, "rng" (four 64-bit words as decimal strings), "sharding" (a
 * sharded checkpoint only, below), "config" (the caller's, kept as given)
 * and "manifest_crc32": the CRC-32 of the manifest's canonical text (cJSON's
 * compact print of it without that member) as eight hex digits.  Format 1
 * manifests (no manifest_crc32) still open.
 *
 * A sharded checkpoint (ZeRO: the optimizer state, and at stage 3 the
 * values, cut over the N ranks of a data-parallel group) has no optim_m /
 * optim_v: each rank writes its shard as zero-shard-RRRRR-of-NNNNN.safetensors
 * (rank and N, five digits), listed in "files" like the others.
 * model.safetensors still holds the whole weights.  "sharding" describes
 * the cut well enough to put the state together again without the reader's
 * model: {"kind": "zero", "stage", "ranks": N, "shard_numel": S, "padded":
 * true, "tensors": the names each shard file holds ("values" at stage 3,
 * then "optim_m", "optim_v": the moments), "files": the N shard files in
 * rank order, "units": [{"offset", "numel", "slice"}, ...]}.  A unit is a
 * range of the registry's flat buffer (a block's parameters); slice =
 * ceil(numel / N); rank r's shard is slice r of every unit in order, the
 * tail of the last slices zero padding, so S is the sum of the slices and
 * each tensor of a shard file is F32 [S], padding included.
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
 * tried).  DT_ERR_INVALID naming path when it does not exist, is not a
 * directory or holds no complete checkpoint;
 * else the last verify's failure when none passes. */
dt_status dt_ckpt_find(const char *path, dt_ckpt_verify_fn verify, dt_ckpt_skip_fn skipped, void *user,
                       char *step_dir, size_t len);

/* ---- sharded checkpoints (ZeRO) ----
 *
 * The protocol, over the N ranks of the group: one rank (the writer's)
 * calls dt_ckpt_shard_prepare, the others wait for it (a broadcast of its
 * status); every rank writes its shard with dt_ckpt_shard_write into the
 * step's temporary directory and sends what it got (bytes, CRC) to the
 * writer's rank, which gives them to dt_ckpt_save_sharded (or
 * dt_ckpt_writer_submit_sharded): model.safetensors, the manifest listing
 * every shard file, one rename.  The step directory appears whole, with
 * every rank's file, or not at all; dt_ckpt_shard_abandon drops the
 * temporary directory when a rank's write failed. */

/* A unit of the flat buffer the shards cut: each rank holds slice
 * ceil(numel / N) of it. */
typedef struct {
    int64_t offset, numel;
} dt_ckpt_unit;

typedef struct {
    int stage;                 /* ZeRO stage, 1-3 */
    int nranks;                /* N, one shard file each; 0: not sharded */
    const dt_ckpt_unit *units; /* in shard order */
    int nunits;
    const char *const *tensors; /* each shard file's tensors, in order ("values", "optim_m", "optim_v") */
    int ntensors;               /* 1 to 8 */
} dt_ckpt_sharding;

/* A shard file as its rank wrote it. */
typedef struct {
    char name[64];
    uint64_t bytes;
    uint32_t crc;
} dt_ckpt_shard_file;

/* Elements of a rank's shard: the units' slices summed (-1: bad sharding). */
int64_t dt_ckpt_shard_numel(const dt_ckpt_sharding *sh);
/* "zero-shard-RRRRR-of-NNNNN.safetensors". */
dt_status dt_ckpt_shard_name(int rank, int nranks, char *out, size_t len);
/* The writer's rank, before the shards of pr->step: root (created when
 * missing) gets an empty temporary step directory (one a writer that died
 * left is emptied). */
dt_status dt_ckpt_shard_prepare(const char *root, int64_t step);
/* Rank `rank` writes its shard into the temporary step directory,
 * atomically: arrays[i] (dt_ckpt_shard_numel floats, padding included) as
 * tensor sh->tensors[i].  *out gets the file's name, bytes and CRC-32 (read
 * back from disk). */
dt_status dt_ckpt_shard_write(const char *root, int64_t step, const dt_ckpt_sharding *sh, int rank,
                              const float *const *arrays, dt_ckpt_shard_file *out);
/* dt_ckpt_shard_write with the tensors read piece by piece, for a state
 * that is not in memory (offloaded to disk): read fills out with elements
 * [offset, offset + n) of tensor `tensor` (sh->tensors' index), n at most
 * DT_CKPT_SHARD_PIECE, padding included; its failure (its message kept)
 * abandons the file.  Memory: one piece. */
#define DT_CKPT_SHARD_PIECE (1 << 20)
typedef dt_status (*dt_ckpt_shard_read_fn)(void *user, int tensor, int64_t offset, int64_t n, float *out);
dt_status dt_ckpt_shard_write_from(const char *root, int64_t step, const dt_ckpt_sharding *sh, int rank,
                                   dt_ckpt_shard_read_fn read, void *user, dt_ckpt_shard_file *out);
/* Remove the temporary step directory and what the ranks put in it. */
void dt_ckpt_shard_abandon(const char *root, int64_t step);

/* dt_ckpt_save of a sharded checkpoint: t holds the values only (the
 * moments are in the shards), or nothing when model.safetensors is already
 * in the temporary directory (dt_ckpt_model_open; t->values NULL);
 * files[sh->nranks] are the ranks' shard files, already in the temporary
 * directory with the sizes given (checked), listed in the manifest with
 * "sharding". */
dt_status dt_ckpt_save_sharded(const char *root, dt_params *p, const dt_ckpt_tensors *t,
                               const dt_ckpt_meta *meta, const dt_ckpt_progress *pr,
                               const dt_ckpt_sharding *sh, const dt_ckpt_shard_file *files, char *written,
                               size_t written_len);

/* model.safetensors of a sharded checkpoint whose values no rank holds
 * whole (ZeRO-3), written range by range: after dt_ckpt_shard_prepare the
 * writer's rank opens it in the step's temporary directory (the header of
 * p's layout with the metadata dt_ckpt_save gives meta and step; p needs
 * only its names and shapes, no storage), puts values as ranges of p's flat
 * layout in any order (a range never put reads as zeros; after a failure,
 * later puts do nothing and return it), and closes it: keep, fsynced under
 * its name (the first failure of a put returned instead); !keep, removed.
 * dt_ckpt_save_sharded with t->values NULL (a writer started with
 * stream_model) then lists the file as it is on disk.  Memory: the
 * caller's ranges, never the model. */
typedef struct dt_ckpt_model_file dt_ckpt_model_file;
dt_status dt_ckpt_model_open(const char *root, int64_t step, dt_params *p, const dt_ckpt_meta *meta,
                             dt_ckpt_model_file **out);
dt_status dt_ckpt_model_put(dt_ckpt_model_file *f, int64_t offset, const float *data, int64_t n);
/* f may be NULL (DT_OK). */
dt_status dt_ckpt_model_close(dt_ckpt_model_file *f, bool keep);

/* The shard files of step_dir's checkpoint: *nranks (0: not sharded) and,
 * each optional, *stage and *ntensors (the tensors of each shard file).
 * Reads the manifest without checking the files again (after
 * dt_ckpt_find's verify). */
dt_status dt_ckpt_shards(const char *step_dir, int *nranks, int *stage, int *ntensors);
/* Tensor `tensor` ("values", "optim_m", "optim_v") of a sharded checkpoint
 * cut for `nranks` ranks the way the manifest's units are (the same units,
 * slice ceil(numel / nranks)): rank's shard into out (numel elements, its
 * shard's length, padding zeroed), or with nranks 0 the whole flat array
 * (numel: the registry's, elements no unit covers zeroed).  Only the shard
 * files that overlap it are opened, and of them only the overlapping byte
 * ranges read. */
dt_status dt_ckpt_load_shard(const char *step_dir, const char *tensor, int nranks, int rank, float *out,
                             int64_t numel);

/* ---- the manifest ---- */

typedef struct dt_ckpt_manifest dt_ckpt_manifest;

/* Read step_dir/manifest.json and check it: the format, manifest_crc32
 * against its text, "sharding" (when there: its fields, each unit's slice,
 * shard_numel, the files, one per rank and each listed), and every file it
 * lists (inside step_dir, present, its size and CRC-32; model.safetensors
 * among them). */
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
    /* optimizer.steps may reach max_step x world_size, not only step: a
     * parameter server under asp or ssp updates once per worker's push, and
     * the other workers may be ahead of the one that wrote */
    bool update_per_worker;
} dt_ckpt_limits;

/* The manifest's progress, every value range-checked: step, optimizer.steps
 * (up to step, or max_step x world_size with update_per_worker), world_size and global_batch (when present), sampler.epoch and
 * .position, the four rng words (64-bit decimals, not all zero). */
dt_status dt_ckpt_manifest_progress(const dt_ckpt_manifest *m, const dt_ckpt_limits *lim,
                                    dt_ckpt_progress *out);
/* Every tensor file holds exactly p's parameters with their shapes; model
 * names the model in the message ("mlp").  A shard file, instead, holds
 * exactly the tensors "sharding" names, F32 [shard_numel]. */
dt_status dt_ckpt_manifest_check_tensors(const dt_ckpt_manifest *m, dt_params *p, const char *model);
/* A sharded checkpoint's cut against the reader's model: its units (the
 * flat offset and numel of each, in order, as the reader's layout makes
 * them) must be the manifest's; *out (optional) gets the sharding (valid
 * until dt_ckpt_manifest_close; nranks 0 when the checkpoint is not
 * sharded, which passes).  The structure of "sharding" (its fields, slices,
 * shard_numel, the file count and names) is checked at open. */
dt_status dt_ckpt_manifest_check_sharding(const dt_ckpt_manifest *m, const dt_ckpt_unit *units, int nunits,
                                          dt_ckpt_sharding *out);
void dt_ckpt_manifest_close(dt_ckpt_manifest *m);

/* Read the weights (and, o non-NULL, the moments the optimizer has) from a
 * step directory, normally one dt_ckpt_find accepted.  A sharded
 * checkpoint's moments are put together whole from its shard files. */
dt_status dt_ckpt_load(const char *step_dir, dt_params *p, dt_optimizer *o);

/* ---- the background writer ----
 *
 * Submit copies the live state at a step boundary (a memcpy) and returns
 * (with defer_copy the writer thread copies it, below); a thread writes
 * the copy (dt_ckpt_save), prunes to `keep` and reports.  One
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
    const char *note;     /* a change in how the writer works, once, with the report after it ("": none): on
                           * tmpfs, staging the files in ROOT/.staging failed (why), and the copies go
                           * through the writer's own buffers from then on */
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
    /* The caller writes model.safetensors of each step itself, range by
     * range (dt_ckpt_writer_model_open), before a sharded submit: the
     * writer keeps no snapshot of the values and p needs no storage
     * (ZeRO-3, whose ranks hold only shards). */
    bool stream_model;
    /* Submit returns without copying: the writer thread copies the state
     * while the caller goes on, and every update of o waits for that copy
     * first (dt_optimizer_set_guard; the writer holds o's guard until it
     * stops).  For state that only o's updates change between submits
     * (data parallelism, one process); a caller that changes it otherwise
     * calls dt_ckpt_writer_settle first.  Ignored without o, for sharded
     * submits and with stream_model.  One such writer per optimizer. */
    bool defer_copy;
} dt_ckpt_writer_config;

/* Sharded submits from now on: a shard file missing from the step's
 * temporary directory was written on another host (memory snapshots in
 * per-node directories, which a restart puts together): the manifest lists
 * it with the size and CRC its rank reported.  A load still needs every
 * file.  Off by default. */
dt_status dt_ckpt_writer_shards_elsewhere(dt_ckpt_writer *w, bool on);

/* Start the writer thread; p and o (may be NULL) are read at each submit
 * (p's values not at all with stream_model). */
dt_status dt_ckpt_writer_start(const dt_ckpt_writer_config *cfg, dt_params *p, dt_optimizer *o,
                               dt_ckpt_writer **out);
/* Wait for the write in flight (if any), then snapshot the state with pr;
 * *stall_s (may be NULL) is the time the caller was held up. */
dt_status dt_ckpt_writer_submit(dt_ckpt_writer *w, const dt_ckpt_progress *pr, const char *label,
                                double *stall_s);
/* submit for a sharded checkpoint (dt_ckpt_save_sharded): the writer was
 * started with o NULL; sh and files are copied. */
dt_status dt_ckpt_writer_submit_sharded(dt_ckpt_writer *w, const dt_ckpt_progress *pr, const char *label,
                                        const dt_ckpt_sharding *sh, const dt_ckpt_shard_file *files,
                                        double *stall_s);
/* With stream_model: dt_ckpt_model_open for step with the writer's registry
 * and metadata (the caller closes it before submitting the step). */
dt_status dt_ckpt_writer_model_open(dt_ckpt_writer *w, int64_t step, dt_ckpt_model_file **out);
/* Wait for the write in flight; DT_OK when every write so far succeeded,
 * else the last failure (its message in dt_last_error()). */
dt_status dt_ckpt_writer_flush(dt_ckpt_writer *w);
/* After waiting like flush: the step of the newest checkpoint on disk (-1:
 * none) and its directory in dir. */
int64_t dt_ckpt_writer_last_good(dt_ckpt_writer *w, char *dir, size_t len);
/* A pending write still completes; then the thread ends (w may be NULL). */
void dt_ckpt_writer_stop(dt_ckpt_writer *w);
/* With defer_copy: until the last submit's state is copied (w may be NULL;
 * returns at once when it is).  The optimizer's guard calls it. */
void dt_ckpt_writer_settle(dt_ckpt_writer *w);
/* The snapshot copies the writer keeps in the process's heap (the values
 * and moments it copies a checkpoint into before writing it), for a memory
 * account: bufs[i] the buffer of slot i (values, m, v; NULL: none, as
 * while it stages into tmpfs files, whose pages the kernel counts as shared
 * memory); returns the bytes of each (w NULL: 0). */
size_t dt_ckpt_writer_heap(dt_ckpt_writer *w, const void *bufs[3]);
/* Seconds the updates of o and dt_ckpt_writer_settle waited for deferred
 * copies so far (the copies' cost to the caller; submit's *stall_s is the
 * rest). */
double dt_ckpt_writer_waited(dt_ckpt_writer *w);
/* With defer_copy and staged files (memory snapshots): the next submit
 * comes right after the next optimizer update, so that update copies the
 * state into the snapshot itself (dt_optimizer_set_tee), each 64 KiB piece
 * right after writing it, from the cache, with its CRC; the submit's copy
 * is then only what the update did not write whole.  The update's first
 * guard plans the copy (it waits for the previous write); the submit ends
 * the tee.  Without defer_copy or staging (w may be NULL), nothing. */
void dt_ckpt_writer_arm(dt_ckpt_writer *w);
/* The share of deferred copies' pieces the tee copied so far (0 to 1);
 * *seconds (may be NULL): the time the tee took, its threads' together. */
double dt_ckpt_writer_teed(dt_ckpt_writer *w, double *seconds);

#ifdef __cplusplus
}
#endif
#endif
