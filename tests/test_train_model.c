// SPDX-License-Identifier: BSD-2-Clause
/*
 * The CTR model: gradients against finite differences, Adagrad against its
 * closed form, and it learns.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "models.h"
#include "shadowsync/train.h"

/*
 * A model @c seeded with @seed in *@params, and *@after: the same after one
 * SGD step with lr 1 over @n examples, which moves every parameter by
 * minus its gradient.
 */
static void one_step(const struct ss_model_config *c, uint64_t seed,
		     struct ss_example *ex, int n, struct ss_model_work **w,
		     float **params, float **after)
{
	size_t len = ss_model_len(c);

	*params = malloc(len * sizeof(float));
	*after = malloc(len * sizeof(float));
	cr_assert(*params && *after);
	ss_model_init(c, *params, seed);
	fixed_examples(ex, n);
	cr_assert_eq(ss_model_work_create(w, c, n), 0);
	memcpy(*after, *params, len * sizeof(float));
	ss_model_sgd_step(c, *after, *w, ex, n, 1.0f);
}

Test(model, config_checks_and_sizes)
{
	struct ss_model_config c;
	int sizes[10], n;

	ss_model_config_init(&c);
	cr_assert_eq(ss_model_check(&c), 0);
	cr_assert_eq(ss_model_top_input(&c), 16 + 27 * 26 / 2);
	cr_assert_eq(ss_model_layers_parse("--bottom", "13-64-16", sizes, &n),
		     0);
	cr_assert_eq(n, 3);
	cr_assert_eq(sizes[1], 64);
	cr_assert_eq(ss_model_layers_parse("--top", "512-x-1", sizes, &n),
		     SS_EUSAGE);
	cr_assert_eq(ss_model_layers_parse("--bottom", "13--8---4-", sizes, &n),
		     SS_EUSAGE);
	cr_assert_str_eq(ss_last_error()->why, "an empty size");
	cr_assert_eq(ss_model_layers_parse("--bottom", "-13-16", sizes, &n),
		     SS_EUSAGE);
	cr_assert_eq(ss_model_layers_parse("--bottom", "13-010-16", sizes, &n),
		     0);
	cr_assert_eq(sizes[1], 10, "decimal, not octal");
	c.bottom[c.n_bottom - 1] = 8;
	cr_assert_eq(ss_model_check(&c), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->hint, "--emb-dim"));
	tiny_model(&c);
	cr_assert_eq(ss_model_dense_len(&c),
		     (size_t)(13 * 3 + 3 + 3 * 2 + 2 + 353 * 4 + 4 + 4 + 1));
	cr_assert_eq(ss_model_len(&c), ss_model_dense_len(&c) + 26 * 3 * 2);
}

/*
 * Tables of several sizes: each table's ids follow the earlier tables'
 * rows, every id of a batch falls in its own table, and the model read
 * through those ids (as sharded tables serve them) predicts what it
 * predicts from its own array.
 */
