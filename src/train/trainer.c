// SPDX-License-Identifier: BSD-2-Clause
/*
 * Hogwild trainers: T threads, each pinned where the plan puts it, each
 * reading its own part of this rank's byte range of the data (once per
 * epoch), each running SGD or Adagrad steps on the shared replica without
 * any lock (Adagrad's accumulators are shared the same way).  With a
 * sync engine they report their iterations (the sync gap), and in the
 * foreground mode they stop every k steps for a round.
 */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/options.h"
#include "shadowsync/shadowsync.h"

struct ss_trainer {
	const struct ss_model_config *config;
	float *params;
	const struct ss_train_options *opts;
	struct ss_optim optim;
	int index;
	uint64_t begin, end;
	/* results */
	uint64_t examples, skipped, ranges;
	double loss_sum;
	int rc;
	struct ss_error error; /* the detail of rc, from this thread */
};

/* A batch's share of the running totals (relaxed: progress lines only). */
static void ss_progress_add(struct ss_train_progress *p,
			    const struct ss_example *batch, int got,
			    double loss)
{
	uint64_t clicks = 0;

	for (int r = 0; r < got; r++)
		clicks += batch[r].label > 0.5f;
	__atomic_fetch_add(&p->clicks, clicks, __ATOMIC_RELAXED);
	__atomic_fetch_add(&p->loss_micro, (uint64_t)(loss * 1e6 + 0.5),
			   __ATOMIC_RELAXED);
	/* last: a reader that sees these examples sees their loss too */
	__atomic_fetch_add(&p->examples, (uint64_t)got, __ATOMIC_RELEASE);
}

void ss_train_progress_read(struct ss_train_progress *p, uint64_t *examples,
			    double *loss, double *ne)
{
	uint64_t n = __atomic_load_n(&p->examples, __ATOMIC_ACQUIRE);
	double clicks = (double)__atomic_load_n(&p->clicks, __ATOMIC_RELAXED);
	double sum = (double)__atomic_load_n(&p->loss_micro, __ATOMIC_RELAXED);
	double ne_now;

	*examples = n;
	*loss = n ? sum / 1e6 / (double)n : 0;
	ne_now = n ? ss_normalized_entropy(*loss, clicks / (double)n) : NAN;
	*ne = isnan(ne_now) ? 0 : ne_now;
}

/*
 * The trainer's next range: the next chunk of the job's data (dynamic), or
 * its own slice again for the next epoch.  Returns 1 with @reader open on
 * it, 0 when the trainer is done, or an error.
 */
static int ss_trainer_next(struct ss_trainer *t, struct ss_reader **reader,
			   int *epoch)
{
	const struct ss_train_options *o = t->opts;
	uint64_t begin = t->begin, end = t->end;
	int rc;

	if (*reader)
		t->skipped += ss_reader_skipped(*reader);
	ss_reader_close(reader);
	if (o->next_range) {
		rc = o->next_range(o->range_ctx, &begin, &end);
		if (rc <= 0)
			return rc;
		t->ranges++;
	} else if (++*epoch >= o->epochs || begin >= end) {
		/* the last pass, or a slice with no bytes (more trainers than
		 * bytes): to a reader, end 0 would be the end of the file */
		return 0;
	}
	rc = ss_reader_open(reader, o->data, begin, end, o->bad_lines);
	return rc < 0 ? rc : 1;
}

/* A batch trained: totals, progress, the sync gap, foreground rounds. */
static int ss_trainer_account(struct ss_trainer *t,
			      const struct ss_example *batch, int got,
			      double loss, uint64_t *steps)
{
	const struct ss_train_options *o = t->opts;

	t->loss_sum += loss;
	t->examples += (uint64_t)got;
	if (o->progress)
		ss_progress_add(o->progress, batch, got, loss);
	++*steps;
	if (o->sync)
		ss_sync_add_iterations(o->sync, 1);
	if (o->sync && o->sync_every > 0 &&
	    *steps % (uint64_t)o->sync_every == 0)
		return ss_sync_foreground(o->sync);
	return 0;
}

