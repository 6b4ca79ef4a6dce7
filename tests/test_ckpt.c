/* The checkpoint library (dtrain/ckpt.h) on its own, without the trainer:
 * a step written and read back to the bit, the newest complete step found
 * past torn and temporary directories, a corrupt manifest or file refused
 * naming it (and dt_ckpt_find falling back past it), the range checks, keep
 * K, clear, the background writer's reports, failures and flush, sharded
 * checkpoints, model.safetensors written range by range (ZeRO-3's), and
 * the files of pruned in-memory checkpoints reused on tmpfs, the writer's
 * copy straight into mapped files there (and its fall-back), and the CRC-32
 * by ISA-L equal to zlib's. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "ckpt/ckpt_internal.h"
#include "dtrain/ckpt.h"
#include "dtrain/tensor.h"

static char root[256];

/* A registry with two parameters (w [3, 4], b [4]); its values and an AdamW's
 * moments filled with a pattern of `seed`. */
static dt_params *make_params(int64_t rows, dt_optimizer **o, float seed)
{
    dt_params *p;
    int idx;
    EXPECT_STATUS(dt_params_create(&p), DT_OK);
    EXPECT_STATUS(dt_params_add(p, "w", 2, (int64_t[]){rows, 4}, &idx), DT_OK);
    EXPECT_STATUS(dt_params_add(p, "b", 1, (int64_t[]){4}, &idx), DT_OK);
    EXPECT_STATUS(dt_params_finalize(p), DT_OK);
    int64_t n = dt_params_numel(p), count = 0;
    for (int64_t i = 0; i < n; i++)
        dt_params_values(p)[i] = seed + 0.25f * (float)i;
    if (o) {
        EXPECT_STATUS(dt_adamw_create(&(dt_adamw_config){0.9f, 0.999f, 1e-8f, 0.0f}, n, o), DT_OK);
        float *state = dt_optimizer_state(*o, &count);
        EXPECT_EQ(count, 2 * n);
        for (int64_t i = 0; i < count; i++)
            state[i] = -seed - 0.5f * (float)i;
    }
    return p;
}

static dt_ckpt_progress progress(int64_t step)
{
    dt_ckpt_progress pr = {.step = step,
                           .epoch = 0,
                           .position = 8 * step,
                           .optimizer_steps = step,
                           .world_size = 2,
                           .global_batch = 8};
    dt_rng_seed(&pr.rng, (uint64_t)step + 1);
    return pr;
}

static const dt_ckpt_meta meta = {"{\"model\":\"toy\",\"steps\":100}", "{\"model\":\"toy\"}", "adamw"};

static void path(char *out, size_t len, const char *rel)
{
    snprintf(out, len, "%s/%s", root, rel);
}

