/* Heartbeats through the rendezvous store.
 *
 * A closed socket says a peer died; it says nothing about a peer that is
 * stopped (SIGSTOP), frozen in the kernel, or whose host silently lost its
 * link.  Each rank runs a thread that adds 1 to the store counter
 * <prefix>/hb/<rank> every timeout/10.  A rank that has waited on a peer for
 * longer than that reads the peer's counter (dt__heartbeat_check); a counter
 * that has not moved for the timeout, or a store this rank cannot reach for
 * the timeout, is a failure naming the peer.  Silence is measured from the
 * last evidence of life (a counter seen moving; any answer of the store to
 * either of this rank's connections), and reported as measured.   A busy but healthy peer (long
 * compute, slow disk) keeps beating, so it is never mistaken for a dead one. */
#ifndef DT_TRANSPORT_HEARTBEAT_H
#define DT_TRANSPORT_HEARTBEAT_H

#include <stddef.h>
#include <stdint.h>

#include "dtrain/base.h"

typedef struct dt__heartbeat dt__heartbeat;

typedef struct {
    const char *host; /* the rendezvous store */
    int port;
    const char *token;
    const char *key_prefix; /* this job generation's keys */
    int rank, size;
    double timeout_s; /* > 0 */
} dt__heartbeat_config;

/* Connect two store clients (beats, checks) and start beating. */
dt_status dt__heartbeat_start(const dt__heartbeat_config *cfg, dt__heartbeat **out);
/* Stop the thread and close the connections; NULL is a no-op. */
void dt__heartbeat_stop(dt__heartbeat *h);
/* Seconds between beats (timeout/10): how long a wait goes before checking. */
double dt__heartbeat_period(const dt__heartbeat *h);
/* A rank has waited on world rank `peer` for at least one period: DT_OK
 * while the peer beats, else a failure (DT_ERR_PEER) whose message names the
 * peer as `peer_name` and how long it has been silent.  Reads the store at
 * most once per period per peer; safe to call from any one thread at a time
 * (the caller's engine is single-threaded). */
dt_status dt__heartbeat_check(dt__heartbeat *h, int peer, const char *peer_name);

/* DT_DEBUG=coll: text the beat thread publishes as <prefix>/coll/<rank>
 * (this rank's recent collectives), so that others can print it even when
 * this rank is stuck.  Any thread. */
void dt__heartbeat_set_note(dt__heartbeat *h, const char *text);
/* Publish the note now (the checking thread, e.g. at a failure). */
void dt__heartbeat_publish_note(dt__heartbeat *h);
/* Read rank's published note ("" when it has none); the checking thread. */
dt_status dt__heartbeat_read_note(dt__heartbeat *h, int rank, char *buf, size_t len);

/* A function the beat thread calls after each beat (the stall inspector,
 * src/comm/stall.c); NULL: none.  It may call the two functions below. */
typedef void (*dt__heartbeat_hook)(void *arg, dt__heartbeat *h);
void dt__heartbeat_set_hook(dt__heartbeat *h, dt__heartbeat_hook fn, void *arg);
/* From the hook only (the beat thread's connection): set this rank's key
 * <prefix>/<what>/<rank> to text, or read rank's ("" when it has none). */
dt_status dt__heartbeat_publish(dt__heartbeat *h, const char *what, const char *text);
dt_status dt__heartbeat_read(dt__heartbeat *h, const char *what, int rank, char *buf, size_t len);
/* This rank and the number of ranks. */
int dt__heartbeat_rank(const dt__heartbeat *h);

#endif
