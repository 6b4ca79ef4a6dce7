/* Nonblocking collectives: a FIFO of calls per communicator, run by that
 * communicator's progress thread, so that a caller's computation overlaps
 * the communication and one communicator's queue never holds up another's
 * (a tensor-parallel group's small allreduces pass a data-parallel group's
 * large one).  Each queued call is the blocking collective itself, run on
 * that thread; every rank queues the same calls in the same order on each
 * communicator, so they match up. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/status.h"
#include "base/trace.h"
#include "comm/comm_internal.h"

typedef enum { JOB_ALLREDUCE, JOB_ALLREDUCE_HALF, JOB_BROADCAST, JOB_ALLGATHER, JOB_REDUCE_SCATTER } job_kind;

struct dt__job {
    dt__job *next;
    job_kind kind;
    dt_comm *comm;
    const void *send;
    void *recv;
    size_t count;
    dt_dtype dtype, wire;
    dt_redop op;
    int root;
    /* the timeline: issue time and the caller's label (dt__trace_label_next) */
    int64_t issued;
    char label[48];
    /* set by the progress thread under the lock */
    bool done;
    dt_status status;
    char error[512];
};

struct dt__progress {
    dt__progress *next; /* the world's list (queues_mu) */
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    dt__job *head, *tail;
    int unfinished; /* queued or running */
    bool stop;
    double busy_s; /* time spent running collectives */
    uint32_t comm_id; /* names the thread in the timeline */
};

/* The queue this thread serves (NULL on a caller's thread): the
 * collectives it runs must not wait for it. */
static _Thread_local dt__progress *serving;

static dt_status run_job(dt__job *j)
{
    switch (j->kind) {
    case JOB_ALLREDUCE: return dt_allreduce(j->send, j->recv, j->count, j->dtype, j->op, j->comm);
    case JOB_ALLREDUCE_HALF: return dt_allreduce_half(j->send, j->recv, j->count, j->wire, j->op, j->comm);
    case JOB_BROADCAST: return dt_broadcast(j->recv, j->count, j->dtype, j->root, j->comm);
    case JOB_ALLGATHER: return dt_allgather(j->send, j->recv, j->count, j->dtype, j->comm);
    case JOB_REDUCE_SCATTER: return dt_reduce_scatter(j->send, j->recv, j->count, j->dtype, j->op, j->comm);
    }
    return dt__fail(DT_ERR_INVALID, "unknown nonblocking collective %d", (int)j->kind);
}

static void *progress_main(void *arg)
{
    dt__progress *p = arg;
    serving = p;
    char name[48];
    snprintf(name, sizeof name, "comm %u progress", p->comm_id);
    dt__trace_thread_name(name);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->head && !p->stop)
            pthread_cond_wait(&p->work, &p->mu);
        if (!p->head)
            break;
        dt__job *j = p->head;
        pthread_mutex_unlock(&p->mu);
        int64_t t0 = dt__now_ns();
        dt__engine *eng = j->comm->world->eng;
        dt__engine_allow_poll_spin(eng, false);
        dt_status s = run_job(j);
        dt__engine_allow_poll_spin(eng, true);
        double took = (double)(dt__now_ns() - t0) / 1e9;
        if (j->label[0] && j->issued) /* from its issue to its completion, queueing included */
            dt__trace_async("bucket", j->label, j->issued, dt__trace_now(), "\"comm\":%u,\"bytes\":%zu,\"queued_us\":%lld",
                            j->comm->id, j->count * (j->kind == JOB_ALLREDUCE_HALF ? sizeof(float) : dt_dtype_size(j->dtype)),
                            (long long)((t0 - j->issued) / 1000));
        char error[sizeof j->error];
        snprintf(error, sizeof error, "%s", s != DT_OK ? dt_last_error() : "");
        pthread_mutex_lock(&p->mu);
        p->head = j->next;
        if (!p->head)
            p->tail = NULL;
        j->status = s;
        memcpy(j->error, error, sizeof error);
        j->done = true;
        p->busy_s += took;
        p->unfinished--;
        pthread_cond_broadcast(&p->done);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static dt_status progress_start(dt_comm *c)
{
    if (c->progress)
        return DT_OK;
    dt__progress *p = calloc(1, sizeof *p);
    if (!p)
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->work, NULL);
    pthread_cond_init(&p->done, NULL);
    p->comm_id = c->id;
    if (pthread_create(&p->thread, NULL, progress_main, p) != 0) {
        pthread_mutex_destroy(&p->mu);
        pthread_cond_destroy(&p->work);
        pthread_cond_destroy(&p->done);
        free(p);
        return dt__fail(DT_ERR_SYSTEM, "cannot start the communication progress thread");
    }
    dt__world *w = c->world;
    pthread_mutex_lock(&w->queues_mu);
    p->next = w->queues;
    w->queues = p;
    pthread_mutex_unlock(&w->queues_mu);
    c->progress = p;
    return DT_OK;
}

