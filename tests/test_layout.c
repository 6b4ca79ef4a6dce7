/* Unit tests of the layout object (dtrain/layout.h, src/parallel/layout):
 * the defaults; every key set and read back; the JSON and --set round
 * trips, bytewise on every field; every refusal of set, get and from_json
 * naming the key and the value; every check with the numbers it names;
 * the data-parallel width the world leaves; the one-line description. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "dtrain/layout.h"
#include "parallel/layout/layout_internal.h"

/* Every field of a and b holds the same bytes (padding aside). */
static bool same_fields(const dt_layout *a, const dt_layout *b)
{
    size_t n;
    const dt__layout_key *t = dt__layout_table(&n);
    bool same = true;
    for (size_t i = 0; i < n; i++)
        if (memcmp((const char *)a + t[i].off, (const char *)b + t[i].off, t[i].size)) {
            fprintf(stderr, "  field of key '%s' differs\n", t[i].key);
            same = false;
        }
    return same;
}

static const char *get(const dt_layout *l, const char *key)
{
    static char buf[64];
    if (dt_layout_get(l, key, buf, sizeof buf) != DT_OK)
        snprintf(buf, sizeof buf, "(get failed: %s)", dt_last_error());
    return buf;
}

#define EXPECT_STR(got, want)                                                                          \
    do {                                                                                               \
        const char *g__ = (got), *w__ = (want);                                                        \
        check_count++;                                                                                 \
        if (strcmp(g__, w__)) {                                                                        \
            check_failures++;                                                                          \
            fprintf(stderr, "%s:%d: %s is \"%s\", expected \"%s\"\n", __FILE__, __LINE__, #got, g__, w__); \
        }                                                                                              \
    } while (0)

/* The trainer's keys, in order, with their defaults as --set text. */
static const char *const default_texts[][2] = {
    {"dp", "0"}, {"tp", "1"}, {"pp", "1"}, {"zero_stage", "0"}, {"servers", "0"}, {"sync", "bsp"},
    {"staleness", "2"}, {"micro_batches", "1"}, {"grad_accumulation", "1"}, {"pipeline_schedule", "1f1b"},
    {"virtual_stages", "2"}, {"sequence_parallel", "false"}, {"tp_copies", "1"}, {"recompute", "off"}, {"offload", "none"},
    {"precision", "f32"}, {"grad_compression", "none"}, {"powersgd_rank", "4"}, {"compress_start_step", "10"},
    {"topk_fraction", "0.01"}, {"bucket_mb", "0"}, {"device", "cpu"},
};
#define NKEYS (sizeof default_texts / sizeof default_texts[0])

/* A value other than the default for every key. */
static const char *const other_texts[NKEYS][2] = {
    {"dp", "4"}, {"tp", "2"}, {"pp", "2"}, {"zero_stage", "1"}, {"servers", "3"}, {"sync", "ssp"},
    {"staleness", "5"}, {"micro_batches", "4"}, {"grad_accumulation", "3"}, {"pipeline_schedule", "interleaved"},
    {"virtual_stages", "3"}, {"sequence_parallel", "true"}, {"tp_copies", "4"}, {"recompute", "blocks"}, {"offload", "disk"},
    {"precision", "bf16"}, {"grad_compression", "f16"}, {"powersgd_rank", "8"}, {"compress_start_step", "100"},
    {"topk_fraction", "0.125"}, {"bucket_mb", "2.5"}, {"device", "cuda:1"},
};

static void set_others(dt_layout *l)
{
    dt_layout_default(l);
    for (size_t i = 0; i < NKEYS; i++)
        EXPECT_STATUS(dt_layout_set(l, other_texts[i][0], other_texts[i][1]), DT_OK);
}

static void test_defaults(void)
{
    dt_layout l;
    dt_layout_default(&l);
    EXPECT_EQ(l.dp, 0);
    EXPECT_EQ(l.tp, 1);
    EXPECT_EQ(l.pp, 1);
    EXPECT_EQ(l.zero_stage, 0);
    EXPECT_EQ(l.servers, 0);
    EXPECT_EQ(l.sync, DT_PS_BSP);
    EXPECT_EQ(l.staleness, 2);
    EXPECT_EQ(l.micro_batches, 1);
    EXPECT_EQ(l.grad_accumulation, 1);
    EXPECT_EQ(l.schedule, DT_PIPE_1F1B);
    EXPECT_EQ(l.virtual_stages, 2);
    EXPECT(!l.sequence_parallel);
    EXPECT_EQ(l.tp_copies, 1);
    EXPECT_EQ(l.recompute, DT_RECOMPUTE_OFF);
    EXPECT_EQ(l.offload, DT_OFFLOAD_NONE);
    EXPECT_EQ(l.precision, DT_F32);
    EXPECT_EQ(l.grad_wire, DT_F32);
    EXPECT(l.bucket_mb == 0);
    EXPECT_STR(l.device, "cpu");

    const char *const *keys = dt_layout_keys();
    size_t n = 0, tn;
    const dt__layout_key *t = dt__layout_table(&tn);
    for (; keys[n]; n++) {
        EXPECT(n < NKEYS);
        if (n >= NKEYS)
            break;
        EXPECT_STR(keys[n], default_texts[n][0]);
        EXPECT_STR(t[n].key, keys[n]); /* the table is in the keys' order */
        EXPECT(dt_layout_has_key(keys[n]));
        EXPECT_STR(get(&l, keys[n]), default_texts[n][1]);
        EXPECT(t[n].help && strlen(t[n].help) > 10);
    }
    EXPECT_EQ(n, NKEYS);
    EXPECT_EQ(tn, NKEYS);
    EXPECT(!dt_layout_has_key("lr"));
    EXPECT(!dt_layout_has_key(NULL));

    char sets[64] = "x";
    EXPECT_EQ(dt_layout_to_sets(&l, sets, sizeof sets), 0);
    EXPECT_STR(sets, "");
    EXPECT_EQ(dt_layout_chunks(&l), 1);
    EXPECT_EQ(dt_layout_step_micro_batches(&l), 1);
    int dp = -1;
    EXPECT_STATUS(dt_layout_check(&l, 1, &dp), DT_OK);
    EXPECT_EQ(dp, 1);
    EXPECT_STATUS(dt_layout_check(&l, 0, &dp), DT_OK); /* the keys alone: dp as given */
    EXPECT_EQ(dp, 0);
    EXPECT_STATUS(dt_layout_check(&l, 5, NULL), DT_OK);
}

static void test_set_get(void)
{
    dt_layout l;
    set_others(&l);
    for (size_t i = 0; i < NKEYS; i++)
        EXPECT_STR(get(&l, other_texts[i][0]), other_texts[i][1]);
    EXPECT_EQ(l.dp, 4);
    EXPECT_EQ(l.tp, 2);
    EXPECT_EQ(l.pp, 2);
    EXPECT_EQ(l.zero_stage, 1);
    EXPECT_EQ(l.servers, 3);
    EXPECT_EQ(l.sync, DT_PS_SSP);
    EXPECT_EQ(l.staleness, 5);
    EXPECT_EQ(l.micro_batches, 4);
    EXPECT_EQ(l.grad_accumulation, 3);
    EXPECT_EQ(l.schedule, DT_PIPE_INTERLEAVED);
    EXPECT_EQ(l.virtual_stages, 3);
    EXPECT(l.sequence_parallel);
    EXPECT_EQ(l.recompute, DT_RECOMPUTE_BLOCKS);
    EXPECT_EQ(l.offload, DT_OFFLOAD_DISK);
    EXPECT_EQ(l.precision, DT_BF16);
    EXPECT_EQ(l.grad_wire, DT_F16);
    EXPECT(l.bucket_mb == 2.5);
    EXPECT_STR(l.device, "cuda:1");
    EXPECT_EQ(dt_layout_chunks(&l), 3);
    EXPECT_EQ(dt_layout_step_micro_batches(&l), 12);

    /* the other choices, the range's ends, and the forms --set takes */
    static const char *const more[][3] = {
        {"sync", "asp", "asp"},       {"sync", "\"bsp\"", "bsp"},  {"pipeline_schedule", "gpipe", "gpipe"},
        {"recompute", "all", "all"},  {"offload", "none", "none"}, {"precision", "f32", "f32"},
        {"grad_compression", "bf16", "bf16"}, {"grad_compression", "none", "none"},
        {"device", "emu", "emu"},     {"device", "cuda", "cuda"},  {"device", "cuda:1024", "cuda:1024"},
        {"device", "cpu", "cpu"},     {"tp", "4096", "4096"},      {"tp", "2.0", "2"},
        {"zero_stage", "3", "3"},     {"staleness", "1048576", "1048576"}, {"staleness", "0", "0"},
        {"bucket_mb", "0.1", "0.1"},  {"bucket_mb", "65536", "65536"}, {"sequence_parallel", "false", "false"},
        {"micro_batches", " 7 ", "7"}, {"dp", "0", "0"}, {"tp_copies", "64", "64"}, {"tp_copies", "1", "1"},
    };
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++) {
        EXPECT_STATUS(dt_layout_set(&l, more[i][0], more[i][1]), DT_OK);
        EXPECT_STR(get(&l, more[i][0]), more[i][2]);
    }
    EXPECT_EQ(l.grad_wire, DT_F32);
    EXPECT_EQ(dt_layout_chunks(&l), 1); /* gpipe */
    /* device: a short name after a long one leaves no bytes of the long one */
    dt_layout a, b;
    dt_layout_default(&a);
    dt_layout_default(&b);
    EXPECT_STATUS(dt_layout_set(&a, "device", "cuda:1024"), DT_OK);
    EXPECT_STATUS(dt_layout_set(&a, "device", "cpu"), DT_OK);
    EXPECT(same_fields(&a, &b));
}

