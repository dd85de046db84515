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
#include "shadowsync/train.h"

/* The weights are read by BLIS, which TSan does not see; the biases here. */
SS_HOGWILD void ss_dense_forward(const struct ss_dense *l, const float *x,
				 float *y, int batch)
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

void ss_dense_backward(const struct ss_dense *l, const float *x, const float *y,
		       float *dy, float *dx, float *dw, float *db, int batch)
{
	size_t n = (size_t)batch * (size_t)l->out;

	if (l->relu)
		for (size_t i = 0; i < n; i++)
			dy[i] = y[i] > 0 ? dy[i] : 0;
	/* dW (out x in) = dY^T X;  db = column sums of dY */
	cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, l->out, l->in,
		    batch, 1.0f, dy, l->out, x, l->in, 0.0f, dw, l->in);
	memset(db, 0, (size_t)l->out * sizeof(float));
	for (int r = 0; r < batch; r++)
		for (int o = 0; o < l->out; o++)
			db[o] += dy[(size_t)r * (size_t)l->out + (size_t)o];
	/* dX (batch x in) = dY W */
	if (dx)
		cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, batch,
			    l->in, l->out, 1.0f, dy, l->out, l->w, l->in, 0.0f,
			    dx, l->in);
}
