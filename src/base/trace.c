#include "base/trace.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/env.h"
#include "base/status.h"

/* 192 bytes an event, 1024 events a chunk: a gpt-mini step of 2 ranks
 * records about 60 events per thread, so a chunk lasts ~15 steps and a
 * 10,000-step run takes ~130 MB.  Past MAX_EVENTS a thread drops events
 * and the file says how many. */
#define CHUNK 1024
#define MAX_EVENTS (1 << 20)

enum { EV_SPAN, EV_ASYNC };

typedef struct {
    int64_t t0, t1; /* monotonic ns */
    uint8_t kind;
    char cat[16];
    char name[48];
    char args[112];
} event;

typedef struct chunk {
    event ev[CHUNK];
    struct chunk *_Atomic next;
} chunk;

typedef struct tbuf {
    struct tbuf *next_buf; /* the global list (mu) */
    chunk *head, *tail;    /* tail: the owner's */
    _Atomic int64_t n;     /* events published (release) */
    int64_t written;       /* events before this trace (mu) */
    _Atomic int64_t dropped;
    long tid;
    char name[48];  /* guarded by mu */
    char named[48]; /* the name the file has for it (mu) */
} tbuf;

int dt__trace_on;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static tbuf *buffers;                   /* every thread that recorded, ever (mu) */
static char path_now[4096], proc_name[256]; /* mu */
static int proc_pid;
static int64_t realtime_offset_ns;      /* realtime - monotonic, at start */
static uint64_t async_ids;              /* mu */
static _Thread_local tbuf *mine;
static _Thread_local char my_name[48];
static _Thread_local char label_next[48];
static bool exit_hooked;
static FILE *out; /* the open timeline (mu) */

int64_t dt__trace_now(void) { return dt__now_ns(); }

static long this_tid(void) { return (long)syscall(SYS_gettid); }

static tbuf *register_thread(void)
{
    tbuf *b = calloc(1, sizeof *b);
    if (!b || !(b->head = calloc(1, sizeof *b->head))) {
        free(b);
        return NULL;
    }
    b->tail = b->head;
    b->tid = this_tid();
    pthread_mutex_lock(&mu);
    if (my_name[0])
        snprintf(b->name, sizeof b->name, "%s", my_name);
    else if (b->tid == (long)getpid())
        snprintf(b->name, sizeof b->name, "main");
    else
        snprintf(b->name, sizeof b->name, "thread %ld", b->tid);
    b->next_buf = buffers;
    buffers = b;
    pthread_mutex_unlock(&mu);
    return b;
}

/* The next free event of this thread's buffer, or NULL (out of memory, or
 * over MAX_EVENTS).  Published by commit(). */
static event *slot(void)
{
    if (!mine && !(mine = register_thread()))
        return NULL;
    int64_t n = atomic_load_explicit(&mine->n, memory_order_relaxed);
    if (n >= MAX_EVENTS) {
        atomic_fetch_add_explicit(&mine->dropped, 1, memory_order_relaxed);
        return NULL;
    }
    if (n > 0 && n % CHUNK == 0) {
        chunk *c = calloc(1, sizeof *c);
        if (!c) {
            atomic_fetch_add_explicit(&mine->dropped, 1, memory_order_relaxed);
            return NULL;
        }
        atomic_store_explicit(&mine->tail->next, c, memory_order_release);
        mine->tail = c;
    }
    return &mine->tail->ev[n % CHUNK];
}

static void commit(void) { atomic_fetch_add_explicit(&mine->n, 1, memory_order_release); }

static void flush_locked(void);

static void record(int kind, const char *cat, const char *name, int64_t t0, int64_t t1, const char *fmt, va_list ap)
{
    event *e = slot();
    if (!e)
        return;
    e->kind = (uint8_t)kind;
    e->t0 = t0;
    e->t1 = t1;
    snprintf(e->cat, sizeof e->cat, "%s", cat);
    snprintf(e->name, sizeof e->name, "%s", name);
    e->args[0] = '\0';
    if (fmt)
        vsnprintf(e->args, sizeof e->args, fmt, ap);
    commit();
    /* A chunk filled: write what every thread recorded, unless another
     * thread is writing (never wait here), so that a rank that is killed
     * leaves all but its last chunk of events. */
    if (atomic_load_explicit(&mine->n, memory_order_relaxed) % CHUNK == 0 && pthread_mutex_trylock(&mu) == 0) {
        if (out)
            flush_locked();
        pthread_mutex_unlock(&mu);
    }
}

