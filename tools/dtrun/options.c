#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrun.h"

static const char usage[] =
    "usage: dtrun [options] -n N PROGRAM [ARGS...]\n"
    "\n"
    "Start N ranks of PROGRAM on this node with the dtrain environment (DT_RANK,\n"
    "DT_WORLD_SIZE, DT_LOCAL_RANK, DT_LOCAL_WORLD_SIZE, DT_MASTER_ADDR,\n"
    "DT_MASTER_PORT, DT_JOB_TOKEN), serve the rendezvous store, prefix every\n"
    "output line with its rank, forward SIGINT/SIGTERM, and stop the job when\n"
    "any rank fails.\n"
    "\n"
    "options:\n"
    "  -n, --nproc N          ranks on this node (required, 1..1024)\n"
    "      --nnodes M|MIN:MAX nodes in the job (default 1); run dtrun once per node.\n"
    "                         MIN:MAX is elastic: a generation starts with every\n"
    "                         node, or with at least MIN once --rejoin-timeout passed\n"
    "      --node-rank R      this node's index 0..M-1 (default 0); node 0 serves the store\n"
    "      --master ADDR:PORT rendezvous store address (default 127.0.0.1 and a free\n"
    "                         port on one node; required with --nnodes > 1)\n"
    "      --token-file FILE  read the job token from FILE (default: DT_JOB_TOKEN,\n"
    "                         or a fresh random token on a single node)\n"
    "      --rank-table FILE  a static job from a JSON rank table (MindSpore's style:\n"
    "                         server_list of hosts, each with its devices' rank_id):\n"
    "                         it gives --nnodes, -n, the master (the first server)\n"
    "                         and, unless --node-rank is given, finds this node by\n"
    "                         host name or address (docs/dtrun.md)\n"
    "      --join-timeout S   seconds to wait for every node to join (default 300)\n"
    "      --max-restarts R   when a rank fails, stop every rank, rendezvous again and\n"
    "                         restart them all, up to R times (default 0). The program\n"
    "                         sees DT_RESTART=generation; dtrain resumes from its\n"
    "                         newest complete checkpoint\n"
    "      --rejoin-timeout S elastic: seconds a generation waits for missing nodes\n"
    "                         before going on with at least MIN (default 30). A node\n"
    "                         that arrives later joins at the next restart, which its\n"
    "                         arrival triggers\n"
    "      --monitor ADDR:PORT serve a live dashboard (/) and Prometheus metrics\n"
    "                         (/metrics) of the job on ADDR:PORT, e.g. 127.0.0.1:8080 (port\n"
    "                         0: a free one, printed). Loopback only, unless\n"
    "                         --monitor-allow-remote\n"
    "      --monitor-allow-remote  let --monitor listen on a non-loopback address;\n"
    "                         every request must then carry the job token (from\n"
    "                         --token-file or DT_JOB_TOKEN): 'Authorization: Bearer\n"
    "                         TOKEN' or ?token=TOKEN\n"
    "      --monitor-linger S keep serving the final state S seconds after the job\n"
    "                         ends (default 0; Ctrl-C ends it sooner)\n"
    "      --bind auto|none   auto (default): with 2 or more ranks on this node and at\n"
    "                         least one CPU each, bind each rank to its own block of\n"
    "                         the CPUs dtrun may use (ranks that poll shared memory\n"
    "                         must not share a core); none: leave placement to the OS\n"
    "      --no-prefix        do not prefix output lines with the rank\n"
    "      --servers S        a parameter server: the job's last S ranks serve, the\n"
    "                         others work (DT_PS_SERVERS=S; dtrain's servers key)\n"
    "      --timeline FILE    record every rank's timeline (data wait, forward and\n"
    "                         backward of each block, collectives, DDP buckets,\n"
    "                         pipeline transfers, optimizer, checkpoints) and merge\n"
    "                         them into FILE at the end: Chrome trace JSON for\n"
    "                         Perfetto or chrome://tracing (DT_TIMELINE)\n"
    "  -h, --help             this help\n"
    "      --version          print the version\n"
    "\n"
    "Exit status: 0 when every rank exited 0; otherwise non-zero, after naming the\n"
    "first rank that failed and how (exit status or signal). Other ranks are sent\n"
    "SIGTERM, then SIGKILL after 3 s. With --max-restarts, a failure is followed\n"
    "by a restart until R restarts are spent. Node 0 serves the rendezvous: the\n"
    "job cannot outlive it.\n"
    "\n"
    "examples:\n"
    "  dtrun -n 4 build/bin/collectives_demo\n"
    "  dtrun --nnodes 2 --node-rank 0 --master 10.0.0.1:29500 --token-file tok -n 8 ./train\n"
    "  dtrun --nnodes 2 --node-rank 1 --master 10.0.0.1:29500 --token-file tok -n 8 ./train\n"
    "  dtrun --rank-table ranks.json --token-file tok ./train   (on every host)\n";

