// SPDX-License-Identifier: BSD-2-Clause
/*
 * A dense (fully connected) layer over a mini-batch, on BLIS through its
 * CBLAS interface.  BLIS is the single-threaded build: each trainer thread
 * owns a core, and BLIS threads stacked on trainer threads would fight for
 * them.  Weights live in the caller's memory (the replica), row-major,
 * out x in.
 */
/* Vectorize the bias, ReLU and bias-gradient loops: see model.c. */
#pragma GCC optimize("vect-cost-model=dynamic", \
		     "no-tree-loop-distribute-patterns")

#include <cblas.h>
#include <string.h>

#include "base/hogwild.h"
#include "base/wide.h"
#include "shadowsync/train.h"

/* The weights are read by BLIS, which TSan does not see; the biases here. */
SS_WIDE SS_HOGWILD void ss_dense_forward(const struct ss_dense *l,
					 const float *x, float *y, int batch)
{
	/* Y (batch x out) = X (batch x in) W^T + b */
	for (int r = 0; r < batch; r++)
		for (int o = 0; o < l->out; o++)
			y[(size_t)r * (size_t)l->out + (size_t)o] = l->b[o];
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, batch, l->out,
		    l->in, 1.0f, x, l->in, l->w, l->in, 1.0f, y, l->out);
	if (l->relu)
		for (size_t i = 0; i < (size_t)batch * (size_t)l->out; i++)
			y[i] = y[i] > 0 ? y[i] : 0;
}

/* dY through the ReLU: the gradient of what the ReLU zeroed is zero. */
SS_WIDE static void ss_relu_mask(const struct ss_dense *l, const float *y,
				 float *dy, int batch)
{
	size_t n = (size_t)batch * (size_t)l->out;

	if (l->relu)
		for (size_t i = 0; i < n; i++)
			dy[i] = y[i] > 0 ? dy[i] : 0;
}

/* dX (batch x in) = dY W */
static void ss_input_grad(const struct ss_dense *l, const float *dy, float *dx,
			  int batch)
{
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch, l->in,
		    l->out, 1.0f, dy, l->out, l->w, l->in, 0.0f, dx, l->in);
}

/* db = column sums of dY */
SS_WIDE static void ss_bias_grad(const struct ss_dense *l, const float *dy,
				 float *db, int batch)
{
	memset(db, 0, (size_t)l->out * sizeof(float));
	for (int r = 0; r < batch; r++)
		for (int o = 0; o < l->out; o++)
			db[o] += dy[(size_t)r * (size_t)l->out + (size_t)o];
}

void ss_dense_backward(const struct ss_dense *l, const float *x, const float *y,
		       float *dy, float *dx, float *dw, float *db, int batch)
{
	ss_relu_mask(l, y, dy, batch);
	/* dW (out x in) = dY^T X */
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, l->out, l->in,
		    batch, 1.0f, dy, l->out, x, l->in, 0.0f, dw, l->in);
	ss_bias_grad(l, dy, db, batch);
	if (dx)
		ss_input_grad(l, dy, dx, batch);
}

/*
 * SGD needs no weight gradient of its own: BLIS adds -lr dY^T X straight
 * into the weights (beta 1), which saves writing dW and the pass that
 * applies it.  dX is taken first, from the weights the forward pass used.
 */
SS_HOGWILD void ss_dense_backward_sgd(const struct ss_dense *l, const float *x,
				      const float *y, float *dy, float *dx,
				      float *db, float lr, int batch)
{
	ss_relu_mask(l, y, dy, batch);
	if (dx)
		ss_input_grad(l, dy, dx, batch);
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, l->out, l->in,
		    batch, -lr, dy, l->out, x, l->in, 1.0f, l->w, l->in);
	ss_bias_grad(l, dy, db, batch);
	for (int o = 0; o < l->out; o++)
		l->b[o] -= lr * db[o];
}
