/* Unit tests of where a rank learns its place: Slurm host lists, the store's
 * host and port under srun, and the job token from the environment or a file. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/local_ranks.h"
#include "check.h"
#include "comm/launch_env.h"
#include "comm/launch_slurm.h"
#include "dtrain/base.h"
#include "dtrain/tensor.h"

static void first_host_is(const char *list, const char *want)
{
    char out[64] = "";
    dt_status s = dt__slurm_first_host("SLURM_JOB_NODELIST", list, out, sizeof out);
    EXPECT_STATUS(s, DT_OK);
    if (strcmp(out, want) != 0) {
        fprintf(stderr, "first host of '%s' is '%s', expected '%s'\n", list, out, want);
        EXPECT(0);
    }
}

static void first_host_refused(const char *list, const char *why)
{
    char out[16];
    EXPECT_STATUS(dt__slurm_first_host("SLURM_JOB_NODELIST", list, out, sizeof out), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "SLURM_JOB_NODELIST");
    EXPECT_CONTAINS(dt_last_error(), why);
}

static void test_first_host(void)
{
    first_host_is("n0", "n0");
    first_host_is("n[0-3]", "n0");
    first_host_is("node[001-004,010]", "node001");
    first_host_is("gpu[7,2-3],cpu1", "gpu7");
    first_host_is("a1,b[2-3]", "a1");
    first_host_is("rack[1-2]-n[3-4]", "rack1-n3");
    first_host_is("10.0.0.[5-6]", "10.0.0.5");
    first_host_is("host.example.org", "host.example.org");
    first_host_refused("n[0-3", "without ']'");
    first_host_refused("n[a-b]", "expected a number");
    first_host_refused("n[1-2x]", "unexpected 'x'");
    first_host_refused("", "no host name");
    first_host_refused(",n1", "no host name");
    first_host_refused("n 1", "unexpected ' '");
    first_host_refused("averyveryverylonghostname", "too long");
}

static const char *const slurm_vars[] = {"SLURM_PROCID",        "SLURM_NTASKS",      "SLURM_LOCALID",
                                         "SLURM_NTASKS_PER_NODE", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST",
                                         "SLURM_JOB_ID",        "SLURM_JOBID",       "SLURM_STEP_ID",
                                         "SLURM_SUBMIT_DIR",    "DT_MASTER_ADDR",    "MASTER_ADDR",
                                         "DT_MASTER_PORT",      "MASTER_PORT",       "DT_JOB_TOKEN",
                                         "DT_TOKEN_FILE",       "DT_RANK",           "DT_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK",
                                         "PMI_SIZE",            "DT_BACKEND",        "DT_LOCAL_WORLD_SIZE",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NODEID",
                                         "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", NULL};

static void clear_env(void)
{
    for (int i = 0; slurm_vars[i]; i++)
        unsetenv(slurm_vars[i]);
}

/* Rank 1 of a 4-task step on n[3-6], job 123457, step 2. */
static void set_srun_task(void)
{
    clear_env();
    setenv("SLURM_PROCID", "1", 1);
    setenv("SLURM_NTASKS", "4", 1);
    setenv("SLURM_LOCALID", "0", 1);
    setenv("SLURM_JOB_NODELIST", "n[1-9]", 1);
    setenv("SLURM_STEP_NODELIST", "n[3-6]", 1);
    setenv("SLURM_JOB_ID", "123457", 1);
    setenv("SLURM_STEP_ID", "2", 1);
    setenv("DT_JOB_TOKEN", "tok", 1);
}

static void write_file(const char *path, const char *text, int mode)
{
    FILE *f = fopen(path, "w");
    EXPECT(f != NULL);
    if (!f)
        return;
    fputs(text, f);
    fclose(f);
    chmod(path, (mode_t)mode);
}

/* e->master_source is want (NULL: none). */
static void source_is(const dt__launch_env *e, const char *want)
{
    check_count++;
    if (want ? !e->master_source || strcmp(e->master_source, want) != 0 : e->master_source != NULL) {
        check_failures++;
        fprintf(stderr, "master_source is \"%s\", expected \"%s\"\n", e->master_source ? e->master_source : "(null)",
                want ? want : "(null)");
    }
}

