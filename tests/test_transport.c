/* Unit tests of the transport layer: frame encoding and validation, the
 * rendezvous store (protocol, limits, hostile clients), and an engine facing a
 * peer that sends malformed or truncated frames. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "check.h"
#include "dtrain/store.h"
#include "transport/shm_arena.h"
#include "transport/auth.h"
#include "transport/bufcache.h"
#include "transport/engine.h"
#include "transport/frame.h"
#include "transport/shm.h"
#include "transport/socket.h"

static const char *TOKEN = "unit-test-token";

static void test_frame(void)
{
    dt__frame f = {.type = DT_FRAME_DATA, .comm_id = 77, .tag = -5, .seq = (1ull << 40) + 9, .len = 12345,
                   .sig = 0x8123456789abcdefull}, g;
    uint8_t h[DT_FRAME_HDR];
    dt__frame_encode(&f, h);
    EXPECT_STATUS(dt__frame_decode(h, &g), DT_OK);
    EXPECT(g.type == f.type && g.comm_id == 77 && g.tag == -5 && g.len == 12345);
    EXPECT(g.sig == 0x8123456789abcdefull); /* the collective signature, all 64 bits */
    EXPECT(g.seq == 9 && dt__frame_seq_eq(g.seq, f.seq) && !dt__frame_seq_eq(g.seq, f.seq + 1));
    uint8_t bad[DT_FRAME_HDR];
    memcpy(bad, h, sizeof bad);
    bad[0] = 'X';
    EXPECT_STATUS(dt__frame_decode(bad, &g), DT_ERR_PROTOCOL);
    EXPECT_CONTAINS(dt_last_error(), "magic");
    memcpy(bad, h, sizeof bad);
    bad[2] = 9;
    EXPECT_STATUS(dt__frame_decode(bad, &g), DT_ERR_PROTOCOL);
    EXPECT_CONTAINS(dt_last_error(), "version");
    for (size_t i = 3; i < DT_FRAME_HDR; i++) { /* any flipped bit past the version */
        memcpy(bad, h, sizeof bad);
        bad[i] ^= (uint8_t)(1u << (i % 8));
        EXPECT_STATUS(dt__frame_decode(bad, &g), DT_ERR_PROTOCOL);
    }
    memcpy(bad, h, sizeof bad);
    bad[13] ^= 1; /* flipped bit in the sequence */
    EXPECT_STATUS(dt__frame_decode(bad, &g), DT_ERR_PROTOCOL);
    EXPECT_CONTAINS(dt_last_error(), "checksum");
    f.len = DT_FRAME_MAX_PAYLOAD; /* the largest length survives the 6-byte field */
    dt__frame_encode(&f, h);
    EXPECT_STATUS(dt__frame_decode(h, &g), DT_OK);
    EXPECT(g.len == DT_FRAME_MAX_PAYLOAD);
    f.len = DT_FRAME_MAX_PAYLOAD + 1;
    dt__frame_encode(&f, h);
    EXPECT_STATUS(dt__frame_decode(h, &g), DT_ERR_PROTOCOL);
    EXPECT_CONTAINS(dt_last_error(), "exceeds the limit");
    f.type = DT_FRAME_ABORT;
    f.len = DT_FRAME_MAX_CONTROL + 1;
    dt__frame_encode(&f, h);
    EXPECT_STATUS(dt__frame_decode(h, &g), DT_ERR_PROTOCOL);
    f.type = 42;
    f.len = 0;
    dt__frame_encode(&f, h);
    EXPECT_STATUS(dt__frame_decode(h, &g), DT_ERR_PROTOCOL);
    EXPECT_CONTAINS(dt_last_error(), "type");
}

static int raw_connect(int port)
{
    int fd;
    if (dt__sock_connect("127.0.0.1", port, dt__deadline_after(5), &fd) != DT_OK)
        return -1;
    return fd;
}

/* Wait until the server closes fd (recv returns 0 or an error). */
static int closed_by_server(int fd, double seconds)
{
    uint8_t buf[256];
    int64_t deadline = dt__deadline_after(seconds);
    while (dt__now_ns() < deadline) {
        dt_status s = dt__sock_recv_all(fd, buf, 1, deadline, "server");
        if (s == DT_ERR_PEER)
            return 1;
        if (s == DT_ERR_TIMEOUT)
            return 0;
    }
    return 0;
}