static void drain(dt__progress *p)
{
    if (!p || serving == p)
        return;
    pthread_mutex_lock(&p->mu);
    while (p->unfinished > 0) /* each queued collective ends by its own deadline */
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
}

void dt__progress_drain(dt_comm *c) { drain(c->progress); }

void dt__progress_drain_all(dt__world *w)
{
    pthread_mutex_lock(&w->queues_mu);
    for (dt__progress *p = w->queues; p; p = p->next)
        drain(p);
    pthread_mutex_unlock(&w->queues_mu);
}

void dt__progress_stop(dt_comm *c)
{
    dt__progress *p = c->progress;
    if (!p)
        return;
    drain(p);
    dt__world *w = c->world;
    pthread_mutex_lock(&w->queues_mu);
    for (dt__progress **at = &w->queues; *at; at = &(*at)->next)
        if (*at == p) {
            *at = p->next;
            break;
        }
    pthread_mutex_unlock(&w->queues_mu);
    pthread_mutex_lock(&p->mu);
    p->stop = true;
    pthread_cond_broadcast(&p->work);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work);
    pthread_cond_destroy(&p->done);
    free(p);
    c->progress = NULL;
}

static dt_status submit(dt__job *proto, const char *op, dt_request **req)
{
    if (!req)
        return dt__fail(DT_ERR_INVALID, "%s: request pointer is NULL", op);
    *req = NULL;
    if (!proto->comm)
        return dt__fail(DT_ERR_INVALID, "%s: communicator is NULL", op);
    if (proto->count && !proto->recv)
        return dt__fail(DT_ERR_INVALID, "%s: %s is NULL for %zu elements", op,
                        proto->kind == JOB_BROADCAST ? "buffer (buf)" : "receive buffer (recv)", proto->count);
    if (proto->count && !proto->send && proto->kind != JOB_BROADCAST)
        return dt__fail(DT_ERR_INVALID, "%s: send buffer (send) is NULL for %zu elements", op, proto->count);
    dt__world *w = proto->comm->world;
    if (w->engine_closed)
        return dt__fail(DT_ERR_INVALID, "%s: the world communicator was already destroyed", op);
    if (serving)
        return dt__fail(DT_ERR_INVALID, "%s: cannot be started from a progress thread", op);
    dt_request *r = calloc(1, sizeof *r);
    dt__job *j = malloc(sizeof *j);
    if (!r || !j) {
        free(r);
        free(j);
        return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    dt_status s = progress_start(proto->comm);
    if (s != DT_OK) {
        free(r);
        free(j);
        return s;
    }
    *j = *proto;
    j->next = NULL;
    j->done = false;
    j->label[0] = '\0';
    bool labelled = dt__trace_label_take(j->label, sizeof j->label);
    j->issued = labelled ? dt__trace_begin() : 0;
    r->comm = proto->comm;
    r->elem = dt_dtype_size(proto->dtype);
    r->job = j;
    dt__progress *p = proto->comm->progress;
    pthread_mutex_lock(&p->mu);
    if (p->tail)
        p->tail->next = j;
    else
        p->head = j;
    p->tail = j;
    p->unfinished++;
    pthread_cond_signal(&p->work);
    pthread_mutex_unlock(&p->mu);
    *req = r;
    return DT_OK;
}

static dt_status finish(dt_request *r)
{
    dt__job *j = r->job;
    dt_status s = j->status == DT_OK ? DT_OK : dt__fail(j->status, "%s", j->error);
    free(j);
    free(r);
    return s;
}

dt_status dt__job_wait(dt_request *r)
{
    dt__progress *p = r->comm->progress;
    pthread_mutex_lock(&p->mu);
    while (!r->job->done)
        pthread_cond_wait(&p->done, &p->mu);
    pthread_mutex_unlock(&p->mu);
    return finish(r);
}

dt_status dt__job_test(dt_request *r, int *done)
{
    dt__progress *p = r->comm->progress;
    pthread_mutex_lock(&p->mu);
    *done = r->job->done;
    pthread_mutex_unlock(&p->mu);
    return *done ? finish(r) : DT_OK;
}

dt_status dt_iallreduce(const void *send, void *recv, size_t count, dt_dtype dtype, dt_redop op, dt_comm *c,
                        dt_request **req)
{
    dt_comm *d = dt__comm_device_route(c, send, recv); /* device_comm.c */
    if (d)
        return dt_iallreduce(send, recv, count, dtype, op, d, req);
    dt__job j = {.kind = JOB_ALLREDUCE, .comm = c, .send = send, .recv = recv, .count = count, .dtype = dtype, .op = op};
    return submit(&j, "iallreduce", req);
}

dt_status dt_iallreduce_half(const float *send, float *recv, size_t count, dt_dtype wire, dt_redop op, dt_comm *c,
                             dt_request **req)
{
    dt_comm *d = dt__comm_device_route(c, send, recv);
    if (d)
        return dt_iallreduce_half(send, recv, count, wire, op, d, req);
    dt__job j = {.kind = JOB_ALLREDUCE_HALF, .comm = c, .send = send, .recv = recv, .count = count,
                 .dtype = DT_F32, .wire = wire, .op = op};
    return submit(&j, "iallreduce_half", req);
}

dt_status dt_ibroadcast(void *buf, size_t count, dt_dtype dtype, int root, dt_comm *c, dt_request **req)
{
    dt_comm *d = dt__comm_device_route(c, buf, NULL);
    if (d)
        return dt_ibroadcast(buf, count, dtype, root, d, req);
    dt__job j = {.kind = JOB_BROADCAST, .comm = c, .recv = buf, .count = count, .dtype = dtype, .root = root};
    return submit(&j, "ibroadcast", req);
}

dt_status dt_iallgather(const void *send, void *recv, size_t sendcount, dt_dtype dtype, dt_comm *c, dt_request **req)
{
    dt_comm *d = dt__comm_device_route(c, send, recv);
    if (d)
        return dt_iallgather(send, recv, sendcount, dtype, d, req);
    dt__job j = {.kind = JOB_ALLGATHER, .comm = c, .send = send, .recv = recv, .count = sendcount, .dtype = dtype};
    return submit(&j, "iallgather", req);
}

dt_status dt_ireduce_scatter(const void *send, void *recv, size_t recvcount, dt_dtype dtype, dt_redop op, dt_comm *c,
                             dt_request **req)
{
    dt_comm *d = dt__comm_device_route(c, send, recv);
    if (d)
        return dt_ireduce_scatter(send, recv, recvcount, dtype, op, d, req);
    dt__job j = {.kind = JOB_REDUCE_SCATTER, .comm = c, .send = send, .recv = recv, .count = recvcount,
                 .dtype = dtype, .op = op};
    return submit(&j, "ireduce_scatter", req);
}

double dt_comm_async_seconds(dt_comm *c)
{
    dt__progress *p = c && !c->world->engine_closed ? c->progress : NULL;
    if (!p)
        return 0;
    pthread_mutex_lock(&p->mu);
    double s = p->busy_s;
    pthread_mutex_unlock(&p->mu);
    return s;
}

uint64_t dt_comm_bytes_sent(const dt_comm *c)
{
    return c ? dt__engine_bytes_sent(c->world->eng) : 0;
}