static void write_text(const char *rel, const char *text)
{
    char p[512];
    path(p, sizeof p, rel);
    FILE *f = fopen(p, "w");
    EXPECT(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

/* A parameter server under asp/ssp updates once per worker's push: its
 * optimizer.steps may exceed the step (up to the run's steps x workers)
 * only when the caller says the run was such. */
static void test_update_per_worker(void)
{
    dt_optimizer *o;
    dt_params *p = make_params(3, &o, 1.0f);
    dt_ckpt_tensors t = dt_ckpt_tensors_live(p, o);
    char ps_root[512], written[DT_CKPT_PATH_MAX];
    path(ps_root, sizeof ps_root, "ps-root");
    dt_ckpt_progress pr = progress(30);
    pr.optimizer_steps = 61; /* worker 1 two steps ahead of worker 0, who wrote at step 30 */
    EXPECT_STATUS(dt_ckpt_save(ps_root, p, &t, &meta, &pr, written, sizeof written), DT_OK);
    dt_ckpt_manifest *m;
    EXPECT_STATUS(dt_ckpt_manifest_open(written, &m), DT_OK);
    if (m) {
        dt_ckpt_progress got;
        EXPECT_STATUS(dt_ckpt_manifest_progress(m, &(dt_ckpt_limits){300, 0, 4, false}, &got), DT_ERR_INVALID);
        EXPECT_CONTAINS(dt_last_error(), "optimizer.steps = 61 is not a whole number in [0, 30]");
        EXPECT_STATUS(dt_ckpt_manifest_progress(m, &(dt_ckpt_limits){300, 0, 4, true}, &got), DT_OK);
        EXPECT_EQ(got.optimizer_steps, 61);
        /* a run of 30 steps on 2 workers makes at most 60 updates */
        EXPECT_STATUS(dt_ckpt_manifest_progress(m, &(dt_ckpt_limits){30, 0, 4, true}, &got), DT_ERR_INVALID);
        EXPECT_CONTAINS(dt_last_error(), "optimizer.steps = 61 is not a whole number in [0, 60]");
        dt_ckpt_manifest_close(m);
    }
    dt_optimizer_destroy(o);
    dt_params_destroy(p);
}

/* Write steps 10 and 20, read 20 back: the manifest's config and progress,
 * the tensors to the bit, the shape check. */
static void test_write_and_read(void)
{
    dt_optimizer *o;
    dt_params *p = make_params(3, &o, 1.0f);
    dt_ckpt_tensors t = dt_ckpt_tensors_live(p, o);
    EXPECT(t.values == dt_params_values(p) && t.m && t.v);
    char written[DT_CKPT_PATH_MAX], want[600];
    dt_ckpt_progress pr10 = progress(10), pr20 = progress(20);
    EXPECT_STATUS(dt_ckpt_save(root, p, &t, &meta, &pr10, NULL, 0), DT_OK);
    EXPECT_STATUS(dt_ckpt_save(root, p, &t, &meta, &pr20, written, sizeof written), DT_OK);
    path(want, sizeof want, "step-00000020");
    EXPECT(strcmp(written, want) == 0);
    char dir[DT_CKPT_PATH_MAX];
    EXPECT_STATUS(dt_ckpt_step_dir(root, 20, dir, sizeof dir), DT_OK);
    EXPECT(strcmp(dir, want) == 0);
    EXPECT_STATUS(dt_ckpt_step_dir(root, 20, dir, 8), DT_ERR_INVALID);

    dt_ckpt_manifest *m;
    EXPECT_STATUS(dt_ckpt_manifest_open(written, &m), DT_OK);
    if (m) {
        EXPECT(dt_ckpt_manifest_config(m) && strcmp(dt_ckpt_manifest_config(m), meta.config_json) == 0);
        dt_ckpt_progress got;
        dt_ckpt_limits lim = {100, 0, 4, false};
        EXPECT_STATUS(dt_ckpt_manifest_progress(m, &lim, &got), DT_OK);
        EXPECT(memcmp(&got, &pr20, sizeof got) == 0);
        /* the step beyond the run's steps; the position beyond the epoch */
        lim = (dt_ckpt_limits){5, 0, 4, false};
        EXPECT_STATUS(dt_ckpt_manifest_progress(m, &lim, &got), DT_ERR_INVALID);
        EXPECT_CONTAINS(dt_last_error(),
                        "step-00000020: the manifest's field step = 20 is not a whole number in [0, 5]");
        lim = (dt_ckpt_limits){100, 100, 4, false};
        EXPECT_STATUS(dt_ckpt_manifest_progress(m, &lim, &got), DT_ERR_INVALID);
        EXPECT_CONTAINS(dt_last_error(), "field sampler.position = 160 is not a whole number in [0, 100]");
        EXPECT_STATUS(dt_ckpt_manifest_check_tensors(m, p, "toy"), DT_OK);
        dt_params *other = make_params(5, NULL, 0.0f);
        EXPECT_STATUS(dt_ckpt_manifest_check_tensors(m, other, "toy"), DT_ERR_INVALID);
        EXPECT_CONTAINS(
            dt_last_error(),
            "model.safetensors: tensor w has shape [3,4], the manifest's config (model toy) needs [5, 4]");
        dt_params_destroy(other);
        dt_ckpt_manifest_close(m);
    }

    dt_optimizer *o2;
    dt_params *p2 = make_params(3, &o2, 7.0f);
    EXPECT_STATUS(dt_ckpt_load(written, p2, o2), DT_OK);
    int64_t n = dt_params_numel(p), c1, c2;
    EXPECT(memcmp(dt_params_values(p2), dt_params_values(p), (size_t)n * sizeof(float)) == 0);
    const float *m1 = dt_optimizer_state(o, &c1), *m2 = dt_optimizer_state(o2, &c2);
    EXPECT(memcmp(m2, m1, (size_t)(2 * n) * sizeof(float)) == 0);
    dt_optimizer_destroy(o2);
    dt_params_destroy(p2);
    dt_optimizer_destroy(o);
    dt_params_destroy(p);
}

/* A step directory without a manifest (a writer cut short, or a removal),
 * a writer's temporary directory and a stray file are not checkpoints. */
static void test_newest_complete(void)
{
    char p[512];
    path(p, sizeof p, "step-00000030");
    mkdir(p, 0755);
    write_text("step-00000030/model.safetensors", "torn");
    path(p, sizeof p, ".step-00000040.tmp");
    mkdir(p, 0755);
    write_text(".step-00000040.tmp/manifest.json", "{}");
    write_text("step-00000050", "a file, not a directory");
    write_text("notes.txt", "kept");
    int64_t *steps;
    int n;
    EXPECT_STATUS(dt_ckpt_list(root, &steps, &n), DT_OK);
    EXPECT_EQ(n, 2);
    if (n == 2) {
        EXPECT_EQ(steps[0], 20);
        EXPECT_EQ(steps[1], 10);
    }
    free(steps);
    EXPECT_EQ(dt_ckpt_newest(root), 20);
    EXPECT_EQ(dt_ckpt_count_any(root), 5); /* 10, 20, 30, .40.tmp, the file 50 */
    EXPECT_EQ(dt_ckpt_newest("/nonexistent/dtrain-ckpt"), -1);
    EXPECT_STATUS(dt_ckpt_list("/nonexistent/dtrain-ckpt", &steps, &n), DT_OK);
    EXPECT(n == 0 && steps == NULL);
}

typedef struct {
    int verified, skipped, older_left;
    char skipped_dir[DT_CKPT_PATH_MAX], why[1024];
} finder;

static dt_status verify_manifest(void *user, const char *step_dir)
{
    ((finder *)user)->verified++;
    dt_ckpt_manifest *m;
    dt_status s = dt_ckpt_manifest_open(step_dir, &m);
    dt_ckpt_manifest_close(m);
    return s;
}

static void on_skip(void *user, const char *step_dir, const char *why, int older_left)
{
    finder *f = user;
    f->skipped++;
    f->older_left = older_left;
    snprintf(f->skipped_dir, sizeof f->skipped_dir, "%s", step_dir);
    snprintf(f->why, sizeof f->why, "%s", why);
}

/* Flip a bit of byte `at` of a file. */
static void flip_byte(const char *rel, long at)
{
    char p[512];
    path(p, sizeof p, rel);
    int fd = open(p, O_RDWR);
    EXPECT(fd >= 0);
    unsigned char c = 0;
    EXPECT(pread(fd, &c, 1, at) == 1);
    c ^= 0x20;
    EXPECT(pwrite(fd, &c, 1, at) == 1);
    close(fd);
}

/* An edit of a file's text (the first `from` becomes `to`, as long). */
static void replace_in(const char *rel, const char *from, const char *to)
{
    char p[512], text[65536];
    path(p, sizeof p, rel);
    FILE *f = fopen(p, "r+");
    EXPECT(f != NULL);
    if (!f)
        return;
    size_t n = fread(text, 1, sizeof text - 1, f);
    text[n] = '\0';
    char *at = strstr(text, from);
    EXPECT(at != NULL && strlen(from) == strlen(to));
    if (at) {
        memcpy(at, to, strlen(to));
        rewind(f);
        EXPECT(fwrite(text, 1, n, f) == n);
    }
    fclose(f);
}

/* A corrupt newest manifest is refused naming it; dt_ckpt_find falls back to
 * the previous step and says which one it skipped. */
static void test_corrupt(void)
{
    char manifest[512], found[DT_CKPT_PATH_MAX], want[512];
    path(manifest, sizeof manifest, "step-00000020/manifest.json");
    /* edited without a fresh manifest_crc32 */
    replace_in("step-00000020/manifest.json", "\"step\":\t20,", "\"step\":\t21,");
    dt_ckpt_manifest *m = NULL;
    EXPECT_STATUS(dt_ckpt_manifest_open(manifest, &m), DT_ERR_INVALID); /* not a directory */
    char dir20[512];
    path(dir20, sizeof dir20, "step-00000020");
    EXPECT_STATUS(dt_ckpt_manifest_open(dir20, &m), DT_ERR_INVALID);
    EXPECT(m == NULL);
    EXPECT_CONTAINS(dt_last_error(), manifest);
    EXPECT_CONTAINS(dt_last_error(), "(edited or corrupt)");

    finder f = {0};
    EXPECT_STATUS(dt_ckpt_find(root, verify_manifest, on_skip, &f, found, sizeof found), DT_OK);
    path(want, sizeof want, "step-00000010");
    EXPECT(strcmp(found, want) == 0);
    EXPECT_EQ(f.verified, 2);
    EXPECT_EQ(f.skipped, 1);
    EXPECT_EQ(f.older_left, 1);
    EXPECT(strcmp(f.skipped_dir, dir20) == 0);
    EXPECT_CONTAINS(f.why, manifest);

    /* a step directory named alone: no fallback */
    f = (finder){0};
    EXPECT_STATUS(dt_ckpt_find(dir20, verify_manifest, on_skip, &f, found, sizeof found), DT_ERR_INVALID);
    EXPECT_EQ(f.skipped, 0);
    EXPECT_CONTAINS(dt_last_error(), "(edited or corrupt)");

    /* not JSON at all */
    write_text("step-00000020/manifest.json", "{ not json");
    EXPECT_STATUS(dt_ckpt_manifest_open(dir20, &m), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "manifest.json is not a dtrain checkpoint manifest");

    /* a corrupt tensor file under an intact manifest: named, and with both
     * steps bad, dt_ckpt_find fails with the last one's reason */
    char model[512];
    path(model, sizeof model, "step-00000010/optim_v.safetensors");
    flip_byte("step-00000010/optim_v.safetensors", 200);
    f = (finder){0};
    EXPECT_STATUS(dt_ckpt_find(root, verify_manifest, on_skip, &f, found, sizeof found), DT_ERR_INVALID);
    EXPECT_EQ(f.skipped, 2);
    EXPECT_EQ(f.older_left, 0);
    EXPECT_CONTAINS(dt_last_error(), model);
    EXPECT_CONTAINS(dt_last_error(), "(corrupt)");

    EXPECT_STATUS(dt_ckpt_find("/nonexistent/dtrain-ckpt", verify_manifest, on_skip, &f, found, sizeof found),
                  DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "checkpoint /nonexistent/dtrain-ckpt: No such file or directory");
    EXPECT_STATUS(dt_ckpt_find("/dev/null", verify_manifest, on_skip, &f, found, sizeof found), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "checkpoint /dev/null is not a directory");
}

/* Clear removes every step directory (the torn and temporary ones too) and
 * nothing else; a step-N it cannot remove (here a file) is named, and the
 * others are still removed. */
static void test_clear(void)
{
    EXPECT_STATUS(dt_ckpt_clear(root), DT_ERR_SYSTEM);
    EXPECT_CONTAINS(dt_last_error(), "step-00000050 (not a flat checkpoint directory, or permissions)");
    EXPECT_EQ(dt_ckpt_count_any(root), 1);
    char p[512];
    struct stat st;
    path(p, sizeof p, "step-00000050");
    unlink(p);
    EXPECT_STATUS(dt_ckpt_clear(root), DT_OK);
    EXPECT_EQ(dt_ckpt_count_any(root), 0);
    path(p, sizeof p, "notes.txt");
    EXPECT(stat(p, &st) == 0);
}

typedef struct {
    int reports, failures;
    int64_t last_step, kept_step;
    char dir[DT_CKPT_PATH_MAX], error[1024], label[64];
    int notes;      /* reports with a note */
    char note[512];
} reports;

static void on_report(void *user, const dt_ckpt_report *r)
{
    reports *x = user;
    x->reports++;
    if (r->note && *r->note) {
        x->notes++;
        snprintf(x->note, sizeof x->note, "%s", r->note);
    }
    x->last_step = r->step;
    x->kept_step = r->kept_step;
    snprintf(x->label, sizeof x->label, "%s", r->label);
    if (r->status != DT_OK) {
        x->failures++;
        snprintf(x->error, sizeof x->error, "%s", r->error);
    } else {
        snprintf(x->dir, sizeof x->dir, "%s", r->dir);
    }
}

/* Three writes keeping two; then a root that cannot be created: the write
 * fails, is reported naming it, flush returns it, the kept step stays. */
static void test_writer(void)
{
    dt_optimizer *o;
    dt_params *p = make_params(3, &o, 2.0f);
    reports r = {0};
    char wroot[512];
    path(wroot, sizeof wroot, "bg");
    dt_ckpt_writer_config cfg = {wroot, 2, meta, -1, NULL, on_report, &r, false, false};
    dt_ckpt_writer *w;
    EXPECT_STATUS(dt_ckpt_writer_start(&cfg, p, o, &w), DT_OK);
    for (int64_t step = 1; step <= 3; step++) {
        dt_ckpt_progress pr = progress(step);
        double stall = -1;
        EXPECT_STATUS(dt_ckpt_writer_submit(w, &pr, step == 1 ? " (first)" : NULL, &stall), DT_OK);
        EXPECT(stall >= 0);
        dt_params_values(p)[0] = (float)step; /* the write holds the snapshot, not the live values */
    }
    EXPECT_STATUS(dt_ckpt_writer_flush(w), DT_OK);
    EXPECT_EQ(r.reports, 3);
    EXPECT_EQ(r.failures, 0);
    EXPECT_EQ(r.last_step, 3);
    EXPECT_EQ(r.kept_step, 3);
    char dir[DT_CKPT_PATH_MAX], want[DT_CKPT_PATH_MAX];
    EXPECT_EQ(dt_ckpt_writer_last_good(w, dir, sizeof dir), 3);
    dt_ckpt_step_dir(wroot, 3, want, sizeof want);
    EXPECT(strcmp(dir, want) == 0 && strcmp(r.dir, want) == 0);
    int64_t *steps;
    int n;
    EXPECT_STATUS(dt_ckpt_list(wroot, &steps, &n), DT_OK);
    EXPECT_EQ(n, 2); /* keep 2 */
    free(steps);
    dt_params *back = make_params(3, NULL, 0.0f);
    EXPECT_STATUS(dt_ckpt_load(want, back, NULL), DT_OK);
    EXPECT(dt_params_values(back)[0] == 2.0f); /* the value at the third submit */
    dt_params_destroy(back);
    dt_ckpt_writer_stop(w);

    /* a root under a regular file cannot be created */
    char bad[600];
    path(bad, sizeof bad, "notes.txt/ck");
    cfg.root = bad;
    cfg.kept_step = 3;
    cfg.kept_dir = want;
    r = (reports){0};
    EXPECT_STATUS(dt_ckpt_writer_start(&cfg, p, o, &w), DT_OK);
    dt_ckpt_progress pr = progress(4);
    EXPECT_STATUS(dt_ckpt_writer_submit(w, &pr, " (doomed)", NULL), DT_OK);
    EXPECT_STATUS(dt_ckpt_writer_flush(w), DT_ERR_SYSTEM);
    EXPECT_CONTAINS(dt_last_error(), bad);
    EXPECT_CONTAINS(dt_last_error(), "Not a directory");
    EXPECT_EQ(r.failures, 1);
    EXPECT_CONTAINS(r.error, "cannot create checkpoint directory");
    EXPECT(strcmp(r.label, " (doomed)") == 0);
    EXPECT_EQ(r.kept_step, 3);
    EXPECT_EQ(dt_ckpt_writer_last_good(w, dir, sizeof dir), 3);
    EXPECT(strcmp(dir, want) == 0);
    /* stop completes a pending write, and reports it */
    pr = progress(5);
    EXPECT_STATUS(dt_ckpt_writer_submit(w, &pr, NULL, NULL), DT_OK);
    dt_ckpt_writer_stop(w);
    EXPECT_EQ(r.reports, 2);
    EXPECT_EQ(r.last_step, 5);
    dt_ckpt_writer_stop(NULL);
    dt_optimizer_destroy(o);
    dt_params_destroy(p);
}

/* The whole array's element i of unit k over nranks: rank i / slice holds
 * it at slice offset i % slice; test arrays hold 1000 + i (moments m) and -i
 * (v), so every element read back names its place. */
static float pattern(int t, int64_t i)
{
    return t == 0 ? 1000.0f + (float)i : -(float)i;
}

/* Sharded checkpoints: written by N = 1..5 ranks over units of odd sizes,
 * each read back by N' = 1..5 (every rank's shard, padding zero) and whole;
 * dt_ckpt_load puts the moments together; a missing or corrupt shard file,
 * a unit that is not the reader's and a short file list are refused naming
 * the file or the field. */
static void test_sharded(void)
{
    dt_optimizer *o;
    dt_params *p = make_params(5, &o, 2.0f); /* w [5, 4], b [4]: 24 elements */
    const dt_ckpt_unit units[3] = {{0, 7}, {7, 13}, {20, 4}};
    const char *names[2] = {"optim_m", "optim_v"};
    char dir[512];
    for (int N = 1; N <= 5; N++) {
        dt_ckpt_sharding sh = {1, N, units, 3, names, 2};
        int64_t S = dt_ckpt_shard_numel(&sh);
        EXPECT_EQ(S, (7 + N - 1) / N + (13 + N - 1) / N + (4 + N - 1) / N);
        dt_ckpt_progress pr = progress(100 + N);
        EXPECT_STATUS(dt_ckpt_shard_prepare(root, pr.step), DT_OK);
        dt_ckpt_shard_file files[5];
        float *arrays[2] = {malloc((size_t)S * sizeof(float)), malloc((size_t)S * sizeof(float))};
        for (int r = 0; r < N; r++) {
            for (int t = 0; t < 2; t++) {
                int64_t at = 0;
                for (int k = 0; k < 3; k++) {
                    int64_t sl = (units[k].numel + N - 1) / N;
                    for (int64_t e = 0; e < sl; e++) {
                        int64_t i = r * sl + e;
                        arrays[t][at + e] = i < units[k].numel ? pattern(t, units[k].offset + i) : 7.0f;
                    }
                    at += sl;
                }
            }
            EXPECT_STATUS(dt_ckpt_shard_write(root, pr.step, &sh, r, (const float *const *)arrays, &files[r]),
                          DT_OK);
        }
        free(arrays[0]);
        free(arrays[1]);
        dt_ckpt_tensors t = {dt_params_values(p), NULL, NULL};
        EXPECT_STATUS(dt_ckpt_save_sharded(root, p, &t, &meta, &pr, &sh, files, dir, sizeof dir), DT_OK);
        int got_n = 0, stage = 0, nt = 0;
        EXPECT_STATUS(dt_ckpt_shards(dir, &got_n, &stage, &nt), DT_OK);
        EXPECT_EQ(got_n, N);
        EXPECT_EQ(stage, 1);
        EXPECT_EQ(nt, 2);
        dt_ckpt_manifest *m = NULL;
        EXPECT_STATUS(dt_ckpt_manifest_open(dir, &m), DT_OK);
        if (m) {
            EXPECT_STATUS(dt_ckpt_manifest_check_tensors(m, p, "toy"), DT_OK);
            EXPECT_STATUS(dt_ckpt_manifest_check_sharding(m, units, 3, NULL), DT_OK);
            const dt_ckpt_unit other[3] = {{0, 7}, {7, 12}, {19, 5}};
            EXPECT_STATUS(dt_ckpt_manifest_check_sharding(m, other, 3, NULL), DT_ERR_INVALID);
            EXPECT_CONTAINS(dt_last_error(),
                            "field sharding.units[1].numel = 13, the model's ZeRO layout has 12");
            EXPECT_STATUS(dt_ckpt_manifest_check_sharding(m, units, 2, NULL), DT_ERR_INVALID);
            dt_ckpt_manifest_close(m);
        }
        /* read back for every N' and rank, and whole (N' = 0) */
        for (int n2 = 0; n2 <= 5; n2++)
            for (int r = 0; r < (n2 ? n2 : 1); r++)
                for (int tt = 0; tt < 2; tt++) {
                    int64_t len = n2 ? (7 + n2 - 1) / n2 + (13 + n2 - 1) / n2 + (4 + n2 - 1) / n2 : 24;
                    float *out = malloc((size_t)len * sizeof(float));
                    EXPECT_STATUS(dt_ckpt_load_shard(dir, names[tt], n2, r, out, len), DT_OK);
                    int64_t at = 0, wrong = 0;
                    for (int k = 0; k < 3; k++) {
                        int64_t sl = n2 ? (units[k].numel + n2 - 1) / n2 : units[k].numel;
                        for (int64_t e = 0; e < sl; e++) {
                            int64_t i = (n2 ? r * sl : 0) + e;
                            float want = i < units[k].numel ? pattern(tt, units[k].offset + i) : 0.0f;
                            wrong += out[n2 ? at + e : units[k].offset + e] != want;
                        }
                        at += sl;
                    }
                    if (wrong)
                        fprintf(stderr, "N %d -> N' %d rank %d %s: %lld wrong\n", N, n2, r, names[tt],
                                (long long)wrong);
                    EXPECT_EQ(wrong, 0);
                    free(out);
                }
        float one;
        EXPECT_STATUS(dt_ckpt_load_shard(dir, "optim_m", 2, 0, &one, 1),
                      DT_ERR_INVALID); /* the wrong length */
        EXPECT_STATUS(dt_ckpt_load_shard(dir, "values", 1, 0, &one, 1),
                      DT_ERR_INVALID); /* a tensor it lacks */
        /* dt_ckpt_load: the weights, and the moments put together whole */
        int64_t count = 0;
        float *state = dt_optimizer_state(o, &count);
        memset(state, 0, (size_t)count * sizeof *state);
        EXPECT_STATUS(dt_ckpt_load(dir, p, o), DT_OK);
        int64_t wrong = 0;
        for (int64_t i = 0; i < 24; i++)
            wrong += state[i] != pattern(0, i) || state[24 + i] != pattern(1, i);
        EXPECT_EQ(wrong, 0);
    }
    /* a missing shard file, then a corrupt one: named */
    char shard[700], dir3[300];
    snprintf(dir3, sizeof dir3, "%s/step-00000103", root);
    snprintf(shard, sizeof shard, "%s/zero-shard-00001-of-00003.safetensors", dir3);
    char moved[800];
    snprintf(moved, sizeof moved, "%s.away", shard);
    EXPECT(rename(shard, moved) == 0);
    dt_ckpt_manifest *m = NULL;
    EXPECT_STATUS(dt_ckpt_manifest_open(dir3, &m), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "checkpoint file missing");
    EXPECT_CONTAINS(dt_last_error(), shard);
    EXPECT(rename(moved, shard) == 0);
    flip_byte("step-00000103/zero-shard-00002-of-00003.safetensors", 300);
    EXPECT_STATUS(dt_ckpt_manifest_open(dir3, &m), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "zero-shard-00002-of-00003.safetensors has checksum");
    /* shardings the library refuses to save: stage 4; shard files the ranks did not write */
    dt_ckpt_sharding bad = {4, 2, units, 3, names, 2};
    dt_ckpt_shard_file none[2] = {{"zero-shard-00000-of-00002.safetensors", 1, 0}, {"x", 1, 0}};
    dt_ckpt_progress pr = progress(200);
    EXPECT_STATUS(dt_ckpt_save_sharded(root, p, &(dt_ckpt_tensors){dt_params_values(p), NULL, NULL}, &meta,
                                       &pr, &bad, none, NULL, 0),
                  DT_ERR_INVALID); /* stage 4 */
    bad.stage = 2;
    EXPECT_STATUS(dt_ckpt_shard_prepare(root, pr.step), DT_OK);
    EXPECT_STATUS(dt_ckpt_save_sharded(root, p, &(dt_ckpt_tensors){dt_params_values(p), NULL, NULL}, &meta,
                                       &pr, &bad, none, NULL, 0),
                  DT_ERR_INVALID); /* the ranks' files are not there */
    EXPECT_CONTAINS(dt_last_error(), "rank 0's shard");
    dt_ckpt_shard_abandon(root, pr.step);
    dt_optimizer_destroy(o);
    dt_params_destroy(p);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'/step-001* '%s'/.step-*", root, root);
    EXPECT(system(cmd) == 0);
}

/* The whole bytes of a file (caller frees); NULL when unreadable. */
static unsigned char *slurp(const char *file, long *len)
{
    FILE *f = fopen(file, "rb");
    unsigned char *buf = NULL;
    if (f && fseek(f, 0, SEEK_END) == 0 && (*len = ftell(f)) > 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)*len)) && fread(buf, 1, (size_t)*len, f) != (size_t)*len) {
        free(buf);
        buf = NULL;
    }
    if (f)
        fclose(f);
    return buf;
}

