/* Writing a checkpoint: every file into a hidden temporary directory, the
 * manifest last, then one rename, so a step directory is whole or absent. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include "base/status.h"
#include "base/trace.h"
#include "ckpt/ckpt_internal.h"
#include "dtrain/version.h"

void dt__ckpt_model_metadata(const dt_ckpt_meta *meta, int64_t step, char step_text[32], const char *out[12])
{
    /* safetensors __metadata__ (strings only): what a reader outside dtrain
     * needs to rebuild the model (scripts/dtrain_to_torch.py) */
    snprintf(step_text, 32, "%" PRId64, step);
    const char *md[12] = {"format",         "pt",           "producer", "dtrain",
                          "dtrain_version", DTRAIN_VERSION, "model",    meta->model_json ? meta->model_json : "{}",
                          "step",           step_text,      NULL,       NULL};
    memcpy(out, md, sizeof md);
}

/* Whether dir is in memory (tmpfs: the in-memory snapshots under
 * /dev/shm): there a file read back is the very pages just written, so the
 * CRC taken while writing them stands for it. */
bool dt__ckpt_in_memory(const char *dir)
{
    struct statfs fs;
    return statfs(dir, &fs) == 0 && fs.f_type == 0x01021994; /* TMPFS_MAGIC */
}

/* The tensor files t has, then the manifest (listing the shard files
 * already in dir too, when sh), into dir. */
static dt_status write_files(const char *dir, dt_params *p, const dt_ckpt_tensors *t,
                             const dt_ckpt_meta *meta, const dt_ckpt_progress *pr, const dt_ckpt_sharding *sh,
                             const dt_ckpt_shard_file *shards, bool elsewhere)
{
    const struct {
        const char *name;
        const float *data;
    } want[] = {{DT__CKPT_MODEL, t->values}, {DT__CKPT_OPTIM_M, t->m}, {DT__CKPT_OPTIM_V, t->v}};
    char step_text[32];
    const char *metadata[12];
    dt__ckpt_model_metadata(meta, pr->step, step_text, metadata);
    int nshards = sh ? sh->nranks : 0, n = 0;
    dt__ckpt_file *files = malloc((size_t)(3 + nshards) * sizeof *files);
    if (!files)
        return dt__fail(DT_ERR_NOMEM, "checkpoint not written: out of memory");
    if (!t->values) { /* model.safetensors is there already (dt_ckpt_model_open): as it is on disk */
        char path[DT_CKPT_PATH_MAX];
        dt__ckpt_file *f = &files[n++];
        f->name = DT__CKPT_MODEL;
        dt_status s = dt__ckpt_path(path, sizeof path, "%s/" DT__CKPT_MODEL, dir);
        if (s == DT_OK)
            s = dt_file_crc32(path, &f->crc, &f->bytes);
        if (s != DT_OK) {
            free(files);
            return dt__wrap(s, "checkpoint not written: ");
        }
    }
    bool memory = dt__ckpt_in_memory(dir);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        if (!want[i].data)
            continue;
        char path[DT_CKPT_PATH_MAX];
        dt__ckpt_file *f = &files[n++];
        f->name = want[i].name;
        dt_status s = dt__ckpt_path(path, sizeof path, "%s/%s", dir, want[i].name);
        if (s == DT_OK)
            s = dt_safetensors_write(path, p, want[i].data, metadata, &f->crc);
        struct stat st;
        if (s == DT_OK && memory) /* the pages just written: the CRC of the write, the size they have */
            s = stat(path, &st) == 0 ? (f->bytes = (uint64_t)st.st_size, DT_OK)
                                     : dt__fail_errno(DT_ERR_SYSTEM, "cannot stat %s", path);
        else if (s == DT_OK) /* the bytes on disk, read back */
            s = dt_file_crc32(path, &f->crc, &f->bytes);
        if (s != DT_OK) {
            free(files);
            return dt__wrap(s, "checkpoint not written: ");
        }
    }
    for (int r = 0; r < nshards; r++) { /* the ranks wrote them: there, with the size each reported */
        char path[DT_CKPT_PATH_MAX], want_name[64];
        struct stat st;
        dt_status s = dt_ckpt_shard_name(r, nshards, want_name, sizeof want_name);
        if (s == DT_OK && strcmp(shards[r].name, want_name) != 0)
            s = dt__fail(DT_ERR_INVALID, "shard %d is named %.64s, not %s", r, shards[r].name, want_name);
        if (s == DT_OK)
            s = dt__ckpt_path(path, sizeof path, "%s/%s", dir, shards[r].name);
        bool absent = s == DT_OK && stat(path, &st) != 0 && errno == ENOENT;
        if (s == DT_OK && !(absent && elsewhere) &&
            (absent || stat(path, &st) != 0 || (uint64_t)st.st_size != shards[r].bytes))
            s = dt__fail(DT_ERR_INVALID, "rank %d's shard %s is missing or not the %llu bytes it wrote", r,
                         path, (unsigned long long)shards[r].bytes);
        if (s != DT_OK) {
            free(files);
            return dt__wrap(s, "checkpoint not written: ");
        }
        files[n++] = (dt__ckpt_file){shards[r].name, shards[r].bytes, shards[r].crc};
    }
    dt_status s = dt__ckpt_manifest_write(dir, files, n, meta, pr, sh);
    free(files);
    return s;
}

