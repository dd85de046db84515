// SPDX-License-Identifier: BSD-2-Clause
/*
 * Multi-hot data: fields of several comma-separated values read into
 * bags, pooled by the model (sum or mean), their gradients spread back to
 * the rows; gen-data's --multi-hot.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models.h"
#include "shadowsync/shadowsync.h"
#include "shadowsync/train.h"

static char dir[] = "/tmp/ss-bags-XXXXXX";

static void setup(void)
{
	strcpy(dir, "/tmp/ss-bags-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(bags, .init = setup, .fini = teardown);

/* A line: label 1, 13 integers, then the 26 fields @cats (NULL: the
 * value 0x1000 + j), into @buf. */
static const char *line(char *buf, size_t size, const char *const *cats)
{
	int n = snprintf(buf, size,
			 "1\t5\t\t-3\t0\t12\t1\t2\t3\t4\t5\t6\t7\t100");

	for (int j = 0; j < SS_SPARSE; j++)
		if (cats && cats[j])
			n += snprintf(buf + n, size - (size_t)n, "\t%s",
				      cats[j]);
		else
			n += snprintf(buf + n, size - (size_t)n, "\t%08x",
				      0x1000 + j);
	return buf;
}

static const char *write_file(const char *name, const char *text)
{
	static char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	cr_assert_eq(fclose(f), 0);
	return path;
}

/* Feature @j of example @r: its values' count, and value @k. */
static uint32_t bag_len(const struct ss_bags *b, int r, int j)
{
	return b->start[r * SS_SPARSE + j + 1] - b->start[r * SS_SPARSE + j];
}

static uint32_t bag_id(const struct ss_bags *b, int r, int j, int k)
{
	return b->ids[b->start[r * SS_SPARSE + j] + (uint32_t)k];
}

Test(bags, multi_hot_lines_read_as_bags_and_single_hot_as_ever)
{
	const char *cats[SS_SPARSE] = { 0 };
	char one[1024], multi[1024], text[2100], why[160];
	struct ss_example ex[4], want;
	struct ss_bags *b;
	struct ss_reader *r;
	const char *path;

	cats[0] = "a3f2c1d0,00ff12ab";
	cats[21] = "";
	cats[25] = "0000000a,0000000b,0000000a";
	line(multi, sizeof(multi), cats);
	line(one, sizeof(one), NULL);
	snprintf(text, sizeof(text), "%s\n%s\n", multi, one);
	path = write_file("m.txt", text);
	cr_assert_eq(ss_bags_create(&b, 4), 0);
	cr_assert_eq(ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_FAIL), 0);
	cr_assert_eq(ss_reader_fill_bags(r, ex, b, 4), 2);
	cr_assert_eq(bag_len(b, 0, 0), 2);
	cr_assert_eq(bag_id(b, 0, 0, 0), 0xa3f2c1d0);
	cr_assert_eq(bag_id(b, 0, 0, 1), 0x00ff12ab);
	cr_assert_eq(ex[0].sparse[0], 0xa3f2c1d0, "the first value");
	/* an empty field: the value 0, one value, as single-hot data */
	cr_assert_eq(bag_len(b, 0, 21), 1);
	cr_assert_eq(bag_id(b, 0, 21, 0), 0);
	cr_assert_eq(bag_len(b, 0, 25), 3, "a value twice stays twice");
	cr_assert_eq(bag_id(b, 0, 25, 2), 0xa);
	/* the single-hot line: one value a feature, as ss_parse_example */
	cr_assert_eq(
		ss_parse_example(one, strlen(one), &want, why, sizeof(why)), 0);
	cr_assert(!memcmp(&ex[1], &want, sizeof(want)));
	for (int j = 0; j < SS_SPARSE; j++) {
		cr_assert_eq(bag_len(b, 1, j), 1);
		cr_assert_eq(bag_id(b, 1, j, 0), want.sparse[j]);
	}
	cr_assert_eq(b->start[2 * SS_SPARSE], 2 * SS_SPARSE + 1 + 2);
	ss_reader_close(&r);
	/* the one-value calls refuse the multi-hot line, naming it */
	cr_assert_eq(ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_FAIL), 0);
	cr_assert_eq(ss_reader_next(r, ex), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->what, "m.txt:1"));
	cr_assert(strstr(ss_last_error()->why, "(C1)"), "%s",
		  ss_last_error()->why);
	cr_assert(strstr(ss_last_error()->why, "several values"));
	ss_reader_close(&r);
	ss_bags_destroy(&b);
	cr_assert_null(b);
}

