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

#include "base/options.h"
#include "shadowsync/shadowsync.h"

/* A trainer's range: its bytes, the next line's, the passes to come. */
struct ss_train_slot {
	uint64_t begin, end, pos;
	uint64_t passes; /* this one included */
	bool open;
};

struct ss_train_control {
	pthread_mutex_t lock;
	int stop; /* set once (a signal handler may), read every batch */
	int threads;
	struct ss_train_slot *slots; /* a trainer's, as of its last batch */
	struct ss_train_range *resume; /* a copy of the options' */
	int n_resume, resume_next; /* taken so far */
	uint64_t examples, bytes; /* this call's, for the rate's schedule */
	/*
	 * Standard input read by several trainers: one reader for them
	 * all, a batch at a time under its lock (a stream has no ranges to
	 * give out), till one comes short.
	 */
	struct ss_reader *stream;
	pthread_mutex_t stream_lock;
	bool stream_done;
};

struct ss_trainer {
	const struct ss_model_config *config;
	float *params;
	const struct ss_train_options *opts;
	struct ss_train_control *ctl;
	struct ss_optim optim;
	int index;
	struct ss_train_slot cur; /* where its reader is */
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

int ss_train_control_create(struct ss_train_control **ctl)
{
	*ctl = calloc(1, sizeof(**ctl));
	if (!*ctl)
		return ss_error_set(-ENOMEM, NULL, NULL, "train control");
	pthread_mutex_init(&(*ctl)->lock, NULL);
	pthread_mutex_init(&(*ctl)->stream_lock, NULL);
	return 0;
}

void ss_train_control_free(struct ss_train_control **ctl)
{
	if (!ctl || !*ctl)
		return;
	pthread_mutex_destroy(&(*ctl)->lock);
	pthread_mutex_destroy(&(*ctl)->stream_lock);
	free((*ctl)->slots);
	free((*ctl)->resume);
	free(*ctl);
	*ctl = NULL;
}

void ss_train_stop(struct ss_train_control *ctl)
{
	__atomic_store_n(&ctl->stop, 1, __ATOMIC_RELAXED);
}

bool ss_train_stopping(const struct ss_train_control *ctl)
{
	return __atomic_load_n(&ctl->stop, __ATOMIC_RELAXED) != 0;
}

static void ss_left_add(struct ss_train_range *out, int max, int *n,
			uint64_t begin, uint64_t end, uint64_t passes)
{
	if (begin >= end || passes == 0)
		return;
	if (*n < max)
		out[*n] = (struct ss_train_range){ begin, end, passes };
	++*n;
}

int ss_train_left(struct ss_train_control *ctl, struct ss_train_range *out,
		  int max)
{
	int n = 0;

	pthread_mutex_lock(&ctl->lock);
	for (int i = 0; i < ctl->threads; i++) {
		const struct ss_train_slot *s = &ctl->slots[i];

		if (!s->open)
			continue;
		if (s->pos == s->begin) { /* a pass not begun */
			ss_left_add(out, max, &n, s->begin, s->end, s->passes);
			continue;
		}
		ss_left_add(out, max, &n, s->pos, s->end, 1);
		ss_left_add(out, max, &n, s->begin, s->end, s->passes - 1);
	}
	for (int i = ctl->resume_next; i < ctl->n_resume; i++)
		ss_left_add(out, max, &n, ctl->resume[i].begin,
			    ctl->resume[i].end, ctl->resume[i].passes);
	pthread_mutex_unlock(&ctl->lock);
	return n;
}

/* What ss_train_left() says of trainer @t: @s, as of its last batch. */
static void ss_trainer_publish(struct ss_trainer *t,
			       const struct ss_train_slot *s)
{
	pthread_mutex_lock(&t->ctl->lock);
	t->ctl->slots[t->index] = *s;
	pthread_mutex_unlock(&t->ctl->lock);
}

/* @t->cur with its reader's position. */
static struct ss_train_slot ss_trainer_where(const struct ss_trainer *t,
					     const struct ss_reader *reader)
{
	struct ss_train_slot s = t->cur;

	if (reader && reader != t->ctl->stream)
		s.pos = ss_reader_tell(reader);
	return s;
}

/*
 * The next batch of @reader into @batch, their values into @bags
 * (multi-hot lines too), the bytes it took into *@bytes: of the
 * shared stream under its lock (the first short batch ends it for every
 * trainer).  Returns ss_reader_fill()'s.
 */
static int ss_trainer_fill(struct ss_trainer *t, struct ss_reader *reader,
			   struct ss_example *batch, struct ss_bags *bags,
			   uint64_t *bytes)
{
	struct ss_train_control *ctl = t->ctl;
	bool shared = reader == ctl->stream;
	uint64_t from;
	int got = 0;

	if (shared)
		pthread_mutex_lock(&ctl->stream_lock);
	from = ss_reader_tell(reader);
	if (!shared || !ctl->stream_done)
		got = ss_reader_fill_bags(reader, batch, bags, t->opts->batch);
	*bytes = ss_reader_tell(reader) - from;
	if (shared) {
		ctl->stream_done |= got < t->opts->batch;
		pthread_mutex_unlock(&ctl->stream_lock);
	}
	return got;
}

/*
 * A range for @t->cur: a resumed one, or the next chunk.  Returns 1, 0
 * when there is none, or an error.
 */
static int ss_trainer_take(struct ss_trainer *t)
{
	const struct ss_train_options *o = t->opts;
	struct ss_train_control *ctl = t->ctl;
	uint64_t begin, end;
	int rc = 0;

	pthread_mutex_lock(&ctl->lock);
	if (ctl->resume_next < ctl->n_resume) {
		const struct ss_train_range *r =
			&ctl->resume[ctl->resume_next++];

		t->cur = (struct ss_train_slot){ r->begin, r->end, r->begin,
						 r->passes, true };
		rc = 1;
	}
	pthread_mutex_unlock(&ctl->lock);
	if (rc || !o->next_range)
		return rc;
	rc = o->next_range(o->range_ctx, &begin, &end);
	if (rc <= 0)
		return rc;
	t->ranges++;
	t->cur = (struct ss_train_slot){ begin, end, begin, 1, true };
	return 1;
}

/*
 * The trainer's next pass, after one of @t->cur (@passed) or at its
 * start: the range read again while it has passes to come, else the next
 * range it takes.  Returns 1 with @reader open on it, 0 when the trainer
 * is done or stopped, or an error.
 */
static int ss_trainer_next(struct ss_trainer *t, struct ss_reader **reader,
			   bool passed)
{
	struct ss_train_slot *cur = &t->cur;
	int rc;

	if (t->ctl->stream) { /* one pass of the shared stream */
		*reader = passed ? NULL : t->ctl->stream;
		return passed ? 0 : 1;
	}
	if (*reader)
		t->skipped += ss_reader_skipped(*reader);
	ss_reader_close(reader);
	if (passed && cur->open && --cur->passes > 0)
		cur->pos = cur->begin;
	else if (passed)
		cur->open = false;
	for (;;) {
		if (ss_train_stopping(t->ctl))
			return 0;
		if (!cur->open && (rc = ss_trainer_take(t)) <= 0)
			return rc;
		/* no bytes (more trainers than bytes): to a reader, end 0
		 * would be the end of the file */
		if (cur->pos < cur->end && cur->passes > 0)
			break;
		cur->open = false;
	}
	rc = t->opts->n_data_files ?
		     ss_reader_open_files(reader, t->opts->data_files,
					  t->opts->n_data_files, cur->pos,
					  cur->end, t->opts->bad_lines) :
		     ss_reader_open(reader, t->opts->data, cur->pos, cur->end,
				    t->opts->bad_lines);
	return rc < 0 ? rc : 1;
}

/*
 * The rate for the trainer's next batch, from the schedule and how far
 * the rank's trainers are (their examples and bytes so far, relaxed).
 */
static void ss_trainer_schedule(struct ss_trainer *t)
{
	const struct ss_train_options *o = t->opts;
	uint64_t ex, bytes;

	if (o->lr_schedule == SS_LR_CONSTANT && !o->warmup)
		return;
	ex = o->done_examples +
	     __atomic_load_n(&t->ctl->examples, __ATOMIC_RELAXED);
	bytes = o->done_bytes +
		__atomic_load_n(&t->ctl->bytes, __ATOMIC_RELAXED);
	t->optim.lr = ss_lr_at(
		o->lr_schedule, o->lr, o->warmup, ex,
		o->schedule_bytes ? (double)bytes / (double)o->schedule_bytes :
				    0);
}

/* What a batch of @got examples and @bytes of data adds to the schedule. */
static void ss_trainer_count(struct ss_trainer *t, int got, uint64_t bytes)
{
	const struct ss_train_options *o = t->opts;
	uint64_t was = __atomic_fetch_add(&t->ctl->examples, (uint64_t)got,
					  __ATOMIC_RELAXED),
		 n = o->every_examples,
		 epoch = o->schedule_bytes / (uint64_t)o->epochs,
		 at = o->done_bytes + __atomic_fetch_add(&t->ctl->bytes, bytes,
							 __ATOMIC_RELAXED);

	/* this batch took the call past the end of an epoch but the last
	 * (one evaluation there, when a multiple of @every_examples falls
	 * in the same batch), or past a multiple of @every_examples */
	if (o->epoch_end && epoch && at / epoch != (at + bytes) / epoch &&
	    (at + bytes) / epoch < (uint64_t)o->epochs)
		o->epoch_end(o->every_ctx, (int)((at + bytes) / epoch),
			     o->done_examples + was + (uint64_t)got);
	else if (o->every && n && was / n != (was + (uint64_t)got) / n)
		o->every(o->every_ctx, (was + (uint64_t)got) / n * n);
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
			   struct ss_example *batch, struct ss_bags *bags)
{
	for (;;) {
		uint64_t bytes;
		int got, rc;

		if (!*reader)
			return 0; /* the last range is done */
		got = ss_trainer_fill(t, *reader, batch, bags, &bytes);
		if (got < 0)
			return got;
		ss_trainer_count(t, got, bytes);
		if (got < t->opts->batch) { /* the range is done */
			rc = ss_trainer_next(t, reader, true);
			if (rc < 0)
				return rc;
		}
		if (got > 0)
			return got;
	}
}

/* Room for @n of each in @ids (one per slot: @slot), @rows, @gids and
 * @grads (@D floats each), as many as the batches' values. */
struct ss_sharded_room {
	uint64_t *ids[SS_TRAIN_MAX_PREFETCH + 1], *gids;
	const float **rows;
	float *grads;
	size_t n_ids[SS_TRAIN_MAX_PREFETCH + 1], n;
};

static int ss_room_ids(struct ss_sharded_room *r, int slot, size_t n)
{
	uint64_t *p;

	if (n <= r->n_ids[slot])
		return 0;
	p = realloc(r->ids[slot], n * sizeof(uint64_t));
	if (!p)
		return -ENOMEM;
	r->ids[slot] = p;
	r->n_ids[slot] = n;
	return 0;
}

static int ss_room_grads(struct ss_sharded_room *r, size_t n, size_t D)
{
	void *rows, *gids, *grads;

	if (n <= r->n)
		return 0;
	rows = realloc(r->rows, n * sizeof(*r->rows));
	if (rows)
		r->rows = rows;
	gids = realloc(r->gids, n * sizeof(uint64_t));
	if (gids)
		r->gids = gids;
	grads = realloc(r->grads, n * D * sizeof(float));
	if (grads)
		r->grads = grads;
	if (!rows || !gids || !grads)
		return -ENOMEM;
	r->n = n;
	return 0;
}

/*
 * With sharded tables: the lookups of the next @prefetch batches are in
 * flight while this one computes, in slots batch % depth of the table
 * client that this trainer is; with none ahead, the next is posted once
 * this step's gradients are pushed (or applied, when exact).  Each batch
 * reads its bags (multi-hot data: every value a row of the lookup).
 */
static int ss_trainer_run_sharded(struct ss_trainer *t,
				  struct ss_model_work *work,
				  struct ss_reader **reader)
{
	const struct ss_train_options *o = t->opts;
	int depth = SS_TRAIN_LOOKUP_DEPTH(o->prefetch), rc = 0,
	    got[SS_TRAIN_MAX_PREFETCH + 1], n_ids[SS_TRAIN_MAX_PREFETCH + 1];
	size_t D = (size_t)t->config->emb_dim;
	struct ss_example *batch =
		malloc((size_t)depth * (size_t)o->batch * sizeof(*batch));
	struct ss_bags *bags[SS_TRAIN_MAX_PREFETCH + 1] = { 0 };
	struct ss_sharded_room room = { 0 };
	uint64_t posted = 0, done = 0, steps = 0;
	/* where the reader was after each batch in flight: published once
	 * the batch is computed */
	struct ss_train_slot where[SS_TRAIN_MAX_PREFETCH + 1];
	bool finished = false;

