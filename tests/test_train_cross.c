// SPDX-License-Identifier: BSD-2-Clause
/*
 * The DCNv2 interaction (--interaction dcn): its forward pass against a
 * straightforward reference written here, its gradients against finite
 * differences, its Adagrad step against the closed form, the options'
 * checks, and that it learns.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "models.h"
#include "shadowsync/train.h"

/* Small enough to check every group: width 27 x 2 = 54, rank 3. */
static void tiny_dcn(struct ss_model_config *c, int layers)
{
	tiny_model(c);
	c->interaction = SS_INTERACTION_DCN;
	c->cross_layers = layers;
}

/* y = relu?(W x + b), one example, in doubles. */
static void ref_layer(const float *W, const float *b, const double *x,
		      double *y, int in, int out, bool relu)
{
	for (int o = 0; o < out; o++) {
		double s = b[o];

		for (int i = 0; i < in; i++)
			s += (double)W[(size_t)o * in + i] * x[i];
		y[o] = relu && s < 0 ? 0 : s;
	}
}

/* The click probability of @ex as the DCNv2 model is defined. */
static double ref_predict(const struct ss_model_config *c, const float *p,
			  const struct ss_example *ex)
{
	int D = c->emb_dim, d = 27 * D, R = c->cross_rank, nb = c->n_bottom - 1;
	double a[4096], b[4096], x0[4096], x[4096], v[512];
	uint64_t ids[SS_SPARSE];
	size_t off = 0;
	int in, out;

	for (int i = 0; i < SS_DENSE; i++)
		a[i] = ex->dense[i];
	for (int l = 0; l < ss_model_layers(c); l++) {
		ss_model_layer_shape(c, l, &in, &out);
		if (l == nb) { /* the interaction: x0, then the crosses */
			const float *t = p + ss_model_dense_len(c);

			ss_model_batch_rows(c, ex, 1, ids);
			for (int i = 0; i < D; i++)
				x0[i] = a[i];
			for (int j = 0; j < SS_SPARSE; j++)
				for (int i = 0; i < D; i++)
					x0[D + j * D + i] = t[ids[j] * D + i];
			memcpy(x, x0, sizeof(double) * (size_t)d);
			for (int k = 0; k < c->cross_layers; k++) {
				const float *W = p +
						 ss_model_cross_offset(c, k),
					    *V = W + d * R, *bias = V + d * R;

				for (int r = 0; r < R; r++) {
					v[r] = 0;
					for (int i = 0; i < d; i++)
						v[r] += V[r * d + i] * x[i];
				}
				for (int i = 0; i < d; i++) {
					double w = bias[i];

					for (int r = 0; r < R; r++)
						w += W[i * R + r] * v[r];
					x[i] = x0[i] * w + x[i];
				}
			}
			memcpy(a, x, sizeof(double) * (size_t)d);
		}
		ref_layer(p + off, p + off + (size_t)in * out, a, b, in, out,
			  l != ss_model_layers(c) - 1);
		memcpy(a, b, sizeof(double) * (size_t)out);
		off += (size_t)in * out + (size_t)out;
	}
	return 1 / (1 + exp(-a[0]));
}

Test(dcn, options_and_sizes)
{
	struct ss_model_config c;
	size_t mlp;

	tiny_dcn(&c, 2);
	cr_assert_eq(ss_model_check(&c), 0);
	cr_assert_eq(ss_model_top_input(&c), 54);
	mlp = 13 * 3 + 3 + 3 * 2 + 2 + 54 * 4 + 4 + 4 + 1;
	cr_assert_eq(ss_model_cross_offset(&c, 0), mlp);
	cr_assert_eq(ss_model_cross_offset(&c, 1), mlp + 2 * 54 * 3 + 54);
	cr_assert_eq(ss_model_dense_len(&c), mlp + 2 * (2 * 54 * 3 + 54));
	cr_assert_eq(ss_model_len(&c), ss_model_dense_len(&c) + 26 * 3 * 2);
	c.cross_rank = 55;
	cr_assert_eq(ss_model_check(&c), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->what, "--cross-rank 55"));
	c.cross_rank = 0;
	cr_assert_eq(ss_model_check(&c), SS_EUSAGE);
	c.cross_rank = 3;
	c.cross_layers = 9;
	cr_assert_eq(ss_model_check(&c), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->what, "--cross-layers 9"));
	c.cross_layers = 0;
	cr_assert_eq(ss_model_check(&c), SS_EUSAGE);
	/* the dot model ignores the cross options */
	c.interaction = SS_INTERACTION_DOT;
	cr_assert_eq(ss_model_check(&c), 0);
	cr_assert_eq(ss_model_dense_len(&c), ss_model_cross_offset(&c, 5));
	cr_assert_eq(ss_model_interaction_parse("--interaction", "dcn", &c), 0);
	cr_assert_eq(c.interaction, SS_INTERACTION_DCN);
	cr_assert_str_eq(ss_model_interaction_name(c.interaction), "dcn");
	cr_assert_eq(ss_model_interaction_parse("--interaction", "cat", &c),
		     SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->what, "--interaction"));
	cr_assert_eq(ss_model_pooling_parse("--pooling", "mean", &c), 0);
	cr_assert_str_eq(ss_model_pooling_name(c.pooling), "mean");
	cr_assert_eq(ss_model_pooling_parse("--pooling", "max", &c), SS_EUSAGE);
}

