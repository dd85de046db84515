/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Adagrad's step over n parameters: acc += g^2; p -= lr g / (sqrt(acc) +
 * eps), lock-free (Hogwild).  The model's parameters and the sharded
 * tables' rows step through the same loop, so that a row takes the same
 * step wherever it lives.
 */
#ifndef SS_ADAGRAD_H
#define SS_ADAGRAD_H

#include <math.h>
#include <stddef.h>
#ifdef __SSE__
#include <xmmintrin.h>
#endif

#include "base/hogwild.h"

/*
 * Adagrad's loop, four floats at a time where SSE is there: GCC does not
 * vectorize it itself at -O2, sqrtf being a call that may set errno, and
 * the scalar square root and division cost a fifth of a step's time on the
 * default model.  sqrtps and divps round as sqrtss and divss do.
 */
SS_HOGWILD static inline void ss__adagrad(float *p, float *acc, const float *g,
					  size_t n, float lr, float eps)
{
	size_t i = 0;

#ifdef __SSE__
	for (; i + 4 <= n; i += 4) {
		__m128 gi = _mm_loadu_ps(g + i),
		       a = _mm_add_ps(_mm_loadu_ps(acc + i),
				      _mm_mul_ps(gi, gi));

		_mm_storeu_ps(acc + i, a);
		_mm_storeu_ps(
			p + i,
			_mm_sub_ps(_mm_loadu_ps(p + i),
				   _mm_div_ps(_mm_mul_ps(_mm_set1_ps(lr), gi),
					      _mm_add_ps(_mm_sqrt_ps(a),
							 _mm_set1_ps(eps)))));
	}
#endif
	for (; i < n; i++) {
		float a = acc[i] + g[i] * g[i];

		acc[i] = a;
		p[i] -= lr * g[i] / (sqrtf(a) + eps);
	}
}

#endif /* SS_ADAGRAD_H */
