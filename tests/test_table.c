// SPDX-License-Identifier: BSD-2-Clause
/*
 * The sharded tables, between ranks as processes over shm (and over verbs
 * in the soft-RoCE guest): what one rank pushes to another's rows is read
 * back exactly as a local update makes it; the rows region refuses
 * WRITEs; a stopped applier makes senders wait on credits, then drop, and
 * nothing is corrupted.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ranks.h"
#include "table/table_internal.h"

#define WIDTH 8
#define ROWS 500

/* What the ranks of a test share: a phase each may wait for. */
struct shared {
	_Atomic int phase;
	_Atomic int pid1; /* rank 1's process, for the stall test */
};

static struct shared *shared_map(void)
{
	struct shared *s =
		mmap(NULL, sizeof(struct shared), PROT_READ | PROT_WRITE,
		     MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(s, MAP_FAILED);
	atomic_store(&s->phase, 0);
	return s;
}

/* Wait for the other rank to reach @phase, at most 30 s. */
static bool wait_phase(struct shared *s, int phase)
{
	uint64_t deadline = ss_deadline_ns(30000);

	while (atomic_load(&s->phase) < phase)
		if (ss_deadline_passed(deadline))
			return false;
		else
			ss_sleep_ns(1000000);
	return true;
}

struct job {
	struct ss_table_options opts;
	int world, port_base;
	uint64_t key;
	struct shared *sh;
	unsigned fabric_timeout_ms; /* 0: 20 s */
	const char *log; /* where rank 1 writes its stderr, or NULL */
	int (*fill)(struct ss_table *t, void *arg); /* rank 0's, or NULL */
	int (*body)(struct ss_table *t, int rank, struct job *job);
};

static int table_open(struct job *job, int rank, struct ss_table **t)
{
	char buf[RANKS_MAX][64];
	const char *addrs[RANKS_MAX];
	struct ss_fabric_options fo;

	ranks_addrs(job->world, job->port_base, buf, addrs);
	ss_fabric_options_init(&fo);
	fo.transport = ranks_transport();
	fo.rank = rank;
	fo.world = job->world;
	fo.addrs = addrs;
	fo.job_key = job->key;
	fo.timeout_ms = job->fabric_timeout_ms ? job->fabric_timeout_ms : 20000;
	if (rank == 0 && job->fill) {
		struct ss_table_options o = job->opts;

		o.fill = job->fill;
		o.fill_arg = job;
		return ss_table_open(t, &o, &fo);
	}
	return ss_table_open(t, &job->opts, &fo);
}

static int rank_main(int rank, void *arg)
{
	struct job *job = arg;
	struct ss_table *t = NULL;
	int rc;

	rank_fail_if(rank, table_open(job, rank, &t), "table open");
	rc = job->body(t, rank, job);
	ss_table_close(&t);
	return rc;
}

/* Run @job's ranks; those of the bit mask @restarts are started again
 * once when they die of a signal (ranks_run_restart). */
static void run_restarting(struct job *job, unsigned int restarts)
{
	job->port_base = ranks_port_base();
	job->key = ranks_job_key();
	job->sh = shared_map();
	cr_assert_eq(ranks_run_restart(job->world, rank_main, job, 120, NULL,
				       restarts),
		     0, "a rank failed (its output says why)");
}

static void run(struct job *job)
{
	run_restarting(job, 0);
}

/* The gradient of row @id in push @k: any values, known to both sides. */
static void gradient(uint64_t id, int k, float *g)
{
	for (int i = 0; i < WIDTH; i++)
		g[i] = (float)(((id * 7 + (uint64_t)i * 3 + (uint64_t)k) % 11) -
			       5) *
		       0.01f;
}

/* The table and row of id @id: the tables' rows counted off in turn. */
static void id_row(const struct ss_table_options *o, uint64_t id, int *t,
		   uint32_t *row, uint32_t *rows)
{
	*t = 0;
	if (!o->table_rows) {
		*t = (int)(id / o->rows);
		id %= o->rows;
	}
	while (o->table_rows && id >= o->table_rows[*t])
		id -= o->table_rows[(*t)++];
	*row = (uint32_t)id;
	*rows = o->table_rows ? o->table_rows[*t] : o->rows;
}

/* What @pushes of gradient() do to row @id, applied on one node. */
static void expected(const struct ss_table_options *o, uint64_t id, int pushes,
		     float *row)
{
	float acc[WIDTH] = { 0 }, g[WIDTH];
	uint32_t r, rows;
	int t;

	id_row(o, id, &t, &r, &rows);
	ss_table_init_row(o->seed, t, r, WIDTH, (float)sqrt(1.0 / rows), row);
	for (int k = 0; k < pushes; k++) {
		gradient(id, k, g);
		for (int i = 0; i < WIDTH; i++) {
			if (o->update == SS_TABLE_SGD) {
				row[i] -= o->lr * g[i];
				continue;
			}
			acc[i] += g[i] * g[i];
			row[i] -= o->lr * g[i] / (sqrtf(acc[i]) + o->eps);
		}
	}
}

/* Up to @n ids of table 0 whose owner is @owner. */
static int ids_of(struct ss_table *t, int owner, uint64_t *ids, int n)
{
	int k = 0;

	for (uint32_t r = 0; r < ROWS && k < n; r++)
		if (ss_table_owner(t, 0, r) == owner)
			ids[k++] = r;
	return k;
}

/*
 * Look up @n ids, compare each row with @pushes updates of it; and again
 * through ss_table_wait_into(), which copies the same rows out.
 */
static int check_rows(struct ss_table *t, int rank, const uint64_t *ids, int n,
		      int pushes)
{
	const float *rows[64];
	float want[WIDTH], copied[64 * WIDTH];

	rank_fail_if(rank, ss_table_lookup(t, 0, 0, ids, n), "lookup");
	rank_fail_if(rank, ss_table_wait(t, 0, 0, rows), "wait");
	for (int i = 0; i < n; i++) {
		expected(&t->opts, ids[i], pushes, want);
		for (int j = 0; j < WIDTH; j++)
			rank_fail_if(rank, rows[i][j] != want[j],
				     "row %llu [%d]: %g, want %g after %d "
				     "pushes",
				     (unsigned long long)ids[i], j, rows[i][j],
				     want[j], pushes);
	}
	rank_fail_if(rank, ss_table_lookup(t, 0, 1, ids, n), "lookup");
	rank_fail_if(rank, ss_table_wait_into(t, 0, 1, copied), "wait into");
	for (int i = 0; i < n; i++) {
		expected(&t->opts, ids[i], pushes, want);
		rank_fail_if(rank,
			     memcmp(copied + i * WIDTH, want, sizeof(want)),
			     "row %llu copied out differs",
			     (unsigned long long)ids[i]);
	}
	return 0;
}

/* The 40 rows of @ids as they start, pushed three times (@g: room for
 * their gradients), and as one node's steps make them. */
static int push_three_times(struct ss_table *t, int rank, const uint64_t *ids,
			    float *g)
{
	rank_fail_if(rank, check_rows(t, rank, ids, 40, 0), "at the start");
	for (int k = 0; k < 3; k++) {
		for (int i = 0; i < 40; i++)
			gradient(ids[i], k, g + i * WIDTH);
		rank_fail_if(rank, ss_table_push(t, 0, ids, g, 40), "push");
		rank_fail_if(rank, ss_table_flush(t, 10000), "flush");
	}
	rank_fail_if(rank, check_rows(t, rank, ids, 40, 3), "after 3 pushes");
	return 0;
}

/* Rank 0 pushes, rank 1 serves; both end together. */
static int body_push(struct ss_table *t, int rank, struct job *job)
{
	uint64_t ids[40];
	float g[40 * WIDTH];
	int remote = 0;

	if (rank != 0) {
		rank_fail_if(rank, !wait_phase(job->sh, 1),
			     "rank 0 never done");
		return 0;
	}
	for (int i = 0; i < 40; i++) {
		ids[i] = (uint64_t)i * 37 % (2 * ROWS); /* two tables */
		remote += ss_table_owner(t, (int)(ids[i] / ROWS),
					 (uint32_t)(ids[i] % ROWS)) != 0;
	}
	rank_fail_if(rank, remote < 10 || remote > 30,
		     "%d of 40 rows on rank 1: owners not spread", remote);
	rank_fail_if(rank, push_three_times(t, rank, ids, g), "pushing");
	struct ss_table_stats st;

	ss_table_stats(t, &st);
	rank_fail_if(rank, st.pushed != 3u * (unsigned)remote,
		     "pushed %llu, want %d", (unsigned long long)st.pushed,
		     3 * remote);
	rank_fail_if(rank, st.dropped, "%llu dropped",
		     (unsigned long long)st.dropped);
	rank_fail_if(
		rank,
		ss_table_registered_bytes(&t->opts, 2) != st.registered_bytes,
		"ss_table_registered_bytes %zu, registered %zu",
		ss_table_registered_bytes(&t->opts, 2), st.registered_bytes);
	atomic_store(&job->sh->phase, 1);
	return 0;
}

/*
 * Tables of several sizes (3, 500 and 37 rows): every row has one owner
 * and a slot of its own in its table's part of that shard, and a pushed
 * row of each reads back as one node's steps make it.
 */
static const uint32_t sizes[] = { 3, ROWS, 37 };

static int body_sizes(struct ss_table *t, int rank, struct job *job)
{
	uint64_t ids[40], all = 3 + ROWS + 37;
	uint32_t slots[2] = { 0 };
	float g[40 * WIDTH];
	bool *seen = calloc(2 * t->slots, 1);

	rank_fail_if(rank, !seen || t->all_rows != all || t->t_first[2] != 503,
		     "ids to %llu", (unsigned long long)t->all_rows);
	for (int k = 0; k < 3; k++) {
		uint32_t per = ss_table_rows_per_owner(sizes[k], 2);

		for (uint32_t r = 0; r < sizes[k]; r++) {
			int owner;
			uint32_t slot;

			ss__table_place(t, k, r, &owner, &slot);
			rank_fail_if(rank,
				     owner < 0 || owner > 1 ||
					     slot < t->t_slot[k] ||
					     slot >= t->t_slot[k] + per ||
					     seen[owner * t->slots + slot],
				     "table %d row %u: owner %d slot %u", k, r,
				     owner, slot);
			seen[owner * t->slots + slot] = true;
			slots[owner]++;
		}
	}
	free(seen);
	rank_fail_if(rank, slots[0] + slots[1] != all || slots[0] < 250,
		     "rows owned: %u and %u", slots[0], slots[1]);
	if (rank != 0)
		return wait_phase(job->sh, 1) ? 0 : -1;
	for (int i = 0; i < 40; i++)
		ids[i] = i < 3 ? (uint64_t)i : all - 1 - (uint64_t)i * 13 % all;
	rank_fail_if(rank, push_three_times(t, rank, ids, g), "pushing");
	ids[0] = all;
	rank_fail_if(rank, ss_table_push(t, 0, ids, g, 1) != -EINVAL,
		     "id %llu past the last table taken",
		     (unsigned long long)all);
	atomic_store(&job->sh->phase, 1);
	return 0;
}

/* Two ranks run @body on @tables tables of ROWS rows (@table_rows: of
 * those), updated by @update. */
static void push_test_of(int (*body)(struct ss_table *, int, struct job *),
			 int tables, const uint32_t *table_rows,
			 enum ss_table_update update)
{
	struct job job = { .world = 2, .body = body };