static void test_store(void)
{
    dt_store_server *srv;
    EXPECT_STATUS(dt_store_server_start("127.0.0.1", 0, TOKEN, &srv), DT_OK);
    int port = dt_store_server_port(srv);
    dt_store_client *c;
    EXPECT_STATUS(dt_store_connect("127.0.0.1", port, TOKEN, 5, &c), DT_OK);
    EXPECT_STATUS(dt_store_set(c, "k", "v1", 3), DT_OK);
    void *v = NULL;
    size_t len = 0;
    EXPECT_STATUS(dt_store_get(c, "k", 1, &v, &len), DT_OK);
    EXPECT(len == 3 && v && strcmp(v, "v1") == 0);
    free(v);
    EXPECT_STATUS(dt_store_get(c, "missing", 0.2, &v, &len), DT_ERR_TIMEOUT);
    EXPECT_CONTAINS(dt_last_error(), "missing");
    int64_t n = 0;
    EXPECT_STATUS(dt_store_add(c, "ctr", 5, &n), DT_OK);
    EXPECT_STATUS(dt_store_add(c, "ctr", -2, &n), DT_OK);
    EXPECT_EQ(n, 3);
    char longkey[DT_STORE_MAX_KEY + 2];
    memset(longkey, 'a', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    EXPECT_STATUS(dt_store_set(c, longkey, "x", 1), DT_ERR_INVALID);

    /* wrong token: refused with a clear error, both ways round */
    dt_store_client *bad;
    EXPECT_STATUS(dt_store_connect("127.0.0.1", port, "not-the-token", 5, &bad), DT_ERR_AUTH);
    EXPECT_CONTAINS(dt_last_error(), "token");

    /* garbage instead of a handshake */
    int fd = raw_connect(port);
    EXPECT(fd >= 0);
    char garbage[100];
    memset(garbage, 0x5a, sizeof garbage);
    dt__sock_send_all(fd, garbage, sizeof garbage, dt__deadline_after(2), "store");
    EXPECT(closed_by_server(fd, 5));
    close(fd);

    /* truncated handshake, then hang up */
    fd = raw_connect(port);
    dt__sock_send_all(fd, garbage, 10, dt__deadline_after(2), "store");
    close(fd);

    /* authenticated, then a malformed request header */
    fd = raw_connect(port);
    EXPECT_STATUS(dt__auth_connect(fd, TOKEN, "dtrain-store", 0, dt__deadline_after(5), "store"), DT_OK);
    uint8_t req[DT_STORE_REQ_HDR] = {9, 0, 0, 0, 1, 0, 0, 0};
    dt__sock_send_all(fd, req, sizeof req, dt__deadline_after(2), "store");
    EXPECT(closed_by_server(fd, 5));
    close(fd);

    /* authenticated, then a request cut short */
    fd = raw_connect(port);
    EXPECT_STATUS(dt__auth_connect(fd, TOKEN, "dtrain-store", 0, dt__deadline_after(5), "store"), DT_OK);
    uint8_t partial[DT_STORE_REQ_HDR] = {DT_STORE_SET, 0, 0, 0, 200, 0, 0, 0, 1, 0, 0, 0};
    dt__sock_send_all(fd, partial, sizeof partial, dt__deadline_after(2), "store");
    dt__sock_send_all(fd, "abc", 3, dt__deadline_after(2), "store");
    close(fd);

    /* an oversized value length is refused without allocating it */
    fd = raw_connect(port);
    EXPECT_STATUS(dt__auth_connect(fd, TOKEN, "dtrain-store", 0, dt__deadline_after(5), "store"), DT_OK);
    uint8_t huge[DT_STORE_REQ_HDR] = {DT_STORE_SET, 0, 0, 0, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f};
    dt__sock_send_all(fd, huge, sizeof huge, dt__deadline_after(2), "store");
    EXPECT(closed_by_server(fd, 5));
    close(fd);

    /* the store is still serving, and counted the refusals */
    EXPECT_STATUS(dt_store_get(c, "k", 1, &v, &len), DT_OK);
    free(v);
    usleep(200000);
    EXPECT(dt_store_server_refused(srv) >= 3);
    dt_store_close(c);
    dt_store_server_stop(srv);
}

/* ---- an engine (rank 0 of 2) facing a hand-driven "rank 1" ---- */

typedef struct {
    int port;
    const char *prefix;
    dt_status create, recv;
    char message[1024];
} rank0_args;

/* Rank 0 of a 2-rank engine through the store at `port`; on success the
 * caller destroys *e and closes *store. */
static dt_status rank0_engine(int port, const char *prefix, dt_store_client **store, dt__engine **e)
{
    dt_status st = dt_store_connect("127.0.0.1", port, TOKEN, 5, store);
    if (st != DT_OK)
        return st;
    dt__engine_config cfg = {.rank = 0, .size = 2, .token = TOKEN, .key_prefix = prefix, .timeout_s = 10};
    if ((st = dt__engine_create(&cfg, *store, e)) != DT_OK)
        dt_store_close(*store);
    return st;
}

static void *rank0_main(void *arg)
{
    rank0_args *a = arg;
    dt_store_client *store;
    dt__engine *e;
    if ((a->create = rank0_engine(a->port, a->prefix, &store, &e)) != DT_OK)
        return NULL;
    char buf[64];
    dt__req r;
    a->recv = dt__engine_irecv(e, &r, 1, 1, 0, 0, 0, true, buf, sizeof buf);
    if (a->recv == DT_OK)
        a->recv = dt__engine_wait(e, &r, dt__deadline_after(10));
    snprintf(a->message, sizeof a->message, "%s", dt_last_error());
    dt__engine_destroy(e);
    dt_store_close(store);
    return NULL;
}

/* Join the mesh as rank 1 by hand (after one impostor attempt); returns the
 * connection to rank 0. */
static int join_as_rank1(dt_store_client *store, const char *prefix)
{
    char key[64], label[64], host[64];
    snprintf(key, sizeof key, "%s/addr/1", prefix);
    dt_store_set(store, key, "127.0.0.1:1", 12);
    snprintf(key, sizeof key, "%s/addr/0", prefix);
    void *addr = NULL;
    size_t alen;
    EXPECT_STATUS(dt_store_get(store, key, 5, &addr, &alen), DT_OK);
    int p0;
    char *sp = strchr(addr, ' '); /* "ip:port host-id" */
    if (sp)
        *sp = '\0';
    dt__parse_hostport(addr, host, sizeof host, &p0);
    free(addr);
    snprintf(label, sizeof label, "dtrain-peer:%s", prefix);
    /* an impostor with the wrong token is refused and the mesh still forms */
    int fd;
    EXPECT_STATUS(dt__sock_connect(host, p0, dt__deadline_after(5), &fd), DT_OK);
    EXPECT_STATUS(dt__auth_connect(fd, "wrong", label, 1, dt__deadline_after(5), "rank 0"), DT_ERR_AUTH);
    close(fd);
    EXPECT_STATUS(dt__sock_connect(host, p0, dt__deadline_after(5), &fd), DT_OK);
    EXPECT_STATUS(dt__auth_connect(fd, TOKEN, label, 1, dt__deadline_after(5), "rank 0"), DT_OK);
    return fd;
}

/* Join as rank 1, then send `bytes` and hang up. */
static void hostile_peer(int port, const char *prefix, const void *bytes, size_t len, rank0_args *out)
{
    rank0_args a = {.port = port, .prefix = prefix};
    pthread_t th;
    pthread_create(&th, NULL, rank0_main, &a);
    dt_store_client *store;
    EXPECT_STATUS(dt_store_connect("127.0.0.1", port, TOKEN, 5, &store), DT_OK);
    int fd = join_as_rank1(store, prefix);
    usleep(100000);
    dt__sock_send_all(fd, bytes, len, dt__deadline_after(5), "rank 0");
    close(fd);
    pthread_join(th, NULL);
    dt_store_close(store);
    *out = a;
}

/* ---- frames that reach rank 0 together, read from the socket at once ---- */

/* Two batches, each sent with one write: the first fits in one read of the
 * socket; the second does not, so one of its frames straddles the end of
 * what rank 0 read, and the large ones go straight to their buffers. */
#define BATCH_FRAMES 9
#define FIRST_BATCH 5
static const size_t batch_len[BATCH_FRAMES] = {8, 8, 3000, 0, 8, 5000, 6000, 8, 20000};

typedef struct {
    int port;
    atomic_int posted; /* receives rank 0 has posted (the main thread waits on it) */
    dt_status status;
    int wrong_bytes;
    double later_s; /* waiting for frames 2..5, which arrived with frame 1 */
} batch_args;

static void *batch_rank0(void *arg)
{
    batch_args *a = arg;
    dt_store_client *store;
    dt__engine *e;
    if ((a->status = rank0_engine(a->port, "batch", &store, &e)) != DT_OK)
        return NULL;
    static uint8_t buf[32768];
    int64_t t0 = 0;
    for (int i = 0; i < BATCH_FRAMES; i++) {
        dt__req r;
        a->status = dt__engine_irecv(e, &r, 1, 1, i, 0, 0, true, buf, sizeof buf);
        atomic_store(&a->posted, i + 1);
        if (a->status == DT_OK)
            a->status = dt__engine_wait(e, &r, dt__deadline_after(10));
        if (a->status != DT_OK)
            break; /* r holds nothing to check */
        if (i == 0)
            t0 = dt__now_ns();
        if (i == FIRST_BATCH - 1)
            a->later_s = (double)(dt__now_ns() - t0) / 1e9;
        for (size_t k = 0; k < batch_len[i]; k++)
            a->wrong_bytes += buf[k] != (uint8_t)(i * 31 + k);
        a->wrong_bytes += r.received != batch_len[i];
    }
    dt__engine_destroy(e);
    dt_store_close(store);
    return NULL;
}

static void send_batch(int fd, int from, int to)
{
    static uint8_t bytes[BATCH_FRAMES * DT_FRAME_HDR + 65536];
    size_t len = 0;
    for (int i = from; i < to; i++) {
        dt__frame f = {.type = DT_FRAME_DATA, .comm_id = 1, .tag = i, .len = batch_len[i]};
        dt__frame_encode(&f, bytes + len);
        len += DT_FRAME_HDR;
        for (size_t k = 0; k < batch_len[i]; k++)
            bytes[len++] = (uint8_t)(i * 31 + k);
    }
    dt__sock_send_all(fd, bytes, len, dt__deadline_after(5), "rank 0");
}

/* Each frame is delivered whole, and frames already read when a receive
 * completes are delivered without new bytes arriving on the socket (which
 * stays quiet until rank 0 has taken the first batch). */
static void test_engine_batched_frames(void)
{
    dt_store_server *srv;
    EXPECT_STATUS(dt_store_server_start("127.0.0.1", 0, TOKEN, &srv), DT_OK);
    batch_args a = {.port = dt_store_server_port(srv)};
    pthread_t th;
    pthread_create(&th, NULL, batch_rank0, &a);
    dt_store_client *store;
    EXPECT_STATUS(dt_store_connect("127.0.0.1", a.port, TOKEN, 5, &store), DT_OK);
    int fd = join_as_rank1(store, "batch");
    int64_t give_up = dt__deadline_after(10);
    while (atomic_load(&a.posted) < 1 && dt__now_ns() < give_up)
        usleep(1000);
    usleep(20000);
    send_batch(fd, 0, FIRST_BATCH);
    while (atomic_load(&a.posted) <= FIRST_BATCH && dt__now_ns() < give_up)
        usleep(1000);
    send_batch(fd, FIRST_BATCH, BATCH_FRAMES);
    pthread_join(th, NULL);
    close(fd);
    EXPECT_STATUS(a.status, DT_OK);
    EXPECT_EQ(a.wrong_bytes, 0);
    EXPECT(a.later_s < 0.5);
    dt_store_close(store);
    dt_store_server_stop(srv);
}

static void test_engine_garbage(void)
{
    dt_store_server *srv;
    EXPECT_STATUS(dt_store_server_start("127.0.0.1", 0, TOKEN, &srv), DT_OK);
    int port = dt_store_server_port(srv);
    rank0_args a;

    uint8_t junk[DT_FRAME_HDR];
    memset(junk, 0xab, sizeof junk);
    hostile_peer(port, "g1", junk, sizeof junk, &a);
    EXPECT_STATUS(a.create, DT_OK);
    EXPECT_STATUS(a.recv, DT_ERR_PEER);
    EXPECT_CONTAINS(a.message, "malformed frame from rank 1");

    /* a valid header promising 100 bytes, then 10 bytes and a hang-up */
    uint8_t trunc[DT_FRAME_HDR + 10];
    dt__frame f = {.type = DT_FRAME_DATA, .comm_id = 1, .tag = 0, .len = 100};
    dt__frame_encode(&f, trunc);
    memset(trunc + DT_FRAME_HDR, 1, 10);
    hostile_peer(port, "g2", trunc, sizeof trunc, &a);
    EXPECT_STATUS(a.recv, DT_ERR_PEER);
    EXPECT_CONTAINS(a.message, "in the middle of a message");

    /* a valid header with one bit of its tag flipped on the way */
    f.len = 0;
    dt__frame_encode(&f, junk);
    junk[9] ^= 0x10;
    hostile_peer(port, "g3", junk, sizeof junk, &a);
    EXPECT_STATUS(a.recv, DT_ERR_PEER);
    EXPECT_CONTAINS(a.message, "header checksum mismatch");

    /* a message larger than the posted buffer */
    uint8_t big[DT_FRAME_HDR + 100];
    f.len = 100;
    dt__frame_encode(&f, big);
    memset(big + DT_FRAME_HDR, 7, 100);
    hostile_peer(port, "g4", big, sizeof big, &a);
    EXPECT_STATUS(a.recv, DT_ERR_TRUNCATE);
    EXPECT_CONTAINS(a.message, "exceeds the 64-byte receive buffer");

    /* a shared-memory frame (payload "by address") over TCP */
    uint8_t ref[DT_FRAME_HDR + DT_FRAME_REF_BYTES];
    f.type = DT_FRAME_DATA_REF;
    f.len = 64;
    dt__frame_encode(&f, ref);
    memset(ref + DT_FRAME_HDR, 0, DT_FRAME_REF_BYTES);
    hostile_peer(port, "g5", ref, sizeof ref, &a);
    EXPECT_STATUS(a.recv, DT_ERR_PEER);
    EXPECT_CONTAINS(a.message, "sent a shared-memory frame (type 4) over TCP");
    dt_store_server_stop(srv);
}

/* ---- a new rank connects to all its lower ranks at once ---- */

typedef struct {
    int port;
    dt_status create;
    char message[1024];
} rank2_args;

static void *rank2_main(void *arg)
{
    rank2_args *a = arg;
    dt_store_client *store;
    dt__engine *e;
    if ((a->create = dt_store_connect("127.0.0.1", a->port, TOKEN, 5, &store)) != DT_OK)
        return NULL;
    dt__engine_config cfg = {.rank = 2, .size = 3, .token = TOKEN, .key_prefix = "together", .timeout_s = 20};
    a->create = dt__engine_create(&cfg, store, &e);
    snprintf(a->message, sizeof a->message, "%s", dt_last_error());
    if (a->create == DT_OK)
        dt__engine_destroy(e);
    dt_store_close(store);
    return NULL;
}

/* Acceptor side of one job-token handshake, by hand: true when the
 * connector proved the token as rank 2. */
static bool handshake_rank2(int fd)
{
    uint8_t challenge[DT_AUTH_CHALLENGE_LEN], response[DT_AUTH_RESPONSE_LEN], proof[DT_AUTH_PROOF_LEN];
    int64_t info = -1;
    int64_t deadline = dt__deadline_after(5);
    return dt__auth_challenge(challenge) == DT_OK &&
           dt__sock_send_all(fd, challenge, sizeof challenge, deadline, "rank 2") == DT_OK &&
           dt__sock_recv_all(fd, response, sizeof response, deadline, "rank 2") == DT_OK &&
           dt__auth_check(TOKEN, "dtrain-peer:together", challenge, response, "rank 2", proof, &info) == DT_OK &&
           info == 2 && dt__sock_send_all(fd, proof, sizeof proof, deadline, "rank 2") == DT_OK;
}

/* Rank 2 of 3 against hand-driven ranks 0 and 1 that answer no handshake
 * until rank 2's connections to both have arrived: a rank that waited for
 * rank 0's handshake before connecting to rank 1 (the mesh's order before)
 * never gets there, and the listeners give up after 5 s; one that issues
 * every connect first forms the mesh. */
static void test_engine_connects_together(void)
{
    dt_store_server *srv;
    EXPECT_STATUS(dt_store_server_start("127.0.0.1", 0, TOKEN, &srv), DT_OK);
    rank2_args a = {.port = dt_store_server_port(srv)};
    dt_store_client *store;
    EXPECT_STATUS(dt_store_connect("127.0.0.1", a.port, TOKEN, 5, &store), DT_OK);
    int lfd[2], port[2];
    for (int r = 0; r < 2; r++) {
        EXPECT_STATUS(dt__sock_listen("127.0.0.1", 0, &lfd[r], &port[r]), DT_OK);
        char key[64], addr[64];
        snprintf(key, sizeof key, "together/addr/%d", r);
        snprintf(addr, sizeof addr, "127.0.0.1:%d -", port[r]);
        EXPECT_STATUS(dt_store_set(store, key, addr, strlen(addr) + 1), DT_OK);
    }
    pthread_t th;
    pthread_create(&th, NULL, rank2_main, &a);
    int fd[2] = {-1, -1};
    int64_t give_up = dt__deadline_after(5);
    while ((fd[0] < 0 || fd[1] < 0) && dt__now_ns() < give_up) { /* both arrived, none answered */
        for (int r = 0; r < 2; r++)
            if (fd[r] < 0)
                dt__sock_accept(lfd[r], &fd[r], NULL, 0);
        usleep(1000);
    }
    EXPECT(fd[0] >= 0 && fd[1] >= 0);
    for (int r = 0; r < 2; r++) {
        if (fd[r] >= 0)
            EXPECT(handshake_rank2(fd[r]));
        close(lfd[r]);
    }
    for (int r = 0; r < 2; r++)
        if (fd[r] >= 0)
            close(fd[r]); /* rank 2's engine sees both links end: its destroy returns */
    pthread_join(th, NULL);
    EXPECT_STATUS(a.create, DT_OK);
    if (a.create != DT_OK)
        fprintf(stderr, "rank 2: %s\n", a.message);
    dt_store_close(store);
    dt_store_server_stop(srv);
}

/* The shared-memory ring: wrap-around, partial writes, dropping reads, the
 * sleep/wake hand-shake, the process_vm_readv copy and a stale name. */
static void test_shm_ring(void)
{
    char name[64];
    snprintf(name, sizeof name, "/dtrain-test-%d", (int)getpid());
    dt__shm_pair *a = NULL, *b = NULL;
    EXPECT_STATUS(dt__shm_create(name, 3000, &a), DT_ERR_INVALID); /* not a power of two */
    EXPECT_STATUS(dt__shm_create(name, 8192, &b), DT_OK); /* a crashed job's leftover */
    dt__shm_close(b);
    EXPECT_STATUS(dt__shm_create(name, 4096, &a), DT_OK); /* replaces it */
    EXPECT_STATUS(dt__shm_attach(name, &b), DT_OK);
    dt__shm_unlink(name);
    dt__shm_pair *gone = NULL;
    EXPECT_STATUS(dt__shm_attach(name, &gone), DT_ERR_SYSTEM); /* the name is removed */
    dt__shm_announce(a, 0);
    dt__shm_announce(b, 1);
    EXPECT(dt__shm_probe_peer(a, 0) && dt__shm_probe_peer(b, 1));
    dt__shm_ring *tx = dt__shm_tx(a, 0), *rx = dt__shm_rx(b, 1);
    EXPECT(dt__shm_writable(tx) == 4096 && dt__shm_readable(rx) == 0);

    /* 3000 + 3000 bytes: the second write stops at the 4096-byte capacity
     * and wraps once the reader has made room. */
    uint8_t src[6000], dst[6000];
    for (size_t i = 0; i < sizeof src; i++)
        src[i] = (uint8_t)(i * 7 + 1);
    struct iovec iov[2] = {{src, 3000}, {src + 3000, 3000}};
    EXPECT(dt__shm_write(tx, iov, 2) == 4096);
    EXPECT(dt__shm_write(tx, iov, 1) == 0);
    EXPECT(!dt__shm_sleep_rx(rx)); /* data is there: no sleep */
    EXPECT(dt__shm_sleep_tx(tx, 1)); /* full: the producer may sleep... */
    EXPECT(dt__shm_read(rx, dst, 1000) == 1000);
    EXPECT(dt__shm_wake_producer(rx)); /* ...and the reader must wake it, once */
    EXPECT(!dt__shm_wake_producer(rx));
    EXPECT(dt__shm_read(rx, NULL, 100) == 100); /* dropped */
    struct iovec rest = {src + 4096, sizeof src - 4096};
    EXPECT(dt__shm_write(tx, &rest, 1) == 1100);
    EXPECT(dt__shm_read(rx, dst + 1100, 5000) == 4096);
    EXPECT(memcmp(dst, src, 1000) == 0 && memcmp(dst + 1100, src + 1100, 4096) == 0);
    EXPECT(dt__shm_readable(rx) == 0 && dt__shm_sleep_rx(rx)); /* empty: sleep announced */
    struct iovec one = {src, 1};
    EXPECT(dt__shm_write(tx, &one, 1) == 1);
    EXPECT(dt__shm_wake_consumer(tx) && !dt__shm_wake_consumer(tx));
    dt__shm_awake_rx(rx);
    EXPECT(dt__shm_read(rx, dst, 1) == 1 && dst[0] == src[0]);

    /* the copy out of a process's memory (here: our own) */
    uint64_t word = 0x1122334455667788ull, got = 0;
    EXPECT_STATUS(dt__shm_read_remote(getpid(), (uint64_t)(uintptr_t)&word, &got, sizeof got), DT_OK);
    EXPECT(got == word);
    EXPECT_STATUS(dt__shm_read_remote(getpid(), 8, &got, sizeof got), DT_ERR_SYSTEM);
    dt__shm_close(a);
    dt__shm_close(b);
}

/* The arena's round flags: the first rounds, the wrap of the 32-bit
 * counters, a flag or a remembered look left 2^31 rounds behind (read as
 * behind, not ahead), the refresh, and the ring of small entries. */
static void test_arena_flags(void)
{
    char name[64];
    snprintf(name, sizeof name, "/dtrain-test-arena-%d", (int)getpid());
    dt__arena *a = NULL;
    EXPECT_STATUS(dt__arena_create(name, 2, 4096, &a), DT_OK);
    dt__arena_unlink(name);
    if (!a)
        return;
    const uint32_t first = DT__ARENA_FIRST_ROUND;
    EXPECT(dt__arena_reached(a, 1, DT__ARENA_DONE, first - 1));
    EXPECT(dt__arena_reached(a, 1, DT__ARENA_DONE, first - 64)); /* the small ring's first claims */
    EXPECT(!dt__arena_reached(a, 1, DT__ARENA_DONE, first));
    dt__arena_publish(a, 1, DT__ARENA_DONE, first + 5);
    EXPECT(dt__arena_reached(a, 1, DT__ARENA_DONE, first + 5));
    EXPECT(!dt__arena_reached(a, 1, DT__ARENA_DONE, first + 6));
    dt__arena_publish(a, 1, DT__ARENA_DONE, 3); /* past the wrap */
    EXPECT(dt__arena_reached(a, 1, DT__ARENA_DONE, UINT32_MAX) && dt__arena_reached(a, 1, DT__ARENA_DONE, 3));
    EXPECT(!dt__arena_reached(a, 1, DT__ARENA_DONE, 4));

    /* REDUCED never published since the start: 2^31 + 5 rounds later it is
     * behind (a signed difference reads it as ahead). */
    EXPECT(!dt__arena_reached(a, 1, DT__ARENA_REDUCED, first - 1 + (1u << 31) + 5));
    /* The remembered look at DONE is 3; the flag moves 2^31 + 10 on. */
    uint32_t later = 3 + (1u << 31) + 10;
    dt__arena_publish(a, 1, DT__ARENA_DONE, later);
    EXPECT(dt__arena_reached(a, 1, DT__ARENA_DONE, later));
    EXPECT(!dt__arena_reached(a, 1, DT__ARENA_DONE, later + 1));

    /* The refresh brings this rank's REDUCED to the round before. */
    dt__arena_refresh(a, 0, 2 * DT__ARENA_REFRESH_ROUNDS);
    EXPECT(dt__arena_reached(a, 0, DT__ARENA_REDUCED, 2 * DT__ARENA_REFRESH_ROUNDS - 1));
    EXPECT(!dt__arena_reached(a, 0, DT__ARENA_REDUCED, 2 * DT__ARENA_REFRESH_ROUNDS));

    /* One entry per round, reused DT__ARENA_SMALL_DEPTH rounds later, inside the segment. */
    EXPECT(dt__arena_small_entry(a, first) != dt__arena_small_entry(a, first + 1));
    EXPECT(dt__arena_small_entry(a, first) == dt__arena_small_entry(a, first + DT__ARENA_SMALL_DEPTH));
    for (uint32_t g = 0; g < DT__ARENA_SMALL_DEPTH; g++)
        memset(dt__arena_small_entry(a, g), (int)g, DT__ARENA_SMALL_BYTES); /* past the mapping: a fault */
    EXPECT(dt__arena_small_entry(a, 0)[0] == 0 && dt__arena_small_entry(a, 63)[DT__ARENA_SMALL_BYTES - 1] == 63);

    /* The signature lines (issue 43): nothing published yet is no round's,
     * not even round 0's (zeroed memory; round 0 comes about 1024 rounds
     * into every job) nor UINT32_MAX's; a published one is its round's only. */
    uint64_t rs = 1;
    EXPECT(!dt__arena_ready_sig(a, 1, 0, &rs) && rs == 0);
    EXPECT(!dt__arena_ready_sig(a, 1, 1, &rs) && rs == 0);
    EXPECT(!dt__arena_ready_sig(a, 1, UINT32_MAX, &rs) && rs == 0);
    dt__arena_publish_ready(a, 1, UINT32_MAX, 0x77, false);
    EXPECT(dt__arena_ready_sig(a, 1, UINT32_MAX, &rs) && rs == 0x77);
    EXPECT(!dt__arena_ready_sig(a, 1, 1, &rs) && rs == 0);
    dt__arena_publish_ready(a, 1, 0, 0x55, true); /* a small round: the slot lines say no */
    EXPECT(!dt__arena_ready_sig(a, 1, 0, &rs) && rs == 0x55);
    dt__arena_publish_ready(a, 1, 0, 0x66, false);
    EXPECT(dt__arena_ready_sig(a, 1, 0, &rs) && rs == 0x66);

    /* The call a rank is in: found for its communicator and number only. */
    uint64_t sig = 0;
    EXPECT(!dt__arena_call(a, 1, 1, 3, &sig)); /* nothing recorded yet */
    dt__arena_publish_call(a, 1, 1, 3, 0x8123456789abcdefull);
    EXPECT(dt__arena_call(a, 1, 1, 3, &sig) && sig == 0x8123456789abcdefull);
    EXPECT(!dt__arena_call(a, 1, 1, 4, &sig) && !dt__arena_call(a, 1, 2, 3, &sig) && !dt__arena_call(a, 0, 1, 3, &sig));
    dt__arena_publish_call(a, 1, 1, 4, 7);
    EXPECT(!dt__arena_call(a, 1, 1, 3, &sig) && dt__arena_call(a, 1, 1, 4, &sig) && sig == 7);
    dt__arena_close(a);
}

/* Early-message buffers are reused by size, and the cache stays bounded. */
static void test_bufcache(void)
{
    dt__bufcache c = {0};
    size_t cap;
    void *a = dt__bufcache_get(&c, 1000, &cap);
    EXPECT(a != NULL);
    EXPECT_EQ(cap, 1000);
    dt__bufcache_put(&c, a, cap);
    EXPECT_EQ(c.n, 1);
    EXPECT(dt__bufcache_get(&c, 800, &cap) == a); /* fits, not 4x too big */
    EXPECT_EQ(cap, 1000);
    EXPECT_EQ(c.n, 0);
    dt__bufcache_put(&c, a, cap);
    void *b = dt__bufcache_get(&c, 100, &cap); /* 1000 is more than 4x: a new one */
    EXPECT(b != a);
    EXPECT_EQ(cap, 100);
    void *big = dt__bufcache_get(&c, 4000, &cap);
    EXPECT(big != a);
    dt__bufcache_put(&c, big, cap);
    dt__bufcache_put(&c, b, 100);
    EXPECT_EQ(c.n, 3);
    EXPECT_EQ(c.bytes, 5100);
    for (int i = 0; i < DT__BUFCACHE_SLOTS + 4; i++) /* overflow: the smallest go */
        dt__bufcache_put(&c, malloc(2000), 2000);
    EXPECT_EQ(c.n, DT__BUFCACHE_SLOTS);
    EXPECT(c.bytes <= DT__BUFCACHE_BYTES);
    bool kept_big = false;
    for (int i = 0; i < c.n; i++)
        kept_big |= c.cap[i] == 4000;
    EXPECT(kept_big);
    dt__bufcache_put(&c, malloc(16), 16); /* smaller than all: freed at once */
    EXPECT_EQ(c.n, DT__BUFCACHE_SLOTS);
    dt__bufcache_clear(&c);
    EXPECT_EQ(c.n, 0);
    EXPECT_EQ(c.bytes, 0);
}

int main(void)
{
    test_frame();
    test_bufcache();
    test_shm_ring();
    test_arena_flags();
    test_store();
    test_engine_garbage();
    test_engine_batched_frames();
    test_engine_connects_together();
    return CHECK_DONE("test_transport");
}
