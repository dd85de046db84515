// SPDX-License-Identifier: BSD-2-Clause
/* The dense layer's gradients against central finite differences. */
#include <criterion/criterion.h>
#include <math.h>

#include "shadowsync/train.h"

#define IN 5
#define OUT 3
#define BATCH 4

static float w[OUT * IN], b[OUT], x[BATCH * IN], r[BATCH * OUT];

/* The loss sum(y * r): its gradient with respect to y is r. */
static double loss(const struct ss_dense *l)
{
	float y[BATCH * OUT];
	double sum = 0;

	ss_dense_forward(l, x, y, BATCH);
	for (int i = 0; i < BATCH * OUT; i++)
		sum += (double)y[i] * r[i];
	return sum;
}

static float value(int seed, int i)
{
	return (float)sin(seed * 12.9898 + i * 78.233) * 0.8f;
}

static void check_layer(bool relu)
{
	struct ss_dense l = { IN, OUT, w, b, relu };
	float y[BATCH * OUT], dy[BATCH * OUT], dx[BATCH * IN], dw[OUT * IN],
		db[OUT];
	const float eps = 1e-3f;

	for (int i = 0; i < OUT * IN; i++)
		w[i] = value(1, i);
	for (int i = 0; i < OUT; i++)
		b[i] = value(2, i) * 0.1f;
	for (int i = 0; i < BATCH * IN; i++)
		x[i] = value(3, i);
	for (int i = 0; i < BATCH * OUT; i++)
		dy[i] = r[i] = value(4, i);
	/* Keep pre-activations off the ReLU's kink, where the difference
	 * quotient is not the derivative. */
	for (bool near = true; near;) {
		struct ss_dense lin = { IN, OUT, w, b, false };

		ss_dense_forward(&lin, x, y, BATCH);
		near = false;
		for (int i = 0; i < BATCH * OUT; i++)
			if (fabsf(y[i]) < 0.02f) {
				b[i % OUT] += 0.05f;
				near = true;
			}
	}
	ss_dense_forward(&l, x, y, BATCH);
	ss_dense_backward(&l, x, y, dy, dx, dw, db, BATCH);

	/* Each parameter and input nudged both ways. */
	struct {
		float *p, *grad;
		int n;
		const char *name;
	} sets[] = { { w, dw, OUT * IN, "W" },
		     { b, db, OUT, "b" },
		     { x, dx, BATCH * IN, "x" } };
	for (size_t s = 0; s < 3; s++) {
		for (int i = 0; i < sets[s].n; i++) {
			float keep = sets[s].p[i];
			double up, down, numeric;

			sets[s].p[i] = keep + eps;
			up = loss(&l);
			sets[s].p[i] = keep - eps;
			down = loss(&l);
			sets[s].p[i] = keep;
			numeric = (up - down) / (2 * eps);
			cr_assert_float_eq(sets[s].grad[i], numeric, 2e-3,
					   "%s[%d]: backward %f, numeric %f",
					   sets[s].name, i, sets[s].grad[i],
					   numeric);
		}
	}
}

Test(dense, linear_gradients_match_finite_differences)
{
	check_layer(false);
}

Test(dense, relu_gradients_match_finite_differences)
{
	check_layer(true);
}

Test(dense, forward_is_w_x_plus_b)
{
	float W[2 * 3] = { 1, 2, 3, -1, 0, 1 }, B[2] = { 0.5f, -2 };
	float X[3] = { 1, 1, 2 }, Y[2];
	struct ss_dense l = { 3, 2, W, B, false };

	ss_dense_forward(&l, X, Y, 1);
	cr_assert_float_eq(Y[0], 1 + 2 + 6 + 0.5f, 1e-6);
	cr_assert_float_eq(Y[1], -1 + 0 + 2 - 2, 1e-6);
	l.relu = true;
	B[1] = -5;
	ss_dense_forward(&l, X, Y, 1);
	cr_assert_eq(Y[1], 0, "ReLU clips");
}

/* The fused SGD pass: the same dx, and exactly one step of -lr times the
 * gradients that the plain backward pass gives. */
Test(dense, fused_sgd_step_is_the_plain_step)
{
	const float lr = 0.25f;
	float w0[OUT * IN], b0[OUT], y[BATCH * OUT], dy[BATCH * OUT],
		dy2[BATCH * OUT], dx[BATCH * IN], dx2[BATCH * IN], dw[OUT * IN],
		db[OUT], db2[OUT];
	struct ss_dense l = { IN, OUT, w, b, true };
	char note[256];

	/* on the kernels train runs on (this test's own process) */
	ss_blas_setup(note, sizeof(note));
	cr_log_info("%s", note);
	for (int i = 0; i < OUT * IN; i++)
		w0[i] = w[i] = value(5, i);
	for (int i = 0; i < OUT; i++)
		b0[i] = b[i] = value(6, i) * 0.1f;
	for (int i = 0; i < BATCH * IN; i++)
		x[i] = value(7, i);
	for (int i = 0; i < BATCH * OUT; i++)
		dy[i] = dy2[i] = value(8, i);
	ss_dense_forward(&l, x, y, BATCH);
	ss_dense_backward(&l, x, y, dy, dx, dw, db, BATCH);
	ss_dense_backward_sgd(&l, x, y, dy2, dx2, db2, lr, BATCH);
	for (int i = 0; i < BATCH * IN; i++)
		cr_assert_float_eq(dx2[i], dx[i], 1e-6, "dx[%d]", i);
	for (int i = 0; i < OUT * IN; i++)
		cr_assert_float_eq(w[i], w0[i] - lr * dw[i], 1e-6, "W[%d]", i);
	for (int i = 0; i < OUT; i++)
		cr_assert_float_eq(b[i], b0[i] - lr * db[i], 1e-6, "b[%d]", i);
}
