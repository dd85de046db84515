// SPDX-License-Identifier: BSD-2-Clause
/*
 * Synthetic click data from a planted teacher: a logistic model over the
 * dense features, one weight per categorical value (Zipf-distributed
 * values, so a few are frequent and most are rare), and the dot products of
 * a few pairs of categorical embeddings, the shape a DLRM can learn; on
 * request also products of dense pairs and per-value slopes on a dense
 * feature, each feature its own Zipf exponent and each column its own
 * missing rate, as real logs differ.  The teacher's own NE on the labels
 * it drew is the floor for any model.
 */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>

#include "base/mix.h"
#include "base/options.h"
#include "shadowsync/train.h"
#include "train/zipf.h"

#define SS_GEN_DIM 4 /* teacher embedding size for the interactions */
#define SS_GEN_PAIRS 6

void ss_gen_options_init_size(struct ss_gen_options *opts, size_t size)
{
	struct ss_gen_options o = { .size = sizeof(o) };

	/*
	 * A data set a student can learn to within 2% of the floor in one
	 * pass with Adagrad (docs/perf.md): few enough values that each is
	 * seen thousands of times, a floor of about 0.64, and interactions
	 * weak enough for the student to pick up in one pass (at 0.1 the
	 * student ends 3% above the floor, at 0.2 13%).  With half the
	 * examples two Hogwild trainers end 1.4% to 2.1% above it.
	 */
	o.examples = 1000000;
	o.seed = 1;
	o.ctr = 0.25;
	o.zipf = 1.1;
	o.cardinality = 30;
	o.shape = SS_GEN_UNIFORM;
	o.stream = 0;
	o.value_scale = 0.35;
	o.pair_scale = 0.05;
	o.zipf_max = 0;
	o.cap = 0;
	o.missing = -1;
	o.dense_pair_scale = 0;
	o.dense_cat_scale = 0;
	ss__options_out(opts, size, &o, sizeof(o));
}

/* The teacher's parameters are functions of (seed, what, field, value). */
static double ss_param(uint64_t seed, int what, int field, uint64_t value)
{
	uint64_t s =
		ss__mix64(seed ^ ss__mix64(((uint64_t)what << 56) ^
					   ((uint64_t)field << 40) ^ value));

	return ss__gauss(&s);
}

/* The same, a uniform draw in (0, 1). */
static double ss_uparam(uint64_t seed, int what, int field)
{
	uint64_t s = ss__mix64(seed ^ ((uint64_t)what << 56) ^
			       ((uint64_t)field << 40));

	return ss__uniform(&s);
}

/*
 * Distinct values of C1..C26 in the Criteo Kaggle (Display Advertising
 * Challenge) training set, as the DLRM reference counts them: from 3 to
 * 10 million, 34 million in all.
 */
static const uint32_t ss_criteo_counts[SS_SPARSE] = {
	1460,  583,  10131227, 2202608, 305, 24,     12517,   633,    3,
	93145, 5683, 8351593,  3194,	27,  14992,  5461306, 10,     5652,
	2173,  4,    7046547,  18,	15,  286181, 105,     142572,
};

uint32_t ss_gen_cardinality(const struct ss_gen_options *o, int j)
{
	uint32_t n = o->shape == SS_GEN_CRITEO ? ss_criteo_counts[j] :
						 o->cardinality;
	/* read in place: a caller's struct from before the cap has none */
	bool has_cap = o->size >=
		       offsetof(struct ss_gen_options, cap) + sizeof(o->cap);

	return has_cap && o->cap && o->cap < n ? o->cap : n;
}

struct ss_teacher {
	uint64_t seed;
	/* feature j's values: hot[j] of them at at[j] of an example's */
	uint32_t hot[SS_SPARSE], at[SS_SPARSE + 1];
	double value_scale, pair_scale, dense_pair_scale, dense_cat_scale;
	double missing[SS_DENSE + SS_SPARSE]; /* each column's empty rate */
	struct ss__zipf zipf[SS_SPARSE]; /* each feature's values */
	int pairs[SS_GEN_PAIRS][2]; /* categorical x categorical */
	int dense_pairs[SS_GEN_PAIRS][2]; /* dense x dense */
	int dense_cats[SS_GEN_PAIRS][2]; /* dense x categorical */
};

/* A dense feature as the student sees it: log1p, empty or negative as 0
 * (centred roughly). */
static double ss_dense_seen(long v, bool empty)
{
	return log1p(!empty && v > 0 ? (double)v : 0) - 1.2;
}

/*
 * Teacher parameter @what of feature @j's bag of values @v (its @hot
 * drawn values, from @at): their mean; a bag of one gives its value's
 * exactly.
 */
static double ss_bag_param(const struct ss_teacher *t, int what, int j,
			   const uint32_t *v)
{
	double sum = 0;

	for (uint32_t h = t->at[j]; h < t->at[j + 1]; h++)
		sum += ss_param(t->seed, what, j, v[h]);
	return sum / t->hot[j];
}

