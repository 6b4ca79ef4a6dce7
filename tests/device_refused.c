/* Device buffers on a backend that cannot take them (backend.h's
 * device_buffers): under DT_BACKEND=mpi every call handed emu memory is
 * refused with DT_ERR_INVALID naming the buffer and the backend, before
 * any message; under the native backend the same calls are staged and
 * give the host results.
 *
 * usage: device_refused refused|staged   (exit 0 when every call behaved) */
#include <stdio.h>
#include <string.h>

#include "dtrain/dtrain.h"
#include "tensor/backend.h"

static int failures;

static void expect(const char *what, dt_status s, int refuse, const char *name)
{
    if (refuse ? (s != DT_ERR_INVALID || !strstr(dt_last_error(), name) || !strstr(dt_last_error(), "emu device"))
               : s != DT_OK) {
        fprintf(stderr, "FAIL %s: %s %s (%s)\n", what, refuse ? "not refused naming" : "failed:", name,
                s == DT_OK ? "ok" : dt_last_error());
        failures++;
    }
}

int main(int argc, char **argv)
{
    if (argc != 2 || (strcmp(argv[1], "refused") && strcmp(argv[1], "staged"))) {
        fprintf(stderr, "usage: device_refused refused|staged\n");
        return 2;
    }
    int refuse = !strcmp(argv[1], "refused");
    const dt_device *dev = NULL;
    dt_comm *c = NULL;
    if (dt_device_open("emu", &dev) != DT_OK || dt_comm_init_env(&c) != DT_OK) {
        fprintf(stderr, "device_refused: %s\n", dt_last_error());
        return 2;
    }
    int rank = dt_comm_rank(c), size = dt_comm_size(c);
    enum { N = 1000 };
    float host[N], back[N];
    for (int i = 0; i < N; i++)
        host[i] = (float)(i % 7 + rank);
    float *d = dev->alloc(N * sizeof(float)), *e = dev->alloc(N * sizeof(float));
    dt_device_upload(dev, d, host, sizeof host);
    expect("allreduce device -> host", dt_allreduce(d, back, N, DT_F32, DT_SUM, c), refuse, "send buffer");
    expect("allreduce host -> device", dt_allreduce(host, e, N, DT_F32, DT_SUM, c), refuse, "receive buffer");
    expect("broadcast", dt_broadcast(d, N, DT_F32, 0, c), refuse, "buffer");
    dt_request *r = NULL;
    if (size > 1) {
        int peer = (rank + 1) % size, from = (rank - 1 + size) % size;
        dt_status s = dt_irecv(e, N, DT_F32, from, 3, c, &r);
        expect("irecv", s, refuse, "buffer");
        expect("send", dt_send(d, N, DT_F32, peer, 3, c), refuse, "buffer");
        if (s == DT_OK)
            expect("wait", dt_wait(r, NULL), 0, "");
    }
    if (!refuse) { /* the staged results: the broadcast left rank 0's input in d */
        float want[N];
        for (int i = 0; i < N; i++)
            want[i] = (float)(i % 7);
        dt_device_download(dev, back, d, sizeof back);
        if (memcmp(back, want, sizeof want)) {
            fprintf(stderr, "FAIL rank %d: the staged broadcast gave other values\n", rank);
            failures++;
        }
    }
    dev->free(d);
    dev->free(e);
    int sum = 0;
    dt_allreduce(&failures, &sum, 1, DT_I32, DT_SUM, c);
    if (rank == 0)
        printf("device_refused: %d ranks, %s: %s\n", size, argv[1], sum ? "FAILED" : "ok");
    dt_comm_destroy(c);
    return sum ? 1 : 0;
}
