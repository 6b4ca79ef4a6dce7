/* Start the local ranks.  The environment of each child is built before
 * fork (dtrun has store threads; only async-signal-safe calls follow fork). */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrun.h"

extern char **environ;

static const char *const managed[] = {"DT_RANK=", "DT_WORLD_SIZE=", "DT_LOCAL_RANK=", "DT_LOCAL_WORLD_SIZE=",
                                      "DT_MASTER_ADDR=", "DT_MASTER_PORT=", "DT_JOB_TOKEN=", "DT_STORE=",
                                      "DT_NODE_RANK=", "DT_RESTART=", "DT_RESTARTABLE=", "DT_PS_SERVERS=", "DT_SNAPSHOT_DIR=", "OPENBLAS_CORETYPE=",
                                      NULL};

static bool is_managed(const char *entry)
{
    for (int i = 0; managed[i]; i++)
        if (strncmp(entry, managed[i], strlen(managed[i])) == 0)
            return true;
    return false;
}

/* path is a file we may execute: 0, or the errno why not. */
static int runnable(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return errno;
    if (S_ISDIR(st.st_mode))
        return EISDIR;
    return access(path, X_OK) == 0 ? 0 : errno;
}

bool dtrun_program_found(const char *prog, char *why, size_t len)
{
    if (!prog[0]) {
        snprintf(why, len, "the program's name is empty");
        return false;
    }
    if (strchr(prog, '/')) {
        int e = runnable(prog);
        if (e)
            snprintf(why, len, "cannot execute %s: %s", prog, strerror(e));
        return e == 0;
    }
    const char *path = getenv("PATH");
    if (!path)
        path = "/bin:/usr/bin"; /* execvpe's search without PATH (glibc) */
    for (const char *d = path;; d++) {
        const char *end = strchr(d, ':');
        size_t n = end ? (size_t)(end - d) : strlen(d);
        char full[4352];
        snprintf(full, sizeof full, "%.*s/%s", (int)(n ? n : 1), n ? d : ".", prog); /* empty entry: . */
        if (runnable(full) == 0)
            return true;
        if (!end)
            break;
        d = end;
    }
    snprintf(why, len,
             "'%s' is not found on PATH (%.3000s): give its path (after make: build/bin/%s) or add its directory "
             "to PATH",
             prog, path, prog);
    return false;
}

/* environ minus the DT_* variables dtrun sets, plus this rank's values;
 * entries from *added on are dtrun's own strings (the caller frees them). */
static char **child_env(const dtrun_opts *o, const dtrun_layout *l, int local, size_t *added)
{
    size_t n = 0;
    while (environ[n])
        n++;
    char **env = calloc(n + 20, sizeof *env);
    if (!env)
        return NULL;
    const char *core = dt_blas_coretype_hint();
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if ((!is_managed(environ[i]) && !(o->timeline[0] && !strncmp(environ[i], "DT_TIMELINE=", 12))) ||
            (!strncmp(environ[i], "OPENBLAS_CORETYPE=", 18) && !core))
            env[k++] = environ[i];
    *added = k;
    char buf[4200];
#define ADD(...)                                  \
    do {                                          \
        snprintf(buf, sizeof buf, __VA_ARGS__);   \
        env[k++] = strdup(buf);                   \
    } while (0)
    ADD("DT_RANK=%d", l->first_rank + local);
    ADD("DT_WORLD_SIZE=%d", l->world_size);
    ADD("DT_LOCAL_RANK=%d", local);
    ADD("DT_LOCAL_WORLD_SIZE=%d", o->nproc);
    ADD("DT_MASTER_ADDR=%s", o->master_host);
    ADD("DT_MASTER_PORT=%d", o->master_port);
    ADD("DT_JOB_TOKEN=%s", o->token);
    ADD("DT_STORE=external");
    ADD("DT_NODE_RANK=%d", o->node_rank);
    ADD("DT_RESTART=%d", l->generation);
    if (o->max_restarts > 0 || o->nnodes_min < o->nnodes)
        ADD("DT_RESTARTABLE=1");
    if (o->servers > 0)
        ADD("DT_PS_SERVERS=%d", o->servers);
    if (o->timeline[0])
        ADD("DT_TIMELINE=%s", o->timeline);
    if (o->snapshot_dir[0])
        ADD("DT_SNAPSHOT_DIR=%s", o->snapshot_dir);
    if (core) /* NULL when the user chose one (theirs passes through) or DT_BLAS_REEXEC=0 */
        ADD("OPENBLAS_CORETYPE=%s", core);
#undef ADD
    return env;
}

