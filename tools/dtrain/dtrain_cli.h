/* dtrain trainer internals: configuration, training loop, checkpoints. */
#ifndef DTRAIN_CLI_H
#define DTRAIN_CLI_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdio.h>

#include "dtrain/dtrain.h"

typedef struct {
    char model[16]; /* mlp | cnn | gpt | textclf */
    int64_t mlp_sizes[8];
    int mlp_nsizes;
    int64_t conv1_channels, conv2_channels;
    int64_t vocab, context, layers, heads, dim;
    int64_t buckets, classes, max_features; /* textclf */
    double dropout;
    char data[16]; /* fashion-mnist | text | fortunes */
    char data_path[1024];
    int64_t batch_size, steps, seed, threads, grad_accumulation, tp;
    int64_t pp, micro_batches, virtual_stages, zero_stage, tp_copies;
    char pipeline_schedule[16]; /* gpipe | 1f1b | interleaved */
    char grad_compression[16]; /* none | f16 | bf16 | powersgd | topk ("auto" is resolved when the configuration is checked) */
    int64_t powersgd_rank, compress_start_step;
    double topk_fraction;
    char precision[8];        /* f32 | bf16 */
    char device[16];          /* cpu | cuda | cuda:N */
    bool tf32;                /* device cuda: TF32 f32 matrix products */
    double bucket_mb, stop_at_accuracy;
    char optimizer[8]; /* sgd | adamw | adagrad */
    double lr, min_lr, momentum, weight_decay, beta1, beta2, eps, grad_clip;
    double adagrad_eps, lr_decay, initial_accumulator_value;
    bool nesterov, checkpoint_initial, sequence_parallel;
    char schedule[16]; /* constant | cosine */
    int64_t warmup_steps, log_interval, eval_interval, eval_batches, checkpoint_interval, checkpoint_keep;
    int64_t memory_checkpoint_interval; /* steps between snapshots into dtrun's memory (0: off) */
    double checkpoint_seconds;
    char checkpoint_dir[1024], metrics_file[1024];
    char recompute[16];  /* off | blocks | all */
    char layout[8];      /* manual | auto (dtrain plan's choice for the job's world) */
    char no_decay[256];  /* glob patterns exempt from weight decay, or "none" */
    char memory_limit[32]; /* model-state bytes allowed per rank ("2GiB"; "" or "0": the cgroup's, if any) */
    char offload[8];       /* none | disk: the optimizer state in a file */
    char offload_dir[1024];
    /* parameter server: the last `servers` ranks serve (0: none) */
    int64_t servers, staleness, straggler_rank;
    double straggler_ms, straggler_prob;
    char sync[8]; /* bsp | asp | ssp */
    char ps_clock_log[1024];
    /* Per key (config.c's table, in its order), whether the user gave it, in
     * the file or by --set: 0 no, DTRAIN_GIVEN_DEFAULT at its default value,
     * DTRAIN_GIVEN_CHANGED at another.  A checkpoint's own configuration
     * gives nothing. */
    unsigned char given[128];
} dtrain_config;
enum { DTRAIN_GIVEN_DEFAULT = 1, DTRAIN_GIVEN_CHANGED = 2 };

/* Defaults, then the JSON file (may be NULL), then each "key=value". */
dt_status dtrain_config_load(const char *file, char **sets, int nsets, dtrain_config *c);
/* Apply "key=value" overrides (a key given twice is an error naming both). */
dt_status dtrain_config_apply_sets(dtrain_config *c, char **sets, int nsets);
/* The checks across keys (model and data agree, heads divide dim, ...). */
dt_status dtrain_config_validate(const dtrain_config *c);
/* The keys the user gave that do nothing in this configuration (c->servers
 * the effective count, dtrun --servers included; docs/dtrain.md, "Keys that
 * do nothing"): one that would change what is trained, given at a value
 * other than its default, is refused (printed; DT_ERR_INVALID); with warn,
 * each of the others gets one warning line on stderr. */
dt_status dtrain_config_check_unused(const dtrain_config *c, bool warn);
/* The keys that shape the model (model, and mlp_sizes / conv channels / gpt
 * sizes) as JSON: the safetensors metadata (caller deletes). */
