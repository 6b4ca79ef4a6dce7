/* The layout's keys (dtrain/layout.h): one table row per key, with the
 * trainer's name, type, range or choices, default and help text
 * (tools/dtrain/config.c's, so the trainer can take its layout keys from
 * here), drives the defaults, set, get and the --set form. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/status.h"
#include "parallel/layout/layout_internal.h"

/* Enum fields are read and written as int: the table relies on it. */
_Static_assert(sizeof(dt_ps_sync) == sizeof(int) && sizeof(dt_pipe_schedule) == sizeof(int) &&
                   sizeof(dt_recompute) == sizeof(int) && sizeof(dt_offload) == sizeof(int) &&
                   sizeof(dt_dtype) == sizeof(int),
               "layout enums are int-sized");

static const int sync_values[] = {DT_PS_BSP, DT_PS_ASP, DT_PS_SSP};
static const int schedule_values[] = {DT_PIPE_GPIPE, DT_PIPE_1F1B, DT_PIPE_INTERLEAVED};
static const int recompute_values[] = {DT_RECOMPUTE_OFF, DT_RECOMPUTE_BLOCKS, DT_RECOMPUTE_ALL};
static const int offload_values[] = {DT_OFFLOAD_NONE, DT_OFFLOAD_DISK};
static const int precision_values[] = {DT_F32, DT_BF16};
static const int wire_values[] = {DT_F32, DT_F16, DT_BF16, DT_GRAD_POWERSGD, DT_GRAD_TOPK};

/* dt_device_open's names: cpu, emu, cuda, cuda:N. */
static const char *device_valid(const char *s)
{
    if (!strcmp(s, "cpu") || !strcmp(s, "emu") || !strcmp(s, "cuda"))
        return NULL;
    if (!strncmp(s, "cuda:", 5) && s[5] && strspn(s + 5, "0123456789") == strlen(s + 5) && strlen(s + 5) <= 4)
        return NULL;
    return "must be cpu, cuda, cuda:N or emu";
}

