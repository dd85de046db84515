/* SPDX-License-Identifier: BSD-2-Clause */
/* Adagrad over dense parameters, at full vector width (adagrad_wide.c). */
#ifndef SS_TRAIN_ADAGRAD_WIDE_H
#define SS_TRAIN_ADAGRAD_WIDE_H

#include <stddef.h>

void ss__adagrad_wide(float *p, float *acc, const float *g, size_t n, float lr,
		      float eps);

#endif /* SS_TRAIN_ADAGRAD_WIDE_H */
