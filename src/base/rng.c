#include <math.h>

#include "base/hash.h"
#include "dtrain/base.h"

static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void dt_rng_seed(dt_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t dt_rng_next(dt_rng *r)
{
    uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

float dt_rng_uniform(dt_rng *r) { return (float)(dt_rng_next(r) >> 40) * (1.0f / 16777216.0f); }

float dt_rng_normal(dt_rng *r)
{
    double u1 = ((double)(dt_rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(dt_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

/* Each field goes through the mixer before the next is added, so no two
 * keys that differ in one field can collide by carrying into another. */
uint64_t dt_rng_key_stream(const dt_rng_key *k, uint64_t id)
{
    uint64_t h = dt__mix64(k->seed ^ 0x6a09e667f3bcc909ull);
    h = dt__mix64(h + k->step);
    h = dt__mix64(h + k->micro);
    h = dt__mix64(h + k->group);
    return dt__mix64(h + id);
}

uint64_t dt_rng_key_bits(uint64_t stream, uint64_t index) { return dt__mix64(stream + index * 0x9e3779b97f4a7c15ull); }

float dt_rng_key_uniform(uint64_t stream, uint64_t index)
{
    return (float)(dt_rng_key_bits(stream, index) >> 40) * (1.0f / 16777216.0f);
}
