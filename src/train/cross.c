// SPDX-License-Identifier: BSD-2-Clause
/*
 * DCNv2's low-rank cross network (cross.h).  Its products go through BLIS
 * as the dense layers' do (dense.c); the elementwise steps are loops the
 * compiler vectorizes.  Per layer and example the forward pass costs
 * 4 d R flops in two GEMMs, the backward 8 d R in four.
 */
/* Vectorize the elementwise loops: see model.c. */
#pragma GCC optimize("vect-cost-model=dynamic", \
		     "no-tree-loop-distribute-patterns")

#include <cblas.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/hogwild.h"
#include "base/mix.h"
#include "base/wide.h"
#include "cross.h"
#include "train/adagrad_wide.h"

struct ss__cross_work {
	int batch;
	float *x; /* layers x batch x d: each layer's input, x0 first */
	float *xw; /* layers x batch x d: W_l (V_l x_l) + b_l */
	float *xv; /* layers x batch x R: V_l x_l */
	float *dxw, *dxv; /* batch x d, batch x R */
	float *dw, *db; /* a weight's gradient (d x R), a bias's (d) */
};

size_t ss__cross_layer_len(int d, int rank)
{
	return 2 * (size_t)d * (size_t)rank + (size_t)d;
}

/* Layer @l's W (d x R), V (R x d) and b (d). */
static void ss_cross_layer(const struct ss__cross *c, int l, float **W,
			   float **V, float **b)
{
	size_t dr = (size_t)c->d * (size_t)c->rank;

	*W = c->params + (size_t)l * ss__cross_layer_len(c->d, c->rank);
	*V = *W + dr;
	*b = *V + dr;
}

void ss__cross_init(const struct ss__cross *c, uint64_t *rng)
{
	float sd = (float)sqrt(2.0 / (c->d + c->rank));
	size_t dr = (size_t)c->d * (size_t)c->rank;

	for (int l = 0; l < c->layers; l++) {
		float *W, *V, *b;

		ss_cross_layer(c, l, &W, &V, &b);
		for (size_t i = 0; i < 2 * dr; i++)
			W[i] = sd * (float)ss__gauss(rng);
		memset(b, 0, (size_t)c->d * sizeof(float));
	}
}

int ss__cross_work_create(struct ss__cross_work **out, int d, int rank,
			  int layers, int batch)
{
	struct ss__cross_work *w = calloc(1, sizeof(*w));
	size_t bd = (size_t)batch * (size_t)d, br = (size_t)batch * rank;

	*out = NULL;
	if (!w)
		return -ENOMEM;
	w->batch = batch;
	w->x = malloc((size_t)layers * bd * sizeof(float));
	w->xw = malloc((size_t)layers * bd * sizeof(float));
	w->xv = malloc((size_t)layers * br * sizeof(float));
	w->dxw = malloc(bd * sizeof(float));
	w->dxv = malloc(br * sizeof(float));
	w->dw = malloc((size_t)d * (size_t)rank * sizeof(float));
	w->db = malloc((size_t)d * sizeof(float));
	if (!w->x || !w->xw || !w->xv || !w->dxw || !w->dxv || !w->dw ||
	    !w->db) {
		ss__cross_work_destroy(&w);
		return -ENOMEM;
	}
	*out = w;
	return 0;
}

void ss__cross_work_destroy(struct ss__cross_work **work)
{
	struct ss__cross_work *w = *work;

	if (!w)
		return;
	free(w->x);
	free(w->xw);
	free(w->xv);
	free(w->dxw);
	free(w->dxv);
	free(w->dw);
	free(w->db);
	free(w);
	*work = NULL;
}

float *ss__cross_x0(struct ss__cross_work *w)
{
	return w->x;
}

/* x_{l+1} = x0 * xw + x_l, elementwise over @n floats. */
SS_WIDE static void ss_cross_mix(const float *x0, const float *xw,
				 const float *xl, float *next, size_t n)
{
	for (size_t i = 0; i < n; i++)
		next[i] = x0[i] * xw[i] + xl[i];
}

/* The biases are read here, the weights by BLIS, which TSan does not see. */
SS_HOGWILD void ss__cross_forward(const struct ss__cross *c,
				  struct ss__cross_work *w, float *out, int n)
{
	int d = c->d, R = c->rank;
	size_t bd = (size_t)n * (size_t)d, stride = (size_t)w->batch * d;

