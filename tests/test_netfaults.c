/* Unit tests of the transport under the faults of issue 29: a heartbeat
 * whose store is slow to answer at start-up, strangers crowding the store
 * and a rank's peer port, file descriptors running out. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "check.h"
#include "dtrain/store.h"
#include "transport/heartbeat.h"
#include "transport/socket.h"

static const char *TOKEN = "unit-test-token";

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    nanosleep(&ts, NULL);
}

static int free_port(void)
{
    int fd, port;
    if (dt__sock_listen("127.0.0.1", 0, &fd, &port) != DT_OK)
        return -1;
    close(fd);
    return port;
}

typedef struct {
    int port;
    double after_s;
    dt_store_server *srv;
} late_store;

static void *start_late(void *arg)
{
    late_store *l = arg;
    sleep_s(l->after_s);
    if (dt_store_server_start("127.0.0.1", l->port, TOKEN, &l->srv) != DT_OK)
        l->srv = NULL;
    return NULL;
}

/* D: the heartbeat's first connection retries within the heartbeat timeout
 * (5 s), not one period (0.5 s): a store that answers only after 1.5 s (a
 * loaded machine) must not stop the job from starting. */
static void test_heartbeat_start_retries(void)
{
    late_store l = {.port = free_port(), .after_s = 1.5};
    EXPECT(l.port > 0);
    pthread_t th;
    pthread_create(&th, NULL, start_late, &l);
    dt__heartbeat_config cfg = {.host = "127.0.0.1", .port = l.port, .token = TOKEN, .key_prefix = "w0",
                                .rank = 0, .size = 2, .timeout_s = 5};
    dt__heartbeat *h = NULL;
    int64_t t0 = dt__now_ns();
    dt_status s = dt__heartbeat_start(&cfg, &h);
    double took = (double)(dt__now_ns() - t0) / 1e9;
    if (s != DT_OK)
        fprintf(stderr, "heartbeat start: %s (after %.2f s)\n", dt_last_error(), took);
    EXPECT_STATUS(s, DT_OK);
    EXPECT(took < 5);
    dt__heartbeat_stop(h);
    pthread_join(th, NULL);
    EXPECT(l.srv != NULL);
    dt_store_server_stop(l.srv);
}

int main(void)
{
    test_heartbeat_start_retries();
    return CHECK_DONE("test_netfaults");
}
