// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync train: the held-out metrics and the summary.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "train_cmd.h"

/* Predictions of @got examples, the rows of their @bags' values from
 * the shards. */
static int ss_predict_sharded(const struct ss_model_config *m,
			      const float *params, struct ss_table *table,
			      struct ss_model_work *w,
			      const struct ss_example *batch,
			      const struct ss_bags *bags, int got, float *p)
{
	size_t n = bags->start[(size_t)got * SS_SPARSE];
	uint64_t *ids = malloc(n * sizeof(*ids));
	const float **rows = malloc(n * sizeof(*rows));
	int rc = ids && rows ? 0 :
			       ss_error_set(-ENOMEM, NULL, NULL,
					    "looking up %zu rows", n);

	if (rc == 0)
		ss_model_batch_rows_bags(m, batch, bags, got, ids);
	if (rc == 0)
		rc = ss_table_lookup(table, 0, 0, ids, (int)n);
	if (rc == 0)
		rc = ss_table_wait(table, 0, 0, rows);
	if (rc == 0)
		rc = ss_model_predict_rows_bags(m, params, w, batch, bags, got,
						rows, p);
	free(ids);
	free(rows);
	return rc;
}

/*
 * Fewer than this many rounds while training, over at least
 * SS_FEW_ROUNDS_WORK iterations: with 2 ranks, a shadow thread short of a
 * core ran 1 or 2 rounds in 625 iterations, and the average of the two
 * replicas was worse than either (NE 0.96 against 0.80 and 0.84); healthy,
 * the same job ran 12 to 60.
 */
#define SS_FEW_ROUNDS 10
#define SS_FEW_ROUNDS_WORK 100

void ss_train_warn_few_rounds(const struct ss_train_cmd *c,
			      struct ss_sync *sync)
{
	struct ss_sync_stats st;
	char fix[192];

	if (c->fabric.world < 2 || c->foreground)
		return;
	ss_sync_get_stats(sync, &st);
	/* alone (its peers failed or finished): no round was there to run,
	 * and the sync layer said why */
	if (st.rounds >= SS_FEW_ROUNDS || st.iterations < SS_FEW_ROUNDS_WORK ||
	    st.members < 2)
		return;
	/* a gap bound under a cap holds the trainers to the cap */
	if (c->sync.max_rounds_per_s > 0)
		snprintf(fix, sizeof(fix), "raise --max-rounds-per-s (%g)",
			 c->sync.max_rounds_per_s);
	else
		snprintf(fix, sizeof(fix),
			 "give the shadow thread a core of its own (fewer "
			 "--threads, no other work on its core), or make the "
			 "trainers wait for rounds: --max-sync-gap N (about "
			 "%" PRIu64 " for 50 rounds)",
			 st.iterations / 50 ? st.iterations / 50 : 1);
	ss_log_warn("sync: rank %d: only %" PRIu64 " round%s while its "
		    "trainers ran %" PRIu64 " iterations: the replicas "
		    "trained mostly apart, and their average can be worse "
		    "than either; %s",
		    c->fabric.rank, st.rounds, st.rounds == 1 ? "" : "s",
		    st.iterations, fix);
}

int ss_predict_each(const struct ss_model_config *m, const float *params,
		    struct ss_table *table, const char *path,
		    enum ss_bad_lines bad,
		    int (*each)(void *ctx, const struct ss_example *ex,
				const float *p, int n),
		    void *ctx, uint64_t *skipped)
{
	struct ss_model_work *w = NULL;
	struct ss_reader *r = NULL;
	struct ss_bags *bags = NULL; /* multi-hot data too */
	struct ss_example batch[256];
	float p[256];
	int rc, got;

	rc = ss_model_work_create(&w, m, 256);
	if (rc == 0)
		rc = ss_bags_create(&bags, 256);
	if (rc == 0)
		rc = ss_reader_open(&r, path, 0, 0, bad);
	while (rc == 0) {
		got = ss_reader_fill_bags(r, batch, bags, 256);
		if (got <= 0) {
			rc = got;
			break;
		}
		if (table)
			rc = ss_predict_sharded(m, params, table, w, batch,
						bags, got, p);
		else
			rc = ss_model_predict_bags(m, params, w, batch, bags,
						   got, p);
		if (rc == 0)
			rc = each(ctx, batch, p, got);
	}
	*skipped = r ? ss_reader_skipped(r) : 0;
	ss_reader_close(&r);
	ss_bags_destroy(&bags);
	ss_model_work_destroy(&w);
	return rc;
}

/* The predictions and labels of an evaluation, kept for its metrics. */
struct ss_eval_pairs {
	float *p, *y;
	size_t n, cap;
};

static int ss_eval_keep(void *ctx, const struct ss_example *ex, const float *p,
			int got)
{
	struct ss_eval_pairs *e = ctx;

	if (e->n + (size_t)got > e->cap) {
		size_t cap = e->cap ? 2 * e->cap : 65536;
		float *np = realloc(e->p, cap * sizeof(float)),
		      *ny = np ? realloc(e->y, cap * sizeof(float)) : NULL;

		if (np)
			e->p = np;
		if (!np || !ny)
			return ss_error_set(-ENOMEM, NULL, NULL, "evaluating");
		e->y = ny;
		e->cap = cap;
	}
	for (int i = 0; i < got; i++) {
		e->p[e->n] = p[i];
		e->y[e->n++] = ex[i].label;
	}
	return 0;
}

int ss_evaluate(const struct ss_model_config *m, const float *params,
		struct ss_table *table, const char *path, enum ss_bad_lines bad,
		struct ss_metrics *out, uint64_t *skipped)
{
	struct ss_eval_pairs e = { 0 };
	int rc = ss_predict_each(m, params, table, path, bad, ss_eval_keep, &e,
				 skipped);

