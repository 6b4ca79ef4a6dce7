/* Unit tests of the base layer: dtype names, f16/bf16 conversion, reduction
 * kernels (every dtype and op, wrap-around, avg), tunables parsing, the
 * timeline's recorder, whole-file reads. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/env.h"
#include "base/log.h"
#include "base/redop.h"
#include "base/status.h"
#include "base/trace.h"
#include "check.h"
#include "dtrain/base.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_names(void)
{
    for (int t = 0; t < DT_DTYPE_COUNT; t++) {
        dt_dtype back;
        EXPECT_STATUS(dt_dtype_parse(dt_dtype_name((dt_dtype)t), &back), DT_OK);
        EXPECT_EQ(back, t);
    }
    dt_dtype d;
    EXPECT_STATUS(dt_dtype_parse("f8", &d), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "f8");
    dt_redop r;
    EXPECT_STATUS(dt_redop_parse("max", &r), DT_OK);
    EXPECT_EQ(r, DT_MAX);
    EXPECT_STATUS(dt_redop_parse("mean", &r), DT_ERR_INVALID);
    EXPECT_EQ(dt_dtype_size(DT_BF16), 2);
    EXPECT_EQ(dt_dtype_size((dt_dtype)99), 0);
    /* a message wrapping the last one, passed as an argument */
    dt__fail(DT_ERR_INVALID, "the inner cause %d", 7);
    EXPECT_STATUS(dt__fail(DT_ERR_PEER, "outer context: %s", dt_last_error()), DT_ERR_PEER);
    EXPECT(strcmp(dt_last_error(), "outer context: the inner cause 7") == 0);
}

static void test_f16(void)
{
    /* Every finite half converts to f32 and back unchanged. */
    int bad = 0;
    for (uint32_t h = 0; h < 0x10000; h++) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
            continue; /* NaN payloads are normalised to quiet NaNs */
        if (dt_f32_to_f16(dt_f16_to_f32((uint16_t)h)) != h)
            bad++;
    }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(dt_f32_to_f16(1.0f), 0x3c00);
    EXPECT_EQ(dt_f32_to_f16(-2.0f), 0xc000);
    EXPECT_EQ(dt_f32_to_f16(65504.0f), 0x7bff);
    EXPECT_EQ(dt_f32_to_f16(65520.0f), 0x7c00);       /* rounds to infinity */
    EXPECT_EQ(dt_f32_to_f16(65519.0f), 0x7bff);
    EXPECT_EQ(dt_f32_to_f16(5.9604645e-08f), 0x0001); /* smallest subnormal */
    EXPECT_EQ(dt_f32_to_f16(2.9802322e-08f), 0x0000); /* half of it: ties to even (0) */
    EXPECT_EQ(dt_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie below: to even */
    EXPECT_EQ(dt_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02); /* tie above odd: up */
    EXPECT_EQ(dt_f32_to_f16(INFINITY), 0x7c00);
    EXPECT((dt_f32_to_f16(NAN) & 0x7e00) == 0x7e00);
    EXPECT(isnan(dt_f16_to_f32(0x7e00)));
    EXPECT_EQ(bits(dt_f16_to_f32(0x8000)), 0x80000000u);
}