	ss_table_options_init(&job.opts);
	job.opts.tables = tables;
	job.opts.rows = ROWS;
	job.opts.table_rows = table_rows;
	job.opts.width = WIDTH;
	job.opts.update = update;
	job.opts.max_rows = 64;
	run(&job);
}

Test(table, tables_of_several_sizes_each_spread_and_updated, .timeout = 150)
{
	push_test_of(body_sizes, 3, sizes, SS_TABLE_ADAGRAD);
}

static void push_test(enum ss_table_update update)
{
	push_test_of(body_push, 2, NULL, update);
}

Test(table, a_pushed_row_reads_back_as_a_local_sgd_step_makes_it,
     .timeout = 150)
{
	push_test(SS_TABLE_SGD);
}

Test(table, a_pushed_row_reads_back_as_a_local_adagrad_step_makes_it,
     .timeout = 150)
{
	push_test(SS_TABLE_ADAGRAD);
}

/* How many times @what is in @text. */
static int count_of(const char *text, const char *what)
{
	int n = 0;

	for (const char *at = strstr(text, what); at; at = strstr(at + 1, what))
		n++;
	return n;
}

/* Rank 0 pauses its applier; rank 1 pushes more than the log holds. */
static int body_credits(struct ss_table *t, int rank, struct job *job)
{
	uint64_t ids[40], first[16], rest[24];
	float g[40 * WIDTH];
	struct ss_table_stats st;
	int n = 0, fd;

	if (rank == 0) {
		ss_table_pause_applier(t, true);
		atomic_store(&job->sh->phase, 1);
		rank_fail_if(rank, !wait_phase(job->sh, 2), "no pushes");
		ss_table_pause_applier(t, false);
		atomic_store(&job->sh->phase, 3);
		rank_fail_if(rank, !wait_phase(job->sh, 4), "rank 1 not done");
		return 0;
	}
	/* 40 rows that rank 0 owns, in a log of 16 */
	for (uint64_t id = 0; n < 40; id++)
		if (ss_table_owner(t, 0, (uint32_t)id) == 0)
			ids[n++] = id;
	rank_fail_if(rank, !wait_phase(job->sh, 1), "rank 0 not paused");
	for (int i = 0; i < 40; i++)
		gradient(ids[i], 0, g + i * WIDTH);
	/* what our proxy says, for the test to read (it shows it too) */
	fd = open(job->log, O_WRONLY | O_TRUNC);
	rank_fail_if(rank, fd < 0 || dup2(fd, STDERR_FILENO) < 0, "%s",
		     job->log);
	close(fd);
	rank_fail_if(rank, ss_table_push(t, 0, ids, g, 40), "push");
	/* the log fills, the rest waits for credits, then is dropped */
	rank_fail_if(rank, ss_table_flush(t, 5000) == 0,
		     "flushed with the applier stopped");
	ss_table_stats(t, &st);
	rank_fail_if(rank, st.credit_waits < 1, "never waited for credits");
	rank_fail_if(rank, st.pushed != 16 || st.dropped != 24,
		     "pushed %llu and dropped %llu, want 16 and 24",
		     (unsigned long long)st.pushed,
		     (unsigned long long)st.dropped);
	atomic_store(&job->sh->phase, 2);
	rank_fail_if(rank, !wait_phase(job->sh, 3), "applier not restarted");
	rank_fail_if(rank, ss_table_flush(t, 10000), "flush once restarted");
	/* the 16 that went were applied once, the 24 dropped not at all */
	memcpy(first, ids, sizeof(first));
	memcpy(rest, ids + 16, sizeof(rest));
	rank_fail_if(rank, check_rows(t, rank, first, 16, 1), "sent rows");
	rank_fail_if(rank, check_rows(t, rank, rest, 24, 0), "dropped rows");
	/* and the log takes pushes again */
	rank_fail_if(rank, ss_table_push(t, 0, ids + 16, g + 16 * WIDTH, 24),
		     "push again");
	rank_fail_if(rank, ss_table_flush(t, 10000), "flush again");
	rank_fail_if(rank, check_rows(t, rank, rest, 24, 1), "pushed again");
	atomic_store(&job->sh->phase, 4);
	return 0;
}

/*
 * Rank 0's shard, filled as a rank that rejoins loads its checkpoint:
 * every float 0.5, then a second more before the open goes on, while
 * rank 1 tries to reach it.
 */
static int fill_slowly(struct ss_table *t, void *arg)
{
	float *rows, *acc;
	size_t n = ss_table_shard(t, &rows, &acc);

	(void)arg;
	for (size_t i = 0; i < n; i++)
		rows[i] = 0.5f;
	sleep(1);
	return 0;
}

/* Rank 1 pushes one gradient to 40 of rank 0's rows, then reads them. */
static int body_fill(struct ss_table *t, int rank, struct job *job)
{
	uint64_t ids[40];
	float g[40 * WIDTH];
	const float *rows[40];
	int n = 0;

	if (rank == 0) {
		rank_fail_if(rank, !wait_phase(job->sh, 1), "rank 1 not done");
		return 0;
	}
	for (uint64_t id = 0; n < 40; id++)
		if (ss_table_owner(t, 0, (uint32_t)id) == 0)
			ids[n++] = id;
	for (int i = 0; i < 40; i++)
		gradient(ids[i], 0, g + i * WIDTH);
	rank_fail_if(rank, ss_table_push(t, 0, ids, g, 40), "push");
	rank_fail_if(rank, ss_table_flush(t, 10000), "flush");
	rank_fail_if(rank, ss_table_lookup(t, 0, 0, ids, 40), "lookup");
	rank_fail_if(rank, ss_table_wait(t, 0, 0, rows), "wait");
	/* the fill's values, then the step: neither lost */
	for (int i = 0; i < 40; i++)
		for (int j = 0; j < WIDTH; j++)
			rank_fail_if(rank,
				     rows[i][j] !=
					     0.5f - t->opts.lr *
							     g[i * WIDTH + j],
				     "row %llu [%d]: %g, want 0.5 - %g x %g",
				     (unsigned long long)ids[i], j, rows[i][j],
				     t->opts.lr, g[i * WIDTH + j]);
	atomic_store(&job->sh->phase, 1);
	return 0;
}

/*
 * A shard's fill runs before any peer reaches it: rank 1's open waits
 * for it, and its push lands on the filled rows.  (A rank that rejoined
 * loaded its checkpoint after the open: what the others pushed before
 * was overwritten, and they read rows at their first values.)
 */
Test(table, a_fill_comes_before_any_peer_reaches_the_shard, .timeout = 150)
{
	struct job job = { .world = 2, .body = body_fill, .fill = fill_slowly };

	ss_table_options_init(&job.opts);
	job.opts.rows = ROWS;
	job.opts.width = WIDTH;
	job.opts.max_rows = 64;
	run(&job);
}

Test(table, a_stopped_applier_makes_senders_wait_then_drop, .timeout = 150)
{
	struct job job = { .world = 2, .body = body_credits };
	char log[] = "/tmp/ss-test-table-log-XXXXXX", said[8192];
	size_t n;
	FILE *f;
	int fd, rc;

	ss_table_options_init(&job.opts);
	job.opts.rows = ROWS;
	job.opts.width = WIDTH;
	job.opts.max_rows = 64;
	job.opts.log_entries = 16;
	job.opts.timeout_ms = 1000;
	job.log = log;
	fd = mkstemp(log);
	cr_assert_geq(fd, 0);
	close(fd);
	job.port_base = ranks_port_base();
	job.key = ranks_job_key();
	job.sh = shared_map();
	rc = ranks_run(job.world, rank_main, &job, 120, NULL);
	f = fopen(log, "r");
	n = f ? fread(said, 1, sizeof(said) - 1, f) : 0;
	said[n] = '\0';
	if (f)
		fclose(f);
	unlink(log);
	fputs(said, stderr);
	cr_assert_eq(rc, 0, "a rank failed (its output says why)");
	/* the dropping is said once as it begins, and its end */
	cr_assert_eq(count_of(said, "rank 0 applied none of our gradients"), 1,
		     "%s", said);
	cr_assert_eq(count_of(said, "rank 0 applies our gradients again"), 1,
		     "%s", said);
}

/*
 * The proxy stopped, so that this test takes the endpoint's completions:
 * a WRITE into a peer's rows and a READ of its log are refused.
 */
static int body_rights(struct ss_table *t, int rank, struct job *job)
{
	struct ss_fabric *f = ss_table_fabric(t);
	struct ss_completion c;
	int n, status[2];

	atomic_store(&t->stop, true);
	pthread_join(t->proxy, NULL);
	t->proxy_started = false;
	if (rank == 1) {
		rank_fail_if(rank, !wait_phase(job->sh, 1), "rank 0 not done");
		return 0;
	}
	rank_fail_if(
		rank,
		ss_fabric_write(f, 1, t->r_local, 0, SS_TABLE_R_ROWS, 0, 64, 1),
		"post the WRITE");
	rank_fail_if(
		rank,
		ss_fabric_read(f, 1, t->r_local, 0, SS_TABLE_R_LOG, 0, 64, 2),
		"post the READ");
	for (int i = 0; i < 2; i++) {
		n = ss_fabric_poll(f, &c, 1, 10000);
		rank_fail_if(rank, n != 1, "no completion");
		status[c.wr_id - 1] = c.status;
	}
	rank_fail_if(rank, status[0] == 0, "a WRITE into the rows went in");
	rank_fail_if(rank, status[1] == 0, "a READ of the log went through");
	atomic_store(&job->sh->phase, 1);
	return 0;
}

Test(table, the_rows_take_no_write_and_the_logs_no_read, .timeout = 150)
{
	struct job job = { .world = 2, .body = body_rights };

	ss_table_options_init(&job.opts);
	job.opts.rows = ROWS;
	job.opts.width = WIDTH;
	run(&job);
}

/*
 * A wait that times out (rank 0's proxy stopped, so that the READs are
 * never posted): the rows the cache has come as last fetched, the others
 * as zeros, each counted stale.  (It handed out the staging area as the
 * slot's previous lookup had left it: other ids' rows.)
 */
static int body_late_rows(struct ss_table *t, int rank, struct job *job)
{
	uint64_t a[8], b[8], ids[8];
	const float *rows[8];
	float want[WIDTH];
	struct ss_table_stats st;

	if (rank == 1) {
		rank_fail_if(rank, !wait_phase(job->sh, 1), "rank 0 not done");
		return 0;
	}
	rank_fail_if(rank, ids_of(t, 1, a, 8) < 8, "rank 1's rows");
	for (uint32_t r = 0, k = 0; k < 8; r++) /* the next 8 of rank 1 */
		if (ss_table_owner(t, 0, r) == 1 && r > a[7])
			b[k++] = r;
	rank_fail_if(rank, check_rows(t, rank, a, 8, 0), "first lookup");
	atomic_store(&t->stop, true);
	pthread_join(t->proxy, NULL);
	t->proxy_started = false;
	/* half of them fetched before, half new: in the slot's places */
	memcpy(ids, a, 4 * sizeof(*ids));
	memcpy(ids + 4, b, 4 * sizeof(*ids));
	rank_fail_if(rank, ss_table_lookup(t, 0, 0, ids, 8), "lookup");
	rank_fail_if(rank, ss_table_wait(t, 0, 0, rows), "wait");
	for (int i = 0; i < 8; i++) {
		expected(&t->opts, ids[i], 0, want);
		for (int j = 0; j < WIDTH; j++)
			rank_fail_if(rank,
				     rows[i][j] != (i < 4 ? want[j] : 0.0f),
				     "row %llu [%d]: %g, want %g",
				     (unsigned long long)ids[i], j, rows[i][j],
				     i < 4 ? want[j] : 0.0f);
	}
	ss_table_stats(t, &st);
	rank_fail_if(rank, st.rows_stale != 8 || st.rows_cached != 4,
		     "%llu rows stale, %llu cached: want 8 and 4",
		     (unsigned long long)st.rows_stale,
		     (unsigned long long)st.rows_cached);
	atomic_store(&job->sh->phase, 1);
	return 0;
}

Test(table, a_late_lookup_serves_the_cache_or_zeros, .timeout = 150)
{
	struct job job = { .world = 2, .body = body_late_rows };

	ss_table_options_init(&job.opts);
	job.opts.rows = ROWS;
	job.opts.width = WIDTH;
	job.opts.max_rows = 64;
	job.opts.timeout_ms = 500;
	run(&job);
}

/* One rank: every row is its own, no peer, nothing sent. */
static int body_alone(struct ss_table *t, int rank, struct job *job)
{
	uint64_t ids[20];
	float g[20 * WIDTH];
	struct ss_table_stats st;

	(void)job;
	for (int i = 0; i < 20; i++) {
		ids[i] = (uint64_t)i * 13;
		gradient(ids[i], 0, g + i * WIDTH);
	}
	rank_fail_if(rank, ss_table_push(t, 0, ids, g, 20), "push");
	rank_fail_if(rank, check_rows(t, rank, ids, 20, 1), "rows");
	ss_table_stats(t, &st);
	/* what doctor sizes a run by is what a table registers */
	rank_fail_if(
		rank,
		ss_table_registered_bytes(&t->opts, 1) != st.registered_bytes,
		"ss_table_registered_bytes %zu, registered %zu",
		ss_table_registered_bytes(&t->opts, 1), st.registered_bytes);
	/* check_rows looks each row up twice */
	rank_fail_if(rank,
		     st.pushed || st.pushed_local != 20 || st.rows_remote ||
			     st.rows_local != 2 * 20,
		     "pushed %llu, local %llu, fetched %llu",
		     (unsigned long long)st.pushed,
		     (unsigned long long)st.pushed_local,
		     (unsigned long long)st.rows_remote);
	/* a batch with a bad id is refused whole: row 0 takes no step */
	ids[1] = 1000000;
	rank_fail_if(rank, ss_table_push(t, 0, ids, g, 2) != -EINVAL,
		     "a push of id 1000000 was taken");
	rank_fail_if(rank, check_rows(t, rank, ids, 1, 1),
		     "the rows before the bad id were pushed");
	return 0;
}

Test(table, one_rank_holds_every_row, .timeout = 60)
{
	struct job job = { .world = 1, .body = body_alone };

	ss_table_options_init(&job.opts);
	job.opts.rows = ROWS;
	job.opts.width = WIDTH;
	job.opts.update = SS_TABLE_ADAGRAD;
	run(&job);
}

/* Odd sizes (3 rows of 1 float, Adagrad): the logs and the heads read as
 * 64-bit words still start on 8 bytes (they followed the accumulators
 * and staging unpadded: 4 bytes off). */
static int body_aligned(struct ss_table *t, int rank, struct job *job)
{
	(void)job;
	rank_fail_if(rank, (uintptr_t)t->log_out % 8, "log_out at %p",
		     (void *)t->log_out);
	rank_fail_if(rank, (uintptr_t)t->heads_in % 8, "heads_in at %p",
		     (void *)t->heads_in);
	return 0;
}

Test(table, the_logs_and_heads_are_8_byte_aligned, .timeout = 60)
{
	struct job job = { .world = 1, .body = body_aligned };

	ss_table_options_init(&job.opts);
	job.opts.tables = 1;
	job.opts.rows = 3;
	job.opts.width = 1;
	job.opts.max_rows = 3;
	job.opts.update = SS_TABLE_ADAGRAD;
	run(&job);
}

Test(table, bad_options_are_refused)
{
	struct ss_table_options o;
	struct ss_fabric_options fo;
	struct ss_table *t = (struct ss_table *)&o;
	const char *addrs[1] = { "localhost:1" };

	ss_fabric_options_init(&fo);
	fo.world = 1;
	fo.addrs = addrs;
	ss_table_options_init(&o);
	o.width = 0;
	cr_assert_eq(ss_table_open(&t, &o, &fo), SS_EUSAGE);
	cr_assert_null(t);
	cr_assert(strstr(ss_last_error()->why, "width"), "%s",
		  ss_last_error()->why);
	/* a world of none was divided by (SIGFPE) before the fabric said */
	ss_table_options_init(&o);
	fo.world = 0;
	cr_assert_eq(ss_table_open(&t, &o, &fo), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->why, "no such rank"), "%s",
		  ss_last_error()->why);
}

