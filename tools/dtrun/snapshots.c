/* The memory that the ranks' snapshots live in (dtrain's
 * memory_checkpoint_interval, docs/fault-tolerance.md "In-memory
 * checkpoints"): a directory in /dev/shm (DT_SNAPSHOT_ROOT overrides the
 * parent, for tests) that this dtrun creates for a restartable job, hands
 * to its ranks as DT_SNAPSHOT_DIR and removes when the job ends.  It is
 * dtrun's, not a rank's: a killed rank's snapshots stay for the restart.
 *
 * The name carries a random id that node 0 draws and publishes in the store
 * (dtrun/snapshot_id), so that every node of one job names the same
 * directory (nodes that share a /dev/shm, like namespace hosts, share it)
 * and no job ever sees another's.
 *
 * A dtrun killed with -9 cannot remove its directory, and no later job
 * reads it (its id is new).  So each dtrun leaves a mark of itself in the
 * directory it uses, .dtrun-<pid> holding its host's boot id and its pid
 * namespace, and a dtrun starting a job removes the directories under the
 * same parent whose every mark names a process of this host and pid
 * namespace that no longer exists (kill(pid, 0)).  A directory without a
 * mark, or with one from another host (a shared parent) or namespace, is
 * left alone. */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <dirent.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrun.h"

#define ID_KEY "dtrun/snapshot_id"

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* "<boot id> <pid namespace inode>": what makes a pid mean this process. */
static void whoami(char *out, size_t len)
{
    char boot[64] = "";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (!fgets(boot, sizeof boot, f))
            boot[0] = '\0';
        fclose(f);
    }
    boot[strcspn(boot, "\n")] = '\0';
    struct stat ns = {0};
    stat("/proc/self/ns/pid", &ns);
    snprintf(out, len, "%s %llu", boot[0] ? boot : "?", (unsigned long long)ns.st_ino);
}

/* True when dir has marks and every one names a dead process of this host
 * and pid namespace (me: whoami's text). */
static bool owners_gone(const char *dir, const char *me)
{
    DIR *d = opendir(dir);
    if (!d)
        return false;
    int marks = 0, alive = 0;
    struct dirent *e;
    while ((e = readdir(d)) && !alive) {
        if (strncmp(e->d_name, ".dtrun-", 7) != 0)
            continue;
        marks++;
        char path[1400], who[128] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        if (f) {
            if (!fgets(who, sizeof who, f))
                who[0] = '\0';
            fclose(f);
        }
        who[strcspn(who, "\n")] = '\0';
        long pid = atol(e->d_name + 7);
        /* another host's or namespace's mark, or a live process: not ours to judge, or in use */
        if (strcmp(who, me) != 0 || pid <= 0 || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            alive++;
    }
    closedir(d);
    return marks > 0 && !alive;
}

/* Remove parent's snapshot directories left by dtruns killed with -9 (not
 * `keep`, this job's). */
static void remove_abandoned(int node, const char *parent, const char *keep, const char *me)
{
    DIR *d = opendir(parent);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (strncmp(e->d_name, "dtrain-", 7) != 0 || n != 7 + 16 || strspn(e->d_name + 7, "0123456789abcdef") != 16 ||
            !strcmp(e->d_name + 7, keep))
            continue;
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", parent, e->d_name);
        if (owners_gone(dir, me)) {
            nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
            fprintf(stderr, "dtrun: node %d: removed %s, the memory snapshots of a job whose dtrun was killed\n",
                    node, dir);
        }
    }
    closedir(d);
}

int dtrun_snapshots_open(dtrun_opts *o, dt_store_client *store)
{
    o->snapshot_dir[0] = '\0';
    if (o->max_restarts <= 0 && o->nnodes_min == o->nnodes) /* no restart: nothing would read them */
        return 0;
    char id[40] = "";
    if (o->node_rank == 0) {
        unsigned char raw[8];
        if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
            fprintf(stderr, "dtrun: cannot read random bytes for the snapshot directory's name\n");
            return 1;
        }
        for (size_t i = 0; i < sizeof raw; i++)
            snprintf(id + 2 * i, 3, "%02x", raw[i]);
        if (dt_store_set(store, ID_KEY, id, strlen(id) + 1) != DT_OK) {
            fprintf(stderr, "dtrun: node 0: the rendezvous store: %s\n", dt_last_error());
            return 1;
        }
    } else {
        void *v = NULL;
        size_t n = 0;
        if (dt_store_get(store, ID_KEY, o->join_timeout, &v, &n) != DT_OK || n < 2 || n > sizeof id ||
            ((char *)v)[n - 1] != '\0') {
            fprintf(stderr, "dtrun: node %d: no snapshot id from node 0: %s\n", o->node_rank,
                    v ? "malformed" : dt_last_error());
            free(v);
            return 1;
        }
        memcpy(id, v, n);
        free(v);
    }
    const char *parent = getenv("DT_SNAPSHOT_ROOT");
    parent = parent && *parent ? parent : "/dev/shm";
    snprintf(o->snapshot_dir, sizeof o->snapshot_dir, "%s/dtrain-%s", parent, id);
    char me[128];
    whoami(me, sizeof me);
    remove_abandoned(o->node_rank, parent, id, me);
    if (mkdir(o->snapshot_dir, 0700) != 0 && errno != EEXIST) { /* EEXIST: another node of this job on this host */
        fprintf(stderr, "dtrun: node %d: warning: cannot create %s for memory snapshots (%s); the ranks take "
                        "none\n", o->node_rank, o->snapshot_dir, strerror(errno));
        o->snapshot_dir[0] = '\0';
        return 0;
    }
    char mark[1200];
    snprintf(mark, sizeof mark, "%s/.dtrun-%ld", o->snapshot_dir, (long)getpid());
    FILE *f = fopen(mark, "w");
    if (f) {
        fprintf(f, "%s\n", me);
        fclose(f);
    }
    return 0;
}

void dtrun_snapshots_close(const dtrun_opts *o)
{
    if (o->snapshot_dir[0])
        nftw(o->snapshot_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}