Test(model, tables_of_several_sizes)
{
	struct ss_model_config c;
	struct ss_model_work *w;
	struct ss_example ex[8];
	uint64_t ids[8 * SS_SPARSE], total = 0;
	const float *rows[8 * SS_SPARSE];
	float p[8], q[8], *params;
	size_t dense;

	tiny_model(&c);
	for (int j = 0; j < SS_SPARSE; j++) {
		c.table_rows[j] = 1 + (uint32_t)(j * 7 % 11);
		total += c.table_rows[j];
	}
	cr_assert_eq(ss_model_check(&c), 0);
	cr_assert_not(ss_model_uniform(&c));
	dense = ss_model_dense_len(&c);
	cr_assert_eq(ss_model_len(&c), dense + total * 2);
	cr_assert_eq(ss_model_table_first(&c, 0), 0);
	cr_assert_eq(ss_model_table_first(&c, 2), 1 + 8);
	cr_assert_eq(ss_model_table_rows(&c, 1), 8);
	params = malloc(ss_model_len(&c) * sizeof(float));
	cr_assert_not_null(params);
	ss_model_init(&c, params, 5);
	fixed_examples(ex, 8);
	ss_model_batch_rows(&c, ex, 8, ids);
	for (int i = 0; i < 8 * SS_SPARSE; i++) {
		int j = i % SS_SPARSE;

		cr_assert(ids[i] >= ss_model_table_first(&c, j) &&
				  ids[i] < ss_model_table_first(&c, j) +
						   c.table_rows[j],
			  "example %d, table %d: id %llu", i / SS_SPARSE, j,
			  (unsigned long long)ids[i]);
		rows[i] = params + dense + ids[i] * 2;
	}
	cr_assert_eq(ss_model_work_create(&w, &c, 8), 0);
	ss_model_predict(&c, params, w, ex, 8, p);
	ss_model_predict_rows(&c, params, w, ex, 8, rows, q);
	cr_assert_arr_eq(p, q, sizeof(p));
	/* all of one size: the same model as one hash_size */
	for (int j = 0; j < SS_SPARSE; j++)
		c.table_rows[j] = c.hash_size;
	cr_assert(ss_model_uniform(&c));
	cr_assert_eq(ss_model_table_first(&c, 3), 3 * c.hash_size);
	ss_model_work_destroy(&w);
	free(params);
}

Test(model, gradients_match_finite_differences)
{
	struct ss_model_config c;
	struct ss_model_work *w;
	struct ss_example ex[4];
	float *params, *after;
	size_t len;
	int bad = 0, checked = 0;
	const float eps = 5e-4f;

	tiny_model(&c);
	len = ss_model_len(&c);
	one_step(&c, 3, ex, 4, &w, &params, &after);
	for (size_t i = 0; i < len; i++) {
		float keep = params[i];
		double up, down, numeric,
			analytic = (double)params[i] - after[i];

		params[i] = keep + eps;
		up = mean_log_loss(&c, params, w, ex, NULL, 4);
		params[i] = keep - eps;
		down = mean_log_loss(&c, params, w, ex, NULL, 4);
		params[i] = keep;
		numeric = (up - down) / (2 * eps);
		checked++;
		if (fabs(numeric - analytic) > 2e-3 + 0.05 * fabs(numeric)) {
			bad++;
			fprintf(stderr, "param %zu: analytic %g, numeric %g\n",
				i, analytic, numeric);
		}
	}
	/* A handful may sit on a ReLU's kink, where the quotient lies. */
	cr_assert_leq(bad, checked / 100, "%d of %d gradients off", bad,
		      checked);
	ss_model_work_destroy(&w);
	free(params);
	free(after);
}

/*
 * Each group of parameters (every layer's weights, its biases, the tables)
 * along a random +-1 direction: the loss's slope there, by central
 * differences, against the gradient the training step applied.  A sum
 * over a group stands well above the float noise that single tiny
 * gradients drown in, so a wrong factor or a lost term anywhere (the
 * interaction's own paths for widths 8 and 16 included) shows.
 */