Test(table, table_addresses_follow_the_sync_ones)
{
	const char *sync[2] = { "node1:7000", "10.0.0.2:7001" }, *addrs[2];
	char buf[2][SS_TABLE_ADDR_LEN], host[300];

	cr_assert_eq(ss_table_addrs(sync, 2, buf, addrs), 0);
	cr_assert_str_eq(addrs[0], "node1:7002");
	cr_assert_str_eq(addrs[1], "10.0.0.2:7003");
	sync[1] = "node2";
	cr_assert_eq(ss_table_addrs(sync, 2, buf, addrs), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->what, "node2"));
	/* a host name of 253 characters, as long as DNS allows */
	memset(host, 'h', 253);
	strcpy(host + 253, ":7001");
	sync[1] = host;
	cr_assert_eq(ss_table_addrs(sync, 2, buf, addrs), 0);
	cr_assert_eq(strlen(addrs[1]), 253 + 5);
	cr_assert_str_eq(addrs[1] + 253, ":7003");
	/* ports with a gap on one host: rank 0's tables at rank 1's port
	 * (both failed to connect, one told "model layout differs") */
	sync[0] = "node1:7800";
	sync[1] = "node1:7802";
	cr_assert_eq(ss_table_addrs(sync, 2, buf, addrs), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->what, "rank 0, 'node1:7802'"), "%s",
		  ss_last_error()->what);
	cr_assert(strstr(ss_last_error()->why, "another rank's address"));
	/* the other way round: rank 1's tables at rank 0's port */
	sync[0] = "node1:7000";
	sync[1] = "node1:6998";
	cr_assert_eq(ss_table_addrs(sync, 2, buf, addrs), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->what, "rank 1, 'node1:7000'"), "%s",
		  ss_last_error()->what);
}

