/* Shared-memory channels between the ranks of one host, set up after the TCP
 * mesh (whose connections stay, as doorbells and liveness signals).
 *
 * For each pair (i < j) on the same host, through the rendezvous store:
 *   1. i creates the segment, announces itself in it and publishes its name
 *      under <prefix>/shm/i/j (or "tcp" when it could not create one);
 *   2. j attaches, announces itself, probes whether it can read i's memory
 *      and publishes "1<probe>" (attached) or "0" (failed) under .../ok;
 *   3. i reads that, removes the segment's name, probes j, publishes .../back;
 *   4. j reads .../back.
 * A side sends large payloads by address when the other side's probe worked.
 * Every step waits only on steps of lower numbers, so no rank waits for one
 * that waits for it.  A pair that fails in auto mode falls back to TCP on
 * both sides; with DT_TRANSPORT=shm it is an error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "dtrain/store.h"
#include "transport/engine_internal.h"

typedef struct {
    dt__engine *e;
    size_t ring;
    const dt__engine_config *cfg;
    dt_store_client *store;
    char (*host)[128];
    int64_t deadline;
    char (*created)[96]; /* names this rank created and has not yet removed */
} setup;

static bool same_host(const setup *s, int r)
{
    return r != s->e->rank && s->host[r][0] && strcmp(s->host[r], s->host[s->e->rank]) == 0;
}

static dt_status put(setup *s, const char *val, const char *fmt, int i, int j)
{
    char key[160];
    snprintf(key, sizeof key, fmt, s->cfg->key_prefix, i, j);
    return dt_store_set(s->store, key, val, strlen(val) + 1);
}

static dt_status get(setup *s, char *out, size_t outlen, const char *fmt, int i, int j)
{
    char key[160];
    snprintf(key, sizeof key, fmt, s->cfg->key_prefix, i, j);
    double left = (double)(s->deadline - dt__now_ns()) / 1e9;
    void *val = NULL;
    size_t len = 0;
    dt_status st = dt_store_get(s->store, key, left > 0 ? left : 0.001, &val, &len);
    if (st != DT_OK)
        return dt__wrap(st, "shared-memory set-up with rank %d: ", i == s->e->rank ? j : i);
    snprintf(out, outlen, "%.*s", (int)(len ? len - 1 : 0), (char *)val);
    free(val);
    return DT_OK;
}

/* Auto mode: warn and fall back; shm mode: the error stands. */
static dt_status refuse(setup *s, int r, dt_status st)
{
    if (s->cfg->transport == DT__TRANSPORT_SHM)
        return dt__wrap(st, "DT_TRANSPORT=shm: no shared-memory channel to %s: ", s->e->peers[r].name);
    DT_WARN("using TCP to %s on this host: %s", s->e->peers[r].name, dt_last_error());
    return DT_OK;
}

/* Rank r's TCP channel becomes a shared-memory one over pair (which it owns
 * from then on; on error the caller still does). */
static dt_status use_channel(dt__engine *e, int r, dt__shm_pair *pair, int side, bool send_refs)
{
    DT_CHECK(dt__chan_shm_open(&e->peers[r].ch, pair, side, send_refs));
    e->nshm++;
    return DT_OK;
}

static dt_status create_for_higher(setup *s, int j, dt__shm_pair **pair)
{
    dt__engine *e = s->e;
    char *name = s->created[j];
    snprintf(name, sizeof s->created[j], "/dtrain-%d-%s-%d-%d", (int)getpid(), s->cfg->key_prefix, e->rank, j);
    dt_status st = dt__shm_create(name, s->ring, pair);
    if (st != DT_OK) {
        name[0] = '\0';
        DT_CHECK(refuse(s, j, st));
        return put(s, "tcp", "%s/shm/%d/%d", e->rank, j);
    }
    dt__shm_announce(*pair, 0);
    return put(s, name, "%s/shm/%d/%d", e->rank, j);
}

static dt_status attach_to_lower(setup *s, int i, dt__shm_pair **pair)
{
    dt__engine *e = s->e;
    char name[96];
    DT_CHECK(get(s, name, sizeof name, "%s/shm/%d/%d", i, e->rank));
    if (strcmp(name, "tcp") == 0) {
        if (s->cfg->transport == DT__TRANSPORT_SHM)
            return dt__fail(DT_ERR_SYSTEM, "DT_TRANSPORT=shm: %s could not create a shared-memory channel (see its log)",
                            e->peers[i].name);
        return DT_OK;
    }
    dt_status st = dt__shm_attach(name, pair);
    if (st != DT_OK) {
        DT_CHECK(put(s, "0", "%s/shm/%d/%d/ok", i, e->rank));
        return refuse(s, i, st);
    }
    dt__shm_announce(*pair, 1);
    bool can_read = dt__shm_probe_peer(*pair, 1);
    return put(s, can_read ? "11" : "10", "%s/shm/%d/%d/ok", i, e->rank);
}