static void check_groups(int emb_dim)
{
	struct ss_model_config c;
	struct ss_model_work *w;
	struct ss_example ex[8];
	float *params, *after, *moved, *v;
	size_t len, start[2 * 16 + 1], end[2 * 16 + 1];
	int groups = 0, layers, in, out;
	/* the step: smaller drowns small groups in float noise, larger
	 * crosses ReLU kinks; at 1e-3 the largest error was 0.57 of the
	 * bound, and a halved, dropped or misplaced interaction term broke
	 * it at every width but 2 */
	const float t = 1e-3f;

	tiny_model(&c);
	c.emb_dim = emb_dim;
	c.bottom[2] = emb_dim;
	layers = c.n_bottom - 1 + c.n_top;
	len = ss_model_len(&c);
	/* the layout: per layer W then b, then the tables */
	start[0] = 0;
	for (int l = 0; l < layers; l++) {
		in = l < c.n_bottom - 1	 ? c.bottom[l] :
		     l == c.n_bottom - 1 ? ss_model_top_input(&c) :
					   c.top[l - c.n_bottom];
		out = l < c.n_bottom - 1 ? c.bottom[l + 1] :
					   c.top[l - (c.n_bottom - 1)];
		end[groups] = start[groups] + (size_t)in * (size_t)out;
		start[groups + 1] = end[groups];
		groups++;
		end[groups] = start[groups] + (size_t)out;
		start[groups + 1] = end[groups];
		groups++;
	}
	cr_assert_eq(start[groups], ss_model_dense_len(&c));
	end[groups++] = len;
	moved = malloc(len * sizeof(float));
	v = malloc(len * sizeof(float));
	cr_assert(moved && v);
	one_step(&c, 5, ex, 8, &w, &params, &after);
	for (int g = 0; g < groups; g++) {
		double analytic, numeric;

		/* a unit step whatever the group's size: a wide layer's
		 * outputs move as little as a bias's (step_slope) */
		step_slope(&c, params, after, w, ex, NULL, 8, start[g], end[g],
			   t, moved, v, &analytic, &numeric);
		cr_assert(fabs(numeric - analytic) <=
				  2e-5 + 0.03 * fabs(numeric),
			  "emb_dim %d, group %d of %d (parameters %zu-%zu): "
			  "applied %g, numeric %g",
			  emb_dim, g, groups, start[g], end[g], analytic,
			  numeric);
	}
	ss_model_work_destroy(&w);
	free(params);
	free(after);
	free(moved);
	free(v);
}

Test(model, every_group_of_gradients_at_several_widths)
{
	static const int widths[] = { 2, 4, 8, 16, 17 };

	for (size_t i = 0; i < sizeof(widths) / sizeof(widths[0]); i++)
		check_groups(widths[i]);
}

Test(model, adagrad_step_matches_its_closed_form)
{
	struct ss_model_config c;
	struct ss_model_work *w;
	struct ss_example ex[4];
	float *params, *sgd, *ada, *acc;
	struct ss_optim o = { .kind = SS_OPT_ADAGRAD,
			      .lr = 0.05f,
			      .eps = 1e-3f };
	size_t len;
	int moved = 0;

	tiny_model(&c);
	len = ss_model_len(&c);
	params = malloc(len * sizeof(float));
	sgd = malloc(len * sizeof(float));
	ada = malloc(len * sizeof(float));
	acc = malloc(len * sizeof(float));
	ss_model_init(&c, params, 5);
	fixed_examples(ex,
		       4); /* 3 rows a table: rows repeat within the batch */
	cr_assert_eq(ss_model_work_create(&w, &c, 4), 0);
	/* The gradient g: what one SGD step with lr 1 subtracts. */
	memcpy(sgd, params, len * sizeof(float));
	ss_model_sgd_step(&c, sgd, w, ex, 4, 1.0f);
	/* Accumulators as after earlier steps: not all zero. */
	for (size_t i = 0; i < len; i++)
		acc[i] = (float)(i % 7) * 0.01f;
	memcpy(ada, params, len * sizeof(float));
	o.acc = acc;
	ss_model_step(&c, ada, w, ex, 4, &o);
	for (size_t i = 0; i < len; i++) {
		double g = (double)params[i] - sgd[i], a0 = (i % 7) * 0.01,
		       a = a0 + g * g,
		       want = params[i] - 0.05 * g / (sqrt(a) + 1e-3);

		cr_assert_float_eq(acc[i], a, 1e-6 + 1e-4 * a,
				   "acc %zu: %g, want %g", i, acc[i], a);
		cr_assert_float_eq(ada[i], want, 1e-5,
				   "param %zu: %g, want %g (g %g)", i, ada[i],
				   want, g);
		moved += ada[i] != params[i];
	}
	/* not all: units off for all 4 examples leave their weights still */
	cr_assert_gt(moved, (int)len / 3, "only %d of %zu moved", moved, len);
	ss_model_work_destroy(&w);
	free(params);
	free(sgd);
	free(ada);
	free(acc);
}

