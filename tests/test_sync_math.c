// SPDX-License-Identifier: BSD-2-Clause
/* The algorithms' kernels on small vectors, against closed forms. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include "sync/sync_internal.h"

#define N 37 /* odd, so that no kernel gets a round number */

static float v(int k, int i)
{
	return (float)(k + 1) * 0.5f + (float)i * 0.01f * (float)(k % 3 - 1);
}

Test(kernels, average_of_own_and_others)
{
	float own[N], a[N], b[N], out[N];
	const float *others[] = { a, b };

	for (int i = 0; i < N; i++) {
		own[i] = v(0, i);
		a[i] = v(1, i);
		b[i] = v(2, i);
	}
	ss__average(out, own, others, 2, N);
	for (int i = 0; i < N; i++)
		cr_assert_float_eq(out[i], (own[i] + a[i] + b[i]) / 3, 1e-6,
				   "element %d", i);
	ss__average(out, own, others, 0, N);
	for (int i = 0; i < N; i++)
		cr_assert_eq(out[i], own[i]);
}

/*
 * The heart of ShadowSync: the snapshot s was averaged to avg while the
 * trainers moved w on by u; after w += avg - s, w = avg + u.
 */
Test(kernels, delta_apply_keeps_concurrent_updates)
{
	float s[N], avg[N], w[N], u[N];

	for (int i = 0; i < N; i++) {
		s[i] = v(0, i);
		avg[i] = v(1, i);
		u[i] = 0.001f * (float)(i - N / 2);
		w[i] = s[i] + u[i]; /* what trainers did during the round */
	}
	ss__apply(w, avg, s, N);
	for (int i = 0; i < N; i++)
		cr_assert_float_eq(w[i], avg[i] + u[i], 1e-6, "element %d", i);
}

Test(kernels, bmuf_follows_its_recurrence)
{
	float w_g[N], d[N], avg[N], ref_g[N], ref_d[N];
	const float eta = 0.75f, zeta = 1.0f;

	for (int i = 0; i < N; i++) {
		w_g[i] = ref_g[i] = v(0, i);
		d[i] = ref_d[i] = 0.1f * (float)i;
	}
	for (int step = 0; step < 3; step++) {
		for (int i = 0; i < N; i++)
			avg[i] = v(step + 1, i);
		for (int i = 0; i < N; i++) {
			float g = avg[i] - ref_g[i];

			ref_d[i] = eta * ref_d[i] + zeta * g;
			ref_g[i] += ref_d[i];
		}
		ss__bmuf(w_g, d, avg, N, eta, zeta, false);
		for (int i = 0; i < N; i++) {
			cr_assert_float_eq(d[i], ref_d[i], 1e-5);
			cr_assert_float_eq(w_g[i], ref_g[i], 1e-5);
			cr_assert_float_eq(avg[i], ref_g[i], 1e-5,
					   "target is w_g");
		}
	}
	/* Nesterov: the target looks one momentum step ahead. */
	for (int i = 0; i < N; i++)
		avg[i] = v(5, i);
	ss__bmuf(w_g, d, avg, N, eta, zeta, true);
	for (int i = 0; i < N; i++)
		cr_assert_float_eq(avg[i], w_g[i] + eta * d[i], 1e-5);
}

/*
 * Nesterov's block progress is counted from the target the ranks started
 * from: ranks that move by u a round from it bring D to zeta u / (1 - eta)
 * and w_g moves by that much a round.  Counted from w_g, the lookahead was
 * taken in again every round and D grew as (2 eta)^t.
 */
Test(kernels, bmuf_nesterov_counts_progress_from_the_target)
{
	float w_g[N], d[N], target[N], before[N];
	const float eta = 0.75f, zeta = 1.0f, u = 0.01f;

	for (int i = 0; i < N; i++) {
		w_g[i] = target[i] = v(0, i);
		d[i] = 0;
	}
	for (int round = 0; round < 60; round++) {
		for (int i = 0; i < N; i++)
			target[i] += u; /* the ranks' average: start + u */
		ss__bmuf(w_g, d, target, N, eta, zeta, true);
	}
	for (int i = 0; i < N; i++)
		cr_assert_float_eq(d[i], zeta * u / (1 - eta), 1e-4,
				   "element %d: D %g", i, d[i]);
	memcpy(before, w_g, sizeof(before));
	for (int i = 0; i < N; i++)
		target[i] += u;
	ss__bmuf(w_g, d, target, N, eta, zeta, true);
	for (int i = 0; i < N; i++)
		cr_assert_float_eq(w_g[i] - before[i], zeta * u / (1 - eta),
				   1e-4, "element %d", i);
}

Test(kernels, easgd_step_and_center_update)
{
	float w[N], c[N], d[N], w0[N], c0[N];
	const float alpha = 0.25f;

	for (int i = 0; i < N; i++) {
		w[i] = w0[i] = v(2, i);
		c[i] = c0[i] = v(0, i);
	}
	ss__easgd(w, c, d, N, alpha);
	ss__add(c, d, N);
	for (int i = 0; i < N; i++) {
		float dd = alpha * (w0[i] - c0[i]);

		cr_assert_float_eq(d[i], dd, 1e-6);
		cr_assert_float_eq(w[i], w0[i] - dd, 1e-6);
		cr_assert_float_eq(c[i], c0[i] + dd, 1e-6);
		/* the pull is symmetric: w + c is conserved */
		cr_assert_float_eq(w[i] + c[i], w0[i] + c0[i], 1e-5);
	}
}

