/* An optimizer's state kept in a file instead of memory (ZeRO-Infinity's
 * NVMe offload, on the local disk): `arrays` arrays of `numel` floats, read
 * and written in windows of DT__OFFLOAD_WINDOW elements through an I/O
 * thread, two windows in memory.  While the optimizer updates window w the
 * thread writes back window w-1 and reads window w+1 (an update walks the
 * state in order), so the update overlaps the disk.  The file is unlinked
 * as soon as it is open: it disappears with the process, also on a crash. */
#ifndef DT_OPTIM_OFFLOAD_H
#define DT_OPTIM_OFFLOAD_H

#include <stdint.h>

#include "dtrain/base.h"

#define DT__OFFLOAD_WINDOW (1 << 20)
#define DT__OFFLOAD_MAX_ARRAYS 2

typedef struct dt__offload dt__offload;

/* A file in dir holding `init` (arrays x numel floats, array after array);
 * `what` (a string that outlives it) starts its messages. */
dt_status dt__offload_open(const char *dir, const char *what, int arrays, int64_t numel, const float *init, dt__offload **out);
/* Window w's arrays (each from element w x DT__OFFLOAD_WINDOW, *count
 * elements), in memory until released; starts reading window w+1. */
dt_status dt__offload_acquire(dt__offload *f, int64_t w, float **arrays, int64_t *count);
/* Window w was updated: written back behind the next computation. */
dt_status dt__offload_release(dt__offload *f, int64_t w);
/* Wait until every write has reached the file (the end of a step). */
dt_status dt__offload_flush(dt__offload *f);
/* The whole state into out / from in (arrays x numel floats): checkpoints. */
dt_status dt__offload_read_all(dt__offload *f, float *out);
dt_status dt__offload_write_all(dt__offload *f, const float *in);
/* Elements [at, at + n) of array a into out, straight from the file (after
 * a flush: what the windows updated is there): a reader that needs a
 * part of the array out of window order (ZeRO-3's gathers). */
dt_status dt__offload_read_range(dt__offload *f, int a, int64_t at, int64_t n, float *out);
/* Bytes moved so far. */
void dt__offload_io(const dt__offload *f, uint64_t *read, uint64_t *written);
void dt__offload_close(dt__offload *f);

#endif
