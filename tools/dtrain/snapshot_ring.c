/* The buddy ring of memory snapshots (docs/fault-tolerance.md, "In-memory
 * checkpoints"): state that exists on one node only survives the loss of
 * that node.
 *
 * Under ZeRO (without tp/pp) every rank writes its own shard file, into its
 * own node's snapshot directory when the nodes do not share one.  Rank 0's
 * directory gets the manifest (listing every rank's file with its size and
 * CRC-32), model.safetensors and the shards of node 0's ranks; another
 * node's ranks keep theirs in shards-NNNNNNNN/ of their own directory.
 * After each snapshot, a thread of each such rank sends its shard file,
 * over a communicator of its own split from the job's (so it runs beside
 * the next step's collectives), to the rank of the same local rank on the
 * next node of the ring, (node + 1) mod nodes, which checks its CRC and
 * puts it into buddy-NNNNNNNN/ of its directory (written to a temporary
 * name and renamed: whole or absent).  Two steps are kept of each, as of
 * the snapshots themselves.  Node 0's shards are not sent: they are in the
 * lead's directory, and node 0 serves the job's store, so its loss ends the
 * job anyway.
 *
 * The copy goes over the ranks' connections, not through dtrun: the ranks
 * hold the bytes and already have authenticated links to the buddy's ranks
 * (a copy through dtrun would need a channel between the dtruns of two
 * nodes, which only meet in the store, and would read the files once more).
 *
 * At a restart (dtrain_snapshot_assemble, before the snapshot is chosen),
 * rank 0 lists its complete snapshots, newest first; for the newest whose
 * every shard file is on some surviving node, the ranks that hold the files
 * its directory lacks (the file's own rank, or its buddy) send them to rank
 * 0, and the usual restart path goes on: rank 0 verifies the whole snapshot
 * (every file's CRC) and copies it to the nodes that have none.  When some
 * rank's shard is nowhere (its node and its buddy node both lost), the disk
 * checkpoint is used, and rank 0 says which. */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "train_run.h"

#define RING_TAG 4049
#define KEPT 2

struct snapshot_ring {
    dt_comm *comm;   /* split from the world: used by the thread only */
    int rank, nranks;
    int to, from;    /* the buddy this rank sends to and the rank it receives from (-1: none) */
    bool lead_dir;   /* this rank's directory is the lead's */
    char root[1024];
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int64_t pending; /* the step whose files the thread is to copy, -1: none */
    bool busy, stop;
    int failed;      /* the thread's copies stopped (a peer or a file failed; printed) */
    int64_t copies;
    double copy_s, wait_s;
};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void shard_path(char *out, size_t len, const char *root, const char *kind, int64_t step, int rank,
                       int nranks)
{
    char name[64];
    dt_ckpt_shard_name(rank, nranks, name, sizeof name);
    snprintf(out, len, "%s/%s-%08lld/%s", root, kind, (long long)step, name);
}

/* The whole file into a buffer (caller frees); NULL when unreadable. */
static unsigned char *read_file(const char *path, int64_t *size)
{
    char *b = NULL;
    size_t n = 0;
    if (dt_read_file(path, &b, &n) != DT_OK)
        return NULL;
    *size = (int64_t)n;
    return (unsigned char *)b;
}

/* bytes into path (its directory created), whole or absent, then its CRC
 * checked against the sender's: 0, or -1 (removed again). */
static int put_file(const char *path, const unsigned char *bytes, int64_t n, uint32_t crc)
{
    char dir[1400];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    if (mkdir(dir, 0700) != 0 && errno != EEXIST)
        return -1;
    uint32_t got = 0;
    uint64_t size = 0;
    if (dt_atomic_write(path, bytes, (size_t)n) != DT_OK || dt_file_crc32(path, &got, &size) != DT_OK ||
        got != crc || size != (uint64_t)n) {
        remove(path);
        return -1;
    }
    return 0;
}

/* Remove this rank's files of kind (shards, buddy) from the steps older than
 * the KEPT newest it wrote (the directories of other ranks' files stay until
 * they are empty). */
static void prune(const char *root, const char *kind, int64_t newest, int64_t interval, int rank, int nranks)
{
    DIR *d = opendir(root);
    if (!d)
        return;
    size_t klen = strlen(kind);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, kind, klen) != 0 || e->d_name[klen] != '-')
            continue;
        int64_t step = atoll(e->d_name + klen + 1);
        if (step > newest - KEPT * interval)
            continue;
        char path[1400], dir[1200];
        shard_path(path, sizeof path, root, kind, step, rank, nranks);
        snprintf(dir, sizeof dir, "%s/%s", root, e->d_name);
        remove(path);
        rmdir(dir); /* (fails while other ranks' files are in it) */
    }
    closedir(d);
}