	for (int l = 0; l < c->layers; l++) {
		float *W, *V, *b, *xl = w->x + (size_t)l * stride,
				  *xw = w->xw + (size_t)l * stride,
				  *xv = w->xv + (size_t)l * w->batch * R;
		float *next = l + 1 < c->layers ? xl + stride : out;

		ss_cross_layer(c, l, &W, &V, &b);
		/* xv (n x R) = x_l V^T; xw (n x d) = xv W^T + b */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, R, d,
			    1.0f, xl, d, V, d, 0.0f, xv, R);
		for (int r = 0; r < n; r++)
			memcpy(xw + (size_t)r * d, b,
			       (size_t)d * sizeof(float));
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, d, R,
			    1.0f, xv, R, W, R, 1.0f, xw, d);
		ss_cross_mix(w->x, xw, xl, next, bd);
	}
}

/* dxw = g * x0; dx0 += g * xw (dx0 = g * xw on the first call). */
SS_WIDE static void ss_cross_split(const float *g, const float *x0,
				   const float *xw, float *dxw, float *dx0,
				   bool first, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		dxw[i] = g[i] * x0[i];
		dx0[i] = (first ? 0 : dx0[i]) + g[i] * xw[i];
	}
}

/*
 * dW (d x R) = dxw^T xv and dV (R x d) = dxv^T x_l, applied: SGD adds
 * -lr times the product straight into the weights (as dense.c does);
 * Adagrad takes it whole first.
 */
SS_HOGWILD static void ss_cross_weight_step(float *wgt, float *acc,
					    const float *dy, int m, int k,
					    const float *x, int n_in, int rows,
					    float *scratch,
					    const struct ss_optim *o)
{
	if (o->kind == SS_OPT_SGD) {
		cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, k, rows,
			    -o->lr, dy, m, x, n_in, 1.0f, wgt, k);
		return;
	}
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, m, k, rows, 1.0f,
		    dy, m, x, n_in, 0.0f, scratch, k);
	ss__dense_update(wgt, acc, scratch, (size_t)m * (size_t)k, o);
}

SS_WIDE static void ss_cross_bias_grad(const float *dxw, float *db, int d,
				       int n)
{
	memset(db, 0, (size_t)d * sizeof(float));
	for (int r = 0; r < n; r++)
		for (int i = 0; i < d; i++)
			db[i] += dxw[(size_t)r * d + i];
}

SS_WIDE static void ss_cross_add(float *dst, const float *src, size_t n)
{
	for (size_t i = 0; i < n; i++)
		dst[i] += src[i];
}

/* The accumulators of the parameters at @p (@acc: the network's), or
 * NULL for SGD. */
static float *ss_cross_acc(const struct ss__cross *c, float *acc,
			   const float *p)
{
	return acc ? acc + (p - c->params) : NULL;
}

void ss__cross_backward(const struct ss__cross *c, struct ss__cross_work *w,
			float *g, float *tmp, float *dx0, int n,
			const struct ss_optim *o, float *acc)
{
	int d = c->d, R = c->rank;
	size_t bd = (size_t)n * (size_t)d, stride = (size_t)w->batch * d;

	for (int l = c->layers - 1; l >= 0; l--) {
		float *W, *V, *b, *xl = w->x + (size_t)l * stride,
				  *xw = w->xw + (size_t)l * stride,
				  *xv = w->xv + (size_t)l * w->batch * R, *swap;

		ss_cross_layer(c, l, &W, &V, &b);
		ss_cross_split(g, w->x, xw, w->dxw, dx0, l == c->layers - 1,
			       bd);
		/* dxv (n x R) = dxw W, with W as the forward used it */
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, R, d,
			    1.0f, w->dxw, d, W, R, 0.0f, w->dxv, R);
		/* dx_l (n x d) = g (the residual) + dxv V */
		memcpy(tmp, g, bd * sizeof(float));
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d, R,
			    1.0f, w->dxv, R, V, d, 1.0f, tmp, d);
		ss_cross_weight_step(W, ss_cross_acc(c, acc, W), w->dxw, d, R,
				     xv, R, n, w->dw, o);
		ss_cross_weight_step(V, ss_cross_acc(c, acc, V), w->dxv, R, d,
				     xl, d, n, w->dw, o);
		ss_cross_bias_grad(w->dxw, w->db, d, n);
		ss__dense_update(b, ss_cross_acc(c, acc, b), w->db, (size_t)d,
				 o);
		swap = g;
		g = tmp;
		tmp = swap;
	}
	/* x_0 is also layer 0's input: its residual path ends here */
	ss_cross_add(dx0, g, bd);
}
