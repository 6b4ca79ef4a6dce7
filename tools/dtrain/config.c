/* The trainer's configuration: every key declared once, with its type, range
 * and meaning; unknown keys and out-of-range values are errors naming the key. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_whole.h"
#include "dtrain_cli.h"

typedef enum { K_INT, K_NUM, K_STR, K_BOOL, K_INTLIST } ktype;

typedef struct {
    const char *key;
    ktype type;
    size_t off, size;
    double min, max;
    const char *choices; /* K_STR: comma-separated allowed values, NULL = any */
    const char *def;     /* default, as JSON */
    const char *help;
} spec;

#define F(field) offsetof(dtrain_config, field), sizeof(((dtrain_config *)0)->field)
static const spec specs[] = {
    {"model", K_STR, F(model), 0, 0, "mlp,cnn,gpt,textclf", "\"mlp\"", "model family: mlp, cnn, gpt or textclf (fastText-style text classifier)"},
    {"mlp_sizes", K_INTLIST, F(mlp_sizes), 1, 1 << 20, NULL, "[784, 256, 256, 10]", "mlp layer widths, input first"},
    {"conv1_channels", K_INT, F(conv1_channels), 1, 4096, NULL, "32", "cnn: channels of the first 5x5 conv"},
    {"conv2_channels", K_INT, F(conv2_channels), 1, 4096, NULL, "64", "cnn: channels of the second 5x5 conv"},
    {"vocab", K_INT, F(vocab), 2, 1 << 20, NULL, "256", "gpt vocabulary (256 for bytes)"},
    {"context", K_INT, F(context), 1, 1 << 16, NULL, "128", "gpt context length"},
    {"layers", K_INT, F(layers), 1, 256, NULL, "4", "gpt transformer blocks"},
    {"heads", K_INT, F(heads), 1, 256, NULL, "4", "gpt attention heads (must divide dim)"},
    {"dim", K_INT, F(dim), 1, 1 << 16, NULL, "256", "gpt model width; textclf embedding width"},
    {"buckets", K_INT, F(buckets), 1, 1 << 24, NULL, "1048576", "textclf: rows of the hashed feature table (word unigrams and bigrams, FNV-1a mod buckets)"},
    {"classes", K_INT, F(classes), 2, 1 << 20, NULL, "43", "textclf: classes (the fortunes data: its category files, 43 in Debian's package)"},
    {"max_features", K_INT, F(max_features), 1, 1 << 16, NULL, "256", "textclf: features per example (unigrams and bigrams in text order; the rest cut)"},
    {"dropout", K_NUM, F(dropout), 0, 0.99, NULL, "0", "dropout probability"},
    {"data", K_STR, F(data), 0, 0, "fashion-mnist,text,fortunes", "\"fashion-mnist\"", "dataset: fashion-mnist (mlp, cnn), text (gpt) or fortunes (textclf: each fortune labelled with its file)"},
    {"data_path", K_STR, F(data_path), 0, 0, NULL, "\"\"", "dataset directory or file (default: the Debian package's)"},
    {"batch_size", K_INT, F(batch_size), 1, 1 << 20, NULL, "128", "samples per micro-batch on each rank"},
    {"steps", K_INT, F(steps), 1, 1LL << 40, NULL, "1000", "optimizer steps to train"},
    {"seed", K_INT, F(seed), 0, 1LL << 62, NULL, "1", "seed of weights, shuffling and dropout"},
    {"threads", K_INT, F(threads), 0, 256, NULL, "0", "compute threads (0: the cores available)"},
    {"layout", K_STR, F(layout), 0, 0, "manual,auto", "\"manual\"", "manual: the layout keys as given; auto: dtrain plan's best layout for the job's ranks replaces tp, pp, zero_stage, micro_batches, pipeline_schedule, virtual_stages, sequence_parallel, tp_copies and recompute (profiled on rank 0, cached; docs/planner.md)"},
    {"tp", K_INT, F(tp), 1, 4096, NULL, "1", "tensor-parallel ranks per group (gpt, mlp): the world is dp x tp with tp innermost, dp = world / tp"},
    {"sequence_parallel", K_BOOL, F(sequence_parallel), 0, 1, NULL, "false", "gpt with tp > 1: keep 1/tp of the positions between the split regions (allgather and reduce-scatter instead of allreduce; less activation memory)"},
    {"tp_copies", K_INT, F(tp_copies), 1, 64, NULL, "1", "gpt with tp > 1: run each transformer block's micro-batch as this many copies of its rows, taking turns, so that one copy's tensor-parallel exchanges travel while the next computes (1: off; at most the rows of a micro-batch; docs/parallelism.md, Multi-copy)"},
    {"pp", K_INT, F(pp), 1, 4096, NULL, "1", "pipeline stages: the model's blocks cut into pp stages balanced by their cost; the world is dp x pp x tp (tp innermost, then pp)"},
    {"pipeline_schedule", K_STR, F(pipeline_schedule), 0, 0, "gpipe,1f1b,interleaved", "\"1f1b\"", "pp > 1: gpipe, 1f1b (at most pp micro-batches in flight) or interleaved (virtual_stages chunks per rank, a smaller bubble)"},
    {"virtual_stages", K_INT, F(virtual_stages), 2, 64, NULL, "2", "pipeline_schedule interleaved: chunks of blocks per pipeline rank"},
    {"zero_stage", K_INT, F(zero_stage), 0, 3, NULL, "0", "ZeRO over the data-parallel ranks: 0 off (each holds everything), 1 shards the optimizer state, 2 also the gradients, 3 also the parameters (with tp or pp: 1 or 2, over each stage's shards; docs/zero.md)"},
    {"memory_limit", K_STR, F(memory_limit), 0, 0, NULL, "\"\"", "model-state memory allowed per rank, e.g. \"2GiB\" (empty: this process's share of its cgroup's limit, if any); a zero_stage that needs more is refused, naming the stage that fits"},
    {"offload", K_STR, F(offload), 0, 0, "none,disk", "\"none\"", "disk: keep the optimizer state (each rank's shard under ZeRO), and at zero_stage 3 the parameter shard, in files, streamed through an I/O thread while the update runs (bitwise the same results)"},
    {"offload_dir", K_STR, F(offload_dir), 0, 0, NULL, "\"\"", "offload=disk: where the file goes (local disk; empty: /var/tmp); it is removed as it is opened"},
    {"servers", K_INT, F(servers), 0, 4096, NULL, "0", "parameter server: the last `servers` ranks hold the parameters and the optimizer, the others work (0: data parallel by allreduce; dtrun --servers sets the default)"},
    {"sync", K_STR, F(sync), 0, 0, "bsp,asp,ssp", "\"bsp\"", "servers > 0: bsp (every worker's step before the next: equals allreduce), asp (no waiting), ssp (at most `staleness` steps ahead of the slowest worker)"},
    {"staleness", K_INT, F(staleness), 0, 1 << 20, NULL, "2", "sync ssp: how many steps a worker may run ahead of the slowest"},
    {"ps_clock_log", K_STR, F(ps_clock_log), 0, 0, NULL, "\"\"", "servers > 0: a file the servers append each answered pull to (worker, step, the slowest worker's step, the wait)"},
    {"straggler_rank", K_INT, F(straggler_rank), -1, 1 << 20, NULL, "-1", "benchmarks: this rank sleeps a random 0..straggler_ms each step (-1: none)"},
    {"straggler_ms", K_NUM, F(straggler_ms), 0, 1e6, NULL, "0", "straggler_rank's largest sleep per step, milliseconds"},
    {"straggler_prob", K_NUM, F(straggler_prob), 0, 1, NULL, "1", "the share of steps straggler_rank sleeps in (each a random 0..straggler_ms): 1 a steady straggler, less a bursty one"},
    {"micro_batches", K_INT, F(micro_batches), 1, 1 << 16, NULL, "1", "pieces each rank's batch is cut into (they must divide batch_size); a pipeline fills its stages with them"},
    {"grad_accumulation", K_INT, F(grad_accumulation), 1, 1 << 16, NULL, "1", "batches per optimizer step (each cut into micro_batches)"},
    {"grad_compression", K_STR, F(grad_compression), 0, 0, "auto,none,f16,bf16,powersgd,topk", "\"auto\"", "gradients on the wire (data parallel by allreduce): none (f32), f16, bf16, powersgd (rank-r factors of each matrix, error feedback) or topk (the largest topk_fraction of each bucket as index and value, error feedback); auto: bf16 when precision is bf16, else none"},
    {"powersgd_rank", K_INT, F(powersgd_rank), 1, 1024, NULL, "4", "grad_compression powersgd: the rank r of the factors (r x (rows + cols) floats sent per matrix instead of rows x cols)"},
    {"compress_start_step", K_INT, F(compress_start_step), 0, 1 << 30, NULL, "10", "grad_compression powersgd or topk: optimizer steps sent uncompressed before compression starts (PyTorch's start_powerSGD_iter)"},
    {"topk_fraction", K_NUM, F(topk_fraction), 0, 1, NULL, "0.01", "grad_compression topk: the share of each bucket's gradients sent each step, in (0, 1] (the rest waits in the error feedback)"},
    {"device", K_STR, F(device), 0, 0, NULL, "\"cpu\"", "where the model trains: cpu, cuda (the GPU of DT_LOCAL_RANK, modulo the GPUs visible) or cuda:N; emu: a test device (the cpu kernels behind memory the host cannot touch, to test the device code paths without a GPU); DT_DEVICE sets the default (a build without CUDA refuses cuda)"},
    {"tf32", K_BOOL, F(tf32), 0, 1, NULL, "false", "device cuda: f32 matrix products may use TF32 tensor cores (10-bit mantissa; off: full f32, results within f32 rounding of the cpu)"},
    {"precision", K_STR, F(precision), 0, 0, "f32,bf16", "\"f32\"", "matrix products: f32, or bf16 mixed precision (bf16 operands, f32 sums, f32 weights and optimizer state; AMX or AVX512_BF16 where the CPU has them, else emulated at f32 speed)"},
    {"bucket_mb", K_NUM, F(bucket_mb), 0, 65536, NULL, "0", "MiB per gradient allreduce bucket (0: DT_BUCKET_MB, else min(25, gradients/8), at least 1)"},
    {"optimizer", K_STR, F(optimizer), 0, 0, "sgd,adamw,adagrad", "\"adamw\"", "sgd, adamw or adagrad"},
    {"lr", K_NUM, F(lr), 0, 100, NULL, "0.001", "peak learning rate"},
    {"min_lr", K_NUM, F(min_lr), 0, 100, NULL, "0", "learning rate at the end of the cosine"},
    {"schedule", K_STR, F(schedule), 0, 0, "constant,cosine", "\"constant\"", "constant or cosine (after warm-up)"},
    {"warmup_steps", K_INT, F(warmup_steps), 0, 1LL << 40, NULL, "0", "linear warm-up steps"},
    {"momentum", K_NUM, F(momentum), 0, 0.999, NULL, "0.9", "sgd momentum"},
    {"nesterov", K_BOOL, F(nesterov), 0, 1, NULL, "false", "sgd Nesterov momentum"},
    {"weight_decay", K_NUM, F(weight_decay), 0, 10, NULL, "0", "sgd L2 / adamw decoupled decay"},
    {"beta1", K_NUM, F(beta1), 0, 0.9999, NULL, "0.9", "adamw beta1"},
    {"beta2", K_NUM, F(beta2), 0, 0.99999, NULL, "0.999", "adamw beta2"},
    {"eps", K_NUM, F(eps), 1e-12, 1, NULL, "1e-8", "adamw epsilon"},
    {"adagrad_eps", K_NUM, F(adagrad_eps), 1e-20, 1, NULL, "1e-10", "adagrad epsilon (torch's default)"},
    {"lr_decay", K_NUM, F(lr_decay), 0, 1e6, NULL, "0", "adagrad: lr / (1 + (step - 1) lr_decay)"},
    {"initial_accumulator_value", K_NUM, F(initial_accumulator_value), 0, 1e6, NULL, "0", "adagrad: the sum of squares' start"},
    {"no_decay", K_STR, F(no_decay), 0, 0, NULL, "\"*wte*,*wpe*,*embed*\"", "comma-separated name patterns without weight decay, besides every 1-D parameter (biases, LayerNorm); \"none\": decay everything"},
    {"recompute", K_STR, F(recompute), 0, 0, "off,blocks,all", "\"off\"", "activation recomputation: off, blocks (each transformer block; every block of mlp/cnn), all"},
    {"grad_clip", K_NUM, F(grad_clip), 0, 1e6, NULL, "0", "clip the global gradient norm (0: off)"},
    {"log_interval", K_INT, F(log_interval), 1, 1LL << 40, NULL, "10", "steps between progress lines"},
    {"eval_interval", K_INT, F(eval_interval), 0, 1LL << 40, NULL, "0", "steps between evaluations (0: at the end)"},
    {"eval_batches", K_INT, F(eval_batches), 1, 1LL << 40, NULL, "20", "batches per evaluation"},
    {"stop_at_accuracy", K_NUM, F(stop_at_accuracy), 0, 1, NULL, "0", "stop after the first evaluation at or above this accuracy (0: off)"},
    {"checkpoint_dir", K_STR, F(checkpoint_dir), 0, 0, NULL, "\"\"", "where checkpoints go (empty: none)"},
    {"checkpoint_interval", K_INT, F(checkpoint_interval), 0, 1LL << 40, NULL, "0", "steps between checkpoints (0: at the end)"},
    {"checkpoint_seconds", K_NUM, F(checkpoint_seconds), 0, 1e9, NULL, "0", "also checkpoint when this many seconds passed since the last one (0: off)"},
    {"checkpoint_keep", K_INT, F(checkpoint_keep), 0, 1LL << 20, NULL, "3", "complete checkpoints kept, newest first (0: all)"},
    {"checkpoint_initial", K_BOOL, F(checkpoint_initial), 0, 1, NULL, "false", "also checkpoint the initial weights (step 0)"},
    {"memory_checkpoint_interval", K_INT, F(memory_checkpoint_interval), 0, 1LL << 40, NULL, "0", "steps between snapshots into the memory of dtrun (--max-restarts), which a restart resumes from (0: off; docs/fault-tolerance.md)"},
    {"metrics_file", K_STR, F(metrics_file), 0, 0, NULL, "\"\"", "JSON-lines metrics file (empty: none)"},
};
#define NSPECS (sizeof specs / sizeof specs[0])
_Static_assert(NSPECS <= sizeof((dtrain_config *)0)->given, "dtrain_config.given has a byte per key");