/* Pushes number @first to @first + @count - 1 of gradient() to @ids. */
static int push_rounds(struct ss_table *t, int rank, const uint64_t *ids, int n,
		       int first, int count)
{
	float g[20 * WIDTH];

	for (int k = first; k < first + count; k++) {
		for (int i = 0; i < n; i++)
			gradient(ids[i], k, g + i * WIDTH);
		rank_fail_if(rank, ss_table_push(t, 0, ids, g, n), "push %d",
			     k);
		rank_fail_if(rank, ss_table_flush(t, 10000),
			     "flush of push %d: %s", k, ss_last_error()->why);
	}
	return 0;
}

/* Whether process @pid is stopped (state T), waiting up to 10 s. */
static bool stopped(int pid)
{
	char path[64], stat[256];

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	for (int i = 0; i < 1000; i++) {
		FILE *f = fopen(path, "r");
		const char *p = NULL;

		if (f && fgets(stat, sizeof(stat), f))
			p = strrchr(stat, ')');
		if (f)
			fclose(f);
		if (p && p[2] == 'T')
			return true;
		ss_sleep_ns(10000000);
	}
	return false;
}

/*
 * An owner that stalls (stopped with SIGSTOP): over shm its ring of
 * immediates fills, and a log WRITE to it cannot be posted within the
 * fabric's timeout while it is still connected.  Those entries used to
 * be counted as dropped and skipped, so that the owner's count of our
 * log was out of step for good: nothing pushed after was applied right
 * ("flush: gradients still on their way").  Now they are posted again,
 * in order, once it has room: pushes to fresh rows after it are applied
 * once each.  (Failing the owner instead applied some twice: a stopped
 * process still held the old log's immediates.)
 */
