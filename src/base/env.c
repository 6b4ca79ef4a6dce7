#include "base/env.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/status.h"

static const dt__tunable tunables[] = {
    {"DT_RANK", NULL, "rank of this process in the job (0..DT_WORLD_SIZE-1)"},
    {"DT_WORLD_SIZE", NULL, "number of ranks in the job"},
    {"DT_LOCAL_RANK", "0", "rank among the processes on this host"},
    {"DT_LOCAL_WORLD_SIZE", "1", "number of ranks on this host"},
    {"DT_MASTER_ADDR", "127.0.0.1", "address of the rendezvous store"},
    {"DT_MASTER_PORT", "29500", "TCP port of the rendezvous store"},
    {"DT_JOB_TOKEN", NULL, "shared secret of the job; proves membership (HMAC, never sent)"},
    {"DT_TOKEN_FILE", NULL, "file whose first line is the job token, read when DT_JOB_TOKEN is unset"},
    {"DT_STORE", "rank0", "who serves the rendezvous store: rank0 or external (dtrun)"},
    {"DT_TIMEOUT", "600", "seconds any blocking call may wait before DT_ERR_TIMEOUT"},
    {"DT_HEARTBEAT_TIMEOUT", "30", "seconds without a heartbeat (through the store), or without an answer from the store, after which a rank waiting on a peer declares it stopped, frozen or cut off; 0: off"},
    {"DT_ALGO", "auto", "force a collective algorithm: auto, ring (alltoall: pairwise), rd (recursive doubling / trees; alltoall: all at once), rhd (recursive halving-doubling; alltoall: Bruck's exchange), direct (allreduce: every rank to every rank), shm (all ranks on one host: through one shared arena)"},
    {"DT_STAGE_CHUNK", "2097152", "bytes per chunk when a device buffer of at least two chunks is staged through host memory (broadcast, allgather, point-to-point sends): the copy of one chunk overlaps the transport's work on another; must be the same on every rank (collectives)"},
    {"DT_RING_SEGMENT", "262144", "bytes per pipelined segment of the ring algorithms"},
    {"DT_DIRECT_MSG", NULL, "allreduce up to this many bytes uses the direct algorithm, every rank sending to every rank (default: measured at start-up for 3 to 16 ranks, else 0)"},
    {"DT_SMALL_MSG", NULL, "messages up to this many bytes use recursive doubling / trees (default: 65536 when all ranks share memory, else 16384; across hosts allgather 131072, broadcast 128 and reduce_scatter 128 (2048 when the ranks are not a power of two), and allreduce measures 16384 down to 512 at start-up)"},
    {"DT_RING_MSG", NULL, "above this many bytes the ring; between DT_SMALL_MSG and this, recursive halving-doubling where it exists (default: 2097152 when all ranks share memory, else 262144, or 65536 up to 4 ranks where some rank's TCP connections run bbr)"},
    {"DT_BACKEND", "native", "what runs the communicators' operations: native (dtrain's algorithms over TCP and shared memory), mpi (the job's MPI, ranks started by mpirun) or nccl (NCCL on device buffers, one rank per GPU; docs/launching.md)"},
    {"DT_DEVICE_BACKEND", "auto", "dtrain with a device and several ranks: what carries the device's buffers: auto (NCCL when this build has it and every rank has a GPU of its own, else the job's communicator, staging them through host memory), nccl (required), native (a second native communicator, staged: for tests) or none (the job's communicator); DT_BACKEND=nccl in dtrain means nccl here, the job itself joining on the native backend"},
    {"DT_GEMM_TUNE", "1", "cuda: how many of cuBLASLt's candidate algorithms to time per matrix-product shape, keeping the fastest (2..16); 1: the heuristic's first, untimed, the same in every process (docs/gpu.md)"},
    {"DT_CUDA_MODULE", NULL, "path of the CUDA backend's module (libdtrain_cuda.so), loaded when a job asks for a CUDA device or NCCL (default: next to the program, then its installed lib/dtrain/, then beside libdtrain.so, then the loader's search path)"},
    {"DT_KERNEL_PROFILE", "0", "1: time each entry of a device's compute table (emu, cuda) between waits for the device, and print the costliest at the end of dtrain train (docs/gpu.md); slows the run"},
    {"DT_HIER", "auto", "hierarchical collectives when several hosts each run the same number (>1) of ranks: auto or off"},
    {"DT_SOCKET_BUFFER", "4194304", "SO_SNDBUF/SO_RCVBUF bytes of peer connections"},
    {"DT_TCP_CONGESTION", NULL, "TCP congestion control of peer connections, e.g. reno or cubic (default: the system's; under bbr, long collectives lose its 200 ms round-trip probes: docs/environment.md)"},
    {"DT_TRANSPORT", "auto", "peers on the same host: auto (shared memory), shm (require it), tcp (never)"},
    {"DT_SHM_RING", NULL, "bytes of each direction's shared-memory ring, a power of two (default: 1 MiB, less when many ranks share a host, so that a host's rings take at most 64 MiB of /dev/shm)"},
    {"DT_SHM_COPY_MIN", NULL, "shared-memory messages of at least this many bytes are copied once, from the sender's memory (0: never; default: 262144 when the host's ranks outnumber its cores, else 0); reducing collectives always use the ring"},
    {"DT_SHM_COLL", "auto", "collectives of ranks that all share one host run through a shared arena instead of messages: auto or off"},
    {"DT_DEVICE_IPC", "auto", "device buffers of a communicator whose ranks share one host: auto (read from each other's memory by CUDA IPC where the device has it, cuda; staged through host memory otherwise), 1 (the emu device too), 0 (always staged); docs/gpu.md"},
    {"DT_SHM_COLL_SLOT", "524288", "bytes per rank and round of the shared-memory collectives' arena, a multiple of 4096 (the arena takes 2 x ranks x this of /dev/shm)"},
    {"DT_SHM_SPIN_US", "50", "microseconds a rank polls its shared-memory rings before sleeping"},
    {"DT_POOL_SPIN_US", "100", "microseconds an idle compute thread keeps looking for the next parallel section (yielding its core) before sleeping; 0 when the host's ranks x threads outnumber its cores"},
    {"DT_POLL_SPIN_US", "200", "with peers over TCP: microseconds a blocking call keeps looking at its sockets (yielding the core between looks) before sleeping in poll; 0: sleep at once"},
    {"DT_IFADDR", NULL, "IPv4 address to listen on for peers (default: the one that reaches the store)"},
    {"DT_BUCKET_MB", NULL, "data parallel: MiB of gradients per allreduce bucket (default: 25, or an eighth of the gradients when that is smaller, but at least 1)"},
    {"DT_POWERSGD_KERNELS", "fast", "data parallel with grad_compression=powersgd: fast (blocked products on the compute threads, fused error passes, Gram-Schmidt by rows) or reference (the plain passes; the same results to f32 rounding, for comparisons)"},
    {"DT_THREADS", "0", "compute threads per rank when the program sets none (the trainer's threads key overrides); 0: the cores available divided by DT_LOCAL_WORLD_SIZE, at least 1"},
    {"DT_BF16_GEMM", "auto", "kernel of the bf16 GEMM (dt_sgemm_bf16_ld): auto (amx, else avx512_bf16, else emulated; the own kernel alone), native (the same as auto), onednn (oneDNN's matmul for every shape), amx, avx512_bf16 or emulated; one this machine or build cannot run is refused with a warning and the emulation runs"},
    {"DT_BLAS_REEXEC", "1", "1: where OpenBLAS picked slower kernels than the CPU runs (AVX2 on AMD Zen 4/5, SSE3 on Intel Emerald Rapids: OpenBLAS 0.3.21), dtrain re-executes itself once with OPENBLAS_CORETYPE=SKYLAKEX (or HASWELL) and dtrun sets it for its ranks; 0: neither (a set OPENBLAS_CORETYPE always stands)"},
    {"DT_BLAS_REEXEC_FORCE", "0", "tests: 1 makes dtrain re-execute itself (and dtrun set OPENBLAS_CORETYPE) on every CPU, with the core OpenBLAS picked where it would not otherwise (the same kernels)"},
    {"DT_CONV", "auto", "conv2d's kernels: auto (oneDNN where the build has it, else im2col + OpenBLAS) or im2col"},
    {"DT_RESTART", "0", "set by dtrun: the generation of a restarting job (0, then 1, 2, ...); dtrain resumes from checkpoint_dir above 0"},
    {"DT_MONITOR_DIR", NULL, "set by dtrun --monitor: dtrain appends each rank's records (steps, times, bytes sent, evaluations, checkpoints) to DIR/rank<N>.jsonl for the dashboard and /metrics (docs/observability.md)"},
    {"DT_PS_SERVERS", NULL, "set by dtrun --servers S: the job's last S ranks are parameter servers (dtrain's servers key, when the config gives none)"},
    {"DT_RESTARTABLE", NULL, "set to 1 by dtrun when the job may restart: dtrain then also checkpoints the initial weights"},
    {"DT_SNAPSHOT_DIR", NULL, "set by dtrun when the job may restart: the directory (in /dev/shm) that dtrain's memory_checkpoint_interval snapshots go to and a restart resumes from"},
    {"DT_SNAPSHOT_COPY", "auto", "dtrain's memory snapshots of replicated state (DDP, one process): where the copy runs: update (the optimizer's update copies each piece it writes, from the cache: the state is read once), background (a thread copies it while the next step computes) or auto (update where the host's ranks' compute threads take every core, else background)"},
    {"DT_SNAPSHOT_ROOT", "/dev/shm", "dtrun: where it creates each job's DT_SNAPSHOT_DIR"},
    {"DT_RESTART_TRACE", NULL, "dtrun and dtrain append a timestamped line per phase of their start and of a restart to this file (bench/snapshots/restart_phases.py sums them)"},
    {"DT_DEBUG", "warn", "log level: warn, info, trace; add coll (e.g. info,coll) to check and record collectives"},
    {"DT_TIMELINE", NULL, "set by dtrun --timeline FILE: each rank records a timeline (Chrome trace events) into FILE.rank<N>.json, which dtrun merges into FILE (docs/observability.md)"},
    {"DT_STALL_S", "60", "stall inspector: a collective still waiting after this many seconds names the ranks that have not arrived at it, checked each heartbeat (DT_HEARTBEAT_TIMEOUT/10); 0: off"},
    {"DT_STRAGGLER_EVERY", "10", "straggler detection (dtrain): compare every rank's step time outside collectives every this many steps; 0: off"},
    {"DT_STRAGGLER_RATIO", "1.5", "straggler detection: a rank whose step time outside collectives is above this times the median of the other ranks (and 5 ms or more above it) at DT_STRAGGLER_CHECKS consecutive checks is named in one warning line"},
    {"DT_STRAGGLER_CHECKS", "3", "straggler detection: consecutive checks a rank must be slow at before it is named"},
    {NULL, NULL, NULL},
};