static const spec *find(const char *key)
{
    for (size_t i = 0; i < NSPECS; i++)
        if (strcmp(specs[i].key, key) == 0)
            return &specs[i];
    return NULL;
}

static dt_status bad(const char *origin, const char *key, const char *why)
{
    fprintf(stderr, "dtrain: %s: key '%s' %s\n", origin, key, why);
    return DT_ERR_INVALID;
}

static dt_status set_value(dtrain_config *c, const spec *s, const cJSON *v, const char *origin)
{
    char *base = (char *)c + s->off;
    char why[256];
    switch (s->type) {
    case K_INT:
    case K_NUM: {
        if (!cJSON_IsNumber(v)) {
            if (!cJSON_IsString(v))
                return bad(origin, s->key, "must be a number");
            /* a --set value that is no JSON number arrives as its text */
            snprintf(why, sizeof why, "must be a number, not \"%.120s\"%s", v->valuestring,
                     strchr(v->valuestring, '=') ? " (one --set per key: --set a=1 --set b=2)" : "");
            return bad(origin, s->key, why);
        }
        double d = v->valuedouble;
        if (!(d >= s->min && d <= s->max)) { /* before the integer test: its cast needs the range */
            if (s->type == K_INT)
                snprintf(why, sizeof why, "= %.17g is outside [%.0f, %.0f]", d, s->min, s->max);
            else
                snprintf(why, sizeof why, "= %g is outside [%g, %g]", d, s->min, s->max);
            return bad(origin, s->key, why);
        }
        if (s->type == K_INT && d != (double)(int64_t)d)
            return bad(origin, s->key, "must be an integer");
        if (s->type == K_INT)
            *(int64_t *)base = (int64_t)d;
        else
            *(double *)base = d;
        return DT_OK;
    }
    case K_BOOL:
        if (!cJSON_IsBool(v))
            return bad(origin, s->key, "must be true or false");
        *(bool *)base = cJSON_IsTrue(v);
        return DT_OK;
    case K_STR: {
        if (!cJSON_IsString(v))
            return bad(origin, s->key, "must be a string");
        if (strlen(v->valuestring) >= s->size)
            return bad(origin, s->key, "is too long");
        if (s->choices) {
            char list[256];
            snprintf(list, sizeof list, ",%s,", s->choices);
            char want[128];
            snprintf(want, sizeof want, ",%s,", v->valuestring);
            if (!strstr(list, want)) {
                snprintf(why, sizeof why, "= \"%s\" is not one of %s", v->valuestring, s->choices);
                return bad(origin, s->key, why);
            }
        }
        snprintf(base, s->size, "%s", v->valuestring);
        return DT_OK;
    }
    case K_INTLIST: {
        int n = cJSON_GetArraySize(v);
        if (!cJSON_IsArray(v) || n < 2 || n > 8)
            return bad(origin, s->key, "must be a list of 2 to 8 integers");
        for (int i = 0; i < n; i++) {
            const cJSON *e = cJSON_GetArrayItem(v, i);
            if (!cJSON_IsNumber(e))
                return bad(origin, s->key, "must hold positive integers");
            if (!(e->valuedouble >= s->min && e->valuedouble <= s->max)) { /* before the cast below */
                snprintf(why, sizeof why, "entry %d = %.17g is out of range [%.0f, %.0f]", i + 1, e->valuedouble,
                         s->min, s->max);
                return bad(origin, s->key, why);
            }
            if (e->valuedouble != (double)(int64_t)e->valuedouble)
                return bad(origin, s->key, "must hold positive integers");
            c->mlp_sizes[i] = (int64_t)e->valuedouble;
        }
        c->mlp_nsizes = n;
        return DT_OK;
    }
    }
    return DT_ERR_INVALID;
}