static int body_stall(struct ss_table *t, int rank, struct job *job)
{
	uint64_t ids[ROWS], x;
	float g[WIDTH];
	int n = ids_of(t, 1, ids, ROWS), tries = 0;

	if (rank == 1) {
		atomic_store(&job->sh->pid1, getpid());
		atomic_store(&job->sh->phase, 1);
		raise(SIGSTOP); /* rank 0 continues us */
		rank_fail_if(rank, !wait_phase(job->sh, 2), "rank 0 not done");
		return 0;
	}
	rank_fail_if(rank, n < 40, "rank 1 owns %d rows", n);
	rank_fail_if(rank, !wait_phase(job->sh, 1), "rank 1 not there");
	rank_fail_if(rank, !stopped(atomic_load(&job->sh->pid1)),
		     "rank 1 did not stop");
	/* one row at a time: each its own WRITE, past the 1024 slots */
	x = ids[0];
	gradient(x, 0, g);
	for (int k = 0; k < 1100; k++) {
		rank_fail_if(rank, ss_table_push(t, 0, &x, g, 1), "push %d", k);
		ss_sleep_ns(20000);
	}
	ss_sleep_ns(3000000000ull); /* the fabric's timeout passes */
	kill(atomic_load(&job->sh->pid1), SIGCONT);
	/* until rank 1 is back: a push of fresh rows that all arrive */
	for (int used = 1; used + 4 <= n; used += 4, tries++) {
		float g4[4 * WIDTH];

		for (int i = 0; i < 4; i++)
			gradient(ids[used + i], 0, g4 + i * WIDTH);
		rank_fail_if(rank, ss_table_push(t, 0, ids + used, g4, 4),
			     "push");
		if (ss_table_flush(t, 2000) == 0) {
			rank_fail_if(rank,
				     check_rows(t, rank, ids + used, 4, 1),
				     "after %d tries", tries);
			atomic_store(&job->sh->phase, 2);
			return 0;
		}
	}
	rank_fail_if(rank, true, "no push arrived whole in %d tries", tries);
	return 1;
}