/* model.safetensors written range by range (ZeRO-3's writer holds one unit,
 * never the model): through a writer started with stream_model over a
 * registry without storage, the units put in reverse order, the step is the
 * same bytes as dt_ckpt_save_sharded writes from the whole values, its
 * manifest checks and dt_ckpt_load reads the values back; a range never put
 * reads as zeros; a put outside the model is refused naming it and makes
 * close(keep) fail and remove the file; close(!keep) removes it; a writer
 * without stream_model refuses model_open, one with it a plain submit. */
static void test_model_streamed(void)
{
    dt_params *p = make_params(5, NULL, 3.0f), *bare = make_params(5, NULL, 0.0f); /* 24 elements */
    dt_params_drop_storage(bare, true, true);
    const dt_ckpt_unit units[3] = {{0, 7}, {7, 13}, {20, 4}};
    const char *names[1] = {"values"};
    dt_ckpt_sharding sh = {3, 2, units, 3, names, 1};
    int64_t S = dt_ckpt_shard_numel(&sh);
    float *shard = calloc((size_t)S, sizeof *shard);
    char ref_root[600], dir[600], ref_dir[600], model[700], ref_model[700];
    snprintf(ref_root, sizeof ref_root, "%s/streamed-ref", root);
    dt_ckpt_progress pr = progress(300);
    /* the reference: the whole values through dt_ckpt_save_sharded */
    dt_ckpt_shard_file files[2];
    EXPECT_STATUS(dt_ckpt_shard_prepare(ref_root, pr.step), DT_OK);
    for (int r = 0; r < 2; r++)
        EXPECT_STATUS(dt_ckpt_shard_write(ref_root, pr.step, &sh, r, (const float *const *)&shard, &files[r]),
                      DT_OK);
    EXPECT_STATUS(dt_ckpt_save_sharded(ref_root, p, &(dt_ckpt_tensors){dt_params_values(p), NULL, NULL}, &meta,
                                       &pr, &sh, files, ref_dir, sizeof ref_dir),
                  DT_OK);
    /* streamed, through the writer */
    char wroot[512];
    path(wroot, sizeof wroot, "streamed");
    reports r = {0};
    dt_ckpt_writer_config cfg = {wroot, 0, meta, -1, NULL, on_report, &r, true, false};
    dt_ckpt_writer *w = NULL;
    EXPECT_STATUS(dt_ckpt_writer_start(&cfg, bare, NULL, &w), DT_OK);
    dt_ckpt_model_file *f = NULL;
    EXPECT_STATUS(dt_ckpt_shard_prepare(wroot, pr.step), DT_OK);
    EXPECT_STATUS(dt_ckpt_writer_model_open(w, pr.step, &f), DT_OK);
    for (int k = 2; k >= 0; k--)
        EXPECT_STATUS(dt_ckpt_model_put(f, units[k].offset, dt_params_values(p) + units[k].offset, units[k].numel),
                      DT_OK);
    EXPECT_STATUS(dt_ckpt_model_close(f, true), DT_OK);
    for (int q = 0; q < 2; q++)
        EXPECT_STATUS(dt_ckpt_shard_write(wroot, pr.step, &sh, q, (const float *const *)&shard, &files[q]), DT_OK);
    EXPECT_STATUS(dt_ckpt_writer_submit(w, &pr, NULL, NULL), DT_ERR_INVALID); /* sharded only */
    EXPECT_STATUS(dt_ckpt_writer_submit_sharded(w, &pr, NULL, &sh, files, NULL), DT_OK);
    EXPECT_STATUS(dt_ckpt_writer_flush(w), DT_OK);
    EXPECT_EQ(r.reports, 1);
    snprintf(dir, sizeof dir, "%s/step-00000300", wroot);
    snprintf(model, sizeof model, "%s/model.safetensors", dir);
    snprintf(ref_model, sizeof ref_model, "%s/model.safetensors", ref_dir);
    long n1 = 0, n2 = 0;
    unsigned char *a = slurp(model, &n1), *b = slurp(ref_model, &n2);
    EXPECT(a && b && n1 == n2 && memcmp(a, b, (size_t)n1) == 0);
    free(a);
    free(b);
    dt_ckpt_manifest *m = NULL;
    EXPECT_STATUS(dt_ckpt_manifest_open(dir, &m), DT_OK);
    dt_ckpt_manifest_close(m);
    dt_params *back = make_params(5, NULL, -9.0f);
    EXPECT_STATUS(dt_ckpt_load(dir, back, NULL), DT_OK);
    EXPECT(memcmp(dt_params_values(back), dt_params_values(p), 24 * sizeof(float)) == 0);
    /* a range never put reads as zeros */
    pr = progress(301);
    EXPECT_STATUS(dt_ckpt_shard_prepare(wroot, pr.step), DT_OK);
    EXPECT_STATUS(dt_ckpt_writer_model_open(w, pr.step, &f), DT_OK);
    EXPECT_STATUS(dt_ckpt_model_put(f, 7, dt_params_values(p) + 7, 13), DT_OK);
    EXPECT_STATUS(dt_ckpt_model_close(f, true), DT_OK);
    snprintf(model, sizeof model, "%s/.step-00000301.tmp/model.safetensors", wroot);
    EXPECT_STATUS(dt_safetensors_read(model, back, dt_params_values(back)), DT_OK);
    int64_t wrong = 0;
    for (int64_t i = 0; i < 24; i++)
        wrong += dt_params_values(back)[i] != (i >= 7 && i < 20 ? dt_params_values(p)[i] : 0.0f);
    EXPECT_EQ(wrong, 0);
    /* a put outside the model: refused naming it, and close(keep) fails and removes the file */
    EXPECT_STATUS(dt_ckpt_writer_model_open(w, pr.step, &f), DT_OK);
    EXPECT_STATUS(dt_ckpt_model_put(f, 20, dt_params_values(p), 5), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "values [20, 25) outside the model's 24");
    EXPECT_STATUS(dt_ckpt_model_put(f, 0, dt_params_values(p), 1), DT_ERR_INVALID); /* the first failure sticks */
    EXPECT_STATUS(dt_ckpt_model_close(f, true), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "outside the model's 24");
    EXPECT_STATUS(dt_ckpt_writer_model_open(w, pr.step, &f), DT_OK);
    EXPECT_STATUS(dt_ckpt_model_close(f, false), DT_OK);
    /* neither left its temporary file, nor touched the one closed before (atomic replacement) */
    char tmp_dir[600];
    snprintf(tmp_dir, sizeof tmp_dir, "%s/.step-00000301.tmp", wroot);
    DIR *d = opendir(tmp_dir);
    int entries = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        entries += e->d_name[0] != '.';
    if (d)
        closedir(d);
    EXPECT_EQ(entries, 1);
    EXPECT_STATUS(dt_safetensors_read(model, back, dt_params_values(back)), DT_OK);
    EXPECT_EQ(dt_params_values(back)[8], dt_params_values(p)[8]);
    EXPECT_EQ(dt_params_values(back)[0], 0.0f);
    EXPECT_STATUS(dt_ckpt_model_close(NULL, true), DT_OK);
    dt_ckpt_shard_abandon(wroot, pr.step);
    dt_ckpt_writer_stop(w);
    /* a writer that writes model.safetensors itself has no model to open */
    cfg.stream_model = false;
    EXPECT_STATUS(dt_ckpt_writer_start(&cfg, p, NULL, &w), DT_OK);
    EXPECT_STATUS(dt_ckpt_writer_model_open(w, 302, &f), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "without stream_model");
    dt_ckpt_writer_stop(w);
    free(shard);
    dt_params_destroy(back);
    dt_params_destroy(bare);
    dt_params_destroy(p);
}