static void test_set_refusals(void)
{
    static const char *const bad[][3] = {
        /* key, value, what dt_last_error() must say */
        {"tp", "abc", "key 'tp' = \"abc\" must be an integer in [1, 4096]"},
        {"tp", "0", "key 'tp' = 0 is outside [1, 4096]"},
        {"tp", "4097", "key 'tp' = 4097 is outside [1, 4096]"},
        {"tp_copies", "0", "key 'tp_copies' = 0 is outside [1, 64]"},
        {"tp_copies", "65", "key 'tp_copies' = 65 is outside [1, 64]"},
        {"tp", "1.5", "key 'tp' = 1.5 must be an integer in [1, 4096]"},
        {"tp", "2x", "key 'tp' = \"2x\" must be an integer"},
        {"tp", "", "key 'tp' = \"\" must be an integer"},
        {"tp", "true", "key 'tp' = true must be an integer"},
        {"dp", "-1", "key 'dp' = -1 is outside [0, 4096]"},
        {"pp", "0", "key 'pp' = 0 is outside [1, 4096]"},
        {"zero_stage", "4", "key 'zero_stage' = 4 is outside [0, 3]"},
        {"servers", "4097", "key 'servers' = 4097 is outside [0, 4096]"},
        {"staleness", "-1", "key 'staleness' = -1 is outside [0, 1048576]"},
        {"micro_batches", "0", "key 'micro_batches' = 0 is outside [1, 65536]"},
        {"grad_accumulation", "65537", "key 'grad_accumulation' = 65537 is outside [1, 65536]"},
        {"virtual_stages", "1", "key 'virtual_stages' = 1 is outside [2, 64]"},
        {"bucket_mb", "-1", "key 'bucket_mb' = -1 is outside [0, 65536]"},
        {"bucket_mb", "lots", "key 'bucket_mb' = \"lots\" must be a number in [0, 65536]"},
        {"bucket_mb", "1e999", "key 'bucket_mb'"},
        {"sync", "bulk", "key 'sync' = \"bulk\" is not one of bsp,asp,ssp"},
        {"sync", "bs", "key 'sync' = \"bs\" is not one of bsp,asp,ssp"},
        {"pipeline_schedule", "zigzag", "key 'pipeline_schedule' = \"zigzag\" is not one of gpipe,1f1b,interleaved"},
        {"recompute", "some", "key 'recompute' = \"some\" is not one of off,blocks,all"},
        {"offload", "ram", "key 'offload' = \"ram\" is not one of none,disk"},
        {"precision", "f16", "key 'precision' = \"f16\" is not one of f32,bf16"},
        {"grad_compression", "auto", "key 'grad_compression' = \"auto\" is not one of none,f16,bf16,powersgd,topk"},
        {"sequence_parallel", "yes", "key 'sequence_parallel' = \"yes\" must be true or false"},
        {"sequence_parallel", "1", "key 'sequence_parallel' = 1 must be true or false"},
        {"device", "tpu", "key 'device' = \"tpu\" must be cpu, cuda, cuda:N or emu"},
        {"device", "cuda:", "key 'device' = \"cuda:\" must be cpu, cuda, cuda:N or emu"},
        {"device", "cuda:x", "key 'device' = \"cuda:x\" must be cpu, cuda, cuda:N or emu"},
        {"device", "cuda:-1", "key 'device' = \"cuda:-1\" must be"},
        {"device", "cuda:0123456789012345678901234567", "key 'device' = \"cuda:0123456789012345678901234567\" is too long (at most 31 characters)"},
        {"lr", "1", "key 'lr' is not a layout key (the layout keys: dp, tp, pp,"},
        {"tp", NULL, "key 'tp': the value is NULL"},
    };
    dt_layout l, d;
    dt_layout_default(&d);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dt_layout_default(&l);
        EXPECT_STATUS(dt_layout_set(&l, bad[i][0], bad[i][1]), DT_ERR_INVALID);
        EXPECT_CONTAINS(dt_last_error(), bad[i][2]);
        EXPECT(same_fields(&l, &d)); /* a refused value changes nothing */
    }
    EXPECT_STATUS(dt_layout_set(&l, NULL, "1"), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "key '(null)' is not a layout key");

    /* get: another key, a short buffer, a value no set gives */
    char buf[64];
    EXPECT_STATUS(dt_layout_get(&l, "lr", buf, sizeof buf), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "key 'lr' is not a layout key");
    EXPECT_STATUS(dt_layout_get(&l, "sync", buf, 3), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "key 'sync': a buffer of 3 bytes is too small for its value bsp");
    EXPECT_STATUS(dt_layout_get(&l, "sync", buf, 4), DT_OK);
    EXPECT_STR(buf, "bsp");
    l.sync = (dt_ps_sync)7;
    EXPECT_STATUS(dt_layout_get(&l, "sync", buf, sizeof buf), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "key 'sync' holds 7, which is not a value of it (one of bsp,asp,ssp)");
}