/* A job of @world ranks around rank 1 stopped, over shm only. */
static void
run_stall(int world, int (*body)(struct ss_table *t, int rank, struct job *job),
	  unsigned fabric_timeout_ms, unsigned timeout_ms)
{
	struct job job = { .world = world,
			   .body = body,
			   .fabric_timeout_ms = fabric_timeout_ms };

	if (ranks_transport() != SS_TRANSPORT_SHM)
		cr_skip_test("shm's ring of immediates (verbs retries)");
	ss_table_options_init(&job.opts);
	job.opts.rows = ROWS;
	job.opts.width = WIDTH;
	job.opts.log_entries = 4096;
	job.opts.timeout_ms = timeout_ms;
	run(&job);
}

Test(table, a_stalled_owner_is_waited_for_not_skipped, .timeout = 150)
{
	run_stall(2, body_stall, 2000, 20000);
}

/*
 * The same stall, with a third rank: rank 0's proxy, its post to the
 * stopped rank 1 refused for want of room, goes on with rank 2's rows.
 * (It waited in that post for the fabric's timeout, 5 s here, so the
 * lookup of rank 2's rows timed out after the table's 1 s and handed
 * back the rows of the slot's previous lookup; the next lookup there
 * then failed the trainer.)
 */
static int body_stall_others(struct ss_table *t, int rank, struct job *job)
{
	uint64_t ids1[1], ids2[16];
	float g[WIDTH];
	struct ss_table_stats st;
	int bad;

	if (rank == 1) {
		atomic_store(&job->sh->pid1, getpid());
		atomic_store(&job->sh->phase, 1);
		raise(SIGSTOP); /* rank 0 continues us */
	}
	if (rank != 0) {
		rank_fail_if(rank, !wait_phase(job->sh, 2), "rank 0 not done");
		return 0;
	}
	rank_fail_if(rank, ids_of(t, 1, ids1, 1) < 1, "rank 1 owns no row");
	rank_fail_if(rank, ids_of(t, 2, ids2, 16) < 16, "rank 2's rows");
	rank_fail_if(rank, !wait_phase(job->sh, 1), "rank 1 not there");
	rank_fail_if(rank, !stopped(atomic_load(&job->sh->pid1)),
		     "rank 1 did not stop");
	/* rank 2's first 8 rows through the slot, as they start */
	rank_fail_if(rank, check_rows(t, rank, ids2, 8, 0), "before");
	/* one row at a time to rank 1: past its 1024 slots of immediates */
	gradient(ids1[0], 0, g);
	for (int k = 0; k < 1100; k++) {
		rank_fail_if(rank, ss_table_push(t, 0, ids1, g, 1), "push %d",
			     k);
		ss_sleep_ns(20000);
	}
	ss_sleep_ns(100000000);
	/* the other 8 through the same slot, while rank 1 is stopped */
	bad = check_rows(t, rank, ids2 + 8, 8, 0);
	ss_table_stats(t, &st);
	kill(atomic_load(&job->sh->pid1), SIGCONT); /* whatever came */
	rank_fail_if(rank, bad, "rank 2's rows, rank 1 stopped");
	rank_fail_if(rank, st.rows_stale != 0, "%llu rows stale",
		     (unsigned long long)st.rows_stale);
	rank_fail_if(rank, ss_table_flush(t, 10000), "flush once back");
	atomic_store(&job->sh->phase, 2);
	return 0;
}

