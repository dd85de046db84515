// SPDX-License-Identifier: BSD-2-Clause
/*
 * The vector kernels of the algorithms: one pass over memory each, written
 * so that the compiler vectorizes them (perf/sync-bench holds them against
 * memcpy).
 *
 * Benign Hogwild races: the kernels that read or write the replica `w` run
 * in the shadow thread while trainer threads update `w` without locks, by
 * design (Hogwild): an update that lands between our load and our store of
 * one float is lost, which SGD tolerates.  These functions are marked
 * SS_HOGWILD so that ThreadSanitizer does not report those races; every
 * other access (the sync layer's own state, the trainers among themselves)
 * stays checked.  The pragma keeps GCC from turning the copy loop into a
 * memcpy call, which TSan would check all the same, and has it vectorize
 * the loops: -O2's "very cheap" cost model (GCC 12) vectorizes no loop
 * whose length is not known to be a multiple of the vector's, so every
 * kernel here was scalar (4 bytes an operation; 0.24x to 0.38x of memcpy
 * with the arrays in the cache).
 */
#pragma GCC optimize("no-tree-loop-distribute-patterns", \
		     "vect-cost-model=dynamic")

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "base/hogwild.h"
#include "sync_internal.h"

SS_HOGWILD void ss__copy(float *restrict dst, const float *restrict src,
			 size_t n)
{
#if defined(__SANITIZE_THREAD__)
	for (size_t i = 0; i < n; i++) /* memcpy would be checked */
		dst[i] = src[i];
#else
	memcpy(dst, src, n * sizeof(float)); /* non-temporal stores */
#endif
}

/* Store @len floats of @src to @dst, bypassing the cache where we can. */
static void ss_stream(float *restrict dst, const float *restrict src,
		      size_t len)
{
	size_t i = 0;
#if defined(__SSE__)
	/* Non-temporal stores: no read-for-ownership of lines we overwrite. */
	for (; i < len && ((uintptr_t)(dst + i) & 15); i++)
		dst[i] = src[i];
	for (; i + 4 <= len; i += 4)
		_mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
#endif
	for (; i < len; i++)
		dst[i] = src[i];
}

/*
 * Bytes of arrays past which the average streams its output: 3/4 of the
 * last-level cache, as glibc's memcpy.  Below, the arrays are in the
 * cache and a plain store is faster (non-temporal stores go to memory
 * all the same: 0.42x of memcpy at 4 MiB arrays here); S-MA's own shard
 * is usually far below.
 */
size_t ss__stream_threshold(void)
{
	static size_t cached;
	size_t t = __atomic_load_n(&cached, __ATOMIC_RELAXED);

	if (!t) {
		long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);

		if (llc <= 0)
			llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
		t = llc > 0 ? (size_t)llc / 4 * 3 : (size_t)8 << 20;
		__atomic_store_n(&cached, t, __ATOMIC_RELAXED);
	}
	return t;
}

/*
 * dst = (own + sum of others) / (k + 1) over the @len floats of each from
 * @b: one pass for 2 and 3 ranks, several over @dst beyond (it stays in
 * L1).
 */
static void ss_average_block(float *restrict dst, const float *restrict own,
			     const float *const *others, int k, size_t b,
			     size_t len, float scale)
{
	const float *restrict w = own + b;

	if (k == 1) {
		const float *restrict p0 = others[0] + b;

		for (size_t i = 0; i < len; i++)
			dst[i] = (w[i] + p0[i]) * scale;
	} else if (k == 2) {
		const float *restrict p0 = others[0] + b;
		const float *restrict p1 = others[1] + b;

		for (size_t i = 0; i < len; i++)
			dst[i] = (w[i] + p0[i] + p1[i]) * scale;
	} else {
		for (size_t i = 0; i < len; i++)
			dst[i] = w[i];
		for (int j = 0; j < k; j++) {
			const float *restrict p = others[j] + b;

			for (size_t i = 0; i < len; i++)
				dst[i] += p[i];
		}
		for (size_t i = 0; i < len; i++)
			dst[i] *= scale;
	}
}

