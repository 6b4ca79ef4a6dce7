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
 * and no job ever sees another's (a dtrun killed with -9 leaves its
 * directory behind; it is never read again). */
#define _XOPEN_SOURCE 700
#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
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
    if (mkdir(o->snapshot_dir, 0700) != 0 && errno != EEXIST) { /* EEXIST: another node of this job on this host */
        fprintf(stderr, "dtrun: node %d: warning: cannot create %s for memory snapshots (%s); the ranks take "
                        "none\n", o->node_rank, o->snapshot_dir, strerror(errno));
        o->snapshot_dir[0] = '\0';
    }
    return 0;
}

void dtrun_snapshots_close(const dtrun_opts *o)
{
    if (o->snapshot_dir[0])
        nftw(o->snapshot_dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}