cJSON *dtrain_model_config_json(const dtrain_config *c);
/* The effective configuration as JSON (caller deletes). */
cJSON *dtrain_config_to_json(const dtrain_config *c);
dt_status dtrain_config_from_json(const cJSON *json, const char *origin, dtrain_config *c);
void dtrain_config_help(FILE *to);

/* Checkpoints (the library's dt_ckpt_*, dtrain/ckpt.h) with the trainer's
 * configuration in their manifest.  Resolve `path` (a step directory, or a
 * root holding step-* directories: the newest complete one that verifies,
 * falling back to older ones and saying so), verify the manifest's checksum
 * and values (train_samples > 0: the sampler position against that epoch
 * size), the tensors' shapes against the model its configuration builds and
 * every file's size and checksum, read the configuration into c.  Every
 * failure is printed. */
dt_status dtrain_checkpoint_open(const char *path, int64_t train_samples, char *step_dir, size_t len,
                                 dtrain_config *c, dt_ckpt_progress *pr);
/* The background writer into c->checkpoint_dir, keeping c->checkpoint_keep,
 * each manifest carrying c; it prints each outcome.  stream_model: the
 * caller writes model.safetensors itself (ZeRO-3; dt_ckpt_writer_config).
 * kept_step: the step of the checkpoint already on disk that a failed write
 * leaves in place (the one resumed from, in kept_dir), -1 for none. */
dt_status dtrain_checkpoint_writer_start(const dtrain_config *c, dt_params *p, dt_optimizer *o, bool stream_model,
                                         int64_t kept_step, const char *kept_dir, dt_ckpt_writer **out);

/* A progress line on stdout, prefixed with a UTC timestamp (milliseconds). */
void dtrain_progress_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A restart phase mark (DT_RESTART_TRACE, dt_phase_mark) naming this rank
 * and generation: "rank R gen G WHAT". */
void dtrain_phase(const char *what);

/* "512MiB", "1.5GiB", "2GB", "1000000" (bytes) into *bytes (memory.c). */
dt_status dtrain_parse_bytes(const char *text, double *bytes);
/* This process's cgroup memory limit in bytes (the tightest of its
 * cgroup's and its parents'), 0 when none. */
double dtrain_cgroup_memory_limit(void);
/* Print the model states per rank by kind for c's zero_stage over nranks
 * data-parallel ranks (lead only) and check them against the memory limit:
 * 0, or 2 with a message naming the stage that fits. */
int dtrain_memory_plan(const dtrain_config *c, dt_model *m, int nranks, bool lead);
/* What rank 0 allocated for model states, by kind, measured from the
 * registry's buffers, the optimizer's state and the strategy's own (ZeRO's
 * shard and communication buffers at their most), and its peak RSS. */
void dtrain_memory_report(dt_model *m, dt_optimizer *o, dt_strategy *s, dt_ckpt_writer *w, double data_bytes,
                          size_t act_peak);
/* memory_account.c: note the anonymous memory at start (first thing in
 * main), and print the end-of-run accounting line: the peak RSS against
 * the parts measured one by one (model states' resident bytes, of
 * `allocated`, the checkpoints' copies and communication buffers as
 * dtrain_memory_report measured them, the data set's bytes, the activation
 * arenas' peak in use), with what is not attributed. */
void dtrain_memory_start(void);
void dtrain_memory_account(double model_states, double allocated, double copies, double comm_buffers,
                           double data_bytes, size_t act_in_use);

/* Before joining the job (layout.c): the configuration against the world's
 * size from the launcher's environment (servers among the ranks, the mesh's
 * dp x pp x tp, the pipeline's stages against the model's blocks), which
 * every rank computes alike: 0, or 2 with the reason printed once per host
 * (local rank 0; the other ranks exit with the same code quietly). */
int dtrain_check_world(const dtrain_config *c);
/* This rank's index among its host's ranks, from whichever launcher started
 * it (DT_LOCAL_RANK, OpenMPI's, PMI's, Slurm's); 0 without one. */
int dtrain_local_rank(void);

/* Commands. */
/* overwrite: checkpoint_dir may hold another run's checkpoints (removed first);
 * without it such a run is refused unless resuming. */