/* A trailing comma, an empty value between commas, a bad value after a
 * good one: each a malformed line naming its field; skipped, its values
 * leave nothing behind. */
Test(bags, malformed_bags_are_named_and_skipped_whole)
{
	static const char *const bad[][2] = {
		{ "a3f2c1d0,", "ends with a comma" },
		{ "a3f2c1d0,,00ff12ab", "an empty value between commas" },
		{ "a3f2c1d0,00ff12", "not 8 hex" },
		{ ",a3f2c1d0", "starts with a comma" },
	};
	char text[8192], buf[1024], good[1024];
	const char *cats[SS_SPARSE] = { 0 };
	struct ss_example ex[8];
	struct ss_bags *b;
	struct ss_reader *r;
	size_t n = 0;

	cr_assert_eq(ss_bags_create(&b, 8), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *path;

		cats[7] = bad[i][0];
		line(buf, sizeof(buf), cats);
		path = write_file("bad.txt", buf);
		cr_assert_eq(ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_FAIL),
			     0);
		cr_assert_eq(ss_reader_fill_bags(r, ex, b, 8), SS_EPARSE);
		cr_assert(strstr(ss_last_error()->what, "bad.txt:1"));
		cr_assert(strstr(ss_last_error()->why, "(C8)"), "%s",
			  ss_last_error()->why);
		cr_assert(strstr(ss_last_error()->why, bad[i][1]), "%s: %s",
			  bad[i][0], ss_last_error()->why);
		ss_reader_close(&r);
		n += (size_t)snprintf(text + n, sizeof(text) - n, "%s\n", buf);
	}
	cats[7] = "00000007,00000008";
	n += (size_t)snprintf(text + n, sizeof(text) - n, "%s\n",
			      line(good, sizeof(good), cats));
	cr_assert_eq(ss_reader_open(&r, write_file("mixed.txt", text), 0, 0,
				    SS_BAD_LINES_SKIP),
		     0);
	cr_assert_eq(ss_reader_fill_bags(r, ex, b, 8), 1);
	cr_assert_eq(ss_reader_skipped(r), 4);
	cr_assert_eq(b->start[0], 0);
	cr_assert_eq(bag_len(b, 0, 7), 2);
	cr_assert_eq(bag_id(b, 0, 7, 1), 8);
	cr_assert_eq(b->start[SS_SPARSE], SS_SPARSE + 1);
	ss_reader_close(&r);
	ss_bags_destroy(&b);
}

/* A field of 10000 values (90 kB of line) is read whole: the bags grow. */
Test(bags, a_field_of_ten_thousand_values_is_read_whole)
{
	enum { N = 10000 };
	char *field = malloc(N * 9), *text = malloc(N * 9 + 1024);
	const char *cats[SS_SPARSE] = { 0 };
	struct ss_example ex[2];
	struct ss_bags *b;
	struct ss_reader *r;

	cr_assert(field && text);
	for (int i = 0; i < N; i++)
		snprintf(field + 9 * i, 10, "%08x%s", i, i + 1 < N ? "," : "");
	cats[3] = field;
	line(text, N * 9 + 1024, cats);
	strcat(text, "\n");
	cr_assert_eq(ss_bags_create(&b, 2), 0);
	cr_assert_eq(ss_reader_open(&r, write_file("long.txt", text), 0, 0,
				    SS_BAD_LINES_FAIL),
		     0);
	cr_assert_eq(ss_reader_fill_bags(r, ex, b, 2), 1);
	cr_assert_eq(bag_len(b, 0, 3), N);
	for (int i = 0; i < N; i++)
		cr_assert_eq(bag_id(b, 0, 3, i), (uint32_t)i);
	cr_assert_geq(b->cap, (size_t)N + 25);
	ss_reader_close(&r);
	ss_bags_destroy(&b);
	free(field);
	free(text);
}

