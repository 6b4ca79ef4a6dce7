/* dtrain: train, evaluate and sample models.  See dtrain --help and docs/dtrain.md. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain_cli.h"

static const char usage[] =
    "usage: dtrain COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  train --config FILE.json [--set key=value ...] [--resume CHECKPOINT|DIR|auto] [--overwrite]\n"
    "        train a model; prints a progress line per log_interval (step, loss, lr,\n"
    "        grad norm, samples/s or tokens/s, ETA), evaluates, writes checkpoints and a\n"
    "        JSON-lines metrics file when configured. --resume continues a run exactly\n"
    "        (CHECKPOINT: a step directory, or a checkpoint_dir to take the newest).\n"
    "  eval CHECKPOINT\n"
    "        loss and accuracy of a checkpoint on the whole evaluation split\n"
    "  generate CHECKPOINT [--prompt TEXT] [--tokens N] [--temperature T] [--seed S]\n"
    "        sample text from a gpt checkpoint (temperature 0: greedy; default 0.8)\n"
    "  report METRICS.jsonl [-o REPORT.html]\n"
    "        a self-contained HTML page of a metrics file: loss, learning rate, grad\n"
    "        norm and throughput against step, and a summary (dtrain report --help)\n"
    "  plan --config FILE.json -n N [--nodes K] [--memory-limit M] [--links FILE] [--top K] [--json]\n"
    "        predict each layout's step time and memory on N ranks from this machine's\n"
    "        measured costs; print the fastest that fit (dtrain plan --help)\n"
    "  timeline TRACE.json [-o PAGE.html] [--from-step N | --start-ms T ...]\n"
    "        a self-contained HTML page drawing a window of a dtrun --timeline file: a\n"
    "        lane per rank and thread, spans coloured by category, tooltips with their\n"
    "        args; by default two steps from the middle (dtrain timeline --help)\n"
    "  timeline --overlap TRACE.json [TRACE.json.node1 ...]\n"
    "        per training step, how long each rank waited for its gradient buckets\n"
    "        after its backward: a slower rank's backward, or communication\n"
    "\n"
    "options (--opt VALUE or --opt=VALUE):\n"
    "  -c, --config FILE      train: the configuration (a flat JSON object)\n"
    "  -s, --set KEY=VALUE    train: override one key (repeatable; each key once)\n"
    "  -r, --resume WHERE     train: continue from a step directory, a checkpoint_dir\n"
    "                         (its newest good checkpoint) or auto (checkpoint_dir)\n"
    "      --overwrite        train: checkpoint_dir holds another run's checkpoints:\n"
    "                         delete them first (without it, such a run is refused)\n"
    "  -p, --prompt TEXT      generate: the text to continue (default: a new line)\n"
    "  -n, --tokens N         generate: bytes to sample (default 200, at most 1048576)\n"
    "  -t, --temperature T    generate: 0 greedy .. 100 (default 0.8)\n"
    "      --seed S           generate: sampling seed (default 1)\n"
    "  eval and generate run on DT_DEVICE (cpu unless set: DT_DEVICE=cuda for a GPU)\n"
    "  -h, --help             this help\n"
    "      --version          print the version\n"
    "\n"
    "examples:\n"
    "  dtrain train --config configs/mlp.json\n"
    "  dtrain train --config configs/textclf.json     (fortune -> category, Adagrad)\n"
    "  dtrain train --config=configs/gpt-mini.json --set steps=500 --set checkpoint_dir=ckpt\n"
    "  dtrain generate ckpt --prompt 'The ' --tokens 200\n"
    "\n";

static int help(FILE *to, int code)
{
    fputs(usage, to);
    dtrain_config_help(to);
    return code;
}

static bool number(const char *text, const char *what, long long *out)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || !*text || v < 0) {
        fprintf(stderr, "dtrain: %s '%s' is not a non-negative integer\n", what, text);
        return false;
    }
    *out = v;
    return true;
}

typedef struct {
    const char *config, *resume, *prompt;
    char **sets;
    int nsets;
    bool overwrite;
    long long tokens, seed;
    double temperature;
    const char *train_only, *generate_only; /* an option given that only that command takes */
} cli;

