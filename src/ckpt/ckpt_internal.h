/* Internal to src/ckpt: the manifest's format names and in-memory form, and
 * the directory helpers the step, manifest and writer files share. */
#ifndef DT_CKPT_INTERNAL_H
#define DT_CKPT_INTERNAL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/ckpt.h"

/* Version 2 adds manifest_crc32; version 1 manifests (no checksum) still
 * open, with every value range-checked. */
#define DT__CKPT_FORMAT "dtrain-checkpoint-2"
#define DT__CKPT_FORMAT_V1 "dtrain-checkpoint-1"

/* The tensor files a checkpoint may hold, in the manifest's order. */
#define DT__CKPT_MODEL "model.safetensors"
#define DT__CKPT_OPTIM_M "optim_m.safetensors"
#define DT__CKPT_OPTIM_V "optim_v.safetensors"

/* The name of rank r's shard file of n. */
#define DT__CKPT_SHARD_FMT "zero-shard-%05d-of-%05d.safetensors"
#define DT__CKPT_SHARD_TENSORS_MAX 8

/* A manifest's "sharding", parsed and checked (shards.c); sh.nranks 0: none. */
typedef struct {
    dt_ckpt_sharding sh;
    dt_ckpt_unit *units;
    const char *tensors[DT__CKPT_SHARD_TENSORS_MAX]; /* into the manifest's JSON */
    const char **files;                              /* the same: sh.nranks names */
    int64_t shard_numel;
} dt__ckpt_shards;

struct dt_ckpt_manifest {
    char dir[DT_CKPT_PATH_MAX];  /* the step directory */
    char path[DT_CKPT_PATH_MAX]; /* its manifest.json */
    cJSON *json;
    char *config; /* "config" printed compactly, or NULL */
    dt__ckpt_shards shards;
};

/* One tensor file of a checkpoint as the manifest lists it. */
typedef struct {
    const char *name;
    uint64_t bytes;
    uint32_t crc;
} dt__ckpt_file;

/* snprintf into out, DT_ERR_INVALID "path too long" when it does not fit. */
dt_status dt__ckpt_path(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Remove a flat directory (a checkpoint holds only files); best effort. */
void dt__ckpt_remove_dir(const char *path);
/* dt_ckpt_save_sharded; elsewhere: a shard file missing from the temporary
 * directory was written on another host (dt_ckpt_writer_shards_elsewhere),
 * its size and CRC recorded as its rank reported them. */
dt_status dt__ckpt_save_sharded(const char *root, dt_params *p, const dt_ckpt_tensors *t, const dt_ckpt_meta *meta,
                                const dt_ckpt_progress *pr, const dt_ckpt_sharding *sh,
                                const dt_ckpt_shard_file *files, bool elsewhere, char *written, size_t written_len);
/* fsync a directory, so that renames in it are durable; best effort. */
void dt__ckpt_fsync_dir(const char *path);

/* CRC-32 as zlib's crc32() computes it, continuing crc (0 to start): by
 * ISA-L when the build found it, else by zlib (crc32.c).  The two named
 * forms exist so a test can hold them equal; _isal is false when absent. */
uint32_t dt__crc32(uint32_t crc, const void *data, size_t len);
uint32_t dt__crc32_zlib(uint32_t crc, const void *data, size_t len);
bool dt__crc32_isal(uint32_t crc, const void *data, size_t len, uint32_t *out);
/* The CRC-32 of A then B from A's, B's and B's length (zlib's combine). */
uint32_t dt__crc32_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b);
/* The same in two parts, for many B of one length: op = _gen(len_b) once,
 * then _op(crc_a, crc_b, op) for each (a multiplication, no loop over
 * len_b's bits). */
uint32_t dt__crc32_combine_gen(size_t len_b);
uint32_t dt__crc32_combine_op(uint32_t crc_a, uint32_t crc_b, uint32_t op);

/* A copy of the state's arrays (slots 0-2: values, m, v; those with a
 * destination) in numbered pieces of 64 KiB, so that several threads may
 * take them in turn (the taking is the caller's: state_copy.c only copies).
 * Plan: the arrays (bytes each) and whether each piece's CRC-32 is taken
 * (right after its copy, in the cache); the plan keeps its CRC array from
 * one use to the next.  Piece k: 0 <= k < pieces, each exactly once.
 * Crcs: each array's CRC-32 (out[slot]) once every piece is copied. */
typedef struct {
    const unsigned char *src[3];
    unsigned char *dst[3];
    int slot[3]; /* the arrays' slots */
    int arrays, slot_pieces, pieces;
    size_t bytes;
    bool crc;
    uint32_t *piece_crc;
    _Atomic unsigned char *done; /* by piece: copied by a tee since the plan */
    int capacity;
} dt__state_copy;
dt_status dt__state_copy_plan(dt__state_copy *c, const float *const src[3], float *const dst[3], size_t bytes,
                              bool crc);