/* Readers of adjacent byte ranges read each multi-hot line once, with
 * the values the whole file's reader gives. */
Test(bags, byte_ranges_read_each_multi_hot_line_once)
{
	enum { LINES = 60 };
	char *text = malloc(LINES * 1200), buf[1200], vals[64];
	const char *cats[SS_SPARSE] = { 0 }, *path;
	uint32_t whole[LINES * 200], parts[LINES * 200];
	struct ss_example ex[LINES];
	struct ss_bags *b;
	struct ss_reader *r;
	size_t n = 0, nw, np = 0;
	int got = 0;

	for (int i = 0; i < LINES; i++) {
		snprintf(vals, sizeof(vals), "%08x,%08x,%08x", i, i + 1, i * 7);
		cats[i % SS_SPARSE] = i % 3 ? vals : "";
		n += (size_t)snprintf(text + n, LINES * 1200 - n, "%s\n",
				      line(buf, sizeof(buf), cats));
		cats[i % SS_SPARSE] = NULL;
	}
	path = write_file("r.txt", text);
	cr_assert_eq(ss_bags_create(&b, LINES), 0);
	cr_assert_eq(ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_FAIL), 0);
	cr_assert_eq(ss_reader_fill_bags(r, ex, b, LINES), LINES);
	nw = b->start[LINES * SS_SPARSE];
	memcpy(whole, b->ids, nw * sizeof(uint32_t));
	ss_reader_close(&r);
	for (uint64_t at = 0; at < n; at += n / 3 + 1) {
		int k;

		cr_assert_eq(ss_reader_open(&r, path, at, at + n / 3 + 1,
					    SS_BAD_LINES_FAIL),
			     0);
		while ((k = ss_reader_fill_bags(r, ex, b, 7)) > 0) {
			memcpy(parts + np, b->ids,
			       b->start[k * SS_SPARSE] * sizeof(uint32_t));
			np += b->start[k * SS_SPARSE];
			got += k;
		}
		cr_assert_eq(k, 0);
		ss_reader_close(&r);
	}
	cr_assert_eq(got, LINES);
	cr_assert_eq(np, nw);
	cr_assert(!memcmp(parts, whole, nw * sizeof(uint32_t)));
	ss_bags_destroy(&b);
	free(text);
}

/* Small enough to check every group; 5 rows a table. */
static void tiny(struct ss_model_config *c, enum ss_interaction in,
		 enum ss_pooling pool)
{
	tiny_model(c);
	c->hash_size = 5;
	c->interaction = in;
	c->pooling = pool;
}

/*
 * Bags for @n examples: feature 0 holds 3 values, one of them twice;
 * feature 5 none in odd examples, 2 in even ones; the rest the
 * example's one value.  Each example's sparse[j] is its first value.
 */
static struct ss_bags *some_bags(struct ss_example *ex, int n)
{
	struct ss_bags *b;
	uint32_t u = 0;

	/* room for twice the examples' values: these hold more than one */
	cr_assert_eq(ss_bags_create(&b, 2 * n), 0);
	for (int r = 0; r < n; r++)
		for (int j = 0; j < SS_SPARSE; j++) {
			uint32_t v = ex[r].sparse[j];

			b->start[r * SS_SPARSE + j] = u;
			if (j == 0) {
				b->ids[u++] = v;
				b->ids[u++] = v + 11;
				b->ids[u++] = v;
			} else if (j == 5 && r % 2) {
				continue;
			} else if (j == 5) {
				b->ids[u++] = v;
				b->ids[u++] = v + 3;
			} else {
				b->ids[u++] = v;
			}
		}
	b->start[n * SS_SPARSE] = u;
	return b;
}