/*
 * A short batch (the end of a trainer's share of the data) weighs each of
 * its examples as a full batch does: 1 example through a work made for 4
 * at lr 1 moves the parameters as that example alone at lr 1/4.  Before,
 * it took the full step of a batch of 4 from its one label, and such
 * steps at the end of every trainer's share wrecked trained models.
 */
Test(model, a_short_batch_takes_a_short_step)
{
	struct ss_model_config c;
	struct ss_model_work *w4, *w1;
	struct ss_example ex[1];
	float *params, *short_step, *alone;
	size_t len;
	int moved = 0;

	tiny_model(&c);
	len = ss_model_len(&c);
	params = malloc(len * sizeof(float));
	short_step = malloc(len * sizeof(float));
	alone = malloc(len * sizeof(float));
	cr_assert(params && short_step && alone);
	ss_model_init(&c, params, 9);
	fixed_examples(ex, 1);
	cr_assert_eq(ss_model_work_create(&w4, &c, 4), 0);
	cr_assert_eq(ss_model_work_create(&w1, &c, 1), 0);
	memcpy(short_step, params, len * sizeof(float));
	memcpy(alone, params, len * sizeof(float));
	ss_model_sgd_step(&c, short_step, w4, ex, 1, 1.0f);
	ss_model_sgd_step(&c, alone, w1, ex, 1, 0.25f);
	for (size_t i = 0; i < len; i++) {
		cr_assert_float_eq(short_step[i], alone[i], 1e-6,
				   "param %zu: %g, want %g", i, short_step[i],
				   alone[i]);
		moved += short_step[i] != params[i];
	}
	cr_assert_gt(moved, 10, "only %d of %zu moved", moved, len);
	ss_model_work_destroy(&w4);
	ss_model_work_destroy(&w1);
	free(params);
	free(short_step);
	free(alone);
}

Test(model, learns_better_than_the_constant_predictor, .timeout = 120)
{
	struct ss_model_config c;
	struct ss_gen_options g;
	struct ss_metrics teacher, m;
	struct ss_model_work *w;
	struct ss_reader *r;
	struct ss_example *ex = malloc(30000 * sizeof(*ex));
	char path[] = "/tmp/ss-model-XXXXXX";
	float *params, *p = malloc(5000 * sizeof(float)), y[5000];
	FILE *f;
	int n = 0, fd = mkstemp(path);

	cr_assert_geq(fd, 0);
	f = fdopen(fd, "w");
	ss_gen_options_init(&g);
	g.examples = 30000;
	g.cardinality = 1000;
	cr_assert_eq(ss_gen_data(f, &g, &teacher), 0);
	fclose(f);
	cr_assert_eq(ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_FAIL), 0);
	while (n < 30000 && ss_reader_next(r, &ex[n]) == 1)
		n++;
	ss_reader_close(&r);
	unlink(path);
	cr_assert_eq(n, 30000);

	ss_model_config_init(&c);
	c.emb_dim = 8;
	c.n_bottom = 3;
	c.bottom[1] = 32;
	c.bottom[2] = 8;
	c.n_top = 2;
	c.top[0] = 64;
	c.top[1] = 1;
	c.hash_size = 20000;
	cr_assert_eq(ss_model_check(&c), 0);
	params = malloc(ss_model_len(&c) * sizeof(float));
	ss_model_init(&c, params, 1);
	cr_assert_eq(ss_model_work_create(&w, &c, 64), 0);
	for (int epoch = 0; epoch < 2; epoch++)
		for (int i = 0; i + 64 <= 25000; i += 64)
			ss_model_sgd_step(&c, params, w, ex + i, 64, 0.1f);
	ss_model_predict(&c, params, w, ex + 25000, 5000, p);
	for (int i = 0; i < 5000; i++)
		y[i] = ex[25000 + i].label;
	cr_assert_eq(ss_metrics_compute(p, y, 5000, &m), 0);
	fprintf(stderr, "held-out NE %.4f (teacher floor %.4f), AUC %.4f\n",
		m.ne, teacher.ne, m.auc);
	cr_assert_lt(m.ne, 0.95, "NE %f: no better than a constant", m.ne);
	cr_assert_gt(m.auc, 0.7, "AUC %f", m.auc);
	ss_model_work_destroy(&w);
	free(params);
	free(p);
	free(ex);
}

