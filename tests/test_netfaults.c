/* Unit tests of the transport under the faults of issue 29: a heartbeat
 * whose store is slow to answer at start-up, strangers crowding the store
 * and a rank's peer port, file descriptors running out. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "check.h"
#include "dtrain/store.h"
#include "transport/engine.h"
#include "transport/heartbeat.h"
#include "transport/socket.h"
#include "transport/store_limits.h"

static const char *TOKEN = "unit-test-token";

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int free_port(void)
{
    int fd, port;
    if (dt__sock_listen("127.0.0.1", 0, &fd, &port) != DT_OK)
        return -1;
    close(fd);
    return port;
}

typedef struct {
    int port;
    double after_s;
    dt_store_server *srv;
} late_store;

static void *start_late(void *arg)
{
    late_store *l = arg;
    sleep_s(l->after_s);
    if (dt_store_server_start("127.0.0.1", l->port, TOKEN, &l->srv) != DT_OK)
        l->srv = NULL;
    return NULL;
}

/* D: the heartbeat's first connection retries within the heartbeat timeout
 * (5 s), not one period (0.5 s): a store that answers only after 1.5 s (a
 * loaded machine) must not stop the job from starting. */
static void test_heartbeat_start_retries(void)
{
    late_store l = {.port = free_port(), .after_s = 1.5};
    EXPECT(l.port > 0);
    pthread_t th;
    pthread_create(&th, NULL, start_late, &l);
    dt__heartbeat_config cfg = {.host = "127.0.0.1", .port = l.port, .token = TOKEN, .key_prefix = "w0",
                                .rank = 0, .size = 2, .timeout_s = 5};
    dt__heartbeat *h = NULL;
    int64_t t0 = dt__now_ns();
    dt_status s = dt__heartbeat_start(&cfg, &h);
    double took = (double)(dt__now_ns() - t0) / 1e9;
    if (s != DT_OK)
        fprintf(stderr, "heartbeat start: %s (after %.2f s)\n", dt_last_error(), took);
    EXPECT_STATUS(s, DT_OK);
    EXPECT(took < 5);
    dt__heartbeat_stop(h);
    pthread_join(th, NULL);
    EXPECT(l.srv != NULL);
    dt_store_server_stop(l.srv);
}

/* A TCP connection to 127.0.0.1:port that sends nothing (blocking connect;
 * the kernel completes it from the listen backlog). */
static int idle_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Strangers that hold n idle connections to a port, opening a new one for
 * each the server drops, until told to stop. */
typedef struct {
    int port, n;
    atomic_bool stop;
    long reopened;
} flood;

static void *flood_main(void *arg)
{
    flood *f = arg;
    struct pollfd *p = calloc((size_t)f->n, sizeof *p);
    for (int i = 0; i < f->n; i++)
        p[i] = (struct pollfd){.fd = idle_connect(f->port), .events = POLLIN};
    while (!atomic_load(&f->stop)) {
        if (poll(p, (nfds_t)f->n, 50) <= 0)
            continue;
        for (int i = 0; i < f->n; i++) {
            if (!p[i].revents)
                continue;
            char buf[64];
            if (recv(p[i].fd, buf, sizeof buf, MSG_DONTWAIT) > 0)
                continue; /* the challenge: ignore it, stay idle */
            close(p[i].fd);
            p[i].fd = idle_connect(f->port);
            f->reopened++;
        }
    }
    for (int i = 0; i < f->n; i++)
        if (p[i].fd >= 0)
            close(p[i].fd);
    free(p);
    return NULL;
}

/* Send stderr to a file for a while; returns the saved stderr. */
static int stderr_to(const char *path)
{
    fflush(stderr);
    int saved = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    dup2(fd, 2);
    close(fd);
    return saved;
}

static void stderr_back(int saved)
{
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
}

static int lines_with(const char *path, const char *part)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    int n = 0;
    while (f && fgets(line, sizeof line, f))
        n += strstr(line, part) != NULL;
    if (f)
        fclose(f);
    return n;
}

/* A: 4500 idle strangers (more than the 4096 clients the store serves),
 * re-opened when dropped, must not keep the job's own processes out; the
 * log stays short. */
