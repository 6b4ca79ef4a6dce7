/* A restart under ZeRO puts the memory snapshot together in rank 0's
 * directory from the nodes' own and buddy copies of the shard files
 * (snapshot_ring.c says where they are).  Collective over the job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train_run.h"

#define ASSEMBLE_TAG 4050
#define CANDIDATES 4

static bool exists(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static void path_of(char *out, size_t len, const char *root, const char *kind, int64_t step, int rank, int n)
{
    char name[64];
    dt_ckpt_shard_name(rank, n, name, sizeof name);
    snprintf(out, len, "%s/%s-%08lld/%s", root, kind, (long long)step, name);
}

/* Where this rank has rank q's shard of step S: its own copy (q == me) or
 * its buddy copy (q is the previous node's rank); "" when not. */
static void held(const char *root, int64_t S, int q, int me, int l, int W, char *out, size_t len)
{
    out[0] = '\0';
    char p[1400];
    if (q == me) {
        path_of(p, sizeof p, root, "shards", S, q, W);
        if (exists(p))
            snprintf(out, len, "%s", p);
    }
    if (!out[0] && q == (me - l + W) % W) {
        path_of(p, sizeof p, root, "buddy", S, q, W);
        if (exists(p))
            snprintf(out, len, "%s", p);
    }
}

/* Rank h sends the file at path to rank 0, which puts it at dest. */
static dt_status move_one(dt_comm *job, int h, const char *path, const char *dest, bool *bad)
{
    int me = dt_comm_rank(job);
    int64_t n = -1;
    char *buf = NULL;
    size_t size = 0;
    if (me == h) {
        if (dt_read_file(path, &buf, &size) == DT_OK)
            n = (int64_t)size;
        dt_status s = dt_send(&n, 1, DT_I64, 0, ASSEMBLE_TAG, job);
        if (s == DT_OK && n > 0)
            s = dt_send(buf, (size_t)n, DT_U8, 0, ASSEMBLE_TAG, job);
        free(buf);
        return s;
    }
    dt_status r = dt_recv(&n, 1, DT_I64, h, ASSEMBLE_TAG, job, NULL);
    if (r != DT_OK)
        return r;
    if (n >= 0 && !(buf = malloc(n > 0 ? (size_t)n : 1)))
        return dt_comm_abort(job, "out of memory for a memory snapshot's shard");
    dt_status s = n > 0 ? dt_recv(buf, (size_t)n, DT_U8, h, ASSEMBLE_TAG, job, NULL) : DT_OK;
    /* (its CRC is checked with the whole snapshot's, against the manifest) */
    if (s == DT_OK && (n < 0 || dt_atomic_write(dest, buf, (size_t)n) != DT_OK))
        *bad = true;
    free(buf);
    return s;
}

int dtrain_snapshot_assemble(train_run *t, const char *root, const char *restart, bool *usable)
{
    dt_comm *job = t->job;
    int me = dt_comm_rank(job), W = dt_comm_size(job);
    *usable = true;
    int64_t L[2] = {dt_comm_local_size(job), -dt_comm_local_size(job)};
    if (dt_allreduce(L, L, 2, DT_I64, DT_MAX, job) != DT_OK)
        goto failed;
    if (L[0] != -L[1] || W % L[0] != 0 || W / L[0] < 2)
        return 0; /* no ring was made (snapshot_ring.c) */
    int l = (int)L[0];
    int64_t cand[1 + CANDIDATES] = {0};
    if (me == 0) {
        int64_t *steps = NULL;
        int n = 0;
        if (dt_ckpt_list(root, &steps, &n) == DT_OK)
            for (int i = 0; i < n && i < CANDIDATES; i++)
                cand[1 + cand[0]++] = steps[i];
        free(steps);
    }
    int64_t *need = malloc((size_t)W * sizeof *need), *holder = malloc((size_t)W * sizeof *holder);
    if (!need || !holder) {
        free(need);
        free(holder);
        fprintf(stderr, "dtrain: rank %d: out of memory\n", me);
        return 1;
    }
    if (dt_broadcast(cand, 1 + CANDIDATES, DT_I64, 0, job) != DT_OK)
        goto collective;
    *usable = cand[0] == 0; /* none at all: the usual path says so */
    for (int64_t c = 0; c < cand[0] && !*usable; c++) {
        int64_t S = cand[1 + c], needed = 0;
        char p[1400], dest[1400];
        for (int q = 0; q < W; q++) { /* what rank 0's step directory lacks */
            if (me == 0) {
                char name[64];
                dt_ckpt_shard_name(q, W, name, sizeof name);
                snprintf(p, sizeof p, "%s/step-%08lld/%s", root, (long long)S, name);
                need[q] = !exists(p);
            }
            holder[q] = INT64_MAX;
        }
        if (dt_broadcast(need, (size_t)W, DT_I64, 0, job) != DT_OK)
            goto collective;
        for (int q = 0; q < W; q++) {
            needed += need[q];
            held(root, S, q, me, l, W, p, sizeof p);
            if (need[q] && p[0])
                holder[q] = me;
        }
        if (!needed) {
            *usable = true;
            break;
        }
        if (dt_allreduce(holder, holder, (size_t)W, DT_I64, DT_MIN, job) != DT_OK)
            goto collective;
        int lost = -1;
        for (int q = 0; q < W && lost < 0; q++)
            if (need[q] && holder[q] == INT64_MAX)
                lost = q;
        if (lost >= 0) {
            if (me == 0)
                printf("restart %s: the memory snapshot of step %lld lacks rank %d's shard: neither its node (%d) "
                       "nor its buddy node (%d) has a copy (both lost)\n", restart, (long long)S, lost, lost / l,
                       (lost / l + 1) % (W / l));
            continue;
        }
        bool bad = false;
        for (int q = 0; q < W; q++) {
            if (!need[q] || (me != 0 && me != holder[q]))
                continue;
            held(root, S, q, me, l, W, p, sizeof p);
            char name[64];
            dt_ckpt_shard_name(q, W, name, sizeof name);
            snprintf(dest, sizeof dest, "%s/step-%08lld/%s", root, (long long)S, name);
            if (holder[q] == 0) { /* rank 0 holds the buddy copy itself */
                char *buf = NULL;
                size_t n = 0;
                bad |= dt_read_file(p, &buf, &n) != DT_OK || dt_atomic_write(dest, buf, n) != DT_OK;
                free(buf);
            } else if (move_one(job, (int)holder[q], p, dest, &bad) != DT_OK) {
                goto collective;
            }
        }
        int64_t ok = !bad;
        if (dt_allreduce(&ok, &ok, 1, DT_I64, DT_MIN, job) != DT_OK)
            goto collective;
        if (ok) {
            if (me == 0)
                printf("restart %s: the memory snapshot of step %lld put together from the shards of %lld rank%s "
                       "held on other nodes (their own or their buddy's copies)\n", restart, (long long)S,
                       (long long)needed, needed == 1 ? "" : "s");
            *usable = true;
        } else if (me == 0) {
            fprintf(stderr, "dtrain: rank 0: could not write the shards of the memory snapshot of step %lld into "
                            "%s/step-%08lld\n", (long long)S, root, (long long)S);
        }
    }
    fflush(stdout);
    free(need);
    free(holder);
    return 0;
collective:
    free(need);
    free(holder);
failed:
    fprintf(stderr, "dtrain: rank %d: putting the memory snapshot together: %s\n", me, dt_last_error());
    return 1;
}
