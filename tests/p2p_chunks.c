/* Point-to-point messages in chunks (comm/p2p_chunk.h) between two ranks:
 * rank 0 sends emu device buffers, which go in chunks of DT_STAGE_CHUNK
 * bytes (run with a small one, e.g. 92: 23 floats), and rank 1 receives
 * them the ways a plain message is received: into host memory and device
 * memory, into a larger buffer (the count sent is reported), a length that
 * is a whole number of chunks (the empty last frame), two messages on one
 * tag taken in the other order, dt_test polled, dt_test taking part of a
 * message (its sender asleep) and dt_wait the rest,
 * dt_waitany, a message to itself, and last a buffer too small (the truncation error of a plain
 * message).
 *
 * usage: dtrun -n 2 p2p_chunks   (exit 0 when every receive had the bytes sent) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unistd.h>

#include "comm/comm_internal.h"
#include "dtrain/dtrain.h"
#include "tensor/backend.h"

static int failures;
static const dt_device *dev;

#define FAIL(...) (fprintf(stderr, "FAIL " __VA_ARGS__), failures++)
#define OK(what, call) \
    do { \
        dt_status s_ = (call); \
        if (s_ != DT_OK) \
            FAIL("%s: %s\n", what, dt_last_error()); \
    } while (0)

/* Message k's element i: differs from its neighbours' and the other messages'. */
static float value(int k, size_t i) { return (float)(k * 100003 + (int)i); }

static float *host_msg(int k, size_t n)
{
    float *h = malloc(n * sizeof *h + 1);
    for (size_t i = 0; i < n; i++)
        h[i] = value(k, i);
    return h;
}

static float *dev_msg(int k, size_t n)
{
    float *h = host_msg(k, n), *d = dev->alloc(n * sizeof *h + 1);
    if (dt_device_upload(dev, d, h, n * sizeof *h) != DT_OK)
        FAIL("upload: %s\n", dt_last_error());
    free(h);
    return d;
}

/* The first n elements of host buffer h are message k's. */
static void check_host(const char *what, const float *h, int k, size_t n, size_t got)
{
    if (got != n)
        FAIL("%s: %zu elements received, %zu sent\n", what, got, n);
    for (size_t i = 0; i < n; i++)
        if (h[i] != value(k, i)) {
            FAIL("%s: element %zu of %zu is %g, sent %g\n", what, i, n, (double)h[i], (double)value(k, i));
            return;
        }
}

static void check_dev(const char *what, const float *d, int k, size_t n, size_t got)
{
    float *h = malloc(n * sizeof *h + 1);
    if (dt_device_download(dev, h, d, n * sizeof *h) != DT_OK)
        FAIL("download: %s\n", dt_last_error());
    check_host(what, h, k, n, got);
    free(h);
}