void dt__state_copy_piece(dt__state_copy *c, int k);
/* The elements [offset, offset + n) of the arrays were just written, and
 * written[slot] holds them (an optimizer's tee, dt_optimizer_set_tee; any
 * thread): the pieces they cover whole, at the source's own addresses, are
 * copied now (the CRC taken) and marked done; the other pieces they touch
 * are marked not done (their copy, if any, is stale). */
void dt__state_copy_tee(dt__state_copy *c, int64_t offset, int64_t n, const float *const written[3]);
/* Whether the plan reads the arrays src (by slot; those it copies). */
bool dt__state_copy_reads(const dt__state_copy *c, const float *const src[3]);
/* Whether piece k was copied by a tee (and needs no copy now). */
bool dt__state_copy_done(const dt__state_copy *c, int k);
/* The elements in a piece of each array. */
#define DT__STATE_COPY_PIECE_FLOATS ((int64_t)16384)
void dt__state_copy_crcs(const dt__state_copy *c, uint32_t out[3]);
void dt__state_copy_free(dt__state_copy *c);

/* CRC-32 of the manifest's canonical text: cJSON's compact print of
 * it without the manifest_crc32 member.  false when out of memory. */
bool dt__ckpt_manifest_crc(cJSON *m, uint32_t *crc);
/* Write dir/manifest.json (atomically) for the files, meta and pr, with
 * "sharding" for sh (NULL: none). */
dt_status dt__ckpt_manifest_write(const char *dir, const dt__ckpt_file *files, int nfiles,
                                  const dt_ckpt_meta *meta, const dt_ckpt_progress *pr,
                                  const dt_ckpt_sharding *sh);
/* Read and parse step_dir/manifest.json: the format, its checksum and
 * "sharding"'s structure always, the files' sizes and CRC-32s when
 * check_files. */
dt_status dt__ckpt_manifest_read(const char *step_dir, bool check_files, dt_ckpt_manifest **out);

/* The safetensors header of p's flat layout (one F32 tensor per parameter at
 * its flat offset x 4) with the metadata (key, value, ..., NULL): the
 * 8-byte length and the JSON padded with spaces to a multiple of 8, and to
 * at_least bytes in all when that is larger (a multiple of 8; 0: none);
 * caller frees. */
dt_status dt__safetensors_header(dt_params *p, const char *const *metadata, size_t at_least, unsigned char **out,
                                 size_t *len);
/* model.safetensors' __metadata__ for meta and step (format, producer,
 * dtrain_version, model, step; NULL-terminated), step's text in step_text. */
void dt__ckpt_model_metadata(const dt_ckpt_meta *meta, int64_t step, char step_text[32], const char *out[12]);
/* root/.step-NNNNNNNN.tmp, where a step is written before its rename. */
dt_status dt__ckpt_tmp_dir(const char *root, int64_t step, char *out, size_t len);

/* A file that replaces `path` atomically, written in pieces: open (a
 * temporary name beside it), append, then commit (fsync, rename, fsync of
 * the directory); a failed append or commit removes the temporary file,
 * abandon too (no-op after either). */
typedef struct {
    int fd;
    uint64_t written; /* bytes appended: the file's size at the commit (a reused file may be longer) */
    char path[DT_CKPT_PATH_MAX], tmp[DT_CKPT_PATH_MAX + 32];
} dt__atomic_file;
/* Files of pruned checkpoints kept for reuse under ROOT/.spare/NAME, on
 * tmpfs only (in-memory checkpoints, issue 49): a tmpfs file's pages are
 * allocated as it is written and freed when it is truncated or unlinked
 * (reusing them took a gpt-mini snapshot's write from 37 to 29 ms).
 * dt_ckpt_prune moves a pruned directory's files there; dt__atomic_open
 * takes ROOT/.spare/NAME for a file ROOT/DIR/NAME when it is there and
 * writes over its pages; the commit truncates it to what was written. */
#define DT__CKPT_SPARE ".spare"
/* True when dir is on tmpfs (memory): no read-back, files recycled. */
bool dt__ckpt_in_memory(const char *dir);
dt_status dt__atomic_open(dt__atomic_file *f, const char *path);
dt_status dt__atomic_append(dt__atomic_file *f, const void *bytes, size_t len);
dt_status dt__atomic_commit(dt__atomic_file *f);
void dt__atomic_abandon(dt__atomic_file *f);