/* dt_ckpt_shard_write_from's reader: tensor t's element i is t * 1e7 + i;
 * fail_at >= 0: the piece of tensor 1 holding that element fails. */
typedef struct {
    int64_t fail_at;
    int pieces;
} piece_reader;

static dt_status read_pattern(void *user, int tensor, int64_t offset, int64_t n, float *out)
{
    piece_reader *r = user;
    r->pieces++;
    EXPECT(n >= 1 && n <= DT_CKPT_SHARD_PIECE);
    if (tensor == 1 && r->fail_at >= offset && r->fail_at < offset + n)
        return DT_ERR_SYSTEM; /* (the caller's message stands) */
    for (int64_t i = 0; i < n; i++)
        out[i] = (float)tensor * 1e7f + (float)(offset + i);
    return DT_OK;
}

/* A shard written piece by piece (a state on disk, never whole in memory):
 * 2^21 + 5 elements in three pieces per tensor, the same bytes as the arrays
 * written whole; a piece that fails abandons the file, leaving none. */
static void test_shard_pieces(void)
{
    const int64_t S = 2 * DT_CKPT_SHARD_PIECE + 5;
    const dt_ckpt_unit unit = {0, S};
    const char *names[2] = {"values", "optim_m"};
    dt_ckpt_sharding sh = {3, 1, &unit, 1, names, 2};
    float *arrays[2] = {malloc((size_t)S * sizeof(float)), malloc((size_t)S * sizeof(float))};
    for (int t = 0; t < 2; t++)
        for (int64_t i = 0; i < S; i++)
            arrays[t][i] = (float)t * 1e7f + (float)i;
    char whole_root[600], piece_root[600], a[700], b[700];
    snprintf(whole_root, sizeof whole_root, "%s/pieces-whole", root);
    snprintf(piece_root, sizeof piece_root, "%s/pieces", root);
    dt_ckpt_shard_file fa, fb;
    EXPECT_STATUS(dt_ckpt_shard_prepare(whole_root, 7), DT_OK);
    EXPECT_STATUS(dt_ckpt_shard_write(whole_root, 7, &sh, 0, (const float *const *)arrays, &fa), DT_OK);
    piece_reader r = {-1, 0};
    EXPECT_STATUS(dt_ckpt_shard_prepare(piece_root, 7), DT_OK);
    EXPECT_STATUS(dt_ckpt_shard_write_from(piece_root, 7, &sh, 0, read_pattern, &r, &fb), DT_OK);
    EXPECT_EQ(r.pieces, 6);
    EXPECT_EQ(fa.bytes, fb.bytes);
    EXPECT_EQ(fa.crc, fb.crc);
    snprintf(a, sizeof a, "%s/.step-00000007.tmp/%s", whole_root, fa.name);
    snprintf(b, sizeof b, "%s/.step-00000007.tmp/%s", piece_root, fb.name);
    long na = 0, nb = 0;
    unsigned char *da = slurp(a, &na), *db = slurp(b, &nb);
    EXPECT(da && db && na == nb && memcmp(da, db, (size_t)na) == 0);
    free(da);
    free(db);
    /* a piece of the second tensor fails: not written, nothing left behind */
    r = (piece_reader){DT_CKPT_SHARD_PIECE + 3, 0};
    EXPECT_STATUS(dt_ckpt_shard_prepare(piece_root, 8), DT_OK);
    EXPECT_STATUS(dt_ckpt_shard_write_from(piece_root, 8, &sh, 0, read_pattern, &r, &fb), DT_ERR_SYSTEM);
    EXPECT_CONTAINS(dt_last_error(), "rank 0's shard of the checkpoint at step 8 not written");
    char tmp_dir[700];
    snprintf(tmp_dir, sizeof tmp_dir, "%s/.step-00000008.tmp", piece_root);
    DIR *d = opendir(tmp_dir);
    int entries = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        entries += e->d_name[0] != '.';
    if (d)
        closedir(d);
    EXPECT_EQ(entries, 0);
    EXPECT_STATUS(dt_ckpt_shard_write_from(piece_root, 8, &sh, 0, NULL, NULL, &fb), DT_ERR_INVALID);
    free(arrays[0]);
    free(arrays[1]);
}

