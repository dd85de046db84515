/* SPDX-License-Identifier: BSD-2-Clause */
/* A CTR model small enough for tests to train in a second. */
#ifndef SS_TEST_MODELS_H
#define SS_TEST_MODELS_H

#include <stdio.h>
#include <stdlib.h>

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

/*
 * gen_file() - @examples generated examples (@cardinality values per
 * categorical feature) in a new file made from the mkstemp template
 * @path.  Returns 0, or -1 (the file could not be made or written).
 */
static inline int gen_file(char *path, uint64_t examples, uint32_t cardinality)
{
	struct ss_gen_options g;
	struct ss_metrics teacher;
	int fd = mkstemp(path), rc;
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;

	if (!f)
		return -1;
	ss_gen_options_init(&g);
	g.examples = examples;
	g.cardinality = cardinality;
	rc = ss_gen_data(f, &g, &teacher);
	return fclose(f) == 0 && rc == 0 ? 0 : -1;
}

#endif /* SS_TEST_MODELS_H */