/* The mappings of staged files, kept from one staging to the next (the
 * writer's): a snapshot's files come back as the staging of the one keep+1
 * snapshots later (pruned into ROOT/.spare), and a file found here (the
 * same inode and size) is used through its mapping again: no fallocate,
 * no mmap populating its pages, no munmap (6 of a gpt-mini snapshot's
 * 10.5 ms).  An entry no staging used in the last `horizon` ones (its file
 * was removed, not recycled) is unmapped; so is the least recently used
 * one when the table is full.  The kept snapshots' pages then count in the
 * process's RSS (RssShmem): they are in /dev/shm either way. */
#define DT__CKPT_MAPS_MAX 24
typedef struct {
    uint64_t dev, ino, used; /* used: the staging (count) that last took it */
    size_t len;
    unsigned char *map;
} dt__ckpt_map;
typedef struct {
    dt__ckpt_map e[DT__CKPT_MAPS_MAX];
    int n;
    int horizon;           /* stagings an unused mapping survives (at least 1) */
    uint64_t opens;        /* stagings opened */
    uint64_t made, reused; /* files mapped anew; files found mapped (tests, benchmarks) */
} dt__ckpt_maps;
/* Unmap every entry (the table stays usable). */
void dt__ckpt_maps_clear(dt__ckpt_maps *maps);
/* The writer's table (tests; read it with no write in flight). */
const dt__ckpt_maps *dt__ckpt_writer_maps(dt_ckpt_writer *w);

/* A memory checkpoint's tensor files (slots 0-2: the model, the first and
 * the second moment; want[] says which), staged in ROOT/.staging, sized,
 * allocated (a pruned snapshot's spares taken first) and mapped (through
 * maps when not NULL: see dt__ckpt_maps), so the state is copied straight
 * into them (dt__ckpt_staging_data: a slot's data, NULL when absent; the
 * header's bytes reserved before it).  _files: the names present, in slot
 * order.  Seal writes the header of a step into each, padded to the
 * reserve, and fills files[] (name, size, CRC-32) in slot order; data_crc
 * (by slot; NULL: computed here) are the CRC-32s of the slots' data as
 * copied (dt__crc32_copy).  Release gives up the mappings (unmapped unless
 * maps keeps them); a sealed staging is moved into a step by
 * dt__ckpt_save_staged.  Close releases and removes the files.  For tmpfs
 * roots only: there the copy into the pages is the write (the writer
 * keeps it off disks, where a mapped file's pages would be flushed at the
 * kernel's pace). */
typedef struct {
    bool present[3]; /* files staged (by slot) */
    unsigned char *map[3];
    size_t head, len; /* the header bytes reserved; each file's bytes */
    dt__ckpt_maps *maps;
    char dir[DT_CKPT_PATH_MAX];
} dt__ckpt_staging;
dt_status dt__ckpt_staging_open(dt__ckpt_staging *st, const char *root, dt_params *p, const dt_ckpt_meta *meta,
                                const bool want[3], dt__ckpt_maps *maps);
float *dt__ckpt_staging_data(const dt__ckpt_staging *st, int slot);
int dt__ckpt_staging_files(const dt__ckpt_staging *st, const char *names[3]);
dt_status dt__ckpt_staging_seal(dt__ckpt_staging *st, dt_params *p, const dt_ckpt_meta *meta, int64_t step,
                                const uint32_t *data_crc, dt__ckpt_file *files);
void dt__ckpt_staging_release(dt__ckpt_staging *st);
void dt__ckpt_staging_close(dt__ckpt_staging *st);
/* dt_ckpt_save of a sealed and released staging: its files moved into the
 * step's directory, with the sizes and CRCs files[] holds. */
dt_status dt__ckpt_save_staged(const char *root, dt_params *p, const dt_ckpt_meta *meta, const dt_ckpt_progress *pr,
                               const dt__ckpt_staging *st, const dt__ckpt_file *files, char *written,
                               size_t written_len);

/* Atomically replace `path` with the n parts one after the other. */
dt_status dt__ckpt_atomic_write_parts(const char *path, const void *const *parts, const size_t *lens, int n);

/* shards.c: "sharding" as JSON (sh->nranks files named by rank); parse and
 * check one read from a manifest (m->dir names it in errors); free it; the
 * shard files' headers against it (dt_ckpt_manifest_check_tensors). */
cJSON *dt__ckpt_sharding_json(const dt_ckpt_sharding *sh);
dt_status dt__ckpt_sharding_parse(const dt_ckpt_manifest *m, const cJSON *json, dt__ckpt_shards *out);
void dt__ckpt_sharding_free(dt__ckpt_shards *s);
bool dt__ckpt_is_shard_file(const dt_ckpt_manifest *m, const char *name);
dt_status dt__ckpt_check_shard_file(const dt_ckpt_manifest *m, const char *name);

#endif
