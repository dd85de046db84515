// SPDX-License-Identifier: BSD-2-Clause
/*
 * quality-k: model quality at K logical nodes, in one process.
 *
 * The paper's question: does quality hold as each node sees less of the
 * data?  This machine cannot run 64 nodes, so this program trains K
 * logical nodes side by side: each with its own replica of the dense part
 * (the MLPs) and its own Adagrad state, and 1/K of the data file (adjacent
 * byte ranges, as ranks read it); one logical embedding table for all of
 * them, as sharded tables are.  Time goes in ticks: in a tick every node
 * takes one step on the rows as they were at the tick's start, then every
 * node's row gradients are applied (K steps in parallel, each seeing the
 * others' previous ones).  Rounds average the dense part with the sync
 * layer's own kernels:
 *
 *   shadow, --gap G     rounds back to back, each lasting G ticks: a round
 *                       snapshots every replica, and G ticks later applies
 *                       w += target - snapshot (the trainers' steps in
 *                       between are kept, as the shadow thread does);
 *                       G rounds to whole ticks, and under 1 (the gaps the
 *                       simulator predicts on HDR) a round completes
 *                       within the tick it starts in
 *   foreground, --sync-every k   every k ticks all replicas become the
 *                       target: trainers that stop for the round
 *
 * The target is the average (S-MA) or S-BMUF's block-momentum step from
 * it.  At the end, held-out NE of some of the replicas (--eval-nodes),
 * the worst of them reported.  --nodes 1 is one node on all the data: the
 * anchor.  perf/quality-scale runs the whole comparison.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/adagrad.h"
#include "shadowsync/shadowsync.h"
#include "sync/sync_internal.h"

static const char prog[] = "quality-k";

enum qk_mode { QK_SHADOW, QK_FOREGROUND };
enum qk_algo { QK_MA, QK_BMUF };

struct qk_opts {
	const char *data, *test;
	int nodes, workers, batch, eval_nodes;
	enum qk_mode mode;
	enum qk_algo algo;
	double gap, eta; /* eta < 0: the runtime's (ss__bmuf_eta) */
	int sync_every;
	struct ss_model_config model;
	enum ss_optimizer optimizer;
	float lr, dense_lr;
	uint64_t seed;
	bool json;
};

/* One logical node: its replica of the dense part, its data, its step. */
struct qk_node {
	float *w, *snap, *acc; /* replica, round snapshot, Adagrad's sums */
	struct ss_optim optim;
	struct ss_model_work *work;
	struct ss_reader *reader;
	struct ss_example *batch;
	uint64_t *ids, *gids;
	const float **rows;
	float *grads;
	int n, n_grads; /* this tick's examples and distinct rows */
	bool done;
	uint64_t examples;
	double loss_sum;
	int rc; /* a read error, with its detail printed */
};

struct qk_job {
	const struct qk_opts *o;
	size_t dense_len, table_len;
	float *tables, *tables_acc; /* the one logical table, Adagrad's sums */
	float *avg, *w_g, *momentum; /* the round's target; S-BMUF's state */
	const float **others;
	struct qk_node *nodes;
	pthread_barrier_t start, end;
	bool stop;
	uint64_t ticks, rounds;
};

static void usage(FILE *out)
{
	fprintf(out,
		"usage: %s --data TRAIN --test TEST [OPTIONS]\n"
		"\n"
		"Train K logical nodes in one process, each with its own replica\n"
		"of the dense part and 1/K of TRAIN, one pass, with one logical\n"
		"embedding table (as sharded), rounds averaging the replicas;\n"
		"print held-out NE on TEST of the worst replica evaluated.\n"
		"\n"
		"  --nodes K          logical nodes (default 8; 1: the anchor)\n"
		"  --mode M           shadow (default) or foreground\n"
		"  --gap G            shadow: ticks a round takes (default 0:\n"
		"                     within the tick; rounded to whole ticks)\n"
		"  --sync-every k     foreground: a round every k ticks (10)\n"
		"  --algo A           ma (default) or bmuf\n"
		"  --eta X            bmuf: block momentum (default, as the runtime:\n"
		"                     1 - 1/min(K, ticks a round spans), 0 under 2)\n"
		"  --optimizer O      adagrad (default) or sgd\n"
		"  --lr X             its rate (default: the optimizer's)\n"
		"  --dense-lr X       the MLPs' rate, the table keeping --lr\n"
		"  --batch B          examples a step (128)\n"
		"  --emb N --bottom L --top L --hash-size R   the model, as train\n"
		"  --seed S           the model's initialization (1)\n"
		"  --workers W        threads stepping the nodes (default: CPUs)\n"
		"  --eval-nodes E     replicas evaluated, spread over the nodes\n"
		"                     (default 4; 0: all)\n"
		"  --json             one JSON object instead of the text\n"
		"  -h, --help         this help\n",
		prog);
}

