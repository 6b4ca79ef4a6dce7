/* An allocator's high-water mark: the bytes a device backend's `alloc`
 * holds, counted by pointer (cudaFree and the emu free are not told the
 * size), so that mem_peak can say the most it held at once.  Thread-safe;
 * one tracker per backend, in static storage (zero-initialised). */
#ifndef DT_TENSOR_MEMTRACK_H
#define DT_TENSOR_MEMTRACK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dt__memtrack {
    struct memtrack_slot *slots; /* open addressing, a power of two long */
    size_t cap, used, bytes, peak;
} dt__memtrack;

/* p (not NULL) now holds `bytes`.  Out of memory for the table: the bytes
 * still count, and the later remove of p finds nothing (the current count
 * then stays high: a peak too large, never too small). */
void dt__memtrack_add(dt__memtrack *t, const void *p, size_t bytes);
/* p was freed (NULL or unknown: nothing). */
void dt__memtrack_remove(dt__memtrack *t, const void *p);
size_t dt__memtrack_peak(dt__memtrack *t);

#ifdef __cplusplus
}
#endif
#endif