Test(kernels, gossip_moves_toward_the_peer)
{
	float w[N], p[N], w0[N];

	for (int i = 0; i < N; i++) {
		w[i] = w0[i] = v(0, i);
		p[i] = v(3, i);
	}
	ss__gossip(w, p, N, 0.5f);
	for (int i = 0; i < N; i++)
		cr_assert_float_eq(w[i], (w0[i] + p[i]) / 2, 1e-6);
}

Test(kernels, distance_estimate)
{
	float a[64], b[64];
	double d2 = 0, n2 = 0;

	for (int i = 0; i < 64; i++) {
		a[i] = 2;
		b[i] = 1;
	}
	ss__distance(a, b, 64, &d2, &n2);
	cr_assert_float_eq(sqrt(d2 / n2), 1.0, 1e-12);
	ss__copy(a, b, 64);
	for (int i = 0; i < 64; i++)
		cr_assert_eq(a[i], b[i]);
}

Test(options, defaults_and_names)
{
	struct ss_sync_options o;
	enum ss_sync_algo a;

	ss_sync_options_init(&o, SS_SYNC_BMUF);
	cr_assert_eq(o.algo, SS_SYNC_BMUF);
	cr_assert_lt(o.eta, 0, "eta defaults to 1 - 1/min(N, span), per round");
	cr_assert_eq(ss_sync_algo_parse("--sync", "easgd", &a), 0);
	cr_assert_eq(a, SS_SYNC_EASGD);
	cr_assert_str_eq(ss_sync_algo_name(SS_SYNC_GOSSIP), "gossip");
	cr_assert_eq(ss_sync_algo_parse("--sync", "allreduce", &a), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->hint, "ma, easgd, bmuf, gossip"),
		  "%s", ss_last_error()->hint);
}

/*
 * S-BMUF's block momentum when not given: 1 - 1/N before any round, then
 * 1 - 1/min(N, the replica's steps a round spans); none (S-MA's step)
 * when rounds come every step or more often.  Given, as given.
 */
Test(options, bmuf_eta_follows_the_steps_a_round_spans)
{
	struct ss_sync s = { .n_members = 8 };

	pthread_mutex_init(&s.lock, NULL);
	s.opts.eta = -1;
	cr_assert_float_eq(ss__bmuf_eta(&s), 1 - 1.0 / 8, 1e-12);
	s.rounds = 10;
	s.gap_sum = 1000; /* 100 steps a round: the paper's 1 - 1/N */
	cr_assert_float_eq(ss__bmuf_eta(&s), 1 - 1.0 / 8, 1e-12);
	s.gap_sum = 20; /* 2 steps a round */
	cr_assert_float_eq(ss__bmuf_eta(&s), 0.5, 1e-12);
	s.gap_sum = 1; /* a tenth of a step: a fast network's shadow */
	cr_assert_float_eq(ss__bmuf_eta(&s), 0, 1e-12);
	s.opts.eta = 0.9;
	cr_assert_float_eq(ss__bmuf_eta(&s), 0.9, 1e-12);
	pthread_mutex_destroy(&s.lock);
}

/* The fused pass gives the weights of ss__apply and the sums of
 * ss__distance to the bit, across several of its blocks and a tail. */
Test(kernels, apply_measured_is_apply_then_distance)
{
	enum { M = 3 * 1024 + 37 };
	static float w1[M], w2[M], avg[M], snap[M];
	double d1 = 0, n1 = 0, d2 = 0, n2 = 0;

	for (int i = 0; i < M; i++) {
		w1[i] = w2[i] = v(0, i % 97);
		avg[i] = v(1, i % 89);
		snap[i] = v(2, i % 83);
	}
	ss__distance(snap, avg, M, &d1, &n1);
	ss__apply(w1, avg, snap, M);
	ss__apply_measured(w2, avg, snap, M, &d2, &n2);
	for (int i = 0; i < M; i++)
		cr_assert_eq(w2[i], w1[i], "w[%d]", i);
	cr_assert_eq(d2, d1);
	cr_assert_eq(n2, n1);
}

/*
 * Past the cache's size the average sums in an L1 buffer and streams it
 * out with non-temporal stores: the same floats as the in-cache path,
 * to an output and from inputs at any alignment, with a scalar head and
 * a short last block.  The arrays are sized from the threshold so that
 * this CPU takes the streamed path, whatever its cache.
 */
static float *big_floats(size_t n, int k)
{
	float *p = malloc((n + 8) * sizeof(float));

	cr_assert(p, "%zu floats", n);
	for (size_t i = 0; i < n + 8; i++)
		p[i] = v(k, (int)(i % 101));
	return p;
}

Test(kernels, streamed_average_matches_the_cached_one)
{
	for (int k = 0; k <= 3; k++) {
		size_t n = ss__stream_threshold() / sizeof(float) /
				   (size_t)(k + 2) +
			   1027;
		float *own = big_floats(n, 0), *out = big_floats(n, 9);
		float *base[3] = { big_floats(n, 1), big_floats(n, 2),
				   big_floats(n, 3) };
		const float *others[3];
		float scale = 1.0f / (float)(k + 1);

		for (int j = 0; j < 3; j++)
			others[j] = base[j] + j + 1; /* unaligned reads */
		ss__average(out + 1, own + 3, others, k, n); /* unaligned */
		for (size_t i = 0; i < n; i++) {
			float want = own[3 + i];

			for (int j = 0; j < k; j++)
				want += others[j][i];
			want *= scale;
			cr_assert_eq(out[1 + i], want, "k %d, element %zu", k,
				     i);
		}
		cr_assert_eq(out[0], v(9, 0), "before the output");
		cr_assert_eq(out[n + 1], v(9, (int)((n + 1) % 101)),
			     "after the output");
		free(own);
		free(out);
		for (int j = 0; j < 3; j++)
			free(base[j]);
	}
}