/* One value a feature through the bags' calls is the single-hot step, to
 * the bit, for both optimizers and both poolings. */
Test(bags, one_value_a_feature_through_bags_is_the_single_hot_model)
{
	for (int k = 0; k < 4; k++) {
		struct ss_model_config c;
		struct ss_model_work *w;
		struct ss_example ex[6];
		struct ss_bags *b;
		size_t len;
		float *a, *z, *acc_a, *acc_z, pa[6], pz[6];
		struct ss_optim o = { .kind = k % 2 ? SS_OPT_ADAGRAD :
						      SS_OPT_SGD,
				      .lr = 0.1f,
				      .eps = 1e-3f };

		tiny(&c, SS_INTERACTION_DOT,
		     k / 2 ? SS_POOLING_MEAN : SS_POOLING_SUM);
		len = ss_model_len(&c);
		a = malloc(len * sizeof(float));
		z = malloc(len * sizeof(float));
		acc_a = calloc(len, sizeof(float));
		acc_z = calloc(len, sizeof(float));
		cr_assert(a && z && acc_a && acc_z);
		ss_model_init(&c, a, 3);
		memcpy(z, a, len * sizeof(float));
		fixed_examples(ex, 6);
		cr_assert_eq(ss_bags_create(&b, 6), 0);
		for (int i = 0; i <= 6 * SS_SPARSE; i++)
			b->start[i] = (uint32_t)i;
		for (int i = 0; i < 6 * SS_SPARSE; i++)
			b->ids[i] = ex[i / SS_SPARSE].sparse[i % SS_SPARSE];
		cr_assert_eq(ss_model_work_create(&w, &c, 6), 0);
		o.acc = acc_a;
		ss_model_step(&c, a, w, ex, 6, &o);
		o.acc = acc_z;
		cr_assert(!isnan(ss_model_step_bags(&c, z, w, ex, b, 6, &o)));
		cr_assert(!memcmp(a, z, len * sizeof(float)), "case %d", k);
		ss_model_predict(&c, a, w, ex, 6, pa);
		cr_assert_eq(ss_model_predict_bags(&c, z, w, ex, b, 6, pz), 0);
		cr_assert(!memcmp(pa, pz, sizeof(pa)));
		ss_model_work_destroy(&w);
		ss_bags_destroy(&b);
		free(a);
		free(z);
		free(acc_a);
		free(acc_z);
	}
}

/*
 * What pooling means: an example whose feature 3 holds values a and b
 * predicts what the same example with a alone predicts once a's row
 * holds the sum (sum) or the mean (mean) of the two rows.
 */
Test(bags, a_bag_predicts_as_a_row_holding_its_pool)
{
	for (int k = 0; k < 4; k++) {
		struct ss_model_config c;
		struct ss_model_work *w;
		struct ss_example ex[2];
		struct ss_bags *b;
		uint64_t ida[SS_SPARSE], idb[SS_SPARSE];
		float *params, *pooled, p_bag, p_row;
		size_t dense;
		bool mean = k % 2;

		tiny(&c, k / 2 ? SS_INTERACTION_DCN : SS_INTERACTION_DOT,
		     mean ? SS_POOLING_MEAN : SS_POOLING_SUM);
		c.hash_size = 50;
		dense = ss_model_dense_len(&c);
		params = malloc(ss_model_len(&c) * sizeof(float));
		pooled = malloc(ss_model_len(&c) * sizeof(float));
		ss_model_init(&c, params, 8);
		fixed_examples(ex, 2);
		ex[1] = ex[0];
		ex[1].sparse[3] = 12345; /* b */
		ss_model_batch_rows(&c, &ex[0], 1, ida);
		ss_model_batch_rows(&c, &ex[1], 1, idb);
		cr_assert_neq(ida[3], idb[3], "two rows");
		cr_assert_eq(ss_bags_create(&b, 2), 0); /* 27 values */
		for (int j = 0, u = 0; j <= SS_SPARSE; j++) {
			b->start[j] = (uint32_t)u;
			if (j < SS_SPARSE)
				b->ids[u++] = ex[0].sparse[j];
			if (j == 3)
				b->ids[u++] = 12345;
		}
		cr_assert_eq(ss_model_work_create(&w, &c, 2), 0);
		cr_assert_eq(
			ss_model_predict_bags(&c, params, w, ex, b, 1, &p_bag),
			0);
		memcpy(pooled, params, ss_model_len(&c) * sizeof(float));
		for (int i = 0; i < 2; i++) {
			float *ra = pooled + dense + ida[3] * 2;
			const float *rb = params + dense + idb[3] * 2;

			ra[i] = mean ? (ra[i] + rb[i]) / 2 : ra[i] + rb[i];
		}
		ss_model_predict(&c, pooled, w, ex, 1, &p_row);
		cr_assert_float_eq(p_bag, p_row, 1e-6,
				   "case %d: bag %g, pooled row %g", k, p_bag,
				   p_row);
		ss_model_work_destroy(&w);
		ss_bags_destroy(&b);
		free(params);
		free(pooled);
	}
}