static int cmd_train(cli *a)
{
    if (a->generate_only) {
        fprintf(stderr, "dtrain train: %s is an option of generate (see dtrain --help)\n", a->generate_only);
        return 2;
    }
    if (!a->config && !a->resume) {
        fprintf(stderr, "dtrain train: --config FILE is required (see dtrain --help)\n");
        return 2;
    }
    dtrain_config c;
    if (a->config) {
        if (dtrain_config_load(a->config, a->sets, a->nsets, &c) != DT_OK)
            return 2;
    } else { /* resume alone: the checkpoint's own configuration, with --set applied */
        char dir[2048];
        dt_ckpt_progress pr;
        if (dtrain_checkpoint_open(a->resume, 0, dir, sizeof dir, &c, &pr) != DT_OK)
            return 1;
        if (dtrain_config_apply_sets(&c, a->sets, a->nsets) != DT_OK || dtrain_config_validate(&c) != DT_OK)
            return 2;
    }
    /* --resume auto, and every restart under dtrun --max-restarts: the newest
     * complete checkpoint in checkpoint_dir when there is one. */
    const char *resume = a->resume, *restart = getenv("DT_RESTART");
    bool restarted = restart && atoi(restart) > 0; /* dt_env_check validated it */
    if ((resume && !strcmp(resume, "auto")) || (!resume && restarted)) {
        if (!c.checkpoint_dir[0] && resume) {
            fprintf(stderr, "dtrain train: --resume auto needs checkpoint_dir in the configuration\n");
            return 2;
        }
        resume = c.checkpoint_dir[0] && dt_ckpt_newest(c.checkpoint_dir) >= 0 ? c.checkpoint_dir : NULL;
        bool snapshots = c.memory_checkpoint_interval > 0 && getenv("DT_SNAPSHOT_DIR"); /* (snapshot.c says) */
        if (!resume && restarted && !snapshots && (!getenv("DT_RANK") || atoi(getenv("DT_RANK")) == 0))
            printf("restart %s: no checkpoint to resume from%s; training from the start\n", restart,
                   c.checkpoint_dir[0] ? " yet" : " (no checkpoint_dir configured)");
    }
    return dtrain_train(&c, resume, a->overwrite);
}

static int cmd_generate(cli *a, const char *checkpoint)
{
    if (a->train_only) {
        fprintf(stderr, "dtrain generate: %s is an option of train (see dtrain --help)\n", a->train_only);
        return 2;
    }
    return dtrain_generate(checkpoint, a->prompt ? a->prompt : "", a->tokens, a->temperature,
                           (uint64_t)a->seed);
}

/* OpenBLAS picks its kernels when it loads: if it would pick slower ones than
 * this CPU allows, run again with OPENBLAS_CORETYPE set (once: the variable is
 * then set, so the hint is NULL).  The program's own path, not
 * /proc/self/exe: the kernel names the process after the file executed, and
 * ps, top, pgrep and killall should find "dtrain", not "exe"; argv stays as
 * given.  When that path no longer holds this program (deleted or replaced
 * since it started), or the exec fails, carry on with what we have. */
static void use_fastest_blas(char **argv)
{
    const char *core = dt_blas_coretype_hint();
    if (!core)
        return;
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self);
    struct stat path_st, exe_st;
    if (n <= 0 || n >= (ssize_t)sizeof self)
        return;
    self[n] = '\0';
    if (stat(self, &path_st) != 0 || stat("/proc/self/exe", &exe_st) != 0 || path_st.st_dev != exe_st.st_dev ||
        path_st.st_ino != exe_st.st_ino)
        return;
    if (setenv("OPENBLAS_CORETYPE", core, 1) != 0)
        return;
    execv(self, argv);
    unsetenv("OPENBLAS_CORETYPE");
}