static int parse(int argc, char **argv, struct qk_opts *o)
{
	enum {
		O_EMB = 256,
		O_BOTTOM,
		O_TOP,
		O_HASH,
		O_DENSE_LR,
		O_EVAL,
		O_ETA
	};
	static const struct option longopts[] = {
		{ "data", required_argument, NULL, 'd' },
		{ "test", required_argument, NULL, 't' },
		{ "nodes", required_argument, NULL, 'n' },
		{ "mode", required_argument, NULL, 'm' },
		{ "gap", required_argument, NULL, 'g' },
		{ "sync-every", required_argument, NULL, 'k' },
		{ "algo", required_argument, NULL, 'a' },
		{ "eta", required_argument, NULL, O_ETA },
		{ "optimizer", required_argument, NULL, 'o' },
		{ "lr", required_argument, NULL, 'l' },
		{ "dense-lr", required_argument, NULL, O_DENSE_LR },
		{ "batch", required_argument, NULL, 'b' },
		{ "emb", required_argument, NULL, O_EMB },
		{ "bottom", required_argument, NULL, O_BOTTOM },
		{ "top", required_argument, NULL, O_TOP },
		{ "hash-size", required_argument, NULL, O_HASH },
		{ "seed", required_argument, NULL, 's' },
		{ "workers", required_argument, NULL, 'w' },
		{ "eval-nodes", required_argument, NULL, O_EVAL },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const modes[] = { "shadow", "foreground", NULL };
	static const char *const algos[] = { "ma", "bmuf", NULL };
	double d;
	long v;
	int c, i, rc = 0;

	memset(o, 0, sizeof(*o));
	o->nodes = 8;
	o->batch = 128;
	o->eval_nodes = 4;
	o->sync_every = 10;
	o->optimizer = SS_OPT_ADAGRAD;
	o->lr = -1;
	o->eta = -1;
	o->seed = 1;
	o->workers = (int)sysconf(_SC_NPROCESSORS_ONLN);
	ss_model_config_init(&o->model);
	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			o->data = optarg;
			break;
		case 't':
			o->test = optarg;
			break;
		case 'n':
			rc = ss_parse_long("--nodes", optarg, 1, 4096, &v);
			o->nodes = (int)v;
			break;
		case 'm':
			rc = ss_parse_choice("--mode", optarg, modes, &i);
			o->mode = (enum qk_mode)i;
			break;
		case 'g':
			rc = ss_parse_double("--gap", optarg, 0, 1e6, &o->gap);
			break;
		case 'k':
			rc = ss_parse_long("--sync-every", optarg, 1, 1000000,
					   &v);
			o->sync_every = (int)v;
			break;
		case 'a':
			rc = ss_parse_choice("--algo", optarg, algos, &i);
			o->algo = (enum qk_algo)i;
			break;
		case O_ETA:
			rc = ss_parse_double("--eta", optarg, 0, 0.999999,
					     &o->eta);
			break;
		case 'o':
			rc = ss_optimizer_parse("--optimizer", optarg,
						&o->optimizer);
			break;
		case 'l':
			rc = ss_parse_double("--lr", optarg, 1e-9, 100, &d);
			o->lr = (float)d;
			break;
		case O_DENSE_LR:
			rc = ss_parse_double("--dense-lr", optarg, 1e-9, 100,
					     &d);
			o->dense_lr = (float)d;
			break;
		case 'b':
			rc = ss_parse_long("--batch", optarg, 1, 65536, &v);
			o->batch = (int)v;
			break;
		case O_EMB:
			rc = ss_parse_long("--emb", optarg, 1, 1024, &v);
			o->model.emb_dim = (int)v;
			break;
		case O_BOTTOM:
			rc = ss_model_layers_parse("--bottom", optarg,
						   o->model.bottom,
						   &o->model.n_bottom);
			break;
		case O_TOP:
			rc = ss_model_layers_parse(
				"--top", optarg, o->model.top, &o->model.n_top);
			break;
		case O_HASH:
			rc = ss_parse_long("--hash-size", optarg, 1, 1L << 30,
					   &v);
			o->model.hash_size = (uint32_t)v;
			break;
		case 's':
			rc = ss_parse_long("--seed", optarg, 0, LONG_MAX, &v);
			o->seed = (uint64_t)v;
			break;
		case 'w':
			rc = ss_parse_long("--workers", optarg, 1, 256, &v);
			o->workers = (int)v;
			break;
		case O_EVAL:
			rc = ss_parse_long("--eval-nodes", optarg, 0, 4096, &v);
			o->eval_nodes = (int)v;
			break;
		case 'j':
			o->json = true;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			return ss_error_set(SS_EUSAGE, "unknown option",
					    "quality-k --help lists them", "%s",
					    argv[optind - 1]);
		}
		if (rc < 0)
			return rc;
	}
	if (optind < argc)
		return ss_error_set(SS_EUSAGE, "unexpected argument", NULL,
				    "'%s'", argv[optind]);
	if (!o->data || !o->test)
		return ss_error_set(SS_EUSAGE, "both are needed",
				    "gen-data makes them: shadowsync gen-data "
				    "--out F --shape criteo",
				    "--data and --test");
	if (o->lr < 0)
		o->lr = ss_optimizer_default_lr(o->optimizer);
	if (o->workers > o->nodes)
		o->workers = o->nodes;
	return ss_model_check(&o->model);
}

