/* sampler.h - the training order of an epoch, and each rank's view of it.
 *
 * The epoch's order (sampler_epoch_order): a permutation of [0, n) drawn from
 * (seed, epoch), or the dataset's own (dataset_epoch_order: shards read as a
 * stream), with every index repeated `repeats` times in a row (torch's
 * repeat_interleave: DeiT's RASampler, data.repeated_aug); n * repeats
 * positions. An epoch uses the first sampler_epoch_positions of them:
 * floor(n / 256) * 256 with repeated augmentation, as DeiT (an epoch still
 * sees ~n samples), unless that is less than one global batch (DeiT's epoch
 * would hold no full batch: sets under 256 images, or a larger batch); else
 * n. Global batch b is positions [b G, (b+1) G); the loader gives each rank
 * its part of it (loader_global_index).
 *
 * The rank views below are what torch's samplers hand rank r of world
 * (positions r, r + world, ...), over the same permutation:
 * sampler_distributed: DistributedSampler(shuffle, drop_last=False): the
 *   permutation padded by repeating its head to a multiple of world;
 *   ceil(n / world) samples per rank.
 * sampler_repeated: RASampler(num_repeats = k): the repeated order, padded to
 *   ceil(n k / world) * world by repeating its head, and only the first
 *   floor(n // 256 * 256 / world) kept, as DeiT does (the k copies of an
 *   image land on different ranks with different augmentations). For
 *   n < 256 (tests, tiny sets) DeiT's formula gives 0; ceil(n / world)
 *   instead. Without Mixup pairs, the loader's rank r takes exactly these
 *   positions, whole global batches of them, where the dataset has no order
 *   of its own and (repeated) floor(n / 256) * 256 holds a global batch or
 *   n < 256; where it does not, the loader's epoch of n positions runs past
 *   floor(n // 256 * 256 / world). */
#ifndef HGRN_SAMPLER_H
#define HGRN_SAMPLER_H

#include <stdint.h>

#include "dataset.h"

/* The epoch's order into perm (n * repeats entries): ds's own order when it
 * has one (ds may be NULL), else a permutation drawn from (seed, epoch), each
 * index then repeated `repeats` times in a row. shuffle 0: identity order. */
void sampler_epoch_order(const Dataset *ds, int n, int repeats, uint64_t seed, int epoch, int shuffle, int *perm);

/* Positions of the order one epoch uses (see above); whole global batches of
 * global_batch are taken from them. */
int sampler_epoch_positions(int n, int repeats, int global_batch);

/* Fill idx (capacity cap) with this rank's indices; returns how many (or -1
 * when cap is too small / bad arguments). shuffle 0: identity order. */
int sampler_distributed(int n, int rank, int world, uint64_t seed, int epoch, int shuffle, int *idx, int cap);
int sampler_repeated(int n, int rank, int world, int repeats, uint64_t seed, int epoch, int shuffle, int *idx, int cap);

/* Samples per rank per epoch for the two samplers. */
int sampler_distributed_len(int n, int world);
int sampler_repeated_len(int n, int world, int repeats);

#endif