static void test_bf16(void)
{
    int bad = 0;
    for (uint32_t b = 0; b < 0x10000; b++) {
        if ((b & 0x7f80) == 0x7f80 && (b & 0x7f))
            continue;
        if (dt_f32_to_bf16(dt_bf16_to_f32((uint16_t)b)) != b)
            bad++;
    }
    EXPECT_EQ(bad, 0);
    EXPECT_EQ(dt_f32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(dt_f32_to_bf16(1.00390625f), 0x3f80); /* exact tie: to even */
    EXPECT_EQ(dt_f32_to_bf16(1.01171875f), 0x3f82); /* tie above odd: up */
    EXPECT((dt_f32_to_bf16(NAN) & 0x7fc0) == 0x7fc0);
}

static void test_reduce(void)
{
    float a[5] = {1, -2, 3.5f, 0, 7}, b[5] = {2, 5, -1, 0, 7}, o[5];
    dt__reduce(o, a, b, 5, DT_F32, DT_SUM);
    EXPECT(o[0] == 3 && o[1] == 3 && o[2] == 2.5f && o[4] == 14);
    dt__reduce(o, a, b, 5, DT_F32, DT_PROD);
    EXPECT(o[0] == 2 && o[1] == -10 && o[2] == -3.5f);
    dt__reduce(o, a, b, 5, DT_F32, DT_MIN);
    EXPECT(o[0] == 1 && o[1] == -2 && o[2] == -1);
    dt__reduce(o, a, b, 5, DT_F32, DT_MAX);
    EXPECT(o[0] == 2 && o[1] == 5 && o[2] == 3.5f);
    dt__reduce(a, a, b, 5, DT_F32, DT_AVG); /* in place, avg combines as a sum */
    dt__reduce_finish(a, 5, DT_F32, DT_AVG, 2);
    EXPECT(a[0] == 1.5f && a[1] == 1.5f && a[4] == 7);

    double da[2] = {1.5e308, -1}, db[2] = {1.5e308, 3};
    dt__reduce(da, da, db, 2, DT_F64, DT_SUM);
    EXPECT(isinf(da[0]) && da[1] == 2);

    int32_t ia[3] = {INT32_MAX, -5, 7}, ib[3] = {1, 3, -9};
    dt__reduce(ia, ia, ib, 3, DT_I32, DT_SUM); /* wraps, no UB */
    EXPECT_EQ(ia[0], INT32_MIN);
    EXPECT_EQ(ia[1], -2);
    int64_t la[2] = {-3, 4}, lb[2] = {5, -6};
    dt__reduce(la, la, lb, 2, DT_I64, DT_PROD);
    EXPECT_EQ(la[0], -15);
    EXPECT_EQ(la[1], -24);
    dt__reduce_finish(la, 2, DT_I64, DT_SUM, 4); /* finish is a no-op except for DT_AVG */
    EXPECT_EQ(la[0], -15);
    int64_t av[2] = {-15, 9};
    dt__reduce_finish(av, 2, DT_I64, DT_AVG, 4);
    EXPECT_EQ(av[0], -3);
    EXPECT_EQ(av[1], 2);

    uint8_t ua[3] = {250, 3, 9}, ub[3] = {10, 200, 2};
    dt__reduce(ua, ua, ub, 3, DT_U8, DT_SUM);
    EXPECT_EQ(ua[0], 4);
    EXPECT_EQ(ua[1], 203);
    dt__reduce(ua, ua, ub, 3, DT_U8, DT_MIN);
    EXPECT_EQ(ua[0], 4);
    EXPECT_EQ(ua[1], 200);

    /* half types accumulate in f32 and round once per combine */
    uint16_t ha[2] = {dt_f32_to_f16(2048), dt_f32_to_f16(0.5f)}, hb[2] = {dt_f32_to_f16(1), dt_f32_to_f16(0.25f)};
    dt__reduce(ha, ha, hb, 2, DT_F16, DT_SUM);
    EXPECT(dt_f16_to_f32(ha[0]) == 2048); /* 2049 is not a half: ties to even */
    EXPECT(dt_f16_to_f32(ha[1]) == 0.75f);
    uint16_t ba[1] = {dt_f32_to_bf16(3)}, bb[1] = {dt_f32_to_bf16(-4)};
    dt__reduce(ba, ba, bb, 1, DT_BF16, DT_MAX);
    EXPECT(dt_bf16_to_f32(ba[0]) == 3);
    dt__reduce_finish(ba, 1, DT_BF16, DT_AVG, 2);
    EXPECT(dt_bf16_to_f32(ba[0]) == 1.5f);

    /* One contribution (issue 43): NaNs become the canonical NaN, every
     * other value (-0, inf, subnormals) stays as it is, whatever the op. */
    uint32_t f1[4] = {0xffc00005u, 0x7f800001u, 0x80000000u, 0x00000001u};
    dt__reduce_finish(f1, 4, DT_F32, DT_SUM, 1);
    EXPECT(f1[0] == 0x7fc00000u && f1[1] == 0x7fc00000u && f1[2] == 0x80000000u && f1[3] == 1);
    uint64_t d1[2] = {0xfff8000000000003ull, 0xfff0000000000000ull};
    dt__reduce_finish(d1, 2, DT_F64, DT_MAX, 1);
    EXPECT(d1[0] == 0x7ff8000000000000ull && d1[1] == 0xfff0000000000000ull);
    uint16_t h1[3] = {0xfe01u, 0x7c01u, 0x8000u}, b1[3] = {0xffc1u, 0x7f81u, 0xff80u};
    dt__reduce_finish(h1, 3, DT_F16, DT_AVG, 1);
    EXPECT(h1[0] == 0x7e00u && h1[1] == 0x7e00u && h1[2] == 0x8000u);
    dt__reduce_finish(b1, 3, DT_BF16, DT_PROD, 0);
    EXPECT(b1[0] == 0x7fc0u && b1[1] == 0x7fc0u && b1[2] == 0xff80u);
    int32_t i1[1] = {-7};
    dt__reduce_finish(i1, 1, DT_I32, DT_AVG, 1);
    EXPECT_EQ(i1[0], -7);

    /* a long buffer crosses the half kernels' internal block size */
    enum { N = 1000 };
    uint16_t *x = malloc(N * 2), *y = malloc(N * 2);
    for (int i = 0; i < N; i++) {
        x[i] = dt_f32_to_bf16((float)(i % 50));
        y[i] = dt_f32_to_bf16(1);
    }
    dt__reduce(x, x, y, N, DT_BF16, DT_SUM);
    int wrong = 0;
    for (int i = 0; i < N; i++)
        wrong += dt_bf16_to_f32(x[i]) != (float)(i % 50 + 1);
    EXPECT_EQ(wrong, 0);
    free(x);
    free(y);
}

static void test_env(void)
{
    int64_t v;
    EXPECT_STATUS(dt__parse_int("42", 0, 100, &v), DT_OK);
    EXPECT_EQ(v, 42);
    EXPECT_STATUS(dt__parse_int("4x", 0, 100, &v), DT_ERR_INVALID);
    EXPECT_STATUS(dt__parse_int("101", 0, 100, &v), DT_ERR_INVALID);
    setenv("DT_TIMEOUT", "-3", 1);
    EXPECT_STATUS(dt__env_int("DT_TIMEOUT", 1, 1000, &v), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "DT_TIMEOUT");
    unsetenv("DT_TIMEOUT");
    EXPECT_STATUS(dt__env_int("DT_TIMEOUT", 1, 100000, &v), DT_OK);
    EXPECT_EQ(v, 600);
    int registered = 0;
    for (const dt__tunable *t = dt__tunables(); t->name; t++)
        registered += t->meaning && *t->meaning;
    EXPECT(registered >= 10);
}

/* dt_env_check: DT_DEBUG's words, DT_THREADS, DT_RESTART named with their values;
 * log timestamps are UTC with milliseconds. */
static void test_env_check(void)
{
    setenv("DT_DEBUG", "info,coll", 1);
    EXPECT_STATUS(dt_env_check(), DT_OK);
    EXPECT(dt__debug_word("coll") && dt__debug_word("info") && !dt__debug_word("trace"));
    setenv("DT_DEBUG", "bogus", 1);
    EXPECT_STATUS(dt_env_check(), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "DT_DEBUG=bogus: 'bogus'");
    EXPECT_CONTAINS(dt_last_error(), "warn, info, trace, all, coll");
    setenv("DT_DEBUG", "infox", 1); /* whole words only: "infox" is not info */
    EXPECT_STATUS(dt_env_check(), DT_ERR_INVALID);
    unsetenv("DT_DEBUG");
    setenv("DT_THREADS", "-1", 1);
    EXPECT_STATUS(dt_env_check(), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "DT_THREADS");
    EXPECT_CONTAINS(dt_last_error(), "-1");
    unsetenv("DT_THREADS");
    setenv("DT_RESTART", "abc", 1);
    EXPECT_STATUS(dt_env_check(), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "DT_RESTART: 'abc'");
    unsetenv("DT_RESTART");
    setenv("DT_GEMM_TUNE", "17", 1); /* the cuda products' candidates: 1..16 */
    EXPECT_STATUS(dt_env_check(), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "DT_GEMM_TUNE");
    setenv("DT_GEMM_TUNE", "8", 1);
    EXPECT_STATUS(dt_env_check(), DT_OK);
    unsetenv("DT_GEMM_TUNE");
    EXPECT_STATUS(dt_env_check(), DT_OK);
    int declared = 0;
    for (const dt__tunable *t = dt__tunables(); t->name; t++)
        declared += !strcmp(t->name, "DT_THREADS") + !strcmp(t->name, "DT_RESTART");
    EXPECT_EQ(declared, 2);
    char stamp[40];
    EXPECT_EQ((int)dt__utc_stamp(stamp, sizeof stamp), 24); /* 2026-01-31T12:34:56.789Z */
    EXPECT(stamp[10] == 'T' && stamp[19] == '.' && stamp[23] == 'Z');
}

/* Four threads record spans (more than a chunk each) while the main thread
 * stops the trace half-way: the file holds only whole events, each thread
 * named, and a second trace holds none of the first's. */
enum { SPANS = 3000 };
static int started;

static void *spanner(void *arg)
{
    char name[32];
    snprintf(name, sizeof name, "spanner %d", (int)(intptr_t)arg);
    dt__trace_thread_name(name);
    for (int i = 0; i < SPANS; i++) {
        int64_t t0 = dt__trace_begin();
        dt__trace_end("test", "span \"quoted\"", t0, "\"i\":%d", i);
        if (i == 0) /* one span each before the stop */
            __atomic_add_fetch(&started, 1, __ATOMIC_RELEASE);
    }
    return NULL;
}

static long count_lines(const char *path, const char *prefix, long *names)
{
    FILE *f = fopen(path, "r");
    char line[1024];
    long n = 0;
    *names = 0;
    while (f && fgets(line, sizeof line, f)) {
        n += !strncmp(line, prefix, strlen(prefix));
        *names += strstr(line, "\"thread_name\"") != NULL;
    }
    if (f)
        fclose(f);
    return n;
}

static void test_trace(void)
{
    char path[] = "/tmp/test_trace.XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    if (fd < 0)
        return;
    close(fd);
    EXPECT_EQ(dt_trace_active(), 0);
    EXPECT_EQ(dt_trace_begin(), 0); /* off: nothing is read */
    EXPECT_STATUS(dt_trace_start(path, 7, "host:7"), DT_OK);
    EXPECT_STATUS(dt_trace_start(path, 7, "host:7"), DT_ERR_INVALID); /* one at a time */
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, spanner, (void *)(intptr_t)i);
    while (__atomic_load_n(&started, __ATOMIC_ACQUIRE) < 4)
        ;
    EXPECT_STATUS(dt_trace_stop(), DT_OK); /* while they record */
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    long names, spans = count_lines(path, "{\"ph\":\"X\",\"pid\":7,", &names);
    EXPECT(spans >= 4 && spans <= 4 * SPANS);
    EXPECT_EQ(names, 4);
    EXPECT_STATUS(dt_trace_start(path, 7, "host:7"), DT_OK);
    int64_t t0 = dt_trace_begin();
    EXPECT(t0 != 0);
    dt_trace_end("user", "mine", t0, "\"k\":1");
    dt__trace_label_next("bucket 3");
    char label[48];
    EXPECT(dt__trace_label_take(label, sizeof label) && !strcmp(label, "bucket 3"));
    EXPECT(!dt__trace_label_take(label, sizeof label));
    EXPECT_STATUS(dt_trace_stop(), DT_OK);
    EXPECT_EQ(count_lines(path, "{\"ph\":\"X\"", &names), 1); /* the first trace's spans are not repeated */
    EXPECT_EQ(names, 1);
    FILE *f = fopen(path, "r");
    char line[1024] = "", last[1024] = "";
    while (f && fgets(line, sizeof line, f))
        memcpy(last, line, sizeof last);
    if (f)
        fclose(f);
    EXPECT(!strcmp(last, "],\"displayTimeUnit\":\"ms\"}\n"));
    unlink(path);
}