void dt__trace_end(const char *cat, const char *name, int64_t t0, const char *args_fmt, ...)
{
    if (!dt__tracing() || !t0)
        return;
    va_list ap;
    va_start(ap, args_fmt);
    record(EV_SPAN, cat, name, t0, dt__trace_now(), args_fmt, ap);
    va_end(ap);
}

void dt__trace_span(const char *cat, const char *name, int64_t t0, int64_t t1, const char *args_fmt, ...)
{
    if (!dt__tracing() || !t0)
        return;
    va_list ap;
    va_start(ap, args_fmt);
    record(EV_SPAN, cat, name, t0, t1, args_fmt, ap);
    va_end(ap);
}

void dt__trace_async(const char *cat, const char *name, int64_t t0, int64_t t1, const char *args_fmt, ...)
{
    if (!dt__tracing() || !t0)
        return;
    va_list ap;
    va_start(ap, args_fmt);
    record(EV_ASYNC, cat, name, t0, t1, args_fmt, ap);
    va_end(ap);
}

void dt__trace_thread_name(const char *name)
{
    snprintf(my_name, sizeof my_name, "%s", name);
    if (mine) {
        pthread_mutex_lock(&mu);
        snprintf(mine->name, sizeof mine->name, "%s", name);
        pthread_mutex_unlock(&mu);
    }
}

void dt__trace_label_next(const char *name) { snprintf(label_next, sizeof label_next, "%s", name); }

bool dt__trace_label_take(char *buf, size_t len)
{
    if (!label_next[0])
        return false;
    snprintf(buf, len, "%s", label_next);
    label_next[0] = '\0';
    return true;
}

/* JSON string body: quotes, backslashes and control characters escaped. */
static void put_str(FILE *f, const char *s)
{
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
}

static void put_ts(FILE *f, const char *key, int64_t ns)
{
    fprintf(f, "\"%s\":%lld.%03lld", key, (long long)(ns / 1000), (long long)(ns % 1000));
}

static void put_event(FILE *f, const tbuf *b, const event *e)
{
    int64_t t0 = e->t0 + realtime_offset_ns, t1 = e->t1 + realtime_offset_ns;
    if (e->kind == EV_SPAN) {
        fprintf(f, "{\"ph\":\"X\",\"pid\":%d,\"tid\":%ld,", proc_pid, b->tid);
        put_ts(f, "ts", t0);
        fputc(',', f);
        put_ts(f, "dur", t1 > t0 ? t1 - t0 : 0);
        fprintf(f, ",\"cat\":\"");
    } else {
        uint64_t id = ((uint64_t)(uint32_t)proc_pid << 32) | ++async_ids; /* unique across merged ranks */
        for (int end = 0; end < 2; end++) {
            fprintf(f, "{\"ph\":\"%c\",\"pid\":%d,\"tid\":%ld,\"id\":\"0x%llx\",", end ? 'e' : 'b', proc_pid, b->tid,
                    (unsigned long long)id);
            put_ts(f, "ts", end ? t1 : t0);
            fprintf(f, ",\"cat\":\"");
            put_str(f, e->cat);
            fprintf(f, "\",\"name\":\"");
            put_str(f, e->name);
            fprintf(f, "\",\"args\":{%s}}", end ? "" : e->args);
            fputs(end ? ",\n" : ",\n", f);
        }
        return;
    }
    put_str(f, e->cat);
    fprintf(f, "\",\"name\":\"");
    put_str(f, e->name);
    fprintf(f, "\",\"args\":{%s}},\n", e->args);
}

/* The file: a header line, the process's names, then one line an event
 * (each ending with a comma), written as chunks fill and at the stop, and
 * a footer line at the stop: valid JSON once stopped, and dtrun merges the
 * ranks' files by taking the lines that start with {"ph", so a file cut
 * short by a killed rank still gives its events but the last few. */
static void flush_locked(void)
{
    for (tbuf *b = buffers; b; b = b->next_buf) {
        int64_t n = atomic_load_explicit(&b->n, memory_order_acquire);
        if (n <= b->written)
            continue;
        if (strcmp(b->named, b->name)) {
            fprintf(out, "{\"ph\":\"M\",\"pid\":%d,\"tid\":%ld,\"name\":\"thread_name\",\"args\":{\"name\":\"",
                    proc_pid, b->tid);
            put_str(out, b->name);
            fprintf(out, "\"}},\n");
            memcpy(b->named, b->name, sizeof b->named);
        }
        chunk *c = b->head;
        for (int64_t i = 0; i < n && c; i++) {
            if (i > 0 && i % CHUNK == 0)
                c = atomic_load_explicit(&c->next, memory_order_acquire);
            if (c && i >= b->written)
                put_event(out, b, &c->ev[i % CHUNK]);
        }
        b->written = n;
    }
    fflush(out);
}

