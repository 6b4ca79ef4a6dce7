/* Communicator life cycle: creation from the environment, accessors, abort
 * and destruction. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/log.h"
#include "base/status.h"
#include "base/trace.h"
#include "comm/backend.h"
#include "comm/coll.h"
#include "comm/colltrace.h"
#include "comm/stall.h"
#include "comm/comm_internal.h"
#include "comm/ipc.h"
#include "comm/stage.h"
#include "comm/launch_env.h"
#include "dtrain/store.h"
#include "transport/heartbeat.h"
#include "transport/socket.h"

#define WORLD_COMM_ID 1u

static dt_status read_tunables(dt_comm *c)
{
    const char *algo = dt__env_str("DT_ALGO");
    if (!dt__algo_parse(algo ? algo : "auto", &c->algo))
        return dt__fail(DT_ERR_INVALID, "DT_ALGO='%s': expected %s", algo, DT__ALGO_NAMES);
    int64_t v;
    DT_CHECK(dt__env_int("DT_RING_SEGMENT", 1024, 1LL << 30, &v));
    c->segment_bytes = (size_t)v;
    /* Unset: SIZE_MAX, the default for the communicator's topology. */
    c->direct_bytes = c->small_bytes = c->ring_bytes = SIZE_MAX;
    if (dt__env_str("DT_DIRECT_MSG")) {
        DT_CHECK(dt__env_int("DT_DIRECT_MSG", 0, 1LL << 20, &v));
        c->direct_bytes = (size_t)v;
    }
    if (dt__env_str("DT_SMALL_MSG")) {
        DT_CHECK(dt__env_int("DT_SMALL_MSG", 0, 1LL << 30, &v));
        c->small_bytes = (size_t)v;
    }
    const char *hier = dt__env_str("DT_HIER");
    if (hier && strcmp(hier, "auto") != 0 && strcmp(hier, "off") != 0)
        return dt__fail(DT_ERR_INVALID, "DT_HIER='%s': expected auto or off", hier);
    c->hier_auto = !hier || strcmp(hier, "auto") == 0;
    if (dt__env_str("DT_RING_MSG")) {
        DT_CHECK(dt__env_int("DT_RING_MSG", 0, 1LL << 40, &v));
        c->ring_bytes = (size_t)v;
    }
    const char *shm_coll = dt__env_str("DT_SHM_COLL");
    if (shm_coll && strcmp(shm_coll, "auto") != 0 && strcmp(shm_coll, "off") != 0)
        return dt__fail(DT_ERR_INVALID, "DT_SHM_COLL='%s': expected auto or off", shm_coll);
    c->shm_coll_on = !shm_coll || strcmp(shm_coll, "auto") == 0;
    DT_CHECK(dt__env_int("DT_SHM_COLL_SLOT", 4096, 1LL << 30, &v));
    if (v % 4096)
        return dt__fail(DT_ERR_INVALID, "DT_SHM_COLL_SLOT=%lld: expected a multiple of 4096", (long long)v);
    c->shm_coll_slot = (size_t)v;
    DT_CHECK(dt__env_int("DT_STAGE_CHUNK", 1, 1LL << 30, &v));
    c->stage_chunk = (size_t)v;
    return DT_OK;
}

