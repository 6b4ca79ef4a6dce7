/* The rendezvous store's acceptor: accepts arrivals and runs their job-token
 * handshakes side by side in one poll loop; only a connection that proved
 * the token gets a thread (store_server.c).
 *
 * Strangers must not crowd out the job's own processes (issue 29, A and C):
 * - a connection has AUTH_SECONDS to prove the job token;
 * - handshakes in progress are capped (max_unauth, 512) apart from the
 *   authenticated clients (max_auth, 4096): at the cap the oldest is dropped,
 *   never the newcomer, so a rank arriving behind a flood of idle connections
 *   still gets in, and a stranger costs a descriptor and a slot, no thread;
 * - with max_auth clients served a newcomer is told "too many clients" (a
 *   DTNO greeting the client reports) and closed;
 * - out of file descriptors (EMFILE/ENFILE), the oldest handshake is dropped
 *   to make room, or with none the listener is left alone for
 *   ACCEPT_BACKOFF_MS (it stays readable: polling it at once spins a core);
 * - lines strangers can provoke are rate limited (LOG_BURST per LOG_WINDOW_S,
 *   then one line counting those suppressed). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/status.h"
#include "transport/auth.h"
#include "transport/socket.h"
#include "transport/store_internal.h"

#define AUTH_SECONDS 3.0
#define ACCEPT_BACKOFF_MS 100
#define ACCEPT_BURST 64 /* accepts in a row before the handshakes are looked at again */
#define LOG_BURST 5
#define LOG_WINDOW_S 10.0

typedef struct {
    int fd; /* -1: a free slot */
    int64_t started, deadline;
    uint8_t challenge[DT_AUTH_CHALLENGE_LEN];
    uint8_t response[DT_AUTH_RESPONSE_LEN];
    size_t got;
    char peer[96];
} handshake;

typedef struct {
    dt_store_server *s;
    handshake hs[DT__STORE_MAX_UNAUTH];
    int n; /* slots in use */
    long dropped;
    dt__log_limit refusals, accept_failures;
} acceptor;

static void refuse(acceptor *a, handshake *h, const char *why)
{
    long suppressed = 0;
    pthread_mutex_lock(&a->s->mu);
    a->s->refused++;
    bool quiet = a->s->stopping;
    pthread_mutex_unlock(&a->s->mu);
    if (!quiet && dt__log_limit_pass(&a->refusals, &suppressed)) {
        if (suppressed)
            DT_WARN("rendezvous store: refused a connection: %s (and %ld more since the last such line)", why,
                    suppressed);
        else
            DT_WARN("rendezvous store: refused a connection: %s", why);
    }
    if (h) {
        close(h->fd);
        h->fd = -1;
        a->n--;
    }
}

/* Make room: drop the oldest handshake; false when there is none. */
static bool drop_oldest(acceptor *a, const char *because)
{
    handshake *oldest = NULL;
    for (int i = 0; i < DT__STORE_MAX_UNAUTH; i++)
        if (a->hs[i].fd >= 0 && (!oldest || a->hs[i].started < oldest->started))
            oldest = &a->hs[i];
    if (!oldest)
        return false;
    char why[320];
    a->dropped++;
    snprintf(why, sizeof why, "%.96s had not proved the job token; dropped to make room (%.80s; %ld dropped so far)",
             oldest->peer, because, a->dropped);
    refuse(a, oldest, why);
    return true;
}