Test(trainers, hogwild_threads_read_every_example_once, .timeout = 120)
{
	char path[] = "/tmp/ss-trainers-XXXXXX";
	struct ss_model_config c;
	struct ss_train_options o;
	struct ss_train_result res;
	float *params;

	cr_assert_eq(gen_file(path, 10007, 1000), 0);
	small_model(&c, 16, 5000);
	params = malloc(ss_model_len(&c) * sizeof(float));
	ss_model_init(&c, params, 2);
	ss_train_options_init(&o);
	o.threads = 2;
	o.batch = 50;
	o.data = path;
	cr_assert_eq(ss_train(&c, params, &o, &res), 0, "%s: %s",
		     ss_last_error()->what, ss_last_error()->why);
	cr_assert_eq(res.examples, 10007);
	cr_assert_lt(res.loss_sum / (double)res.examples, 0.6,
		     "training log loss %f", res.loss_sum / res.examples);
	/* Two ranks' halves of the bytes read it all too. */
	o.threads = 3;
	o.end = 400000;
	cr_assert_eq(ss_train(&c, params, &o, &res), 0);
	{
		uint64_t first = res.examples;

		o.begin = 400000;
		o.end = 0;
		cr_assert_eq(ss_train(&c, params, &o, &res), 0);
		cr_assert_eq(first + res.examples, 10007);
	}
	unlink(path);
	free(params);
}

/*
 * Adagrad's accumulators are the node's own: beside the replica, never in
 * it.  The replica keeps its size, the floats after it are untouched, and
 * accumulators the caller keeps fill with sums of squares.  Two epochs
 * read every example twice.
 */
Test(trainers, adagrad_state_lives_beside_the_replica, .timeout = 120)
{
	char path[] = "/tmp/ss-trainers-XXXXXX";
	struct ss_model_config c;
	struct ss_train_options o;
	struct ss_train_result res;
	float *params, *acc;
	size_t len;
	int filled = 0;

	cr_assert_eq(gen_file(path, 3001, 1000), 0);
	small_model(&c, 16, 500);
	len = ss_model_len(&c);
	/* the replica, then a guard its training must not write */
	params = malloc((len + 1024) * sizeof(float));
	for (size_t i = len; i < len + 1024; i++)
		params[i] = 12345.0f;
	ss_model_init(&c, params, 2);
	ss_train_options_init(&o);
	o.threads = 2;
	o.batch = 50;
	o.data = path;
	o.optimizer = SS_OPT_ADAGRAD;
	o.lr = 0.02f;
	o.epochs = 2;
	cr_assert_eq(ss_train(&c, params, &o, &res), 0, "%s: %s",
		     ss_last_error()->what, ss_last_error()->why);
	cr_assert_eq(res.examples, 2 * 3001);
	cr_assert_lt(res.loss_sum / (double)res.examples, 0.6,
		     "training log loss %f", res.loss_sum / res.examples);
	for (size_t i = len; i < len + 1024; i++)
		cr_assert_eq(params[i], 12345.0f, "float %zu past the replica",
			     i - len);
	acc = calloc(len, sizeof(float));
	o.adagrad_acc = acc;
	o.epochs = 1;
	cr_assert_eq(ss_train(&c, params, &o, &res), 0);
	for (size_t i = 0; i < len; i++) {
		cr_assert_geq(acc[i], 0.0f, "acc %zu", i);
		filled += acc[i] > 0;
	}
	/* every dense parameter moves; of the tables, the rows used */
	cr_assert_gt(filled, (int)ss_model_dense_len(&c), "%d filled", filled);
	for (size_t i = len; i < len + 1024; i++)
		cr_assert_eq(params[i], 12345.0f);
	unlink(path);
	free(params);
	free(acc);
}