/*
 * With bags (a value twice in one, empty ones), the step SGD takes
 * along random directions of the dense part and of each table against
 * the loss's slope by central differences: the pooled gradient goes to
 * every row of its bag, divided by the bag's size for mean pooling.
 */
Test(bags, gradients_through_bags_match_finite_differences)
{
	for (int k = 0; k < 4; k++) {
		struct ss_model_config c;
		struct ss_model_work *w;
		struct ss_example ex[8];
		struct ss_bags *b;
		float *params, *after, *moved, *v;
		size_t len, dense, lo[4], hi[4];
		const float t = 1e-3f;

		tiny(&c, k / 2 ? SS_INTERACTION_DCN : SS_INTERACTION_DOT,
		     k % 2 ? SS_POOLING_MEAN : SS_POOLING_SUM);
		len = ss_model_len(&c);
		dense = ss_model_dense_len(&c);
		/* the dense part; table 0 (bags of 3, a value twice);
		 * table 5 (empty bags and bags of 2); table 9 (one value) */
		lo[0] = 0;
		hi[0] = dense;
		lo[1] = dense;
		hi[1] = dense + 5 * 2;
		lo[2] = dense + 5 * 5 * 2;
		hi[2] = lo[2] + 5 * 2;
		lo[3] = dense + 9 * 5 * 2;
		hi[3] = lo[3] + 5 * 2;
		params = malloc(len * sizeof(float));
		after = malloc(len * sizeof(float));
		moved = malloc(len * sizeof(float));
		v = malloc(len * sizeof(float));
		cr_assert(params && after && moved && v);
		ss_model_init(&c, params, 5);
		fixed_examples(ex, 8);
		b = some_bags(ex, 8);
		cr_assert_eq(ss_model_work_create(&w, &c, 8), 0);
		memcpy(after, params, len * sizeof(float));
		cr_assert(!isnan(ss_model_step_bags(
			&c, after, w, ex, b, 8,
			&(struct ss_optim){ .kind = SS_OPT_SGD, .lr = 1 })));
		for (int g = 0; g < 4; g++) {
			double analytic, numeric;

			step_slope(&c, params, after, w, ex, b, 8, lo[g], hi[g],
				   t, moved, v, &analytic, &numeric);
			cr_assert(fabs(numeric - analytic) <=
					  2e-5 + 0.03 * fabs(numeric),
				  "case %d, group %d: applied %g, numeric %g",
				  k, g, analytic, numeric);
			cr_assert(g != 1 || fabs(analytic) > 1e-4,
				  "case %d: table 0 did not move", k);
		}
		ss_model_work_destroy(&w);
		ss_bags_destroy(&b);
		free(params);
		free(after);
		free(moved);
		free(v);
	}
}

/* Adagrad with bags: a row used several times in a batch (twice in one
 * bag, and in other examples') takes one step of its summed gradient. */
