#include "transport/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/status.h"

dt_status dt__parse_hostport(const char *text, char *host, size_t hostlen, int *port)
{
    const char *colon = text ? strrchr(text, ':') : NULL;
    if (!colon || colon == text || (size_t)(colon - text) >= hostlen)
        return dt__fail(DT_ERR_INVALID, "'%s' is not of the form HOST:PORT", text ? text : "");
    int64_t p;
    if (dt__parse_int(colon + 1, 1, 65535, &p) != DT_OK)
        return dt__wrap(DT_ERR_INVALID, "port of '%s': ", text);
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = '\0';
    *port = (int)p;
    return DT_OK;
}

static dt_status resolve(const char *host, int port, struct sockaddr_in *sa)
{
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa->sin_addr) == 1)
        return DT_OK;
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || !res)
        return dt__fail(DT_ERR_INVALID, "cannot resolve host '%s': %s", host, gai_strerror(rc));
    sa->sin_addr = ((struct sockaddr_in *)res->ai_addr)->sin_addr;
    freeaddrinfo(res);
    return DT_OK;
}

dt_status dt__sock_set_nonblock(int fd)
{
    int flags = fcntl(fd, F_GETFL, 0);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return dt__fail_errno(DT_ERR_SYSTEM, "fcntl(O_NONBLOCK)");
    return DT_OK;
}

/* First line of a /proc file, or "?" where it cannot be read. */
static void read_line(const char *path, char *buf, size_t len)
{
    FILE *f = fopen(path, "r");
    if (!f || !fgets(buf, (int)len, f))
        snprintf(buf, len, "?");
    buf[strcspn(buf, "\n")] = '\0';
    if (f)
        fclose(f);
}

static dt_status set_congestion(int fd, const char *name)
{
    if (setsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, (socklen_t)strlen(name)) == 0)
        return DT_OK;
    int e = errno;
    char avail[256], allowed[256];
    read_line("/proc/sys/net/ipv4/tcp_available_congestion_control", avail, sizeof avail);
    read_line("/proc/sys/net/ipv4/tcp_allowed_congestion_control", allowed, sizeof allowed);
    if (e == ENOENT)
        return dt__fail(DT_ERR_INVALID, "DT_TCP_CONGESTION='%s': this kernel has no such TCP congestion control "
                        "(available: %s)", name, avail);
    if (e == EPERM)
        return dt__fail(DT_ERR_INVALID, "DT_TCP_CONGESTION='%s': not permitted without CAP_NET_ADMIN "
                        "(allowed: %s)", name, allowed);
    errno = e;
    return dt__fail_errno(DT_ERR_INVALID, "DT_TCP_CONGESTION='%s': setsockopt(TCP_CONGESTION)", name);
}

dt_status dt__sock_tune(int fd, int bufsize, const char *congestion)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    if (bufsize > 0) {
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bufsize, sizeof bufsize);
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bufsize, sizeof bufsize);
    }
    return congestion && congestion[0] ? set_congestion(fd, congestion) : DT_OK;
}

bool dt__sock_probes_rtt(int fd)
{
    char name[32] = {0};
    socklen_t len = sizeof name - 1;
    if (getsockopt(fd, IPPROTO_TCP, TCP_CONGESTION, name, &len) != 0)
        return false;
    return strncmp(name, "bbr", 3) == 0;
}

dt_status dt__sock_check_congestion(const char *name)
{
    if (!name || !name[0])
        return DT_OK;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return dt__fail_errno(DT_ERR_SYSTEM, "socket");
    dt_status s = set_congestion(fd, name);
    close(fd);
    return s;
}

dt_status dt__sock_listen(const char *bind_ip, int port, int *fd_out, int *port_out)
{
    struct sockaddr_in sa;
    DT_CHECK(resolve(bind_ip, port, &sa));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return dt__fail_errno(DT_ERR_SYSTEM, "socket");
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
        dt_status s = dt__fail_errno(DT_ERR_SYSTEM, "bind %s:%d", bind_ip, port);
        close(fd);
        return s;
    }
    if (listen(fd, SOMAXCONN) < 0 || dt__sock_set_nonblock(fd) != DT_OK) {
        dt_status s = dt__fail_errno(DT_ERR_SYSTEM, "listen %s:%d", bind_ip, port);
        close(fd);
        return s;
    }
    socklen_t len = sizeof sa;
    getsockname(fd, (struct sockaddr *)&sa, &len);
    *fd_out = fd;
    if (port_out)
        *port_out = ntohs(sa.sin_port);
    return DT_OK;
}

/* Every TCP socket of dtrain speaks request and reply (the store, the
 * job-token handshakes) or streams with TCP_NODELAY (dt__sock_tune): Nagle's
 * algorithm would hold the second small send of a message (the store sends
 * a header, then the key) until the first is acknowledged, which the other
 * side delays by 40 ms while it waits for the rest: 40 to 80 ms per store
 * request, most of a restart's store round trips. */
static void no_delay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A connect issued without waiting: 0 connected, 2 under way (*fd_out
 * set), 1 = retry later, -1 = an error (errno). */
static int connect_start(const struct sockaddr_in *sa, int *fd_out)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    no_delay(fd);
    *fd_out = fd;
    if (connect(fd, (const struct sockaddr *)sa, sizeof *sa) == 0)
        return 0;
    if (errno == EINPROGRESS)
        return 2;
    int e = errno;
    close(fd);
    errno = e;
    return (e == ECONNREFUSED || e == ENETUNREACH || e == EHOSTUNREACH || e == EAGAIN) ? 1 : -1;
}