/* dt_read_file: the bytes (a NUL inside too), the size, the NUL after them;
 * a missing file and a directory refused naming the path, errno kept. */
static void test_read_file(void)
{
    char path[] = "/tmp/test_read_file.XXXXXX";
    int fd = mkstemp(path);
    EXPECT(fd >= 0);
    if (fd < 0)
        return;
    const char bytes[] = {'a', 0, 'b', '\n', 'c'};
    EXPECT_EQ(write(fd, bytes, sizeof bytes), (long long)sizeof bytes);
    close(fd);
    char *data = NULL;
    size_t size = 99;
    EXPECT_STATUS(dt_read_file(path, &data, &size), DT_OK);
    EXPECT_EQ(size, sizeof bytes);
    EXPECT(data && !memcmp(data, bytes, sizeof bytes) && data[sizeof bytes] == 0);
    free(data);
    EXPECT_STATUS(dt_read_file(path, &data, NULL), DT_OK); /* no size wanted */
    free(data);
    FILE *f = fopen(path, "w"); /* empty: "" */
    if (f)
        fclose(f);
    EXPECT_STATUS(dt_read_file(path, &data, &size), DT_OK);
    EXPECT(data && data[0] == 0 && size == 0);
    free(data);
    unlink(path);
    data = (char *)path;
    size = 99;
    errno = 0;
    EXPECT_STATUS(dt_read_file(path, &data, &size), DT_ERR_SYSTEM);
    EXPECT(data == NULL && size == 0 && errno == ENOENT);
    EXPECT(strstr(dt_last_error(), path) && strstr(dt_last_error(), strerror(ENOENT)));
    EXPECT_STATUS(dt_read_file("/tmp", &data, &size), DT_ERR_SYSTEM); /* a directory */
    EXPECT(data == NULL && strstr(dt_last_error(), "/tmp"));
    EXPECT_STATUS(dt_read_file(NULL, &data, &size), DT_ERR_INVALID);
}

int main(void)
{
    test_read_file();
    test_trace();
    test_names();
    test_f16();
    test_bf16();
    test_reduce();
    test_env();
    test_env_check();
    return CHECK_DONE("test_base");
}
