/* dtrain trainer internals: configuration, training loop, checkpoints. */
#ifndef DTRAIN_CLI_H
#define DTRAIN_CLI_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>

#include "dtrain/dtrain.h"

typedef struct {
    char model[16]; /* mlp | cnn | gpt */
    int64_t mlp_sizes[8];
    int mlp_nsizes;
    int64_t conv1_channels, conv2_channels;
    int64_t vocab, context, layers, heads, dim;
    double dropout;
    char data[16]; /* fashion-mnist | text */
    char data_path[1024];
    int64_t batch_size, steps, seed, threads, grad_accumulation;
    char grad_compression[8]; /* none | f16 | bf16 */
    double bucket_mb, stop_at_accuracy;
    char optimizer[8]; /* sgd | adamw */
    double lr, min_lr, momentum, weight_decay, beta1, beta2, eps, grad_clip;
    bool nesterov, checkpoint_initial;
    char schedule[16]; /* constant | cosine */
    int64_t warmup_steps, log_interval, eval_interval, eval_batches, checkpoint_interval;
    char checkpoint_dir[1024], metrics_file[1024];
} dtrain_config;

/* A whole file as a NUL-terminated string (caller frees); NULL with errno set. */
char *dtrain_read_file(const char *path);

/* Defaults, then the JSON file (may be NULL), then each "key=value". */
dt_status dtrain_config_load(const char *file, char **sets, int nsets, dtrain_config *c);
/* The effective configuration as JSON (caller deletes). */
cJSON *dtrain_config_to_json(const dtrain_config *c);
dt_status dtrain_config_from_json(const cJSON *json, const char *origin, dtrain_config *c);
void dtrain_config_help(FILE *to);

/* What a checkpoint carries besides the tensors. */
typedef struct {
    int64_t step, epoch, position, optimizer_steps;
    dt_rng rng;
} dtrain_progress;

/* Write <dir>/step-NNNNNNNN/ (tensors first, manifest last). */
dt_status dtrain_checkpoint_save(const char *dir, const dtrain_config *c, dt_params *p, dt_optimizer *o,
                                 const dtrain_progress *pr, char *written, size_t written_len);
/* Resolve `path` (a step directory, or a root holding step-* directories: the
 * newest complete one), verify every file's size and checksum, read the
 * configuration from its manifest. */
dt_status dtrain_checkpoint_open(const char *path, char *step_dir, size_t len, dtrain_config *c, dtrain_progress *pr);
/* Load weights (and optimizer state when o is non-NULL) from a verified step directory. */
dt_status dtrain_checkpoint_load(const char *step_dir, dt_params *p, dt_optimizer *o);

/* Commands. */
int dtrain_train(const dtrain_config *c, const char *resume);
int dtrain_eval(const char *checkpoint);
int dtrain_generate(const char *checkpoint, const char *prompt, int64_t tokens, double temperature, uint64_t seed);

/* Shared by the commands: the model and data a configuration describes. */
dt_status dtrain_build_model(const dtrain_config *c, dt_model **m);

#endif