int main(int argc, char **argv)
{
    dtrain_phase("started");
    dtrain_memory_start();
    use_fastest_blas(argv);
    if (argc < 2)
        return help(stderr, 2);
    enum { OVERWRITE = 1000, SEED, VERSION };
    static const struct option longopts[] = {
        {"config", required_argument, 0, 'c'},
        {"set", required_argument, 0, 's'},
        {"resume", required_argument, 0, 'r'},
        {"overwrite", no_argument, 0, OVERWRITE},
        {"prompt", required_argument, 0, 'p'},
        {"tokens", required_argument, 0, 'n'},
        {"temperature", required_argument, 0, 't'},
        {"seed", required_argument, 0, SEED},
        {"help", no_argument, 0, 'h'},
        {"version", no_argument, 0, VERSION},
        {0, 0, 0, 0},
    };
    if (argc > 1 && !strcmp(argv[1], "report")) /* its own options (-o) */
        return dtrain_report(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "plan"))
        return dtrain_plan(argc - 1, argv + 1);
    if (argc > 1 && !strcmp(argv[1], "timeline"))
        return dtrain_timeline(argc - 1, argv + 1);
    cli a = {.tokens = 200, .seed = 1, .temperature = 0.8};
    a.sets = calloc((size_t)argc, sizeof *a.sets);
    int code = -1, opt;
    opterr = 0; /* our own messages, naming the option */
    while (code < 0 && (opt = getopt_long(argc, argv, ":c:s:r:p:n:t:h", longopts, NULL)) != -1) {
        char *end;
        switch (opt) {
        case 'c':
            a.config = optarg;
            a.train_only = "--config";
            break;
        case 's':
            a.sets[a.nsets++] = optarg;
            a.train_only = "--set";
            break;
        case 'r':
            a.resume = optarg;
            a.train_only = "--resume";
            break;
        case OVERWRITE:
            a.overwrite = true;
            a.train_only = "--overwrite";
            break;
        case 'p':
            a.prompt = optarg;
            a.generate_only = "--prompt";
            break;
        case 'n':
            a.generate_only = "--tokens";
            code = number(optarg, "--tokens", &a.tokens) ? -1 : 2;
            if (code < 0 && a.tokens > (1 << 20)) { /* a forward pass a byte: a million is hours on a CPU */
                fprintf(stderr, "dtrain: --tokens %lld is above the limit of %d\n", a.tokens, 1 << 20);
                code = 2;
            }
            break;
        case SEED:
            a.generate_only = "--seed";
            code = number(optarg, "--seed", &a.seed) ? -1 : 2;
            break;
        case 't':
            a.generate_only = "--temperature";
            a.temperature = strtod(optarg, &end);
            if (!*optarg || *end || !(a.temperature >= 0 && a.temperature <= 100)) {
                fprintf(stderr, "dtrain: --temperature '%s' must be a number in [0, 100]\n", optarg);
                code = 2;
            }
            break;
        case 'h':
            code = help(stdout, 0);
            break;
        case VERSION:
            printf("dtrain %s\n", DTRAIN_VERSION);
            code = 0;
            break;
        case ':':
            fprintf(stderr, "dtrain: %s needs a value (see dtrain --help)\n", argv[optind - 1]);
            code = 2;
            break;
        default:
            fprintf(stderr, "dtrain: unexpected option '%s' (see dtrain --help)\n", argv[optind - 1]);
            code = 2;
        }
    }
    if (code < 0 && dt_env_check() != DT_OK) {
        fprintf(stderr, "dtrain: %s\n", dt_last_error());
        code = 2;
    }
    /* The command: the first argument that is not an option (getopt moved it
     * after them); a lone --config means train. */
    const char *cmd = optind < argc ? argv[optind] : a.config ? "train" : NULL;
    int rest = optind < argc ? argc - optind - 1 : 0; /* arguments after the command */
    char **args = argv + optind + 1;
    if (code >= 0) {
    } else if (!cmd || !strcmp(cmd, "help")) {
        code = help(cmd ? stdout : stderr, cmd ? 0 : 2);
    } else if (!strcmp(cmd, "train")) {
        if (rest > 0) {
            fprintf(stderr, "dtrain train: unexpected argument '%s' (see dtrain --help)\n", args[0]);
            code = 2;
        } else
            code = cmd_train(&a);
    } else if (!strcmp(cmd, "eval") || !strcmp(cmd, "generate")) {
        if (rest != 1) {
            fprintf(stderr, "dtrain %s: %s (see dtrain --help)\n", cmd,
                    rest == 0 ? "CHECKPOINT is required" : "one CHECKPOINT only");
            code = 2;
        } else if (!strcmp(cmd, "eval") && (a.train_only || a.generate_only)) {
            fprintf(stderr, "dtrain eval: %s is not an option of eval\n",
                    a.train_only ? a.train_only : a.generate_only);
            code = 2;
        } else
            code = !strcmp(cmd, "eval") ? dtrain_eval(args[0]) : cmd_generate(&a, args[0]);
    } else {
        fprintf(stderr, "dtrain: unknown command '%s' (train, eval, generate, plan, report, timeline; see dtrain --help)\n",
                cmd);
        code = 2;
    }
    free(a.sets);
    return code;
}