static void test_json(void)
{
    dt_layout l, m, d;
    set_others(&l);
    char *json = dt_layout_to_json(&l);
    EXPECT(json != NULL);
    if (!json)
        return;
    EXPECT_CONTAINS(json, "\"tp\":2");
    EXPECT_CONTAINS(json, "\"sync\":\"ssp\"");
    EXPECT_CONTAINS(json, "\"sequence_parallel\":true");
    EXPECT_CONTAINS(json, "\"grad_compression\":\"f16\"");
    EXPECT_CONTAINS(json, "\"bucket_mb\":2.5");
    EXPECT_CONTAINS(json, "\"device\":\"cuda:1\"");
    dt_layout_default(&m);
    EXPECT_STATUS(dt_layout_from_json(&m, json), DT_OK);
    EXPECT(same_fields(&l, &m));
    free(json);

    /* the default's JSON reads back as the default; a subset keeps the rest */
    dt_layout_default(&d);
    json = dt_layout_to_json(&d);
    set_others(&m);
    EXPECT_STATUS(dt_layout_from_json(&m, json), DT_OK);
    EXPECT(same_fields(&m, &d));
    free(json);
    EXPECT_STATUS(dt_layout_from_json(&m, "{\"tp\": 4, \"pipeline_schedule\": \"gpipe\", \"bucket_mb\": 0.1}"), DT_OK);
    EXPECT_EQ(m.tp, 4);
    EXPECT_EQ(m.schedule, DT_PIPE_GPIPE);
    EXPECT(m.bucket_mb == 0.1);
    EXPECT_EQ(m.pp, 1);
    EXPECT_STATUS(dt_layout_from_json(&m, "{}"), DT_OK);
    EXPECT_EQ(m.tp, 4);

    /* a number that needs 17 digits survives the trip */
    dt_layout_default(&l);
    l.bucket_mb = 1.0 / 3.0;
    json = dt_layout_to_json(&l);
    dt_layout_default(&m);
    EXPECT_STATUS(dt_layout_from_json(&m, json), DT_OK);
    EXPECT(m.bucket_mb == 1.0 / 3.0);
    free(json);

    static const char *const bad[][2] = {
        {"{\"tp\": 2", "layout: not valid JSON"},
        {"{\"tp\": 2} x", "layout: not valid JSON"},
        {"[1, 2]", "layout: the JSON must be an object of layout keys"},
        {"{\"lr\": 0.1}", "key 'lr' is not a layout key"},
        {"{\"tp\": \"2\"}", "key 'tp' = \"2\" must be an integer in [1, 4096]"},
        {"{\"tp\": 2, \"pp\": 0}", "key 'pp' = 0 is outside [1, 4096]"},
        {"{\"sync\": \"bulk\"}", "key 'sync' = \"bulk\" is not one of bsp,asp,ssp"},
        {"{\"sync\": 1}", "key 'sync' = 1 is not one of bsp,asp,ssp"},
        {"{\"sequence_parallel\": \"true\"}", "key 'sequence_parallel' = \"true\" must be true or false"},
        {"{\"device\": 0}", "key 'device' = 0 must be a string"},
        {"{\"device\": \"gpu\"}", "key 'device' = \"gpu\" must be cpu, cuda, cuda:N or emu"},
        {"{\"tp\": 2, \"tp\": 3}", "key 'tp' is given twice"},
        {"{\"tp\": null}", "key 'tp' = null must be an integer"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        dt_layout_default(&m);
        EXPECT_STATUS(dt_layout_from_json(&m, bad[i][0]), DT_ERR_INVALID);
        EXPECT_CONTAINS(dt_last_error(), bad[i][1]);
        EXPECT(same_fields(&m, &d)); /* all or nothing: tp stays 1 */
    }
    EXPECT_STATUS(dt_layout_from_json(&m, NULL), DT_ERR_INVALID);

    /* an enum outside its choices is written as its number, refused back */
    l.sync = (dt_ps_sync)9;
    json = dt_layout_to_json(&l);
    EXPECT_CONTAINS(json, "\"sync\":9");
    EXPECT_STATUS(dt_layout_from_json(&m, json), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "key 'sync' = 9 is not one of bsp,asp,ssp");
    free(json);
}

static void test_sets(void)
{
    dt_layout l, m;
    set_others(&l);
    char buf[1024];
    int n = dt_layout_to_sets(&l, buf, sizeof buf);
    EXPECT_EQ(n, (int)strlen(buf));
    EXPECT_CONTAINS(buf, "dp=4 tp=2 pp=2 zero_stage=1 ");
    EXPECT_CONTAINS(buf, " device=cuda:1");
    EXPECT_EQ(dt_layout_to_sets(&l, NULL, 0), n);
    /* every word back through dt_layout_set gives the same layout */
    dt_layout_default(&m);
    int words = 0;
    for (char *save = NULL, *w = strtok_r(buf, " ", &save); w; w = strtok_r(NULL, " ", &save), words++) {
        char *eq = strchr(w, '=');
        EXPECT(eq != NULL);
        if (!eq)
            continue;
        *eq = '\0';
        EXPECT_STATUS(dt_layout_set(&m, w, eq + 1), DT_OK);
    }
    EXPECT_EQ(words, (int)NKEYS);
    EXPECT(same_fields(&l, &m));

    /* only what differs, and a short buffer cut but ended */
    dt_layout_default(&l);
    dt_layout_set(&l, "pp", "2");
    dt_layout_set(&l, "recompute", "all");
    EXPECT_EQ(dt_layout_to_sets(&l, buf, sizeof buf), (int)strlen("pp=2 recompute=all"));
    EXPECT_STR(buf, "pp=2 recompute=all");
    char small[6];
    EXPECT_EQ(dt_layout_to_sets(&l, small, sizeof small), (int)strlen("pp=2 recompute=all"));
    EXPECT_STR(small, "pp=2 ");
}

/* dt_layout_check(l, world) refused, its message holding each of parts. */
static void refused(const dt_layout *l, int world, const char *part1, const char *part2)
{
    int dp = -7;
    EXPECT_STATUS(dt_layout_check(l, world, &dp), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), part1);
    if (part2)
        EXPECT_CONTAINS(dt_last_error(), part2);
    EXPECT_EQ(dp, -7);
}

