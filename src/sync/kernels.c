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
 * memcpy call, which TSan would check all the same.
 */
#pragma GCC optimize("no-tree-loop-distribute-patterns")

#include "sync_internal.h"

#define SS_HOGWILD __attribute__((no_sanitize("thread")))

SS_HOGWILD void ss__copy(float *restrict dst, const float *restrict src,
			 size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] = src[i];
}

void ss__average(float *restrict out, const float *restrict own,
		 const float *const *others, int k, size_t n)
{
	float scale = 1.0f / (float)(k + 1);

	if (k == 0) {
		for (size_t i = 0; i < n; i++)
			out[i] = own[i];
		return;
	}
	for (size_t i = 0; i < n; i++)
		out[i] = own[i] + others[0][i];
	for (int j = 1; j < k; j++) {
		const float *restrict o = others[j];

		for (size_t i = 0; i < n; i++)
			out[i] += o[i];
	}
	for (size_t i = 0; i < n; i++)
		out[i] *= scale;
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

void ss__bmuf(float *restrict w_g, float *restrict momentum,
	      float *restrict avg, size_t n, float eta, float zeta,
	      bool nesterov)
{
	for (size_t i = 0; i < n; i++) {
		float g = avg[i] - w_g[i];

		momentum[i] = eta * momentum[i] + zeta * g;
		w_g[i] += momentum[i];
		avg[i] = nesterov ? w_g[i] + eta * momentum[i] : w_g[i];
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