/*
 * The next batch of the trainer's data into @batch: up to a batch from
 * the current range, then the next range.  Returns the examples read
 * (0 once every range is done) or an error.
 */
static int ss_trainer_read(struct ss_trainer *t, struct ss_reader **reader,
			   int *epoch, struct ss_example *batch)
{
	for (;;) {
		int got = 0, more = 1, rc;

		if (!*reader)
			return 0; /* the last range is done */
		while (got < t->opts->batch &&
		       (more = ss_reader_next(*reader, &batch[got])) == 1)
			got++;
		if (more < 0)
			return more;
		if (more == 0) {
			rc = ss_trainer_next(t, reader, epoch);
			if (rc < 0)
				return rc;
		}
		if (got > 0)
			return got;
	}
}

/*
 * With sharded tables: the lookups of the next @prefetch batches are in
 * flight while this one computes, in slots batch % depth of the table
 * client that this trainer is.
 */
static int ss_trainer_run_sharded(struct ss_trainer *t,
				  struct ss_model_work *work,
				  struct ss_reader **reader, int *epoch)
{
	const struct ss_train_options *o = t->opts;
	int depth = 1 + o->prefetch, rc = 0, got[SS_TRAIN_MAX_PREFETCH + 1];
	size_t per = (size_t)o->batch * SS_SPARSE,
	       D = (size_t)t->config->emb_dim;
	struct ss_example *batch =
		malloc((size_t)depth * (size_t)o->batch * sizeof(*batch));
	uint64_t *ids = malloc((size_t)depth * per * sizeof(uint64_t)),
		 *gids = malloc(per * sizeof(uint64_t)), posted = 0, done = 0,
		 steps = 0;
	const float **rows = malloc(per * sizeof(*rows));
	float *grads = malloc(per * D * sizeof(float));
	bool finished = false;

	if (!batch || !ids || !gids || !rows || !grads) {
		rc = ss_error_set(-ENOMEM, NULL, NULL, "trainer %d", t->index);
		goto out;
	}
	for (;;) {
		while (!finished && posted - done < (uint64_t)depth) {
			int k = (int)(posted % (uint64_t)depth), n;

			n = ss_trainer_read(t, reader, epoch,
					    batch + (size_t)k *
							    (size_t)o->batch);
			if (n < 0) {
				rc = n;
				goto out;
			}
			if (n == 0) {
				finished = true;
				break;
			}
			got[k] = n;
			ss_model_batch_rows(
				t->config, batch + (size_t)k * (size_t)o->batch,
				n, ids + (size_t)k * per);
			rc = ss_table_lookup(o->table, t->index, k,
					     ids + (size_t)k * per,
					     n * SS_SPARSE);
			if (rc < 0)
				goto out;
			posted++;
		}
		if (done == posted)
			break;
		int k = (int)(done % (uint64_t)depth), ng = 0;
		const struct ss_example *b =
			batch + (size_t)k * (size_t)o->batch;
		double loss;

		rc = ss_table_wait(o->table, t->index, k, rows);
		if (rc < 0)
			goto out;
		loss = ss_model_step_rows(t->config, t->params, work, b, got[k],
					  &t->optim, rows, gids, grads, &ng) *
		       got[k];
		rc = ss_table_push(o->table, t->index, gids, grads, ng);
		/* no prefetch: the next rows are read with this step in them */
		if (rc == 0 && o->prefetch == 0)
			rc = ss_table_flush(o->table, 30000);
		if (rc == 0)
			rc = ss_trainer_account(t, b, got[k], loss, &steps);
		if (rc < 0)
			goto out;
		done++;
	}
out:
	free(batch);
	free(ids);
	free(gids);
	free(rows);
	free(grads);
	return rc;
}

