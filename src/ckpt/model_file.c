/* model.safetensors written range by range, for a sharded checkpoint whose
 * values no rank holds whole (ZeRO-3: each unit's slices are gathered onto
 * the writer's rank and put at once, so the writer holds one unit, never
 * the model).  The file goes into the step's temporary directory under a
 * temporary name, is sized first (a range never put reads as zeros), and
 * appears under its name once fsynced; the step directory's rename makes it
 * part of a checkpoint. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/status.h"
#include "ckpt/ckpt_internal.h"

struct dt_ckpt_model_file {
    int fd;
    char path[DT_CKPT_PATH_MAX], tmp[DT_CKPT_PATH_MAX + 32];
    uint64_t data_at;   /* where the values start: after the header */
    int64_t numel;      /* the registry's */
    dt_status failed;   /* the first failure: later puts do nothing */
    char why[DT__ERROR_LEN];
};

/* Remember the first failure (its message) and return it. */
static dt_status fail_once(dt_ckpt_model_file *f, dt_status s)
{
    if (f->failed == DT_OK) {
        f->failed = s;
        snprintf(f->why, sizeof f->why, "%s", dt_last_error());
    }
    return dt__fail(f->failed, "%s", f->why);
}

static dt_status write_at(dt_ckpt_model_file *f, uint64_t at, const void *bytes, size_t len)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = pwrite(f->fd, (const unsigned char *)bytes + done, len - done, (off_t)(at + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return fail_once(f, dt__fail_errno(DT_ERR_SYSTEM, "cannot write %s (disk full?)", f->tmp));
        done += (size_t)n;
    }
    return DT_OK;
}

dt_status dt_ckpt_model_open(const char *root, int64_t step, dt_params *p, const dt_ckpt_meta *meta,
                             dt_ckpt_model_file **out)
{
    if (!out || !root || !p || !meta)
        return dt__fail(DT_ERR_INVALID, "dt_ckpt_model_open: root, p, meta and out are required");
    *out = NULL;
    dt_ckpt_model_file *f = calloc(1, sizeof *f);
    if (!f)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    f->fd = -1;
    f->numel = dt_params_numel(p);
    char dir[DT_CKPT_PATH_MAX], step_text[32];
    const char *metadata[12];
    unsigned char *header = NULL;
    size_t hlen = 0;
    dt__ckpt_model_metadata(meta, step, step_text, metadata);
    dt_status s = dt__ckpt_tmp_dir(root, step, dir, sizeof dir);
    if (s == DT_OK)
        s = dt__ckpt_path(f->path, sizeof f->path, "%s/" DT__CKPT_MODEL, dir);
    if (s == DT_OK)
        s = dt__ckpt_path(f->tmp, sizeof f->tmp, "%s.tmp.%d", f->path, (int)getpid());
    if (s == DT_OK)
        s = dt__safetensors_header(p, metadata, 0, &header, &hlen);
    if (s == DT_OK && (f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) < 0)
        s = dt__fail_errno(DT_ERR_SYSTEM, "cannot create %s", f->tmp);
    f->data_at = hlen;
    if (s == DT_OK)
        s = write_at(f, 0, header, hlen);
    if (s == DT_OK && ftruncate(f->fd, (off_t)(f->data_at + (uint64_t)f->numel * sizeof(float))) != 0)
        s = dt__fail_errno(DT_ERR_SYSTEM, "cannot size %s (disk full?)", f->tmp);
    free(header);
    if (s != DT_OK) {
        if (f->fd >= 0) {
            close(f->fd);
            unlink(f->tmp);
        }
        free(f);
        return s;
    }
    *out = f;
    return DT_OK;
}

dt_status dt_ckpt_model_put(dt_ckpt_model_file *f, int64_t offset, const float *data, int64_t n)
{
    if (!f)
        return dt__fail(DT_ERR_INVALID, "dt_ckpt_model_put: the file is NULL");
    if (f->failed != DT_OK)
        return dt__fail(f->failed, "%s", f->why);
    if (offset < 0 || n < 0 || offset > f->numel - n || (n > 0 && !data))
        return fail_once(f, dt__fail(DT_ERR_INVALID, "%s: values [%lld, %lld) outside the model's %lld", f->path,
                                     (long long)offset, (long long)(offset + n), (long long)f->numel));
    /* little-endian hosts: f32 bytes as they are */
    return write_at(f, f->data_at + (uint64_t)offset * sizeof(float), data, (size_t)n * sizeof(float));
}

dt_status dt_ckpt_model_close(dt_ckpt_model_file *f, bool keep)
{
    if (!f)
        return DT_OK;
    dt_status s = keep ? f->failed : DT_OK;
    if (s != DT_OK)
        dt__fail(s, "%s", f->why);
    if (s == DT_OK && keep && fsync(f->fd) != 0)
        s = dt__fail_errno(DT_ERR_SYSTEM, "cannot fsync %s", f->tmp);
    close(f->fd);
    if (s == DT_OK && keep && rename(f->tmp, f->path) != 0)
        s = dt__fail_errno(DT_ERR_SYSTEM, "cannot rename %s to %s", f->tmp, f->path);
    if (s != DT_OK || !keep)
        unlink(f->tmp);
    free(f);
    return s;
}
