/* The timeline (docs/observability.md): spans of what each thread of a rank
 * did, written in the Chrome trace event format.
 *
 * Off (the default) a hook costs one load of a flag and a predicted branch:
 *
 *     int64_t t0 = dt__trace_begin();           // 0 when off
 *     ... work ...
 *     if (t0) dt__trace_end("block", "forward", t0, "\"block\":%d", i);
 *
 * On, each thread appends fixed-size events to a buffer of its own (no lock:
 * a chunk list whose count is published with a release store), and
 * dt_trace_stop (or the process's exit) writes every thread's events to one
 * file.  Timestamps are CLOCK_MONOTONIC shifted once to CLOCK_REALTIME, so
 * the files of the ranks of one host (and of NTP-synchronised hosts) line up
 * when dtrun merges them. */
#ifndef DT_BASE_TRACE_H
#define DT_BASE_TRACE_H

#include <stdbool.h>
#include <stdint.h>

#include "dtrain/base.h"

extern int dt__trace_on; /* read relaxed; written by dt_trace_start/stop */

static inline bool dt__tracing(void) { return __builtin_expect(__atomic_load_n(&dt__trace_on, __ATOMIC_RELAXED), 0); }

/* Monotonic nanoseconds when tracing, else 0 (nothing else is read). */
int64_t dt__trace_now(void);
static inline int64_t dt__trace_begin(void) { return dt__tracing() ? dt__trace_now() : 0; }

/* A complete span ("ph":"X") from t0 to now on this thread's track.  cat and
 * name are copied (cut at 15 and 47 characters); args_fmt (may be NULL) is
 * printf text for the members of "args", e.g. "\"bytes\":%zu". */
void dt__trace_end(const char *cat, const char *name, int64_t t0, const char *args_fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* The same from t0 to t1 (both dt__trace_now times). */
void dt__trace_span(const char *cat, const char *name, int64_t t0, int64_t t1, const char *args_fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* An asynchronous span ("ph":"b"/"e", its own track in the viewer): for
 * intervals that overlap others on one thread, e.g. a gradient bucket from
 * its issue to its completion.  Recorded once, at the end. */
void dt__trace_async(const char *cat, const char *name, int64_t t0, int64_t t1, const char *args_fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* This thread's track name ("main", "comm 1 progress"); any time, on or off. */
void dt__trace_thread_name(const char *name);

/* A label for the next nonblocking collective this thread starts: the
 * progress thread records that call as an asynchronous span from its issue
 * to its completion under this name (DDP's buckets).  take: the label set on
 * this thread, if any, cleared. */
void dt__trace_label_next(const char *name);
bool dt__trace_label_take(char *buf, size_t len);

/* DT_TIMELINE set: start tracing into "<DT_TIMELINE>.rank<rank>.json", the
 * process named "<host>:<rank>" (dt_comm_init_env calls it); else nothing. */
dt_status dt__trace_from_env(int rank);

#endif