static int ss_trainer_run(struct ss_trainer *t)
{
	const struct ss_train_options *o = t->opts;
	struct ss_model_work *work = NULL;
	struct ss_reader *reader = NULL;
	struct ss_example *batch;
	uint64_t steps = 0;
	int rc, epoch = -1;

	if (o->topo && o->plan && ss_topo_is_this_machine(o->topo) &&
	    1 + t->index < o->plan->n_slots &&
	    ss_topo_pin_thread(o->topo, &o->plan->slots[1 + t->index]) < 0)
		ss_log_warn("trainer %d: not pinned: %s", t->index,
			    ss_last_error()->why);
	batch = malloc((size_t)o->batch * sizeof(*batch));
	if (!batch)
		return ss_error_set(-ENOMEM, NULL, NULL, "trainer %d",
				    t->index);
	rc = ss_model_work_create(&work, t->config, o->batch);
	if (rc == 0)
		rc = ss_trainer_next(t, &reader, &epoch);
	if (rc == 1 && o->table)
		rc = ss_trainer_run_sharded(t, work, &reader, &epoch);
	while (rc == 1) {
		int got = 0, more = 1;

		while (got < o->batch &&
		       (more = ss_reader_next(reader, &batch[got])) == 1)
			got++;
		if (more < 0) {
			rc = more;
			break;
		}
		if (got > 0) {
			double loss = ss_model_step(t->config, t->params, work,
						    batch, got, &t->optim) *
				      got;

			if ((rc = ss_trainer_account(t, batch, got, loss,
						     &steps)) < 0)
				break;
			rc = 1;
		}
		if (more == 0)
			rc = ss_trainer_next(t, &reader, &epoch);
	}
	if (o->sync && o->sync_every > 0)
		ss_sync_foreground_leave(o->sync);
	if (reader)
		t->skipped += ss_reader_skipped(reader);
	ss_reader_close(&reader);
	ss_model_work_destroy(&work);
	free(batch);
	return rc < 0 ? rc : 0;
}

static void *ss_trainer_main(void *arg)
{
	struct ss_trainer *t = arg;

	t->rc = ss_trainer_run(t);
	if (t->rc < 0)
		t->error = *ss_last_error();
	return NULL;
}

void ss_train_options_init_size(struct ss_train_options *opts, size_t size)
{
	struct ss_train_options o = {
		.size = sizeof(o),
		.threads = 1,
		.batch = 128,
		/* the best of a sweep on Criteo-shaped data (docs/perf.md) */
		.optimizer = SS_OPT_ADAGRAD,
		.lr = ss_optimizer_default_lr(SS_OPT_ADAGRAD),
		.adagrad_eps = 1e-8f,
		.epochs = 1,
		.bad_lines = SS_BAD_LINES_FAIL,
	};

	ss__options_out(opts, size, &o, sizeof(o));
}

static int ss_train_run(const struct ss_model_config *config, float *params,
			const struct ss_train_options *o,
			struct ss_train_result *result);

int ss_train(const struct ss_model_config *config, float *params,
	     const struct ss_train_options *opts,
	     struct ss_train_result *result)
{
	struct ss_train_options copy; /* the trainers point at it */
	int rc;

	memset(result, 0, sizeof(*result));
	ss_train_options_init(&copy);
	rc = ss__options_in(&copy, sizeof(copy), opts, sizeof(copy),
			    "ss_train_options");
	return rc < 0 ? rc : ss_train_run(config, params, &copy, result);
}

static int ss_train_run(const struct ss_model_config *config, float *params,
			const struct ss_train_options *o,
			struct ss_train_result *result)
{
	struct ss_trainer *t;
	pthread_t *threads;
	struct stat st;
	uint64_t begin = o->begin, end = o->end, start = ss_now_ns();
	struct ss_optim optim = { .kind = o->optimizer,
				  .lr = o->lr,
				  .eps = o->adagrad_eps,
				  .acc = o->adagrad_acc };
	size_t acc_bytes =
		(o->table ? ss_model_dense_len(config) : ss_model_len(config)) *
		sizeof(float);
	bool own_acc = false;
	int rc = 0, started = 0;

