// SPDX-License-Identifier: BSD-2-Clause
/*
 * The data by chunks (train --data-split dynamic, and any program of the
 * user's): chunk numbers from the job's counter at rank 0
 * (ss_sync_claim), mapped to byte ranges of the file, epoch after epoch,
 * so that a rank that trains faster takes more of them.
 */
#include "base/mix.h"
#include "shadowsync/sync.h"
#include "shadowsync/train.h"

/*
 * Which chunk of its epoch claim @n reads: in the file's order, or with
 * @k->shuffle in an order drawn from it and the epoch (an affine
 * permutation: every chunk once an epoch, another order each epoch).
 */
static uint64_t ss_chunk_of_epoch(const struct ss_chunks *k, uint64_t n)
{
	uint64_t i = n % k->per_epoch, mult, add;

	if (!k->shuffle)
		return i;
	ss__affine_permutation(ss__mix64(k->shuffle ^ n / k->per_epoch),
			       k->per_epoch, &mult, &add);
	return (mult * i + add) % k->per_epoch;
}

int ss_chunks_next(void *ctx, uint64_t *begin, uint64_t *end)
{
	struct ss_chunks *k = ctx;
	uint64_t n;

	if (k->sync) {
		int rc = ss_sync_claim(k->sync, &n);

		if (rc < 0)
			return rc;
	} else {
		n = __atomic_fetch_add(&k->next, 1, __ATOMIC_RELAXED);
	}
	if (n >= k->total)
		return 0;
	*begin = ss_chunk_of_epoch(k, n) * k->chunk;
	*end = *begin + k->chunk < k->size ? *begin + k->chunk : k->size;
	return 1;
}

void ss_chunks_plan(struct ss_chunks *k, uint64_t size, int world,
		    long chunk_size, int epochs)
{
	uint64_t chunk = chunk_size > 0 ? (uint64_t)chunk_size :
					  size / (64 * (uint64_t)world);

	if (chunk_size <= 0 && chunk < (64u << 10))
		chunk = 64u << 10;
	if (chunk_size <= 0 && chunk > (64u << 20))
		chunk = 64u << 20;
	k->size = size;
	k->chunk = chunk;
	k->per_epoch = size ? (size + chunk - 1) / chunk : 1;
	k->total = k->per_epoch * (uint64_t)epochs;
}
