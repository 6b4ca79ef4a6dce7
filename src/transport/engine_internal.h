/* Engine state shared by engine.c (progress) and engine_connect.c (set-up). */
#ifndef DT_TRANSPORT_ENGINE_INTERNAL_H
#define DT_TRANSPORT_ENGINE_INTERNAL_H

#include <poll.h>

#include "transport/engine.h"

typedef struct unexpected {
    struct unexpected *next;
    dt__frame f;
    uint8_t *data;
} unexpected;

typedef struct {
    int fd; /* -1 when closed (or self) */
    char name[128];
    dt__req *sendq, *sendq_tail;
    dt__req *posted, *posted_tail;
    unexpected *unexp, *unexp_tail;
    /* receive state machine */
    uint8_t hdr[DT_FRAME_HDR];
    size_t hdr_got;
    bool in_payload;
    dt__frame cur;
    uint8_t *dst;       /* where the payload goes; NULL: discard */
    size_t got;
    dt__req *target;    /* matched receive, if any */
    unexpected *stash;  /* buffered message being filled, if any */
    uint8_t *control;   /* ABORT text being filled */
    bool bye_sent, bye_received;
    dt__req bye;
} peer;

struct dt__engine {
    int rank, size;
    double timeout_s;
    peer *peers;
    struct pollfd *pfds;
    int *pfd_peer;
    dt_status failed;
    char fail_msg[1024];
};

/* Queue an empty BYE frame behind everything already queued to peer pi. */
dt_status dt__engine_queue_bye(dt__engine *e, int pi);

#endif