static void world_release(dt__world *w)
{
    if (__atomic_sub_fetch(&w->refs, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    if (!w->engine_closed)
        dt__engine_destroy(w->eng);
    dt__heartbeat_stop(w->heartbeat);
    dt__stall_destroy(w->stall);
    dt__colltrace_destroy(w->trace);
    dt_store_close(w->store);
    dt_store_server_stop(w->server);
    pthread_mutex_destroy(&w->queues_mu);
    free(w);
}

static dt_status init_world(const dt__launch_env *env, dt__world *w)
{
    int64_t sockbuf, ring, copy_min, spin, poll_spin, restart;
    DT_CHECK(dt__trace_from_env(env->rank)); /* dtrun --timeline */
    DT_CHECK(dt__env_int("DT_SOCKET_BUFFER", 0, 1LL << 30, &sockbuf));
    const char *congestion = dt__env_str("DT_TCP_CONGESTION");
    DT_CHECK(dt__sock_check_congestion(congestion)); /* before any peer waits on this rank */
    /* A job restarted by dtrun rendezvouses again in the same store: its
     * keys are those of the new generation, not the dead one's. */
    restart = 0;
    if (dt__env_str("DT_RESTART"))
        DT_CHECK(dt__env_int("DT_RESTART", 0, 1LL << 30, &restart));
    char prefix[32];
    snprintf(prefix, sizeof prefix, "w%lld", (long long)restart);
    ring = 0; /* auto */
    if (dt__env_str("DT_SHM_RING"))
        DT_CHECK(dt__env_int("DT_SHM_RING", 4096, 1LL << 30, &ring));
    if (ring & (ring - 1))
        return dt__fail(DT_ERR_INVALID, "DT_SHM_RING=%lld: expected a power of two", (long long)ring);
    size_t shm_copy_min = DT__SHM_COPY_AUTO;
    if (dt__env_str("DT_SHM_COPY_MIN")) {
        DT_CHECK(dt__env_int("DT_SHM_COPY_MIN", 0, 1LL << 40, &copy_min));
        shm_copy_min = (size_t)copy_min;
    }
    DT_CHECK(dt__env_int("DT_SHM_SPIN_US", 0, 1000000, &spin));
    DT_CHECK(dt__env_int("DT_POLL_SPIN_US", 0, 1000000, &poll_spin));
    const char *tr = dt__env_str("DT_TRANSPORT");
    int transport = DT__TRANSPORT_AUTO;
    if (tr && strcmp(tr, "tcp") == 0)
        transport = DT__TRANSPORT_TCP;
    else if (tr && strcmp(tr, "shm") == 0)
        transport = DT__TRANSPORT_SHM;
    else if (tr && strcmp(tr, "auto") != 0)
        return dt__fail(DT_ERR_INVALID, "DT_TRANSPORT='%s': expected auto, shm or tcp", tr);
    dt__engine_config cfg = {.rank = env->rank, .size = env->size, .token = env->token,
                             .key_prefix = prefix, .timeout_s = env->timeout_s, .sock_buffer = (int)sockbuf,
                             .tcp_congestion = congestion,
                             .listen_ip = dt__env_str("DT_IFADDR"), .transport = transport,
                             .shm_ring = (size_t)ring, .shm_copy_min = shm_copy_min, .shm_spin_us = (int)spin,
                             .poll_spin_us = (int)poll_spin};
    if (env->size > 1) {
        if (env->serve_store)
            DT_CHECK(dt_store_server_start("0.0.0.0", env->master_port, env->token, &w->server));
        dt_status s = dt_store_connect(env->master_host, env->master_port, env->token, env->timeout_s, &w->store);
        if (s != DT_OK && env->master_source)
            return dt__wrap(s, "the store at %s:%d (%s): ", env->master_host, env->master_port, env->master_source);
        DT_CHECK(s);
    }
    dt_phase_mark("rank %d store connected", env->rank);
    DT_CHECK(dt__engine_create(&cfg, w->store, &w->eng));
    dt__engine_set_sig_namer(w->eng, dt__coll_sig_name);
    int64_t heartbeat;
    DT_CHECK(dt__env_int("DT_HEARTBEAT_TIMEOUT", 0, 86400, &heartbeat));
    if (env->size > 1 && heartbeat > 0) {
        dt__heartbeat_config hc = {.host = env->master_host, .port = env->master_port, .token = env->token,
                                   .key_prefix = prefix, .rank = env->rank, .size = env->size,
                                   .timeout_s = (double)heartbeat};
        DT_CHECK(dt__heartbeat_start(&hc, &w->heartbeat));
        dt__engine_set_heartbeat(w->eng, w->heartbeat);
    }
    DT_CHECK(dt__stall_create(w));
    DT_CHECK(dt__colltrace_create(&w->trace));
    if (w->trace)
        dt__engine_set_fail_hook(w->eng, dt__colltrace_dump, w);
    return DT_OK;
}

/* A set-up step of dt_comm_init_env (collective over the world) failed.
 * Where the engine failed, its first failure is what happened first, and
 * often not on this rank: a notice from a rank that found a collective
 * mismatch in the others' first calls or aborted while this one was still
 * setting up, or a peer gone.  So that message comes first, then where this
 * rank was; before, it read "setting up shared-memory collectives: ...:
 * collective mismatch", as if the set-up had been called wrongly (issue
 * 43).  Other failures (no memory, no arena) name the step first. */
static dt_status setup_failed(dt_comm *c, dt_status s, const char *step)
{
    char why[DT__ERROR_LEN];
    dt_status engine = dt__engine_status(c->world->eng); /* failed: its message as the last error */
    if (engine != DT_OK)
        s = engine;
    dt__error_save(why);
    dt_comm_destroy(c);
    if (engine != DT_OK)
        return dt__fail(s, "%s; this rank was still in dt_comm_init_env (%s)", why, step);
    return dt__wrap(dt__error_restore(s, why), "%s: ", step);
}

dt_status dt_comm_init_env(dt_comm **out)
{
    if (!out)
        return dt__fail(DT_ERR_INVALID, "dt_comm_init_env: out is NULL");
    *out = NULL;
    DT_CHECK(dt_env_check()); /* DT_DEBUG's words and the integers, before anything relies on them */
    dt__launch_env env;
    DT_CHECK(dt__launch_env_read(&env));
    dt__log_set_rank(env.rank);
    dt__env_log_all();
    dt_comm *c = calloc(1, sizeof *c);
    dt__world *w = calloc(1, sizeof *w);
    if (c)
        c->ranks = malloc((size_t)env.size * sizeof *c->ranks);
    if (!c || !w || !c->ranks) {
        if (c)
            free(c->ranks);
        free(c);
        free(w);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    w->refs = 1;
    pthread_mutex_init(&w->queues_mu, NULL);
    c->world = w;
    c->backend = dt__backend_from_env();
    c->rank = env.rank;
    c->size = env.size;
    c->local_rank = env.local_rank;
    c->local_size = env.local_size;
    c->id = WORLD_COMM_ID;
    c->timeout_s = env.timeout_s;
    for (int i = 0; i < env.size; i++)
        c->ranks[i] = i;
    dt_status s = c->backend ? read_tunables(c) : DT_ERR_INVALID;
    if (s == DT_OK && c->backend->world_init) {
        /* A backend with its own transport (MPI): no engine, store,
         * shared-memory arena, start-up timing or hierarchy. */
        s = c->backend->world_init(c, &env);
        if (s != DT_OK) {
            char why0[DT__ERROR_LEN];
            dt__error_save(why0);
            w->engine_closed = true;
            free(c->ranks);
            free(c);
            world_release(w);
            return dt__error_restore(s, why0);
        }
        DT_INFO("rank %d of %d joined (launcher %s, backend %s)", c->rank, c->size, env.launcher,
                c->backend->name);
        *out = c;
        return DT_OK;
    }
    if (s == DT_OK)
        s = init_world(&env, w);
    char why[DT__ERROR_LEN]; /* tearing down must not replace the first error */
    if (s != DT_OK) {
        w->engine_closed = w->eng == NULL;
        free(c->ranks);
        free(c);
        dt__error_save(why);
        world_release(w);
        return dt__error_restore(s, why);
    }
    dt_phase_mark("rank %d engine up", c->rank);
    c->one_host = dt__comm_one_host(c);
    s = dt__shm_coll_setup(c);
    if (s != DT_OK)
        return setup_failed(c, s, "setting up shared-memory collectives");
    dt_phase_mark("rank %d shm collectives set up", c->rank);
    s = dt__tune_collectives(c);
    dt_phase_mark("rank %d collectives tuned", c->rank);
    if (s != DT_OK)
        return setup_failed(c, s, "timing the small-message algorithms at start-up");
    s = dt__hier_setup(c);
    if (s != DT_OK)
        return setup_failed(c, s, "setting up hierarchical collectives");
    DT_INFO("rank %d of %d joined (launcher %s, store %s:%d)", env.rank, env.size, env.launcher,
            env.master_host, env.master_port);
    *out = c;
    return DT_OK;
}

int dt_comm_rank(const dt_comm *c) { return c ? c->rank : -1; }

dt_status dt_comm_set_tag(dt_comm *c, const char *tag)
{
    if (!c)
        return dt__fail(DT_ERR_INVALID, "dt_comm_set_tag: communicator is NULL");
    snprintf(c->tag, sizeof c->tag, "%s", tag ? tag : "");
    return DT_OK;
}
int dt_comm_size(const dt_comm *c) { return c ? c->size : 0; }
int dt_comm_local_rank(const dt_comm *c) { return c ? c->local_rank : -1; }
int dt_comm_local_size(const dt_comm *c) { return c ? c->local_size : 0; }

dt_status dt_comm_abort(dt_comm *c, const char *reason)
{
    if (!c)
        return dt__fail(DT_ERR_INVALID, "dt_comm_abort: communicator is NULL");
    if (c->world->engine_closed)
        return dt__fail(DT_ERR_ABORTED, "aborted: %s", reason ? reason : "");
    if (c->device_comm && c->device_comm->backend->abort) /* NCCL's kernels end too */
        c->device_comm->backend->abort(c->device_comm, reason);
    if (c->backend->abort)
        return c->backend->abort(c, reason);
    /* No waiting for queued collectives: they fail at once with the abort. */
    return dt__engine_abort(c->world->eng, reason);
}

bool dt__comm_one_host(const dt_comm *c)
{
    if (!c->world->eng)
        return false; /* a backend of its own (MPI) */
    for (int i = 0; i < c->size; i++)
        if (!dt__engine_is_local(c->world->eng, c->ranks[i]))
            return false;
    return true;
}

void dt__comm_twin(const dt_comm *c, uint32_t id, dt_comm *twin)
{
    *twin = *c;
    twin->id = id;
    twin->coll_seq = 0;
    twin->progress = NULL;
    twin->stall_slot = NULL; /* its own id: its own record */
    memset(twin->scratch, 0, sizeof twin->scratch);
    memset(twin->scratch_size, 0, sizeof twin->scratch_size);
    twin->stage = NULL;
    twin->device_comm = NULL; /* internal collectives carry host buffers */
    twin->ipc = NULL; /* a twin runs host buffers only: no IPC state to free */
}

void dt__comm_twin_done(dt_comm *twin)
{
    free(twin->scratch[0]);
    free(twin->scratch[1]);
}

void *dt__comm_scratch(dt_comm *c, int slot, size_t bytes)
{
    if (c->scratch_size[slot] < bytes) {
        free(c->scratch[slot]);
        c->scratch[slot] = malloc(bytes);
        c->scratch_size[slot] = c->scratch[slot] ? bytes : 0;
    }
    return c->scratch[slot];
}

dt_status dt_comm_destroy(dt_comm *c)
{
    if (!c)
        return DT_OK;
    dt__world *w = c->world;
    dt_status s = DT_OK;
    dt__progress_stop(c); /* what it queued runs first: it uses c */
    dt_status s_dev = DT_OK;
    if (c->device_comm) { /* its companion first: it shares c's world and connections */
        s_dev = dt_comm_destroy(c->device_comm);
        c->device_comm = NULL;
    }
    dt__hier_destroy(c);
    dt__shm_coll_destroy(c);
    if (c->backend && c->backend->comm_free) {
        bool world = c->id == WORLD_COMM_ID && !w->engine_closed;
        if (world)
            dt__progress_drain_all(w);
        s = c->backend->comm_free(c, world);
        if (world)
            w->engine_closed = true;
    } else if (c->id == WORLD_COMM_ID && !w->engine_closed) {
        dt__progress_drain_all(w); /* communicators still alive may have queued work */
        s = dt__engine_destroy(w->eng);
        w->engine_closed = true;
    }
    dt__ipc_comm_free(c, c->id == WORLD_COMM_ID);
    free(c->scratch[0]);
    free(c->scratch[1]);
    dt__stage_free(c);
    free(c->ranks);
    free(c);
    world_release(w);
    return s != DT_OK ? s : s_dev;
}

dt_status dt__comm_usable(dt_comm *c, const char *op)
{
    if (!c)
        return dt__fail(DT_ERR_INVALID, "%s: communicator is NULL", op);
    if (c->world->engine_closed)
        return dt__fail(DT_ERR_INVALID, "%s: the world communicator was already destroyed", op);
    if (c->world->aborted)
        return dt__fail(DT_ERR_ABORTED, "%s: the job was aborted on this rank", op);
    if (!c->world->eng)
        return DT_OK; /* a backend of its own (MPI) reports its failures itself */
    dt_status s = dt__engine_status(c->world->eng);
    if (s != DT_OK)
        return dt__wrap(s, "%s: ", op);
    return DT_OK;
}

/* Every collective starts here: its communicator's earlier nonblocking
 * collectives come first, then a healthy engine. */
dt_status dt__comm_check(dt_comm *c, const char *op)
{
    if (c && !c->world->engine_closed)
        dt__progress_drain(c);
    return dt__comm_usable(c, op);
}
