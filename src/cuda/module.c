/* The table libdtrain_cuda.so hands the library (src/cuda/module.h). */
#include "cuda/module.h"

#include "comm/backend.h"
#include "cuda/cuda.h"
#include "tensor/backend.h"

#ifdef DT_HAVE_NCCL
#define NCCL_BACKEND (&dt__nccl_backend)
#define NCCL_OVER dt__nccl_comm_over
#else
#define NCCL_BACKEND NULL
#define NCCL_OVER NULL
#endif

static const dt__cuda_module module = {
    .abi = DT__CUDA_MODULE_ABI,
    .size = sizeof(dt__cuda_module),
    .init = dt__cuda_init,
    .describe = dt__cuda_describe,
    .device_count = dt__cuda_device_count,
    .set_tf32 = dt__cuda_set_tf32,
    .ops = dt__cuda_ops,
    .devmem = dt__cuda_devmem,
    .ipc = dt__cuda_ipc,
    .nccl_backend = NCCL_BACKEND,
    .nccl_comm_over = NCCL_OVER,
};

/* The one symbol the module exports. */
__attribute__((visibility("default"))) const dt__cuda_module *dt__cuda_module_get(void);
const dt__cuda_module *dt__cuda_module_get(void) { return &module; }