/* A sealed staging's files moved into dir, then the manifest. */
static dt_status move_staged(const char *dir, const dt__ckpt_staging *st, const dt__ckpt_file *files,
                             const dt_ckpt_meta *meta, const dt_ckpt_progress *pr)
{
    const char *names[3];
    int n = dt__ckpt_staging_files(st, names);
    for (int i = 0; i < n; i++) {
        char from[DT_CKPT_PATH_MAX + 64], to[DT_CKPT_PATH_MAX + 64];
        snprintf(from, sizeof from, "%s/%s", st->dir, names[i]);
        snprintf(to, sizeof to, "%s/%s", dir, names[i]);
        if (rename(from, to) != 0)
            return dt__fail_errno(DT_ERR_SYSTEM, "checkpoint not written: cannot move %s to %s", from, to);
    }
    return dt__ckpt_manifest_write(dir, files, n, meta, pr, NULL);
}

/* sh NULL: a fresh temporary directory; else the one the ranks wrote their
 * shards into.  staged (t NULL): a sealed staging's files, moved in. */
static dt_status save(const char *root, dt_params *p, const dt_ckpt_tensors *t, const dt_ckpt_meta *meta,
                      const dt_ckpt_progress *pr, const dt_ckpt_sharding *sh,
                      const dt_ckpt_shard_file *shards, bool elsewhere, const dt__ckpt_staging *staged,
                      const dt__ckpt_file *staged_files, char *written, size_t written_len)
{
    if (staged && (t || sh || !staged_files))
        return dt__fail(DT_ERR_INVALID, "checkpoint not written: a staging is saved alone");
    if (!root || !p || (!staged && (!t || (!t->values && !sh))) || !meta || !pr)
        return dt__fail(DT_ERR_INVALID, "dt_ckpt_save: root, p, t, t->values (unless sharded), meta and pr are "
                                        "required");
    if (sh && (t->m || t->v || !shards || sh->nranks < 1))
        return dt__fail(DT_ERR_INVALID,
                        "dt_ckpt_save_sharded: the moments are in the shards (t->m and t->v NULL), "
                        "and every rank's shard file is required");
    char step_dir[DT_CKPT_PATH_MAX], tmp_dir[DT_CKPT_PATH_MAX], old_dir[DT_CKPT_PATH_MAX];
    DT_CHECK(dt_ckpt_step_dir(root, pr->step, step_dir, sizeof step_dir));
    DT_CHECK(dt__ckpt_path(tmp_dir, sizeof tmp_dir, "%s/.step-%08" PRId64 ".tmp", root, pr->step));
    DT_CHECK(dt__ckpt_path(old_dir, sizeof old_dir, "%s/.step-%08" PRId64 ".old", root, pr->step));
    if (mkdir(root, 0755) != 0 && errno != EEXIST)
        return dt__fail_errno(DT_ERR_SYSTEM, "cannot create checkpoint directory %s", root);
    if (!sh) {
        dt__ckpt_remove_dir(tmp_dir); /* left by a writer that died */
        if (mkdir(tmp_dir, 0755) != 0)
            return dt__fail_errno(DT_ERR_SYSTEM, "cannot create %s", tmp_dir);
    }
    dt_status s = staged ? move_staged(tmp_dir, staged, staged_files, meta, pr)
                         : write_files(tmp_dir, p, t, meta, pr, sh, shards, elsewhere);
    /* The step directory appears whole, by one rename; one already there for
     * this step (a run restarted from an earlier one) is replaced. */
    if (s == DT_OK && rename(step_dir, old_dir) != 0 && errno != ENOENT)
        s = dt__fail_errno(DT_ERR_SYSTEM, "cannot replace %s", step_dir);
    if (s == DT_OK && rename(tmp_dir, step_dir) != 0)
        s = dt__fail_errno(DT_ERR_SYSTEM, "cannot rename %s into place", tmp_dir);
    if (s != DT_OK) {
        dt__ckpt_remove_dir(tmp_dir);
        return s;
    }
    dt__ckpt_remove_dir(old_dir);
    dt__ckpt_fsync_dir(root); /* make the rename durable */
    if (written)
        snprintf(written, written_len, "%s", step_dir);
    return DT_OK;
}

