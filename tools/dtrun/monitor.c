/* dtrun --monitor ADDR:PORT: a small HTTP/1.1 server on a thread of dtrun.
 *
 *   /            the dashboard (tools/dtrun/dashboard.html, embedded)
 *   /api/state   what the page polls: the job's state, the per-rank table,
 *                the loss and throughput curves (JSON)
 *   /metrics     Prometheus text format 0.0.4
 *   /timeline    the merged --timeline file, once dtrun has written it
 *
 * One thread, poll(), non-blocking sockets, one request per connection
 * (Connection: close).  Strict: GET and HEAD only (405), exact paths (404:
 * nothing maps to the file system, so there is no path to traverse), a
 * request head of at most 8 KiB (431), 10 s to send it (408), at most 32
 * connections at once.  Loopback addresses only, unless
 * --monitor-allow-remote: then every request must carry the job token
 * (`Authorization: Bearer TOKEN`, or `?token=TOKEN` for a browser), else 401. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "monitor.h"

#define MAX_CONNS 32
#define MAX_HEAD 8192
#define REQUEST_S 10.0
#define REFRESH_S 0.5
#define MAX_TIMELINE (1L << 30)

extern const char dtrun_dashboard_html[]; /* generated from dashboard.html (CMakeLists.txt) */

const char *const mon_state_names[] = {"starting", "running", "restarting", "finished", "failed", NULL};

typedef struct {
    int fd;
    char in[MAX_HEAD];
    size_t in_len;
    mon_buf out;
    size_t out_off;
    double deadline;
    bool draining; /* answered: reading what the client still sends until it closes, so that closing with
                    * unread bytes does not reset the connection before it read the answer */
} conn;

static struct {
    bool on;
    int listen_fd;
    pthread_t thread;
    int stop; /* atomic */
    char dir[4096], url[400];
    const char *token; /* non-NULL: requests must carry it */
    const char *timeline;
    double linger;
    pthread_mutex_t mu; /* the job state below */
    dtrun_mon_state state;
    int generation;
    char why[1024];
} M = {.listen_fd = -1, .mu = PTHREAD_MUTEX_INITIALIZER};

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the address ---- */

static bool split_addr(const char *text, char *host, size_t len, int *port)
{
    const char *colon = strrchr(text, ':');
    if (!colon || colon == text)
        return false;
    const char *h = text, *e = colon;
    if (*h == '[') { /* [::1]:PORT */
        if (e[-1] != ']')
            return false;
        h++;
        e--;
    }
    if (e <= h || (size_t)(e - h) >= len)
        return false;
    memcpy(host, h, (size_t)(e - h));
    host[e - h] = '\0';
    char *end;
    long p = strtol(colon + 1, &end, 10);
    if (!colon[1] || *end || p < 0 || p > 65535)
        return false;
    *port = (int)p;
    return true;
}

static bool is_loopback(const char *host)
{
    struct in_addr a4;
    struct in6_addr a6;
    if (!strcmp(host, "localhost"))
        return true;
    if (inet_pton(AF_INET, host, &a4) == 1)
        return (ntohl(a4.s_addr) >> 24) == 127;
    if (inet_pton(AF_INET6, host, &a6) == 1)
        return IN6_IS_ADDR_LOOPBACK(&a6);
    return false;
}

const char *dtrun_monitor_check(const dtrun_opts *o)
{
    char host[256];
    int port;
    if (!split_addr(o->monitor, host, sizeof host, &port))
        return "--monitor '%s' is not ADDR:PORT (e.g. 127.0.0.1:8080; port 0 picks a free one)";
    if (!is_loopback(host) && !o->monitor_remote)
        return "--monitor '%s' is not a loopback address: anyone who reaches it would see the job. Serve it "
               "on "
               "127.0.0.1 (and tunnel, e.g. ssh -L), or add --monitor-allow-remote: every request must then "
               "carry "
               "the job token";
    if (!is_loopback(host) && !o->token[0])
        return "--monitor '%s' with --monitor-allow-remote needs a job token you know: --token-file FILE or "
               "DT_JOB_TOKEN (requests carry it as 'Authorization: Bearer TOKEN' or ?token=TOKEN)";
    return NULL;
}