/*
 * Draw one example's features into @ints, @vals (feature j's at at[j])
 * and @empty; returns the teacher's logit without bias.
 */
static double ss_draw(const struct ss_teacher *t, uint64_t *rng, long *ints,
		      uint32_t *vals, bool *empty)
{
	uint32_t v[SS_SPARSE * SS_GEN_MAX_HOT];
	double x[SS_DENSE], z = 0;

	for (int j = 0; j < SS_DENSE; j++) {
		double g = ss__gauss(rng);

		empty[j] = ss__uniform(rng) < t->missing[j];
		ints[j] = (long)floor(exp(1.0 + 1.2 * g)) - 1;
		/* on the feature as a reader sees it (empty reads as 0), so
		 * that the floor is one a student can reach */
		x[j] = ss_dense_seen(ints[j], empty[j]);
		z += 0.3 * ss_param(t->seed, 1, j, 0) * x[j];
	}
	for (int j = 0; j < SS_SPARSE; j++) {
		uint32_t a = t->at[j];

		v[a] = (uint32_t)(ss__zipf_draw(&t->zipf[j], rng) - 1);
		empty[SS_DENSE + j] =
			ss__uniform(rng) < t->missing[SS_DENSE + j];
		/* the rest of a bag after the draws of one value, so that a
		 * file of one value a field is what it always was */
		for (uint32_t h = a + 1; h < t->at[j + 1]; h++)
			v[h] = (uint32_t)(ss__zipf_draw(&t->zipf[j], rng) - 1);
		/* the value as written: a hash, never 0 (the empty value) */
		for (uint32_t h = a; h < t->at[j + 1]; h++)
			vals[h] = (uint32_t)ss__mix64(t->seed ^
						      ((uint64_t)j << 32) ^
						      v[h]) |
				  1;
		if (!empty[SS_DENSE + j])
			z += t->value_scale * ss_bag_param(t, 2, j, v);
	}
	for (int k = 0; k < SS_GEN_PAIRS; k++) {
		int a = t->pairs[k][0], b = t->pairs[k][1];
		double dot = 0;

		if (empty[SS_DENSE + a] || empty[SS_DENSE + b])
			continue;
		for (int d = 0; d < SS_GEN_DIM; d++)
			dot += ss_bag_param(t, 3 + d, a, v) *
			       ss_bag_param(t, 3 + d, b, v);
		z += t->pair_scale * dot;
	}
	for (int k = 0; t->dense_pair_scale && k < SS_GEN_PAIRS; k++) {
		int a = t->dense_pairs[k][0], b = t->dense_pairs[k][1];

		z += t->dense_pair_scale * ss_param(t->seed, 7, k, 0) * x[a] *
		     x[b];
	}
	/* a value's own slope on a dense feature */
	for (int k = 0; t->dense_cat_scale && k < SS_GEN_PAIRS; k++) {
		int a = t->dense_cats[k][0], c = t->dense_cats[k][1];

		if (!empty[SS_DENSE + c])
			z += t->dense_cat_scale * x[a] *
			     ss_bag_param(t, 8, c, v);
	}
	return z;
}

static double ss_sigmoid(double z)
{
	return 1 / (1 + exp(-z));
}

/* The bias that brings the mean click probability to @ctr. */
static double ss_calibrate(const struct ss_teacher *t, double ctr)
{
	enum { SAMPLE = 20000 };
	double *z = malloc(SAMPLE * sizeof(double)), lo, hi, reach = 0;
	long ints[SS_DENSE];
	uint32_t vals[SS_SPARSE * SS_GEN_MAX_HOT];
	bool empty[SS_DENSE + SS_SPARSE];
	uint64_t rng = ss__mix64(t->seed ^ 0xca11b);

	if (!z)
		return 0;
	for (int i = 0; i < SAMPLE; i++) {
		z[i] = ss_draw(t, &rng, ints, vals, empty);
		reach = fmax(reach, fabs(z[i]));
	}
	/*
	 * A bracket of every logit and then some: at lo every click
	 * probability is below 1e-21, at hi above 1 - 1e-21, so the mean
	 * crosses any rate between.  A fixed [-20, 20] missed the rate asked
	 * when --value-scale spreads the logits wider (0.42 for 0.001).
	 */
	lo = -reach - 50;
	hi = reach + 50;
	for (int it = 0; it < 100; it++) {
		double mid = (lo + hi) / 2, mean = 0;

		for (int i = 0; i < SAMPLE; i++)
			mean += ss_sigmoid(z[i] + mid);
		if (mean / SAMPLE < ctr)
			lo = mid;
		else
			hi = mid;
	}
	free(z);
	return (lo + hi) / 2;
}

