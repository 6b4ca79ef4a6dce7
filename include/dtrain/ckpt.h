/* dtrain checkpoint files.
 *
 * Tensors are stored in the safetensors format (8-byte little-endian header
 * length, a JSON header naming every tensor's dtype, shape and byte range,
 * then the raw data), which PyTorch's safetensors reader loads.  Every file is
 * written atomically: a temporary file in the same directory, fsync, rename,
 * then fsync of the directory, so a crash leaves the old file or the new one,
 * never a torn one. */
#ifndef DTRAIN_CKPT_H
#define DTRAIN_CKPT_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/base.h"
#include "dtrain/nn.h"

#ifdef __cplusplus
extern "C" {
#endif

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

#ifdef __cplusplus
}
#endif
#endif