/* ---- the job's state ---- */

void dtrun_monitor_note(dtrun_mon_state state, int generation, const char *why)
{
    if (!M.on)
        return;
    pthread_mutex_lock(&M.mu);
    bool keep = why == NULL && state == M.state;
    M.state = state;
    if (generation >= 0)
        M.generation = generation;
    if (!keep)
        snprintf(M.why, sizeof M.why, "%s", why ? why : "");
    pthread_mutex_unlock(&M.mu);
}

void mon_job_get(dtrun_mon_state *state, int *generation, char *why, size_t why_len)
{
    pthread_mutex_lock(&M.mu);
    *state = M.state;
    *generation = M.generation;
    snprintf(why, why_len, "%s", M.why);
    pthread_mutex_unlock(&M.mu);
}

/* ---- HTTP ---- */

static void respond(conn *c, bool head, int code, const char *type, const char *extra, const char *body,
                    size_t len)
{
    static const struct {
        int code;
        const char *text;
    } reasons[] = {{200, "OK"},
                   {400, "Bad Request"},
                   {401, "Unauthorized"},
                   {404, "Not Found"},
                   {405, "Method Not Allowed"},
                   {408, "Request Timeout"},
                   {431, "Request Header Fields Too Large"},
                   {500, "Internal Server Error"},
                   {503, "Service Unavailable"}};
    const char *reason = "Error";
    for (size_t i = 0; i < sizeof reasons / sizeof reasons[0]; i++)
        if (reasons[i].code == code)
            reason = reasons[i].text;
    mon_printf(&c->out,
               "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nCache-Control: no-store\r\n"
               "X-Content-Type-Options: nosniff\r\nConnection: close\r\n%s\r\n",
               code, reason, type, len, extra ? extra : "");
    if (!head)
        mon_put(&c->out, body, len);
}

static void respond_text(conn *c, bool head, int code, const char *extra, const char *text)
{
    respond(c, head, code, "text/plain; charset=utf-8", extra, text, strlen(text));
}

/* Constant time: the comparison does not tell how much of a guess was right. */
static bool token_equal(const char *given, size_t len)
{
    size_t want = strlen(M.token);
    unsigned diff = (unsigned)(len != want);
    for (size_t i = 0; i < len; i++)
        diff |= (unsigned)(unsigned char)given[i] ^ (unsigned)(unsigned char)M.token[i < want ? i : 0];
    return diff == 0;
}

static bool authorized(const char *query, const char *headers)
{
    if (!M.token)
        return true;
    for (const char *q = query; q && *q;) { /* ?a=b&token=T */
        size_t n = strcspn(q, "&");
        if (n > 6 && !strncmp(q, "token=", 6) && token_equal(q + 6, n - 6))
            return true;
        q += n + (q[n] == '&');
    }
    for (const char *h = headers; h && *h;) {
        size_t n = strcspn(h, "\r\n");
        if (n > 21 && !strncasecmp(h, "Authorization: Bearer ", 22) && token_equal(h + 22, n - 22))
            return true;
        h += n;
        h += strspn(h, "\r\n");
    }
    return false;
}

static void serve_timeline(conn *c, bool head)
{
    if (!M.timeline || !M.timeline[0]) {
        respond_text(c, head, 404, NULL, "no timeline: start dtrun with --timeline FILE to record one\n");
        return;
    }
    FILE *f = fopen(M.timeline, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) != 0 || st.st_size > MAX_TIMELINE) {
        char msg[4400];
        snprintf(msg, sizeof msg, "%s: %s\n", M.timeline,
                 f ? "larger than 1 GiB: open the file itself"
                   : "not written yet: dtrun merges the ranks' timelines when the job ends");
        if (f)
            fclose(f);
        respond_text(c, head, 404, NULL, msg);
        return;
    }
    char *body = malloc((size_t)st.st_size + 1);
    size_t got = body ? fread(body, 1, (size_t)st.st_size, f) : 0;
    fclose(f);
    if (!body || got != (size_t)st.st_size) {
        free(body);
        respond_text(c, head, 500, NULL, "cannot read the timeline file\n");
        return;
    }
    respond(c, head, 200, "application/json",
            "Content-Disposition: attachment; filename=\"timeline.json\"\r\n", body, got);
    free(body);
}