Test(bags, adagrad_steps_each_row_once_with_its_summed_gradient)
{
	struct ss_model_config c;
	struct ss_model_work *w;
	struct ss_example ex[4];
	struct ss_bags *b;
	struct ss_optim o = { .kind = SS_OPT_ADAGRAD,
			      .lr = 0.05f,
			      .eps = 1e-3f };
	float *params, *sgd, *ada, *acc;
	size_t len;

	tiny(&c, SS_INTERACTION_DOT, SS_POOLING_MEAN);
	len = ss_model_len(&c);
	params = malloc(len * sizeof(float));
	sgd = malloc(len * sizeof(float));
	ada = malloc(len * sizeof(float));
	acc = calloc(len, sizeof(float));
	cr_assert(params && sgd && ada && acc);
	ss_model_init(&c, params, 5);
	fixed_examples(ex, 4);
	b = some_bags(ex, 4);
	cr_assert_eq(ss_model_work_create(&w, &c, 4), 0);
	memcpy(sgd, params, len * sizeof(float));
	ss_model_step_bags(&c, sgd, w, ex, b, 4,
			   &(struct ss_optim){ .kind = SS_OPT_SGD, .lr = 1 });
	memcpy(ada, params, len * sizeof(float));
	o.acc = acc;
	ss_model_step_bags(&c, ada, w, ex, b, 4, &o);
	for (size_t i = 0; i < len; i++) {
		double g = (double)params[i] - sgd[i],
		       want = params[i] - 0.05 * g / (sqrt(g * g) + 1e-3);

		cr_assert_float_eq(acc[i], g * g, 1e-6 + 1e-4 * g * g,
				   "acc %zu: %g, want %g", i, acc[i], g * g);
		cr_assert_float_eq(ada[i], want, 1e-5, "param %zu", i);
	}
	ss_model_work_destroy(&w);
	ss_bags_destroy(&b);
	free(params);
	free(sgd);
	free(ada);
	free(acc);
}

/* gen-data --multi-hot: each field holds its feature's count of values
 * (an empty one, one: the value 0), and the teacher sees them. */
Test(bags, gen_data_writes_bags_of_the_sizes_asked)
{
	static const uint32_t mlperf[SS_SPARSE] = {
		3, 2, 1, 2, 6, 1, 1,  1,   1,  7,  3, 8, 1,
		6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1,
	};
	struct ss_gen_options g;
	struct ss_metrics teacher;
	struct ss_example ex[64];
	struct ss_bags *b;
	struct ss_reader *r;
	char path[300];
	int got, empty = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/g.txt", dir);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	ss_gen_options_init(&g);
	g.examples = 400;
	g.cardinality = 500;
	memcpy(g.multi_hot, mlperf, sizeof(mlperf));
	cr_assert_eq(ss_gen_data(f, &g, &teacher), 0);
	cr_assert_eq(fclose(f), 0);
	cr_assert(teacher.ne > 0.3 && teacher.ne < 0.95, "NE %g", teacher.ne);
	cr_assert_eq(ss_bags_create(&b, 64), 0);
	cr_assert_eq(ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_FAIL), 0);
	while ((got = ss_reader_fill_bags(r, ex, b, 64)) > 0)
		for (int i = 0; i < got; i++)
			for (int j = 0; j < SS_SPARSE; j++) {
				uint32_t n = bag_len(b, i, j);

				if (n == 1 && bag_id(b, i, j, 0) == 0) {
					empty++;
					continue;
				}
				cr_assert_eq(n, mlperf[j], "C%d: %u values",
					     j + 1, n);
			}
	cr_assert_eq(got, 0);
	/* the classic 3 % of categorical fields empty */
	cr_assert(empty > 100 && empty < 550, "%d empty fields", empty);
	ss_reader_close(&r);
	ss_bags_destroy(&b);
	g.multi_hot[4] = SS_GEN_MAX_HOT + 1;
	f = fopen(path, "w");
	cr_assert_eq(ss_gen_data(f, &g, &teacher), -EINVAL);
	fclose(f);
	cr_assert(strstr(ss_last_error()->what, "C5"));
}
