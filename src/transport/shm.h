/* Shared-memory channel between two ranks on one host.
 *
 * One POSIX shared segment per pair holds two single-producer single-consumer
 * byte rings, one per direction.  The engine runs the same frame stream over
 * a ring as over a TCP socket; the pair's TCP connection stays open as the
 * doorbell (one byte wakes a rank sleeping in poll) and as the liveness signal
 * (a dead process closes it).
 *
 * Sleeping without lost wake-ups: a consumer about to sleep sets its flag and
 * then re-reads the producer's counter; a producer publishes its counter and
 * then reads the flag (both sequentially consistent), so one of the two always
 * sees the other.  The same holds with the roles swapped for a producer
 * waiting for space.
 *
 * Large messages need not pass through the ring: when the receiver can read
 * the sender's memory (process_vm_readv, probed at set-up), a DATA frame
 * carries only the sender's address and the receiver copies the payload once,
 * straight into the posted buffer. */
#ifndef DT_TRANSPORT_SHM_H
#define DT_TRANSPORT_SHM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "dtrain/base.h"

typedef struct dt__shm_ring dt__shm_ring;
typedef struct dt__shm_pair dt__shm_pair;

/* A POSIX shared segment of `bytes`, created (replacing a stale one with the
 * same name), every page reserved on /dev/shm and touched, and mapped. */
dt_status dt__shm_segment_create(const char *name, size_t bytes, void **base);
/* Map an existing segment of at least min_bytes; *bytes gets its size. */
dt_status dt__shm_segment_attach(const char *name, size_t min_bytes, void **base, size_t *bytes);

/* Lower rank of the pair: create the segment `name` (replacing a stale one)
 * with rings of `ring_bytes` (a power of two) each. */
dt_status dt__shm_create(const char *name, size_t ring_bytes, dt__shm_pair **out);
/* Higher rank: map the segment the lower rank created. */
dt_status dt__shm_attach(const char *name, dt__shm_pair **out);
/* Remove the segment's name (mappings stay valid). */
void dt__shm_unlink(const char *name);
void dt__shm_close(dt__shm_pair *p);

/* Set-up (side 0 = creator, 1 = attacher; the rendezvous store orders the
 * steps).  announce: publish this side's pid and the address of a probe word
 * in its own mapping.  probe_peer: read the other side's probe word with
 * process_vm_readv; true when that works, i.e. this side can receive large
 * payloads by copying them out of the sender's memory. */
void dt__shm_announce(dt__shm_pair *p, int side);
bool dt__shm_probe_peer(const dt__shm_pair *p, int side);
pid_t dt__shm_peer_pid(const dt__shm_pair *p, int side);

/* The ring this side writes into and the one it reads from. */
dt__shm_ring *dt__shm_tx(dt__shm_pair *p, int side);
dt__shm_ring *dt__shm_rx(dt__shm_pair *p, int side);

/* Copy as much of iov as fits; returns the bytes written (0: ring full). */
size_t dt__shm_write(dt__shm_ring *r, const struct iovec *iov, int n);
/* Copy up to len bytes out (dst NULL: drop them); returns the bytes read. */
size_t dt__shm_read(dt__shm_ring *r, void *dst, size_t len);
size_t dt__shm_readable(const dt__shm_ring *r);
size_t dt__shm_writable(const dt__shm_ring *r);

/* Consumer: announce sleep; false (and no sleep announced) when data arrived. */
bool dt__shm_sleep_rx(dt__shm_ring *r);
/* Producer waiting for `need` bytes of space: same, for space. */
bool dt__shm_sleep_tx(dt__shm_ring *r, size_t need);
/* Withdraw this side's announcement (after waking for any reason): the
 * consumer's on the ring it reads, the producer's on the ring it writes.
 * Never the other side's, whose wake-up would be lost. */
void dt__shm_awake_rx(dt__shm_ring *r);
void dt__shm_awake_tx(dt__shm_ring *r);
/* After writing: true when the consumer announced sleep (and clears it),
 * i.e. the caller must ring the doorbell.  After reading: same for a
 * producer waiting for space. */
bool dt__shm_wake_consumer(dt__shm_ring *r);
bool dt__shm_wake_producer(dt__shm_ring *r);

/* Read len bytes at addr in process pid into dst (process_vm_readv). */
dt_status dt__shm_read_remote(pid_t pid, uint64_t addr, void *dst, size_t len);

#endif
