/* The CUDA backend as a module of its own (libdtrain_cuda.so), loaded with
 * dlopen the first time a CUDA device or the NCCL backend is asked for
 * (src/tensor/cuda_loader.c), so that a CPU job neither loads the CUDA
 * libraries (cudart, cuBLASLt, NCCL: ~0.15 s and ~200 MB of pages at every
 * start) nor needs them installed.  The module exports one function; what
 * it returns is everything the library calls in it.  Its own symbols are
 * hidden (it resolves the library's against the program that loads it). */
#ifndef DT_CUDA_MODULE_H
#define DT_CUDA_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Raised when the table changes: a module of another version is refused. */
#define DT__CUDA_MODULE_ABI 1
#define DT__CUDA_MODULE_SYMBOL "dt__cuda_module_get"

struct dt_compute_ops;
struct dt__devmem;
struct dt__devmem_ipc;
struct dt__backend;
struct dt_comm;

typedef struct {
    int abi;      /* DT__CUDA_MODULE_ABI */
    size_t size;  /* sizeof(dt__cuda_module) */
    /* src/cuda/cuda.h's, the same contracts */
    dt_status (*init)(int device);
    dt_status (*describe)(char *buf, size_t n);
    int (*device_count)(void);
    void (*set_tf32)(bool on);
    const struct dt_compute_ops *(*ops)(void);
    const struct dt__devmem *(*devmem)(void);
    const struct dt__devmem_ipc *(*ipc)(void);
    /* the NCCL backend (src/comm/backend.h); NULL in a module without NCCL */
    const struct dt__backend *nccl_backend;
    dt_status (*nccl_comm_over)(struct dt_comm *host, uint32_t id, struct dt_comm **out);
} dt__cuda_module;

typedef const dt__cuda_module *(*dt__cuda_module_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