Test(table, a_stalled_owner_holds_up_no_other_owners_rows, .timeout = 150)
{
	run_stall(3, body_stall_others, 5000, 1000);
}

/*
 * A rank killed and started again (a new process): the logs between it
 * and the owner that stayed start again from zero on both sides, and
 * every gradient sent after the restart, each way, is applied once, from
 * the first: those of the new process pushed the moment it connects,
 * and those the owner then pushes to the new process's fresh rows.
 */
static int body_log_restart(struct ss_table *t, int rank, struct job *job)
{
	struct ss_table_stats st;
	uint64_t ids[20], deadline;
	int n;

	if (rank == 1 && ranks_life == 0) {
		n = ids_of(t, 0, ids, 20);
		rank_fail_if(rank, push_rounds(t, rank, ids, n, 0, 3),
			     "first life");
		atomic_store(&job->sh->phase, 1);
		raise(SIGKILL);
	}
	if (rank == 1) {
		n = ids_of(t, 0, ids, 20);
		rank_fail_if(rank, push_rounds(t, rank, ids, n, 3, 3),
			     "second life");
		atomic_store(&job->sh->phase, 2);
		rank_fail_if(rank, !wait_phase(job->sh, 3),
			     "rank 0 never pushed");
		n = ids_of(t, 1, ids, 20);
		rank_fail_if(rank, check_rows(t, rank, ids, n, 3),
			     "the new process's rows");
		atomic_store(&job->sh->phase, 4);
		return 0;
	}
	rank_fail_if(rank, !wait_phase(job->sh, 2), "rank 1 never came back");
	n = ids_of(t, 0, ids, 20);
	rank_fail_if(rank, check_rows(t, rank, ids, n, 6),
		     "rank 0's rows, 3 pushes of each life of rank 1");
	/* pushes to a peer not (yet) back here are dropped, and counted */
	deadline = ss_deadline_ns(30000);
	while (!ss_fabric_peer_ok(ss_table_fabric(t), 1))
		rank_fail_if(rank, ss_deadline_passed(deadline),
			     "rank 1's new process never connected here");
	n = ids_of(t, 1, ids, 20);
	rank_fail_if(rank, push_rounds(t, rank, ids, n, 0, 3),
		     "to the new process");
	ss_table_stats(t, &st);
	rank_fail_if(rank, st.dropped, "%llu dropped",
		     (unsigned long long)st.dropped);
	atomic_store(&job->sh->phase, 3);
	rank_fail_if(rank, !wait_phase(job->sh, 4), "rank 1 never checked");
	return 0;
}

Test(table, logs_start_again_with_a_restarted_rank, .timeout = 150)
{
	struct job job = { .world = 2, .body = body_log_restart };

	ss_table_options_init(&job.opts);
	job.opts.rows = ROWS;
	job.opts.width = WIDTH;
	job.opts.max_rows = 64;
	run_restarting(&job, 1u << 1);
}

/*
 * An owner that dies (its process ends without closing): the other rank
 * keeps going; lookups of its rows give them as last fetched, pushes to
 * it are dropped and counted, and flush and barrier do not wait for it.
 */
static int body_owner_dies(struct ss_table *t, int rank, struct job *job)
{
	uint64_t ids[20], deadline;
	float before[20][WIDTH], g[20 * WIDTH];
	const float *rows[20];
	struct ss_table_stats st;
	int n = 0;

	if (rank == 1) {
		rank_fail_if(rank, !wait_phase(job->sh, 1), "rank 0 not ready");
		_exit(0); /* as a crash: nothing closed, nothing said */
	}
	for (uint32_t r = 0; n < 20; r++)
		if (ss_table_owner(t, 0, r) == 1)
			ids[n++] = r;
	rank_fail_if(rank, ss_table_lookup(t, 0, 0, ids, 20), "lookup");
	rank_fail_if(rank, ss_table_wait(t, 0, 0, rows), "wait");
	for (int i = 0; i < 20; i++)
		memcpy(before[i], rows[i], sizeof(before[i]));
	atomic_store(&job->sh->phase, 1);
	deadline = ss_deadline_ns(30000);
	while (ss_fabric_peer_ok(ss_table_fabric(t), 1))
		rank_fail_if(rank, ss_deadline_passed(deadline),
			     "rank 1's death never noticed");
	rank_fail_if(rank, ss_table_lookup(t, 0, 1, ids, 20), "lookup again");
	rank_fail_if(rank, ss_table_wait(t, 0, 1, rows), "wait again");
	for (int i = 0; i < 20; i++)
		rank_fail_if(rank,
			     memcmp(before[i], rows[i], sizeof(before[i])) != 0,
			     "row %llu not as last fetched",
			     (unsigned long long)ids[i]);
	for (int i = 0; i < 20; i++)
		gradient(ids[i], 0, g + i * WIDTH);
	rank_fail_if(rank, ss_table_push(t, 0, ids, g, 20), "push");
	rank_fail_if(rank, ss_table_flush(t, 10000), "flush");
	rank_fail_if(rank, ss_table_barrier(t, 10000), "barrier");
	ss_table_stats(t, &st);
	rank_fail_if(rank, st.rows_stale != 20 || st.rows_cached != 20,
		     "%llu stale, %llu from the cache; want 20 and 20",
		     (unsigned long long)st.rows_stale,
		     (unsigned long long)st.rows_cached);
	rank_fail_if(rank, st.dropped != 20 || st.pushed != 0,
		     "%llu dropped, %llu sent; want 20 and 0",
		     (unsigned long long)st.dropped,
		     (unsigned long long)st.pushed);
	return 0;
}

Test(table, a_dead_owner_s_rows_are_served_as_last_fetched, .timeout = 150)
{
	struct job job = { .world = 2, .body = body_owner_dies };

	ss_table_options_init(&job.opts);
	job.opts.rows = ROWS;
	job.opts.width = WIDTH;
	job.opts.max_rows = 64;
	run(&job);
}