/* On tmpfs (/dev/shm: memory snapshots), keep K moves a pruned step's
 * files to ROOT/.spare and the next save writes over them (the same inode,
 * its pages reused), cut to the new size: a smaller model over a larger
 * spare loads to the bit.  Elsewhere nothing is kept. */
static void test_spares_on_tmpfs(void)
{
    char shm[256], spare[600], file[DT_CKPT_PATH_MAX + 32];
    snprintf(shm, sizeof shm, "/dev/shm/dtrain-test-spares.XXXXXX");
    if (!mkdtemp(shm)) {
        printf("  (no /dev/shm here: the spare files are not checked)\n");
        return;
    }
    dt_optimizer *big_o, *o;
    dt_params *big = make_params(50, &big_o, 3.0f), *p = make_params(3, &o, 1.0f);
    dt_ckpt_tensors tb = dt_ckpt_tensors_live(big, big_o), t = dt_ckpt_tensors_live(p, o);
    dt_ckpt_progress pr1 = progress(1), pr2 = progress(2), pr3 = progress(3);
    EXPECT_STATUS(dt_ckpt_save(shm, big, &tb, &meta, &pr1, NULL, 0), DT_OK);
    EXPECT_STATUS(dt_ckpt_save(shm, big, &tb, &meta, &pr2, NULL, 0), DT_OK);
    EXPECT_STATUS(dt_ckpt_prune(shm, 1), DT_OK); /* step 1's files become spares */
    snprintf(spare, sizeof spare, "%s/.spare/model.safetensors", shm);
    struct stat st_spare, st_new;
    EXPECT(stat(spare, &st_spare) == 0);
    char written[DT_CKPT_PATH_MAX];
    EXPECT_STATUS(dt_ckpt_save(shm, p, &t, &meta, &pr3, written, sizeof written), DT_OK);
    snprintf(file, sizeof file, "%s/model.safetensors", written);
    EXPECT(stat(file, &st_new) == 0 && st_new.st_ino == st_spare.st_ino); /* the spare, reused */
    EXPECT(st_new.st_size < st_spare.st_size);                            /* and cut to the new size */
    EXPECT(access(spare, F_OK) != 0);
    dt_optimizer *o2;
    dt_params *p2 = make_params(3, &o2, 9.0f);
    EXPECT_STATUS(dt_ckpt_load(written, p2, o2), DT_OK); /* every file's CRC and size checked */
    EXPECT(memcmp(dt_params_values(p2), dt_params_values(p), (size_t)dt_params_numel(p) * sizeof(float)) == 0);
    int64_t c1, c2;
    const float *m1 = dt_optimizer_state(o, &c1), *m2 = dt_optimizer_state(o2, &c2);
    EXPECT(c1 == c2 && memcmp(m1, m2, (size_t)c1 * sizeof(float)) == 0);
    /* not on tmpfs: pruning removes, no spare directory */
    EXPECT_STATUS(dt_ckpt_save(root, p, &t, &meta, &pr1, NULL, 0), DT_OK);
    EXPECT_STATUS(dt_ckpt_save(root, p, &t, &meta, &pr2, NULL, 0), DT_OK);
    EXPECT_STATUS(dt_ckpt_save(root, p, &t, &meta, &pr3, NULL, 0), DT_OK);
    EXPECT_STATUS(dt_ckpt_prune(root, 1), DT_OK);
    snprintf(spare, sizeof spare, "%s/.spare", root);
    EXPECT(access(spare, F_OK) != 0 || strncmp(root, "/dev/shm", 8) == 0);
    dt_optimizer_destroy(o2);
    dt_params_destroy(p2);
    dt_optimizer_destroy(o);
    dt_params_destroy(p);
    dt_optimizer_destroy(big_o);
    dt_params_destroy(big);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", shm);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", shm);
}

