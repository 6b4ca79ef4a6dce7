/* A build without the CUDA backend (DT_CUDA=OFF, or no toolkit found): no
 * cuda table, and the runtime calls of src/cuda/cuda.h refuse with the reason.
 * CMakeLists.txt compiles this file only when src/cuda/ is left out. */
#include "base/status.h"
#include "cuda/cuda.h"
#include "tensor/backend.h"

#define WHY "this dtrain was built without CUDA (configure with -DDT_CUDA=ON and the CUDA toolkit installed)"

const dt_compute_ops *dt__cuda_ops(void) { return NULL; }
const struct dt__devmem *dt__cuda_devmem(void) { return NULL; }
const struct dt__devmem_ipc *dt__cuda_ipc(void) { return NULL; }

dt_status dt__cuda_init(int device)
{
    (void)device;
    return dt__fail(DT_ERR_INVALID, WHY);
}

dt_status dt__cuda_describe(char *buf, size_t n)
{
    if (buf && n)
        buf[0] = '\0';
    return dt__fail(DT_ERR_INVALID, WHY);
}

void *dt__cuda_stream(void) { return NULL; }
size_t dt__cuda_free_bytes(void) { return 0; }
int dt__cuda_device_count(void) { return 0; }
void dt__cuda_set_tf32(bool on) { (void)on; }
bool dt__cuda_tf32(void) { return false; }
dt_status dt__cuda_take_error(void) { return DT_OK; }
