/* SPDX-License-Identifier: BSD-2-Clause */
/* A CTR model small enough for tests to train in a second. */
#ifndef SS_TEST_MODELS_H
#define SS_TEST_MODELS_H

#include "shadowsync/train.h"

/* Embeddings of 4, bottom 13-@hidden-4, top @hidden-1, @rows per table. */
static inline void small_model(struct ss_model_config *c, int hidden,
			       uint32_t rows)
{
	ss_model_config_init(c);
	c->emb_dim = 4;
	c->n_bottom = 3;
	c->bottom[1] = hidden;
	c->bottom[2] = 4;
	c->n_top = 2;
	c->top[0] = hidden;
	c->top[1] = 1;
	c->hash_size = rows;
}

#endif /* SS_TEST_MODELS_H */