static float *floats(size_t n, const char *what)
{
	float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);

	if (!p) {
		fprintf(stderr, "%s: out of memory for %s (%zu floats)\n", prog,
			what, n);
		exit(1);
	}
	memset(p, 0, n * sizeof(float));
	return p;
}

static void *bytes(size_t n, const char *what)
{
	void *p = calloc(1, n);

	if (!p) {
		fprintf(stderr, "%s: out of memory for %s\n", prog, what);
		exit(1);
	}
	return p;
}

/* Node @k's replica, its data range, its buffers. */
static int node_open(struct qk_job *j, int k, const float *init, uint64_t size)
{
	const struct qk_opts *o = j->o;
	struct qk_node *nd = &j->nodes[k];
	size_t per = (size_t)o->batch * SS_SPARSE;
	uint64_t begin = size * (uint64_t)k / (uint64_t)o->nodes,
		 end = size * (uint64_t)(k + 1) / (uint64_t)o->nodes;
	int rc;

	nd->w = floats(j->dense_len, "a replica");
	memcpy(nd->w, init, j->dense_len * sizeof(float));
	if (o->mode == QK_SHADOW && lround(o->gap) > 0) { /* round 1 */
		nd->snap = floats(j->dense_len, "a snapshot");
		memcpy(nd->snap, init, j->dense_len * sizeof(float));
	}
	nd->optim.kind = o->optimizer;
	nd->optim.lr = o->dense_lr > 0 ? o->dense_lr : o->lr;
	nd->optim.eps = 1e-8f;
	if (o->optimizer == SS_OPT_ADAGRAD)
		nd->acc = nd->optim.acc = floats(j->dense_len, "Adagrad");
	nd->batch = bytes((size_t)o->batch * sizeof(*nd->batch), "a batch");
	nd->ids = bytes(per * sizeof(*nd->ids), "row ids");
	nd->gids = bytes(per * sizeof(*nd->gids), "row ids");
	nd->rows = bytes(per * sizeof(*nd->rows), "rows");
	nd->grads = floats(per * (size_t)o->model.emb_dim, "row gradients");
	rc = ss_model_work_create(&nd->work, &o->model, o->batch);
	if (rc == 0)
		rc = ss_reader_open(&nd->reader, o->data, begin,
				    k == o->nodes - 1 ? 0 : end,
				    SS_BAD_LINES_FAIL);
	return rc;
}