int dtrain_train(const dtrain_config *c, const char *resume, bool overwrite);
/* dtrun --monitor (monitor_log.c): DT_MONITOR_DIR/rank<R>.jsonl opened for
 * appending with a start record, or NULL when DT_MONITOR_DIR is unset (or the
 * file cannot be written: said once, training goes on). */
FILE *dtrain_monitor_open(int rank, int world, int64_t steps, const char *unit);
/* One record (a JSON line), flushed; f may be NULL. */
void dtrain_monitor_record(FILE *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* dtrain report METRICS.jsonl [-o FILE] (report.c). */
int dtrain_report(int argc, char **argv);
/* dtrain timeline TRACE.json [-o FILE] [window] (timeline_view.c). */
int dtrain_timeline(int argc, char **argv);
/* For the pages report.c and timeline_view.c draw: s with <, >, & and "
 * escaped; and a round tick step (1, 2 or 5 times a power of ten) giving
 * about n ticks over [lo, hi]. */
void dtrain_html_text(FILE *o, const char *s);
double dtrain_tick_step(double lo, double hi, int n);
/* Whether out names the same file as in (the same inode; out may not
 * exist yet): a page written there would replace its own input (report.c). */
bool dtrain_same_file(const char *in, const char *out);
/* Whether p's values (on the host) hold a NaN or an infinity, said naming
 * the parameter and step_dir (checkpoint.c): a checkpoint's checksums match
 * what was written, so a state that went bad before it was saved is caught
 * on loading, not trained or evaluated on. */
bool dtrain_params_not_finite(dt_params *p, const char *step_dir);
/* dtrain plan --config FILE -n N [...] (plan.c). */
int dtrain_plan(int argc, char **argv);
/* The trainer's arguments for layout l as a user pastes them: "--set tp=2
 * --set micro_batches=4" (one --set per key; dp left out, the world /
 * (tp x pp)), or "(the default layout)" (plan.c). */
void dtrain_layout_args(const dt_layout *l, char *buf, size_t len);
/* layout=auto, on every rank of the job once joined: the links probed,
 * rank 0 plans c's model for the job's ranks (its profile cached), and its
 * choice replaces c's tp, pp, zero_stage, micro_batches, pipeline_schedule,
 * virtual_stages, sequence_parallel, tp_copies and recompute on every rank; *predicted gets the plan's
 * step time.  Rank 0 prints the choice.  0, or the exit code. */
int dtrain_plan_auto(dtrain_config *c, dt_comm *job, double *predicted);
int dtrain_eval(const char *checkpoint);
int dtrain_generate(const char *checkpoint, const char *prompt, int64_t tokens, double temperature, uint64_t seed);

/* Shared by the commands and checkpoints: the model a configuration
 * describes (the failure printed). */
dt_status dtrain_build_model(const dtrain_config *c, dt_model **m);
/* device != cpu: the start line's device part (the lead's; the run moved
 * the model and the optimizer there). */
void dtrain_device_line(const dtrain_config *c);
/* device != cpu and several ranks: attach what carries the device's
 * buffers to job (DT_DEVICE_BACKEND; nccl_asked: DT_BACKEND=nccl was set,
 * the job joining on the native backend), before any split.  0, or the
 * exit code (the error printed). */
int dtrain_device_comm(const dtrain_config *c, dt_comm *job, bool nccl_asked);
/* The end of a run on a device: the device allocator's peak and the memory left (nothing on the cpu). */
void dtrain_device_end_line(const dtrain_config *c);
/* The configuration's layout keys as the library's layout, and its model
 * and optimizer keys as the recipe a run is built from (run_layout.c; the
 * recipe keeps c). */
void dtrain_layout_of(const dtrain_config *c, dt_layout *l);
/* The recipe's callbacks' state: the configuration, and whether the memory
 * plan refused the run (printed by it: the caller need not repeat it). */
typedef struct {
    const dtrain_config *c;
    bool memory_refused;
} dtrain_recipe_state;
void dtrain_recipe_of(const dtrain_config *c, dtrain_recipe_state *st, dt_run_recipe *r);


/* The description behind both (the failure printed). */
dt_status dtrain_describe_model(const dtrain_config *c, dt_comm *tp, dt_model_desc **d);
#endif
