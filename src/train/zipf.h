/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Zipf draws over 1..n, P(k) proportional to k^-s, in constant time and
 * memory whatever n: rejection-inversion (Hoermann and Derflinger,
 * "Rejection-inversion to generate variates from monotone discrete
 * distributions", ACM TOMACS 6(3), 1996).  A table of the CDF would take
 * 8 bytes a value, 270 MB for the 34 M values of Criteo's 26 features.
 * Internal to the generator; not part of the public API.
 */
#ifndef SS_TRAIN_ZIPF_H
#define SS_TRAIN_ZIPF_H

#include <stdint.h>

struct ss__zipf {
	double s; /* exponent, >= 0 */
	uint64_t n; /* values 1..n */
	double h_x1, h_n, shortcut;
};

/* ss__zipf_init() - the sampler of k^-@s over 1..@n (@n >= 1). */
void ss__zipf_init(struct ss__zipf *z, uint64_t n, double s);

/* ss__zipf_draw() - a value in 1..n; advances @rng. */
uint64_t ss__zipf_draw(const struct ss__zipf *z, uint64_t *rng);

#endif /* SS_TRAIN_ZIPF_H */