int dtrun_last_first_rank = -1, dtrun_last_nproc;

dt_status dtrun_spawn(const dtrun_opts *o, const dtrun_layout *l, dtrun_child *kids, int *started)
{
    *started = 0;
    dtrun_last_first_rank = l->first_rank;
    dtrun_last_nproc = o->nproc;
    pid_t parent = getpid();
    for (int i = 0; i < o->nproc; i++) {
        dtrun_child *k = &kids[i];
        memset(k, 0, sizeof *k);
        k->rank = l->first_rank + i;
        k->out_fd = k->err_fd = -1;
        int out[2], err[2];
        size_t added = 0;
        char **env = child_env(o, l, i, &added);
        if (!env || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
            fprintf(stderr, "dtrun: cannot set up rank %d: %s\n", k->rank, strerror(errno));
            return DT_ERR_SYSTEM;
        }
        cpu_set_t cpus;
        bool bound = dtrun_cpu_block(o, i, &cpus) > 0;
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "dtrun: fork for rank %d failed: %s\n", k->rank, strerror(errno));
            return DT_ERR_SYSTEM;
        }
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL); /* ranks never outlive their launcher */
            if (getppid() != parent)
                _exit(127);
            sigset_t none;
            sigemptyset(&none);
            sigprocmask(SIG_SETMASK, &none, NULL);
            signal(SIGINT, SIG_DFL);
            signal(SIGTERM, SIG_DFL);
            signal(SIGPIPE, SIG_DFL);
            if (bound && sched_setaffinity(0, sizeof cpus, &cpus) != 0) {
                const char *msg = "dtrun: warning: cannot bind the rank to its CPUs; running unbound\n";
                (void)!write(2, msg, strlen(msg));
            }
            if (o->prefix) {
                dup2(out[1], 1);
                dup2(err[1], 2);
            }
            execvpe(o->argv[0], o->argv, env);
            /* checked before the fork (dtrun_program_found): here only what
             * changed since, or what exec alone refuses; no strerror after
             * fork (not async-signal-safe), so the common reasons by name */
            int e = errno;
            const char *msg = "dtrun: cannot execute the program: ";
            const char *reason = e == ENOENT    ? ": no such file (or its interpreter is missing)\n"
                                 : e == EACCES  ? ": permission denied\n"
                                 : e == ENOEXEC ? ": not an executable format this machine runs\n"
                                 : e == ENOMEM  ? ": out of memory\n"
                                 : e == E2BIG   ? ": the arguments and environment are too long\n"
                                                : "\n";
            (void)!write(2, msg, strlen(msg));
            (void)!write(2, o->argv[0], strlen(o->argv[0]));
            (void)!write(2, reason, strlen(reason));
            _exit(127);
        }
        for (size_t j = added; env[j]; j++) /* the strings dtrun made; environ's are not ours */
            free(env[j]);
        free(env);
        close(out[1]);
        close(err[1]);
        if (o->prefix) {
            k->out_fd = out[0];
            k->err_fd = err[0];
            fcntl(out[0], F_SETFL, O_NONBLOCK);
            fcntl(err[0], F_SETFL, O_NONBLOCK);
        } else {
            close(out[0]);
            close(err[0]);
        }
        k->pid = pid;
        (*started)++;
    }
    dt_phase_mark("dtrun node %d started generation %d's ranks", o->node_rank, l->generation);
    return DT_OK;
}