int main(void)
{
    dt_comm *c = NULL;
    if (dt_device_open("emu", &dev) != DT_OK || dt_comm_init_env(&c) != DT_OK) {
        fprintf(stderr, "p2p_chunks: %s\n", dt_last_error());
        return 2;
    }
    if (dt_comm_size(c) != 2) {
        fprintf(stderr, "p2p_chunks: run it on 2 ranks\n");
        return 2;
    }
    int rank = dt_comm_rank(c);
    const size_t N = 1000, M = 700, W = 920; /* W: 40 chunks of 23 floats */
    const size_t BIG = 1 << 22; /* 16 MiB */
    size_t got = 0;
    if (rank == 0) {
        float *a = dev_msg(1, N), *b = dev_msg(2, M), *w = dev_msg(3, W);
        OK("send to a host buffer", dt_send(a, N, DT_F32, 1, 1, c));
        OK("send polled", dt_send(a, N, DT_F32, 1, 2, c));
        OK("send of whole chunks", dt_send(w, W, DT_F32, 1, 3, c));
        dt_request *r[2];
        OK("isend first", dt_isend(a, N, DT_F32, 1, 4, c, &r[0]));
        OK("isend second", dt_isend(b, M, DT_F32, 1, 4, c, &r[1]));
        OK("wait first", dt_wait(r[0], &got));
        if (got != N)
            FAIL("isend reported %zu elements, sent %zu\n", got, N);
        OK("wait second", dt_wait(r[1], NULL));
        /* in chunks of 16 KiB, more than the transport holds while this
         * rank does not progress it (sleeping) */
        float *big = dev_msg(5, BIG);
        size_t chunk = c->stage_chunk;
        c->stage_chunk = 16384;
        dt_request *rb = NULL;
        OK("isend big", dt_isend(big, BIG, DT_F32, 1, 10, c, &rb));
        c->stage_chunk = chunk;
        usleep(300 * 1000);
        OK("wait big", dt_wait(rb, NULL));
        dev->free(big);
        OK("send for waitany 5", dt_send(b, M, DT_F32, 1, 5, c));
        OK("send for waitany 6", dt_send(a, N, DT_F32, 1, 6, c));
        (void)dt_send(a, N, DT_F32, 1, 7, c); /* the receiver's failure may reach this rank first */
        dev->free(a);
        dev->free(b);
        dev->free(w);
    } else {
        float *h = malloc(2 * N * sizeof *h);
        OK("recv into host", dt_recv(h, 2 * N, DT_F32, 0, 1, c, &got));
        check_host("chunked message into a larger host buffer", h, 1, N, got);
        float *d = dev->alloc(2 * N * sizeof *h);
        dt_request *r = NULL;
        int done = 0;
        OK("irecv polled", dt_irecv(d, N, DT_F32, 0, 2, c, &r));
        while (!done && failures == 0)
            OK("test", dt_test(r, &done, &got));
        check_dev("chunked message, dt_test polled", d, 1, N, got);
        OK("recv whole chunks", dt_recv(d, 2 * N, DT_F32, 0, 3, c, &got));
        check_dev("a whole number of chunks into a larger device buffer", d, 3, W, got);
        /* two messages on one tag: the second receive waited for first */
        float *d2 = dev->alloc(N * sizeof *h);
        dt_request *q[2];
        OK("irecv first", dt_irecv(h, N, DT_F32, 0, 4, c, &q[0]));
        OK("irecv second", dt_irecv(d2, N, DT_F32, 0, 4, c, &q[1]));
        size_t got2 = 0;
        OK("wait second", dt_wait(q[1], &got2));
        OK("wait first", dt_wait(q[0], &got));
        check_host("first of two on one tag (waited second)", h, 1, N, got);
        check_dev("second of two on one tag (waited first)", d2, 2, M, got2);
        /* dt_test takes part of a message, dt_wait the rest */
        float *bd = dev->alloc(BIG * sizeof *h);
        done = 0;
        OK("irecv big", dt_irecv(bd, BIG, DT_F32, 0, 10, c, &r));
        for (int k = 0; k < 50 && !done; k++) {
            OK("test partly", dt_test(r, &done, &got));
            usleep(2000);
        }
        if (done) /* the transport held it all (TCP's buffers can): the case did not arise */
            printf("p2p_chunks: note: dt_test took all of a 16 MiB message while its sender slept\n");
        else
            OK("wait after tests", dt_wait(r, &got));
        check_dev("a message partly taken by dt_test", bd, 5, BIG, got);
        dev->free(bd);
        OK("irecv 5", dt_irecv(d, M, DT_F32, 0, 5, c, &q[0]));
        OK("irecv 6", dt_irecv(h, N, DT_F32, 0, 6, c, &q[1]));
        for (int k = 0; k < 2; k++) {
            int idx = -1;
            OK("waitany", dt_waitany(q, 2, &idx, &got));
            if (idx == 0)
                check_dev("waitany's device receive", d, 2, M, got);
            else if (idx == 1)
                check_host("waitany's host receive", h, 1, N, got);
            else
                FAIL("waitany gave index %d\n", idx);
        }
        /* to itself: frames delivered locally */
        float *s = dev_msg(4, N);
        OK("irecv from itself", dt_irecv(d, N, DT_F32, 1, 8, c, &q[0]));
        OK("isend to itself", dt_isend(s, N, DT_F32, 1, 8, c, &q[1]));
        OK("wait send to itself", dt_wait(q[1], NULL));
        OK("wait recv from itself", dt_wait(q[0], &got));
        check_dev("chunked message to itself", d, 4, N, got);
        /* too small: what a plain message gives */
        dt_status st = dt_recv(d, N / 2, DT_F32, 0, 7, c, &got);
        if (st != DT_ERR_TRUNCATE)
            FAIL("a 1000-float chunked message into 500 floats gave %s (%s), not DT_ERR_TRUNCATE\n",
                 dt_status_name(st), st == DT_OK ? "" : dt_last_error());
        dev->free(s);
        dev->free(d);
        dev->free(d2);
        free(h);
    }
    (void)dt_comm_destroy(c); /* after the truncation the job's engine has failed */
    printf("p2p_chunks: rank %d: %s\n", rank, failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