	rc = batch ? 0 : -ENOMEM;
	for (int k = 0; rc == 0 && k < depth; k++)
		rc = ss_bags_create(&bags[k], o->batch);
	if (rc == 0)
		rc = ss_room_grads(&room, (size_t)o->batch * SS_SPARSE, D);
	if (rc < 0) {
		rc = ss_error_set(-ENOMEM, NULL, NULL, "trainer %d", t->index);
		goto out;
	}
	for (;;) {
		/* stopped: no more batches read, those read computed */
		while (!finished && posted - done < (uint64_t)depth &&
		       !ss_train_stopping(t->ctl)) {
			int k = (int)(posted % (uint64_t)depth), n;

			n = ss_trainer_read(
				t, reader, batch + (size_t)k * (size_t)o->batch,
				bags[k]);
			if (n < 0) {
				rc = n;
				goto out;
			}
			if (n == 0) {
				finished = true;
				break;
			}
			got[k] = n;
			where[k] = ss_trainer_where(t, *reader);
			n_ids[k] = (int)bags[k]->start[(size_t)n * SS_SPARSE];
			if (ss_room_ids(&room, k, (size_t)n_ids[k]) < 0 ||
			    ss_room_grads(&room, (size_t)n_ids[k], D) < 0) {
				rc = ss_error_set(-ENOMEM, NULL, NULL,
						  "trainer %d: %d values",
						  t->index, n_ids[k]);
				goto out;
			}
			ss_model_batch_rows_bags(
				t->config, batch + (size_t)k * (size_t)o->batch,
				bags[k], n, room.ids[k]);
			rc = ss_table_lookup(o->table, t->index, k, room.ids[k],
					     n_ids[k]);
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

		rc = ss_table_wait(o->table, t->index, k, room.rows);
		if (rc < 0)
			goto out;
		ss_trainer_schedule(t);
		loss = ss_model_step_rows_bags(
			t->config, t->params, work, b, bags[k], got[k],
			&t->optim, room.rows, room.gids, room.grads, &ng);
		if (isnan(loss)) { /* no room for the values */
			rc = ss_last_error()->code;
			goto out;
		}
		loss *= got[k];
		rc = ss_table_push(o->table, t->index, room.gids, room.grads,
				   ng);
		/* exact: the next rows are read with this step in them */
		if (rc == 0 && o->prefetch == SS_TRAIN_PREFETCH_EXACT)
			rc = ss_table_flush(o->table, 30000);
		if (rc == 0)
			rc = ss_trainer_account(t, b, got[k], loss, &steps);
		if (rc < 0)
			goto out;
		ss_trainer_publish(t, &where[k]);
		done++;
	}
out:
	free(batch);
	for (int k = 0; k < depth; k++) {
		ss_bags_destroy(&bags[k]);
		free(room.ids[k]);
	}
	free(room.gids);
	free(room.rows);
	free(room.grads);
	return rc;
}

static int ss_trainer_run(struct ss_trainer *t)
{
	const struct ss_train_options *o = t->opts;
	struct ss_model_work *work = NULL;
	struct ss_reader *reader = NULL;
	struct ss_bags *bags = NULL;
	struct ss_example *batch;
	uint64_t steps = 0;
	struct ss_train_slot at;
	int rc;

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
	/* multi-hot data: the sharded trainer keeps its own, a batch's a
	 * slot */
	if (rc == 0 && !o->table)
		rc = ss_bags_create(&bags, o->batch);
	if (rc == 0)
		rc = ss_trainer_next(t, &reader, false);
	if (rc == 1 && o->table)
		rc = ss_trainer_run_sharded(t, work, &reader);
	while (rc == 1) {
		uint64_t bytes;
		int got = ss_trainer_fill(t, reader, batch, bags, &bytes);

		if (got < 0) {
			rc = got;
			break;
		}
		if (got > 0) {
			double loss;

			ss_trainer_schedule(t);
			loss = ss_model_step_bags(t->config, t->params, work,
						  batch, bags, got, &t->optim);
			if (isnan(loss)) { /* no room for the values */
				rc = ss_last_error()->code;
				break;
			}
			loss *= got;
			ss_trainer_count(t, got, bytes);

			if ((rc = ss_trainer_account(t, batch, got, loss,
						     &steps)) < 0)
				break;
			at = ss_trainer_where(t, reader);
			ss_trainer_publish(t, &at);
			rc = 1;
		}
		if (got < o->batch) /* the range is done */
			rc = ss_trainer_next(t, &reader, true);
		else if (ss_train_stopping(t->ctl))
			rc = 0;
	}
	/* done (nothing open), stopped, or failed: where it is now */
	at = ss_trainer_where(t, reader);
	ss_trainer_publish(t, &at);
	if (o->sync && o->sync_every > 0)
		ss_sync_foreground_leave(o->sync);
	if (reader && reader != t->ctl->stream) {
		t->skipped += ss_reader_skipped(reader);
		ss_reader_close(&reader);
	}
	ss_model_work_destroy(&work);
	ss_bags_destroy(&bags);
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
			struct ss_train_control *ctl,
			struct ss_train_result *result);

/*
 * @ctl for a call of @threads trainers: the resume ranges copied, and
 * each trainer's slot its fixed share of [@begin, @end) with its passes
 * (none with chunks or a resume), so that ss_train_left() is right
 * before they start.
 */
static int ss_train_control_setup(struct ss_train_control *ctl,
				  const struct ss_train_options *o,
				  uint64_t begin, uint64_t end)
{
	struct ss_train_slot *slots =
		calloc((size_t)o->threads, sizeof(*slots));
	struct ss_train_range *resume =
		malloc(((size_t)o->n_resume + 1) * sizeof(*resume));

	if (!slots || !resume) {
		free(slots);
		free(resume);
		return ss_error_set(-ENOMEM, NULL, NULL, "train control");
	}
	for (int i = 0; i < o->n_resume; i++)
		resume[i] = o->resume[i];
	for (int i = 0; i < o->threads && !o->next_range && !o->resuming; i++) {
		uint64_t b = begin +
			     (end - begin) * (uint64_t)i / (uint64_t)o->threads;

		slots[i] = (struct ss_train_slot){
			b,
			begin + (end - begin) * (uint64_t)(i + 1) /
					(uint64_t)o->threads,
			b, (uint64_t)o->epochs, true
		};
	}
	pthread_mutex_lock(&ctl->lock);
	free(ctl->slots);
	free(ctl->resume);
	ctl->slots = slots;
	ctl->threads = o->threads;
	ctl->resume = resume;
	ctl->n_resume = o->n_resume;
	ctl->resume_next = 0;
	ctl->examples = ctl->bytes = 0;
	pthread_mutex_unlock(&ctl->lock);
	return 0;
}

int ss_train(const struct ss_model_config *config, float *params,
	     const struct ss_train_options *opts,
	     struct ss_train_result *result)
{
	struct ss_train_options copy; /* the trainers point at it */
	struct ss_train_control *own = NULL;
	int rc;