/* The model's predictions are the reference's, at 1, 2 and 3 layers and
 * at widths where the products take BLIS's edge cases. */
Test(dcn, forward_matches_the_definition)
{
	static const int shapes[][3] = {
		{ 1, 2, 3 }, { 2, 2, 3 }, { 3, 4, 7 }, { 2, 5, 1 }
	};

	for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
		struct ss_model_config c;
		struct ss_model_work *w;
		struct ss_example ex[5];
		float *params, p[5];

		tiny_dcn(&c, shapes[s][0]);
		c.emb_dim = c.bottom[2] = shapes[s][1];
		c.cross_rank = shapes[s][2];
		cr_assert_eq(ss_model_check(&c), 0);
		params = malloc(ss_model_len(&c) * sizeof(float));
		cr_assert_not_null(params);
		ss_model_init(&c, params, 11);
		/* biases away from 0, so that a dropped b shows */
		for (int l = 0; l < c.cross_layers; l++) {
			size_t d = 27 * (size_t)c.emb_dim,
			       at = ss_model_cross_offset(&c, l) +
				    2 * d * (size_t)c.cross_rank;

			for (size_t i = 0; i < d; i++)
				params[at + i] = 0.1f * (float)sin((double)i);
		}
		fixed_examples(ex, 5);
		cr_assert_eq(ss_model_work_create(&w, &c, 5), 0);
		ss_model_predict(&c, params, w, ex, 5, p);
		for (int r = 0; r < 5; r++) {
			double want = ref_predict(&c, params, &ex[r]);

			cr_assert(fabs(p[r] - want) < 1e-5,
				  "layers %d, width %d, rank %d, example %d: "
				  "%g, want %g",
				  c.cross_layers, c.emb_dim, c.cross_rank, r,
				  p[r], want);
		}
		ss_model_work_destroy(&w);
		free(params);
	}
}

/*
 * Each group of parameters (the MLPs' weights and biases, each cross
 * layer's W, V and b, the tables) along a random +-1 direction: the
 * slope of the loss by central differences against the step that one
 * SGD step of lr 1 took, as test_train_model does for the dot model.
 */