static ino_t inode_of(const char *dir, const char *name)
{
    char file[DT_CKPT_PATH_MAX + 64];
    struct stat st;
    snprintf(file, sizeof file, "%s/%s", dir, name);
    return stat(file, &st) == 0 ? st.st_ino : 0;
}

/* The background writer on tmpfs copies into the next snapshot's mapped
 * files (ROOT/.staging): every step written loads to the bit (each file's
 * CRC and size checked), the header padded to its reserve; a pruned step's
 * files come back as a later step's (the same inodes); stop removes the
 * staging.  With ROOT/.staging taken by a regular file the staging fails
 * and the writer copies through the heap, the snapshots as good. */
/* A fresh /dev/shm test directory DIR (256 bytes) and its staging path (300);
 * false (said) where there is no /dev/shm. */
static bool shm_make(char *dir, char *staging, const char *name, const char *what)
{
    snprintf(dir, 256, "/dev/shm/dtrain-test-%s.XXXXXX", name);
    if (!mkdtemp(dir)) {
        printf("  (no /dev/shm here: %s is not checked)\n", what);
        return false;
    }
    snprintf(staging, 300, "%s/.staging", dir);
    return true;
}

/* A /dev/shm test directory's checkpoints and staging removed (whole: the directory too). */
static void shm_clear(const char *shm, bool whole)
{
    char cmd[1024];
    if (whole)
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", shm);
    else
        snprintf(cmd, sizeof cmd, "rm -rf '%s'/step-* '%s'/.spare '%s'/.staging", shm, shm, shm);
    if (system(cmd) != 0)
        fprintf(stderr, "could not clear %s\n", shm);
}

/* A regular file where the staging directory goes: staging fails, the heap is used. */
static void block_staging(const char *staging)
{
    FILE *f = fopen(staging, "w");
    EXPECT(f != NULL);
    if (f)
        fclose(f);
}

/* defer: the writer thread copies the state, and an optimizer step right
 * after the submit takes part and waits for that copy (the snapshot holds
 * the state as submitted, not as updated).  rows: the parameter's size
 * (200000: 3.2 MB arrays, 49 pieces of 64 KiB whose CRCs are combined). */