/* The request head is complete in c->in: prepare the whole response. */
static void handle(conn *c)
{
    c->in[c->in_len] = '\0';
    char *eol = strstr(c->in, "\r\n");
    if (!eol) {
        respond_text(c, false, 400, NULL, "bad request line\n");
        return;
    }
    *eol = '\0';
    const char *headers = eol + 2;
    char method[8], target[2048], version[16];
    int used = 0;
    if (sscanf(c->in, "%7s %2047s %15s%n", method, target, version, &used) != 3 || c->in[used] != '\0' ||
        strncmp(version, "HTTP/1.", 7) != 0 || target[0] != '/') {
        respond_text(c, false, 400, NULL, "bad request line: expected 'GET /path HTTP/1.1'\n");
        return;
    }
    bool head = !strcmp(method, "HEAD");
    if (!head && strcmp(method, "GET") != 0) {
        respond_text(c, false, 405, "Allow: GET, HEAD\r\n", "only GET and HEAD\n");
        return;
    }
    char *query = strchr(target, '?');
    if (query)
        *query++ = '\0';
    if (!authorized(query, headers)) {
        respond_text(c, head, 401, "WWW-Authenticate: Bearer realm=\"dtrun\"\r\n",
                     "this monitor needs the job token: 'Authorization: Bearer TOKEN' or ?token=TOKEN\n");
        return;
    }
    if (!strcmp(target, "/") || !strcmp(target, "/index.html")) {
        respond(c, head, 200, "text/html; charset=utf-8",
                "Content-Security-Policy: default-src 'self'; script-src 'unsafe-inline'; style-src "
                "'unsafe-inline'\r\n",
                dtrun_dashboard_html, strlen(dtrun_dashboard_html));
    } else if (!strcmp(target, "/metrics") || !strcmp(target, "/api/state")) {
        mon_state_refresh();
        mon_buf body = {0};
        bool metrics = !strcmp(target, "/metrics");
        if (metrics)
            mon_state_metrics(&body);
        else {
            struct stat st;
            mon_state_json(&body, M.timeline && M.timeline[0] && stat(M.timeline, &st) == 0);
        }
        if (body.failed)
            respond_text(c, head, 500, NULL, "out of memory\n");
        else
            respond(c, head, 200, metrics ? "text/plain; version=0.0.4; charset=utf-8" : "application/json",
                    NULL, body.p ? body.p : "", body.len);
        free(body.p);
    } else if (!strcmp(target, "/timeline")) {
        serve_timeline(c, head);
    } else {
        respond_text(c, head, 404, NULL, "not found: /, /metrics, /api/state and /timeline are served\n");
    }
}

static void conn_close(conn *c)
{
    close(c->fd);
    free(c->out.p);
    memset(c, 0, sizeof *c);
    c->fd = -1;
}

