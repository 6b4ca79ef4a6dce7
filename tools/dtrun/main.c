/* dtrun: the dtrain launcher.  See dtrun --help and docs/dtrun.md. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/random.h>

#include "dtrun.h"

static void random_token(char *out, size_t len)
{
    unsigned char raw[24];
    if (getrandom(raw, sizeof raw, 0) != (ssize_t)sizeof raw) {
        fprintf(stderr, "dtrun: cannot read random bytes for the job token\n");
        exit(1);
    }
    for (size_t i = 0; i < sizeof raw && 2 * i + 2 < len; i++)
        snprintf(out + 2 * i, 3, "%02x", raw[i]);
}

int main(int argc, char **argv)
{
    dtrun_opts o;
    dtrun_parse(argc, argv, &o);
    if (dt_env_check() != DT_OK) { /* the ranks inherit the environment: refuse it here, once */
        fprintf(stderr, "dtrun: %s\n", dt_last_error());
        return 2;
    }
    char why[4096];
    if (!dtrun_program_found(o.argv[0], why, sizeof why)) { /* before any rank or store starts */
        fprintf(stderr, "dtrun: %s\n", why);
        return 127;
    }
    if (!o.token[0])
        random_token(o.token, sizeof o.token);
    dt_store_server *server = NULL;
    if (o.node_rank == 0) {
        if (dt_store_server_start(o.master_host, o.master_port, o.token, &server) != DT_OK) {
            fprintf(stderr, "dtrun: cannot serve the rendezvous store on %s:%d: %s\n", o.master_host,
                    o.master_port, dt_last_error());
            return 1;
        }
        o.master_port = dt_store_server_port(server);
    }
    dt_store_client *store = NULL;
    if (dt_store_connect(o.master_host, o.master_port, o.token, o.join_timeout, &store) != DT_OK) {
        fprintf(stderr, "dtrun: node %d: cannot reach the rendezvous store: %s\n", o.node_rank, dt_last_error());
        dt_store_server_stop(server);
        return 1;
    }
    dt_store_set_io_timeout(store, DTRUN_STORE_IO_TIMEOUT);
    if (dtrun_snapshots_open(&o, store) != 0 || (o.monitor[0] && dtrun_monitor_start(&o) != 0)) {
        dt_store_close(store);
        dt_store_server_stop(server);
        return 1;
    }
    int code = dtrun_run(&o, &store);
    dtrun_snapshots_close(&o);
    if (o.timeline[0]) { /* each node merges its own ranks; node N > 0 into FILE.node<N> */
        char merged[4200];
        snprintf(merged, sizeof merged, "%s", o.timeline);
        if (o.node_rank > 0)
            snprintf(merged, sizeof merged, "%s.node%d", o.timeline, o.node_rank);
        dtrun_timeline_merge(o.timeline, merged, dtrun_last_first_rank, dtrun_last_nproc);
    }
    dt_store_close(store);
    dt_store_server_stop(server);
    dtrun_monitor_stop(code); /* after the timeline is merged: /timeline serves it while lingering */
    return code;
}