/* One snapshot's copy around the ring: send this rank's shard, receive the
 * previous node's.  A rank without its file sends a header saying so. */
static dt_status copy_step(snapshot_ring *r, int64_t step, int64_t interval)
{
    dt_status s = DT_OK;
    dt_request *sent = NULL;
    unsigned char *out = NULL;
    int64_t head[3] = {step, -1, 0}; /* step, bytes (-1: none), CRC */
    if (r->to >= 0) {
        char path[1400];
        shard_path(path, sizeof path, r->root, "shards", step, r->rank, r->nranks);
        uint32_t crc = 0;
        uint64_t size = 0;
        int64_t n = 0;
        if (dt_file_crc32(path, &crc, &size) == DT_OK && (out = read_file(path, &n)) && (uint64_t)n == size) {
            head[1] = n;
            head[2] = crc;
        }
        s = dt_send(head, 3, DT_I64, r->to, RING_TAG, r->comm);
        if (s == DT_OK && head[1] > 0)
            s = dt_isend(out, (size_t)head[1], DT_U8, r->to, RING_TAG, r->comm, &sent);
    }
    if (s == DT_OK && r->from >= 0) {
        int64_t in[3];
        s = dt_recv(in, 3, DT_I64, r->from, RING_TAG, r->comm, NULL);
        unsigned char *buf = NULL;
        if (s == DT_OK && in[1] >= 0 && !(buf = malloc(in[1] > 0 ? (size_t)in[1] : 1)))
            s = dt_comm_abort(r->comm, "out of memory for a buddy snapshot"); /* (the sender then fails too) */
        if (s == DT_OK && in[1] >= 0) {
            s = in[1] > 0 ? dt_recv(buf, (size_t)in[1], DT_U8, r->from, RING_TAG, r->comm, NULL) : DT_OK;
            char path[1400];
            shard_path(path, sizeof path, r->root, "buddy", in[0], r->from, r->nranks);
            if (s == DT_OK && put_file(path, buf, in[1], (uint32_t)in[2]) != 0)
                fprintf(stderr, "dtrain: rank %d: the buddy copy of rank %d's snapshot of step %lld could not be "
                                "written into %s or did not match its CRC-32; the older copy is kept\n",
                        r->rank, r->from, (long long)in[0], path);
            else if (s == DT_OK)
                prune(r->root, "buddy", in[0], interval, r->from, r->nranks);
        }
        free(buf);
    }
    if (sent) {
        dt_status w = dt_wait(sent, NULL);
        s = s == DT_OK ? w : s;
    }
    free(out);
    return s;
}

typedef struct {
    snapshot_ring *r;
    int64_t interval;
} thread_arg;