static void node_close(struct qk_node *nd)
{
	ss_reader_close(&nd->reader);
	ss_model_work_destroy(&nd->work);
	free(nd->w);
	free(nd->snap);
	free(nd->acc);
	free(nd->batch);
	free(nd->ids);
	free(nd->gids);
	free(nd->rows);
	free(nd->grads);
}

/* The rows of @n examples' ids in @nd->ids: pointers into the table. */
static void qk_rows(const struct qk_job *j, struct qk_node *nd, int n)
{
	size_t emb = (size_t)j->o->model.emb_dim;

	for (size_t i = 0; i < (size_t)n * SS_SPARSE; i++)
		nd->rows[i] = j->tables + nd->ids[i] * emb;
}

/* One step of node @nd on its next batch, the table as it is. */
static void node_step(struct qk_job *j, struct qk_node *nd)
{
	const struct qk_opts *o = j->o;
	int n = 0, rc = 1;

	nd->n = 0;
	if (nd->done)
		return;
	while (n < o->batch &&
	       (rc = ss_reader_next(nd->reader, &nd->batch[n])) == 1)
		n++;
	if (rc < 0) {
		ss_error_print(stderr, prog, rc);
		nd->rc = rc;
	}
	if (n == 0) {
		nd->done = true;
		return;
	}
	ss_model_batch_rows(&o->model, nd->batch, n, nd->ids);
	qk_rows(j, nd, n);
	nd->loss_sum += ss_model_step_rows(&o->model, nd->w, nd->work,
					   nd->batch, n, &nd->optim, nd->rows,
					   nd->gids, nd->grads, &nd->n_grads) *
			n;
	nd->n = n;
	nd->examples += (uint64_t)n;
}

/* The rows' gradients of every node's step, in node order. */
static void apply_rows(struct qk_job *j)
{
	const struct qk_opts *o = j->o;
	size_t emb = (size_t)o->model.emb_dim;

	for (int k = 0; k < o->nodes; k++) {
		const struct qk_node *nd = &j->nodes[k];

		for (int i = 0; i < nd->n_grads && nd->n > 0; i++) {
			size_t off = nd->gids[i] * emb;
			const float *g = nd->grads + (size_t)i * emb;

			if (o->optimizer == SS_OPT_SGD) {
				for (size_t e = 0; e < emb; e++)
					j->tables[off + e] -= o->lr * g[e];
			} else {
				ss__adagrad(j->tables + off,
					    j->tables_acc + off, g, emb, o->lr,
					    1e-8f);
			}
		}
	}
}

/* S-BMUF's block momentum, as the runtime's (src/sync/ma.c): 1 - 1/min(K,
 * the steps a round spans), none when a round spans one step or less. */
static double qk_eta(const struct qk_opts *o)
{
	if (o->eta >= 0)
		return o->eta;
	return ss__bmuf_eta_for(o->nodes, o->mode == QK_FOREGROUND ?
						  o->sync_every :
						  (double)lround(o->gap));
}

/*
 * The round's target into j->avg: the mean of @from (the replicas or their
 * snapshots) over the nodes still training, then S-BMUF's step from it.
 * Returns how many took part.
 */
static int round_target(struct qk_job *j, bool snapshots)
{
	const struct qk_opts *o = j->o;
	const float *own = NULL;
	int m = 0;

	for (int k = 0; k < o->nodes; k++) {
		const struct qk_node *nd = &j->nodes[k];
		const float *src = snapshots ? nd->snap : nd->w;

		if (nd->done)
			continue;
		if (!own)
			own = src;
		else
			j->others[m++] = src;
	}
	if (!own)
		return 0;
	ss__average(j->avg, own, j->others, m, j->dense_len);
	if (o->algo == QK_BMUF)
		ss__bmuf(j->w_g, j->momentum, j->avg, j->dense_len,
			 (float)qk_eta(o), 1.0f, true);
	return m + 1;
}