/* Key s was just given (file or --set): at its default value or another. */
static void mark_given(dtrain_config *c, const spec *s)
{
    dtrain_config d;
    memset(&d, 0, sizeof d);
    cJSON *v = dt_json_parse_whole(s->def);
    set_value(&d, s, v, "defaults");
    cJSON_Delete(v);
    const char *now = (const char *)c + s->off, *def = (const char *)&d + s->off;
    bool same;
    switch (s->type) {
    case K_STR: same = strcmp(now, def) == 0; break;
    case K_INT: same = *(const int64_t *)now == *(const int64_t *)def; break;
    case K_NUM: same = *(const double *)now == *(const double *)def; break;
    case K_BOOL: same = *(const bool *)now == *(const bool *)def; break;
    default: /* K_INTLIST */
        same = c->mlp_nsizes == d.mlp_nsizes &&
               !memcmp(c->mlp_sizes, d.mlp_sizes, (size_t)c->mlp_nsizes * sizeof c->mlp_sizes[0]);
    }
    c->given[s - specs] = same ? DTRAIN_GIVEN_DEFAULT : DTRAIN_GIVEN_CHANGED;
}

dt_status dtrain_config_from_json(const cJSON *json, const char *origin, dtrain_config *c)
{
    if (!cJSON_IsObject(json)) {
        fprintf(stderr, "dtrain: %s: the configuration must be a JSON object\n", origin);
        return DT_ERR_INVALID;
    }
    for (const cJSON *it = json->child; it; it = it->next) {
        const spec *s = find(it->string);
        if (!s)
            return bad(origin, it->string, "is unknown (dtrain train --help lists the keys)");
        if (set_value(c, s, it, origin) != DT_OK)
            return DT_ERR_INVALID;
    }
    return DT_OK;
}

