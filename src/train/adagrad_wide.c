// SPDX-License-Identifier: BSD-2-Clause
/*
 * Adagrad's step over a dense layer's parameters at the vector unit's
 * full width: the same arithmetic as src/base/adagrad.h's loop (acc +=
 * g^2; p -= lr g / (sqrt(acc) + eps)), which is four floats at a time,
 * compiled once for each x86-64 level (SS_WIDE).  The dense layers
 * (the MLPs and the cross network: about a million floats a step for
 * DLRM-DCNv2) step through this one; a table row steps through
 * adagrad.h's, as the sharded tables' owners do, so that a row takes the
 * same step wherever it lives.  Only the square root and the division
 * need it: GCC vectorizes sqrtf only where it need not set errno (the
 * Makefile builds this file with -fno-math-errno).
 */
#pragma GCC optimize("vect-cost-model=dynamic")

#include <math.h>

#include "base/hogwild.h"
#include "base/wide.h"
#include "train/adagrad_wide.h"

SS_WIDE SS_HOGWILD void ss__dense_update(float *p, float *acc, const float *g,
					 size_t n, const struct ss_optim *o)
{
	if (acc) {
		ss__adagrad_wide(p, acc, g, n, o->lr, o->eps);
		return;
	}
	for (size_t i = 0; i < n; i++)
		p[i] -= o->lr * g[i];
}

SS_WIDE SS_HOGWILD void ss__adagrad_wide(float *p, float *acc, const float *g,
					 size_t n, float lr, float eps)
{
	for (size_t i = 0; i < n; i++) {
		float a = acc[i] + g[i] * g[i];

		acc[i] = a;
		p[i] -= lr * g[i] / (sqrtf(a) + eps);
	}
}
