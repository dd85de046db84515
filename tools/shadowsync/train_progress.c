// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync train: the progress thread (a line, and the --metrics file,
 * every --progress seconds; a checkpoint every --save-every).
 */
#include <math.h>
#include <time.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_cmd.h"

/*
 * One write(2) for the whole line, as ss_log does: the shadow and table
 * threads log on the same stderr, and a line written in pieces could be
 * cut by theirs (and, under launch, split in two).
 */
static void ss_progress_line(struct ss_progress *p, double secs)
{
	char line[512];
	uint64_t ex;
	double loss, ne;
	int len;

	ss_train_progress_read(&p->totals, &ex, &loss, &ne);
	len = snprintf(
		line, sizeof(line),
		"rank %d: %.0f s: %" PRIu64
		" examples, %.0f/s (%.0f/s per trainer); training loss %.4f, NE %.4f",
		p->c->fabric.rank, secs, ex, (double)ex / secs,
		(double)ex / secs / p->c->train.threads, loss, ne);
	if (p->sync && len < (int)sizeof(line)) {
		struct ss_sync_stats st;

		ss_sync_get_stats(p->sync, &st);
		len += snprintf(line + len, sizeof(line) - (size_t)len,
				"; sync %" PRIu64 " rounds, %.1f/s, gap %.1f",
				st.rounds, st.rounds_per_s, st.sync_gap);
	}
	if (p->c->bytes_total && len < (int)sizeof(line)) {
		uint64_t left = ss_train_bytes_left(p->c);
		double f =
			left < p->c->bytes_total ?
				1 - (double)left / (double)p->c->bytes_total :
				0;

		len += snprintf(line + len, sizeof(line) - (size_t)len,
				"; %.0f%% done", 100 * f);
		/* a guess from the pace so far, once there is one */
		if (f >= 0.01 && f < 1 && len < (int)sizeof(line)) {
			long rest = lround(secs * (1 - f) / f);

			len += snprintf(line + len, sizeof(line) - (size_t)len,
					", %ldm%02lds left", rest / 60,
					rest % 60);
		}
	}
	if (len >= (int)sizeof(line) - 1)
		len = (int)sizeof(line) - 2;
	line[len++] = '\n';
	if (write(STDERR_FILENO, line, (size_t)len) < 0)
		return; /* stderr gone: nothing to tell */
}

int ss_train_csv_open(struct ss_train_cmd *c)
{
	char buf[4096];
	const char *path;

	if (!c->log_csv)
		return 0;
	/* as a --save path: every rank with {rank}, else rank 0 */
	path = ss_checkpoint_path(c, c->log_csv, true, buf, sizeof(buf));
	if (!path)
		return 0;
	c->csv = fopen(path, "w");
	if (!c->csv)
		return ss_error_set(-errno, NULL,
				    "its folder must exist and be writable",
				    "--log-csv '%s'", path);
	setvbuf(c->csv, NULL, _IOLBF, 0); /* a row whole, as it comes */
	fprintf(c->csv, "seconds,examples,examples_per_s,train_loss,train_ne,"
			"percent_done,rounds,rounds_per_s,sync_gap,"
			"lookup_wait_s,test_ne,test_auc\n");
	return 0;
}

void ss_train_csv_row(struct ss_progress *p, double secs,
		      const struct ss_metrics *test)
{
	struct ss_train_cmd *c = p->c;
	struct ss_sync_stats st = { 0 };
	struct ss_table_stats ts = { 0 };
	uint64_t ex, left;
	double loss, ne;

	if (!c->csv)
		return;
	flockfile(c->csv); /* a row whole: trainers write some (eval) */
	ss_train_progress_read(&p->totals, &ex, &loss, &ne);
	if (p->sync)
		ss_sync_get_stats(p->sync, &st);
	if (c->table)
		ss_table_stats(c->table, &ts);
	left = c->bytes_total ? ss_train_bytes_left(c) : 0;
	fprintf(c->csv,
		"%.3f,%" PRIu64 ",%.1f,%.6f,%.6f,%.1f,%" PRIu64
		",%.2f,%.2f,%.3f,",
		secs, ex, secs > 0 ? (double)ex / secs : 0, loss, ne,
		c->bytes_total && left < c->bytes_total ?
			100 * (1 - (double)left / (double)c->bytes_total) :
			0,
		st.rounds, st.rounds_per_s, st.sync_gap,
		(double)ts.lookup_wait_ns / 1e9);
	if (test)
		fprintf(c->csv, "%.6f,%.6f\n", test->ne, test->auc);
	else
		fputs(",\n", c->csv);
	funlockfile(c->csv);
}