/* Wait for connect_start's connect under way on fd; on failure fd is
 * closed.  0 connected, 1 = retry later, -1 = an error (errno). */
static int connect_finish(int fd, int64_t deadline_ns)
{
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int rc;
    do
        rc = poll(&p, 1, dt__ms_left(deadline_ns, 1000));
    while (rc < 0 && errno == EINTR);
    int err = 0;
    socklen_t elen = sizeof err;
    if (rc <= 0) {
        close(fd);
        errno = rc == 0 ? ETIMEDOUT : errno;
        return 1;
    }
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen);
    if (err) {
        close(fd);
        errno = err;
        return (err == ECONNREFUSED || err == ENETUNREACH || err == EHOSTUNREACH || err == ETIMEDOUT) ? 1 : -1;
    }
    return 0;
}

/* One nonblocking connect attempt bounded by the deadline; 1 = retry later. */
static int connect_once(const struct sockaddr_in *sa, int64_t deadline_ns, int *fd_out)
{
    int rc = connect_start(sa, fd_out);
    return rc == 2 ? connect_finish(*fd_out, deadline_ns) : rc;
}

int dt__sock_connect_start(const char *host, int port)
{
    struct sockaddr_in sa;
    int fd = -1;
    if (resolve(host, port, &sa) != DT_OK)
        return -1;
    int rc = connect_start(&sa, &fd);
    return rc == 0 || rc == 2 ? fd : -1;
}

bool dt__sock_connect_wait(int fd, int64_t deadline_ns)
{
    return connect_finish(fd, deadline_ns) == 0;
}

dt_status dt__sock_connect(const char *host, int port, int64_t deadline_ns, int *fd_out)
{
    struct sockaddr_in sa;
    DT_CHECK(resolve(host, port, &sa));
    int delay_ms = 10;
    for (;;) {
        int rc = connect_once(&sa, deadline_ns, fd_out);
        if (rc == 0)
            return DT_OK;
        if (rc < 0)
            return dt__fail_errno(DT_ERR_SYSTEM, "connect to %s:%d", host, port);
        if (dt__now_ns() >= deadline_ns)
            return dt__fail_errno(DT_ERR_TIMEOUT, "connect to %s:%d: gave up at the deadline", host, port);
        poll(NULL, 0, dt__ms_left(deadline_ns, delay_ms));
        if (delay_ms < 500)
            delay_ms *= 2;
    }
}

dt_status dt__sock_accept(int listen_fd, int *fd_out, char *peer, size_t peerlen)
{
    struct sockaddr_in sa;
    socklen_t len = sizeof sa;
    int fd;
    do
        fd = accept4(listen_fd, (struct sockaddr *)&sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        *fd_out = -1;
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED)
            return DT_OK;
        return dt__fail_errno(DT_ERR_SYSTEM, "accept");
    }
    no_delay(fd);
    if (peer) {
        char ip[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
        snprintf(peer, peerlen, "%s:%d", ip, ntohs(sa.sin_port));
    }
    *fd_out = fd;
    return DT_OK;
}

static dt_status wait_fd(int fd, short events, int64_t deadline_ns, const char *what)
{
    for (;;) {
        int ms = dt__ms_left(deadline_ns, 1000);
        if (ms == 0 && dt__now_ns() >= deadline_ns)
            return dt__fail(DT_ERR_TIMEOUT, "timed out waiting for %s", what);
        struct pollfd p = {.fd = fd, .events = events};
        int rc = poll(&p, 1, ms);
        if (rc > 0)
            return DT_OK;
        if (rc < 0 && errno != EINTR)
            return dt__fail_errno(DT_ERR_SYSTEM, "poll on %s", what);
    }
}

dt_status dt__sock_send_all(int fd, const void *buf, size_t len, int64_t deadline_ns, const char *what)
{
    const uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            DT_CHECK(wait_fd(fd, POLLOUT, deadline_ns, what));
        } else if (n < 0 && errno != EINTR) {
            return dt__fail_errno(DT_ERR_PEER, "send to %s", what);
        }
    }
    return DT_OK;
}

dt_status dt__sock_recv_all(int fd, void *buf, size_t len, int64_t deadline_ns, const char *what)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
        } else if (n == 0) {
            return dt__fail(DT_ERR_PEER, "%s closed the connection", what);
        } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
            DT_CHECK(wait_fd(fd, POLLIN, deadline_ns, what));
        } else if (errno != EINTR) {
            return dt__fail_errno(DT_ERR_PEER, "recv from %s", what);
        }
    }
    return DT_OK;
}

static void name_of(int fd, int local, char *buf, size_t len, int with_port)
{
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    int rc = local ? getsockname(fd, (struct sockaddr *)&sa, &sl) : getpeername(fd, (struct sockaddr *)&sa, &sl);
    char ip[INET_ADDRSTRLEN] = "?";
    if (rc == 0)
        inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
    if (with_port)
        snprintf(buf, len, "%s:%d", ip, rc == 0 ? ntohs(sa.sin_port) : 0);
    else
        snprintf(buf, len, "%s", ip);
}

void dt__sock_local_name(int fd, char *buf, size_t len) { name_of(fd, 1, buf, len, 1); }
void dt__sock_peer_name(int fd, char *buf, size_t len) { name_of(fd, 0, buf, len, 1); }
void dt__sock_local_ip(int fd, char *buf, size_t len) { name_of(fd, 1, buf, len, 0); }

void dt__put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}
void dt__put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
void dt__put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}
uint16_t dt__get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
uint32_t dt__get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
uint64_t dt__get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}
