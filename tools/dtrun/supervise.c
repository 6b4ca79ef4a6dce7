/* Supervise the local ranks: copy their output line by line with a "[rank] "
 * prefix, forward SIGINT/SIGTERM, and on the first failure stop the rest
 * (SIGTERM, then SIGKILL after KILL_AFTER seconds). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "dtrun.h"

#define KILL_AFTER 3.0
#define SUSPECT_WAIT 0.5 /* seconds a rank that exited with an error waits to be blamed (see the reaping below) */
#define HOLD_FOR 2.0          /* seconds a line passing another rank's failure on waits for that failure's reason */
#define HOLD_MAX (64 * 1024)  /* a rank's held lines at most: beyond, printed at once */

/* Signal handlers may only touch these (the launcher's one signal singleton). */
static volatile sig_atomic_t pending_signal;
static int wake_pipe[2] = {-1, -1};

static void on_signal(int sig)
{
    int saved = errno;
    if (sig != SIGCHLD)
        pending_signal = sig;
    (void)!write(wake_pipe[1], "", 1);
    errno = saved;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void emit(FILE *to, int rank, const char *line, size_t len)
{
    fprintf(to, "[%d] %.*s\n", rank, (int)len, line);
    fflush(to);
}

/* A line that passes on another rank's failure: the library ends such an
 * error "(reported by rank N (host:port))" (docs/failures.md). */
static bool passed_on(const char *line, size_t len)
{
    static const char mark[] = "(reported by rank ";
    return memmem(line, len, mark, sizeof mark - 1) != NULL;
}

/* One line of rank k's output: printed, or (stderr passing another rank's
 * failure on) held so that the failure's own reason comes first.  Every
 * rank's pipe is read in rank order, so without this a rank that reports
 * rank 7's abort prints before rank 7 itself whenever both are ready. */
static void line_out(dtrun_child *k, FILE *to, const char *line, size_t len)
{
    if (to == stderr && passed_on(line, len)) {
        k->secondary = true;
        char *grown = k->held_len + len + 1 <= HOLD_MAX ? realloc(k->held, k->held_len + len + 1) : NULL;
        if (grown) {
            if (!k->held_len)
                k->held_at = now_s();
            k->held = grown;
            memcpy(k->held + k->held_len, line, len);
            k->held[k->held_len + len] = '\n';
            k->held_len += len + 1;
            return;
        }
    } else if (to == stderr) {
        k->spoke = true;
    }
    emit(to, k->rank, line, len);
}

/* Print the held lines: every rank's (all), or those held for HOLD_FOR. */
static void release_held(dtrun_child *kids, int n, bool all)
{
    for (int i = 0; i < n; i++) {
        dtrun_child *k = &kids[i];
        if (!k->held_len || (!all && now_s() - k->held_at < HOLD_FOR))
            continue;
        for (char *line = k->held, *nl; line < k->held + k->held_len; line = nl + 1) {
            nl = memchr(line, '\n', (size_t)(k->held + k->held_len - line));
            emit(stderr, k->rank, line, (size_t)(nl - line));
        }
        free(k->held);
        k->held = NULL;
        k->held_len = 0;
    }
}

/* Read what is available of one of k's pipes; print complete lines, keep the rest. */
static void pump(dtrun_child *k, bool err)
{
    int *fd = err ? &k->err_fd : &k->out_fd;
    char *buf = err ? k->err_buf : k->out_buf;
    size_t *len = err ? &k->err_len : &k->out_len, cap = err ? sizeof k->err_buf : sizeof k->out_buf;
    FILE *to = err ? stderr : stdout;
    while (*fd >= 0) {
        ssize_t n = read(*fd, buf + *len, cap - *len);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (n <= 0) {
            if (*len)
                line_out(k, to, buf, *len);
            *len = 0;
            close(*fd);
            *fd = -1;
            return;
        }
        *len += (size_t)n;
        char *start = buf, *nl;
        while ((nl = memchr(start, '\n', *len - (size_t)(start - buf)))) {
            line_out(k, to, start, (size_t)(nl - start));
            start = nl + 1;
        }
        *len -= (size_t)(start - buf);
        memmove(buf, start, *len);
        if (*len == cap) { /* a very long line: print what we have */
            line_out(k, to, buf, *len);
            *len = 0;
        }
    }
}

static void pump_all(dtrun_child *kids, int n)
{
    for (int i = 0; i < n; i++) {
        pump(&kids[i], false);
        pump(&kids[i], true);
    }
}

/* How well a failed rank explains the job's failure, to name it: killed by
 * a signal (the others usually failed because of it), then one that printed
 * an error of its own, then a silent one, then one that only passed
 * another's failure on. */
static int blame(const dtrun_child *k)
{
    return WIFSIGNALED(k->status) ? 3 : !k->secondary && k->spoke ? 2 : !k->secondary ? 1 : 0;
}

static void describe(const dtrun_child *k, char *buf, size_t len)
{
    if (WIFEXITED(k->status))
        snprintf(buf, len, "rank %d (pid %d) exited with status %d", k->rank, (int)k->pid, WEXITSTATUS(k->status));
    else if (WIFSIGNALED(k->status))
        snprintf(buf, len, "rank %d (pid %d) was killed by signal %d (%s)", k->rank, (int)k->pid,
                 WTERMSIG(k->status), strsignal(WTERMSIG(k->status)));
    else
        snprintf(buf, len, "rank %d (pid %d) ended with wait status %d", k->rank, (int)k->pid, k->status);
}

static void signal_all(dtrun_child *kids, int n, int sig)
{
    for (int i = 0; i < n; i++)
        if (!kids[i].exited && kids[i].pid > 0) {
            kill(kids[i].pid, sig);
            if (sig == SIGTERM) /* a stopped (SIGSTOP) rank acts on it only once continued */
                kill(kids[i].pid, SIGCONT);
        }
}

void dtrun_supervise_wake(void)
{
    if (wake_pipe[1] >= 0)
        (void)!write(wake_pipe[1], "", 1);
}

static void install_handlers(void)
{
    if (pipe2(wake_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
        wake_pipe[0] = wake_pipe[1] = -1;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGCHLD, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int dtrun_supervise(const dtrun_opts *o, dtrun_child *kids, int n, dtrun_stop_hook hook, void *arg,
                    dtrun_outcome *outcome, char *what_out, size_t what_len)
{
    install_handlers();
    bool stopped = false;
    struct pollfd *pfds = calloc((size_t)(2 * n + 1), sizeof *pfds);
    int living = n, failed = -1, forwarded = 0, code = 0, suspect = -1;
    double kill_at = 0, exited_at = 0, suspect_at = 0;
    while (living > 0 || (exited_at > 0 && now_s() - exited_at < 0.5)) {
        int np = 0;
        pfds[np++] = (struct pollfd){.fd = wake_pipe[0], .events = POLLIN};
        for (int i = 0; i < n; i++) {
            if (kids[i].out_fd >= 0)
                pfds[np++] = (struct pollfd){.fd = kids[i].out_fd, .events = POLLIN};
            if (kids[i].err_fd >= 0)
                pfds[np++] = (struct pollfd){.fd = kids[i].err_fd, .events = POLLIN};
        }
        if (living == 0 && np == 1)
            break; /* every rank exited and every pipe is drained */
        poll(pfds, (nfds_t)np, kill_at > 0 || living == 0 || hook || suspect >= 0 ? 100 : 1000);
        char drain[64];
        while (read(wake_pipe[0], drain, sizeof drain) > 0)
            ;
        pump_all(kids, n);
        release_held(kids, n, false);
        if (pending_signal) {
            int sig = pending_signal;
            pending_signal = 0;
            forwarded++;
            fprintf(stderr, "dtrun: received %s; forwarding it to the ranks%s\n", strsignal(sig),
                    forwarded > 1 ? " (again: killing them)" : "");
            signal_all(kids, n, forwarded > 1 ? SIGKILL : sig);
            if (!code)
                code = 128 + sig;
            if (!kill_at)
                kill_at = now_s() + KILL_AFTER;
        }
        /* Reap everything that ended.  When several ranks failed, name the
         * one that explains it best (blame): one killed by a signal, as the
         * others usually exited because of it (their communicator reported
         * the dead peer), else one that said why rather than one passing
         * another's failure on.  Such a rank can be reaped after them -- the
         * kernel closes a killed process's sockets before it becomes a
         * zombie -- so a rank that exited with an error is only a suspect for
         * up to SUSPECT_WAIT seconds while others still run.  What a reaped
         * rank wrote is read first: it is all in its pipes. */
        int status, culprit = -1;
        pid_t pid;
        while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
            for (int i = 0; i < n; i++) {
                if (kids[i].pid != pid || kids[i].exited)
                    continue;
                kids[i].exited = true;
                kids[i].status = status;
                living--;
                pump(&kids[i], false);
                pump(&kids[i], true);
                bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
                if (!ok)
                    dt_phase_mark("dtrun node %d rank %d ended (wait status %d)", o->node_rank, kids[i].rank, status);
                if (!ok && (culprit < 0 || blame(&kids[i]) > blame(&kids[culprit])))
                    culprit = i;
            }
        }
        if (culprit >= 0 && (suspect < 0 || blame(&kids[culprit]) > blame(&kids[suspect]))) {
            if (suspect < 0)
                suspect_at = now_s();
            suspect = culprit;
        }
        bool named = suspect >= 0 && (WIFSIGNALED(kids[suspect].status) || living == 0 ||
                                      now_s() - suspect_at >= SUSPECT_WAIT);
        if (named && failed < 0 && !forwarded && !stopped) { /* stopped: our SIGTERM, not a failure */
            failed = suspect;
            pump_all(kids, n); /* what the ranks wrote before, printed before this line */
            char what[256];
            describe(&kids[suspect], what, sizeof what);
            fprintf(stderr, "dtrun: %s; stopping the other ranks\n", what);
            dt_phase_mark("dtrun node %d failure named; stopping the other ranks", o->node_rank);
            signal_all(kids, n, SIGTERM);
            kill_at = now_s() + KILL_AFTER;
        }
        if (hook && !stopped && failed < 0 && !forwarded && living > 0) {
            if (hook(arg)) { /* another node ended this generation */
                dt_phase_mark("dtrun node %d saw the generation end; stopping its ranks", o->node_rank);
                stopped = true;
                signal_all(kids, n, SIGTERM);
                kill_at = now_s() + KILL_AFTER;
            }
        }
        if (kill_at > 0 && living > 0 && now_s() >= kill_at) {
            signal_all(kids, n, SIGKILL);
            kill_at = now_s() + 3600;
        }
        if (living == 0 && exited_at == 0) {
            exited_at = now_s();
            dt_phase_mark("dtrun node %d every rank exited", o->node_rank);
        }
    }
    /* A grandchild may hold a pipe open; stop reading after the grace period. */
    for (int i = 0; i < n; i++) {
        if (kids[i].out_fd >= 0)
            close(kids[i].out_fd);
        if (kids[i].err_fd >= 0)
            close(kids[i].err_fd);
    }
    release_held(kids, n, true); /* after every rank's own reason */
    free(pfds);
    if (outcome)
        *outcome = forwarded ? DTRUN_SIGNALLED : failed >= 0 ? DTRUN_FAILED : stopped ? DTRUN_STOPPED : DTRUN_OK;
    if (failed >= 0 && !forwarded) {
        if (what_out)
            describe(&kids[failed], what_out, what_len);
        const dtrun_child *k = &kids[failed];
        return WIFEXITED(k->status) ? WEXITSTATUS(k->status) : 128 + WTERMSIG(k->status);
    }
    return stopped && !code ? 1 : code;
}
