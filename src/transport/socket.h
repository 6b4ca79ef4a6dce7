/* System-call wrappers for TCP sockets: EINTR/EAGAIN retried, every blocking
 * step bounded by a deadline, errors reported with the peer's address. */
#ifndef DT_TRANSPORT_SOCKET_H
#define DT_TRANSPORT_SOCKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/base.h"

/* "host:port" -> host (copied into `host`, at most hostlen) and port. */
dt_status dt__parse_hostport(const char *text, char *host, size_t hostlen, int *port);

/* Listen on bind_ip ("0.0.0.0" for all) and port (0 = any); returns the
 * nonblocking socket and the port actually bound. */
dt_status dt__sock_listen(const char *bind_ip, int port, int *fd_out, int *port_out);
/* Connect, retrying refused/unreachable until the deadline (the other side may
 * not listen yet).  Returns a nonblocking socket with TCP_NODELAY set (as
 * dt__sock_accept's). */
dt_status dt__sock_connect(const char *host, int port, int64_t deadline_ns, int *fd_out);
/* Many connects at once: start one without waiting (the socket, or -1
 * where it failed at once), then wait for it; false: it failed and fd is
 * closed (dt__sock_connect then retries it and reports what it meets). */
int dt__sock_connect_start(const char *host, int port);
bool dt__sock_connect_wait(int fd, int64_t deadline_ns);
/* Accept one pending connection (nonblocking); *fd_out = -1 when none. */
dt_status dt__sock_accept(int listen_fd, int *fd_out, char *peer, size_t peerlen);

dt_status dt__sock_set_nonblock(int fd);
/* TCP_NODELAY, socket buffers of `bufsize` bytes (0 keeps the kernel's),
 * keepalive, and the congestion control `congestion` (NULL or "" keeps the
 * system's default); fails only when the kernel refuses the congestion control. */
dt_status dt__sock_tune(int fd, int bufsize, const char *congestion);
/* Whether this process may use TCP congestion control `name` on its sockets;
 * the error names what the kernel offers. */
dt_status dt__sock_check_congestion(const char *name);
/* Whether fd's congestion control is a bbr, which every 10 s drains the
 * connection to 4 packets for 200 ms to probe the round trip (false where
 * the name cannot be read). */
bool dt__sock_probes_rtt(int fd);

/* Send/receive exactly len bytes on a nonblocking socket, polling until the
 * deadline.  `what` names the other side for error messages. */
dt_status dt__sock_send_all(int fd, const void *buf, size_t len, int64_t deadline_ns, const char *what);
dt_status dt__sock_recv_all(int fd, void *buf, size_t len, int64_t deadline_ns, const char *what);

/* "a.b.c.d:port" of the local / remote end. */
void dt__sock_local_name(int fd, char *buf, size_t len);
void dt__sock_peer_name(int fd, char *buf, size_t len);
/* Local IPv4 address of a connected socket (the interface that reaches the peer). */
void dt__sock_local_ip(int fd, char *buf, size_t len);

/* Little-endian integer encoding for wire formats. */
void dt__put_u16(uint8_t *p, uint16_t v);
void dt__put_u32(uint8_t *p, uint32_t v);
void dt__put_u64(uint8_t *p, uint64_t v);
uint16_t dt__get_u16(const uint8_t *p);
uint32_t dt__get_u32(const uint8_t *p);
uint64_t dt__get_u64(const uint8_t *p);

#endif