static void test_srun_defaults(void)
{
    dt__launch_env e;
    set_srun_task();
    EXPECT_STATUS(dt__launch_env_read(&e), DT_OK);
    EXPECT(strcmp(e.launcher, "slurm") == 0);
    EXPECT_EQ(e.rank, 1);
    EXPECT_EQ(e.size, 4);
    EXPECT(strcmp(e.master_host, "n3") == 0); /* the step's first node, not the job's */
    EXPECT_EQ(e.master_port, 10000 + (123457 % 2000) * 10 + 2);
    source_is(&e, "the first node of the Slurm step and a port from SLURM_JOB_ID; DT_MASTER_ADDR and "
                  "DT_MASTER_PORT override them");
    EXPECT(!e.serve_store);
    /* master_source names what Slurm gave: the host alone, the port alone. */
    setenv("MASTER_PORT", "4242", 1);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_OK);
    source_is(&e, "the first node of the Slurm step; DT_MASTER_ADDR overrides it");
    unsetenv("MASTER_PORT");
    setenv("MASTER_ADDR", "10.1.2.4", 1);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_OK);
    source_is(&e, "the port from SLURM_JOB_ID; DT_MASTER_PORT overrides it");
    unsetenv("MASTER_ADDR");

    /* Without a step list, the job's; a batch step's name counts as step 0. */
    unsetenv("SLURM_STEP_NODELIST");
    setenv("SLURM_STEP_ID", "batch", 1);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_OK);
    EXPECT(strcmp(e.master_host, "n1") == 0);
    EXPECT_EQ(e.master_port, 10000 + (123457 % 2000) * 10);

    /* Given values win, each on its own. */
    setenv("DT_MASTER_ADDR", "10.1.2.3", 1);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_OK);
    EXPECT(strcmp(e.master_host, "10.1.2.3") == 0);
    EXPECT_EQ(e.master_port, 10000 + (123457 % 2000) * 10);
    setenv("MASTER_PORT", "4242", 1);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_OK);
    EXPECT_EQ(e.master_port, 4242);
    source_is(&e, NULL);

    /* One rank under srun needs no store: no Slurm lookups. */
    set_srun_task();
    setenv("SLURM_NTASKS", "1", 1);
    setenv("SLURM_PROCID", "0", 1);
    unsetenv("SLURM_JOB_ID");
    EXPECT_STATUS(dt__launch_env_read(&e), DT_OK);

    /* What is missing or malformed is named. */
    set_srun_task();
    unsetenv("SLURM_JOB_ID");
    EXPECT_STATUS(dt__launch_env_read(&e), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "SLURM_JOB_ID");
    setenv("SLURM_JOBID", "77", 1); /* the older name */
    EXPECT_STATUS(dt__launch_env_read(&e), DT_OK);
    EXPECT_EQ(e.master_port, 10000 + 77 * 10 + 2);
    set_srun_task();
    setenv("SLURM_JOB_ID", "12x", 1);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "SLURM_JOB_ID");
    set_srun_task();
    unsetenv("SLURM_STEP_NODELIST");
    unsetenv("SLURM_JOB_NODELIST");
    EXPECT_STATUS(dt__launch_env_read(&e), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "DT_MASTER_ADDR");
    set_srun_task();
    setenv("SLURM_STEP_NODELIST", "n[3-", 1);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "SLURM_STEP_NODELIST");
}

static void test_token_sources(const char *dir)
{
    dt__launch_env e;
    char path[512], submit_file[600];
    snprintf(path, sizeof path, "%s/tok", dir);
    snprintf(submit_file, sizeof submit_file, "%s/" DT__SLURM_TOKEN_FILE, dir);

    /* DT_JOB_TOKEN first. */
    set_srun_task();
    setenv("DT_TOKEN_FILE", "/nonexistent/tok", 1);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_OK);
    EXPECT(strcmp(e.token, "tok") == 0);

    /* Then the file DT_TOKEN_FILE names: its first line, without the line end. */
    unsetenv("DT_JOB_TOKEN");
    EXPECT_STATUS(dt__launch_env_read(&e), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "/nonexistent/tok");
    write_file(path, "s3cret\r\nsecond line\n", 0600);
    setenv("DT_TOKEN_FILE", path, 1);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_OK);
    EXPECT(e.token && strcmp(e.token, "s3cret") == 0);
    write_file(path, "\n", 0600);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "is empty");
    char big[600];
    memset(big, 'k', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    write_file(path, big, 0600);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "longer than");

    /* Then, under srun, dtrain.token in the submit directory. */
    unsetenv("DT_TOKEN_FILE");
    setenv("SLURM_SUBMIT_DIR", dir, 1);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_ERR_INVALID); /* no file yet: no token */
    EXPECT_CONTAINS(dt_last_error(), "DT_JOB_TOKEN is not set");
    write_file(submit_file, "from-submit-dir\n", 0600);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_OK);
    EXPECT(e.token && strcmp(e.token, "from-submit-dir") == 0);
    /* A readable-by-others file still works (with a warning). */
    chmod(submit_file, 0644);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_OK);
    /* Not under Slurm, the submit directory means nothing. */
    clear_env();
    setenv("DT_RANK", "1", 1);
    setenv("DT_WORLD_SIZE", "2", 1);
    setenv("SLURM_SUBMIT_DIR", dir, 1);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "DT_JOB_TOKEN is not set");
    unlink(submit_file);
    unlink(path);
}