static void check_groups(int layers, int emb_dim)
{
	struct ss_model_config c;
	struct ss_model_work *w;
	struct ss_example ex[8];
	float *params, *after, *moved, *v;
	size_t len, start[64], end[64];
	int groups = 0, in, out;
	const float t = 1e-3f;

	tiny_dcn(&c, layers);
	c.emb_dim = c.bottom[2] = emb_dim;
	len = ss_model_len(&c);
	start[0] = 0;
	for (int l = 0; l < ss_model_layers(&c); l++) {
		ss_model_layer_shape(&c, l, &in, &out);
		end[groups] = start[groups] + (size_t)in * (size_t)out;
		start[groups + 1] = end[groups];
		groups++;
		end[groups] = start[groups] + (size_t)out;
		start[groups + 1] = end[groups];
		groups++;
	}
	for (int l = 0; l < layers; l++) {
		size_t d = 27 * (size_t)emb_dim, dr = d * 3;

		cr_assert_eq(start[groups], ss_model_cross_offset(&c, l));
		for (int k = 0; k < 3; k++) { /* W, V, b */
			end[groups] = start[groups] + (k < 2 ? dr : d);
			start[groups + 1] = end[groups];
			groups++;
		}
	}
	cr_assert_eq(start[groups], ss_model_dense_len(&c));
	end[groups++] = len;
	params = malloc(len * sizeof(float));
	after = malloc(len * sizeof(float));
	moved = malloc(len * sizeof(float));
	v = malloc(len * sizeof(float));
	cr_assert(params && after && moved && v);
	ss_model_init(&c, params, 5);
	/* nonzero cross biases: a zero b hides a wrong one's gradient path */
	for (int l = 0; l < layers; l++) {
		size_t d = 27 * (size_t)emb_dim,
		       at = ss_model_cross_offset(&c, l) + 2 * d * 3;

		for (size_t i = 0; i < d; i++)
			params[at + i] = 0.2f * (float)cos((double)i);
	}
	fixed_examples(ex, 8);
	cr_assert_eq(ss_model_work_create(&w, &c, 8), 0);
	memcpy(after, params, len * sizeof(float));
	ss_model_sgd_step(&c, after, w, ex, 8, 1.0f);
	for (int g = 0; g < groups; g++) {
		double analytic, numeric;

		step_slope(&c, params, after, w, ex, NULL, 8, start[g], end[g],
			   t, moved, v, &analytic, &numeric);
		cr_assert(fabs(numeric - analytic) <=
				  2e-5 + 0.03 * fabs(numeric),
			  "%d cross layers, width %d, group %d of %d "
			  "(parameters %zu-%zu): applied %g, numeric %g",
			  layers, emb_dim, g, groups, start[g], end[g],
			  analytic, numeric);
	}
	ss_model_work_destroy(&w);
	free(params);
	free(after);
	free(moved);
	free(v);
}

Test(dcn, every_group_of_gradients_matches_finite_differences)
{
	check_groups(1, 2);
	check_groups(3, 2);
	check_groups(2, 4);
}

/* Adagrad over the cross network: each parameter's step and accumulator
 * from its gradient (one SGD step of lr 1), in closed form. */
Test(dcn, adagrad_step_matches_its_closed_form)
{
	struct ss_model_config c;
	struct ss_model_work *w;
	struct ss_example ex[4];
	struct ss_optim o = { .kind = SS_OPT_ADAGRAD,
			      .lr = 0.05f,
			      .eps = 1e-3f };
	float *params, *sgd, *ada, *acc;
	size_t len, cross0, dense;
	int moved = 0;

	tiny_dcn(&c, 2);
	len = ss_model_len(&c);
	cross0 = ss_model_cross_offset(&c, 0);
	dense = ss_model_dense_len(&c);
	params = malloc(len * sizeof(float));
	sgd = malloc(len * sizeof(float));
	ada = malloc(len * sizeof(float));
	acc = malloc(len * sizeof(float));
	cr_assert(params && sgd && ada && acc);
	ss_model_init(&c, params, 5);
	fixed_examples(ex, 4);
	cr_assert_eq(ss_model_work_create(&w, &c, 4), 0);
	memcpy(sgd, params, len * sizeof(float));
	ss_model_sgd_step(&c, sgd, w, ex, 4, 1.0f);
	for (size_t i = 0; i < len; i++)
		acc[i] = (float)(i % 7) * 0.01f;
	memcpy(ada, params, len * sizeof(float));
	o.acc = acc;
	ss_model_step(&c, ada, w, ex, 4, &o);
	for (size_t i = 0; i < len; i++) {
		double g = (double)params[i] - sgd[i], a0 = (i % 7) * 0.01,
		       a = a0 + g * g,
		       want = params[i] - 0.05 * g / (sqrt(a) + 1e-3);

		cr_assert_float_eq(acc[i], a, 1e-6 + 1e-4 * a,
				   "acc %zu: %g, want %g", i, acc[i], a);
		cr_assert_float_eq(ada[i], want, 1e-5,
				   "param %zu: %g, want %g (g %g)", i, ada[i],
				   want, g);
		moved += i >= cross0 && i < dense && ada[i] != params[i];
	}
	cr_assert_gt(moved, (int)(dense - cross0) / 2,
		     "only %d of the cross network's %zu moved", moved,
		     dense - cross0);
	ss_model_work_destroy(&w);
	free(params);
	free(sgd);
	free(ada);
	free(acc);
}