static dt_status close_file(void)
{
    flush_locked();
    int64_t dropped = 0;
    for (tbuf *b = buffers; b; b = b->next_buf)
        dropped += atomic_load_explicit(&b->dropped, memory_order_relaxed);
    fprintf(out, "{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"dtrain_trace_end\",\"args\":{\"dropped_events\":%lld}}\n",
            proc_pid, (long long)dropped);
    fprintf(out, "],\"displayTimeUnit\":\"ms\"}\n");
    bool bad = ferror(out) != 0;
    int closed = fclose(out);
    out = NULL;
    if (closed != 0 || bad)
        return dt__fail_errno(DT_ERR_SYSTEM, "timeline: cannot write %s", path_now);
    return DT_OK;
}

static void stop_at_exit(void) { dt_trace_stop(); }

dt_status dt_trace_start(const char *path, int pid, const char *process_name)
{
    if (!path || !path[0])
        return dt__fail(DT_ERR_INVALID, "dt_trace_start: no file named");
    if (strlen(path) >= sizeof path_now)
        return dt__fail(DT_ERR_INVALID, "dt_trace_start: file name too long");
    pthread_mutex_lock(&mu);
    if (dt__tracing()) {
        pthread_mutex_unlock(&mu);
        return dt__fail(DT_ERR_INVALID, "dt_trace_start: a timeline is already being written to %s", path_now);
    }
    out = fopen(path, "w");
    if (!out) {
        pthread_mutex_unlock(&mu);
        return dt__fail_errno(DT_ERR_SYSTEM, "dt_trace_start: cannot write %s", path);
    }
    snprintf(path_now, sizeof path_now, "%s", path);
    snprintf(proc_name, sizeof proc_name, "%s", process_name ? process_name : "dtrain");
    proc_pid = pid;
    for (tbuf *b = buffers; b; b = b->next_buf) { /* events of an earlier trace stay out */
        b->written = atomic_load_explicit(&b->n, memory_order_acquire);
        b->named[0] = '\0';
    }
    fprintf(out, "{\"traceEvents\":[\n");
    fprintf(out, "{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_name\",\"args\":{\"name\":\"", proc_pid);
    put_str(out, proc_name);
    fprintf(out, "\"}},\n{\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"name\":\"process_sort_index\",\"args\":{\"sort_index\":%d}},\n",
            proc_pid, proc_pid);
    fflush(out);
    struct timespec rt, mo;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_MONOTONIC, &mo);
    realtime_offset_ns = ((int64_t)rt.tv_sec - (int64_t)mo.tv_sec) * 1000000000LL + (rt.tv_nsec - mo.tv_nsec);
    if (!exit_hooked)
        exit_hooked = atexit(stop_at_exit) == 0;
    __atomic_store_n(&dt__trace_on, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mu);
    return DT_OK;
}

dt_status dt_trace_stop(void)
{
    pthread_mutex_lock(&mu);
    if (!dt__tracing()) {
        pthread_mutex_unlock(&mu);
        return DT_OK;
    }
    __atomic_store_n(&dt__trace_on, 0, __ATOMIC_RELEASE);
    dt_status s = close_file();
    pthread_mutex_unlock(&mu);
    return s;
}

int dt_trace_active(void) { return dt__tracing() ? 1 : 0; }

int64_t dt_trace_begin(void) { return dt__trace_begin(); }

void dt_trace_end(const char *category, const char *name, int64_t t0, const char *args_json)
{
    if (t0)
        dt__trace_end(category ? category : "user", name ? name : "span", t0, args_json ? "%s" : NULL, args_json);
}

dt_status dt__trace_from_env(int rank)
{
    const char *base = dt__env_str("DT_TIMELINE");
    if (!base || !base[0] || dt__tracing())
        return DT_OK;
    char path[4096], host[256] = "?", name[300];
    snprintf(path, sizeof path, "%s.rank%d.json", base, rank);
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    snprintf(name, sizeof name, "%s:%d", host, rank);
    return dt_trace_start(path, rank, name);
}