static void test_local_ranks(void)
{
    EXPECT_EQ(dt__slurm_tasks_on_node("4", 0), 4);
    EXPECT_EQ(dt__slurm_tasks_on_node("2(x3),1", 0), 2);
    EXPECT_EQ(dt__slurm_tasks_on_node("2(x3),1", 2), 2);
    EXPECT_EQ(dt__slurm_tasks_on_node("2(x3),1", 3), 1);
    EXPECT_EQ(dt__slurm_tasks_on_node("2(x3),1", 4), 0);
    EXPECT_EQ(dt__slurm_tasks_on_node("3,1,4(x2)", 3), 4);
    EXPECT_EQ(dt__slurm_tasks_on_node("2(x", 0), 0);
    EXPECT_EQ(dt__slurm_tasks_on_node("2(y3)", 0), 0);
    EXPECT_EQ(dt__slurm_tasks_on_node("2;3", 1), 0);
    EXPECT_EQ(dt__slurm_tasks_on_node("", 0), 0);
    EXPECT_EQ(dt__slurm_tasks_on_node(NULL, 0), 0);

    int n;
    const char *src;
    clear_env();
    EXPECT_STATUS(dt__local_ranks(&n, &src), DT_OK);
    EXPECT_EQ(n, 1);
    EXPECT(src == NULL);
    /* srun: this node's count in the step's list. */
    setenv("SLURM_PROCID", "5", 1);
    setenv("SLURM_STEP_TASKS_PER_NODE", "4(x2),2", 1);
    setenv("SLURM_TASKS_PER_NODE", "8(x2)", 1);
    setenv("SLURM_NODEID", "2", 1);
    EXPECT_STATUS(dt__local_ranks(&n, &src), DT_OK);
    EXPECT_EQ(n, 2);
    EXPECT(src && strcmp(src, "SLURM_STEP_TASKS_PER_NODE") == 0);
    setenv("SLURM_NODEID", "1", 1);
    EXPECT_STATUS(dt__local_ranks(&n, &src), DT_OK);
    EXPECT_EQ(n, 4);
    EXPECT_EQ(dt_local_ranks(), 4);
    unsetenv("SLURM_STEP_TASKS_PER_NODE"); /* the job's list, as in the batch script */
    EXPECT_STATUS(dt__local_ranks(&n, &src), DT_OK);
    EXPECT_EQ(n, 0 + 8);
    setenv("SLURM_TASKS_PER_NODE", "garbage", 1); /* unreadable: the option's count, else 1 */
    EXPECT_STATUS(dt__local_ranks(&n, &src), DT_OK);
    EXPECT_EQ(n, 1);
    setenv("SLURM_NTASKS_PER_NODE", "3", 1);
    EXPECT_STATUS(dt__local_ranks(&n, &src), DT_OK);
    EXPECT_EQ(n, 3);
    /* mpirun's and dtrun's own counts come first. */
    setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "6", 1);
    EXPECT_STATUS(dt__local_ranks(&n, &src), DT_OK);
    EXPECT_EQ(n, 6);
    setenv("DT_LOCAL_WORLD_SIZE", "7", 1);
    EXPECT_STATUS(dt__local_ranks(&n, &src), DT_OK);
    EXPECT_EQ(n, 7);
    setenv("DT_LOCAL_WORLD_SIZE", "7x", 1);
    EXPECT_STATUS(dt__local_ranks(&n, &src), DT_ERR_INVALID);
    EXPECT_CONTAINS(dt_last_error(), "DT_LOCAL_WORLD_SIZE");
    EXPECT_EQ(dt_local_ranks(), 1);

    /* The rank's dt__launch_env carries the same count, at most the world. */
    set_srun_task();
    setenv("SLURM_STEP_TASKS_PER_NODE", "2(x2)", 1);
    setenv("SLURM_NODEID", "0", 1);
    dt__launch_env e;
    EXPECT_STATUS(dt__launch_env_read(&e), DT_OK);
    EXPECT_EQ(e.local_size, 2);
    setenv("SLURM_STEP_TASKS_PER_NODE", "9", 1);
    EXPECT_STATUS(dt__launch_env_read(&e), DT_OK);
    EXPECT_EQ(e.local_size, 4);
    clear_env();
}

int main(void)
{
    char dir[] = "/tmp/dtrain-test-launch.XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    test_first_host();
    test_srun_defaults();
    test_token_sources(dir);
    test_local_ranks();
    rmdir(dir);
    return CHECK_DONE("test_launch");
}
