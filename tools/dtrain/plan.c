/* dtrain plan: predict each layout's step time and memory for a job of N
 * ranks from this machine's measured block costs (dt_plan_profile_model,
 * cached per machine) and the links (a file, or the defaults), and print
 * the best that fit and the families ruled out.  And layout=auto: the same
 * plan made by rank 0 of a training job, its choice sent to every rank
 * before the strategy is built.  docs/planner.md has the model. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "plan_inputs.h"

static const char plan_usage[] =
    "usage: dtrain plan --config FILE.json -n N [options]\n"
    "\n"
    "Predict the step time and memory of each layout of N ranks (dp x tp x pp, ZeRO\n"
    "stages, micro-batches, pipeline schedules, recompute) from this machine's\n"
    "measured block costs, and print the fastest that fit, and why the others do not.\n"
    "\n"
    "  -c, --config FILE      the training configuration (model, batch_size, optimizer, threads)\n"
    "  -s, --set KEY=VALUE    override one key of it (repeatable)\n"
    "  -n, --ranks N          ranks of the job (>= 1)\n"
    "      --nodes K          hosts (default 1; the ranks fill them in order)\n"
    "      --machines M       the K hosts are network namespaces or containers of M\n"
    "                         machines like this one (default: each host a machine):\n"
    "                         a machine's ranks take turns on its cores\n"
    "      --memory-limit M   bytes per rank for model states and activations (\"2GiB\";\n"
    "                         default: the configuration's memory_limit, else this\n"
    "                         cgroup's limit shared by a host's ranks, else none)\n"
    "      --links FILE       link latencies and bandwidths (JSON, docs/planner.md);\n"
    "                         default intra-host 2 us / 5 GB/s, inter-host 50 us / 1.25 GB/s\n"
    "      --hardware FILE    project for other hardware (JSON, docs/planner.md) with\n"
    "      --model NAME       a built-in shape: gpt3-1.3b, gpt3-13b, gpt3-175b\n"
    "      --batch B          with --model: samples per rank's batch (default 1)\n"
    "      --top K            layouts to print (default 5)\n"
    "      --layout 'K=V ...'  predict this one layout (the trainer's --set words) instead\n"
    "                         of searching\n"
    "      --profile-fresh    measure again instead of reading the cached profile\n"
    "      --json             one JSON object instead of the table\n"
    "  -h, --help             this help\n"
    "\n"
    "On one host the profile also measures the job's ranks computing at once, and the\n"
    "cost model lets ranks that outnumber the cores take turns on them (a pipeline's\n"
    "idle stages leave theirs to the others: docs/planner.md).\n"
    "The profile is cached in $XDG_CACHE_HOME/dtrain (else ~/.cache/dtrain), one file per\n"
    "model, batch, threads, ranks per host, optimizer and CPU model.\n";

void dtrain_layout_args(const dt_layout *l, char *buf, size_t len)
{
    char sets[512];
    dt_layout words = *l;
    words.dp = 0; /* the trainer has no dp key: the world / (tp x pp) */
    dt_layout_to_sets(&words, sets, sizeof sets);
    if (!sets[0]) {
        snprintf(buf, len, "(the default layout)");
        return;
    }
    size_t at = 0;
    buf[0] = '\0';
    for (char *w = strtok(sets, " "); w && at < len; w = strtok(NULL, " ")) {
        int n = snprintf(buf + at, len - at, "%s--set %s", at ? " " : "", w);
        at += n > 0 ? (size_t)n : 0;
    }
}

static void print_estimate(int i, const dt_plan_estimate *e)
{
    char args[768], desc[256];
    dtrain_layout_args(&e->layout, args, sizeof args);
    dt_layout_describe(&e->layout, desc, sizeof desc);
    printf("%2d. %s\n    %s\n", i + 1, desc, args);
    printf("    predicted %.4f s/step = compute %.4f + bubble %.4f + tp %.4f + pp %.4f + dp %.4f + ps %.4f + "
           "recompute %.4f + optimizer %.4f (less overlap); %.1f samples/s\n",
           e->step_s, e->compute_s, e->bubble_s, e->tp_s, e->pp_s, e->dp_s, e->ps_s, e->recompute_s,
           e->optimizer_s, e->samples_per_s);
    printf("    memory %.1f MiB per rank (parameters %.1f, gradients %.1f, optimizer %.1f, buffers %.1f, "
           "activations %.1f): %s\n",
           e->memory_bytes / 1048576, e->params_bytes / 1048576, e->grads_bytes / 1048576,
           e->optimizer_bytes / 1048576, e->buffers_bytes / 1048576, e->activation_bytes / 1048576,
           e->fits ? "fits" : "does not fit");
}