	if (o->threads < 1 || o->batch < 1 || o->epochs < 1)
		return ss_error_set(SS_EUSAGE, "must be at least 1", NULL,
				    "%d trainer threads, batch %d, %d epochs",
				    o->threads, o->batch, o->epochs);
	if (o->table &&
	    (o->prefetch < 0 || o->prefetch > SS_TRAIN_MAX_PREFETCH))
		return ss_error_set(SS_EUSAGE, "out of range", NULL,
				    "prefetch %d (0 to %d)", o->prefetch,
				    SS_TRAIN_MAX_PREFETCH);
	if (stat(o->data, &st) < 0)
		return ss_error_set(-errno, NULL, "check the --data path",
				    "data file '%s'", o->data);
	if (!end || end > (uint64_t)st.st_size)
		end = (uint64_t)st.st_size;
	if (o->sync && o->sync_every > 0) {
		rc = ss_sync_set_trainers(o->sync, o->threads);
		if (rc < 0)
			return rc;
	}
	/*
	 * Adagrad's accumulators for this call, unless the caller keeps them:
	 * on the replica's node, since the trainers touch them in the same
	 * places as the parameters.  Zeroed either way (mmap or calloc).
	 */
	if (optim.kind == SS_OPT_ADAGRAD && !optim.acc) {
		if (o->topo && o->plan)
			rc = ss_topo_alloc(o->topo, o->plan->replica_numa,
					   acc_bytes, (void **)&optim.acc);
		else if (!(optim.acc = calloc(1, acc_bytes)))
			rc = ss_error_set(-ENOMEM, NULL, NULL,
					  "Adagrad accumulators (%zu bytes)",
					  acc_bytes);
		if (rc < 0)
			return rc;
		own_acc = true;
	}
	t = calloc((size_t)o->threads, sizeof(*t));
	threads = calloc((size_t)o->threads, sizeof(*threads));
	if (!t || !threads) {
		free(t);
		free(threads);
		rc = ss_error_set(-ENOMEM, NULL, NULL, "trainers");
		goto out;
	}
	/* Each trainer its own slice of this rank's bytes. */
	for (int i = 0; i < o->threads; i++) {
		t[i] = (struct ss_trainer){ .config = config,
					    .params = params,
					    .opts = o,
					    .optim = optim,
					    .index = i };
		t[i].begin = begin +
			     (end - begin) * (uint64_t)i / (uint64_t)o->threads;
		t[i].end = begin + (end - begin) * (uint64_t)(i + 1) /
					   (uint64_t)o->threads;
		if (pthread_create(&threads[i], NULL, ss_trainer_main, &t[i])) {
			rc = ss_error_set(-EAGAIN, NULL, NULL,
					  "starting trainer %d", i);
			break;
		}
		started++;
	}
	for (int i = 0; i < started; i++) {
		pthread_join(threads[i], NULL);
		result->examples += t[i].examples;
		result->skipped += t[i].skipped;
		result->ranges += t[i].ranges;
		result->loss_sum += t[i].loss_sum;
		if (t[i].rc < 0 && rc == 0) {
			/* the trainer's own detail, into this thread's */
			rc = ss_error_set(t[i].rc, t[i].error.why,
					  t[i].error.hint, "trainer %d: %s", i,
					  t[i].error.what);
		}
	}
	result->seconds = (double)(ss_now_ns() - start) / 1e9;
	free(t);
	free(threads);
out:
	if (own_acc && o->topo && o->plan)
		ss_topo_free(optim.acc, acc_bytes);
	else if (own_acc)
		free(optim.acc);
	return rc;
}
