/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * DCNv2's low-rank cross network over a mini-batch (the model's
 * SS_INTERACTION_DCN): x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l, the
 * product elementwise, W_l d x R, V_l R x d, b_l d (TorchRec's
 * LowRankCrossNet).  Internal to the model; not part of the public API.
 */
#ifndef SS_TRAIN_CROSS_H
#define SS_TRAIN_CROSS_H

#include <stddef.h>

#include "shadowsync/train.h"

/* The network's shape and parameters: layer l's W, V, b at @params + l *
 * ss__cross_layer_len(). */
struct ss__cross {
	int d, rank, layers;
	float *params;
};

/* ss__cross_layer_len() - floats of one layer: 2 d R + d. */
size_t ss__cross_layer_len(int d, int rank);

/* ss__cross_init() - W and V normal, sd sqrt(2 / (d + R)); b 0. */
void ss__cross_init(const struct ss__cross *c, uint64_t *rng);

/* A trainer's scratch for batches up to @batch. */
struct ss__cross_work;

int ss__cross_work_create(struct ss__cross_work **w, int d, int rank,
			  int layers, int batch);
void ss__cross_work_destroy(struct ss__cross_work **w);

/* ss__cross_x0() - where the caller writes x0 (batch x d) for a forward. */
float *ss__cross_x0(struct ss__cross_work *w);

/* ss__cross_forward() - @out (n x d) from the x0 written. */
void ss__cross_forward(const struct ss__cross *c, struct ss__cross_work *w,
		       float *out, int n);

/*
 * ss__cross_backward() - from @g (n x d, the loss gradient of the
 * forward's @out; overwritten), the gradient of x0 into @dx0 (n x d), and
 * an update of the parameters by @o: SGD, or Adagrad with @acc laid out
 * like the parameters.  @tmp: n x d floats of scratch.  The gradients of
 * each layer's input are taken with the weights as the forward used
 * them, before their update.
 */
void ss__cross_backward(const struct ss__cross *c, struct ss__cross_work *w,
			float *g, float *tmp, float *dx0, int n,
			const struct ss_optim *o, float *acc);

#endif /* SS_TRAIN_CROSS_H */