/* The rounds due at the end of tick j->ticks. */
static void rounds(struct qk_job *j)
{
	const struct qk_opts *o = j->o;
	long gap = lround(o->gap);

	if (o->nodes == 1)
		return;
	if (o->mode == QK_FOREGROUND || gap == 0) {
		long every = o->mode == QK_FOREGROUND ? o->sync_every : 1;

		if (j->ticks % (uint64_t)every || !round_target(j, false))
			return;
		for (int k = 0; k < o->nodes; k++)
			if (!j->nodes[k].done)
				ss__copy(j->nodes[k].w, j->avg, j->dense_len);
		j->rounds++;
		return;
	}
	if (j->ticks % (uint64_t)gap)
		return;
	/* the round in flight lands, and the next one snapshots */
	if (round_target(j, true)) {
		for (int k = 0; k < o->nodes; k++)
			if (!j->nodes[k].done)
				ss__apply(j->nodes[k].w, j->avg,
					  j->nodes[k].snap, j->dense_len);
		j->rounds++;
	}
	for (int k = 0; k < o->nodes; k++)
		if (!j->nodes[k].done)
			ss__copy(j->nodes[k].snap, j->nodes[k].w, j->dense_len);
}

struct qk_worker {
	struct qk_job *job;
	int index;
	pthread_t thread;
};

/* Worker @w steps nodes w, w + W, ... each tick. */
static void worker_tick(struct qk_job *j, int w)
{
	for (int k = w; k < j->o->nodes; k += j->o->workers)
		node_step(j, &j->nodes[k]);
}

static void *worker_main(void *arg)
{
	struct qk_worker *wk = arg;

	for (;;) {
		pthread_barrier_wait(&wk->job->start);
		if (wk->job->stop)
			return NULL;
		worker_tick(wk->job, wk->index);
		pthread_barrier_wait(&wk->job->end);
	}
}

static bool all_done(const struct qk_job *j)
{
	for (int k = 0; k < j->o->nodes; k++)
		if (!j->nodes[k].done)
			return false;
	return true;
}

static int first_error(const struct qk_job *j)
{
	for (int k = 0; k < j->o->nodes; k++)
		if (j->nodes[k].rc < 0)
			return j->nodes[k].rc;
	return 0;
}

/* Ticks until every node has read its share; progress to stderr. */
static int train(struct qk_job *j)
{
	const struct qk_opts *o = j->o;
	struct qk_worker *wk =
		bytes(sizeof(*wk) * (size_t)o->workers, "workers");
	uint64_t t0 = ss_now_ns(), next = t0 + 10000000000ull;
	int rc = 0;

	pthread_barrier_init(&j->start, NULL, (unsigned)o->workers);
	pthread_barrier_init(&j->end, NULL, (unsigned)o->workers);
	for (int w = 1; w < o->workers; w++) {
		wk[w] = (struct qk_worker){ .job = j, .index = w };
		if (pthread_create(&wk[w].thread, NULL, worker_main, &wk[w])) {
			fprintf(stderr, "%s: cannot start a worker thread\n",
				prog);
			exit(1);
		}
	}
	for (;;) {
		pthread_barrier_wait(&j->start);
		worker_tick(j, 0);
		pthread_barrier_wait(&j->end);
		rc = first_error(j);
		if (rc < 0 || all_done(j))
			break;
		apply_rows(j);
		j->ticks++;
		rounds(j);
		if (ss_now_ns() > next) {
			uint64_t ex = 0;

			for (int k = 0; k < o->nodes; k++)
				ex += j->nodes[k].examples;
			fprintf(stderr,
				"%s: %d nodes, tick %" PRIu64 ", %" PRIu64
				" examples, %" PRIu64 " rounds, %.0f s\n",
				prog, o->nodes, j->ticks, ex, j->rounds,
				(double)(ss_now_ns() - t0) / 1e9);
			next += 10000000000ull;
		}
	}
	j->stop = true;
	pthread_barrier_wait(&j->start);
	for (int w = 1; w < o->workers; w++)
		pthread_join(wk[w].thread, NULL);
	pthread_barrier_destroy(&j->start);
	pthread_barrier_destroy(&j->end);
	free(wk);
	return rc;
}