static void print_json(const dt_plan_result *r)
{
    printf("{\"considered\": %d, \"valid\": %d, \"fitting\": %d, \"search_s\": %.6f, \"best\": [", r->considered,
           r->valid, r->fitting, r->search_s);
    for (int i = 0; i < r->nbest; i++) {
        char *e = dt_plan_estimate_json(&r->best[i]);
        printf("%s%s", i ? ", " : "", e ? e : "null");
        free(e);
    }
    printf("], \"rejected\": [");
    for (int i = 0; i < r->nrejected; i++) {
        cJSON *s = cJSON_CreateString(r->rejected[i]);
        char *t = s ? cJSON_PrintUnformatted(s) : NULL;
        printf("%s%s", i ? ", " : "", t ? t : "null");
        free(t);
        cJSON_Delete(s);
    }
    printf("]}\n");
}

/* --layout 'tp=2 pp=2 ...': that layout's prediction. */
static int predict_one(const dt_plan_inputs *in, const dtrain_config *c, const char *words, bool json)
{
    dt_layout l;
    dt_layout_default(&l);
    char *copy = strdup(words), *save = NULL;
    int code = copy ? 0 : 1;
    for (char *w = copy ? strtok_r(copy, " ", &save) : NULL; w && !code; w = strtok_r(NULL, " ", &save)) {
        char *eq = strchr(w, '=');
        if (!eq) {
            fprintf(stderr, "dtrain plan: --layout: '%s' is not key=value\n", w);
            code = 2;
        } else {
            *eq = 0;
            if (dt_layout_set(&l, w, eq + 1) != DT_OK) {
                fprintf(stderr, "dtrain plan: --layout: %s\n", dt_last_error());
                code = 2;
            }
        }
    }
    free(copy);
    dt_plan_estimate e;
    char why[512];
    dt_model_desc *d = NULL;
    if (!code && c && dtrain_describe_model(c, NULL, &d) != DT_OK)
        code = 2;
    if (!code && c && !dtrain_plan_runnable(c, &l, in->world, d, why, sizeof why)) {
        fprintf(stderr, "dtrain plan: --layout %s: this configuration cannot run it: %s\n", words, why);
        code = 2;
    }
    dt_model_desc_destroy(d);
    if (!code && dt_plan_layout(in, &l, &e) != DT_OK) {
        fprintf(stderr, "dtrain plan: --layout %s: %s\n", words, dt_last_error());
        code = 2;
    }
    if (!code && json) {
        char *j = dt_plan_estimate_json(&e);
        printf("%s\n", j ? j : "null");
        free(j);
    } else if (!code)
        print_estimate(0, &e);
    return code;
}

static bool positive(const char *text, const char *what, long long *out)
{
    char *end;
    long long v = strtoll(text, &end, 10);
    if (!*text || *end || v < 1 || v > 1 << 24) {
        fprintf(stderr, "dtrain plan: %s '%s' must be an integer >= 1\n", what, text);
        return false;
    }
    *out = v;
    return true;
}