#define F(field) offsetof(dt_layout, field), sizeof(((dt_layout *)0)->field)
#define INT(key, field, lo, hi, def, help) {key, DT__LK_INT, F(field), lo, hi, NULL, NULL, def, help, NULL}
#define CHOICE(key, field, list, values, def, help) {key, DT__LK_CHOICE, F(field), 0, 0, list, values, def, help, NULL}
static const dt__layout_key table[] = {
    INT("dp", dp, 0, 4096, "0", "data-parallel replicas: the world is servers + dp x pp x tp (0: what the world leaves, "
                                "(world - servers) / (pp x tp); given, it must be that)"),
    INT("tp", tp, 1, 4096, "1", "tensor-parallel ranks per group (gpt, mlp): the world is dp x tp with tp innermost, dp = world / tp"),
    INT("pp", pp, 1, 4096, "1", "pipeline stages: the model's blocks cut into pp stages balanced by their cost; the world is dp x pp x tp (tp innermost, then pp)"),
    INT("zero_stage", zero_stage, 0, 3, "0", "ZeRO over the data-parallel ranks: 0 off (each holds everything), 1 shards the optimizer state, 2 also the gradients, 3 also the parameters"),
    INT("servers", servers, 0, 4096, "0", "parameter server: the last `servers` ranks hold the parameters and the optimizer, the others work (0: data parallel by allreduce; dtrun --servers sets the default)"),
    CHOICE("sync", sync, "bsp,asp,ssp", sync_values, "\"bsp\"", "servers > 0: bsp (every worker's step before the next: equals allreduce), asp (no waiting), ssp (at most `staleness` steps ahead of the slowest worker)"),
    INT("staleness", staleness, 0, 1 << 20, "2", "sync ssp: how many steps a worker may run ahead of the slowest"),
    INT("micro_batches", micro_batches, 1, 1 << 16, "1", "pieces each rank's batch is cut into (they must divide batch_size); a pipeline fills its stages with them"),
    INT("grad_accumulation", grad_accumulation, 1, 1 << 16, "1", "batches per optimizer step (each cut into micro_batches)"),
    CHOICE("pipeline_schedule", schedule, "gpipe,1f1b,interleaved", schedule_values, "\"1f1b\"", "pp > 1: gpipe, 1f1b (at most pp micro-batches in flight) or interleaved (virtual_stages chunks per rank, a smaller bubble)"),
    INT("virtual_stages", virtual_stages, 2, 64, "2", "pipeline_schedule interleaved: chunks of blocks per pipeline rank"),
    {"sequence_parallel", DT__LK_BOOL, F(sequence_parallel), 0, 1, NULL, NULL, "false", "gpt with tp > 1: keep 1/tp of the positions between the split regions (allgather and reduce-scatter instead of allreduce; less activation memory)", NULL},
    INT("tp_copies", tp_copies, 1, DT_ARENA_COMPANIONS, "1", "gpt with tp > 1: run each transformer block's micro-batch as this many copies of its rows, taking turns, so that one copy's tensor-parallel exchanges travel while the next computes (1: off; at most the rows of a micro-batch; docs/parallelism.md, Multi-copy)"),
    CHOICE("recompute", recompute, "off,blocks,all", recompute_values, "\"off\"", "activation recomputation: off, blocks (each transformer block; every block of mlp/cnn), all"),
    CHOICE("offload", offload, "none,disk", offload_values, "\"none\"", "disk: keep the optimizer state (each rank's shard under ZeRO), and at zero_stage 3 the parameter shard, in files, streamed through an I/O thread while the update runs (bitwise the same results)"),
    CHOICE("precision", precision, "f32,bf16", precision_values, "\"f32\"", "matrix products: f32, or bf16 mixed precision (bf16 operands, f32 sums, f32 weights and optimizer state; AMX or AVX512_BF16 where the CPU has them, else emulated at f32 speed)"),
    /* The trainer's "auto" (bf16 when precision is bf16, else none) depends
     * on other keys: the trainer resolves it before setting this key. */
    CHOICE("grad_compression", grad_wire, "none,f16,bf16,powersgd,topk", wire_values, "\"none\"", "gradients on the wire (data parallel by allreduce): none (f32), f16, bf16, powersgd (rank-r factors of each matrix, error feedback) or topk (the largest topk_fraction of each bucket as index and value, error feedback)"),
    INT("powersgd_rank", powersgd_rank, 1, 1024, "4", "grad_compression powersgd: the rank r of the factors (r x (rows + cols) floats sent per matrix instead of rows x cols)"),
    INT("compress_start_step", compress_start_step, 0, 1 << 30, "10", "grad_compression powersgd or topk: optimizer steps sent uncompressed before compression starts (PyTorch's start_powerSGD_iter)"),
    {"topk_fraction", DT__LK_NUM, F(topk_fraction), 0, 1, NULL, NULL, "0.01", "grad_compression topk: the share of each bucket's gradients sent each step, in (0, 1] (the rest waits in the error feedback)", NULL},
    {"bucket_mb", DT__LK_NUM, F(bucket_mb), 0, 65536, NULL, NULL, "0", "MiB per gradient allreduce bucket (0: DT_BUCKET_MB, else min(25, gradients/8), at least 1)", NULL},
    {"device", DT__LK_STR, F(device), 0, 0, NULL, NULL, "\"cpu\"", "where the model trains: cpu, cuda (the GPU of DT_LOCAL_RANK, modulo the GPUs visible) or cuda:N; emu: a test device (the cpu kernels behind memory the host cannot touch, to test the device code paths without a GPU); DT_DEVICE sets the default (a build without CUDA refuses cuda)", device_valid},
};
#define NKEYS (sizeof table / sizeof table[0])

static const char *const key_names[] = {
    "dp", "tp", "pp", "zero_stage", "servers", "sync", "staleness", "micro_batches", "grad_accumulation",
    "pipeline_schedule", "virtual_stages", "sequence_parallel", "tp_copies", "recompute", "offload", "precision",
    "grad_compression", "powersgd_rank", "compress_start_step", "topk_fraction", "bucket_mb", "device", NULL,
};
_Static_assert(sizeof key_names / sizeof key_names[0] == NKEYS + 1, "key_names lists the table's keys");

const dt__layout_key *dt__layout_table(size_t *n)
{
    *n = NKEYS;
    return table;
}

const char *const *dt_layout_keys(void) { return key_names; }