static void with(dt_layout *l, const char *sets)
{
    dt_layout_default(l);
    char copy[256];
    snprintf(copy, sizeof copy, "%s", sets);
    for (char *save = NULL, *w = strtok_r(copy, " ", &save); w; w = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(w, '=');
        *eq = '\0';
        EXPECT_STATUS(dt_layout_set(l, w, eq + 1), DT_OK);
    }
}

static void accepted(const char *sets, int world, int want_dp)
{
    dt_layout l;
    with(&l, sets);
    int dp = -7;
    dt_status s = dt_layout_check(&l, world, &dp);
    if (s != DT_OK)
        fprintf(stderr, "  '%s' on %d ranks refused: %s\n", sets, world, dt_last_error());
    EXPECT_STATUS(s, DT_OK);
    EXPECT_EQ(dp, want_dp);
}

static void test_check(void)
{
    dt_layout l;
    /* the keys among themselves (world 0: the keys alone) */
    with(&l, "sequence_parallel=true");
    refused(&l, 0, "key 'sequence_parallel' needs the gpt model and tp > 1: tp is 1", NULL);
    with(&l, "tp_copies=2");
    refused(&l, 0, "key 'tp_copies' = 2 needs the gpt model and tp > 1 (the copies overlap the tensor-parallel "
            "exchanges): tp is 1", NULL);
    with(&l, "tp_copies=2 tp=2 device=cuda");
    refused(&l, 0, "key 'device' = \"cuda\" with tp_copies 2: training on a device with", NULL);
    with(&l, "zero_stage=3 tp=2");
    refused(&l, 0, "key 'zero_stage' = 3 with tp 2 and pp 1: ",
            "zero_stage 3 inside a tensor- or pipeline-parallel mesh is not built: use 1 or 2");
    with(&l, "zero_stage=3 pp=4");
    refused(&l, 8, "with tp 1 and pp 4: zero_stage 3 inside a tensor- or pipeline-parallel mesh", NULL);
    with(&l, "servers=2 pp=2");
    refused(&l, 0, "key 'servers' > 0 (a parameter server) replaces data parallelism by allreduce: not with zero_stage, "
            "tp or pp", "(servers 2 with pp 2)");
    with(&l, "servers=1 tp=4");
    refused(&l, 0, "(servers 1 with tp 4)", NULL);
    with(&l, "servers=1 zero_stage=2");
    refused(&l, 0, "(servers 1 with zero_stage 2)", NULL);
    with(&l, "servers=1 grad_compression=f16");
    refused(&l, 0, "key 'grad_compression' is for allreduce data parallelism (servers 0): grad_compression f16 with "
            "servers 1", NULL);
    with(&l, "servers=3 offload=disk");
    refused(&l, 0, "key 'offload' is not for a parameter server's workers (servers 0): offload disk with servers 3", NULL);
    with(&l, "zero_stage=2 grad_compression=bf16");
    refused(&l, 0, "key 'grad_compression' is for data parallelism (zero_stage 0): grad_compression bf16 with "
            "zero_stage 2", NULL);
    /* the compressors (issue 51): plain data parallelism on the host only */
    with(&l, "zero_stage=1 grad_compression=powersgd");
    refused(&l, 0, "key 'grad_compression' is for data parallelism (zero_stage 0): grad_compression powersgd with "
            "zero_stage 1", NULL);
    with(&l, "servers=1 grad_compression=topk");
    refused(&l, 0, "grad_compression topk with servers 1", NULL);
    with(&l, "tp=2 grad_compression=topk");
    refused(&l, 0, "key 'grad_compression' = topk is built for plain data parallelism (tp 1, pp 1): grad_compression "
            "topk with tp 2", NULL);
    with(&l, "pp=2 grad_compression=powersgd");
    refused(&l, 0, "grad_compression powersgd with pp 2", NULL);
    with(&l, "device=cuda grad_compression=powersgd");
    refused(&l, 0, "key 'grad_compression' = powersgd compresses host gradients: not on device cuda", NULL);
    with(&l, "grad_compression=topk topk_fraction=0");
    refused(&l, 0, "key 'topk_fraction' = 0 must be in (0, 1]", NULL);
    with(&l, "pp=2 pipeline_schedule=interleaved micro_batches=3");
    refused(&l, 0, "key 'pipeline_schedule' interleaved needs the micro-batches per step (micro_batches x "
            "grad_accumulation = 3) to be a multiple of pp = 2", "(micro_batches 3, grad_accumulation 1)");
    with(&l, "pp=4 pipeline_schedule=interleaved micro_batches=3 grad_accumulation=2");
    refused(&l, 0, "(micro_batches x grad_accumulation = 6) to be a multiple of pp = 4", NULL);
    /* on a device: data parallel, zero_stage 1 to 3, tp and pp train (accepted below); the rest is refused */
    with(&l, "device=cuda tp=2 sequence_parallel=true");
    refused(&l, 0, "key 'device' = \"cuda\" with sequence_parallel true: ", "not built yet");
    with(&l, "device=emu zero_stage=3 recompute=blocks"); /* zero_stage 3 is built; recompute with it is not */
    refused(&l, 0, "key 'device' = \"emu\" with recompute blocks: ", "(on a device: data parallel, zero_stage 1 to 3, tp and pp)");
    with(&l, "device=cuda servers=1");
    refused(&l, 0, "key 'device' = \"cuda\" with servers 1: ", NULL);
    with(&l, "device=cuda offload=disk");
    refused(&l, 0, "key 'device' = \"cuda\" with offload disk: ", NULL);
    with(&l, "device=emu recompute=blocks");
    refused(&l, 0, "key 'device' = \"emu\" with recompute blocks: ", NULL);

    /* a layout filled by hand: each field within its key's range */
    dt_layout_default(&l);
    l.tp = 0;
    refused(&l, 0, "key 'tp' = 0 is outside [1, 4096]", NULL);
    dt_layout_default(&l);
    l.schedule = (dt_pipe_schedule)0;
    refused(&l, 0, "key 'pipeline_schedule' holds 0, which is not a value of it (one of gpipe,1f1b,interleaved)", NULL);
    dt_layout_default(&l);
    l.micro_batches = -3;
    refused(&l, 0, "key 'micro_batches' = -3 is outside [1, 65536]", NULL);
    dt_layout_default(&l);
    snprintf(l.device, sizeof l.device, "gpu0");
    refused(&l, 0, "key 'device' = \"gpu0\" must be cpu, cuda, cuda:N or emu", NULL);
    dt_layout_default(&l);
    memset(l.device, 'x', sizeof l.device); /* no end */
    refused(&l, 0, "key 'device' holds", NULL);
    dt_layout_default(&l);
    l.bucket_mb = NAN;
    refused(&l, 0, "key 'bucket_mb' holds nan", NULL);
    EXPECT_STATUS(dt_layout_check(NULL, 0, NULL), DT_ERR_INVALID);

    /* against the world */
    with(&l, "tp=2");
    refused(&l, 3, "pp = 1, tp = 2: mesh dp=? x tp=2: the world's 3 ranks are not divisible by 2", NULL);
    with(&l, "pp=2 tp=2");
    refused(&l, 6, "pp = 2, tp = 2: mesh dp=? x pp=2 x tp=2: the world's 6 ranks are not divisible by 4", NULL);
    with(&l, "pp=8");
    refused(&l, 4, "pp = 8, tp = 1: mesh dp=? x pp=8: the world's 4 ranks are not divisible by 8", NULL);
    with(&l, "servers=2");
    refused(&l, 2, "parameter server: 2 servers among 2 ranks leaves 0 workers", NULL);
    with(&l, "servers=3");
    refused(&l, 1, "parameter server: 3 servers among 1 ranks leaves -2 workers", NULL);
    with(&l, "dp=3 tp=2");
    refused(&l, 8, "key 'dp' = 3, but the world leaves dp 4: 8 workers / (pp 1 x tp 2)", NULL);
    with(&l, "dp=3 servers=2");
    refused(&l, 6, "key 'dp' = 3, but the world leaves dp 4: 4 workers (the world's 6 ranks less 2 servers) / (pp 1 x tp 1)",
            NULL);
    with(&l, "dp=2");
    refused(&l, 1, "key 'dp' = 2, but the world leaves dp 1: 1 worker / (pp 1 x tp 1)", NULL);

    /* what is allowed, and the data-parallel width the world leaves */
    accepted("tp=2 pp=2", 8, 2);
    accepted("device=emu tp=2 pp=2 zero_stage=2", 8, 2); /* the strategies on a device (issue 46) */
    accepted("device=cuda zero_stage=1", 4, 4);
    accepted("device=emu zero_stage=3", 2, 2);
    accepted("device=cuda zero_stage=3 grad_accumulation=2", 4, 4);
    accepted("dp=2 tp=2 pp=2", 8, 2);
    accepted("servers=2", 6, 4);
    accepted("servers=2 dp=4 sync=ssp staleness=0", 6, 4);
    accepted("servers=1 sync=asp", 2, 1);
    accepted("zero_stage=1", 1, 1);  /* ZeRO-1 on one rank, as today */
    accepted("zero_stage=1 tp=2 pp=2", 8, 2);
    accepted("zero_stage=2 tp=2", 4, 2);
    accepted("zero_stage=2 pp=2 pipeline_schedule=gpipe", 4, 2);
    accepted("zero_stage=3", 4, 4);
    accepted("zero_stage=3 offload=disk", 2, 2);
    accepted("pp=2 pipeline_schedule=interleaved micro_batches=3 grad_accumulation=2", 2, 1);
    accepted("pp=1 pipeline_schedule=interleaved micro_batches=3", 3, 3); /* no pipeline: nothing to interleave */
    accepted("tp=2 sequence_parallel=true grad_compression=bf16 precision=bf16", 2, 1);
    accepted("device=cuda precision=bf16", 1, 1);
    accepted("dp=5", 0, 5);
    accepted("tp=3", 0, 0);
}