static void ss_write_example(FILE *out, const struct ss_teacher *t, int label,
			     const long *ints, const uint32_t *vals,
			     const bool *empty)
{
	fprintf(out, "%d", label);
	for (int j = 0; j < SS_DENSE; j++)
		if (empty[j])
			fputs("\t", out);
		else
			fprintf(out, "\t%ld", ints[j]);
	for (int j = 0; j < SS_SPARSE; j++)
		if (empty[SS_DENSE + j])
			fputs("\t", out);
		else
			for (uint32_t h = t->at[j]; h < t->at[j + 1]; h++)
				fprintf(out, "%c%08x",
					h > t->at[j] ? ',' : '\t', vals[h]);
	fputc('\n', out);
}

int ss_gen_data(FILE *out, const struct ss_gen_options *opts,
		struct ss_metrics *teacher)
{
	struct ss_gen_options copy;
	const struct ss_gen_options *o = &copy;
	struct ss_teacher t = { 0 };
	float *p, *y;
	uint64_t rng;
	double bias;
	int rc;

	ss_gen_options_init(&copy);
	rc = ss__options_in(&copy, sizeof(copy), opts, sizeof(copy),
			    "ss_gen_options");
	if (rc < 0)
		return rc;
	t.seed = ss__mix64(o->seed);
	t.value_scale = o->value_scale;
	t.pair_scale = o->pair_scale;
	t.dense_pair_scale = o->dense_pair_scale;
	t.dense_cat_scale = o->dense_cat_scale;
	if (!o->cardinality || !o->examples)
		return ss_error_set(-EINVAL, "nothing to generate", NULL,
				    "%llu examples of cardinality %u",
				    (unsigned long long)o->examples,
				    o->cardinality);
	if (o->missing > 0.5 || o->zipf_max > 5)
		return ss_error_set(-EINVAL, "out of range", NULL,
				    "missing share %g (at most 0.5), Zipf "
				    "exponent up to %g (at most 5)",
				    o->missing, o->zipf_max);
	p = malloc(o->examples * sizeof(float));
	y = malloc(o->examples * sizeof(float));
	if (!p || !y) {
		rc = ss_error_set(-ENOMEM, NULL, NULL,
				  "generating %llu examples",
				  (unsigned long long)o->examples);
		goto out;
	}
	for (int j = 0; j < SS_SPARSE; j++) {
		if (o->multi_hot[j] > SS_GEN_MAX_HOT) {
			rc = ss_error_set(-EINVAL, "too many values a field",
					  "at most 256", "C%d: %u values",
					  j + 1, o->multi_hot[j]);
			goto out;
		}
		t.hot[j] = o->multi_hot[j] ? o->multi_hot[j] : 1;
		t.at[j + 1] = t.at[j] + t.hot[j];
	}
	for (int j = 0; j < SS_SPARSE; j++) {
		double s = o->zipf;

		if (o->zipf_max > o->zipf)
			s += (o->zipf_max - o->zipf) * ss_uparam(t.seed, 9, j);
		ss__zipf_init(&t.zipf[j], ss_gen_cardinality(o, j), s);
	}
	for (int j = 0; j < SS_DENSE + SS_SPARSE; j++)
		t.missing[j] =
			o->missing < 0 ?
				(j < SS_DENSE ? 0.05 : 0.03) :
				2 * o->missing * ss_uparam(t.seed, 10, j);
	for (int k = 0; k < SS_GEN_PAIRS; k++) {
		t.pairs[k][0] = k;
		t.pairs[k][1] = SS_SPARSE - 1 - k;
		t.dense_pairs[k][0] = k;
		t.dense_pairs[k][1] = SS_DENSE - 1 - k;
		t.dense_cats[k][0] = 2 * k;
		t.dense_cats[k][1] = (5 * k + 3) % SS_SPARSE;
	}
	bias = ss_calibrate(&t, o->ctr);
	/* the teacher comes from the seed, the examples from the stream too */
	rng = ss__mix64(t.seed ^ 0xda7a ^ ss__mix64(o->stream));
	for (uint64_t i = 0; i < o->examples; i++) {
		long ints[SS_DENSE];
		uint32_t vals[SS_SPARSE * SS_GEN_MAX_HOT];
		bool empty[SS_DENSE + SS_SPARSE];
		double prob =
			ss_sigmoid(bias + ss_draw(&t, &rng, ints, vals, empty));
		int label = ss__uniform(&rng) < prob;

		p[i] = (float)prob;
		y[i] = (float)label;
		ss_write_example(out, &t, label, ints, vals, empty);
	}
	if (ferror(out))
		rc = ss_error_set(-EIO, NULL, "is the disk full?",
				  "writing the examples");
	if (rc == 0)
		rc = ss_metrics_compute(p, y, o->examples, teacher);
out:
	free(p);
	free(y);
	return rc;
}
