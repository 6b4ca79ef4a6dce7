/* dtrun --rank-table FILE.json: a static job described by a file instead of
 * --nnodes/--master/-n (MindSpore's HCCL rank table, the subset in
 * docs/dtrun.md):
 *
 *   {"version": "1.0", "server_count": "2", "master_port": 29500,
 *    "server_list": [
 *      {"server_id": "10.0.0.1", "device": [{"rank_id": "0"}, {"rank_id": "1"}]},
 *      {"server_id": "10.0.0.2", "host_ip": "10.0.0.2", "device": [{"rank_id": "2"}, {"rank_id": "3"}]}]}
 *
 * Server i of the list is node i; its ranks are its devices' rank_ids, which
 * must be consecutive and follow the previous server's (dtrun places a node's
 * ranks together), so the file fixes the world size, every node's ranks and
 * the master (the first server, which serves the store): no node waits for
 * an election.  Numbers may be JSON numbers or strings, as MindSpore writes
 * them.  This node is --node-rank R, else the one server whose server_id or
 * host_ip is this host's name or one of its addresses.  Every error names the
 * entry. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrun.h"
#include "json_whole.h"

static const char *table_path;

static void bad(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void bad(const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "dtrun: --rank-table %s: %s\n", table_path, msg);
    exit(2);
}

/* A number written as a JSON number or a string of digits; -1 when absent. */
static long number_field(const cJSON *obj, const char *key, const char *where)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v)
        return -1;
    if (cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble == (double)(long)v->valuedouble)
        return (long)v->valuedouble;
    if (cJSON_IsString(v) && v->valuestring[0]) {
        char *end;
        long x = strtol(v->valuestring, &end, 10);
        if (!*end && x >= 0)
            return x;
    }
    bad("%s: \"%s\" must be a non-negative integer (a number or a string of digits)", where, key);
}

static const char *string_field(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsString(v) && v->valuestring[0] ? v->valuestring : NULL;
}

/* Whether `name` is this host: its host name, or one of its addresses
 * (a name in the table is resolved). */
static bool is_this_host(const char *name)
{
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    if (!strcmp(name, host))
        return true;
    struct addrinfo hints = {.ai_family = AF_UNSPEC}, *res = NULL;
    if (getaddrinfo(name, NULL, &hints, &res) != 0)
        return false;
    struct ifaddrs *ifs = NULL;
    bool found = false;
    if (getifaddrs(&ifs) == 0) {
        for (struct addrinfo *a = res; a && !found; a = a->ai_next)
            for (struct ifaddrs *i = ifs; i && !found; i = i->ifa_next) {
                if (!i->ifa_addr || i->ifa_addr->sa_family != a->ai_family)
                    continue;
                if (a->ai_family == AF_INET)
                    found = !memcmp(&((struct sockaddr_in *)a->ai_addr)->sin_addr,
                                    &((struct sockaddr_in *)i->ifa_addr)->sin_addr, sizeof(struct in_addr));
                else if (a->ai_family == AF_INET6)
                    found = !memcmp(&((struct sockaddr_in6 *)a->ai_addr)->sin6_addr,
                                    &((struct sockaddr_in6 *)i->ifa_addr)->sin6_addr, sizeof(struct in6_addr));
            }
        freeifaddrs(ifs);
    }
    freeaddrinfo(res);
    return found;
}

