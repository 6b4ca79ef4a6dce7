/* A SIGTERM that falls in a memory snapshot's background write lets the
 * write finish first.  dtrun stops a generation's other ranks with SIGTERM
 * the moment one rank fails, which is when a snapshot of the step just
 * logged is being written: killed then, the rank leaves that snapshot
 * half-written (the previous one is used: a step lost) and, under data
 * parallelism across hosts, its node's newest older than the lead's (the
 * restart copies the lead's over the network: 0.3 s and more for
 * gpt-mini).  A write on tmpfs takes tens of milliseconds; the wait is
 * bounded by WAIT_MS all the same (a starved CPU took over a second: the
 * restart waited for it), after which the signal acts and the write is
 * lost as before.  With no write in flight the signal acts at once, as
 * without the handler.  Lock-free atomics: safe in a signal handler. */
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/time.h>

#include "train_run.h"

#define WAIT_MS 300 /* the longest a SIGTERM waits for a write in flight */

static atomic_int in_flight, term_seen;

static void die(void)
{
    signal(SIGTERM, SIG_DFL);
    raise(SIGTERM);
}

static void on_alarm(int sig)
{
    (void)sig;
    die();
}

static void on_term(int sig)
{
    (void)sig;
    if (atomic_exchange(&term_seen, 1))
        return; /* a second SIGTERM: the first one's wait is under way */
    if (atomic_load(&in_flight) <= 0)
        die();
    struct itimerval limit = {.it_value = {0, WAIT_MS * 1000}};
    setitimer(ITIMER_REAL, &limit, NULL); /* then on_alarm */
}

void dtrain_snapshot_term_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    sa.sa_handler = on_term;
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