/* save() as one timeline span. */
static dt_status traced_save(const char *root, dt_params *p, const dt_ckpt_tensors *t, const dt_ckpt_meta *meta,
                             const dt_ckpt_progress *pr, const dt_ckpt_sharding *sh, const dt_ckpt_shard_file *files,
                             bool elsewhere, const dt__ckpt_staging *staged, const dt__ckpt_file *staged_files,
                             char *written, size_t written_len)
{
    int64_t t0 = dt__trace_begin();
    dt_status s = save(root, p, t, meta, pr, sh, files, elsewhere, staged, staged_files, written, written_len);
    if (t0)
        dt__trace_end("checkpoint", "checkpoint write", t0, "\"step\":%lld,\"sharded\":%s",
                      pr ? (long long)pr->step : -1LL, sh ? "true" : "false");
    return s;
}

dt_status dt_ckpt_save(const char *root, dt_params *p, const dt_ckpt_tensors *t, const dt_ckpt_meta *meta,
                       const dt_ckpt_progress *pr, char *written, size_t written_len)
{
    return traced_save(root, p, t, meta, pr, NULL, NULL, false, NULL, NULL, written, written_len);
}

dt_status dt__ckpt_save_staged(const char *root, dt_params *p, const dt_ckpt_meta *meta, const dt_ckpt_progress *pr,
                               const dt__ckpt_staging *st, const dt__ckpt_file *files, char *written,
                               size_t written_len)
{
    return traced_save(root, p, NULL, meta, pr, NULL, NULL, false, st, files, written, written_len);
}

dt_status dt_ckpt_save_sharded(const char *root, dt_params *p, const dt_ckpt_tensors *t,
                               const dt_ckpt_meta *meta, const dt_ckpt_progress *pr,
                               const dt_ckpt_sharding *sh, const dt_ckpt_shard_file *files, char *written,
                               size_t written_len)
{
    return dt__ckpt_save_sharded(root, p, t, meta, pr, sh, files, false, written, written_len);
}

dt_status dt__ckpt_save_sharded(const char *root, dt_params *p, const dt_ckpt_tensors *t, const dt_ckpt_meta *meta,
                                const dt_ckpt_progress *pr, const dt_ckpt_sharding *sh,
                                const dt_ckpt_shard_file *files, bool elsewhere, char *written, size_t written_len)
{
    if (!sh || sh->stage < 1 || sh->stage > 3 || sh->ntensors < 1 ||
        sh->ntensors > DT__CKPT_SHARD_TENSORS_MAX || !sh->tensors || dt_ckpt_shard_numel(sh) < 0)
        return dt__fail(DT_ERR_INVALID,
                        "dt_ckpt_save_sharded: a bad sharding (stage %d, %d ranks, %d tensors)",
                        sh ? sh->stage : -1, sh ? sh->nranks : -1, sh ? sh->ntensors : -1);
    return traced_save(root, p, t, meta, pr, sh, files, elsewhere, NULL, NULL, written, written_len);
}
