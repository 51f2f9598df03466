/* sampler.h - per-epoch sample order for one rank of a data-parallel job.
 *
 * sampler_distributed: torch DistributedSampler(shuffle, drop_last=False):
 *   a permutation of [0, n) from (seed, epoch) (our RNG, not torch's),
 *   padded by repeating its head to a multiple of world, rank r takes
 *   positions r, r + world, ...; ceil(n / world) samples per rank.
 * sampler_repeated: DeiT's RASampler(num_repeats = k): the permutation with
 *   every index repeated k times in a row (repeat_interleave), padded to
 *   ceil(n k / world) * world by repeating its head, rank r takes positions
 *   r, r + world, ...; then only the first floor(n // 256 * 256 / world) are
 *   used, as DeiT does (one epoch still sees ~n samples, and the k copies of
 *   an image land on different ranks with different augmentations). For
 *   n < 256 (tests, tiny sets) DeiT's formula gives 0; we use ceil(n / world)
 *   instead. */
#ifndef HGRN_SAMPLER_H
#define HGRN_SAMPLER_H

#include <stdint.h>

/* Fill idx (capacity cap) with this rank's indices; returns how many (or -1
 * when cap is too small / bad arguments). shuffle 0: identity order. */
int sampler_distributed(int n, int rank, int world, uint64_t seed, int epoch, int shuffle, int *idx, int cap);
int sampler_repeated(int n, int rank, int world, int repeats, uint64_t seed, int epoch, int shuffle, int *idx,
                     int cap);

/* Samples per rank per epoch for the two samplers. */
int sampler_distributed_len(int n, int world);
int sampler_repeated_len(int n, int world, int repeats);

#endif