static void test_writer_staged(bool defer, int64_t rows)
{
    char shm[256], dir[DT_CKPT_PATH_MAX], staging[300];
    if (!shm_make(shm, staging, "staged", "the staged writer"))
        return;
    for (int blocked = 0; blocked <= 1; blocked++) {
        if (blocked) /* a file where the staging directory goes */
            block_staging(staging);
        dt_optimizer *o;
        dt_params *p = make_params(rows, &o, 1.0f);
        reports r = {0};
        dt_ckpt_writer_config cfg = {shm, 2, meta, -1, NULL, on_report, &r, false, defer};
        dt_ckpt_writer *w;
        EXPECT_STATUS(dt_ckpt_writer_start(&cfg, p, o, &w), DT_OK);
        struct stat st;
        EXPECT(stat(staging, &st) == 0 && S_ISDIR(st.st_mode) == !blocked);
        int64_t n = dt_params_numel(p), count;
        float *state = dt_optimizer_state(o, &count);
        float *want = malloc((size_t)(n + count) * sizeof(float)), *grad = calloc((size_t)n, sizeof(float));
        EXPECT(want && grad);
        if (!want || !grad)
            return;
        for (int64_t i = 0; i < n; i++)
            grad[i] = 0.5f + (float)i;
        ino_t first = 0, later = 0;
        for (int64_t step = 1; step <= 6; step++) {
            for (int64_t i = 0; i < n; i++)
                dt_params_values(p)[i] = (float)step * 10.0f + (float)i;
            for (int64_t i = 0; i < count; i++)
                state[i] = -(float)step - (float)i;
            memcpy(want, dt_params_values(p), (size_t)n * sizeof(float));
            memcpy(want + n, state, (size_t)count * sizeof(float));
            dt_ckpt_progress pr = progress(step);
            EXPECT_STATUS(dt_ckpt_writer_submit(w, &pr, NULL, NULL), DT_OK);
            if (defer) /* at once: it must wait for the writer's copy */
                EXPECT_STATUS(dt_optimizer_step(o, dt_params_values(p), grad, n, 0.25f), DT_OK);
            EXPECT_STATUS(dt_ckpt_writer_flush(w), DT_OK);
            EXPECT_STATUS(dt_ckpt_step_dir(shm, step, dir, sizeof dir), DT_OK);
            if (step == 1)
                first = inode_of(dir, "optim_v.safetensors");
            else if (inode_of(dir, "optim_v.safetensors") == first)
                later = step;
            dt_optimizer *o2;
            dt_ckpt_manifest *mf;
            EXPECT_STATUS(dt_ckpt_manifest_open(dir, &mf), DT_OK); /* every file's size and CRC-32 checked */
            dt_ckpt_manifest_close(mf);
            dt_params *p2 = make_params(rows, &o2, 0.0f);
            EXPECT_STATUS(dt_ckpt_load(dir, p2, o2), DT_OK);
            int64_t c2;
            const float *s2 = dt_optimizer_state(o2, &c2);
            EXPECT(memcmp(dt_params_values(p2), want, (size_t)n * sizeof(float)) == 0);
            EXPECT(c2 == count && memcmp(s2, want + n, (size_t)count * sizeof(float)) == 0);
            if (defer) /* and the step did run */
                EXPECT(memcmp(dt_params_values(p), want, (size_t)n * sizeof(float)) != 0);
            dt_optimizer_destroy(o2);
            dt_params_destroy(p2);
        }
        free(want);
        free(grad);
        EXPECT_EQ(r.failures, 0);
        EXPECT_EQ(r.reports, 6);
        const dt__ckpt_maps *maps = dt__ckpt_writer_maps(w);
        if (!blocked) { /* step 1's files, pruned after step 3, came back for step 4 */
            EXPECT_EQ(later, 4);
            /* mapped once: the stagings before steps 1-3 made 3 files each,
             * those before steps 4-6 and the next one found theirs mapped */
            EXPECT_EQ((int)maps->made, 9);
            EXPECT_EQ((int)maps->reused, 12);
            EXPECT_EQ(maps->n, 9);
            FILE *f = fopen(strcat(dir, "/model.safetensors"), "rb");
            unsigned char head[8];
            EXPECT(f && fread(head, 1, 8, f) == 8);
            uint64_t hlen = 0;
            for (int i = 0; i < 8; i++)
                hlen |= (uint64_t)head[i] << (8 * i);
            char *json = malloc(hlen + 1);
            EXPECT(json && fread(json, 1, hlen, f) == hlen);
            if (json) { /* the reserve is the longest step's: spaces after the JSON */
                json[hlen] = '\0';
                EXPECT(hlen % 8 == 0 && json[hlen - 1] == ' ' && strstr(json, "\"step\":\"6\""));
            }
            free(json);
            if (f)
                fclose(f);
        }
        if (blocked) {
            EXPECT_EQ((int)(maps->made + maps->reused), 0);
            /* said once, through the report (the library prints nothing) */
            EXPECT_EQ(r.notes, 1);
            EXPECT(strstr(r.note, "/.staging/") && strstr(r.note, "copying through the heap from now on"));
        } else {
            EXPECT_EQ(r.notes, 0);
        }
        dt_ckpt_writer_stop(w);
        EXPECT((access(staging, F_OK) != 0) == !blocked); /* removed (the blocking file stays) */
        dt_optimizer_destroy(o);
        dt_params_destroy(p);
        shm_clear(shm, false);
    }
    shm_clear(shm, true);
}

/* An armed writer (dt_ckpt_writer_arm): the update before the submit
 * copies each 64 KiB piece it writes whole into the snapshot (the tee).
 * The parameter of 200004 elements is 13 pieces a array (the last one
 * short), 39 in all.  Step by step, with the snapshot checked bitwise
 * against the state at the submit (and its CRCs by the manifest):
 *  1. two updates cut at element 70000: every piece but piece 4 is teed
 *     (36 of 39, one thread);
 *  2. the same, then [1000, 1100) updated again: piece 0's teed copy is
 *     stale and must not be used (33 of 39);
 *  3. pieces 0-1 of the parameters updated in another buffer (a slice):
 *     their teed copy would not be the live state's (34 of 39: the moments'
 *     pieces 0-1 are the live ones);
 *  4. two threads, each update cut between them (their pieces copied after);
 *  5. not armed: nothing teed.
 * Without staging (blocked), arming does nothing and the snapshots are
 * the same. */