/* The top-level keys of a JSON object text with the line each starts on, in
 * order (cJSON keeps a repeated key twice but says nothing about where). */
typedef struct {
    char key[64];
    int line;
} key_at;

static int top_level_keys(const char *text, key_at *out, int cap)
{
    int n = 0, depth = 0, line = 1;
    for (const char *p = text; *p; p++) {
        if (*p == '\n')
            line++;
        else if (*p == '{' || *p == '[')
            depth++;
        else if (*p == '}' || *p == ']')
            depth--;
        else if (*p == '"') {
            const char *start = ++p;
            while (*p && *p != '"') {
                if (*p == '\\' && p[1])
                    p++;
                else if (*p == '\n')
                    line++;
                p++;
            }
            if (!*p)
                break;
            const char *after = p + 1;
            while (*after == ' ' || *after == '\t' || *after == '\r' || *after == '\n')
                after++;
            if (depth == 1 && *after == ':' && n < cap) {
                snprintf(out[n].key, sizeof out[n].key, "%.*s", (int)(p - start), start);
                out[n++].line = line;
            }
        }
    }
    return n;
}

static dt_status no_duplicate_keys(const char *path, const char *text)
{
    key_at keys[256];
    int n = top_level_keys(text, keys, 256);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (strcmp(keys[i].key, keys[j].key) == 0) {
                fprintf(stderr, "dtrain: %s: key '%s' is given twice, on lines %d and %d\n", path, keys[i].key,
                        keys[j].line, keys[i].line);
                return DT_ERR_INVALID;
            }
    return DT_OK;
}