/* Held-out metrics of node @k's replica on @test. */
static int evaluate(struct qk_job *j, int k, const struct ss_example *test,
		    size_t n_test, float *p, float *y, struct ss_metrics *m)
{
	const struct qk_opts *o = j->o;
	struct qk_node *nd = &j->nodes[k];

	for (size_t b = 0; b < n_test; b += (size_t)o->batch) {
		int n = (int)(n_test - b < (size_t)o->batch ? n_test - b :
							      (size_t)o->batch);

		ss_model_batch_rows(&o->model, test + b, n, nd->ids);
		qk_rows(j, nd, n);
		ss_model_predict_rows(&o->model, nd->w, nd->work, test + b, n,
				      nd->rows, p + b);
	}
	for (size_t i = 0; i < n_test; i++)
		y[i] = test[i].label;
	return ss_metrics_compute(p, y, n_test, m);
}

static int read_all(const char *path, struct ss_example **out, size_t *n)
{
	struct ss_reader *r = NULL;
	size_t cap = 4096;
	struct ss_example *ex = bytes(cap * sizeof(*ex), "the test set");
	int rc = ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_FAIL);

	*n = 0;
	while (rc == 0) {
		if (*n == cap) {
			cap *= 2;
			ex = realloc(ex, cap * sizeof(*ex));
			if (!ex) {
				fprintf(stderr, "%s: out of memory for %s\n",
					prog, path);
				exit(1);
			}
		}
		rc = ss_reader_next(r, &ex[*n]);
		if (rc == 1) {
			++*n;
			rc = 0;
		} else if (rc == 0) {
			break;
		}
	}
	ss_reader_close(&r);
	if (rc == 0 && *n == 0)
		rc = ss_error_set(SS_EUSAGE, "no examples in it",
				  "give a held-out file of Criteo lines",
				  "--test %s", path);
	*out = ex;
	return rc;
}

struct qk_report {
	double seconds, ne_worst, ne_mean, cal_worst, auc_worst;
	uint64_t examples;
	double train_loss;
	int worst, evaluated;
};

static int report_eval(struct qk_job *j, struct qk_report *r)
{
	const struct qk_opts *o = j->o;
	struct ss_example *test = NULL;
	size_t n_test = 0;
	int e = o->eval_nodes == 0 || o->eval_nodes > o->nodes ? o->nodes :
								 o->eval_nodes;
	int rc = read_all(o->test, &test, &n_test);
	float *p = NULL, *y = NULL;

	r->ne_worst = -1;
	if (rc < 0)
		goto out;
	p = floats(n_test, "predictions");
	y = floats(n_test, "labels");
	for (int i = 0; i < e; i++) {
		int k = e == 1 ? 0 : (int)((long)i * (o->nodes - 1) / (e - 1));
		struct ss_metrics m;

		rc = evaluate(j, k, test, n_test, p, y, &m);
		if (rc < 0)
			goto out;
		r->ne_mean += m.ne / e;
		if (!(m.ne <= r->ne_worst)) { /* NAN is worst */
			r->ne_worst = m.ne;
			r->cal_worst = m.calibration;
			r->auc_worst = m.auc;
			r->worst = k;
		}
	}
	r->evaluated = e;
out:
	free(test);
	free(p);
	free(y);
	return rc;
}