static void test_describe(void)
{
    dt_layout l;
    char buf[256];
    with(&l, "dp=2 pp=2 tp=2 zero_stage=1 micro_batches=4 recompute=blocks precision=bf16");
    EXPECT_STR(dt_layout_describe(&l, buf, sizeof buf), "dp 2 x pp 2 x tp 2, ZeRO-1, 1f1b (4 micro-batches), recompute blocks, bf16");
    dt_layout_default(&l);
    EXPECT_STR(dt_layout_describe(&l, buf, sizeof buf), "dp auto, f32");
    with(&l, "servers=2 sync=ssp staleness=3 grad_accumulation=2");
    EXPECT_STR(dt_layout_describe(&l, buf, sizeof buf),
               "dp auto + 2 servers, ssp (staleness 3), 1 micro-batch x 2 accumulated, f32");
    with(&l, "pp=4 pipeline_schedule=interleaved virtual_stages=3 micro_batches=8 tp=2 sequence_parallel=true "
             "zero_stage=2 offload=disk recompute=all grad_compression=f16 bucket_mb=4");
    EXPECT_STR(dt_layout_describe(&l, buf, sizeof buf),
               "dp auto x pp 4 x tp 2 (sequence parallel), ZeRO-2, offload disk, interleaved x3 (8 micro-batches), "
               "recompute all, f32, f16 gradients, 4 MiB buckets");
    with(&l, "device=cuda:1");
    EXPECT_STR(dt_layout_describe(&l, buf, sizeof buf), "dp auto, f32, on cuda:1");
    /* a short buffer: cut, ended, nothing written past it */
    char small[10];
    memset(small, '#', sizeof small);
    with(&l, "dp=2 pp=2 tp=2 zero_stage=1");
    EXPECT_STR(dt_layout_describe(&l, small, 8), "dp 2 x ");
    EXPECT_EQ(small[8], '#');
    EXPECT_STR(dt_layout_describe(&l, small, 0), "");
}

int main(void)
{
    test_defaults();
    test_set_get();
    test_set_refusals();
    test_json();
    test_sets();
    test_check();
    test_describe();
    return CHECK_DONE("test_layout");
}