static void arrived(acceptor *a, int fd, const char *from)
{
    dt_store_server *s = a->s;
    pthread_mutex_lock(&s->mu);
    int max_auth = s->max_auth, max_unauth = s->max_unauth, served = s->nclients;
    pthread_mutex_unlock(&s->mu);
    char peer[96];
    snprintf(peer, sizeof peer, "client %s", from);
    if (served >= max_auth) { /* say why instead of a bare close */
        uint8_t msg[DT_AUTH_CHALLENGE_LEN] = {0};
        memcpy(msg, DT_AUTH_REFUSAL, 4);
        snprintf((char *)msg + 4, sizeof msg - 4, "too many clients (%d)", max_auth);
        if (send(fd, msg, sizeof msg, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
            /* nothing more to tell it */
        }
        close(fd);
        char why[160];
        snprintf(why, sizeof why, "%s: too many clients (%d)", peer, max_auth);
        refuse(a, NULL, why);
        return;
    }
    if (a->n >= max_unauth)
        drop_oldest(a, "too many connections proving the job token");
    handshake *h = NULL;
    for (int i = 0; !h && i < DT__STORE_MAX_UNAUTH; i++)
        if (a->hs[i].fd < 0)
            h = &a->hs[i];
    *h = (handshake){.fd = fd, .started = dt__now_ns(), .deadline = dt__deadline_after(AUTH_SECONDS)};
    snprintf(h->peer, sizeof h->peer, "%s", peer);
    a->n++;
    /* 37 bytes into a fresh socket's empty buffer: sent whole or not at all */
    if (dt__auth_challenge(h->challenge) != DT_OK ||
        send(fd, h->challenge, sizeof h->challenge, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof h->challenge)
        refuse(a, h, "cannot send the challenge");
}

/* Read what h's client sent; a proven client gets its thread. */
static void pump(acceptor *a, handshake *h)
{
    ssize_t n = recv(h->fd, h->response + h->got, sizeof h->response - h->got, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    char why[256];
    if (n <= 0) {
        snprintf(why, sizeof why, "%.96s closed the connection during the handshake", h->peer);
        refuse(a, h, why);
        return;
    }
    h->got += (size_t)n;
    if (h->got < sizeof h->response)
        return;
    uint8_t proof[DT_AUTH_PROOF_LEN];
    if (dt__auth_check(a->s->token, "dtrain-store", h->challenge, h->response, h->peer, proof, NULL) != DT_OK) {
        dt__auth_refuse_token(h->fd);
        refuse(a, h, dt_last_error());
        return;
    }
    if (send(h->fd, proof, sizeof proof, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof proof) {
        snprintf(why, sizeof why, "%.96s: cannot send the proof", h->peer);
        refuse(a, h, why);
        return;
    }
    if (!dt__store_serve_client(a->s, h->fd, h->peer)) {
        snprintf(why, sizeof why, "%.96s: no thread to serve it", h->peer);
        refuse(a, h, why);
        return;
    }
    h->fd = -1; /* the client's thread owns it now */
    a->n--;
}

/* accept() failed for want of descriptors or memory: make room or back off. */
static int64_t accept_failed(acceptor *a, int err)
{
    char because[96];
    snprintf(because, sizeof because, "accept failed: %s", strerror(err));
    if (drop_oldest(a, because))
        return 0;
    long suppressed = 0;
    if (dt__log_limit_pass(&a->accept_failures, &suppressed))
        DT_WARN("rendezvous store: cannot accept connections: %s (%d clients served); trying again every %d ms%s",
                strerror(err), a->s->nclients, ACCEPT_BACKOFF_MS,
                suppressed ? " (failures since the last such line not logged)" : "");
    return dt__now_ns() + (int64_t)ACCEPT_BACKOFF_MS * 1000000;
}

void *dt__store_acceptor_main(void *arg)
{
    acceptor *a = calloc(1, sizeof *a);
    struct pollfd *pf = calloc(DT__STORE_MAX_UNAUTH + 1, sizeof *pf);
    int *slot = calloc(DT__STORE_MAX_UNAUTH + 1, sizeof *slot);
    dt_store_server *s = arg;
    if (!a || !pf || !slot) {
        DT_WARN("rendezvous store: out of memory: not accepting connections");
        free(a);
        free(pf);
        free(slot);
        return NULL;
    }
    a->s = s;
    a->refusals = (dt__log_limit){.window_s = LOG_WINDOW_S, .burst = LOG_BURST};
    a->accept_failures = (dt__log_limit){.window_s = LOG_WINDOW_S, .burst = 1};
    for (int i = 0; i < DT__STORE_MAX_UNAUTH; i++)
        a->hs[i].fd = -1;
    int64_t backoff_until = 0;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        bool stopping = s->stopping;
        pthread_mutex_unlock(&s->mu);
        if (stopping)
            break;
        int64_t now = dt__now_ns(), wake = now + 200000000;
        int n = 0;
        bool listening = now >= backoff_until;
        if (listening)
            pf[n++] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
        else if (backoff_until < wake)
            wake = backoff_until;
        int first = n;
        for (int i = 0; i < DT__STORE_MAX_UNAUTH; i++) {
            handshake *h = &a->hs[i];
            if (h->fd < 0)
                continue;
            if (now >= h->deadline) {
                char why[160];
                snprintf(why, sizeof why, "%.96s did not prove the job token within %.0f s", h->peer, AUTH_SECONDS);
                refuse(a, h, why);
                continue;
            }
            if (h->deadline < wake)
                wake = h->deadline;
            slot[n] = i;
            pf[n++] = (struct pollfd){.fd = h->fd, .events = POLLIN};
        }
        if (poll(pf, (nfds_t)n, dt__ms_left(wake, 200)) <= 0)
            continue;
        for (int k = first; k < n; k++)
            if (pf[k].revents && a->hs[slot[k]].fd >= 0)
                pump(a, &a->hs[slot[k]]);
        if (!listening || !(pf[0].revents & POLLIN))
            continue;
        for (int i = 0; i < ACCEPT_BURST; i++) {
            int fd;
            char from[64];
            if (dt__sock_accept(s->listen_fd, &fd, from, sizeof from) != DT_OK) {
                int err = errno;
                if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
                    backoff_until = accept_failed(a, err);
                break;
            }
            if (fd < 0)
                break;
            arrived(a, fd, from);
        }
    }
    for (int i = 0; i < DT__STORE_MAX_UNAUTH; i++)
        if (a->hs[i].fd >= 0)
            close(a->hs[i].fd);
    free(a);
    free(pf);
    free(slot);
    return NULL;
}
