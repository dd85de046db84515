// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync train --metrics FILE: the progress figures in the Prometheus
 * text exposition format (version 0.0.4), for node_exporter's textfile
 * collector to serve.  FILE is replaced whole each time: the figures go
 * to FILE.tmp in the same folder, which is fsync'd and renamed over FILE,
 * so that a scrape never reads half a file.  Written before training,
 * every --progress interval (the progress thread), and once at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "train_cmd.h"

#define SS_METRICS_TMP ".tmp"

/*
 * The temporary file, for the signal handler to remove when a signal
 * comes in the middle of a write (see ss_train_on_signal).
 */
static char ss_metrics_tmp[SS_METRICS_PATH_MAX + sizeof(SS_METRICS_TMP)];
static volatile sig_atomic_t ss_metrics_writing;

/*
 * What the file says if a signal stops the rank: the last write's figures
 * with shadowsync_train_running 0 and shadowsync_train_failed 1, rendered
 * beside each write (the handler cannot format), written by the handler
 * under a name of its own and renamed over FILE.  Two buffers: the one
 * published is never the one being rendered.
 */
#define SS_METRICS_STOP_TMP ".stop.tmp"
static char ss_metrics_path[SS_METRICS_PATH_MAX];
static char
	ss_metrics_stop_tmp[SS_METRICS_PATH_MAX + sizeof(SS_METRICS_STOP_TMP)];
static char *ss_metrics_stopped[2];
static size_t ss_metrics_stopped_len[2];
static volatile sig_atomic_t ss_metrics_published = -1;

