/* SPDX-License-Identifier: BSD-2-Clause */
/* Adagrad over dense parameters, at full vector width (adagrad_wide.c). */
#ifndef SS_TRAIN_ADAGRAD_WIDE_H
#define SS_TRAIN_ADAGRAD_WIDE_H

#include <stddef.h>

#include "shadowsync/train.h"

void ss__adagrad_wide(float *p, float *acc, const float *g, size_t n, float lr,
		      float eps);

/*
 * ss__dense_update() - a dense layer's step by @o from its gradient @g:
 * Adagrad with @acc (ss__adagrad_wide()), SGD without (@acc NULL).
 */
void ss__dense_update(float *p, float *acc, const float *g, size_t n,
		      const struct ss_optim *o);

#endif /* SS_TRAIN_ADAGRAD_WIDE_H */