const dt__tunable *dt__tunables(void) { return tunables; }

static const dt__tunable *find(const char *name)
{
    for (const dt__tunable *t = tunables; t->name; t++)
        if (strcmp(t->name, name) == 0)
            return t;
    return NULL;
}

const char *dt__env_str(const char *name)
{
    const char *v = getenv(name);
    return (v && *v) ? v : NULL;
}

dt_status dt__parse_int(const char *text, int64_t min, int64_t max, int64_t *out)
{
    if (!text || !*text)
        return dt__fail(DT_ERR_INVALID, "empty number");
    errno = 0;
    char *end = NULL;
    long long v = strtoll(text, &end, 10);
    if (errno || *end != '\0')
        return dt__fail(DT_ERR_INVALID, "'%s' is not an integer", text);
    if (v < min || v > max)
        return dt__fail(DT_ERR_INVALID, "%lld is out of range [%lld, %lld]", v, (long long)min,
                        (long long)max);
    *out = v;
    return DT_OK;
}

dt_status dt__env_int(const char *name, int64_t min, int64_t max, int64_t *out)
{
    const char *v = dt__env_str(name);
    if (!v) {
        const dt__tunable *t = find(name);
        if (!t || !t->default_value)
            return dt__fail(DT_ERR_INVALID, "environment variable %s is not set", name);
        v = t->default_value;
    }
    if (dt__parse_int(v, min, max, out) != DT_OK)
        return dt__wrap(DT_ERR_INVALID, "environment variable %s: ", name);
    return DT_OK;
}

