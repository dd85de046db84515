/* SPDX-License-Identifier: BSD-2-Clause */
/* A CTR model small enough for tests to train in a second. */
#ifndef SS_TEST_MODELS_H
#define SS_TEST_MODELS_H

#include <math.h>
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

/*
 * tiny_model() - small enough to check every group of gradients:
 * embeddings of 2, bottom 13-3-2, top 4-1, 3 rows a table, DLRM's dot
 * interaction (the DCN's shape ready: 2 layers of rank 3).
 */
static inline void tiny_model(struct ss_model_config *c)
{
	ss_model_config_init(c);
	c->emb_dim = 2;
	c->n_bottom = 3;
	c->bottom[1] = 3;
	c->bottom[2] = 2;
	c->n_top = 2;
	c->top[0] = 4;
	c->top[1] = 1;
	c->hash_size = 3;
	c->cross_layers = 2;
	c->cross_rank = 3;
}

/* fixed_examples() - @n examples of a fixed pattern, labels alternating. */
static inline void fixed_examples(struct ss_example *ex, int n)
{
	for (int r = 0; r < n; r++) {
		ex[r].label = (float)(r % 2);
		for (int i = 0; i < SS_DENSE; i++)
			ex[r].dense[i] = (float)sin(r * 7.1 + i * 1.3) + 1.1f;
		for (int j = 0; j < SS_SPARSE; j++)
			ex[r].sparse[j] = (uint32_t)(r * 31 + j * 7);
	}
}

/* mean_log_loss() - of @n (at most 8) examples, with @bags (or NULL). */
static inline double mean_log_loss(const struct ss_model_config *c,
				   const float *params, struct ss_model_work *w,
				   const struct ss_example *ex,
				   const struct ss_bags *bags, int n)
{
	float p[8];
	double loss = 0;

	if (ss_model_predict_bags(c, params, w, ex, bags, n, p) < 0)
		return NAN;
	for (int r = 0; r < n; r++)
		loss -= ex[r].label ? log(p[r]) : log(1 - p[r]);
	return loss / n;
}

/*
 * step_slope() - along a random +-1 direction of parameters [@lo,
 * @hi) (unit length), the step from @params to @after (one SGD step of
 * lr 1: minus the gradient) against the loss's slope by central
 * differences of @t: into *@applied and *@numeric.  A sum over a group
 * stands well above the float noise that single tiny gradients drown
 * in.  @moved and @v: scratch of the model's length.
 */
static inline void step_slope(const struct ss_model_config *c,
			      const float *params, const float *after,
			      struct ss_model_work *w,
			      const struct ss_example *ex,
			      const struct ss_bags *bags, int n, size_t lo,
			      size_t hi, float t, float *moved, float *v,
			      double *applied, double *numeric)
{
	size_t len = ss_model_len(c);
	float scale = 1.0f / sqrtf((float)(hi - lo));
	double up, down;

	*applied = 0;
	for (size_t i = 0; i < len; i++) {
		float sign = (i * 2654435761u >> 7) % 2 ? 1.0f : -1.0f;

		v[i] = i >= lo && i < hi ? sign * scale : 0;
		*applied += ((double)params[i] - after[i]) * v[i];
	}
	for (size_t i = 0; i < len; i++)
		moved[i] = params[i] + t * v[i];
	up = mean_log_loss(c, moved, w, ex, bags, n);
	for (size_t i = 0; i < len; i++)
		moved[i] = params[i] - t * v[i];
	down = mean_log_loss(c, moved, w, ex, bags, n);
	*numeric = (up - down) / (2 * t);
}

#endif /* SS_TEST_MODELS_H */