int dtrain_plan(int argc, char **argv)
{
    enum { NODES = 1000, MACHINES, MEMORY, LINKS, HARDWARE, MODEL, BATCH, TOP, JSON, FRESH, LAYOUT };
    static const struct option longopts[] = {
        {"config", required_argument, 0, 'c'},   {"set", required_argument, 0, 's'},
        {"ranks", required_argument, 0, 'n'},    {"nodes", required_argument, 0, NODES},
        {"machines", required_argument, 0, MACHINES},
        {"memory-limit", required_argument, 0, MEMORY}, {"links", required_argument, 0, LINKS},
        {"hardware", required_argument, 0, HARDWARE}, {"model", required_argument, 0, MODEL},
        {"batch", required_argument, 0, BATCH},  {"top", required_argument, 0, TOP},
        {"json", no_argument, 0, JSON},          {"profile-fresh", no_argument, 0, FRESH},
        {"layout", required_argument, 0, LAYOUT}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    const char *config = NULL, *memory = NULL, *links = NULL, *hardware = NULL, *model = NULL, *one = NULL;
    char **sets = calloc((size_t)argc + 1, sizeof *sets);
    int nsets = 0, opt, code = -1;
    long long ranks = 0, nodes = 1, machines = 0, batch = 1, top = 5;
    bool nodes_given = false;
    bool json = false, fresh = false;
    optind = 1;
    opterr = 0;
    while (code < 0 && (opt = getopt_long(argc, argv, ":c:s:n:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'c': config = optarg; break;
        case 's': sets[nsets++] = optarg; break;
        case 'n': code = positive(optarg, "-n", &ranks) ? -1 : 2; break;
        case NODES:
            code = positive(optarg, "--nodes", &nodes) ? -1 : 2;
            nodes_given = true;
            break;
        case MACHINES: code = positive(optarg, "--machines", &machines) ? -1 : 2; break;
        case MEMORY: memory = optarg; break;
        case LINKS: links = optarg; break;
        case HARDWARE: hardware = optarg; break;
        case MODEL: model = optarg; break;
        case BATCH: code = positive(optarg, "--batch", &batch) ? -1 : 2; break;
        case TOP: code = positive(optarg, "--top", &top) ? -1 : 2; break;
        case JSON: json = true; break;
        case FRESH: fresh = true; break;
        case LAYOUT: one = optarg; break;
        case 'h': fputs(plan_usage, stdout); code = 0; break;
        case ':': fprintf(stderr, "dtrain plan: %s needs a value (see dtrain plan --help)\n", argv[optind - 1]); code = 2; break;
        default: fprintf(stderr, "dtrain plan: unexpected option '%s' (see dtrain plan --help)\n", argv[optind - 1]); code = 2;
        }
    }
    if (code < 0 && optind < argc) {
        fprintf(stderr, "dtrain plan: unexpected argument '%s' (see dtrain plan --help)\n", argv[optind]);
        code = 2;
    }
    if (code < 0 && !ranks) {
        fprintf(stderr, "dtrain plan: -n N (the job's ranks) is required (see dtrain plan --help)\n");
        code = 2;
    }
    if (code < 0 && !config && !model) {
        fprintf(stderr, "dtrain plan: --config FILE (or --hardware FILE --model NAME) is required\n");
        code = 2;
    }
    if (code < 0 && !!hardware != !!model) {
        fprintf(stderr, "dtrain plan: --hardware and --model go together (a projection of a built-in shape)\n");
        code = 2;
    }
    if (code < 0 && ranks % nodes) {
        fprintf(stderr, "dtrain plan: -n %lld ranks do not fill --nodes %lld hosts equally\n", ranks, nodes);
        code = 2;
    }
    if (code < 0 && machines && (nodes % machines || hardware)) {
        fprintf(stderr, hardware ? "dtrain plan: --machines describes hosts of this machine, not a --hardware "
                                   "projection\n"
                                 : "dtrain plan: --nodes %lld hosts do not fill --machines %lld equally\n",
                nodes, machines);
        code = 2;
    }
    if (code >= 0) {
        free(sets);
        return code;
    }
    dtrain_config c;
    dt_plan_inputs in = {0};
    double limit = 0;
    if (config && dtrain_config_load(config, sets, nsets, &c) != DT_OK)
        code = 2;
    free(sets);
    if (code < 0 && !config)
        dtrain_config_load(NULL, NULL, 0, &c); /* the defaults: optimizer, no memory limit */
    const char *mem = memory ? memory : config ? c.memory_limit : "";
    int rpn = (int)(ranks / nodes);
    char cgroup[64] = "";
    if (code < 0 && mem[0] && dtrain_parse_bytes(mem, &limit) != DT_OK) {
        fprintf(stderr, "dtrain plan: --memory-limit '%s' is not a size (bytes, or a number with B, KiB, MiB, GiB, "
                        "KB, MB, GB)\n", mem);
        code = 2;
    } else if (code < 0 && !mem[0] && !hardware && (limit = dtrain_cgroup_memory_limit() / rpn) > 0) {
        snprintf(cgroup, sizeof cgroup, "%.0f MiB (this cgroup's, shared by %d ranks)", limit / 1048576, rpn);
        mem = cgroup; /* as the trainer: this host's ranks share their cgroup's limit */
    }
    dtrain_plan_default_links(&in.links, rpn);
    if (code < 0 && links) {
        if (dt_plan_links_read(links, &in.links) != DT_OK) {
            fprintf(stderr, "dtrain plan: --links %s: %s\n", links, dt_last_error());
            code = 2;
        } else
            in.links.ranks_per_node = rpn;
    }
    if (machines)
        in.links.ranks_per_machine = (int)(ranks / machines);
    /* the ranks that share this machine's cores: one host's, or one machine's of several namespace hosts */
    int sharing = in.links.ranks_per_machine > rpn ? in.links.ranks_per_machine : nodes == 1 ? rpn : 0;
    if (code < 0 && hardware) {
        in.world = (int)ranks;
        in.links.ranks_per_node = rpn;
        if (dt_plan_hardware_read(hardware, &in) != DT_OK) {
            fprintf(stderr, "dtrain plan: --hardware %s: %s\n", hardware, dt_last_error());
            code = 2;
        }
        int per_host = in.links.ranks_per_node; /* the file's devices_per_node */
        if (code < 0 && nodes_given && rpn > per_host) {
            fprintf(stderr, "dtrain plan: --nodes %lld puts %d ranks on a host of %s, which has %d devices "
                            "(devices_per_node)\n", nodes, rpn, hardware, per_host);
            code = 2;
        } else if (code < 0 && !nodes_given && ranks > per_host && ranks % per_host) {
            fprintf(stderr, "dtrain plan: -n %lld ranks do not fill hosts of %d devices (devices_per_node in %s); "
                            "give a multiple of %d, or --nodes\n", ranks, per_host, hardware, per_host);
            code = 2;
        } else if (code < 0 && !nodes_given) { /* the hosts the file describes, filled in order */
            nodes = ranks > per_host ? ranks / per_host : 1;
            rpn = (int)(ranks / nodes);
        }
        in.links.ranks_per_node = rpn;
        if (code < 0 && dt_plan_model_gpt(model, &in, batch, &in.model) != DT_OK) {
            fprintf(stderr, "dtrain plan: --model %s: %s\n", model, dt_last_error());
            code = 2;
        }
        c.batch_size = batch;
    } else if (code < 0) {
        int threads = (int)c.threads;
        if (!threads) { /* the job's: this host's cores shared by its ranks */
            long cores = dt_cores_available();
            int on = sharing > rpn ? sharing : rpn;
            threads = cores / on > 0 ? (int)(cores / on) : 1;
        }
        /* a job on this host: how its ranks share the cores measured and modelled (several hosts: the hosts are
         * others, their cores unknown) */
        if (dt_set_threads(threads) != DT_OK ||
            dtrain_plan_profile(&c, sharing ? sharing : 1, fresh, json, &in.model) != DT_OK)
            code = 2;
        else if (sharing)
            dtrain_plan_share_cores(&in, json);
    }
    if (code >= 0) {
        dt_plan_model_free(&in.model);
        return code;
    }
    double flops = in.flops_per_s, fixed_limit = hardware && !memory ? in.memory_limit : limit;
    dtrain_plan_inputs_of(&c, (int)ranks, fixed_limit, &in);
    in.flops_per_s = flops;
    if (one) {
        code = predict_one(&in, config ? &c : NULL, one, json);
        dt_plan_model_free(&in.model);
        return code;
    }
    dt_plan_result r = {0};
    /* more than asked: some may be layouts this configuration cannot run (the blocks do not know the heads) */
    dt_status s = dt_plan_search(&in, &(dt_plan_search_opts){.top = (int)top + 32, .nodes = (int)nodes,
                                                              .allow_recompute = true}, &r);
    dt_model_desc *d = NULL;
    if (config && (s == DT_OK || r.nbest) && dtrain_describe_model(&c, NULL, &d) != DT_OK)
        s = DT_ERR_INVALID;
    int kept = 0, refused = 0;
    char refusal[512] = "";
    for (int i = 0; i < r.nbest; i++) {
        char why[512];
        if (!config || dtrain_plan_runnable(&c, &r.best[i].layout, (int)ranks, d, why, sizeof why)) {
            if (kept < top)
                r.best[kept++] = r.best[i];
        } else if (!refused++)
            snprintf(refusal, sizeof refusal, "%s", why);
    }
    r.nbest = kept;
    dt_model_desc_destroy(d);
    if (s == DT_OK && !kept)
        s = DT_ERR_INVALID; /* (the search's message is not the reason: say it below) */
    if (s != DT_OK && !r.nrejected) {
        fprintf(stderr, "dtrain plan: %s\n", dt_last_error());
        dt_plan_model_free(&in.model);
        return 1;
    }
    if (json)
        print_json(&r);
    else {
        printf("plan: %s on %lld rank%s (%lld host%s), batch %lld per rank, memory limit %s; %d layouts considered, "
               "%d valid, %d fit (%.3f s)\n", hardware ? model : c.model, ranks, ranks == 1 ? "" : "s", nodes,
               nodes == 1 ? "" : "s", (long long)in.batch_size, fixed_limit > 0 ? mem[0] ? mem : "the hardware's" : "none",
               r.considered, r.valid, r.fitting, r.search_s);
        for (int i = 0; i < r.nbest; i++)
            print_estimate(i, &r.best[i]);
        for (int i = 0; i < r.nrejected; i++)
            printf("rejected: %s\n", r.rejected[i]);
        if (refused)
            printf("rejected: %d of the fastest for this configuration, e.g. %s\n", refused, refusal);
        if (s != DT_OK)
            printf("no layout fits: %s\n", kept || !refused ? dt_last_error() : refusal);
    }
    dt_plan_result_free(&r);
    dt_plan_model_free(&in.model);
    return s == DT_OK ? 0 : 1;
}