/* Read what arrived; true once a response is ready to send. */
static bool conn_read(conn *c)
{
    for (;;) {
        if (c->in_len == MAX_HEAD - 1) {
            respond_text(c, false, 431, NULL, "request head over 8 KiB\n");
            return true;
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, MAX_HEAD - 1 - c->in_len, 0);
        if (n > 0) {
            c->in_len += (size_t)n;
            c->in[c->in_len] = '\0';
            if (strstr(c->in, "\r\n\r\n")) {
                handle(c);
                return true;
            }
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return false;
        c->deadline = 0; /* closed or failed: give up on it */
        return false;
    }
}

static void *serve(void *arg)
{
    (void)arg;
    conn conns[MAX_CONNS];
    for (int i = 0; i < MAX_CONNS; i++) {
        memset(&conns[i], 0, sizeof conns[i]);
        conns[i].fd = -1;
    }
    struct pollfd pfd[MAX_CONNS + 1];
    int who[MAX_CONNS + 1];
    double next_refresh = 0;
    while (!__atomic_load_n(&M.stop, __ATOMIC_ACQUIRE)) {
        double t = now_s();
        if (t >= next_refresh) { /* the curves grow even when nobody looks */
            mon_state_refresh();
            next_refresh = t + REFRESH_S;
        }
        int n = 0;
        pfd[n] = (struct pollfd){M.listen_fd, POLLIN, 0};
        who[n++] = -1;
        for (int i = 0; i < MAX_CONNS; i++) {
            conn *c = &conns[i];
            if (c->fd < 0)
                continue;
            if (t > c->deadline) { /* too slow to ask or to read the answer */
                if (!c->out.len && !c->draining) {
                    respond_text(c, false, 408, NULL, "request not received within 10 s\n");
                    (void)!send(c->fd, c->out.p, c->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
                }
                conn_close(c);
                continue;
            }
            pfd[n] = (struct pollfd){c->fd, c->out.len && !c->draining ? POLLOUT : POLLIN, 0};
            who[n++] = i;
        }
        if (poll(pfd, (nfds_t)n, 200) <= 0)
            continue;
        for (int j = 0; j < n; j++) {
            if (!pfd[j].revents)
                continue;
            if (who[j] < 0) {
                int fd = accept4(M.listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0)
                    continue;
                int slot = -1;
                for (int i = 0; i < MAX_CONNS && slot < 0; i++)
                    if (conns[i].fd < 0)
                        slot = i;
                if (slot < 0) {
                    static const char busy[] = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n"
                                               "Connection: close\r\n\r\n";
                    (void)!send(fd, busy, sizeof busy - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
                    close(fd);
                    continue;
                }
                conns[slot].fd = fd;
                conns[slot].deadline = now_s() + REQUEST_S;
                continue;
            }
            conn *c = &conns[who[j]];
            if (c->draining) {
                char sink[4096];
                ssize_t r = recv(c->fd, sink, sizeof sink, 0);
                if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                    conn_close(c);
                continue;
            }
            if (!c->out.len) {
                if (pfd[j].revents & (POLLERR | POLLHUP | POLLNVAL) && !(pfd[j].revents & POLLIN)) {
                    conn_close(c);
                    continue;
                }
                if (!conn_read(c) && c->deadline == 0) {
                    conn_close(c);
                    continue;
                }
                if (c->out.len)
                    c->deadline = now_s() + REQUEST_S; /* time to read the answer */
            }
            if (c->out.len) {
                if (c->out.failed) {
                    conn_close(c);
                    continue;
                }
                ssize_t w =
                    send(c->fd, c->out.p + c->out_off, c->out.len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w > 0)
                    c->out_off += (size_t)w;
                if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                    conn_close(c);
                } else if (c->out_off == c->out.len) {
                    shutdown(c->fd, SHUT_WR);
                    c->draining = true;
                    c->deadline = now_s() + 2;
                }
            }
        }
    }
    for (int i = 0; i < MAX_CONNS; i++)
        if (conns[i].fd >= 0)
            conn_close(&conns[i]);
    return NULL;
}

/* ---- start and stop ---- */

int dtrun_monitor_start(const dtrun_opts *o)
{
    char host[256], port_text[16];
    int port;
    if (!split_addr(o->monitor, host, sizeof host, &port))
        return 1; /* dtrun_monitor_check said so */
    snprintf(port_text, sizeof port_text, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *res = NULL;
    int rc = getaddrinfo(host, port_text, &hints, &res);
    if (rc != 0) {
        fprintf(stderr, "dtrun: --monitor %s: %s\n", o->monitor, gai_strerror(rc));
        return 1;
    }
    int fd = -1, err = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        int one = 1;
        if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
                        bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 16) != 0)) {
            err = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        fprintf(stderr, "dtrun: --monitor %s: cannot listen: %s\n", o->monitor, strerror(err ? err : EINVAL));
        return 1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                          : ((struct sockaddr_in *)&ss)->sin_port);
    const char *tmp = getenv("TMPDIR");
    snprintf(M.dir, sizeof M.dir, "%s/dtrun-monitor-XXXXXX",
             tmp && *tmp && strlen(tmp) < 3000 ? tmp : "/tmp");
    if (!mkdtemp(M.dir)) {
        fprintf(stderr, "dtrun: --monitor: cannot create a directory %s: %s\n", M.dir, strerror(errno));
        close(fd);
        return 1;
    }
    setenv("DT_MONITOR_DIR", M.dir, 1); /* the ranks inherit it */
    mon_state_init(M.dir);
    M.listen_fd = fd;
    M.token = is_loopback(host) ? NULL : o->token;
    M.timeline = o->timeline;
    M.linger = o->monitor_linger;
    M.state = DTRUN_MON_STARTING;
    M.on = true;
    snprintf(M.url, sizeof M.url, "http://%s%s%s:%d/", strchr(host, ':') ? "[" : "", host,
             strchr(host, ':') ? "]" : "", port);
    if (pthread_create(&M.thread, NULL, serve, NULL) != 0) {
        fprintf(stderr, "dtrun: --monitor: cannot start its thread\n");
        M.on = false;
        close(fd);
        rmdir(M.dir);
        return 1;
    }
    fprintf(stderr, "dtrun: monitor: dashboard at %s, Prometheus metrics at %smetrics%s\n", M.url, M.url,
            M.token ? " (requests need the job token)" : "");
    return 0;
}