static void test_store_flood(void)
{
    dt_store_server *srv;
    EXPECT_STATUS(dt_store_server_start("127.0.0.1", 0, TOKEN, &srv), DT_OK);
    flood f = {.port = dt_store_server_port(srv), .n = 4500};
    char log[] = "/tmp/dt-netfaults-XXXXXX";
    int lfd = mkstemp(log);
    close(lfd);
    int saved = stderr_to(log);
    pthread_t th;
    pthread_create(&th, NULL, flood_main, &f);
    sleep_s(3); /* the strangers are in */
    int ok = 0;
    double worst = 0;
    for (int i = 0; i < 3; i++) {
        dt_store_client *c = NULL;
        int64_t t0 = dt__now_ns();
        dt_status s = dt_store_connect("127.0.0.1", f.port, TOKEN, 10, &c);
        double took = (double)(dt__now_ns() - t0) / 1e9;
        worst = took > worst ? took : worst;
        if (s == DT_OK && dt_store_set(c, "k", "v", 2) == DT_OK)
            ok++;
        else
            fprintf(stdout, "connect %d behind 4500 strangers: %s\n", i, dt_last_error());
        dt_store_close(c);
    }
    atomic_store(&f.stop, true);
    pthread_join(th, NULL);
    stderr_back(saved);
    int lines = lines_with(log, "rendezvous store");
    printf("3 clients behind 4500 idle strangers: %d got in (slowest %.2f s); %ld strangers re-opened; %d log lines\n",
           ok, worst, f.reopened, lines);
    EXPECT_EQ(ok, 3);
    EXPECT(lines <= 20);
    unlink(log);
    dt_store_server_stop(srv);
}

/* A: a client turned away for want of room is told why. */
static void test_store_too_many_clients(void)
{
    dt_store_server *srv;
    EXPECT_STATUS(dt_store_server_start("127.0.0.1", 0, TOKEN, &srv), DT_OK);
    dt__store_server_set_limits(srv, 2, 8);
    int port = dt_store_server_port(srv);
    dt_store_client *a, *b, *c = NULL;
    EXPECT_STATUS(dt_store_connect("127.0.0.1", port, TOKEN, 5, &a), DT_OK);
    EXPECT_STATUS(dt_store_connect("127.0.0.1", port, TOKEN, 5, &b), DT_OK);
    EXPECT_STATUS(dt_store_connect("127.0.0.1", port, TOKEN, 1, &c), DT_ERR_PEER);
    EXPECT_CONTAINS(dt_last_error(), "too many clients");
    dt_store_close(a); /* room again: the next one gets in */
    EXPECT_STATUS(dt_store_connect("127.0.0.1", port, TOKEN, 5, &c), DT_OK);
    dt_store_close(b);
    dt_store_close(c);
    dt_store_server_stop(srv);
}

static double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* C: out of file descriptors, the store's acceptor says so and backs off
 * instead of spinning on the failing accept; it serves again once there
 * is room.  Lowers this process's descriptor limit: run last. */
static void test_store_out_of_fds(void)
{
    dt_store_server *srv;
    EXPECT_STATUS(dt_store_server_start("127.0.0.1", 0, TOKEN, &srv), DT_OK);
    int port = dt_store_server_port(srv);
    char log[] = "/tmp/dt-netfaults-XXXXXX";
    int lfd = mkstemp(log);
    close(lfd);
    int saved = stderr_to(log);
    enum { WAITING = 16, MAX = 200 };
    int waiting[WAITING]; /* made now, connected once the descriptors ran out */
    for (int i = 0; i < WAITING; i++)
        waiting[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct rlimit old, low;
    getrlimit(RLIMIT_NOFILE, &old);
    int probe = dup(0); /* the lowest free descriptor: how many are in use */
    close(probe);
    low = old;
    low.rlim_cur = (rlim_t)probe + 40;
    setrlimit(RLIMIT_NOFILE, &low);
    dt_store_client *clients[MAX];
    int n = 0;
    while (n < MAX && dt_store_connect("127.0.0.1", port, TOKEN, 1, &clients[n]) == DT_OK)
        n++;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < WAITING; i++)
        if (connect(waiting[i], (struct sockaddr *)&sa, sizeof sa) < 0)
            fprintf(stdout, "connect: %s\n", strerror(errno));
    sleep_s(0.5);
    double cpu0 = cpu_seconds();
    sleep_s(2);
    double cpu = cpu_seconds() - cpu0;
    for (int i = 0; i < n; i++)
        dt_store_close(clients[i]);
    for (int i = 0; i < WAITING; i++)
        close(waiting[i]);
    setrlimit(RLIMIT_NOFILE, &old);
    dt_store_client *c = NULL; /* room again */
    dt_status s = dt_store_connect("127.0.0.1", port, TOKEN, 5, &c);
    stderr_back(saved);
    int lines = lines_with(log, "accept");
    printf("out of descriptors with %d clients and %d waiting: %.2f s of CPU in 2 s, %d log lines about accept\n", n,
           WAITING, cpu, lines);
    EXPECT(n > 0 && n < MAX);
    EXPECT(cpu < 0.4);
    EXPECT(lines >= 1 && lines <= 10);
    EXPECT_STATUS(s, DT_OK);
    dt_store_close(c);
    unlink(log);
    dt_store_server_stop(srv);
}

