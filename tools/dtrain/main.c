/* dtrain: train, evaluate and sample models.  See dtrain --help and docs/dtrain.md. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dtrain_cli.h"

static const char usage[] =
    "usage: dtrain COMMAND [options]\n"
    "\n"
    "commands:\n"
    "  train --config FILE.json [--set key=value ...] [--resume CHECKPOINT]\n"
    "        train a model; prints a progress line per log_interval (step, loss, lr,\n"
    "        grad norm, samples/s or tokens/s, ETA), evaluates, writes checkpoints and a\n"
    "        JSON-lines metrics file when configured. --resume continues a run exactly\n"
    "        (CHECKPOINT: a step directory, or a checkpoint_dir to take the newest).\n"
    "  eval CHECKPOINT\n"
    "        loss and accuracy of a checkpoint on the evaluation split\n"
    "  generate CHECKPOINT [--prompt TEXT] [--tokens N] [--temperature T] [--seed S]\n"
    "        sample text from a gpt checkpoint (temperature 0: greedy; default 0.8)\n"
    "\n"
    "examples:\n"
    "  dtrain train --config configs/mlp.json\n"
    "  dtrain train --config configs/gpt-mini.json --set steps=500 --set checkpoint_dir=ckpt\n"
    "  dtrain generate ckpt --prompt 'The ' --tokens 200\n"
    "\n";

static int help(FILE *to, int code)
{
    fputs(usage, to);
    dtrain_config_help(to);
    return code;
}

static long long number(const char *text, const char *what)
{
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < 0) {
        fprintf(stderr, "dtrain: %s '%s' is not a non-negative integer\n", what, text);
        exit(2);
    }
    return v;
}

static int cmd_train(int argc, char **argv)
{
    const char *config = NULL, *resume = NULL;
    char **sets = calloc((size_t)argc, sizeof *sets);
    int nsets = 0;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--config") && i + 1 < argc)
            config = argv[++i];
        else if (!strcmp(argv[i], "--set") && i + 1 < argc)
            sets[nsets++] = argv[++i];
        else if (!strcmp(argv[i], "--resume") && i + 1 < argc)
            resume = argv[++i];
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
            return help(stdout, 0);
        else {
            fprintf(stderr, "dtrain train: unexpected argument '%s' (see dtrain --help)\n", argv[i]);
            return 2;
        }
    }
    if (!config && !resume) {
        fprintf(stderr, "dtrain train: --config FILE is required (see dtrain --help)\n");
        return 2;
    }
    dtrain_config c;
    if (config) {
        if (dtrain_config_load(config, sets, nsets, &c) != DT_OK)
            return 2;
    } else { /* resume alone: the checkpoint's own configuration, with --set applied */
        char dir[2048];
        dtrain_progress pr;
        if (dtrain_checkpoint_open(resume, dir, sizeof dir, &c, &pr) != DT_OK)
            return 1;
        cJSON *j = dtrain_config_to_json(&c);
        for (int i = 0; i < nsets; i++) {
            char *eq = strchr(sets[i], '=');
            if (!eq)
                continue;
            *eq = '\0';
            cJSON *v = cJSON_Parse(eq + 1);
            cJSON_ReplaceItemInObject(j, sets[i], v ? v : cJSON_CreateString(eq + 1));
            *eq = '=';
        }
        dt_status s = dtrain_config_from_json(j, "--set", &c);
        cJSON_Delete(j);
        if (s != DT_OK)
            return 2;
    }
    free(sets);
    /* --resume auto, and every restart under dtrun --max-restarts: the newest
     * complete checkpoint in checkpoint_dir when there is one. */
    const char *restart = getenv("DT_RESTART");
    bool restarted = restart && atoi(restart) > 0;
    if ((resume && !strcmp(resume, "auto")) || (!resume && restarted)) {
        if (!c.checkpoint_dir[0] && resume) {
            fprintf(stderr, "dtrain train: --resume auto needs checkpoint_dir in the configuration\n");
            return 2;
        }
        resume = c.checkpoint_dir[0] && dtrain_checkpoint_exists(c.checkpoint_dir) ? c.checkpoint_dir : NULL;
        if (!resume && restarted && (!getenv("DT_RANK") || atoi(getenv("DT_RANK")) == 0))
            printf("restart %s: no checkpoint to resume from%s; training from the start\n", restart,
                   c.checkpoint_dir[0] ? " yet" : " (no checkpoint_dir configured)");
    }
    return dtrain_train(&c, resume);
}

static int cmd_generate(int argc, char **argv)
{
    if (argc < 3 || argv[2][0] == '-')
        return help(stderr, 2);
    const char *prompt = "";
    long long tokens = 200, seed = 1;
    double temperature = 0.8;
    for (int i = 3; i < argc; i++) {
        if (!strcmp(argv[i], "--prompt") && i + 1 < argc)
            prompt = argv[++i];
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc)
            tokens = number(argv[++i], "--tokens");
        else if (!strcmp(argv[i], "--seed") && i + 1 < argc)
            seed = number(argv[++i], "--seed");
        else if (!strcmp(argv[i], "--temperature") && i + 1 < argc) {
            char *end;
            temperature = strtod(argv[++i], &end);
            if (*end || temperature < 0 || temperature > 100) {
                fprintf(stderr, "dtrain: --temperature '%s' must be a number in [0, 100]\n", argv[i]);
                return 2;
            }
        } else {
            fprintf(stderr, "dtrain generate: unexpected argument '%s'\n", argv[i]);
            return 2;
        }
    }
    return dtrain_generate(argv[2], prompt, tokens, temperature, (uint64_t)seed);
}

/* OpenBLAS picks its kernels when it loads: if it would pick slower ones than
 * this CPU allows, run again with OPENBLAS_CORETYPE set (once: the variable is
 * then set, so the hint is NULL). */
static void use_fastest_blas(char **argv)
{
    const char *core = dt_blas_coretype_hint();
    if (!core || setenv("OPENBLAS_CORETYPE", core, 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    unsetenv("OPENBLAS_CORETYPE"); /* exec failed: carry on with what we have */
}

int main(int argc, char **argv)
{
    use_fastest_blas(argv);
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help"))
        return help(argc < 2 ? stderr : stdout, argc < 2 ? 2 : 0);
    if (!strcmp(argv[1], "--version")) {
        printf("dtrain %s\n", DTRAIN_VERSION);
        return 0;
    }
    if (!strcmp(argv[1], "train"))
        return cmd_train(argc, argv);
    if (!strcmp(argv[1], "eval")) {
        if (argc != 3)
            return help(stderr, 2);
        return dtrain_eval(argv[2]);
    }
    if (!strcmp(argv[1], "generate"))
        return cmd_generate(argc, argv);
    fprintf(stderr, "dtrain: unknown command '%s' (train, eval, generate; see dtrain --help)\n", argv[1]);
    return 2;
}