void dtrun_rank_table(const char *path, bool have_node_rank, bool have_master, dtrun_opts *o)
{
    table_path = path;
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) /* a FIFO would block the open */
        bad("not a regular file");
    FILE *f = fopen(path, "rb");
    if (!f)
        bad("cannot open it");
    static char text[1 << 20];
    size_t len = fread(text, 1, sizeof text - 1, f);
    bool too_long = !feof(f);
    fclose(f);
    if (too_long)
        bad("larger than 1 MiB");
    text[len] = '\0';
    cJSON *root = dt_json_parse_whole(text);
    if (!root || !cJSON_IsObject(root))
        bad("not a JSON object (near byte %ld)", root ? 0L : (long)(cJSON_GetErrorPtr() - text));
    const char *version = string_field(root, "version");
    if (version && strcmp(version, "1.0") != 0)
        bad("\"version\" is \"%s\": this dtrun reads version 1.0", version);
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(root, "server_list");
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0)
        bad("missing field \"server_list\" (a non-empty list of servers)");
    int nservers = cJSON_GetArraySize(list);
    if (nservers > 4096)
        bad("%d servers: at most 4096", nservers);
    long count = number_field(root, "server_count", "the table");
    if (count >= 0 && count != nservers)
        bad("\"server_count\" is %ld but \"server_list\" has %d servers", count, nservers);
    long port = number_field(root, "master_port", "the table");
    if (port == 0 || port > 65535)
        bad("\"master_port\" %ld is outside 1..65535", port);
    int next_rank = 0, mine = -1, matches = 0;
    for (int s = 0; s < nservers; s++) {
        const cJSON *srv = cJSON_GetArrayItem(list, s);
        char where[320];
        snprintf(where, sizeof where, "server_list[%d]", s);
        if (!cJSON_IsObject(srv))
            bad("%s: not an object", where);
        const char *id = string_field(srv, "server_id");
        if (!id)
            bad("%s: missing field \"server_id\" (the host's name or address)", where);
        snprintf(where, sizeof where, "server_list[%d] (server_id \"%.200s\")", s, id);
        const char *ip = string_field(srv, "host_ip");
        for (int t = 0; t < s; t++) {
            const char *other = string_field(cJSON_GetArrayItem(list, t), "server_id");
            const char *other_ip = string_field(cJSON_GetArrayItem(list, t), "host_ip");
            if (!strcmp(other, id) && (!ip || !other_ip || !strcmp(ip, other_ip)) && !have_node_rank)
                bad("%s: the same host as server_list[%d]: give each dtrun its --node-rank", where, t);
        }
        const cJSON *dev = cJSON_GetObjectItemCaseSensitive(srv, "device");
        if (!cJSON_IsArray(dev))
            bad("%s: missing field \"device\" (a list of {\"rank_id\": R})", where);
        int ndev = cJSON_GetArraySize(dev);
        if (ndev == 0)
            bad("%s: a host with no ranks (\"device\" is empty)", where);
        if (ndev > 1024)
            bad("%s: %d ranks: at most 1024 per host", where, ndev);
        for (int d = 0; d < ndev; d++) {
            char dwhere[400];
            snprintf(dwhere, sizeof dwhere, "%s device[%d]", where, d);
            const cJSON *e = cJSON_GetArrayItem(dev, d);
            if (!cJSON_IsObject(e))
                bad("%s: not an object", dwhere);
            long r = number_field(e, "rank_id", dwhere);
            if (r < 0)
                bad("%s: missing field \"rank_id\"", dwhere);
            if (r < next_rank)
                bad("%s: duplicate rank_id %ld (an earlier entry has it)", dwhere, r);
            if (r > next_rank)
                bad("%s: rank_id %ld leaves a gap: rank %d is in no entry before it (the ranks are 0..N-1, "
                    "consecutive within a server and in server order)", dwhere, r, next_rank);
            next_rank++;
        }
        bool this_one = have_node_rank ? s == o->node_rank : (is_this_host(id) || (ip && is_this_host(ip)));
        if (this_one) {
            if (mine < 0) {
                mine = s;
                o->nproc = ndev;
            }
            matches++;
        }
        if (s == 0) {
            const char *master = ip ? ip : id;
            if (strlen(master) >= sizeof o->master_host)
                bad("%s: the address is too long", where);
            if (!have_master) {
                snprintf(o->master_host, sizeof o->master_host, "%s", master);
                o->master_port = port > 0 ? (int)port : 29500;
            }
        }
    }
    if (have_node_rank && o->node_rank >= nservers)
        bad("--node-rank %d: the table has %d servers (0..%d)", o->node_rank, nservers, nservers - 1);
    if (!have_node_rank && matches == 0) {
        char host[256] = "";
        gethostname(host, sizeof host - 1);
        bad("unknown host: no server_id or host_ip is this host (%s) or one of its addresses; "
            "give --node-rank", host);
    }
    if (!have_node_rank && matches > 1)
        bad("%d servers are this host: give --node-rank", matches);
    o->node_rank = mine;
    o->nnodes = o->nnodes_min = nservers;
    cJSON_Delete(root);
}