static void test_writer_tee(void)
{
    char shm[256], dir[DT_CKPT_PATH_MAX], staging[300];
    if (!shm_make(shm, staging, "tee", "the tee"))
        return;
    for (int blocked = 0; blocked <= 1; blocked++) {
        if (blocked)
            block_staging(staging);
        dt_optimizer *o;
        dt_params *p = make_params(50000, &o, 1.0f);
        reports r = {0};
        dt_ckpt_writer_config cfg = {shm, 2, meta, -1, NULL, on_report, &r, false, true};
        dt_ckpt_writer *w;
        EXPECT_STATUS(dt_ckpt_writer_start(&cfg, p, o, &w), DT_OK);
        int64_t n = dt_params_numel(p), count;
        EXPECT_EQ(n, 200004);
        float *values = dt_params_values(p), *state = dt_optimizer_state(o, &count);
        float *want = malloc((size_t)(n + count) * sizeof(float)), *grad = malloc((size_t)n * sizeof(float)),
              *other = malloc(2 * 16384 * sizeof(float));
        EXPECT(want && grad && other);
        if (!want || !grad || !other)
            return;
        const int teed_by_step[] = {0, 36, 33, 34, -1, 0}; /* -1: some, not all (the threads' cuts) */
        int64_t teed_before = 0;
        for (int64_t step = 1; step <= 5; step++) {
            EXPECT_STATUS(dt_set_threads(step == 4 ? 2 : 1), DT_OK);
            for (int64_t i = 0; i < n; i++)
                grad[i] = 0.5f + (float)((i * 7 + step) % 13);
            if (step != 5)
                dt_ckpt_writer_arm(w);
            EXPECT_STATUS(dt_optimizer_update_range(o, values, grad, 0, 70000, 1e-3f), DT_OK);
            EXPECT_STATUS(dt_optimizer_update_range(o, values, grad, 70000, n - 70000, 1e-3f), DT_OK);
            if (step == 2)
                EXPECT_STATUS(dt_optimizer_update_range(o, values, grad, 1000, 100, 1e-3f), DT_OK);
            if (step == 3) {
                memcpy(other, values, 2 * 16384 * sizeof(float));
                EXPECT_STATUS(dt_optimizer_update_slice(o, other, grad, 0, 2 * 16384, 1e-3f), DT_OK);
            }
            dt_optimizer_end_step(o);
            memcpy(want, values, (size_t)n * sizeof(float));
            memcpy(want + n, state, (size_t)count * sizeof(float));
            dt_ckpt_progress pr = progress(step);
            EXPECT_STATUS(dt_ckpt_writer_submit(w, &pr, NULL, NULL), DT_OK);
            EXPECT_STATUS(dt_ckpt_writer_flush(w), DT_OK);
            int64_t teed = (int64_t)(dt_ckpt_writer_teed(w, NULL) * 39.0 * (double)step + 0.5);
            if (blocked)
                EXPECT_EQ(teed, 0);
            else if (teed_by_step[step] >= 0)
                EXPECT_EQ(teed - teed_before, teed_by_step[step]);
            else
                EXPECT(teed - teed_before > 0 && teed - teed_before < 39);
            teed_before = teed;
            EXPECT_STATUS(dt_ckpt_step_dir(shm, step, dir, sizeof dir), DT_OK);
            dt_ckpt_manifest *mf;
            EXPECT_STATUS(dt_ckpt_manifest_open(dir, &mf), DT_OK); /* every file's size and CRC-32 checked */
            dt_ckpt_manifest_close(mf);
            dt_optimizer *o2;
            dt_params *p2 = make_params(50000, &o2, 0.0f);
            EXPECT_STATUS(dt_ckpt_load(dir, p2, o2), DT_OK);
            int64_t c2;
            const float *s2 = dt_optimizer_state(o2, &c2);
            EXPECT(memcmp(dt_params_values(p2), want, (size_t)n * sizeof(float)) == 0);
            EXPECT(c2 == count && memcmp(s2, want + n, (size_t)count * sizeof(float)) == 0);
            dt_optimizer_destroy(o2);
            dt_params_destroy(p2);
        }
        EXPECT_STATUS(dt_set_threads(1), DT_OK);
        EXPECT_EQ(r.failures, 0);
        free(want);
        free(grad);
        free(other);
        dt_ckpt_writer_stop(w);
        dt_optimizer_destroy(o);
        dt_params_destroy(p);
        shm_clear(shm, false);
    }
    shm_clear(shm, true);
}

/* Mappings of staged files whose files do not come back (removed, not
 * pruned into .spare) are unmapped once `horizon` stagings passed them
 * over, and a file that comes back is used through its mapping. */
static void test_staging_maps_horizon(void)
{
    char shm[64], cmd[256];
    snprintf(shm, sizeof shm, "/dev/shm/dtrain-test-maps.XXXXXX");
    if (!mkdtemp(shm)) {
        printf("  (no /dev/shm here: the staging's mappings are not checked)\n");
        return;
    }
    dt_optimizer *o;
    dt_params *p = make_params(40, &o, 1.0f);
    dt__ckpt_maps maps = {.horizon = 1};
    const bool want[3] = {true, true, false};
    for (int round = 1; round <= 4; round++) {
        dt__ckpt_staging st;
        EXPECT_STATUS(dt__ckpt_staging_open(&st, shm, p, &meta, want, &maps), DT_OK);
        dt__ckpt_staging_data(&st, 0)[0] = (float)round;
        dt__ckpt_staging_release(&st);
        /* round 1's files go away; round 2's come back as spares for round 3 */
        if (round == 2)
            snprintf(cmd, sizeof cmd, "mkdir -p '%s/.spare' && mv '%s'/.staging/* '%s/.spare/'", shm, shm, shm);
        else
            snprintf(cmd, sizeof cmd, "rm -f '%s'/.staging/*", shm);
        EXPECT(system(cmd) == 0);
        if (round == 1)
            EXPECT(maps.made == 2 && maps.reused == 0 && maps.n == 2);
        if (round == 2) /* round 1's, removed, still within the horizon */
            EXPECT(maps.made == 4 && maps.n == 4);
        if (round == 3) /* round 2's found mapped; round 1's dropped */
            EXPECT(maps.made == 4 && maps.reused == 2 && maps.n == 2);
        if (round == 4)
            EXPECT(maps.made == 6 && maps.n == 4);
    }
    dt__ckpt_maps_clear(&maps);
    EXPECT_EQ(maps.n, 0);
    dt_optimizer_destroy(o);
    dt_params_destroy(p);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", shm);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", shm);
}

/* n bytes of a linear congruential sequence from seed (NULL, counted as a
 * failure, when out of memory); caller frees. */
static unsigned char *random_bytes(size_t n, uint32_t seed)
{
    unsigned char *buf = malloc(n);
    EXPECT(buf != NULL);
    for (size_t i = 0; buf && i < n; i++)
        buf[i] = (unsigned char)((seed = seed * 1664525u + 1013904223u) >> 24);
    return buf;
}

/* ISA-L's CRC-32 gives zlib's values: the check value, every length 0-300
 * at every alignment 0-15, and a 3 MiB buffer split into uneven chained
 * pieces (checkpoints chain the header and the data). */
static void test_crc32_isal_equals_zlib(void)
{
    EXPECT(dt__crc32_zlib(0, "123456789", 9) == 0xCBF43926u);
    EXPECT(dt__crc32(0, "123456789", 9) == 0xCBF43926u);
    size_t n = (size_t)3 << 20;
    unsigned char *buf = random_bytes(n, 12345);
    if (!buf)
        return;
    uint32_t got;
    if (!dt__crc32_isal(0, buf, 1, &got)) {
        printf("  (built without ISA-L: zlib computes the CRC-32s; scripts/setup.sh installs libisal-dev)\n");
        free(buf);
        return;
    }
    int bad = 0;
    for (size_t align = 0; align < 16; align++)
        for (size_t len = 0; len <= 300; len++) {
            dt__crc32_isal(0x5a5a5a5au, buf + align, len, &got);
            bad += got != dt__crc32_zlib(0x5a5a5a5au, buf + align, len);
        }
    EXPECT(bad == 0);
    uint32_t whole = dt__crc32_zlib(0, buf, n), chained = 0;
    for (size_t at = 0, piece = 1; at < n; at += piece, piece = piece * 7 + 3)
        chained = dt__crc32(chained, buf + at, piece < n - at ? piece : n - at);
    EXPECT(chained == whole);
    EXPECT(dt__crc32_isal(0, buf, n, &got) && got == whole);
    free(buf);
}

/* The combine of two parts' CRCs is that of the whole, by either form
 * (a staged snapshot's file CRC is put together so from its pieces'). */
static void test_crc32_combine(void)
{
    size_t n = (size_t)3 << 20;
    unsigned char *buf = random_bytes(n, 777);
    if (!buf)
        return;
    uint32_t whole = dt__crc32_zlib(0, buf, n);
    for (size_t split = 0; split <= n; split += n / 5 + 1) {
        uint32_t a = dt__crc32(0, buf, split), b = dt__crc32(0, buf + split, n - split);
        EXPECT(dt__crc32_combine(a, b, n - split) == whole);
        EXPECT(dt__crc32_combine_op(a, b, dt__crc32_combine_gen(n - split)) == whole);
    }
    free(buf);
}

int main(void)
{
    snprintf(root, sizeof root, "%s/dtrain-test-ckpt.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return 1;
    }
    test_write_and_read();
    test_update_per_worker();
    test_newest_complete();
    test_corrupt();
    test_clear();
    test_writer();
    test_sharded();
    test_model_streamed();
    test_shard_pieces();
    test_spares_on_tmpfs();
    test_crc32_isal_equals_zlib();
    test_crc32_combine();
    test_writer_staged(false, 40);
    test_writer_staged(true, 40);
    test_writer_staged(true, 200000);
    test_staging_maps_horizon();
    test_writer_tee();
    if (!check_failures) {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", root);
    } else {
        fprintf(stderr, "left %s for inspection\n", root);
    }
    return CHECK_DONE("test_ckpt");
}