const dt__layout_key *dt__layout_find(const char *key)
{
    for (size_t i = 0; key && i < NKEYS; i++)
        if (!strcmp(table[i].key, key))
            return &table[i];
    return NULL;
}

bool dt_layout_has_key(const char *key) { return dt__layout_find(key) != NULL; }

dt_status dt__layout_unknown(const char *key)
{
    char list[512];
    size_t n = 0;
    for (size_t i = 0; i < NKEYS && n < sizeof list; i++)
        n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", i ? ", " : "", table[i].key);
    return dt__fail(DT_ERR_INVALID, "key '%s' is not a layout key (the layout keys: %s)", key ? key : "(null)", list);
}

/* Index of name among the comma-separated choices, -1 when absent. */
static int choice_index(const char *choices, const char *name)
{
    size_t len = strlen(name);
    int i = 0;
    for (const char *c = choices; *c; i++) {
        size_t n = strcspn(c, ",");
        if (n == len && !strncmp(c, name, n))
            return i;
        c += n + (c[n] == ',');
    }
    return -1;
}

/* The name of choice i (into out), false when out of range. */
static bool choice_name(const char *choices, int i, char *out, size_t len)
{
    const char *c = choices;
    for (; i > 0 && *c; i--)
        c += strcspn(c, ",") + (c[strcspn(c, ",")] == ',');
    if (i < 0 || !*c)
        return false;
    snprintf(out, len, "%.*s", (int)strcspn(c, ","), c);
    return true;
}

dt_status dt__layout_put(dt_layout *l, const dt__layout_key *k, const cJSON *v)
{
    char *at = (char *)l + k->off, text[96];
    if (!cJSON_PrintPreallocated((cJSON *)v, text, sizeof text, 0))
        snprintf(text, sizeof text, "(a value of over %zu characters)", sizeof text);
    switch (k->kind) {
    case DT__LK_INT:
    case DT__LK_NUM: {
        const char *what = k->kind == DT__LK_INT ? "an integer" : "a number";
        if (!cJSON_IsNumber(v))
            return dt__fail(DT_ERR_INVALID, "key '%s' = %s must be %s in [%.17g, %.17g]", k->key, text, what, k->min,
                            k->max);
        double d = v->valuedouble;
        if (!(d >= k->min && d <= k->max)) /* before the integer test: its cast needs the range */
            return dt__fail(DT_ERR_INVALID, "key '%s' = %s is outside [%.17g, %.17g]", k->key, text, k->min, k->max);
        if (k->kind == DT__LK_INT && d != (double)(int)d)
            return dt__fail(DT_ERR_INVALID, "key '%s' = %s must be %s in [%.17g, %.17g]", k->key, text, what, k->min,
                            k->max);
        if (k->kind == DT__LK_INT)
            *(int *)at = (int)d;
        else
            *(double *)at = d;
        return DT_OK;
    }
    case DT__LK_BOOL:
        if (!cJSON_IsBool(v))
            return dt__fail(DT_ERR_INVALID, "key '%s' = %s must be true or false", k->key, text);
        *(bool *)at = cJSON_IsTrue(v);
        return DT_OK;
    case DT__LK_CHOICE: {
        int i = cJSON_IsString(v) ? choice_index(k->choices, v->valuestring) : -1;
        if (i < 0)
            return dt__fail(DT_ERR_INVALID, "key '%s' = %s is not one of %s", k->key, text, k->choices);
        *(int *)at = k->values[i];
        return DT_OK;
    }
    case DT__LK_STR: {
        if (!cJSON_IsString(v))
            return dt__fail(DT_ERR_INVALID, "key '%s' = %s must be a string", k->key, text);
        if (strlen(v->valuestring) >= k->size)
            return dt__fail(DT_ERR_INVALID, "key '%s' = %s is too long (at most %zu characters)", k->key, text,
                            k->size - 1);
        const char *why = k->valid ? k->valid(v->valuestring) : NULL;
        if (why)
            return dt__fail(DT_ERR_INVALID, "key '%s' = %s %s", k->key, text, why);
        memset(at, 0, k->size); /* the whole field: equal layouts are equal bytes */
        memcpy(at, v->valuestring, strlen(v->valuestring));
        return DT_OK;
    }
    }
    return dt__fail(DT_ERR_INTERNAL, "key '%s': kind %d", k->key, (int)k->kind);
}