static dt_status load_file(const char *path, dtrain_config *c)
{
    char *text = NULL;
    if (dt_read_file(path, &text, NULL) != DT_OK) { /* (EINVAL: not a regular file, which the library says) */
        fprintf(stderr, "dtrain: cannot read config %s: %s\n", path, errno == EINVAL ? dt_last_error() : strerror(errno));
        return DT_ERR_INVALID;
    }
    cJSON *json = dt_json_parse_whole(text);
    if (!json) {
        const char *at = cJSON_GetErrorPtr();
        fprintf(stderr, "dtrain: %s is not valid JSON (near byte %ld)\n", path, at ? (long)(at - text) : -1L);
        free(text);
        return DT_ERR_INVALID;
    }
    dt_status s = no_duplicate_keys(path, text);
    if (s == DT_OK)
        s = dtrain_config_from_json(json, path, c);
    for (const cJSON *it = json->child; s == DT_OK && it; it = it->next)
        mark_given(c, find(it->string));
    cJSON_Delete(json);
    free(text);
    return s;
}

dt_status dtrain_config_load(const char *file, char **sets, int nsets, dtrain_config *c)
{
    memset(c, 0, sizeof *c);
    for (size_t i = 0; i < NSPECS; i++) {
        cJSON *v = dt_json_parse_whole(specs[i].def);
        dt_status s = set_value(c, &specs[i], v, "defaults");
        cJSON_Delete(v);
        if (s != DT_OK)
            return s;
    }
    const char *env_device = getenv("DT_DEVICE"); /* the default; the file and --set override it */
    if (env_device && *env_device)
        snprintf(c->device, sizeof c->device, "%s", env_device);
    if (file && load_file(file, c) != DT_OK)
        return DT_ERR_INVALID;
    if (dtrain_config_apply_sets(c, sets, nsets) != DT_OK)
        return DT_ERR_INVALID;
    /* grad_compression auto: bf16 training sends bf16 gradients where the
     * wire offers a choice (allreduce data parallelism), else none */
    if (!strcmp(c->grad_compression, "auto"))
        snprintf(c->grad_compression, sizeof c->grad_compression, "%s",
                 !strcmp(c->precision, "bf16") && c->servers == 0 && c->zero_stage == 0 ? "bf16" : "none");
    return dtrain_config_validate(c);
}

dt_status dtrain_config_apply_sets(dtrain_config *c, char **sets, int nsets)
{
    for (int i = 0; i < nsets; i++) {
        char *eq = strchr(sets[i], '=');
        if (!eq || eq == sets[i]) {
            fprintf(stderr, "dtrain: --set '%s' is not key=value\n", sets[i]);
            return DT_ERR_INVALID;
        }
        char key[128];
        snprintf(key, sizeof key, "%.*s", (int)(eq - sets[i]), sets[i]);
        for (int j = 0; j < i; j++) {
            size_t len = strlen(key);
            if (strncmp(sets[j], key, len) == 0 && sets[j][len] == '=') {
                fprintf(stderr, "dtrain: --set: key '%s' is given twice (--set %d: '%s' and --set %d: '%s')\n",
                        key, j + 1, sets[j], i + 1, sets[i]);
                return DT_ERR_INVALID;
            }
        }
        const spec *s = find(key);
        if (!s)
            return bad("--set", key, "is unknown (dtrain train --help lists the keys)");
        cJSON *v = dt_json_parse_whole(eq + 1);
        if (!v || (s->type == K_STR && !cJSON_IsString(v))) { /* bare words are strings */
            cJSON_Delete(v);
            v = cJSON_CreateString(eq + 1);
        }
        dt_status st = set_value(c, s, v, "--set");
        cJSON_Delete(v);
        if (st != DT_OK)
            return st;
        mark_given(c, s);
    }
    return DT_OK;
}

