/* The listener side of building the mesh: every rank above this one
 * connects here and proves the job token.  Handshakes run side by side in one
 * poll loop, each with its own deadline, so a stranger holding a connection
 * open (a scanner, a stuck client) delays no rank: the listener used to
 * handshake one connection at a time with a 10 s wait each, and two idle
 * connections kept the job from starting (issue 29, B). */
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
#include "transport/engine_internal.h"
#include "transport/socket.h"

#define HANDSHAKE_SECONDS 10.0
#define MAX_HANDSHAKES 64 /* at once; at the cap the oldest is dropped */

typedef struct {
    int fd; /* -1: free slot */
    int64_t deadline, started;
    uint8_t challenge[DT_AUTH_CHALLENGE_LEN];
    uint8_t response[DT_AUTH_RESPONSE_LEN];
    size_t got;
    char what[96];
} handshake;

typedef struct {
    handshake hs[MAX_HANDSHAKES];
    dt__log_limit limit;
} listener;

/* Strangers can provoke these: rate limited. */
static void refused(listener *l, handshake *h, const char *why)
{
    long suppressed = 0;
    if (dt__log_limit_pass(&l->limit, &suppressed))
        DT_WARN("refused a peer connection: %s%s", why,
                suppressed ? " (similar lines since the last one suppressed)" : "");
    close(h->fd);
    h->fd = -1;
}

static void start_handshake(listener *l, int fd, const char *from)
{
    handshake *slot = NULL, *oldest = NULL;
    for (int i = 0; i < MAX_HANDSHAKES; i++) {
        handshake *h = &l->hs[i];
        if (h->fd < 0) {
            slot = h;
            break;
        }
        if (!oldest || h->started < oldest->started)
            oldest = h;
    }
    if (!slot) {
        char why[160];
        snprintf(why, sizeof why, "%s: dropped unfinished for a newer one (%d handshakes at once)", oldest->what,
                 MAX_HANDSHAKES);
        refused(l, oldest, why);
        slot = oldest;
    }
    *slot = (handshake){.fd = fd, .started = dt__now_ns(), .deadline = dt__deadline_after(HANDSHAKE_SECONDS)};
    snprintf(slot->what, sizeof slot->what, "connection from %s", from);
    /* 37 bytes into a fresh socket's empty buffer: sent whole or not at all */
    if (dt__auth_challenge(slot->challenge) != DT_OK ||
        send(fd, slot->challenge, sizeof slot->challenge, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof slot->challenge)
        refused(l, slot, "cannot send the challenge");
}

/* A complete response: the connector is rank *rank, an expected peer. */
static dt_status finish_handshake(dt__engine *e, const dt__engine_config *cfg, const char *label, handshake *h,
                                  int *rank)
{
    uint8_t proof[DT_AUTH_PROOF_LEN];
    int64_t info = -1;
    dt_status s = dt__auth_check(cfg->token, label, h->challenge, h->response, h->what, proof, &info);
    if (s != DT_OK) {
        dt__auth_refuse_token(h->fd);
        return s;
    }
    if (info <= e->rank || info >= e->size || e->peers[info].ch)
        return dt__fail(DT_ERR_PROTOCOL, "%s claims rank %lld, which is not an expected peer", h->what,
                        (long long)info);
    if (send(h->fd, proof, sizeof proof, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)sizeof proof)
        return dt__fail_errno(DT_ERR_PEER, "%s: sending the proof", h->what);
    *rank = (int)info;
    return DT_OK;
}

/* Read what h's connector sent; a finished handshake becomes rank's link. */
static dt_status pump(dt__engine *e, const dt__engine_config *cfg, const char *label, listener *l, handshake *h,
                      int *rank)
{
    *rank = -1;
    ssize_t n = recv(h->fd, h->response + h->got, sizeof h->response - h->got, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return DT_OK;
    if (n <= 0) {
        char why[160];
        snprintf(why, sizeof why, "%s closed it during the handshake", h->what);
        refused(l, h, why);
        return DT_OK;
    }
    h->got += (size_t)n;
    if (h->got < sizeof h->response)
        return DT_OK;
    if (finish_handshake(e, cfg, label, h, rank) != DT_OK) {
        refused(l, h, dt_last_error());
        *rank = -1;
    }
    return DT_OK;
}

dt_status dt__engine_accept_peers(dt__engine *e, const dt__engine_config *cfg, const char *label, int lfd,
                                  int64_t deadline, dt_status (*joined)(void *arg, int rank, int fd), void *arg)
{
    listener *l = calloc(1, sizeof *l);
    struct pollfd *pf = calloc(MAX_HANDSHAKES + 1, sizeof *pf);
    int *slot_of = calloc(MAX_HANDSHAKES + 1, sizeof *slot_of);
    if (!l || !pf || !slot_of) {
        free(l);
        free(pf);
        free(slot_of);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    l->limit = (dt__log_limit){.window_s = 10, .burst = 5};
    for (int i = 0; i < MAX_HANDSHAKES; i++)
        l->hs[i].fd = -1;
    int remaining = e->size - 1 - e->rank;
    dt_status s = DT_OK;
    while (s == DT_OK && remaining > 0) {
        int64_t now = dt__now_ns();
        if (now >= deadline) {
            int missing = -1;
            for (int r = e->size - 1; r > e->rank; r--)
                if (!e->peers[r].ch)
                    missing = r;
            s = dt__fail(DT_ERR_TIMEOUT, "rank %d did not connect within %.0f s (%d higher ranks missing)", missing,
                         cfg->timeout_s, remaining);
            break;
        }
        int64_t wake = deadline;
        int n = 0;
        pf[n++] = (struct pollfd){.fd = lfd, .events = POLLIN};
        for (int i = 0; i < MAX_HANDSHAKES; i++) {
            handshake *h = &l->hs[i];
            if (h->fd < 0)
                continue;
            if (now >= h->deadline) {
                char why[160];
                snprintf(why, sizeof why, "%s did not finish the handshake within %.0f s", h->what,
                         HANDSHAKE_SECONDS);
                refused(l, h, why);
                continue;
            }
            if (h->deadline < wake)
                wake = h->deadline;
            slot_of[n] = i;
            pf[n++] = (struct pollfd){.fd = h->fd, .events = POLLIN};
        }
        if (poll(pf, (nfds_t)n, dt__ms_left(wake, 500)) <= 0)
            continue;
        for (int k = 1; s == DT_OK && k < n; k++) {
            handshake *h = &l->hs[slot_of[k]];
            int rank;
            if (!pf[k].revents || h->fd < 0)
                continue;
            s = pump(e, cfg, label, l, h, &rank);
            if (s == DT_OK && rank >= 0) {
                int fd = h->fd;
                h->fd = -1;
                s = joined(arg, rank, fd);
                if (s == DT_OK)
                    remaining--;
            }
        }
        if (s == DT_OK && (pf[0].revents & POLLIN)) {
            for (int i = 0; i < 16; i++) { /* a burst at most, then look at the handshakes again */
                int fd;
                char from[64];
                if (dt__sock_accept(lfd, &fd, from, sizeof from) != DT_OK) {
                    DT_INFO("peer listener: %s", dt_last_error()); /* out of descriptors: the poll timeout paces it */
                    struct pollfd none;
                    poll(&none, 0, 50);
                    break;
                }
                if (fd < 0)
                    break;
                start_handshake(l, fd, from);
            }
        }
    }
    for (int i = 0; i < MAX_HANDSHAKES; i++)
        if (l->hs[i].fd >= 0)
            close(l->hs[i].fd);
    free(l);
    free(pf);
    free(slot_of);
    return s;
}