static dt_status finish_higher(setup *s, int j, dt__shm_pair *pair)
{
    dt__engine *e = s->e;
    char ok[8];
    dt_status st = get(s, ok, sizeof ok, "%s/shm/%d/%d/ok", e->rank, j);
    dt__shm_unlink(s->created[j]);
    s->created[j][0] = '\0';
    DT_CHECK(st);
    if (ok[0] != '1') {
        dt__shm_close(pair);
        if (s->cfg->transport == DT__TRANSPORT_SHM)
            return dt__fail(DT_ERR_SYSTEM, "DT_TRANSPORT=shm: %s could not attach to the shared-memory channel (see its log)",
                            e->peers[j].name);
        return DT_OK;
    }
    bool can_read = dt__shm_probe_peer(pair, 0);
    st = put(s, can_read ? "1" : "0", "%s/shm/%d/%d/back", e->rank, j);
    if (st == DT_OK)
        st = use_channel(e, j, pair, 0, ok[1] == '1');
    if (st != DT_OK)
        dt__shm_close(pair);
    return st;
}

static dt_status run_setup(setup *s, dt__shm_pair **pairs)
{
    dt__engine *e = s->e;
    for (int j = e->rank + 1; j < e->size; j++)
        if (same_host(s, j))
            DT_CHECK(create_for_higher(s, j, &pairs[j]));
    for (int i = 0; i < e->rank; i++)
        if (same_host(s, i))
            DT_CHECK(attach_to_lower(s, i, &pairs[i]));
    for (int j = e->rank + 1; j < e->size; j++)
        if (pairs[j]) {
            dt__shm_pair *pair = pairs[j];
            pairs[j] = NULL; /* finish_higher owns it now */
            DT_CHECK(finish_higher(s, j, pair));
        }
    for (int i = 0; i < e->rank; i++) {
        if (!pairs[i])
            continue;
        char back[8];
        DT_CHECK(get(s, back, sizeof back, "%s/shm/%d/%d/back", i, e->rank));
        DT_CHECK(use_channel(e, i, pairs[i], 1, back[0] == '1'));
        pairs[i] = NULL;
    }
    return DT_OK;
}

/* 1 MiB rings, smaller when many ranks share the host: L ranks make
 * L(L-1)/2 segments of two rings, kept within 64 MiB of /dev/shm in all (a
 * container's default size).  Large payloads bypass the rings anyway. */
static size_t auto_ring_bytes(const setup *s)
{
    size_t local = 1;
    for (int r = 0; r < s->e->size; r++)
        local += same_host(s, r);
    size_t ring = 1u << 20;
    while (ring > (16u << 10) && local * (local - 1) * ring > (64u << 20))
        ring /= 2;
    return ring;
}

dt_status dt__engine_shm_setup(dt__engine *e, const dt__engine_config *cfg, dt_store_client *store,
                               char (*peer_host)[128], int64_t deadline)
{
    int n = e->size;
    setup s = {.e = e, .cfg = cfg, .store = store, .host = peer_host, .deadline = deadline};
    s.ring = cfg->shm_ring ? cfg->shm_ring : auto_ring_bytes(&s);
    s.created = calloc((size_t)n, sizeof *s.created);
    dt__shm_pair **pairs = calloc((size_t)n, sizeof *pairs);
    dt_status st = s.created && pairs ? run_setup(&s, pairs)
                                                   : dt__fail(DT_ERR_NOMEM, "out of memory");
    for (int r = 0; s.created && r < n; r++) {
        if (s.created[r][0])
            dt__shm_unlink(s.created[r]);
        if (pairs && pairs[r])
            dt__shm_close(pairs[r]);
    }
    free(s.created);
    free(pairs);
    if (st == DT_OK && e->nshm) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        /* With a core per local rank, pause-spin; with more ranks than cores a
         * spinning rank would hold the core its peer needs, so poll with
         * sched_yield instead: the peer runs at once, no doorbell. */
        e->shm_spin_ns = (int64_t)cfg->shm_spin_us * 1000;
        e->shm_spin_yields = e->nshm + 1 > cpus;
        /* One copy out of the sender's memory instead of two through the
         * ring halves the copying, which is what counts when ranks share
         * cores (4 ranks on 2 cores, 64 MiB: allgather 55 -> 15 ms, alltoall
         * 78 -> 14, broadcast 59 -> 17).  With a core per rank the ring's two
         * copies run in parallel on both cores and beat the system call (2
         * ranks, 64 MiB broadcast 5.3 ms against 8.9).  256 KiB: the ring
         * algorithms' segment. */
        e->shm_copy_min = cfg->shm_copy_min != DT__SHM_COPY_AUTO ? cfg->shm_copy_min
                          : e->shm_spin_yields                   ? DT__SHM_COPY_SHARED_CORES
                                                                 : 0;
        char copy[96] = "every payload through the rings";
        int readable = 0; /* peers whose memory process_vm_readv may read */
        for (int i = 0; i < e->size; i++)
            readable += e->peers[i].ch && e->peers[i].ch->send_refs;
        if (e->shm_copy_min)
            snprintf(copy, sizeof copy, "a single copy from %zu bytes with %d of them", e->shm_copy_min, readable);
        DT_INFO("shared memory to %d ranks on this host (rings of %zu bytes, %s %lld us before sleeping, %s)",
                e->nshm, s.ring, e->shm_spin_yields ? "yielding poll" : "spin", (long long)(e->shm_spin_ns / 1000),
                copy);
    }
    return st;
}