static volatile sig_atomic_t linger_stop;
static void on_linger_signal(int sig)
{
    (void)sig;
    linger_stop = 1;
}

static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char path[4400];
    while (d && (e = readdir(d))) { /* rank<R>.jsonl, as the ranks named them */
        int r, used = 0;
        if (sscanf(e->d_name, "rank%d.jsonl%n", &r, &used) == 1 && e->d_name[used] == '\0') {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    }
    if (d)
        closedir(d);
    if (rmdir(dir) != 0)
        fprintf(stderr, "dtrun: monitor: could not remove %s: %s\n", dir, strerror(errno));
}

void dtrun_monitor_stop(int code)
{
    if (!M.on)
        return;
    pthread_mutex_lock(&M.mu);
    if (code == 0 && M.state != DTRUN_MON_FINISHED) {
        M.state = DTRUN_MON_FINISHED;
        snprintf(M.why, sizeof M.why, "every rank exited 0");
    } else if (code != 0 && M.state != DTRUN_MON_FAILED) {
        M.state = DTRUN_MON_FAILED;
        snprintf(M.why, sizeof M.why, "dtrun exits with status %d", code);
    }
    pthread_mutex_unlock(&M.mu);
    if (M.linger > 0) {
        fprintf(stderr, "dtrun: monitor: serving the final state at %s for %.0f s more (Ctrl-C ends it)\n",
                M.url, M.linger);
        struct sigaction sa = {0}, old_int, old_term;
        sa.sa_handler = on_linger_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, &old_int);
        sigaction(SIGTERM, &sa, &old_term);
        double end = now_s() + M.linger;
        while (!linger_stop && now_s() < end)
            nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
        sigaction(SIGINT, &old_int, NULL);
        sigaction(SIGTERM, &old_term, NULL);
    }
    __atomic_store_n(&M.stop, 1, __ATOMIC_RELEASE);
    pthread_join(M.thread, NULL);
    close(M.listen_fd);
    mon_state_free();
    remove_dir(M.dir);
    unsetenv("DT_MONITOR_DIR");
    M.on = false;
}