/* ---- training on sharded tables ---------------------------------------- */

#include <unistd.h>

#include "models.h"

struct train_job {
	struct job job;
	char data[64];
	struct ss_model_config model;
	struct ss_train_options train;
	float *want; /* shared: the model trained with local tables */
};

/* Rank 0 trains on tables it shares with rank 1, which trains nothing. */
static int body_train(struct ss_table *t, int rank, struct job *job)
{
	struct train_job *tj = (struct train_job *)job;
	const struct ss_model_config *m = &tj->model;
	size_t dense = ss_model_dense_len(m), D = (size_t)m->emb_dim;
	struct ss_train_options o = tj->train;
	struct ss_train_result res;
	float *params = malloc(ss_model_len(m) * sizeof(float));
	uint64_t ids[64], all = (ss_model_len(m) - dense) / D;
	const float *rows[64];
	int bad = 0;

	rank_fail_if(rank, !params, "params");
	if (rank == 1) {
		rank_fail_if(rank, !wait_phase(job->sh, 1), "rank 0 not done");
		free(params);
		return 0;
	}
	ss_model_init(m, params, t->opts.seed); /* the MLPs */
	o.table = t;
	o.prefetch = SS_TRAIN_PREFETCH_EXACT;
	rank_fail_if(rank, ss_train(m, params, &o, &res), "train");
	rank_fail_if(rank, ss_table_flush(t, 10000), "flush");
	for (size_t i = 0; i < dense; i++)
		bad += fabsf(params[i] - tj->want[i]) > 1e-4f;
	rank_fail_if(rank, bad, "%d of %zu MLP weights differ", bad, dense);
	for (uint64_t id = 0; id < all; id += 64) {
		const float *want = tj->want + dense + id * D;
		int n = all - id < 64 ? (int)(all - id) : 64;

		for (int i = 0; i < n; i++)
			ids[i] = id + (uint64_t)i;
		rank_fail_if(rank, ss_table_lookup(t, 0, 0, ids, n), "lookup");
		rank_fail_if(rank, ss_table_wait(t, 0, 0, rows), "wait");
		for (int i = 0; i < n; i++)
			for (size_t j = 0; j < D; j++)
				bad += fabsf(rows[i][j] - want[i * D + j]) >
				       1e-4f;
	}
	rank_fail_if(rank, bad, "%d table values differ", bad);
	atomic_store(&job->sh->phase, 1);
	free(params);
	return 0;
}

/* @opt on sharded tables against local ones; tables of several sizes
 * with @sizes; multi-hot data (fields of 1 to 4 values, mean pooling)
 * with @bags. */
static void train_test(enum ss_optimizer opt, bool sizes, bool bags)
{
	struct train_job tj = { .job = { .world = 2, .body = body_train } };
	struct ss_gen_options g;
	struct ss_metrics teacher;
	struct ss_train_result res;
	size_t len;
	int fd;
	FILE *f;

	strcpy(tj.data, "/tmp/ss-table-XXXXXX");
	fd = mkstemp(tj.data);
	cr_assert_geq(fd, 0);
	f = fdopen(fd, "w");
	ss_gen_options_init(&g);
	g.examples = 1500;
	g.cardinality = 200;
	for (int j = 0; bags && j < SS_SPARSE; j++)
		g.multi_hot[j] = 1 + (uint32_t)(j % 4);
	cr_assert_eq(ss_gen_data(f, &g, &teacher), 0);
	fclose(f);
	small_model(&tj.model, 8, 64);
	tj.model.pooling = bags ? SS_POOLING_MEAN : SS_POOLING_SUM;
	for (int j = 0; sizes && j < SS_SPARSE; j++)
		tj.model.table_rows[j] = 3 + (uint32_t)(j * 37 % 120);
	ss_train_options_init(&tj.train);
	tj.train.data = tj.data;
	tj.train.batch = 32;
	tj.train.optimizer = opt;
	tj.train.lr = ss_optimizer_default_lr(opt);
	len = ss_model_len(&tj.model);
	tj.want = mmap(NULL, len * sizeof(float), PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(tj.want, MAP_FAILED);
	ss_model_init(&tj.model, tj.want, 3);
	cr_assert_eq(ss_train(&tj.model, tj.want, &tj.train, &res), 0, "%s",
		     ss_last_error()->why);

	ss_table_options_init(&tj.job.opts);
	tj.job.opts.tables = SS_SPARSE;
	tj.job.opts.rows = tj.model.hash_size;
	tj.job.opts.table_rows = sizes ? tj.model.table_rows : NULL;
	tj.job.opts.width = tj.model.emb_dim;
	tj.job.opts.update =
		opt == SS_OPT_ADAGRAD ? SS_TABLE_ADAGRAD : SS_TABLE_SGD;
	tj.job.opts.lr = tj.train.lr;
	tj.job.opts.eps = tj.train.adagrad_eps;
	tj.job.opts.seed = 3;
	/* bags: 1 + 2 + 3 + 4 values a 4 fields */
	tj.job.opts.max_rows = tj.train.batch * SS_SPARSE * (bags ? 3 : 1);
	tj.job.opts.depth = 1;
	run(&tj.job);
	unlink(tj.data);
}

Test(table, sgd_on_sharded_tables_trains_the_single_node_model, .timeout = 150)
{
	train_test(SS_OPT_SGD, false, false);
}

Test(table, adagrad_on_sharded_tables_trains_the_single_node_model,
     .timeout = 150)
{
	train_test(SS_OPT_ADAGRAD, false, false);
}

Test(table, tables_of_several_sizes_train_the_single_node_model, .timeout = 150)
{
	train_test(SS_OPT_ADAGRAD, true, false);
}

/* Multi-hot bags: every value of a batch a row of its lookup, the pooled
 * gradients summed per row and pushed; the single-node model still. */
Test(table, multi_hot_bags_on_sharded_tables_train_the_single_node_model,
     .timeout = 150)
{
	train_test(SS_OPT_ADAGRAD, false, true);
}
