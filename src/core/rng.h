/* rng.h - deterministic random numbers (xoshiro256**, seeded by splitmix64).
 * Same seed, same sequence, on every machine: the run's determinism rests on
 * this. Per-sample streams (augmentation in worker threads) come from
 * rng_stream(seed, id) so results do not depend on thread scheduling. */
#ifndef HGRN_RNG_H
#define HGRN_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} Rng;

void rng_seed(Rng *r, uint64_t seed);
Rng rng_stream(uint64_t seed, uint64_t id); /* independent stream number id */
uint64_t rng_u64(Rng *r);
uint32_t rng_u32(Rng *r);
double rng_uniform(Rng *r); /* [0, 1) with 53 bits */
float rng_uniformf(Rng *r); /* [0, 1) */
double rng_normal(Rng *r); /* standard normal (Box-Muller, no cached spare) */
int rng_int(Rng *r, int n); /* uniform in [0, n), n > 0 */
void rng_shuffle(Rng *r, int *a, int n); /* Fisher-Yates */

#endif