void ss_train_metrics_on_signal(void)
{
	int i = ss_metrics_published, fd;
	const char *at;
	size_t left;

	if (ss_metrics_writing)
		unlink(ss_metrics_tmp);
	if (i < 0)
		return;
	fd = open(ss_metrics_stop_tmp,
		  O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	for (at = ss_metrics_stopped[i], left = ss_metrics_stopped_len[i];
	     left > 0;) {
		ssize_t n = write(fd, at, left);

		if (n <= 0)
			break;
		at += n;
		left -= (size_t)n;
	}
	close(fd);
	if (left > 0 || rename(ss_metrics_stop_tmp, ss_metrics_path) < 0)
		unlink(ss_metrics_stop_tmp);
}

/* What one write shows. */
struct ss_scrape {
	const struct ss_train_cmd *c;
	struct ss_sync *sync;
	uint64_t examples, clicks;
	double seconds, loss, ne;
	const struct ss_train_result *res; /* at the end, after success */
	const struct ss_metrics *test; /* at the end, with --test */
	bool running, failed;
};

/* ---- the exposition format ------------------------------------------ */

struct ss_prom {
	FILE *f;
	char labels[96]; /* rank="R",job_key="K": on every sample */
};

static void ss_prom_family(struct ss_prom *p, const char *name,
			   const char *type, const char *help)
{
	fprintf(p->f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The labels' values are numbers and fixed words: nothing to escape. */
static void ss_prom_name(struct ss_prom *p, const char *name, const char *extra)
{
	fprintf(p->f, "%s{%s%s%s} ", name, p->labels, extra ? "," : "",
		extra ? extra : "");
}

static void ss_prom_double(struct ss_prom *p, const char *name,
			   const char *extra, double v)
{
	ss_prom_name(p, name, extra);
	if (isnan(v))
		fputs("NaN\n", p->f);
	else if (isinf(v))
		fputs(v > 0 ? "+Inf\n" : "-Inf\n", p->f);
	else
		fprintf(p->f, "%.10g\n", v);
}

static void ss_prom_u64(struct ss_prom *p, const char *name, const char *extra,
			uint64_t v)
{
	ss_prom_name(p, name, extra);
	fprintf(p->f, "%" PRIu64 "\n", v);
}

static void ss_prom_gauge(struct ss_prom *p, const char *name, const char *help,
			  double v)
{
	ss_prom_family(p, name, "gauge", help);
	ss_prom_double(p, name, NULL, v);
}

static void ss_prom_counter(struct ss_prom *p, const char *name,
			    const char *help, uint64_t v)
{
	ss_prom_family(p, name, "counter", help);
	ss_prom_u64(p, name, NULL, v);
}

/* ---- the figures ----------------------------------------------------- */

static void ss_scrape_run(struct ss_prom *p, const struct ss_scrape *s)
{
	const struct ss_train_cmd *c = s->c;
	struct timespec now;
	char info[160];

	clock_gettime(CLOCK_REALTIME, &now);
	ss_prom_gauge(p, "shadowsync_train_running",
		      "1 while the rank trains, 0 once it has ended",
		      s->running);
	ss_prom_gauge(p, "shadowsync_train_failed",
		      "1 when the rank ended in an error", s->failed);
	ss_prom_gauge(p, "shadowsync_update_timestamp_seconds",
		      "When this file was written (Unix time)",
		      (double)now.tv_sec + (double)now.tv_nsec / 1e9);
	ss_prom_gauge(p, "shadowsync_progress_interval_seconds",
		      "How often the file is written while training "
		      "(--progress; 0: at the start and the end only)",
		      (double)c->progress);
	snprintf(info, sizeof(info),
		 "sync=\"%s\",mode=\"%s\",tables=\"%s\",optimizer=\"%s\"",
		 ss_sync_algo_name(c->sync.algo),
		 c->foreground ? "foreground" : "shadow",
		 ss_tables_names[c->tables],
		 ss_optimizer_name(c->train.optimizer));
	ss_prom_family(p, "shadowsync_train_info", "gauge",
		       "The run's settings, as labels");
	ss_prom_double(p, "shadowsync_train_info", info, 1);
	ss_prom_gauge(p, "shadowsync_world_size", "Ranks in the job",
		      c->fabric.world);
	ss_prom_gauge(p, "shadowsync_trainer_threads",
		      "Trainer threads of this rank", c->train.threads);
	if (c->save) {
		ss_prom_counter(p, "shadowsync_checkpoints_total",
				"Checkpoints this rank saved (--save)",
				__atomic_load_n(&c->saves, __ATOMIC_RELAXED));
		ss_prom_gauge(p, "shadowsync_last_checkpoint_timestamp_seconds",
			      "When the last good checkpoint was saved (Unix "
			      "time; 0: none yet)",
			      c->last_save);
	}
}

static void ss_scrape_training(struct ss_prom *p, const struct ss_scrape *s)
{
	ss_prom_gauge(p, "shadowsync_train_seconds",
		      "Seconds this rank has trained", s->seconds);
	ss_prom_counter(p, "shadowsync_examples_total",
			"Examples this rank has trained", s->examples);
	ss_prom_gauge(p, "shadowsync_examples_per_second",
		      "Examples trained a second, the mean over the run",
		      s->seconds > 0 ? (double)s->examples / s->seconds : 0);
	ss_prom_counter(p, "shadowsync_clicks_total",
			"Examples trained whose label is 1", s->clicks);
	ss_prom_gauge(p, "shadowsync_train_loss",
		      "Mean training log loss so far", s->loss);
	ss_prom_gauge(p, "shadowsync_train_ne",
		      "Normalized entropy of the training loss so far, "
		      "against the click rate seen",
		      s->ne);
	if (s->c->load)
		ss_prom_gauge(p, "shadowsync_resumed_examples",
			      "Examples the --load checkpoint had seen",
			      (double)s->c->resumed);
	if (s->res) {
		ss_prom_counter(p, "shadowsync_examples_skipped_total",
				"Malformed lines skipped (--bad-lines skip)",
				s->res->skipped);
		ss_prom_counter(p, "shadowsync_data_chunks_total",
				"Chunks of the data this rank trained",
				s->res->ranges);
	}
	if (s->test) {
		ss_prom_gauge(p, "shadowsync_test_ne",
			      "Held-out normalized entropy (--test)",
			      s->test->ne);
		ss_prom_gauge(p, "shadowsync_test_auc",
			      "Held-out area under the ROC curve (--test)",
			      s->test->auc);
		ss_prom_gauge(p, "shadowsync_test_calibration",
			      "Held-out predicted over actual clicks (--test)",
			      s->test->calibration);
	}
}

static void ss_scrape_sync(struct ss_prom *p, const struct ss_scrape *s)
{
	uint64_t waits;
	double waited;
	struct ss_sync_stats st;
	char peer[32];

	ss_sync_get_stats(s->sync, &st);
	ss_prom_counter(p, "shadowsync_sync_rounds_total",
			"Synchronization rounds applied", st.rounds);
	ss_prom_gauge(p, "shadowsync_sync_rounds_per_second",
		      "Rounds a second since the rounds began",
		      st.rounds_per_s);
	ss_prom_gauge(p, "shadowsync_sync_gap_iterations",
		      "Trainer iterations between applied rounds, the mean",
		      st.sync_gap);
	ss_prom_gauge(p, "shadowsync_sync_round_latency_p50_seconds",
		      "Median round latency, over the last 1024 rounds",
		      st.round_p50_us / 1e6);
	ss_prom_gauge(
		p, "shadowsync_sync_round_latency_p99_seconds",
		"99th percentile round latency, over the last 1024 rounds",
		st.round_p99_us / 1e6);
	ss_prom_counter(p, "shadowsync_sync_bytes_sent_total",
			"Bytes this rank sent in rounds, to all peers",
			st.bytes_sent);
	ss_prom_counter(p, "shadowsync_sync_peers_left_out_total",
			"Peer-rounds a silent peer was left out of",
			st.peers_left_out);
	ss_prom_family(p, "shadowsync_sync_peer_left_out_total", "counter",
		       "Rounds each peer was left out of");
	for (int r = 0; r < s->c->fabric.world; r++) {
		snprintf(peer, sizeof(peer), "peer=\"%d\"", r);
		ss_prom_u64(p, "shadowsync_sync_peer_left_out_total", peer,
			    ss_sync_peer_left_out(s->sync, r));
	}
	ss_prom_counter(p, "shadowsync_sync_rounds_partial_total",
			"Rounds that left a peer out", st.rounds_partial);
	ss_prom_counter(p, "shadowsync_sync_rounds_skipped_total",
			"Rounds not run: the sends of earlier ones in flight",
			st.rounds_skipped);
	ss_prom_counter(p, "shadowsync_sync_messages_late_total",
			"Messages that came after their round: discarded",
			st.messages_late);
	ss_prom_counter(p, "shadowsync_sync_easgd_dropped_total",
			"S-EASGD deltas sent that never arrived",
			st.easgd_dropped);
	ss_prom_counter(p, "shadowsync_sync_view_changes_total",
			"Times the members changed and the shards were "
			"re-divided",
			st.view_changes);
	ss_prom_counter(p, "shadowsync_sync_joins_total",
			"Restarted or late peers let in", st.joins);
	ss_prom_counter(p, "shadowsync_sync_reseeds_total",
			"Times this rank reseeded its replica from a peer",
			st.reseeds);
	ss_prom_counter(p, "shadowsync_sync_iterations_total",
			"Trainer iterations reported to the sync engine",
			st.iterations);
	ss_sync_gap_waits(s->sync, &waits, &waited);
	ss_prom_counter(p, "shadowsync_sync_gap_waits_total",
			"Trainers' waits for a round past --max-sync-gap",
			waits);
	ss_prom_family(p, "shadowsync_sync_gap_wait_seconds_total", "counter",
		       "Trainers' time in those waits, summed");
	ss_prom_double(p, "shadowsync_sync_gap_wait_seconds_total", NULL,
		       waited);
	ss_prom_gauge(p, "shadowsync_sync_members",
		      "Ranks in the rounds now, this one included", st.members);
	ss_prom_gauge(p, "shadowsync_sync_round_timeout_seconds",
		      "The round timeout in force", st.round_timeout_ms / 1e3);
	ss_prom_gauge(p, "shadowsync_sync_divergence",
		      "||w - consensus|| / ||consensus|| at the last round",
		      st.divergence);
}

static void ss_scrape_table(struct ss_prom *p, const struct ss_scrape *s)
{
	struct ss_table_stats st;

	/* at the end, the lookups of training only, as the summary has them */
	if (s->res)
		ss_table_report_stats(s->c, &st);
	else
		ss_table_stats(s->c->table, &st);
	ss_prom_counter(p, "shadowsync_table_lookups_total",
			"Lookups of embedding rows waited for", st.lookups);
	ss_prom_family(p, "shadowsync_table_rows_total", "counter",
		       "Rows looked up, by where they live");
	ss_prom_u64(p, "shadowsync_table_rows_total", "where=\"local\"",
		    st.rows_local);
	ss_prom_u64(p, "shadowsync_table_rows_total", "where=\"remote\"",
		    st.rows_remote);
	ss_prom_counter(p, "shadowsync_table_rows_fetched_total",
			"Rows READ from their owners", st.rows_fetched);
	ss_prom_counter(p, "shadowsync_table_rows_stale_total",
			"Rows whose owner had failed, or READ late",
			st.rows_stale);
	ss_prom_counter(p, "shadowsync_table_rows_cached_total",
			"Stale rows served as last fetched", st.rows_cached);
	ss_prom_family(p, "shadowsync_table_lookup_wait_seconds_total",
		       "counter",
		       "Seconds the trainers waited for rows, all together");
	ss_prom_double(p, "shadowsync_table_lookup_wait_seconds_total", NULL,
		       (double)st.lookup_wait_ns / 1e9);
	ss_prom_counter(p, "shadowsync_table_grads_pushed_total",
			"Row gradients sent to their owners", st.pushed);
	ss_prom_counter(p, "shadowsync_table_grads_local_total",
			"Row gradients applied to this rank's own shard",
			st.pushed_local);
	ss_prom_counter(p, "shadowsync_table_grads_applied_total",
			"Row gradients from peers applied to this shard",
			st.applied);
	ss_prom_counter(p, "shadowsync_table_grads_dropped_total",
			"Row gradients never sent, or whose WRITE failed",
			st.dropped);
	ss_prom_counter(p, "shadowsync_table_credit_waits_total",
			"Times an owner's gradient log was full",
			st.credit_waits);
	ss_prom_gauge(p, "shadowsync_table_shard_bytes",
		      "Bytes of rows (and optimizer state) this rank holds",
		      (double)st.shard_bytes);
	ss_prom_gauge(p, "shadowsync_table_registered_bytes",
		      "Bytes the table layer registered",
		      (double)st.registered_bytes);
}

static void ss_scrape_print(FILE *f, const struct ss_scrape *s)
{
	struct ss_prom p = { .f = f };

	snprintf(p.labels, sizeof(p.labels),
		 "rank=\"%d\",job_key=\"%" PRIu64 "\"", s->c->fabric.rank,
		 s->c->fabric.job_key);
	ss_scrape_run(&p, s);
	ss_scrape_training(&p, s);
	if (s->sync)
		ss_scrape_sync(&p, s);
	if (s->c->table)
		ss_scrape_table(&p, s);
}

/* ---- the file -------------------------------------------------------- */

/*
 * @s as a signal would leave it (see ss_train_metrics_on_signal), in the
 * buffer not published; published once complete.  Once the rank has
 * ended, nothing is: the file it wrote at the end stays.
 */
static void ss_scrape_render_stopped(const struct ss_scrape *s)
{
	struct ss_scrape stopped = *s;
	int i = ss_metrics_published == 0 ? 1 : 0;
	FILE *f;

	if (!s->running) {
		ss_metrics_published = -1;
		return;
	}
	free(ss_metrics_stopped[i]);
	ss_metrics_stopped[i] = NULL;
	f = open_memstream(&ss_metrics_stopped[i], &ss_metrics_stopped_len[i]);
	if (!f)
		return; /* the handler keeps the older one */
	stopped.running = false;
	stopped.failed = true;
	ss_scrape_print(f, &stopped);
	if (fclose(f) == 0)
		ss_metrics_published = i;
}

/* FILE.tmp, fsync'd, renamed over FILE; no FILE.tmp left on failure. */
static int ss_scrape_write(const char *path, const struct ss_scrape *s)
{
	const char *hint = "--metrics needs a folder this user may write",
		   *full = "is its file system full?";
	FILE *f = NULL;
	int fd, rc = 0;

	ss_metrics_writing = 1;
	fd = open(ss_metrics_tmp,
		  O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0) {
		ss_metrics_writing = 0;
		return ss_error_set(-errno, NULL, hint, "--metrics: '%s'",
				    ss_metrics_tmp);
	}
	f = fdopen(fd, "w");
	if (!f) {
		rc = ss_error_set(-errno, NULL, NULL, "--metrics: '%s'",
				  ss_metrics_tmp);
		close(fd);
		goto out;
	}
	errno = 0;
	ss_scrape_print(f, s);
	if (fflush(f) != 0 || ferror(f))
		rc = ss_error_set(-(errno ? errno : EIO), NULL, full,
				  "--metrics: writing '%s'", ss_metrics_tmp);
	if (rc == 0 && fsync(fileno(f)) < 0)
		rc = ss_error_set(-errno, NULL, full, "--metrics: fsync '%s'",
				  ss_metrics_tmp);
	if (fclose(f) != 0 && rc == 0)
		rc = ss_error_set(-errno, NULL, full, "--metrics: closing '%s'",
				  ss_metrics_tmp);
	if (rc == 0 && rename(ss_metrics_tmp, path) < 0)
		rc = ss_error_set(-errno, NULL, hint,
				  "--metrics: renaming '%s' to '%s'",
				  ss_metrics_tmp, path);
out:
	if (rc < 0)
		unlink(ss_metrics_tmp);
	ss_metrics_writing = 0;
	if (rc == 0)
		ss_scrape_render_stopped(s);
	return rc;
}

/* Whether another rank of the job listens on this rank's host. */
static bool ss_metrics_host_shared(const struct ss_train_cmd *c)
{
	const char *me, *colon;
	size_t len;

	if (c->fabric.world < 2)
		return false;
	if (c->fabric.transport == SS_TRANSPORT_SHM)
		return true;
	me = c->fabric.addrs[c->fabric.rank];
	colon = strrchr(me, ':');
	len = colon ? (size_t)(colon - me) : strlen(me);
	for (int r = 0; r < c->fabric.world; r++) {
		const char *a = c->fabric.addrs[r];

		if (r != c->fabric.rank && strncmp(a, me, len) == 0 &&
		    (a[len] == ':' || a[len] == '\0'))
			return true;
	}
	return false;
}

/* The folder of FILE exists and this user may create files in it. */
static int ss_metrics_check_folder(const char *path)
{
	const char *slash = strrchr(path, '/');
	char dir[SS_METRICS_PATH_MAX];
	struct stat st;

	if (!slash)
		strcpy(dir, ".");
	else if (slash == path)
		strcpy(dir, "/");
	else
		snprintf(dir, sizeof(dir), "%.*s", (int)(slash - path), path);
	if (stat(dir, &st) < 0)
		return ss_error_set(-errno, NULL,
				    "create the folder first (node_exporter's "
				    "--collector.textfile.directory), or give "
				    "another path",
				    "--metrics: folder '%s'", dir);
	if (!S_ISDIR(st.st_mode))
		return ss_error_set(-ENOTDIR, NULL, "give a path in a folder",
				    "--metrics: '%s'", dir);
	if (access(dir, W_OK | X_OK) < 0)
		return ss_error_set(-errno, NULL,
				    "give a folder this user may write, or "
				    "let it write there",
				    "--metrics: folder '%s'", dir);
	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return ss_error_set(-EISDIR, NULL,
				    "give a file name in it: "
				    "--metrics DIR/shadowsync.prom",
				    "--metrics: '%s'", path);
	return 0;
}

int ss_train_metrics_open(struct ss_train_cmd *c)
{
	struct ss_scrape s = { .c = c, .running = true };
	const char *path;
	size_t len;
	int rc;

	if (!c->metrics)
		return 0;
	path = ss_checkpoint_path(c, c->metrics, false, c->mfile.path,
				  sizeof(c->mfile.path));
	len = strlen(path);
	if (len >= sizeof(c->mfile.path) - 1 || len == 0)
		return ss_error_set(SS_EUSAGE, len ? "too long" : "empty",
				    len ? "give a shorter path" :
					  "give a file: --metrics "
					  "DIR/shadowsync.prom",
				    "--metrics");
	if (!strstr(c->metrics, "{rank}") && ss_metrics_host_shared(c))
		return ss_error_set(SS_EUSAGE,
				    "another rank on this host writes it too",
				    "put {rank} in the name: --metrics "
				    "DIR/shadowsync-{rank}.prom",
				    "--metrics '%s'", c->metrics);
	if (path != c->mfile.path)
		snprintf(c->mfile.path, sizeof(c->mfile.path), "%s", path);
	rc = ss_metrics_check_folder(c->mfile.path);
	if (rc < 0)
		return rc;
	if (len < 5 || strcmp(c->mfile.path + len - 5, ".prom") != 0)
		ss_log_warn("--metrics '%s': node_exporter's textfile "
			    "collector reads only files whose names end in "
			    ".prom",
			    c->mfile.path);
	snprintf(ss_metrics_tmp, sizeof(ss_metrics_tmp), "%s" SS_METRICS_TMP,
		 c->mfile.path);
	snprintf(ss_metrics_path, sizeof(ss_metrics_path), "%s", c->mfile.path);
	snprintf(ss_metrics_stop_tmp, sizeof(ss_metrics_stop_tmp),
		 "%s" SS_METRICS_STOP_TMP, c->mfile.path);
	c->mfile.start_ns = ss_now_ns();
	rc = ss_scrape_write(c->mfile.path, &s);
	if (rc == 0)
		c->mfile.open = true;
	return rc;
}

/* A write that failed once training began: a warning, not an error. */
static void ss_metrics_warn(const char *then)
{
	const struct ss_error *e = ss_last_error();

	ss_log_warn("%s: %s%s%s%s%s", e->what, e->why, e->hint[0] ? " (" : "",
		    e->hint, e->hint[0] ? ")" : "", then);
}

/* The running totals, as the progress line reads them. */
static void ss_scrape_totals(struct ss_scrape *s,
			     struct ss_train_progress *totals)
{
	ss_train_progress_read(totals, &s->examples, &s->loss, &s->ne);
	s->clicks = __atomic_load_n(&totals->clicks, __ATOMIC_RELAXED);
}

void ss_train_metrics_update(struct ss_progress *p, double secs)
{
	struct ss_scrape s = {
		.c = p->c, .sync = p->sync, .seconds = secs, .running = true
	};
	int rc;

	if (!p->c->mfile.open)
		return;
	ss_scrape_totals(&s, &p->totals);
	rc = ss_scrape_write(p->c->mfile.path, &s);
	/* training goes on: said once when it starts failing, once when
	 * it works again */
	if (rc < 0 && !p->c->mfile.failing)
		ss_metrics_warn("; training goes on");
	else if (rc == 0 && p->c->mfile.failing)
		ss_log_warn("--metrics: '%s' written again", p->c->mfile.path);
	p->c->mfile.failing = rc < 0;
}

void ss_train_metrics_end(struct ss_train_cmd *c, struct ss_sync *sync,
			  struct ss_train_progress *totals,
			  const struct ss_train_result *res,
			  const struct ss_metrics *test, int rc)
{
	struct ss_scrape s = { .c = c, .sync = sync, .failed = rc < 0 };

	if (!c->mfile.open)
		return;
	ss_scrape_totals(&s, totals);
	if (rc == 0) { /* the summary's figures */
		s.res = res;
		s.test = test;
		s.examples = res->examples;
		s.seconds = res->seconds;
		s.loss = res->examples ? res->loss_sum / (double)res->examples :
					 0;
		s.ne = res->examples ?
			       ss_normalized_entropy(
				       s.loss, (double)s.clicks /
						       (double)res->examples) :
			       0;
		if (isnan(s.ne))
			s.ne = 0;
	} else {
		s.seconds = (double)(ss_now_ns() - c->mfile.start_ns) / 1e9;
	}
	if (ss_scrape_write(c->mfile.path, &s) < 0)
		ss_metrics_warn("");
}