static void die(const char *fmt, const char *arg)
{
    fprintf(stderr, "dtrun: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(see dtrun --help)\n");
    exit(2);
}

static long number(const char *text, long min, long max, const char *what)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || v < min || v > max) {
        char msg[256];
        snprintf(msg, sizeof msg, "%s: '%%s' is not an integer in %ld..%ld", what, min, max);
        die(msg, text);
    }
    return v;
}

void dtrun_parse(int argc, char **argv, dtrun_opts *o)
{
    memset(o, 0, sizeof *o);
    o->nnodes = o->nnodes_min = 1;
    o->join_timeout = 300;
    o->rejoin_timeout = 30;
    o->prefix = true;
    o->bind = true;
    snprintf(o->master_host, sizeof o->master_host, "127.0.0.1");
    enum { NNODES = 1000, NODE_RANK, MASTER, TOKEN_FILE, JOIN_TIMEOUT, NO_PREFIX, VERSION, MAX_RESTARTS, REJOIN, BIND,
           SERVERS, TIMELINE, RANK_TABLE };
    static const struct option longopts[] = {
        {"nproc", required_argument, 0, 'n'},       {"nnodes", required_argument, 0, NNODES},
        {"node-rank", required_argument, 0, NODE_RANK}, {"master", required_argument, 0, MASTER},
        {"token-file", required_argument, 0, TOKEN_FILE}, {"join-timeout", required_argument, 0, JOIN_TIMEOUT},
        {"no-prefix", no_argument, 0, NO_PREFIX},   {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, VERSION},       {"max-restarts", required_argument, 0, MAX_RESTARTS},
        {"rejoin-timeout", required_argument, 0, REJOIN}, {"bind", required_argument, 0, BIND},
        {"servers", required_argument, 0, SERVERS}, {"timeline", required_argument, 0, TIMELINE},
        {"rank-table", required_argument, 0, RANK_TABLE},
        {0, 0, 0, 0},
    };
    enum { MONITOR = 2000, MONITOR_REMOTE, MONITOR_LINGER };
    static const struct option monitor_opts[] = {
        {"monitor", required_argument, 0, MONITOR},
        {"monitor-allow-remote", no_argument, 0, MONITOR_REMOTE},
        {"monitor-linger", required_argument, 0, MONITOR_LINGER},
    };
    struct option all[sizeof longopts / sizeof longopts[0] + sizeof monitor_opts / sizeof monitor_opts[0]];
    memcpy(all, monitor_opts, sizeof monitor_opts);
    memcpy(all + sizeof monitor_opts / sizeof monitor_opts[0], longopts, sizeof longopts);
    bool have_master = false, have_node_rank = false, have_nnodes = false;
    const char *rank_table = NULL;
    int c;
    while ((c = getopt_long(argc, argv, "+n:h", all, NULL)) != -1) {
        switch (c) {
        case MONITOR:
            if (strlen(optarg) >= sizeof o->monitor)
                die("--monitor '%s' is too long", optarg);
            snprintf(o->monitor, sizeof o->monitor, "%s", optarg);
            break;
        case MONITOR_REMOTE: o->monitor_remote = true; break;
        case MONITOR_LINGER: o->monitor_linger = (double)number(optarg, 0, 86400, "--monitor-linger"); break;
        case 'n': o->nproc = (int)number(optarg, 1, 1024, "-n"); break;
        case RANK_TABLE: rank_table = optarg; break;
        case NNODES: {
            have_nnodes = true;
            char *colon = strchr(optarg, ':');
            if (colon) {
                *colon = '\0';
                o->nnodes_min = (int)number(optarg, 1, 4096, "--nnodes MIN");
                o->nnodes = (int)number(colon + 1, 1, 4096, "--nnodes MAX");
                *colon = ':';
                if (o->nnodes_min > o->nnodes)
                    die("--nnodes %s: MIN is above MAX", optarg);
            } else
                o->nnodes = o->nnodes_min = (int)number(optarg, 1, 4096, "--nnodes");
            break;
        }
        case MAX_RESTARTS: o->max_restarts = (int)number(optarg, 0, 1000000, "--max-restarts"); break;
        case REJOIN: o->rejoin_timeout = (double)number(optarg, 1, 86400, "--rejoin-timeout"); break;
        case NODE_RANK:
            o->node_rank = (int)number(optarg, 0, 4095, "--node-rank");
            have_node_rank = true;
            break;
        case MASTER: {
            const char *colon = strrchr(optarg, ':');
            if (optarg[0] == '[' || (colon && memchr(optarg, ':', (size_t)(colon - optarg))))
                die("--master '%s': IPv6 addresses are not supported (give an IPv4 address or a host name)", optarg);
            if (!colon || colon == optarg || (size_t)(colon - optarg) >= sizeof o->master_host)
                die("--master '%s' is not ADDR:PORT", optarg);
            memcpy(o->master_host, optarg, (size_t)(colon - optarg));
            o->master_host[colon - optarg] = '\0';
            o->master_port = (int)number(colon + 1, 1, 65535, "--master port");
            have_master = true;
            break;
        }
        case TOKEN_FILE:
            if (dt_read_token_file(optarg, "--token-file", o->token, sizeof o->token) != DT_OK)
                die("%s", dt_last_error());
            break;
        case JOIN_TIMEOUT: o->join_timeout = (double)number(optarg, 1, 86400, "--join-timeout"); break;
        case NO_PREFIX: o->prefix = false; break;
        case TIMELINE:
            if (!optarg[0] || strlen(optarg) > 2048)
                die("--timeline '%s': expected a file name (at most 2048 bytes)", optarg);
            if (optarg[0] == '/' || !getcwd(o->timeline, sizeof o->timeline - 2048 - 2))
                snprintf(o->timeline, sizeof o->timeline, "%s", optarg);
            else /* the ranks may change directory */
                snprintf(o->timeline + strlen(o->timeline), sizeof o->timeline - strlen(o->timeline), "/%s", optarg);
            { /* its directory must take the merged file: said now, not after the job */
                char dir[sizeof o->timeline];
                snprintf(dir, sizeof dir, "%s", o->timeline);
                char *slash = strrchr(dir, '/');
                if (slash)
                    *(slash == dir ? slash + 1 : slash) = '\0';
                struct stat st;
                char why[sizeof dir + 64];
                if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode))
                    snprintf(why, sizeof why, "its directory %s does not exist", dir);
                else if (access(dir, W_OK | X_OK) != 0)
                    snprintf(why, sizeof why, "cannot write in %s: %s", dir, strerror(errno));
                else
                    why[0] = '\0';
                if (why[0]) {
                    fprintf(stderr, "dtrun: --timeline %s: %s\n", optarg, why);
                    exit(2);
                }
            }
            break;
        case SERVERS: o->servers = (int)number(optarg, 0, 1 << 20, "--servers"); break;
        case BIND:
            if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "none") != 0)
                die("--bind '%s': expected auto or none", optarg);
            o->bind = strcmp(optarg, "auto") == 0;
            break;
        case 'h': fputs(usage, stdout); exit(0);
        case VERSION: printf("dtrun %s\n", DTRAIN_VERSION); exit(0);
        default: die("%s", "invalid option");
        }
    }
    if (rank_table) {
        if (have_nnodes)
            die("%s", "--rank-table gives the nodes: leave out --nnodes");
        int asked = o->nproc;
        dtrun_rank_table(rank_table, have_node_rank, have_master, o);
        if (asked && asked != o->nproc) {
            char msg[160];
            snprintf(msg, sizeof msg, "-n %d, but the rank table gives node %d %d ranks (leave out -n)", asked,
                     o->node_rank, o->nproc);
            die("%s", msg);
        }
        have_master = true;
    }
    if (o->nproc == 0)
        die("%s", "-n N is required");
    if (optind >= argc)
        die("%s", "no PROGRAM given");
    if (o->node_rank >= o->nnodes) {
        char msg[96];
        snprintf(msg, sizeof msg, "--node-rank must be below --nnodes (got --node-rank %d, --nnodes %d)",
                 o->node_rank, o->nnodes);
        die("%s", msg);
    }
    if (o->nnodes > 1 && !have_master)
        die("%s", "--master ADDR:PORT is required with --nnodes > 1");
    if (!rank_table && o->servers > 0 && (long)o->servers >= (long)o->nproc * o->nnodes) {
        char msg[160];
        snprintf(msg, sizeof msg, "--servers %d leaves no worker among the job's %ld ranks (the servers are the last "
                 "ranks; the others train)", o->servers, (long)o->nproc * o->nnodes);
        die("%s", msg);
    }
    if (!o->token[0] && getenv("DT_JOB_TOKEN") && *getenv("DT_JOB_TOKEN")) {
        if (strlen(getenv("DT_JOB_TOKEN")) >= sizeof o->token)
            die("%s", "DT_JOB_TOKEN is too long (255 bytes at most)");
        snprintf(o->token, sizeof o->token, "%s", getenv("DT_JOB_TOKEN"));
    }
    if (!o->token[0] && o->nnodes > 1)
        die("%s", "a multi-node job needs the same token on every node: --token-file FILE or DT_JOB_TOKEN");
    if (o->monitor[0] && dtrun_monitor_check(o))
        die(dtrun_monitor_check(o), o->monitor);
    if (!o->monitor[0] && (o->monitor_remote || o->monitor_linger > 0))
        die("%s", "--monitor-allow-remote and --monitor-linger go with --monitor ADDR:PORT");
    o->argv = argv + optind;
}
