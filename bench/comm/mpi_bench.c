/* The OpenMPI side of bench/comm/run.sh: times one collective over a range of
 * sizes with the same size convention and output columns as dtbench, so the
 * two tables line up.  Built by the script with mpicc (not part of the
 * project's build: OpenMPI is only a peer to compare against).
 *
 *   mpirun ... mpi_bench OP MINBYTES MAXBYTES FACTOR ITERS WARMUP [MINTIME]
 *
 * MINTIME (seconds, default 0): while a size's calls so far took less on the
 * slowest rank, another batch, as many as they say fill it (dtbench -t).
 * OP: allreduce, broadcast, allgather, reduce_scatter, alltoall (f32, sum).
 * Prints "size_bytes time_us algbw_GBps busbw_GBps" per size on rank 0;
 * time is the slowest rank's mean. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double bus_factor(const char *op, int n)
{
    if (strcmp(op, "allreduce") == 0)
        return 2.0 * (n - 1) / n;
    if (strcmp(op, "broadcast") == 0)
        return 1.0;
    return (double)(n - 1) / n;
}

static int run_once(const char *op, float *a, float *b, size_t count, int n)
{
    int c = (int)count;
    if (strcmp(op, "allreduce") == 0)
        return MPI_Allreduce(a, b, c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (strcmp(op, "broadcast") == 0)
        return MPI_Bcast(a, c, MPI_FLOAT, 0, MPI_COMM_WORLD);
    if (strcmp(op, "allgather") == 0) /* count: gathered output */
        return MPI_Allgather(a, c / n, MPI_FLOAT, b, c / n, MPI_FLOAT, MPI_COMM_WORLD);
    if (strcmp(op, "reduce_scatter") == 0) /* count: input */
        return MPI_Reduce_scatter_block(a, b, c / n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (strcmp(op, "alltoall") == 0)
        return MPI_Alltoall(a, c / n, MPI_FLOAT, b, c / n, MPI_FLOAT, MPI_COMM_WORLD);
    return -1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc != 7 && argc != 8) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_bench OP MINBYTES MAXBYTES FACTOR ITERS WARMUP [MINTIME]\n");
        MPI_Finalize();
        return 2;
    }
    const char *op = argv[1];
    size_t minb = strtoull(argv[2], NULL, 10), maxb = strtoull(argv[3], NULL, 10);
    int factor = atoi(argv[4]), least = atoi(argv[5]), warmup = atoi(argv[6]);
    double mintime = argc == 8 ? atof(argv[7]) : 0;
    float *a = malloc(maxb + 64), *b = malloc(maxb + 64);
    if (!a || !b || factor < 2 || least < 1 || mintime < 0) {
        fprintf(stderr, "mpi_bench: bad arguments or out of memory\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    for (size_t i = 0; i < maxb / 4 + 16; i++)
        a[i] = b[i] = (float)(i % 7);
    for (size_t bytes = minb; bytes <= maxb; bytes *= (size_t)factor) {
        size_t count = bytes / 4;
        if (count < (size_t)n && strcmp(op, "allreduce") != 0 && strcmp(op, "broadcast") != 0)
            continue; /* fewer elements than ranks */
        for (int i = 0; i < warmup; i++)
            if (run_once(op, a, b, count, n) != MPI_SUCCESS)
                MPI_Abort(MPI_COMM_WORLD, 1);
        MPI_Barrier(MPI_COMM_WORLD);
        double elapsed = 0;
        int iters = 0;
        for (int batch = least, round = 0; batch > 0; round++) {
            double t0 = MPI_Wtime();
            for (int i = 0; i < batch; i++)
                run_once(op, a, b, count, n);
            elapsed += MPI_Wtime() - t0;
            iters += batch;
            batch = 0;
            if (mintime > 0 && round < 8) { /* another batch while these were short (dtbench -t) */
                double took;
                MPI_Allreduce(&elapsed, &took, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                if (took < mintime) {
                    double want = took > 0 ? ceil(mintime * iters / took) : 1e6;
                    batch = (want >= 1e6 ? 1000000 : (int)want) - iters;
                }
            }
        }
        double mean = elapsed / iters, worst = 0;
        MPI_Reduce(&mean, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) {
            double algbw = (double)bytes / worst / 1e9;
            printf("%zu %.2f %.4f %.4f\n", bytes, worst * 1e6, algbw, algbw * bus_factor(op, n));
            fflush(stdout);
        }
    }
    free(a);
    free(b);
    MPI_Finalize();
    return 0;
}