static void print_report(const struct qk_job *j, const struct qk_report *r)
{
	const struct qk_opts *o = j->o;
	const char *mode = o->mode == QK_SHADOW ? "shadow" : "foreground";
	const char *algo = o->algo == QK_MA ? "ma" : "bmuf";

	if (o->json) {
		printf("{\"nodes\":%d,\"mode\":\"%s\",\"algo\":\"%s\","
		       "\"gap\":%ld,\"sync_every\":%d,\"ticks\":%" PRIu64
		       ",\"rounds\":%" PRIu64 ",\"examples\":%" PRIu64
		       ",\"train_loss\":%.6f,\"ne_worst\":%.6f,"
		       "\"ne_mean\":%.6f,\"calibration_worst\":%.4f,"
		       "\"auc_worst\":%.6f,\"worst_node\":%d,"
		       "\"evaluated\":%d,\"seconds\":%.2f}\n",
		       o->nodes, mode, algo, lround(o->gap), o->sync_every,
		       j->ticks, j->rounds, r->examples, r->train_loss,
		       r->ne_worst, r->ne_mean, r->cal_worst, r->auc_worst,
		       r->worst, r->evaluated, r->seconds);
		return;
	}
	printf("%d nodes, %s %s", o->nodes, mode, algo);
	if (o->mode == QK_SHADOW)
		printf(" (gap %ld ticks)", lround(o->gap));
	else
		printf(" (every %d ticks)", o->sync_every);
	printf(": %" PRIu64 " examples, %" PRIu64 " ticks, %" PRIu64
	       " rounds, %.1f s\n",
	       r->examples, j->ticks, j->rounds, r->seconds);
	printf("held-out NE: worst %.4f (node %d, calibration %.3f, AUC "
	       "%.4f), mean %.4f over %d nodes; training loss %.4f\n",
	       r->ne_worst, r->worst, r->cal_worst, r->auc_worst, r->ne_mean,
	       r->evaluated, r->train_loss);
}

static int run(const struct qk_opts *o)
{
	struct qk_job j = { .o = o };
	struct qk_report r = { 0 };
	struct stat st;
	float *init;
	uint64_t t0;
	int rc = 0;

	if (stat(o->data, &st) < 0)
		return ss_error_set(-errno, NULL, NULL, "--data %s", o->data);
	j.dense_len = ss_model_dense_len(&o->model);
	j.table_len = ss_model_len(&o->model) - j.dense_len;
	init = floats(ss_model_len(&o->model), "the model");
	ss_model_init(&o->model, init, o->seed);
	j.tables = init + j.dense_len; /* the table stays where it was made */
	if (o->optimizer == SS_OPT_ADAGRAD)
		j.tables_acc = floats(j.table_len, "the table's Adagrad");
	j.avg = floats(j.dense_len, "the average");
	j.w_g = floats(j.dense_len, "S-BMUF's model");
	j.momentum = floats(j.dense_len, "S-BMUF's momentum");
	memcpy(j.w_g, init, j.dense_len * sizeof(float));
	j.others = bytes(sizeof(*j.others) * (size_t)o->nodes, "nodes");
	j.nodes = bytes(sizeof(*j.nodes) * (size_t)o->nodes, "nodes");
	for (int k = 0; k < o->nodes && rc == 0; k++)
		rc = node_open(&j, k, init, (uint64_t)st.st_size);
	t0 = ss_now_ns();
	if (rc == 0)
		rc = train(&j);
	r.seconds = (double)(ss_now_ns() - t0) / 1e9;
	if (rc == 0) {
		double loss = 0;

		for (int k = 0; k < o->nodes; k++) {
			r.examples += j.nodes[k].examples;
			loss += j.nodes[k].loss_sum;
		}
		r.train_loss = r.examples ? loss / (double)r.examples : 0;
		if (r.examples == 0)
			rc = ss_error_set(SS_EUSAGE, "no examples in it",
					  "give a file of Criteo lines",
					  "--data %s", o->data);
	}
	if (rc == 0)
		rc = report_eval(&j, &r);
	if (rc == 0)
		print_report(&j, &r);
	for (int k = 0; k < o->nodes; k++)
		node_close(&j.nodes[k]);
	free(j.nodes);
	free(j.others);
	free(j.avg);
	free(j.w_g);
	free(j.momentum);
	free(j.tables_acc);
	free(init);
	return rc;
}

int main(int argc, char **argv)
{
	char note[256];
	struct qk_opts o;
	int rc = parse(argc, argv, &o);

	if (rc == 1)
		return 0; /* --help */
	if (rc == 0)
		rc = ss_blas_check();
	if (rc < 0) {
		ss_error_print(stderr, prog, rc);
		return 2;
	}
	ss_blas_setup(note, sizeof(note));
	rc = run(&o);
	if (rc < 0) {
		ss_error_print(stderr, prog, rc);
		return 1;
	}
	return 0;
}