dt_status dt_env_check(void)
{
    int64_t v;
    if (dt__debug_check() != DT_OK)
        return DT_ERR_INVALID;
    static const struct {
        const char *name;
        int64_t min, max;
    } ints[] = {{"DT_THREADS", 0, 256}, {"DT_RESTART", 0, 1LL << 30}, {"DT_LOCAL_WORLD_SIZE", 1, 1 << 16},
                   {"DT_PS_SERVERS", 0, 1 << 20}, {"DT_POOL_SPIN_US", 0, 1000000}, {"DT_BLAS_REEXEC", 0, 1},
                   {"DT_BLAS_REEXEC_FORCE", 0, 1}, {"DT_GEMM_TUNE", 1, 16}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (dt__env_str(ints[i].name) && dt__env_int(ints[i].name, ints[i].min, ints[i].max, &v) != DT_OK)
            return DT_ERR_INVALID;
    return DT_OK;
}

void dt__env_log_all(void)
{
    if (!dt__log_enabled(DT_LOG_INFO))
        return;
    for (const dt__tunable *t = tunables; t->name; t++) {
        const char *v = dt__env_str(t->name);
        if (strcmp(t->name, "DT_JOB_TOKEN") == 0 && v)
            v = "(set, hidden)";
        DT_INFO("%s=%s%s", t->name, v ? v : (t->default_value ? t->default_value : "(unset)"),
                v ? "" : " (default)");
    }
}