dt_status dtrain_config_validate(const dtrain_config *c)
{
    bool textclf = !strcmp(c->model, "textclf");
    bool cpu = !strcmp(c->device, "cpu");
    if (!cpu && strcmp(c->device, "cuda") && strncmp(c->device, "cuda:", 5) && strcmp(c->device, "emu"))
        return bad("configuration", "device", "must be cpu, cuda, cuda:N or emu (DT_DEVICE sets the default)");
    if (!cpu && (strcmp(c->model, "gpt") && strcmp(c->model, "mlp")))
        return bad("configuration", "device", "cuda trains the gpt and the mlp (model)");
    if (!cpu && !strcmp(c->optimizer, "adagrad"))
        return bad("configuration", "device", "cuda trains with sgd or adamw for now (adagrad on the GPU is not built "
                                              "yet)");
    if (textclf != !strcmp(c->data, "fortunes"))
        return bad("configuration", "data", textclf ? "must be fortunes for the textclf" : "fortunes is for the textclf");
    if (strcmp(c->model, "gpt") && !textclf && strcmp(c->data, "fashion-mnist"))
        return bad("configuration", "data", "must be fashion-mnist for the mlp and cnn");
    if (textclf && (c->tp > 1 || c->pp > 1 || c->zero_stage > 0))
        return bad("configuration", "model", "textclf trains single-process or data-parallel (zero_stage 0, tp 1, pp 1): "
                   "its row-sparse table is not split by ZeRO, tensor or pipeline parallelism");
    if (!strcmp(c->model, "gpt") && strcmp(c->data, "text"))
        return bad("configuration", "data", "must be text for the gpt");
    if (!strcmp(c->model, "gpt") && c->dim % c->heads)
        return bad("configuration", "heads", "must divide dim");
    if (!strcmp(c->model, "mlp") && (c->mlp_sizes[0] != 784 || c->mlp_sizes[c->mlp_nsizes - 1] != 10))
        return bad("configuration", "mlp_sizes", "must start with 784 and end with 10 for Fashion-MNIST");
    /* the layout's keys among themselves: the library's checks (dt_layout_check) */
    dt_layout l;
    dtrain_layout_of(c, &l);
    if (dt_layout_check(&l, 0, NULL) != DT_OK) {
        fprintf(stderr, "dtrain: configuration: %s\n", dt_last_error());
        return DT_ERR_INVALID;
    }
    if (c->sequence_parallel && strcmp(c->model, "gpt"))
        return bad("configuration", "sequence_parallel", "needs the gpt model and tp > 1");
    if (c->sequence_parallel && c->context % c->tp) {
        char why[160];
        snprintf(why, sizeof why, "needs context (%lld) divisible by tp (%lld)", (long long)c->context,
                 (long long)c->tp);
        return bad("configuration", "sequence_parallel", why);
    }
    if (c->batch_size % c->micro_batches) { /* (before the keys that divide by it, which would blame themselves) */
        char why[160];
        snprintf(why, sizeof why, "= %lld does not divide batch_size = %lld into equal micro-batches",
                 (long long)c->micro_batches, (long long)c->batch_size);
        return bad("configuration", "micro_batches", why);
    }
    if (c->tp_copies > c->batch_size / c->micro_batches) {
        char why[160];
        snprintf(why, sizeof why, "= %lld is more copies than the %lld rows of a micro-batch (batch_size %lld / "
                 "micro_batches %lld)", (long long)c->tp_copies, (long long)(c->batch_size / c->micro_batches),
                 (long long)c->batch_size, (long long)c->micro_batches);
        return bad("configuration", "tp_copies", why);
    }
    if (!strcmp(c->schedule, "cosine") && c->min_lr > c->lr) {
        char why[160];
        snprintf(why, sizeof why, "= %g is above lr = %g: the cosine would climb, not decay", c->min_lr, c->lr);
        return bad("configuration", "min_lr", why);
    }
    double limit;
    if (c->memory_limit[0] && dtrain_parse_bytes(c->memory_limit, &limit) != DT_OK)
        return bad("configuration", "memory_limit", "is not a size (bytes, or a number with B, KiB, MiB, GiB, KB, MB, GB)");
    if (c->servers > 0 && c->grad_clip > 0 && strcmp(c->sync, "bsp"))
        return bad("configuration", "grad_clip", "needs sync bsp: asp and ssp apply each worker's push alone, with no "
                                                 "global norm to clip to");
    if (c->servers > 0 && c->stop_at_accuracy > 0 && strcmp(c->sync, "bsp"))
        return bad("configuration", "stop_at_accuracy", "needs sync bsp: asynchronous workers do not stop together");
    if (!strcmp(c->layout, "auto") && c->servers > 0)
        return bad("configuration", "layout", "auto plans layouts without parameter servers, and servers > 0 (or "
                                              "dtrun --servers) asks for them: give the layout keys instead");

    if (c->tp > 1) {
        char why[160];
        if (!strcmp(c->model, "cnn"))
            return bad("configuration", "tp", "> 1 is tensor parallelism, built for the gpt and mlp models");
        if (!strcmp(c->model, "gpt") && (c->heads % c->tp || c->vocab % c->tp)) {
            snprintf(why, sizeof why, "= %lld must divide heads (%lld) and vocab (%lld)", (long long)c->tp,
                     (long long)c->heads, (long long)c->vocab);
            return bad("configuration", "tp", why);
        }
        if (!strcmp(c->model, "mlp") && dt_mlp_tp_check(c->mlp_sizes, c->mlp_nsizes, (int)c->tp) != DT_OK) {
            snprintf(why, sizeof why, "does not fit the model: %s", dt_last_error());
            return bad("configuration", "tp", why);
        }
    }
    return DT_OK;
}

