/* Non-cryptographic hashes shared across layers: FNV-1a for short keys
 * (names, headers, identifiers) and SplitMix64's finaliser, which turns a
 * counter into well-mixed bits (the keyed random numbers). */
#ifndef DT_BASE_HASH_H
#define DT_BASE_HASH_H

#include <stddef.h>
#include <stdint.h>

#define DT_FNV64_SEED 1469598103934665603ull
/* FNV-1a 64's published offset basis.  DT_FNV64_SEED above is a digit
 * short of it; it stays, since dropout streams and DDP's checks are keyed
 * by it.  What is documented as "FNV-1a 64" for others to recompute (the
 * text classifier's features) starts here. */
#define DT_FNV64_OFFSET_BASIS 14695981039346656037ull
#define DT_FNV32_SEED 2166136261u

/* Continue a 64-bit FNV-1a hash `h` over n bytes (start from DT_FNV64_SEED). */
uint64_t dt__fnv1a64(uint64_t h, const void *data, size_t n);
/* The same with 32-bit arithmetic (start from DT_FNV32_SEED). */
uint32_t dt__fnv1a32(uint32_t h, const void *data, size_t n);

/* SplitMix64's output function: a bijection of 64-bit values with full
 * avalanche, so consecutive inputs give independent-looking outputs. */
static inline uint64_t dt__mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
