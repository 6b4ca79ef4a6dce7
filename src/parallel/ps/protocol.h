/* The parameter server's wire protocol (ps.h), shared by the servers
 * (server.c) and the workers (strategy.c).
 *
 * Every request is a header of 8 int64 on tag PS_TAG_REQ, followed, when
 * the header announces one, by its payload on PS_TAG_DATA; replies go back
 * the same way on PS_TAG_REP / PS_TAG_REPDATA.  Messages between two ranks
 * on one tag arrive in order, so a payload always follows its header.  A
 * server checks a header (op, clock, range, counts) before it receives the
 * payload into anything that matters, and answers a refused request with
 * PS_ERROR and the reason. */
#ifndef DT_PARALLEL_PS_PROTOCOL_H
#define DT_PARALLEL_PS_PROTOCOL_H

#include <stdint.h>
#include <string.h>

#include "dtrain/ps.h"

enum { PS_TAG_REQ = 201, PS_TAG_DATA = 202, PS_TAG_REP = 203, PS_TAG_REPDATA = 204, PS_TAG_ERR = 205 };

#define PS_MAGIC 0x70730000 /* "ps" in the op word's high half */

typedef enum {
    /* worker -> server */
    PS_HELLO = 1,    /* a = P, b = the layout's hash, c = tensors; payload: each tensor's length.
                      * Reply: PS_OK or PS_ERROR */
    PS_INIT,         /* worker 0: a = numel of the range, b = state buffers, c = optimizer steps; payload:
                      * the range's values, then each state buffer's range */
    PS_PUSH,         /* clock; a = offset (flat), b = count; payload: the gradients */
    PS_COMMIT,       /* clock; a = learning rate, b = clipping norm (double bits): the push of this step is
                      * complete (every element of the server's range pushed once) */
    PS_PULL,         /* clock.  Reply: PS_VALUES (a = norm bits, b = optimizer steps), payload the range */
    PS_SNAPSHOT,     /* worker 0: clock.  Reply: PS_STATE (a = state buffers, b = steps), payload the range's
                      * values then each state buffer's range */
    PS_BYE,
    PS_PUSH_ROWS,    /* clock; a = table, b = rows, c = learning rate (double bits); payload: the rows' ids (int64),
                      * then their gradients (rows x dim) */
    PS_PULL_ROWS,    /* clock; a = table, b = rows; payload: the ids.  Reply: PS_ROWS (a = table, b = rows), payload
                      * the rows' values */
    /* server -> worker */
    PS_OK,
    PS_VALUES,
    PS_STATE,
    PS_ERROR,        /* a = the reason's length in bytes; the reason follows on PS_TAG_ERR */
    PS_ROWS,
} ps_op;

typedef struct {
    int64_t op, clock, a, b, c, d, e, f;
} ps_header;

static inline ps_header ps_make(ps_op op, int64_t clock, int64_t a, int64_t b, int64_t c)
{
    ps_header h = {PS_MAGIC | op, clock, a, b, c, 0, 0, 0};
    return h;
}

static inline int ps_op_of(const ps_header *h)
{
    return (h->op & ~(int64_t)0xffff) == PS_MAGIC ? (int)(h->op & 0xffff) : -1;
}

static inline int64_t ps_bits(double x)
{
    int64_t b;
    memcpy(&b, &x, sizeof b);
    return b;
}

static inline double ps_double(int64_t b)
{
    double x;
    memcpy(&x, &b, sizeof x);
    return x;
}

#define PS_HEADER_WORDS 8

/* Row-sparse tables (nn.h: dt_param_set_row_sparse) are served by rows:
 * row i of a table lives on server i mod S, as that server's local row
 * i / S.  They must be the registry's first parameters (an embedding
 * table in the first block, whose rows the model's input names); the
 * dense parameters after them are cut into ranges.  The number of leading
 * tables, the flat offset where the dense part starts, or an error naming
 * a table that is not at the front. */
dt_status dt__ps_tables(dt_params *p, int *ntables, int64_t *dense_from);
/* The rows of a table of `rows` rows server k of S holds. */
static inline int64_t ps_rows_here(int64_t rows, int S, int k) { return rows > k ? (rows - k + S - 1) / S : 0; }
/* Server k's dense range [*lo, *lo + *n) of the flat buffer. */
void dt__ps_dense_range(int64_t P, int64_t dense_from, int S, int k, int64_t *lo, int64_t *n);

/* The layout's hash: every parameter's name and length, in order (FNV-1a). */
uint64_t dt__ps_layout_hash(dt_params *p);
/* The first parameter whose range holds flat element `at` (its name), for messages. */
const char *dt__ps_tensor_at(dt_params *p, int64_t at);

#endif
