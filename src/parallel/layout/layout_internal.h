/* The layout's table of keys (layout.c), shared by the JSON reader and
 * writer (json.c) and the checks (check.c): one row per key drives set, get,
 * the defaults, JSON and the --set form. */
#ifndef DT_PARALLEL_LAYOUT_INTERNAL_H
#define DT_PARALLEL_LAYOUT_INTERNAL_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "dtrain/layout.h"
#include "dtrain/mesh.h"

typedef enum {
    DT__LK_INT,    /* int field; a JSON number, whole, in [min, max] */
    DT__LK_NUM,    /* double field; a JSON number in [min, max] */
    DT__LK_BOOL,   /* bool field; true or false */
    DT__LK_CHOICE, /* enum field (int-sized); one of `choices`, stored as values[i] */
    DT__LK_STR,    /* char[size] field; a string that `valid` accepts */
} dt__layout_kind;

typedef struct {
    const char *key;
    dt__layout_kind kind;
    size_t off, size;
    double min, max;
    const char *choices; /* DT__LK_CHOICE: comma-separated names */
    const int *values;   /* DT__LK_CHOICE: the enum value of each name, in order */
    const char *def;     /* the default, as JSON (as tools/dtrain/config.c writes them) */
    const char *help;
    /* DT__LK_STR: NULL when the text is fine, else what is accepted */
    const char *(*valid)(const char *text);
} dt__layout_key;

/* The mesh's dimensions, dp x pp x tp with tp innermost (a tensor-parallel
 * group on one host), then pp: dp's size 0 (what the workers leave), pp and
 * tp only when above 1.  Returns how many (1 to 3). */
int dt__layout_mesh_dims(const dt_layout *l, dt_mesh_dim dims[3]);

/* The table, in dt_layout_keys' order; *n gets its length. */
const dt__layout_key *dt__layout_table(size_t *n);
/* The row of `key`, NULL for a key that is not a layout key. */
const dt__layout_key *dt__layout_find(const char *key);
/* One key from a JSON value: checked (type, range, choices) and stored in
 * l only when good; DT_ERR_INVALID naming the key and the value. */
dt_status dt__layout_put(dt_layout *l, const dt__layout_key *k, const cJSON *v);
/* DT_ERR_INVALID: key is not a layout key, with the keys there are. */
dt_status dt__layout_unknown(const char *key);

#endif
