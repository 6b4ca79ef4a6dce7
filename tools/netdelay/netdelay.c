/* dt-netdelay: add a fixed delay to every packet of a netfilter queue.
 *
 * This kernel has no tc netem, so the namespace cluster emulates per-hop
 * latency in user space: in the bridge's namespace an iptables FORWARD rule
 * sends every bridged packet to NFQUEUE, and this program holds each one for
 * the delay before accepting it (one hop = host to host through the bridge).
 * The delay is the same for every packet, so packets leave in arrival order
 * (a FIFO, no reordering).  Only packet ids are kept; the payload stays in
 * the kernel (copy mode META).
 *
 *   dt-netdelay --queue N --delay-us D
 *
 * Runs until SIGINT/SIGTERM; prints a line on stderr when ready. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <libnetfilter_queue/libnetfilter_queue.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { FIFO_CAP = 1 << 16, QUEUE_MAXLEN = 1 << 15 };

typedef struct {
    uint32_t id[FIFO_CAP];
    int64_t due[FIFO_CAP];
    size_t head, len;
    int64_t delay_ns;
    struct nfq_q_handle *q;
} delayer;

static volatile sig_atomic_t stop_requested; /* set by the signal handler only */

static void on_signal(int sig) { (void)sig; stop_requested = 1; }

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void accept_packet(delayer *d, uint32_t id) { nfq_set_verdict(d->q, id, NF_ACCEPT, 0, NULL); }

static int on_packet(struct nfq_q_handle *q, struct nfgenmsg *msg, struct nfq_data *nfa, void *arg)
{
    (void)q;
    (void)msg;
    delayer *d = arg;
    struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
    if (!ph)
        return 0;
    uint32_t id = ntohl(ph->packet_id);
    if (d->len == FIFO_CAP) { /* cannot hold more: let it through undelayed */
        accept_packet(d, id);
        return 0;
    }
    size_t tail = (d->head + d->len) % FIFO_CAP;
    d->id[tail] = id;
    d->due[tail] = now_ns() + d->delay_ns;
    d->len++;
    return 0;
}

static void release_due(delayer *d)
{
    int64_t t = now_ns();
    while (d->len && d->due[d->head] <= t) {
        accept_packet(d, d->id[d->head]);
        d->head = (d->head + 1) % FIFO_CAP;
        d->len--;
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: dt-netdelay --queue N --delay-us D\n\n"
               "Hold every packet of netfilter queue N for D microseconds, then accept it\n"
               "(per-hop latency for the namespace cluster; see scripts/netns-cluster.sh).\n");
}

int main(int argc, char **argv)
{
    long queue = -1, delay_us = -1;
    static const struct option opts[] = {
        {"queue", required_argument, NULL, 'q'}, {"delay-us", required_argument, NULL, 'd'},
        {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    for (int o; (o = getopt_long(argc, argv, "q:d:h", opts, NULL)) != -1;) {
        char *end;
        switch (o) {
        case 'q': queue = strtol(optarg, &end, 10); if (*end || queue < 0 || queue > 65535) queue = -2; break;
        case 'd': delay_us = strtol(optarg, &end, 10); if (*end || delay_us < 0 || delay_us > 10000000) delay_us = -2; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (queue < 0 || delay_us < 0) {
        fprintf(stderr, "dt-netdelay: %s\n", queue < 0 ? "--queue needs a number 0..65535" : "--delay-us needs a number 0..10000000");
        usage(stderr);
        return 2;
    }
    delayer *d = calloc(1, sizeof *d);
    struct nfq_handle *h = nfq_open();
    if (!d || !h) {
        fprintf(stderr, "dt-netdelay: cannot open the netfilter queue interface: %s\n", strerror(errno));
        return 1;
    }
    d->delay_ns = delay_us * 1000;
    d->q = nfq_create_queue(h, (uint16_t)queue, on_packet, d);
    if (!d->q || nfq_set_mode(d->q, NFQNL_COPY_META, 0) < 0) {
        fprintf(stderr, "dt-netdelay: cannot bind queue %ld (is another program on it? root needed): %s\n", queue,
                strerror(errno));
        return 1;
    }
    nfq_set_queue_maxlen(d->q, QUEUE_MAXLEN);
    /* Take GSO packets whole (no segmentation on the way to user space). */
    nfq_set_queue_flags(d->q, NFQA_CFG_F_GSO, NFQA_CFG_F_GSO);
    int fd = nfq_fd(h);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    fprintf(stderr, "dt-netdelay: queue %ld, %ld us per packet\n", queue, delay_us);
    char buf[65536 + 4096];
    while (!stop_requested) {
        /* ppoll's timeout has nanosecond resolution (hrtimers): sleep until
         * the oldest packet is due, without spinning. */
        struct timespec ts, *tsp = NULL;
        if (d->len) {
            int64_t wait = d->due[d->head] - now_ns();
            if (wait < 0)
                wait = 0;
            ts = (struct timespec){.tv_sec = wait / 1000000000, .tv_nsec = wait % 1000000000};
            tsp = &ts;
        }
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int rc = ppoll(&p, 1, tsp, NULL);
        if (rc > 0) {
            for (;;) {
                ssize_t got = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
                if (got <= 0)
                    break;
                nfq_handle_packet(h, buf, (int)got);
            }
        } else if (rc < 0 && errno != EINTR) {
            fprintf(stderr, "dt-netdelay: ppoll: %s\n", strerror(errno));
            break;
        }
        release_due(d);
    }
    while (d->len) { /* hand everything back before leaving */
        accept_packet(d, d->id[d->head]);
        d->head = (d->head + 1) % FIFO_CAP;
        d->len--;
    }
    nfq_destroy_queue(d->q);
    nfq_close(h);
    free(d);
    return 0;
}