	if (rc == 0 && e.n == 0)
		rc = ss_error_set(SS_EPARSE, "no examples", NULL,
				  "test file '%s'", path);
	if (rc == 0)
		rc = ss_metrics_compute(e.p, e.y, e.n, out);
	if (rc == 0 && *skipped)
		ss_log_warn("held-out: %" PRIu64 " malformed lines of '%s' "
			    "skipped: the figures are of the other %" PRIu64,
			    *skipped, path, out->count);
	if (rc == 0 && out->not_numbers)
		ss_log_warn("held-out: %" PRIu64 " of %" PRIu64
			    " predictions are not numbers: the model diverged "
			    "(a lower --lr, or --optimizer adagrad, trains "
			    "stably)",
			    out->not_numbers, out->count);
	free(e.p);
	free(e.y);
	return rc;
}

void ss_train_report(const struct ss_train_cmd *c, struct ss_sync *sync,
		     const struct ss_train_result *res,
		     const struct ss_metrics *test, size_t len)
{
	if (c->json) {
		printf("{\"rank\":%d,\"world\":%d,\"examples\":%" PRIu64
		       ",\"skipped\":%" PRIu64
		       ",\"seconds\":%.3f,\"examples_per_s\":%.1f,"
		       "\"train_log_loss\":%.6f,\"sync\":\"%s\",\"mode\":\"%s\","
		       "\"optimizer\":\"%s\",\"lr\":%g,\"params\":%zu,\"dense_params\":%zu,"
		       "\"blas\":\"%s\",\"data_split\":\"%s\",\"chunks\":%" PRIu64,
		       c->fabric.rank, c->fabric.world, res->examples,
		       res->skipped, res->seconds,
		       (double)res->examples / res->seconds,
		       res->examples ? res->loss_sum / (double)res->examples :
				       0,
		       ss_sync_algo_name(c->sync.algo),
		       c->foreground ? "foreground" : "shadow",
		       ss_optimizer_name(c->train.optimizer),
		       (double)c->train.lr, len, ss_model_dense_len(&c->model),
		       c->blas, c->split ? "static" : "dynamic", res->ranges);
		/* what BLIS was told, for another run to be given the same */
		printf(",\"blis_arch_type\":");
		if (getenv("BLIS_ARCH_TYPE"))
			ss_json_string(stdout, getenv("BLIS_ARCH_TYPE"));
		else
			printf("null");
		printf(",\"tables\":\"%s\"", ss_tables_names[c->tables]);
		printf(",\"interaction\":\"%s\"",
		       ss_model_interaction_name(c->model.interaction));
		if (c->model.interaction == SS_INTERACTION_DCN)
			printf(",\"cross_layers\":%d,\"cross_rank\":%d",
			       c->model.cross_layers, c->model.cross_rank);
		if (c->table)
			ss_table_report_json(c, res);
		if (c->load)
			printf(",\"resumed_examples\":%" PRIu64, c->resumed);
		if (c->test && test) {
			printf(",\"test_ne\":");
			ss_json_double(stdout, "%.6f", test->ne);
			printf(",\"test_auc\":");
			ss_json_double(stdout, "%.6f", test->auc);
			printf(",\"test_calibration\":");
			ss_json_double(stdout, "%.6f", test->calibration);
			printf(",\"test_examples\":%" PRIu64
			       ",\"test_skipped\":%" PRIu64,
			       test->count, c->test_skipped);
		}
		if (sync) {
			struct ss_sync_stats s;
			uint64_t waits;
			double waited;

			ss_sync_get_stats(sync, &s);
			ss_sync_gap_waits(sync, &waits, &waited);
			printf(",\"rounds\":%" PRIu64
			       ",\"rounds_per_s\":%.2f,\"sync_gap\":%.2f,\"peers_left_out\":%" PRIu64
			       ",\"rounds_partial\":%" PRIu64
			       ",\"messages_late\":%" PRIu64
			       ",\"round_timeout_ms\":%u,\"synced_floats\":%zu"
			       ",\"gap_waits\":%" PRIu64 ",\"gap_wait_s\":%.3f",
			       s.rounds, s.rounds_per_s, s.sync_gap,
			       s.peers_left_out, s.rounds_partial,
			       s.messages_late, s.round_timeout_ms,
			       ss_sync_synced_len(sync), waits, waited);
			printf(",\"left_out_by_peer\":[");
			for (int p = 0; p < c->fabric.world; p++)
				printf("%s%" PRIu64, p ? "," : "",
				       ss_sync_peer_left_out(sync, p));
			printf("]");
		}
		printf("}\n");
	} else {
		printf("rank %d of %d: %" PRIu64
		       " examples in %.1f s (%.0f/s), training log loss %.4f\n",
		       c->fabric.rank, c->fabric.world, res->examples,
		       res->seconds, (double)res->examples / res->seconds,
		       res->examples ? res->loss_sum / (double)res->examples :
				       0);
		if (c->load)
			printf("resumed from a checkpoint that had seen %" PRIu64
			       " examples\n",
			       c->resumed);
		if (res->skipped)
			printf("skipped %" PRIu64 " malformed lines\n",
			       res->skipped);
		if (c->split == 0)
			printf("trained %" PRIu64 " chunks of the data\n",
			       res->ranges);
		if (c->test && test)
			printf("held-out: NE %.4f, AUC %.4f, calibration %.3f "
			       "over %" PRIu64 " examples%s\n",
			       test->ne, test->auc, test->calibration,
			       test->count,
			       c->test_skipped ? " (malformed lines skipped)" :
						 "");
		if (c->table)
			ss_table_report_text(c, res);
		if (sync)
			ss_sync_print_stats(sync, stdout);
	}
}
