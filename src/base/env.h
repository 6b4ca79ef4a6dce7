/* The registry of DT_* tunables: every environment variable dtrain reads is
 * declared once in env.c with its default and meaning (docs/environment.md
 * lists the same table; DT_DEBUG=info prints it at start-up). */
#ifndef DT_BASE_ENV_H
#define DT_BASE_ENV_H

#include <stdint.h>

#include "dtrain/base.h"

typedef struct {
    const char *name;
    const char *default_value; /* NULL: no default (required or optional) */
    const char *meaning;
} dt__tunable;

/* The table, terminated by an entry whose name is NULL. */
const dt__tunable *dt__tunables(void);

/* Raw value, NULL when unset or empty. */
const char *dt__env_str(const char *name);
/* Integer value in [min, max]; the registered default when unset.
 * A malformed or out-of-range value is DT_ERR_INVALID naming the variable. */
dt_status dt__env_int(const char *name, int64_t min, int64_t max, int64_t *out);
/* Parse a decimal integer in [min, max] from text (for env and CLI values). */
dt_status dt__parse_int(const char *text, int64_t min, int64_t max, int64_t *out);
/* Log every registered tunable and its effective value at info level. */
void dt__env_log_all(void);

#endif
