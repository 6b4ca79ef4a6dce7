/* The CUDA backend's entry points in the library: each loads the CUDA module
 * (libdtrain_cuda.so, src/cuda/module.h) the first time one is called and
 * forwards to it, so that only a job that asks for a CUDA device or the NCCL
 * backend loads the CUDA libraries.  Where the build has no module, or it
 * cannot be loaded, they refuse with the reason (a GPU count of 0). */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"
#include "base/status.h"
#include "comm/backend.h"
#include "cuda/cuda.h"
#include "cuda/module.h"
#include "tensor/backend.h"

#ifndef DT_CUDA_MODULE_FILE /* (CMakeLists.txt: the module's file name, in a build that makes one) */
#define WHY_ABSENT "this dtrain was built without CUDA (configure with -DDT_CUDA=ON and the CUDA toolkit installed)"
#endif

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const dt__cuda_module *mod;
static char why[1536]; /* why mod is NULL */

#ifdef DT_CUDA_MODULE_FILE
/* dir/DT_CUDA_MODULE_FILE loaded into mod; false with the reason appended to why. */
static bool try_load(const char *path)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        size_t at = strlen(why);
        snprintf(why + at, sizeof why - at, "%s%s", at ? "; " : "", e ? e : path);
        return false;
    }
    dt__cuda_module_fn get = (dt__cuda_module_fn)dlsym(h, DT__CUDA_MODULE_SYMBOL);
    const dt__cuda_module *m = get ? get() : NULL;
    if (!m || m->abi != DT__CUDA_MODULE_ABI || m->size != sizeof *m) {
        size_t at = strlen(why);
        snprintf(why + at, sizeof why - at, "%s%s: %s", at ? "; " : "", path,
                 !m ? "not a dtrain CUDA module" : "a CUDA module of another dtrain version");
        dlclose(h);
        return false;
    }
    mod = m; /* (never closed: its kernels and library state live as long as the process) */
    return true;
}

/* The module next to the program (a build tree's bin/), in the installed
 * layout's lib/dtrain/ beside it, next to the library that holds this code,
 * or DT_CUDA_MODULE. */
static void load(void)
{
    const char *env = dt__env_str("DT_CUDA_MODULE");
    if (env && *env) {
        try_load(env);
        return;
    }
    char exe[PATH_MAX], path[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(path, sizeof path, "%s/%s", exe, DT_CUDA_MODULE_FILE);
            if (access(path, F_OK) == 0 && try_load(path))
                return;
            if (DT_INSTALL_LIBDIR[0] == '/') /* (CMAKE_INSTALL_LIBDIR given absolute) */
                snprintf(path, sizeof path, "%s/dtrain/%s", DT_INSTALL_LIBDIR, DT_CUDA_MODULE_FILE);
            else
                snprintf(path, sizeof path, "%s/../%s/dtrain/%s", exe, DT_INSTALL_LIBDIR, DT_CUDA_MODULE_FILE);
            if (access(path, F_OK) == 0 && try_load(path))
                return;
        }
    }
    Dl_info info;
    if (dladdr((void *)load, &info) && info.dli_fname) {
        snprintf(exe, sizeof exe, "%s", info.dli_fname);
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(path, sizeof path, "%s/dtrain/%s", exe, DT_CUDA_MODULE_FILE);
            if (access(path, F_OK) == 0 && try_load(path))
                return;
        }
    }
    if (try_load(DT_CUDA_MODULE_FILE)) /* the loader's search path (LD_LIBRARY_PATH) */
        return;
    size_t at = strlen(why);
    snprintf(why + at, sizeof why - at, " (set DT_CUDA_MODULE to the path of %s)", DT_CUDA_MODULE_FILE);
}
#else
static void load(void) { snprintf(why, sizeof why, "%s", WHY_ABSENT); }
#endif

/* The module, or NULL with the error set naming why. */
static const dt__cuda_module *module(void)
{
    pthread_once(&once, load);
    if (!mod)
#ifdef DT_CUDA_MODULE_FILE
        dt__fail(DT_ERR_INVALID, "the CUDA backend: %s", why);
#else
        dt__fail(DT_ERR_INVALID, "%s", why);
#endif
    return mod;
}

/* The module, or NULL (no error set: a caller with an answer for that). */
static const dt__cuda_module *quiet(void)
{
    pthread_once(&once, load);
    return mod;
}

dt_status dt__cuda_init(int device)
{
    const dt__cuda_module *m = module();
    return m ? m->init(device) : DT_ERR_INVALID;
}

dt_status dt__cuda_describe(char *buf, size_t n)
{
    if (buf && n)
        buf[0] = '\0';
    const dt__cuda_module *m = module();
    return m ? m->describe(buf, n) : DT_ERR_INVALID;
}

int dt__cuda_device_count(void)
{
    const dt__cuda_module *m = quiet();
    return m ? m->device_count() : 0;
}

void dt__cuda_set_tf32(bool on)
{
    const dt__cuda_module *m = quiet();
    if (m)
        m->set_tf32(on);
}

const dt_compute_ops *dt__cuda_ops(void)
{
    const dt__cuda_module *m = quiet();
    return m ? m->ops() : NULL;
}

const struct dt__devmem *dt__cuda_devmem(void)
{
    const dt__cuda_module *m = quiet();
    return m ? m->devmem() : NULL;
}

const struct dt__devmem_ipc *dt__cuda_ipc(void)
{
    const dt__cuda_module *m = quiet();
    return m ? m->ipc() : NULL;
}

const dt__backend *dt__nccl_backend_get(void)
{
    const dt__cuda_module *m = module();
    if (m && !m->nccl_backend)
        dt__fail(DT_ERR_INVALID, "the CUDA module has no NCCL backend (it was built without NCCL: install libnccl-dev and rebuild)");
    return m ? m->nccl_backend : NULL;
}

dt_status dt__nccl_comm_over(dt_comm *host, uint32_t id, dt_comm **out)
{
    const dt__backend *b = dt__nccl_backend_get();
    return b ? module()->nccl_comm_over(host, id, out) : DT_ERR_INVALID;
}