/* The held-out figures now, after @examples (all the run's), said after
 * @when. */
static void ss_train_eval_now(struct ss_progress *p, const char *when,
			      uint64_t examples)
{
	double secs = (double)(ss_now_ns() - p->start_ns) / 1e9;
	struct ss_metrics m;
	uint64_t skipped;
	char line[256];
	int len, rc = ss_evaluate(&p->c->model, p->params, NULL, p->c->test,
				  p->c->train.bad_lines, &m, &skipped);

	if (rc < 0) {
		ss_error_print(stderr, ss_train_prog, rc);
		return;
	}
	/* one write, as a progress line */
	len = snprintf(line, sizeof(line),
		       "rank %d: %.0f s: %s%" PRIu64 " examples: held-out NE "
		       "%.4f, AUC %.4f, calibration %.4f (--eval-every)\n",
		       p->c->fabric.rank, secs, when, examples, m.ne, m.auc,
		       m.calibration);
	if (len > 0 && write(STDERR_FILENO, line,
			     (size_t)len < sizeof(line) ? (size_t)len :
							  sizeof(line) - 1) < 0)
		len = 0; /* stderr gone: nothing to tell */
	ss_train_csv_row(p, secs, &m);
}

void ss_train_eval_hook(void *ctx, uint64_t examples)
{
	struct ss_progress *p = ctx;

	ss_train_eval_now(p, "", p->c->resumed + examples);
}

void ss_train_epoch_hook(void *ctx, int epoch, uint64_t examples)
{
	struct ss_progress *p = ctx;
	char when[48];

	snprintf(when, sizeof(when), "epoch %d of %d done: ", epoch,
		 p->c->train.epochs);
	ss_train_eval_now(p, when, examples);
}

void ss_train_csv_close(struct ss_train_cmd *c)
{
	if (c->csv && fclose(c->csv) != 0)
		ss_log_warn("--log-csv: %s", strerror(errno));
	c->csv = NULL;
}

/*
 * Progress lines every --progress seconds and checkpoints every
 * --save-every seconds, while the trainers run.  A periodic save that
 * fails is reported and training goes on: the final save says it again.
 */
void *ss_progress_main(void *arg)
{
	struct ss_progress *p = arg;
	const uint64_t s = 1000000000ull, start = ss_now_ns();
	uint64_t next_line = p->c->progress ?
				     start + (uint64_t)p->c->progress * s :
				     UINT64_MAX;
	uint64_t next_save = p->c->save_every ?
				     start + (uint64_t)p->c->save_every * s :
				     UINT64_MAX;

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		uint64_t now = ss_now_ns(),
			 due = next_line < next_save ? next_line : next_save;

		if (due > now) {
			struct timespec until;
			uint64_t ns;

			clock_gettime(CLOCK_MONOTONIC, &until);
			ns = (uint64_t)until.tv_nsec + (due - now);
			until.tv_sec += (time_t)(ns / s);
			until.tv_nsec = (long)(ns % s);
			pthread_cond_timedwait(&p->cond, &p->lock, &until);
			continue;
		}
		pthread_mutex_unlock(&p->lock);
		if (now >= next_line) {
			ss_progress_line(p, (double)(now - start) / 1e9);
			ss_train_csv_row(p, (double)(now - start) / 1e9, NULL);
			ss_train_metrics_update(p, (double)(now - start) / 1e9);
			/* the next due time after now: a save that took longer
			 * than the interval is not followed by a burst */
			while (next_line <= now)
				next_line += (uint64_t)p->c->progress * s;
		}
		if (now >= next_save) {
			int rc = ss_train_save(
				p->c, p->params,
				__atomic_load_n(&p->totals.examples,
						__ATOMIC_RELAXED));

			if (rc < 0)
				ss_error_print(stderr, ss_train_prog, rc);
			next_save =
				ss_now_ns() + (uint64_t)p->c->save_every * s;
		}
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

void ss_progress_stop(struct ss_progress *p, pthread_t thread, bool *started)
{
	if (!*started)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
	pthread_join(thread, NULL);
	*started = false;
}