static void *ring_main(void *arg)
{
    thread_arg a = *(thread_arg *)arg;
    free(arg);
    snapshot_ring *r = a.r;
    pthread_mutex_lock(&r->mu);
    for (;;) {
        while (!r->stop && r->pending < 0)
            pthread_cond_wait(&r->cv, &r->mu);
        if (r->pending < 0)
            break;
        int64_t step = r->pending;
        r->pending = -1;
        pthread_mutex_unlock(&r->mu);
        double t0 = now_s();
        dt_status s = r->failed ? DT_OK : copy_step(r, step, a.interval);
        pthread_mutex_lock(&r->mu);
        if (s != DT_OK && !r->failed++)
            fprintf(stderr, "dtrain: rank %d: the buddy copy of the memory snapshot of step %lld: %s; no further "
                            "buddy copies are made\n", r->rank, (long long)step, dt_last_error());
        else if (s == DT_OK && !r->failed) {
            r->copies++;
            r->copy_s += now_s() - t0;
        }
        r->busy = false;
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int dtrain_snapshot_ring_start(train_run *t, bool lead_dir)
{
    dt_comm *w = t->world;
    int me = dt_comm_rank(w), W = dt_comm_size(w);
    int64_t L[2] = {dt_comm_local_size(w), -dt_comm_local_size(w)}; /* max, -min */
    if (dt_allreduce(L, L, 2, DT_I64, DT_MAX, w) != DT_OK)
        goto failed;
    if (L[0] != -L[1] || L[0] < 1 || W % L[0] != 0 || W / L[0] < 2)
        return 2; /* not equal nodes of contiguous ranks: no ring */
    int l = (int)L[0];
    /* who keeps its shard outside the lead's directory (it sends it on) */
    int64_t *away = calloc((size_t)W, sizeof *away);
    snapshot_ring *r = calloc(1, sizeof *r);
    thread_arg *a = malloc(sizeof *a);
    if (!away || !r || !a) {
        free(away);
        free(r);
        free(a);
        fprintf(stderr, "dtrain: rank %d: out of memory\n", me);
        return 1;
    }
    away[me] = !lead_dir && me >= l;
    if (dt_allreduce(away, away, (size_t)W, DT_I64, DT_MAX, w) != DT_OK ||
        dt_comm_split(w, 0, me, &r->comm) != DT_OK) {
        free(away);
        free(r);
        free(a);
        goto failed;
    }
    r->rank = me;
    r->nranks = W;
    r->lead_dir = lead_dir;
    r->to = away[me] ? (me + l) % W : -1;
    int prev = (me - l + W) % W;
    r->from = away[prev] ? prev : -1;
    free(away);
    snprintf(r->root, sizeof r->root, "%s", t->snap_dir);
    r->pending = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    a->r = r;
    a->interval = t->c->memory_checkpoint_interval;
    if (pthread_create(&r->thread, NULL, ring_main, a) != 0) {
        fprintf(stderr, "dtrain: rank %d: cannot start the buddy copy thread\n", me);
        free(a);
        dt_comm_destroy(r->comm);
        free(r);
        return 1;
    }
    t->snap_ring = r;
    return 0;
failed:
    fprintf(stderr, "dtrain: rank %d: memory snapshots' buddy ring: %s\n", me, dt_last_error());
    return 1;
}

int dtrain_snapshot_ring_before(train_run *t, int64_t step, double *stall)
{
    snapshot_ring *r = t->snap_ring;
    if (!r)
        return 0;
    double t0 = now_s();
    pthread_mutex_lock(&r->mu); /* one copy in flight: the previous one ends first */
    while (r->busy)
        pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    *stall += now_s() - t0;
    r->wait_s += now_s() - t0;
    if (!r->lead_dir) { /* dt_strategy_save writes the shard into the step's temporary directory */
        char tmp[1200];
        snprintf(tmp, sizeof tmp, "%s/.step-%08lld.tmp", r->root, (long long)step);
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST) {
            fprintf(stderr, "dtrain: rank %d: cannot create %s for a memory snapshot: %s\n", r->rank, tmp,
                    strerror(errno));
            return 1;
        }
    }
    return 0;
}

void dtrain_snapshot_ring_after(train_run *t, int64_t step)
{
    snapshot_ring *r = t->snap_ring;
    if (!r)
        return;
    if (!r->lead_dir) { /* the shard out of the temporary directory, which only the lead's writer renames */
        char name[64], from[1400], dir[1200], to[1400];
        dt_ckpt_shard_name(r->rank, r->nranks, name, sizeof name);
        snprintf(dir, sizeof dir, "%s/.step-%08lld.tmp", r->root, (long long)step);
        snprintf(from, sizeof from, "%s/%s", dir, name);
        shard_path(to, sizeof to, r->root, "shards", step, r->rank, r->nranks);
        char todir[1200];
        snprintf(todir, sizeof todir, "%s/shards-%08lld", r->root, (long long)step);
        if ((mkdir(todir, 0700) == 0 || errno == EEXIST) && rename(from, to) == 0)
            prune(r->root, "shards", step, t->c->memory_checkpoint_interval, r->rank, r->nranks);
        rmdir(dir); /* (the node's last rank removes it) */
    }
    pthread_mutex_lock(&r->mu);
    r->pending = step;
    r->busy = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
}

void dtrain_snapshot_ring_stop(train_run *t)
{
    snapshot_ring *r = t->snap_ring;
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->thread, NULL); /* (the copy in flight ends first) */
    if (r->copies > 0 && r->from >= 0 && t->lead) /* what one copy costs, as the lead received them */
        dtrain_progress_line("memory snapshots' buddy copies: %lld received from rank %d, each %.1f ms in the "
                             "background; the training thread waited %.1f ms for them in all\n", (long long)r->copies,
                             r->from, 1e3 * r->copy_s / (double)r->copies, 1e3 * r->wait_s);
    dt_comm_destroy(r->comm);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
    t->snap_ring = NULL;
}
