/* Host-wide shared segment for the collectives of ranks on one host.
 *
 * Where the pair rings (shm.h) move a collective as messages, one step per
 * peer and segment, an arena lets every rank of the host see every other
 * rank's data at once: each rank copies its part into its own slot, and the
 * ranks then read (and reduce) straight out of each other's slots.  A 1 MiB
 * allreduce of 4 ranks is two waits on the others instead of the ring's six
 * dependent message steps per segment, which is what counts when ranks share
 * cores (docs/design.md has the measurements).
 *
 * Layout: one control line per rank, then two sets of `nranks` slots of
 * `slot_bytes` each; consecutive rounds of a collective alternate sets, so a
 * rank can fill the next round's slot while the others still read the last.
 * After them, a ring of DT__ARENA_SMALL_DEPTH entries of
 * DT__ARENA_SMALL_BYTES, one per round, for the small operations that only
 * one rank writes (broadcast): the writer of round g may fill its entry once
 * every rank has finished round g - DT__ARENA_SMALL_DEPTH, so it can run that
 * many rounds ahead of its slowest reader instead of two.
 *
 * Progress is published through per-rank round counters (flags): a rank
 * stores round g into its flag once its part of round g is done, and waiters
 * compare with wrap-around: a flag counts as round g or later when it is at
 * most DT__ARENA_AHEAD rounds past g, so one left behind by up to 2^32 -
 * DT__ARENA_AHEAD rounds (REDUCED, published by large allreduces only) never
 * reads as ahead.  Counters start DT__ARENA_FIRST_ROUND, just short of the
 * wrap, so every job crosses it early.  Waiting is the caller's loop over
 * dt__arena_reached and dt__arena_sleep (a futex on the flag word, so a
 * sleeping rank costs nothing and wakes within microseconds of the store). */
#ifndef DT_TRANSPORT_SHM_ARENA_H
#define DT_TRANSPORT_SHM_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dtrain/base.h"

typedef struct dt__arena dt__arena;

/* The three stages of a round, one flag each per rank. */
typedef enum {
    DT__ARENA_READY,   /* this rank's input for the round is in its slot */
    DT__ARENA_REDUCED, /* this rank's share of the round is reduced, in its slot */
    DT__ARENA_DONE,    /* this rank has finished reading every slot of the round */
    DT__ARENA_NFLAGS
} dt__arena_flag;

enum { DT__ARENA_SMALL_DEPTH = 64, DT__ARENA_SMALL_BYTES = 4096 };
/* The first round of every arena (the flags start one before it). */
#define DT__ARENA_FIRST_ROUND (UINT32_MAX - 1023u)
/* How far past a waited-for round a flag may legitimately be. */
#define DT__ARENA_AHEAD (1u << 24)
/* Every this many rounds dt__arena_refresh runs (a power of 2, well under
 * DT__ARENA_AHEAD). */
#define DT__ARENA_REFRESH_ROUNDS (1u << 20)

/* Create the segment `name` (replacing a stale one) for nranks slots of
 * slot_bytes per set; every page is reserved now. */
dt_status dt__arena_create(const char *name, int nranks, size_t slot_bytes, dt__arena **out);
/* Map a segment another rank created; its geometry must be nranks x slot_bytes. */
dt_status dt__arena_attach(const char *name, int nranks, size_t slot_bytes, dt__arena **out);
/* Remove the name (mappings stay valid). */
void dt__arena_unlink(const char *name);
void dt__arena_close(dt__arena *a);

size_t dt__arena_slot_bytes(const dt__arena *a);
/* Rank `rank`'s slot in the set of round g. */
uint8_t *dt__arena_slot(const dt__arena *a, uint32_t g, int rank);

/* The ring entry of round g (DT__ARENA_SMALL_BYTES). */
uint8_t *dt__arena_small_entry(const dt__arena *a, uint32_t g);

/* Called by every rank at the start of each round g that is a multiple of
 * DT__ARENA_REFRESH_ROUNDS: brings this rank's REDUCED flag up to g - 1 (it
 * has finished every stage of the rounds before g) and this process's
 * remembered looks at the others' flags up to date, so that none falls
 * DT__ARENA_AHEAD or more behind and wraps into reading as ahead. */
void dt__arena_refresh(dt__arena *a, int me, uint32_t g);

/* Record that `rank` (the caller) has reached round g at this flag, and wake
 * any rank asleep on it. */
void dt__arena_publish(dt__arena *a, int rank, dt__arena_flag f, uint32_t g);
/* dt__arena_publish of READY for round g, with the signature of the
 * collective call the round belongs to (0: none), kept next to the flag.
 * A round of slots (small false) keeps it for rounds g and g + 1 (a rank
 * starts round g + 2 only once every rank is DONE with round g); a round of
 * the small ring (small true: a broadcast root) in one place that the next
 * such round overwrites, which readers of the small ring do not read (they
 * take the signature from the entry). */
void dt__arena_publish_ready(dt__arena *a, int rank, uint32_t g, uint64_t sig, bool small);
/* For a reader that saw rank's READY(g) and is not DONE with round g: true
 * and its signature when rank's round g was a round of slots; false when it
 * was not (*sig: the small round's signature when rank's last one was g,
 * else 0). */
bool dt__arena_ready_sig(const dt__arena *a, int rank, uint32_t g, uint64_t *sig);
/* Record that `rank` (the caller) has entered collective `seq` of
 * communicator comm_id, signed `sig`, whether it runs on the arena or as
 * messages.  A rank waiting in an arena round reads it on the slow path: a
 * peer in another collective of the same number that sends this rank no
 * message (a reduce or gather leaf elsewhere) is a mismatch, not a wait
 * until the deadline.  One writer per rank at a time (a communicator's calls
 * do not overlap). */
void dt__arena_publish_call(dt__arena *a, int rank, uint32_t comm_id, uint64_t seq, uint64_t sig);
/* True and rank's signature when rank is in collective `seq` of comm_id (as
 * far as a consistent look at its record tells); false otherwise. */
bool dt__arena_call(const dt__arena *a, int rank, uint32_t comm_id, uint64_t seq, uint64_t *sig);
/* Whether `rank` has reached round g (or later) at this flag. */
bool dt__arena_reached(const dt__arena *a, int rank, dt__arena_flag f, uint32_t g);
/* The same from what this process last read of the flag (dt__arena_reached,
 * dt__arena_refresh), without looking at it: false may be out of date. */
bool dt__arena_seen(const dt__arena *a, int rank, dt__arena_flag f, uint32_t g);
/* Sleep until `rank` reaches round g at this flag or timeout_ns passes (or a
 * signal arrives); the caller re-checks in any case. */
void dt__arena_sleep(dt__arena *a, int rank, dt__arena_flag f, uint32_t g, int64_t timeout_ns);

#endif
