/* A SIGTERM that falls in a memory snapshot's background write lets the
 * write finish first.  dtrun stops a generation's other ranks with SIGTERM
 * the moment one rank fails, which is when a snapshot of the step just
 * logged is being written: killed then, the rank leaves that snapshot
 * half-written (the previous one is used: a step lost) and, under data
 * parallelism across hosts, its node's newest older than the lead's (the
 * restart copies the lead's over the network: 0.3 s and more for
 * gpt-mini).  A write on tmpfs takes milliseconds, and dtrun's SIGKILL 3 s
 * later bounds the wait.  With no write in flight the signal acts at once,
 * as without the handler.  Lock-free atomics: safe in a signal handler. */
#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "train_run.h"

static atomic_int in_flight, term_seen;

static void die(void)
{
    signal(SIGTERM, SIG_DFL);
    raise(SIGTERM);
}

static void on_term(int sig)
{
    (void)sig;
    atomic_store(&term_seen, 1);
    if (atomic_load(&in_flight) <= 0)
        die();
}

void dtrain_snapshot_term_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
}

/* A write's submit (after it returned) and its report, on the writer
 * thread, come in either order, so in_flight may dip to -1 between them;
 * whichever brings it back to 0 acts on a SIGTERM seen meanwhile.  (The
 * handler sets term_seen before it reads in_flight, these change in_flight
 * before they read term_seen: one of them sees the other and ends the
 * process.) */
void dtrain_snapshot_term_submitted(void)
{
    if (atomic_fetch_add(&in_flight, 1) == -1 && atomic_load(&term_seen))
        die();
}

void dtrain_snapshot_term_written(void)
{
    if (atomic_fetch_sub(&in_flight, 1) == 1 && atomic_load(&term_seen))
        die();
}
