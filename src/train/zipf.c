// SPDX-License-Identifier: BSD-2-Clause
/*
 * Rejection-inversion for Zipf draws (see zipf.h).  The hat is the
 * continuous density h(x) = x^-s; H is its integral, chosen so that
 * H(x) = (x^(1-s) - 1) / (1-s), written through log1p/expm1 forms that
 * stay exact as s goes to 1 (where H is log x).  A draw inverts H at a
 * uniform point between H(1.5) - 1 and H(n + 0.5), rounds to the nearest
 * integer k, and accepts k when the point lies under the mass k has
 * (H(k + 0.5) - h(k)); most draws are accepted at once.
 */
#include <math.h>

#include "base/mix.h"
#include "train/zipf.h"

/* (e^x - 1) / x, 1 at 0 */
static double ss_expm1_over(double x)
{
	return fabs(x) > 1e-8 ? expm1(x) / x : 1 + x / 2;
}

/* log(1 + x) / x, 1 at 0 */
static double ss_log1p_over(double x)
{
	return fabs(x) > 1e-8 ? log1p(x) / x : 1 - x / 2;
}

static double ss_h(double s, double x)
{
	return exp(-s * log(x));
}

static double ss_big_h(double s, double x)
{
	double lx = log(x);

	return ss_expm1_over((1 - s) * lx) * lx;
}

static double ss_big_h_inverse(double s, double y)
{
	double t = y * (1 - s);

	if (t < -1) /* rounding at the lower end */
		t = -1;
	return exp(ss_log1p_over(t) * y);
}

void ss__zipf_init(struct ss__zipf *z, uint64_t n, double s)
{
	z->s = s;
	z->n = n;
	z->h_x1 = ss_big_h(s, 1.5) - 1;
	z->h_n = ss_big_h(s, (double)n + 0.5);
	z->shortcut = 2 - ss_big_h_inverse(s, ss_big_h(s, 2.5) - ss_h(s, 2));
}

uint64_t ss__zipf_draw(const struct ss__zipf *z, uint64_t *rng)
{
	for (;;) {
		double u = z->h_n + ss__uniform(rng) * (z->h_x1 - z->h_n);
		double x = ss_big_h_inverse(z->s, u);
		double k = floor(x + 0.5);

		if (k < 1)
			k = 1;
		else if (k > (double)z->n)
			k = (double)z->n;
		if (k - x <= z->shortcut ||
		    u >= ss_big_h(z->s, k + 0.5) - ss_h(z->s, k))
			return (uint64_t)k;
	}
}