typedef struct {
    int port, rank;
    dt_status create;
    double took;
    char message[512];
} engine_rank;

static void *engine_rank_main(void *arg)
{
    engine_rank *a = arg;
    dt_store_client *store;
    int64_t t0 = dt__now_ns();
    a->create = dt_store_connect("127.0.0.1", a->port, TOKEN, 5, &store);
    if (a->create != DT_OK)
        return NULL;
    dt__engine_config cfg = {.rank = a->rank, .size = 3, .token = TOKEN, .key_prefix = "b0", .timeout_s = 30,
                             .transport = DT__TRANSPORT_TCP};
    dt__engine *e = NULL;
    a->create = dt__engine_create(&cfg, store, &e);
    a->took = (double)(dt__now_ns() - t0) / 1e9;
    snprintf(a->message, sizeof a->message, "%s", a->create == DT_OK ? "" : dt_last_error());
    if (e) {
        dt__engine_close(e);
        dt__engine_destroy(e);
    }
    dt_store_close(store);
    return NULL;
}

/* B: two idle connections to rank 0's peer port during start-up do not keep
 * ranks 1 and 2 out (the listener handshook one connection at a time, 10 s
 * each, and the connectors gave up after their own 10 s). */
static void test_engine_idle_strangers(void)
{
    dt_store_server *srv;
    EXPECT_STATUS(dt_store_server_start("127.0.0.1", 0, TOKEN, &srv), DT_OK);
    engine_rank r[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++)
        r[i] = (engine_rank){.port = dt_store_server_port(srv), .rank = i};
    pthread_create(&th[0], NULL, engine_rank_main, &r[0]);
    dt_store_client *c;
    EXPECT_STATUS(dt_store_connect("127.0.0.1", r[0].port, TOKEN, 5, &c), DT_OK);
    void *addr = NULL;
    size_t len;
    EXPECT_STATUS(dt_store_get(c, "b0/addr/0", 10, &addr, &len), DT_OK);
    char host[64];
    int port = 0;
    if (addr) {
        char *sp = strchr(addr, ' ');
        if (sp)
            *sp = '\0';
        dt__parse_hostport(addr, host, sizeof host, &port);
    }
    free(addr);
    int strangers[2] = {idle_connect(port), idle_connect(port)};
    EXPECT(strangers[0] >= 0 && strangers[1] >= 0);
    sleep_s(0.2); /* the listener takes them first */
    pthread_create(&th[1], NULL, engine_rank_main, &r[1]);
    pthread_create(&th[2], NULL, engine_rank_main, &r[2]);
    for (int i = 0; i < 3; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 3; i++) {
        printf("rank %d with 2 idle strangers at rank 0: %s in %.2f s %s\n", i, dt_status_name(r[i].create),
               r[i].took, r[i].message);
        EXPECT_STATUS(r[i].create, DT_OK);
        EXPECT(r[i].took < 5);
    }
    close(strangers[0]);
    close(strangers[1]);
    dt_store_close(c);
    dt_store_server_stop(srv);
}

int main(void)
{
    test_heartbeat_start_retries();
    test_store_too_many_clients();
    test_engine_idle_strangers();
    test_store_flood();
    test_store_out_of_fds();
    return CHECK_DONE("test_netfaults");
}