Test(trainers, a_bad_line_stops_training_naming_it)
{
	char path[] = "/tmp/ss-trainers-XXXXXX";
	struct ss_model_config c;
	struct ss_train_options o;
	struct ss_train_result res;
	float *params;
	FILE *f;

	cr_assert_eq(gen_file(path, 300, 1000), 0);
	f = fopen(path, "a");
	fputs("1\tnot-a-number\n", f);
	fclose(f);
	small_model(&c, 16, 5000);
	params = malloc(ss_model_len(&c) * sizeof(float));
	ss_model_init(&c, params, 2);
	ss_train_options_init(&o);
	o.data = path;
	cr_assert_eq(ss_train(&c, params, &o, &res), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->what, "trainer 0"), "%s",
		  ss_last_error()->what);
	cr_assert(strstr(ss_last_error()->what, ":301"), "%s",
		  ss_last_error()->what);
	o.bad_lines = SS_BAD_LINES_SKIP;
	cr_assert_eq(ss_train(&c, params, &o, &res), 0);
	cr_assert_eq(res.examples, 300);
	cr_assert_eq(res.skipped, 1);
	unlink(path);
	free(params);
}

/* The schedules' rates at their landmarks. */
Test(schedule, rates_along_the_schedules)
{
	enum ss_lr_schedule s;

	cr_assert_float_eq(ss_lr_at(SS_LR_CONSTANT, 0.1f, 0, 5, 0.7), 0.1f,
			   1e-7);
	/* warmup: (examples + 1) / warmup of the rate, then all of it */
	cr_assert_float_eq(ss_lr_at(SS_LR_CONSTANT, 0.1f, 100, 0, 0), 0.001f,
			   1e-7);
	cr_assert_float_eq(ss_lr_at(SS_LR_CONSTANT, 0.1f, 100, 49, 0), 0.05f,
			   1e-7);
	cr_assert_float_eq(ss_lr_at(SS_LR_CONSTANT, 0.1f, 100, 100, 0.5), 0.1f,
			   1e-7);
	/* linear and cosine from the rate to 0 as the data is trained */
	cr_assert_float_eq(ss_lr_at(SS_LR_WARMUP_LINEAR, 0.1f, 0, 9, 0.25),
			   0.075f, 1e-7);
	cr_assert_float_eq(ss_lr_at(SS_LR_COSINE, 0.1f, 0, 9, 0), 0.1f, 1e-7);
	cr_assert_float_eq(ss_lr_at(SS_LR_COSINE, 0.1f, 0, 9, 0.5), 0.05f,
			   1e-7);
	cr_assert_float_eq(ss_lr_at(SS_LR_COSINE, 0.1f, 0, 9, 1), 0, 1e-7);
	cr_assert_float_eq(ss_lr_at(SS_LR_WARMUP_LINEAR, 0.1f, 0, 9, 1.5), 0,
			   1e-7, "past the end: 0");
	/* both: the warmup's share of the decayed rate */
	cr_assert_float_eq(ss_lr_at(SS_LR_WARMUP_LINEAR, 0.1f, 10, 4, 0.5),
			   0.025f, 1e-7);
	cr_assert_eq(ss_lr_schedule_parse("--lr-schedule", "cosine", &s), 0);
	cr_assert_eq(s, SS_LR_COSINE);
	cr_assert_str_eq(ss_lr_schedule_name(s), "cosine");
	cr_assert_eq(ss_lr_schedule_parse("--lr-schedule", "step", &s),
		     SS_EUSAGE);
}