/*
 * out = (own + sum of others) / (k + 1), a block at a time: one pass over
 * memory in all.  Past the cache's size each block is summed in a buffer
 * that stays in L1 and streamed out; below, it is summed in place in
 * @out (through a buffer the copy out of it cost 0.7x of memcpy with the
 * arrays in the cache: two more L1 accesses a float).
 */
void ss__average(float *restrict out, const float *restrict own,
		 const float *const *others, int k, size_t n)
{
	enum { BLOCK = 1024 };
	float tmp[BLOCK] __attribute__((aligned(64)));
	float scale = 1.0f / (float)(k + 1);
	bool stream =
		(size_t)(k + 2) * n * sizeof(float) > ss__stream_threshold();

	for (size_t b = 0; b < n; b += BLOCK) {
		size_t len = n - b < BLOCK ? n - b : BLOCK;

		ss_average_block(stream ? tmp : out + b, own, others, k, b, len,
				 scale);
		if (stream)
			ss_stream(out + b, tmp, len);
	}
#if defined(__SSE__)
	if (stream)
		_mm_sfence(); /* the streamed stores before the sends */
#endif
}

SS_HOGWILD void ss__apply(float *restrict w, const float *restrict target,
			  const float *restrict snap, size_t n)
{
	for (size_t i = 0; i < n; i++)
		w[i] += target[i] - snap[i];
}

/*
 * An estimate on every 16th element: a reduction over all of them would
 * keep the kernels above from vectorizing (float sums do not reassociate).
 */
SS_HOGWILD void ss__distance(const float *a, const float *b, size_t n,
			     double *diff2, double *norm2)
{
	for (size_t i = 0; i < n; i += 16) {
		double d = (double)a[i] - (double)b[i];

		*diff2 += d * d;
		*norm2 += (double)b[i] * (double)b[i];
	}
}

/*
 * ss__apply() and ss__distance() of the same arrays in one pass: the
 * distance's samples come from each block while it is in L1, where a pass
 * of its own read both arrays from memory again only for the statistics.
 * The same samples, summed in the same order (blocks are a multiple of the
 * sampling stride).
 */
SS_HOGWILD void ss__apply_measured(float *restrict w,
				   const float *restrict target,
				   const float *restrict snap, size_t n,
				   double *diff2, double *norm2)
{
	enum { BLOCK = 1024 };

	for (size_t b = 0; b < n; b += BLOCK) {
		size_t len = n - b < BLOCK ? n - b : BLOCK;

		ss__apply(w + b, target + b, snap + b, len);
		ss__distance(snap + b, target + b, len, diff2, norm2);
	}
}

/*
 * The block's progress G is measured from where the ranks started it: the
 * last target, w_g + eta D with Nesterov.  Measured from w_g instead, G
 * took the lookahead eta D in again each round, and D grew as (2 eta)^t.
 */
void ss__bmuf(float *restrict w_g, float *restrict momentum,
	      float *restrict avg, size_t n, float eta, float zeta,
	      bool nesterov)
{
	/* two loops, not a test in one: GCC vectorizes neither at -O2 */
	if (nesterov) {
		for (size_t i = 0; i < n; i++) {
			float g = avg[i] - (w_g[i] + eta * momentum[i]);

			momentum[i] = eta * momentum[i] + zeta * g;
			w_g[i] += momentum[i];
			avg[i] = w_g[i] + eta * momentum[i];
		}
		return;
	}
	for (size_t i = 0; i < n; i++) {
		float g = avg[i] - w_g[i];

		momentum[i] = eta * momentum[i] + zeta * g;
		w_g[i] += momentum[i];
		avg[i] = w_g[i];
	}
}

SS_HOGWILD void ss__easgd(float *restrict w, const float *restrict c,
			  float *restrict d, size_t n, float alpha)
{
	for (size_t i = 0; i < n; i++) {
		d[i] = alpha * (w[i] - c[i]);
		w[i] -= d[i];
	}
}

void ss__add(float *restrict c, const float *restrict d, size_t n)
{
	for (size_t i = 0; i < n; i++)
		c[i] += d[i];
}

SS_HOGWILD void ss__gossip(float *restrict w, const float *restrict peer,
			   size_t n, float beta)
{
	for (size_t i = 0; i < n; i++)
		w[i] += beta * (peer[i] - w[i]);
}