void dt_layout_default(dt_layout *l)
{
    memset(l, 0, sizeof *l);
    for (size_t i = 0; i < NKEYS; i++) {
        cJSON *v = dt__json_parse(table[i].def);
        dt__layout_put(l, &table[i], v); /* the defaults are good: unit/layout checks each */
        cJSON_Delete(v);
    }
}

dt_status dt_layout_set(dt_layout *l, const char *key, const char *value)
{
    const dt__layout_key *k = dt__layout_find(key);
    if (!k)
        return dt__layout_unknown(key);
    if (!l || !value)
        return dt__fail(DT_ERR_INVALID, "key '%s': %s is NULL", key, l ? "the value" : "the layout");
    /* JSON as the trainer's --set reads it; a bare word is a string */
    cJSON *v = cJSON_ParseWithOpts(value, NULL, 1);
    if (!v || ((k->kind == DT__LK_STR || k->kind == DT__LK_CHOICE) && !cJSON_IsString(v))) {
        cJSON_Delete(v);
        v = cJSON_CreateString(value);
        if (!v)
            return dt__fail(DT_ERR_NOMEM, "out of memory");
    }
    dt_status s = dt__layout_put(l, k, v);
    cJSON_Delete(v);
    return s;
}

/* The --set text of k's value in l; false (with a text still) for a value
 * no --set gives: an enum outside its choices, a string without its end. */
static bool value_text(const dt_layout *l, const dt__layout_key *k, char *out, size_t len)
{
    const char *at = (const char *)l + k->off;
    switch (k->kind) {
    case DT__LK_INT: snprintf(out, len, "%d", *(const int *)at); return true;
    case DT__LK_NUM: {
        double d = *(const double *)at;
        snprintf(out, len, "%.15g", d);
        if (strtod(out, NULL) != d) /* the shortest text that reads back as d */
            snprintf(out, len, "%.17g", d);
        return isfinite(d);
    }
    case DT__LK_BOOL: snprintf(out, len, "%s", *(const bool *)at ? "true" : "false"); return true;
    case DT__LK_CHOICE: {
        int v = *(const int *)at;
        for (int i = 0; choice_name(k->choices, i, out, len); i++)
            if (k->values[i] == v)
                return true;
        snprintf(out, len, "%d", v);
        return false;
    }
    case DT__LK_STR: snprintf(out, len, "%.*s", (int)k->size, at); return memchr(at, 0, k->size) != NULL;
    }
    return false;
}

dt_status dt_layout_get(const dt_layout *l, const char *key, char *buf, size_t len)
{
    const dt__layout_key *k = dt__layout_find(key);
    if (!k)
        return dt__layout_unknown(key);
    char text[64];
    bool ok = value_text(l, k, text, sizeof text);
    if (!ok)
        return dt__fail(DT_ERR_INVALID, "key '%s' holds %s, which is not a value of it (%s%s)", key, text,
                        k->choices ? "one of " : "", k->choices ? k->choices : "see docs/layout.md");
    if (!buf || strlen(text) >= len)
        return dt__fail(DT_ERR_INVALID, "key '%s': a buffer of %zu bytes is too small for its value %s", key, len,
                        text);
    memcpy(buf, text, strlen(text) + 1);
    return DT_OK;
}

int dt_layout_to_sets(const dt_layout *l, char *buf, size_t len)
{
    dt_layout d;
    dt_layout_default(&d);
    size_t n = 0;
    if (buf && len)
        buf[0] = '\0';
    for (size_t i = 0; i < NKEYS; i++) {
        char now[64], def[64];
        value_text(l, &table[i], now, sizeof now);
        value_text(&d, &table[i], def, sizeof def);
        if (!strcmp(now, def))
            continue;
        bool room = buf && n < len;
        n += (size_t)snprintf(room ? buf + n : NULL, room ? len - n : 0, "%s%s=%s", n ? " " : "", table[i].key, now);
    }
    return (int)n;
}

int dt_layout_chunks(const dt_layout *l) { return l->schedule == DT_PIPE_INTERLEAVED ? l->virtual_stages : 1; }

int dt_layout_step_micro_batches(const dt_layout *l) { return l->micro_batches * l->grad_accumulation; }