/* When keys have an effect.  A key the user gave (file or --set) in a
 * configuration where it has none: refused when it would change what is
 * trained (the run would not be the experiment its configuration says: the
 * optimizer's, the schedule's and the parallel layout's settings, dropout),
 * given at a value other than its default; warned about otherwise (outputs,
 * resources and speed, another model's sizes, and any key given at its
 * default).  docs/dtrain.md, "Keys that do nothing", lists them. */
typedef struct {
    const char *keys; /* comma-separated */
    bool (*used)(const dtrain_config *c);
    const char *needs; /* "KEY is only used with NEEDS" */
    bool refuse;
} key_use;

static bool is_model(const dtrain_config *c, const char *m) { return !strcmp(c->model, m); }
static bool mlp(const dtrain_config *c) { return is_model(c, "mlp"); }
static bool cnn(const dtrain_config *c) { return is_model(c, "cnn"); }
static bool gpt(const dtrain_config *c) { return is_model(c, "gpt"); }
static bool textclf(const dtrain_config *c) { return is_model(c, "textclf"); }
static bool gpt_or_textclf(const dtrain_config *c) { return gpt(c) || textclf(c); }
static bool gpt_tp(const dtrain_config *c) { return gpt(c) && c->tp > 1; }
static bool pipeline(const dtrain_config *c) { return c->pp > 1; }
static bool interleaved(const dtrain_config *c) { return c->pp > 1 && !strcmp(c->pipeline_schedule, "interleaved"); }
static bool ps(const dtrain_config *c) { return c->servers > 0; }
static bool ssp(const dtrain_config *c) { return c->servers > 0 && !strcmp(c->sync, "ssp"); }
static bool not_ps(const dtrain_config *c) { return c->servers == 0; }
static bool allreduce_dp(const dtrain_config *c) { return c->servers == 0 && c->zero_stage == 0; }
static bool powersgd(const dtrain_config *c) { return !strcmp(c->grad_compression, "powersgd"); }
static bool topk(const dtrain_config *c) { return !strcmp(c->grad_compression, "topk"); }
static bool compressor(const dtrain_config *c) { return powersgd(c) || topk(c); }
static bool offloads(const dtrain_config *c) { return !strcmp(c->offload, "disk"); }
static bool straggler(const dtrain_config *c) { return c->straggler_rank >= 0; }
static bool straggler_sleeps(const dtrain_config *c) { return c->straggler_ms > 0; }
static bool cuda(const dtrain_config *c) { return !strncmp(c->device, "cuda", 4); }
static bool sgd(const dtrain_config *c) { return !strcmp(c->optimizer, "sgd"); }
static bool sgd_momentum(const dtrain_config *c) { return sgd(c) && c->momentum > 0; }
static bool adamw(const dtrain_config *c) { return !strcmp(c->optimizer, "adamw"); }
static bool adagrad(const dtrain_config *c) { return !strcmp(c->optimizer, "adagrad"); }
static bool cosine(const dtrain_config *c) { return !strcmp(c->schedule, "cosine"); }
static bool decays(const dtrain_config *c) { return c->weight_decay > 0; }
static bool checkpoints(const dtrain_config *c) { return c->checkpoint_dir[0] != '\0'; }

static const key_use uses[] = {
    {"dropout", gpt, "model gpt (the mlp, cnn and textclf have no dropout)", true},
    {"sequence_parallel", gpt_tp, "model gpt and tp > 1", true},
    {"tp_copies", gpt_tp, "model gpt and tp > 1", true},
    {"pipeline_schedule", pipeline, "pp > 1", true},
    {"virtual_stages", interleaved, "pipeline_schedule interleaved and pp > 1", true},
    {"sync", ps, "servers > 0 (a parameter server; or dtrun --servers)", true},
    {"staleness", ssp, "sync ssp and servers > 0", true},
    {"momentum", sgd, "optimizer sgd", true},
    {"nesterov", sgd_momentum, "optimizer sgd and momentum > 0", true},
    {"beta1,beta2,eps", adamw, "optimizer adamw", true},
    {"adagrad_eps,lr_decay,initial_accumulator_value", adagrad, "optimizer adagrad", true},
    {"min_lr", cosine, "schedule cosine", true},
    {"mlp_sizes", mlp, "model mlp", false},
    {"conv1_channels,conv2_channels", cnn, "model cnn", false},
    {"vocab,context,layers,heads", gpt, "model gpt", false},
    {"dim", gpt_or_textclf, "model gpt or textclf", false},
    {"buckets,classes,max_features", textclf, "model textclf", false},
    {"ps_clock_log", ps, "servers > 0", false},
    {"memory_limit", not_ps, "servers 0 (a parameter server's workers do not plan their memory)", false},
    {"bucket_mb,grad_compression", allreduce_dp, "data parallelism by allreduce (servers 0, zero_stage 0)", false},
    {"offload_dir", offloads, "offload disk", false},
    {"powersgd_rank", powersgd, "grad_compression powersgd", false},
    {"topk_fraction", topk, "grad_compression topk", false},
    {"compress_start_step", compressor, "grad_compression powersgd or topk", false},
    {"straggler_ms,straggler_prob", straggler, "straggler_rank >= 0", false},
    {"straggler_rank", straggler_sleeps, "straggler_ms > 0", false},
    {"tf32", cuda, "device cuda (elsewhere the products are f32)", false},
    {"no_decay", decays, "weight_decay > 0", false},
    {"checkpoint_interval,checkpoint_seconds,checkpoint_keep,checkpoint_initial", checkpoints, "checkpoint_dir", false},
};

