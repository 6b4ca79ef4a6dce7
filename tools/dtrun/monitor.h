/* dtrun --monitor internals: a growable text buffer, the ranks' records
 * (monitor_state.c) and the HTTP server (monitor.c). */
#ifndef DTRUN_MONITOR_H
#define DTRUN_MONITOR_H

#include <stdbool.h>
#include <stddef.h>

#include "dtrun.h"

typedef struct {
    char *p;
    size_t len, cap;
    bool failed; /* out of memory: the response becomes a 500 */
} mon_buf;

void mon_put(mon_buf *b, const char *s, size_t n);
void mon_printf(mon_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s as a JSON string (quotes included) / a Prometheus label value (without). */
void mon_json_str(mon_buf *b, const char *s);
void mon_label_str(mon_buf *b, const char *s);

/* The job's state as dtrun_monitor_note last set it. */
void mon_job_get(dtrun_mon_state *state, int *generation, char *why, size_t why_len);
extern const char *const mon_state_names[];

/* The records: read on the server thread only.  mon_state_refresh reads
 * whatever the ranks appended to DIR/rank<R>.jsonl since the last call. */
void mon_state_init(const char *dir);
void mon_state_refresh(void);
void mon_state_metrics(mon_buf *b);                  /* Prometheus text format 0.0.4 */
void mon_state_json(mon_buf *b, bool have_timeline); /* /api/state */
void mon_state_free(void);

#endif
