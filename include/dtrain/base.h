/* dtrain base layer: status codes, error text, data types and reduction ops.
 *
 * Every call in libdtrain that can fail returns a dt_status: DT_OK (0) on
 * success or a negative code.  The human-readable detail of the last failure
 * on the calling thread is available from dt_last_error().  The library never
 * exits or aborts the process on bad input and never prints on success. */
#ifndef DTRAIN_BASE_H
#define DTRAIN_BASE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DT_OK = 0,
    DT_ERR_INVALID = -1,  /* bad argument, config or environment */
    DT_ERR_NOMEM = -2,    /* allocation failed */
    DT_ERR_SYSTEM = -3,   /* a system call failed (errno text in the message) */
    DT_ERR_TIMEOUT = -4,  /* a deadline (DT_TIMEOUT) passed */
    DT_ERR_PEER = -5,     /* a peer died, disconnected or sent malformed bytes */
    DT_ERR_AUTH = -6,     /* job token check failed */
    DT_ERR_PROTOCOL = -7, /* malformed message */
    DT_ERR_TRUNCATE = -8, /* incoming message larger than the receive buffer */
    DT_ERR_ABORTED = -9,  /* the communicator was aborted (locally or by a peer) */
    DT_ERR_INTERNAL = -10
} dt_status;

/* Timeline (docs/observability.md): record spans of every thread of this
 * process (data wait, each block's forward/backward/recompute, collectives
 * with communicator, algorithm and bytes, DDP buckets, pipeline transfers,
 * optimizer steps, checkpoint writes) and write them to `path` in the Chrome
 * trace event format (opens in Perfetto or chrome://tracing) at
 * dt_trace_stop or at the process's exit.  `pid` and `process_name` name the
 * process in the viewer (dtrun --timeline uses the rank and "host:rank").
 * Refused while a trace is running.  Off, the hooks cost one predicted
 * branch each. */
dt_status dt_trace_start(const char *path, int pid, const char *process_name);
/* Write the file and stop recording; DT_OK when no trace was running. */
dt_status dt_trace_stop(void);
/* 1 while a trace records. */
int dt_trace_active(void);
/* Your own spans on the calling thread's track: t0 = dt_trace_begin() (0
 * when no trace records: then dt_trace_end does nothing), the work, then
 * dt_trace_end(category, name, t0, args) with args NULL or the members of a
 * JSON object ("\"step\":3").  Names are cut at 47 characters. */
int64_t dt_trace_begin(void);
void dt_trace_end(const char *category, const char *name, int64_t t0, const char *args_json);

/* The whole file at `path` in memory, with a NUL after its last byte (a text
 * file reads as a C string): *out (the caller frees it) and, when size is
 * not NULL, *size its length in bytes.  DT_ERR_SYSTEM naming the path and
 * errno's text when it cannot be opened, is a directory, cannot be sized
 * (a pipe) or read, DT_ERR_NOMEM when it does not fit; errno stays set for the caller,
 * and *out is NULL. */
dt_status dt_read_file(const char *path, char **out, size_t *size);

/* Restart phases (DT_RESTART_TRACE=FILE; docs/fault-tolerance.md "Timing a
 * restart"): appends one line "<unix time, microseconds> <text>" to FILE in
 * one write (O_APPEND: the lines of every process of a host interleave
 * whole), so the phases of a restart can be timed across dtrun and the
 * ranks (bench/snapshots/restart_phases.py sums them).  Nothing, and no
 * system call, when the variable is unset.  Errors are ignored. */
void dt_phase_mark(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Short constant name of a status code ("DT_ERR_PEER"). */
const char *dt_status_name(dt_status s);

/* Detail of the last failure on this thread ("" when none). */
const char *dt_last_error(void);

/* Check the DT_* variables a program reads at start-up before it relies on
 * them: DT_DEBUG's words, DT_THREADS, DT_RESTART, DT_LOCAL_WORLD_SIZE.
 * DT_ERR_INVALID naming the variable, its value and what is accepted.  Tools
 * call it first and exit 2 on failure; dt_comm_init_env calls it too, so a
 * program joining a job refuses a bad value before relying on it. */
dt_status dt_env_check(void);

typedef enum {
    DT_F32 = 0,
    DT_F64,
    DT_F16,
    DT_BF16,
    DT_I32,
    DT_I64,
    DT_U8,
    DT_DTYPE_COUNT
} dt_dtype;

typedef enum { DT_SUM = 0, DT_PROD, DT_MIN, DT_MAX, DT_AVG, DT_REDOP_COUNT } dt_redop;

/* Size in bytes of one element; 0 for an invalid dtype. */
size_t dt_dtype_size(dt_dtype t);
/* "f32", "bf16", ...; NULL for an invalid value. */
const char *dt_dtype_name(dt_dtype t);
const char *dt_redop_name(dt_redop op);
/* Parse a name back; DT_ERR_INVALID when unknown. */
dt_status dt_dtype_parse(const char *name, dt_dtype *out);
dt_status dt_redop_parse(const char *name, dt_redop *out);

/* IEEE binary16 and bfloat16 conversions (round to nearest even). */
uint16_t dt_f32_to_f16(float f);
float dt_f16_to_f32(uint16_t h);
uint16_t dt_f32_to_bf16(float f);
float dt_bf16_to_f32(uint16_t b);

/* Seeded random numbers (xoshiro256**): the same seed gives the same stream
 * on every machine; the state is plain data, so checkpoints can save it. */
typedef struct {
    uint64_t s[4];
} dt_rng;
void dt_rng_seed(dt_rng *r, uint64_t seed);
uint64_t dt_rng_next(dt_rng *r);
/* Uniform in [0, 1). */
float dt_rng_uniform(dt_rng *r);
/* Standard normal (Box-Muller). */
float dt_rng_normal(dt_rng *r);

/* Keyed (counter-based) random numbers, for everything that a re-run must
 * reproduce: the bits for element i of stream `id` under a key are a pure
 * function of (seed, step, micro, group, id, i), not of what was drawn before.
 * A recomputed forward therefore draws the same dropout masks, a resumed run
 * the same as the uninterrupted one, and ranks that must agree (tensor
 * parallel) or differ (data parallel) choose so through `group`. */
typedef struct {
    uint64_t seed;
    uint64_t step;  /* optimizer step */
    uint32_t micro; /* micro-batch within the step */
    uint32_t group; /* caller's split: data-parallel rank, tensor-parallel rank, ... */
} dt_rng_key;
/* The start of stream `id` (a layer's hash, say) under key k. */
uint64_t dt_rng_key_stream(const dt_rng_key *k, uint64_t id);
/* 64 random bits for element `index` of a stream. */
uint64_t dt_rng_key_bits(uint64_t stream, uint64_t index);
/* Uniform in [0, 1) with 24 bits, from dt_rng_key_bits. */
float dt_rng_key_uniform(uint64_t stream, uint64_t index);

#ifdef __cplusplus
}
#endif
#endif