	memset(result, 0, sizeof(*result));
	ss_train_options_init(&copy);
	rc = ss__options_in(&copy, sizeof(copy), opts, sizeof(copy),
			    "ss_train_options");
	if (rc == 0 && (copy.n_resume < 0 || (copy.n_resume && !copy.resume)))
		rc = ss_error_set(SS_EUSAGE, "no such list", NULL,
				  "%d ranges to resume", copy.n_resume);
	if (rc == 0 && !copy.control)
		rc = ss_train_control_create(&own);
	if (rc == 0)
		rc = ss_train_run(config, params, &copy,
				  copy.control ? copy.control : own, result);
	ss_train_control_free(&own);
	return rc;
}

static int ss_train_run(const struct ss_model_config *config, float *params,
			const struct ss_train_options *o,
			struct ss_train_control *ctl,
			struct ss_train_result *result)
{
	struct ss_trainer *t;
	pthread_t *threads;
	uint64_t begin = o->begin, end = o->end, start = ss_now_ns(), size = 0;
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
	if (o->table && (o->prefetch < SS_TRAIN_PREFETCH_EXACT ||
			 o->prefetch > SS_TRAIN_MAX_PREFETCH))
		return ss_error_set(SS_EUSAGE, "out of range", NULL,
				    "prefetch %d (SS_TRAIN_PREFETCH_EXACT, or "
				    "0 to %d)",
				    o->prefetch, SS_TRAIN_MAX_PREFETCH);
	for (int i = 0; i < (o->n_data_files ? o->n_data_files : 1); i++) {
		const char *path = o->n_data_files ? o->data_files[i] : o->data;
		uint64_t len;

		rc = ss_data_size(path, &len, NULL);
		if (rc < 0)
			return rc;
		size = len == SS_DATA_SIZE_UNKNOWN ? len : size + len;
	}
	/* standard input: its bytes are not known, nor read twice */
	if (size == SS_DATA_SIZE_UNKNOWN &&
	    (o->epochs > 1 || o->next_range || o->resuming || o->begin))
		return ss_error_set(SS_EUSAGE,
				    "it is read once, from its start",
				    "one epoch, no chunks and no resume read "
				    "it; or give a file",
				    "data '-' (standard input)");
	if (!end || end > size)
		end = size;
	rc = ss_train_control_setup(ctl, o, begin, end);
	if (rc < 0)
		return rc;
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
	/* several trainers on standard input share one reader of it */
	ctl->stream_done = false;
	if (size == SS_DATA_SIZE_UNKNOWN && o->threads > 1) {
		rc = o->n_data_files ?
			     ss_reader_open_files(&ctl->stream, o->data_files,
						  o->n_data_files, 0, 0,
						  o->bad_lines) :
			     ss_reader_open(&ctl->stream, o->data, 0, 0,
					    o->bad_lines);
		if (rc < 0)
			goto out;
	}
	t = calloc((size_t)o->threads, sizeof(*t));
	threads = calloc((size_t)o->threads, sizeof(*threads));
	if (!t || !threads) {
		free(t);
		free(threads);
		rc = ss_error_set(-ENOMEM, NULL, NULL, "trainers");
		goto out;
	}
	/* Each trainer its own slice of this rank's bytes (its slot). */
	for (int i = 0; i < o->threads; i++) {
		t[i] = (struct ss_trainer){ .config = config,
					    .params = params,
					    .opts = o,
					    .ctl = ctl,
					    .optim = optim,
					    .index = i,
					    .cur = ctl->slots[i] };
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
	if (ctl->stream) {
		result->skipped += ss_reader_skipped(ctl->stream);
		ss_reader_close(&ctl->stream);
	}
	if (own_acc && o->topo && o->plan)
		ss_topo_free(optim.acc, acc_bytes);
	else if (own_acc)
		free(optim.acc);
	return rc;
}