/* A key's value as the configuration writes it, for messages. */
static void value_text(const dtrain_config *c, const spec *s, char *out, size_t len)
{
    const char *base = (const char *)c + s->off;
    switch (s->type) {
    case K_INT: snprintf(out, len, "%lld", (long long)*(const int64_t *)base); break;
    case K_NUM: snprintf(out, len, "%g", *(const double *)base); break;
    case K_BOOL: snprintf(out, len, "%s", *(const bool *)base ? "true" : "false"); break;
    case K_STR: snprintf(out, len, "\"%s\"", base); break;
    case K_INTLIST: {
        size_t n = (size_t)snprintf(out, len, "[");
        for (int i = 0; i < c->mlp_nsizes && n < len; i++)
            n += (size_t)snprintf(out + n, len - n, "%s%lld", i ? ", " : "", (long long)c->mlp_sizes[i]);
        if (n < len)
            snprintf(out + n, len - n, "]");
        break;
    }
    }
}

dt_status dtrain_config_check_unused(const dtrain_config *c, bool warn)
{
    for (size_t u = 0; u < sizeof uses / sizeof uses[0]; u++) {
        if (uses[u].used(c))
            continue;
        for (const char *k = uses[u].keys; *k;) {
            size_t len = strcspn(k, ",");
            char key[64];
            snprintf(key, sizeof key, "%.*s", (int)len, k);
            k += len + (k[len] == ',');
            const spec *s = find(key);
            if (!s) {
                fprintf(stderr, "dtrain: internal error: the key-use table names an unknown key '%s'\n", key);
                return DT_ERR_INTERNAL;
            }
            int given = c->given[s - specs];
            char value[128];
            value_text(c, s, value, sizeof value);
            if (given == DTRAIN_GIVEN_CHANGED && uses[u].refuse) {
                fprintf(stderr, "dtrain: configuration: key '%s' = %s is only used with %s: refused, the run "
                                "would not be the one configured (remove the key, or configure what it needs)\n",
                        key, value, uses[u].needs);
                return DT_ERR_INVALID;
            }
            if (given && warn)
                fprintf(stderr, "dtrain: warning: key '%s' = %s is only used with %s: it does nothing here\n", key,
                        value, uses[u].needs);
        }
    }
    return DT_OK;
}

cJSON *dtrain_config_to_json(const dtrain_config *c)
{
    cJSON *j = cJSON_CreateObject();
    for (size_t i = 0; i < NSPECS; i++) {
        const spec *s = &specs[i];
        const char *base = (const char *)c + s->off;
        switch (s->type) {
        case K_INT: cJSON_AddNumberToObject(j, s->key, (double)*(const int64_t *)base); break;
        case K_NUM: cJSON_AddNumberToObject(j, s->key, *(const double *)base); break;
        case K_BOOL: cJSON_AddBoolToObject(j, s->key, *(const bool *)base); break;
        case K_STR: cJSON_AddStringToObject(j, s->key, base); break;
        case K_INTLIST: {
            cJSON *a = cJSON_AddArrayToObject(j, s->key);
            for (int k = 0; k < c->mlp_nsizes; k++)
                cJSON_AddItemToArray(a, cJSON_CreateNumber((double)c->mlp_sizes[k]));
            break;
        }
        }
    }
    return j;
}

cJSON *dtrain_model_config_json(const dtrain_config *c)
{
    static const char *const keys[][7] = {
        {"mlp", "mlp_sizes", NULL},
        {"cnn", "conv1_channels", "conv2_channels", NULL},
        {"gpt", "vocab", "context", "layers", "heads", "dim", NULL},
        {"textclf", "buckets", "dim", "classes", NULL},
    };
    cJSON *all = dtrain_config_to_json(c), *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "model", c->model);
    for (size_t m = 0; m < sizeof keys / sizeof keys[0]; m++)
        for (int k = 1; !strcmp(keys[m][0], c->model) && keys[m][k]; k++)
            cJSON_AddItemToObject(j, keys[m][k], cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(all, keys[m][k]), 1));
    cJSON_Delete(all);
    return j;
}

void dtrain_config_help(FILE *to)
{
    fprintf(to, "configuration keys (JSON file and --set key=value; a key given where it does nothing is refused\n"
                "or warned about: docs/dtrain.md, \"Keys that do nothing\"):\n");
    for (size_t i = 0; i < NSPECS; i++)
        fprintf(to, "  %-20s %-45s default %s\n", specs[i].key, specs[i].help, specs[i].def);
}
