// SPDX-License-Identifier: BSD-2-Clause
/*
 * The fabric between ranks that are separate processes.  Every test runs
 * over the transport that SS_TEST_TRANSPORT names: shm (the default) on any
 * machine, verbs on a real RDMA device (`make check` runs this file a second
 * time inside tools/rxe-vm).  Over verbs without an active device the tests
 * report themselves skipped.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <linux/capability.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ranks.h"
#include "shadowsync/shadowsync.h"

#define MAX_RANKS 4
#define MIB (1024 * 1024)

/* Regions every rank allocates, in this order. */
enum { R_SHARED, R_READONLY, R_INBOX, R_LOCAL, R_ATOMIC, N_REGIONS };

struct rank_ctx {
	struct ss_fabric *f;
	struct ss_region *r[N_REGIONS];
	int rank, world;
	int marks; /* FINAL_MARK immediates that came while waiting for else */
	/* other immediates that came before the completion being waited for:
	 * wait_imm() takes them first, in their order */
	struct ss_completion early[8];
	int n_early;
};

/* The immediate a rank sends when it is done with its peers. */
#define FINAL_MARK 100000u

struct job {
	int world;
	size_t region_len[N_REGIONS];
	unsigned timeout_ms;
	bool default_timeout; /* open with timeout_ms 0, as train does */
	size_t max_message;
	/* per-rank overrides, for the handshake tests */
	uint64_t job_key[MAX_RANKS], layout_hash[MAX_RANKS];
	int (*body)(struct rank_ctx *c, struct job *job);
	/* a rank whose connect is expected to fail runs this instead */
	int (*on_connect_error)(struct rank_ctx *c, int rc);
	/* rank @late starts once the others connected without it, with a
	 * partial connect (as a rank that rejoins) */
	bool one_comes_late;
	int late;
};

static int *partial_up; /* shared: ranks connected without the last */

static bool verbs(void)
{
	return ranks_transport() == SS_TRANSPORT_VERBS;
}

static void skip_without_device(void)
{
	if (ranks_no_device())
		cr_skip_test("%s", ranks_no_device());
}

#define fail_if(cond, ...) rank_fail_if(c->rank, cond, __VA_ARGS__)

static uint8_t pattern(int rank, size_t i)
{
	return (uint8_t)(i * 131 + (size_t)rank * 17 + (i >> 13));
}

static void fill(void *p, size_t len, int rank, size_t from)
{
	uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		b[i] = pattern(rank, from + i);
}

/* Index of the first byte that differs from the pattern, or -1. */
static long mismatch(const void *p, size_t len, int rank, size_t from)
{
	const uint8_t *b = p;

	for (size_t i = 0; i < len; i++)
		if (b[i] != pattern(rank, from + i))
			return (long)i;
	return -1;
}

/*
 * Wait for one completion; fails the rank on timeout.  A peer that is
 * already done may send its FINAL_MARK early: those are counted, not
 * returned.
 */
static int wait_one(struct rank_ctx *c, struct ss_completion *out)
{
	for (;;) {
		int n = ss_fabric_poll(c->f, out, 1, 20000);

		fail_if(n != 1, "poll returned %d (%s)", n, ss_strerror(n));
		if (out->op != SS_OP_RECV_IMM || out->imm != FINAL_MARK)
			return 0;
		c->marks++;
	}
}

/*
 * Wait for the completion of a posted operation.  A peer's immediate may
 * come first, legally: the peer answers the WRITE_WITH_IMM it received
 * while the acknowledgement that completes that WRITE here is still on
 * its way (soft-RoCE sends them from separate tasks, and under load the
 * answer overtakes the acknowledgement).  Such an immediate is kept for
 * wait_imm().
 */
static int wait_op_status(struct rank_ctx *c, uint64_t wr_id, enum ss_op op,
			  int *status)
{
	struct ss_completion comp;

	for (;;) {
		if (wait_one(c, &comp))
			return 1;
		if (comp.op != SS_OP_RECV_IMM || op == SS_OP_RECV_IMM ||
		    c->n_early == (int)(sizeof(c->early) / sizeof(c->early[0])))
			break;
		c->early[c->n_early++] = comp;
	}
	fail_if(comp.op != op || comp.wr_id != wr_id,
		"got %s wr_id %llu, want %s wr_id %llu", ss_op_name(comp.op),
		(unsigned long long)comp.wr_id, ss_op_name(op),
		(unsigned long long)wr_id);
	*status = comp.status;
	return 0;
}

/* The same, and a status other than 0 fails the rank. */
static int wait_op(struct rank_ctx *c, uint64_t wr_id, enum ss_op op)
{
	int status;

	if (wait_op_status(c, wr_id, op, &status))
		return 1;
	fail_if(status != 0, "%s completed with %s", ss_op_name(op),
		ss_strerror(status));
	return 0;
}

/* Wait for an immediate from @peer; returns its value in @imm. */
static int wait_imm(struct rank_ctx *c, int peer, uint32_t *imm)
{
	struct ss_completion comp;

	if (c->n_early) {
		comp = c->early[0];
		c->n_early--;
		memmove(c->early, c->early + 1,
			(size_t)c->n_early * sizeof(comp));
	} else if (wait_one(c, &comp)) {
		return 1;
	}
	fail_if(comp.op != SS_OP_RECV_IMM || comp.peer != peer,
		"got %s from %d, want an immediate from %d",
		ss_op_name(comp.op), comp.peer, peer);
	*imm = comp.imm;
	return 0;
}

/* A zero-length WRITE_WITH_IMM: "I am here" or "go on". */
static int signal_peer(struct rank_ctx *c, int peer, uint32_t imm)
{
	int rc = ss_fabric_write_imm(c->f, peer, c->r[R_LOCAL], 0, R_INBOX, 0,
				     0, imm, 1000 + imm);

	fail_if(rc != 0, "write_imm: %s", ss_strerror(rc));
	return wait_op(c, 1000 + imm, SS_OP_WRITE_IMM);
}

/*
 * A last round of marks: nobody leaves before every peer is done with it.
 * Our own mark may complete with the peer gone: a peer leaves once it has
 * every mark, ours included, and over verbs its receive completes before
 * its acknowledgement is sent (soft-RoCE), so its close can overtake the
 * acknowledgement.  That is no failure; any other status is.
 */
static int finish_together(struct rank_ctx *c)
{
	for (int p = 0; p < c->world; p++) {
		int rc, status;

		if (p == c->rank)
			continue;
		rc = ss_fabric_write_imm(c->f, p, c->r[R_LOCAL], 0, R_INBOX, 0,
					 0, FINAL_MARK, 1000 + FINAL_MARK);
		fail_if(rc != 0 && rc != SS_EPEER, "final mark: %s",
			ss_strerror(rc));
		if (rc != 0)
			continue;
		if (wait_op_status(c, 1000 + FINAL_MARK, SS_OP_WRITE_IMM,
				   &status))
			return 1;
		fail_if(status != 0 && status != SS_EPEER,
			"final mark completed with %s", ss_strerror(status));
	}
	while (c->marks < c->world - 1) {
		struct ss_completion comp;
		int n = ss_fabric_poll(c->f, &comp, 1, 20000);

		fail_if(n != 1 || comp.op != SS_OP_RECV_IMM ||
				comp.imm != FINAL_MARK,
			"last round: poll %d, %s imm %u", n,
			ss_op_name(comp.op), comp.imm);
		c->marks++;
	}
	return 0;
}

static int run_rank(struct job *job, int rank, int port_base,
		    uint64_t default_key)
{
	char addr_buf[MAX_RANKS][64];
	const char *addrs[MAX_RANKS];
	struct ss_fabric_options o;
	static const unsigned access[N_REGIONS] = {
		SS_ACCESS_REMOTE_READ | SS_ACCESS_REMOTE_WRITE,
		SS_ACCESS_REMOTE_READ, SS_ACCESS_REMOTE_WRITE, SS_ACCESS_LOCAL,
		SS_ACCESS_REMOTE_ATOMIC
	};
	struct rank_ctx ctx = { .rank = rank, .world = job->world }, *c = &ctx;
	int rc;

	if (job->one_comes_late && rank == job->late) {
		for (int i = 0;
		     i < 6000 && __atomic_load_n(partial_up, __ATOMIC_SEQ_CST) <
					 job->world - 1;
		     i++)
			ss_sleep_ns(10000000);
		fail_if(__atomic_load_n(partial_up, __ATOMIC_SEQ_CST) <
				job->world - 1,
			"the others did not connect without us in 60 s");
	}
	ranks_addrs(job->world, port_base, addr_buf, addrs);
	ss_fabric_options_init(&o);
	o.partial_connect = job->one_comes_late && rank != job->late;
	o.transport = verbs() ? SS_TRANSPORT_VERBS : SS_TRANSPORT_SHM;
	o.rank = rank;
	o.world = job->world;
	o.addrs = addrs;
	o.job_key = job->job_key[rank] ? job->job_key[rank] : default_key;
	o.layout_hash = job->layout_hash[rank] ? job->layout_hash[rank] : 42;
	o.timeout_ms = job->timeout_ms ? job->timeout_ms : 20000;
	if (job->default_timeout)
		o.timeout_ms = 0; /* the fabric's own default */
	o.max_message = job->max_message;
	if (job->one_comes_late && rank == job->late)
		o.timeout_ms = 20000; /* the others redial on their backoff */
	rc = ss_fabric_open(&c->f, &o);
	fail_if(rc != 0, "open: %s", ss_strerror(rc));
	for (int i = 0; i < N_REGIONS; i++) {
		rc = ss_fabric_alloc(
			c->f, job->region_len[i] ? job->region_len[i] : 4096,
			access[i], &c->r[i]);
		fail_if(rc != 0, "alloc region %d: %s", i, ss_strerror(rc));
	}
	rc = ss_fabric_connect(c->f);
	if (rc != 0 && job->on_connect_error) {
		rc = job->on_connect_error(c, rc);
		ss_fabric_close(&c->f);
		return rc;
	}
	fail_if(rc != 0, "connect: %s", ss_strerror(rc));
	rc = job->body(c, job);
	ss_fabric_close(&c->f);
	return rc;
}

struct job_run {
	struct job *job;
	int port_base;
	uint64_t key;
};

static int job_rank(int rank, void *arg)
{
	struct job_run *run = arg;

	return run_rank(run->job, rank, run->port_base, run->key);
}

/* Run the job's ranks as processes, at most 120 s; see ranks_run(). */
static int run_job_status(struct job *job, int *exits)
{
	struct job_run run = { job, ranks_port_base(), ranks_job_key() };
	int failed = ranks_run(job->world, job_rank, &run, 120, exits);

	cr_assert_leq(failed, job->world);
	return failed;
}

static int run_job(struct job *job)
{
	return run_job_status(job, NULL);
}

/* ---- fetch-and-add: a counter every rank takes numbers from ------------- */

#define FA_CLAIMS 300
static uint64_t (*fa_got)[FA_CLAIMS]; /* shared with the test */

static int body_fetch_add(struct rank_ctx *c, struct job *job)
{
	uint64_t *local = ss_region_ptr(c->r[R_LOCAL]);

	(void)job;
	/* rank 0 holds the counter and takes numbers from it too */
	for (int k = 0; k < FA_CLAIMS; k++) {
		fail_if(ss_fabric_fetch_add(c->f, 0, c->r[R_LOCAL],
					    8 * (size_t)(k % 4), R_ATOMIC, 64,
					    1, 500 + (uint64_t)k),
			"fetch-add %d: %s", k, ss_last_error()->why);
		if (wait_op(c, 500 + (uint64_t)k, SS_OP_FETCH_ADD))
			return 1;
		fa_got[c->rank][k] = local[k % 4];
	}
	fail_if(ss_fabric_fetch_add(c->f, 0, c->r[R_LOCAL], 4, R_ATOMIC, 64, 1,
				    9) != -EINVAL,
		"an unaligned fetch-add was taken");
	return finish_together(c);
}

/*
 * A fetch-add to ourselves that fails (into a region without atomic
 * access) puts the loopback queue pairs in the error state; they are
 * reset in the background, and our own counter answers again (rank 0's
 * chunk claims go through it).  Over shm nothing breaks to begin with.
 */
static int body_loopback_recovers(struct rank_ctx *c, struct job *job)
{
	uint64_t *local = ss_region_ptr(c->r[R_LOCAL]);
	struct ss_completion comp;
	bool done = false;

	(void)job;
	if (c->rank != 0)
		return finish_together(c);
	fail_if(ss_fabric_fetch_add(c->f, 0, c->r[R_LOCAL], 0, R_READONLY, 0, 1,
				    7),
		"fetch-add: %s", ss_last_error()->why);
	if (wait_one(c, &comp))
		return 1;
	fail_if(comp.wr_id != 7 || comp.status != SS_EREMOTE,
		"a fetch-add into a read-only region completed with '%s'",
		ss_strerror(comp.status));
	/* back within the first retries (0.5 s, then 1 s, 2 s) */
	for (int i = 0; i < 100 && !done; i++) {
		if (ss_fabric_fetch_add(c->f, 0, c->r[R_LOCAL], 0, R_ATOMIC, 0,
					1, 8) < 0) {
			int n = ss_fabric_poll(c->f, &comp, 1, 100);

			c->marks += n == 1 && comp.op == SS_OP_RECV_IMM &&
				    comp.imm == FINAL_MARK;
			continue;
		}
		if (wait_one(c, &comp))
			return 1;
		fail_if(comp.wr_id != 8, "wr_id %llu",
			(unsigned long long)comp.wr_id);
		done = comp.status == 0;
	}
	fail_if(!done, "the loopback never came back");
	fail_if(local[0] != 0, "the counter read %llu, want 0",
		(unsigned long long)local[0]);
	return finish_together(c);
}

Test(fabric, the_loopback_comes_back_after_an_error, .timeout = 120)
{
	struct job job = { .world = 2, .body = body_loopback_recovers };

	skip_without_device();
	cr_assert_eq(run_job(&job), 0);
}

/*
 * A peer failed by ss_fabric_fail_peer() while it lives hears of it, as
 * it does over verbs from its queue pair: both sides reconnect, both count
 * a new epoch, and immediates go through again both ways.  Over shm it
 * was never told: it went on sending into a ring its peer had emptied,
 * its peer counted a new process, and it kept the old epoch.
 */
static int body_fail_a_live_peer(struct rank_ctx *c, struct job *job)
{
	int peer = 1 - c->rank;
	uint32_t was = ss_fabric_peer_epoch(c->f, peer);
	struct ss_completion comp;

	(void)job;
	if (c->rank == 0)
		ss_fabric_fail_peer(c->f, 1, "failed by the test");
	for (int i = 0; i < 300 && !(ss_fabric_peer_ok(c->f, peer) &&
				     ss_fabric_peer_epoch(c->f, peer) > was);
	     i++) {
		int n = ss_fabric_poll(c->f, &comp, 1, 50);

		c->marks += n == 1 && comp.op == SS_OP_RECV_IMM &&
			    comp.imm == FINAL_MARK;
	}
	fail_if(!ss_fabric_peer_ok(c->f, peer) ||
			ss_fabric_peer_epoch(c->f, peer) != was + 1,
		"peer %d: ok %d, epoch %u (was %u)", peer,
		ss_fabric_peer_ok(c->f, peer), ss_fabric_peer_epoch(c->f, peer),
		was);
	return finish_together(c);
}

Test(fabric, a_live_peer_failed_is_told_and_both_reconnect, .timeout = 120)
{
	struct job job = { .world = 2, .body = body_fail_a_live_peer };

	skip_without_device();
	cr_assert_eq(run_job(&job), 0);
}

Test(fabric, fetch_add_hands_out_every_number_once, .timeout = 240)
{
	struct job job = { .world = 3, .body = body_fetch_add };
	bool *seen = calloc(3 * FA_CLAIMS, sizeof(bool));

	skip_without_device();
	fa_got = mmap(NULL, sizeof(*fa_got) * 3, PROT_READ | PROT_WRITE,
		      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(fa_got, MAP_FAILED);
	cr_assert_eq(run_job(&job), 0);
	for (int r = 0; r < 3; r++)
		for (int k = 0; k < FA_CLAIMS; k++) {
			uint64_t v = fa_got[r][k];

			cr_assert_lt(v, 3 * FA_CLAIMS, "rank %d got %llu", r,
				     (unsigned long long)v);
			cr_assert(!seen[v], "%llu handed out twice",
				  (unsigned long long)v);
			seen[v] = true;
			if (k > 0)
				cr_assert_gt(v, fa_got[r][k - 1],
					     "rank %d went back", r);
		}
	free(seen);
}

/* ---- READ and WRITE of every size, at unaligned offsets ---------------- */

static const size_t sizes[] = { 1, 7, 4096, 65537, MIB + 3, 64 * MIB };
#define N_SIZES (sizeof(sizes) / sizeof(sizes[0]))

/*
 * Whether size @k is tried here: across the emulated wire of a soft-RoCE
 * cluster (a few MB/s under TCG) 64 MiB outlasts the tests' 20 s waits.
 */
static bool size_here(size_t k)
{
	return !ranks_cluster(NULL, NULL) || sizes[k] <= 8 * MIB;
}

static int body_sizes(struct rank_ctx *c, struct job *job)
{
	void *shared = ss_region_ptr(c->r[R_SHARED]);
	void *local = ss_region_ptr(c->r[R_LOCAL]);
	uint32_t imm;

	(void)job;
	if (c->rank == 1) {
		/* Expose a pattern, then check each WRITE_WITH_IMM's data. */
		fill(shared, ss_region_len(c->r[R_SHARED]), 1, 0);
		if (signal_peer(c, 0, 0))
			return 1;
		for (size_t k = 0; k < N_SIZES; k++) {
			long bad;

			if (!size_here(k))
				continue;
			if (wait_imm(c, 0, &imm))
				return 1;
			fail_if(imm != 100 + k, "immediate %u, want %zu", imm,
				100 + k);
			/* The data must be there when the immediate is. */
			bad = mismatch((char *)shared + 5, sizes[k], 0, 3);
			fail_if(bad >= 0, "WRITE of %zu bytes: byte %ld wrong",
				sizes[k], bad);
			if (signal_peer(c, 0, 200 + (uint32_t)k))
				return 1;
		}
		return finish_together(c);
	}
	if (wait_imm(c, 1, &imm))
		return 1;
	for (size_t k = 0; k < N_SIZES; k++) {
		int rc;
		long bad;

		if (!size_here(k))
			continue;
		rc = ss_fabric_read(c->f, 1, c->r[R_LOCAL], 3, R_SHARED, 5,
				    sizes[k], k);

		fail_if(rc != 0, "read %zu: %s", sizes[k], ss_strerror(rc));
		if (wait_op(c, k, SS_OP_READ))
			return 1;
		bad = mismatch((char *)local + 3, sizes[k], 1, 5);
		fail_if(bad >= 0, "READ of %zu bytes: byte %ld wrong", sizes[k],
			bad);
	}
	fill(local, ss_region_len(c->r[R_LOCAL]), 0, 0);
	for (size_t k = 0; k < N_SIZES; k++) {
		int rc;

		if (!size_here(k))
			continue;
		rc = ss_fabric_write_imm(c->f, 1, c->r[R_LOCAL], 3, R_SHARED, 5,
					 sizes[k], 100 + (uint32_t)k, 50 + k);

		fail_if(rc != 0, "write %zu: %s", sizes[k], ss_strerror(rc));
		if (wait_op(c, 50 + k, SS_OP_WRITE_IMM) || wait_imm(c, 1, &imm))
			return 1;
		fail_if(imm != 200 + k, "ack %u", imm);
	}
	return finish_together(c);
}

Test(fabric, read_and_write_1B_to_64MiB_unaligned, .timeout = 240)
{
	struct job job = { .world = 2, .body = body_sizes };

	skip_without_device();
	job.region_len[R_SHARED] = 64 * MIB + 4096;
	job.region_len[R_LOCAL] = 64 * MIB + 4096;
	cr_assert_eq(run_job(&job), 0);
}

/* ---- long operations split at the message size, many in flight -------- */

static int body_split(struct rank_ctx *c, struct job *job)
{
	void *shared = ss_region_ptr(c->r[R_SHARED]);
	void *local = ss_region_ptr(c->r[R_LOCAL]);
	size_t len = ss_region_len(c->r[R_SHARED]) - 4096;
	struct ss_completion comp[16];
	uint32_t imm;
	int done = 0;

	(void)job;
	if (c->rank == 1) {
		fill(shared, len + 4096, 1, 0);
		if (signal_peer(c, 0, 0) || wait_imm(c, 0, &imm))
			return 1;
		return finish_together(c);
	}
	if (wait_imm(c, 1, &imm))
		return 1;
	/* One READ of 1 MiB + 5 in 4 KiB messages: 257 work requests. */
	fail_if(ss_fabric_read(c->f, 1, c->r[R_LOCAL], 0, R_SHARED, 1, len, 7),
		"long read");
	if (wait_op(c, 7, SS_OP_READ))
		return 1;
	fail_if(mismatch(local, len, 1, 1) >= 0, "long read data");
	/* 300 small READs posted before any is polled. */
	for (int i = 0; i < 300; i++)
		fail_if(ss_fabric_read(c->f, 1, c->r[R_LOCAL], (size_t)i * 8,
				       R_SHARED, (size_t)i * 8, 8, 1000 + i),
			"read %d", i);
	while (done < 300) {
		int n = ss_fabric_poll(c->f, comp, 16, 20000);

		fail_if(n <= 0, "poll: %s", ss_strerror(n));
		for (int i = 0; i < n; i++) {
			fail_if(comp[i].status || comp[i].op != SS_OP_READ ||
					comp[i].wr_id != 1000u + (unsigned)done,
				"completion %d: %s wr_id %llu status %d", done,
				ss_op_name(comp[i].op),
				(unsigned long long)comp[i].wr_id,
				comp[i].status);
			done++;
		}
	}
	fail_if(mismatch(local, 2400, 1, 0) >= 0, "small reads data");
	if (signal_peer(c, 1, 1))
		return 1;
	return finish_together(c);
}

Test(fabric, long_operations_split_and_many_in_flight, .timeout = 240)
{
	struct job job = { .world = 2,
			   .body = body_split,
			   .max_message = 4096 };

	skip_without_device();
	job.region_len[R_SHARED] = MIB + 8192;
	job.region_len[R_LOCAL] = MIB + 8192;
	cr_assert_eq(run_job(&job), 0);
}

/*
 * The same over a CQ too small for 256 sends a peer, as a job of some
 * 16000 ranks or more has on a CQ of 4 M entries: SS_VERBS_MAX_CQE 176 =
 * 2 QPs x 16 + 128 shared receives + 16 leaves 16 a peer, signaled every
 * 16, and the long READ (257 WRs) and the 300 small ones still land.
 */
static int body_split_small_cq(struct rank_ctx *c, struct job *job)
{
	uint32_t depth = ss_fabric_send_depth(c->f);

	fail_if(depth != (verbs() ? 16u : 0u), "send depth %u, want %u", depth,
		verbs() ? 16u : 0u);
	return body_split(c, job);
}

Test(fabric, long_operations_with_few_sends_in_flight_a_peer, .timeout = 240)
{
	struct job job = { .world = 2,
			   .body = body_split_small_cq,
			   .max_message = 4096 };

	skip_without_device();
	setenv("SS_VERBS_MAX_CQE", "176", 1);
	job.region_len[R_SHARED] = MIB + 8192;
	job.region_len[R_LOCAL] = MIB + 8192;
	cr_assert_eq(run_job(&job), 0);
}

/* A CQ that cannot hold two sends a peer refuses the job, saying why. */
Test(fabric, a_completion_queue_too_small_for_the_job_is_refused)
{
	struct ss_fabric *f = NULL;
	int rc;

	skip_without_device();
	if (!verbs())
		cr_skip_test("over verbs only (shm has no completion queue)");
	setenv("SS_VERBS_MAX_CQE", "140", 1); /* < 128 receives + 16 + 2 x 2 */
	rc = ranks_fabric_open(0, 2, ranks_port_base(), 1, 1, &f);
	cr_assert_eq(rc, -ENOSPC, "open: %d, %s", rc, ss_strerror(rc));
	cr_assert(strstr(ss_last_error()->why, "completion queue is too small"),
		  "%s", ss_last_error()->why);
	setenv("SS_VERBS_MAX_CQE", "nine", 1);
	rc = ranks_fabric_open(0, 2, ranks_port_base(), 1, 1, &f);
	cr_assert_eq(rc, SS_EUSAGE, "a bad SS_VERBS_MAX_CQE: %d", rc);
	unsetenv("SS_VERBS_MAX_CQE");
	rc = ranks_fabric_open(0, 2, ranks_port_base(), 1, 1, &f);
	cr_assert_eq(rc, 0, "open: %s", ss_strerror(rc));
	cr_assert_eq(ss_fabric_send_depth(f), 256);
	ss_fabric_close(&f);
}

/*
 * The device that owns an address, found before an endpoint opens (for
 * train to place its threads near that NIC, not near the first one
 * hwloc lists): the one a verbs endpoint at that address then uses,
 * which a wrong --device would make it refuse.
 */
Test(fabric, the_device_of_an_address_is_the_one_its_endpoint_uses)
{
	char buf[2][64], name[64] = "";
	const char *addrs[2];
	struct ss_fabric_options o;
	struct ss_fabric *f = NULL;
	int rc;

	cr_assert_eq(ss_fabric_device_of("nocolon", name, sizeof(name)),
		     SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->what, "nocolon"), "%s",
		  ss_last_error()->what);
	skip_without_device();
	if (!verbs())
		cr_skip_test("over verbs only");
	ranks_addrs(1, ranks_port_base(), buf, addrs);
	rc = ss_fabric_device_of(addrs[0], name, sizeof(name));
	cr_assert_eq(rc, 0, "%s: %s", ss_last_error()->what,
		     ss_last_error()->why);
	cr_assert(name[0]);
	ss_fabric_options_init(&o);
	o.transport = SS_TRANSPORT_VERBS;
	o.world = 2;
	ranks_addrs(2, ranks_port_base(), buf, addrs);
	o.addrs = addrs;
	o.device = name;
	rc = ss_fabric_open(&f, &o);
	cr_assert_eq(rc, 0, "device %s: %s", name, ss_last_error()->why);
	ss_fabric_close(&f);
}

/*
 * An object larger than what /dev/shm has left is refused when made,
 * saying what it needs and what there is (it died of SIGBUS at the first
 * touch): the safety net under train's check of the total, for what
 * fills /dev/shm meanwhile.  A 1 MiB /dev/shm in a mount namespace of
 * the child's own; skipped where it may not make one.
 */
Test(fabric, an_object_larger_than_dev_shm_is_refused_when_made)
{
	int status, pipefd[2];
	char why[512] = "";
	ssize_t got;
	pid_t pid;

	if (verbs())
		cr_skip_test("shm objects only");
	cr_assert_eq(pipe(pipefd), 0);
	pid = fork();
	if (pid == 0) {
		struct ss_fabric *f = NULL;
		struct ss_region *r = NULL;
		int rc;

		close(pipefd[0]);
		if (unshare(CLONE_NEWNS) < 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") < 0)
			_exit(77);
		rc = ranks_fabric_open(0, 2, ranks_port_base(), 1, 1, &f);
		if (rc == 0)
			rc = ss_fabric_alloc(f, 4u << 20, SS_ACCESS_REMOTE_READ,
					     &r);
		dprintf(pipefd[1], "%d %s: %s", rc, ss_last_error()->what,
			ss_last_error()->why);
		ss_fabric_close(&f);
		_exit(0);
	}
	close(pipefd[1]);
	got = read(pipefd[0], why, sizeof(why) - 1);
	close(pipefd[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	if (WIFEXITED(status) && WEXITSTATUS(status) == 77)
		cr_skip_test("no mount namespace here (needs root)");
	why[got > 0 ? got : 0] = '\0';
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s", why);
	cr_assert(strstr(why, "-28 ") == why, "%s", why);
	cr_assert(strstr(why, "needs 4 MiB, /dev/shm has 0 MiB free: /dev/shm "
			      "is too small"),
		  "%s", why);
}

/* Bad SS_GID_INDEX and SS_ACK_TIMEOUT are refused at open, named. */
Test(fabric, bad_verbs_variables_are_refused_naming_them)
{
	static const struct {
		const char *name, *value;
	} bad[] = { { "SS_GID_INDEX", "abc" },
		    { "SS_GID_INDEX", "100000" },
		    { "SS_ACK_TIMEOUT", "99" },
		    { "SS_ACK_TIMEOUT", "0" } };
	struct ss_fabric *f = NULL;
	int rc;

	skip_without_device();
	if (!verbs())
		cr_skip_test("over verbs only (shm has no GIDs or ACKs)");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		setenv(bad[i].name, bad[i].value, 1);
		rc = ranks_fabric_open(0, 2, ranks_port_base(), 1, 1, &f);
		unsetenv(bad[i].name);
		cr_expect_eq(rc, SS_EUSAGE, "%s=%s: %d", bad[i].name,
			     bad[i].value, rc);
		cr_expect(strstr(ss_last_error()->what, bad[i].name),
			  "%s=%s: %s", bad[i].name, bad[i].value,
			  ss_last_error()->what);
		ss_fabric_close(&f);
	}
	setenv("SS_ACK_TIMEOUT", "14", 1);
	rc = ranks_fabric_open(0, 2, ranks_port_base(), 1, 1, &f);
	unsetenv("SS_ACK_TIMEOUT");
	cr_assert_eq(rc, 0, "SS_ACK_TIMEOUT=14: %s", ss_strerror(rc));
	ss_fabric_close(&f);
}

/* ---- two ranks that fill each other's queue of immediates ------------- */

#define FLOOD 3000 /* more immediates than a peer's queue holds (shm 1024) */

static int body_flood(struct rank_ctx *c, struct job *job)
{
	struct ss_completion comp[32];
	int peer = 1 - c->rank, sent = 0, got = 0, done = 0;

	(void)job;
	/* both post everything before polling once */
	for (; sent < FLOOD; sent++)
		fail_if(ss_fabric_write_imm(c->f, peer, c->r[R_LOCAL], 0,
					    R_INBOX, 0, 8, (uint32_t)sent,
					    (uint64_t)sent),
			"write_imm %d: %s", sent, ss_last_error()->why);
	while (got < FLOOD || done < FLOOD) {
		int n = ss_fabric_poll(c->f, comp, 32, 20000);

		fail_if(n <= 0, "poll after %d in, %d done: %s", got, done,
			ss_strerror(n));
		for (int i = 0; i < n; i++) {
			fail_if(comp[i].status, "%s: %s",
				ss_op_name(comp[i].op),
				ss_strerror(comp[i].status));
			if (comp[i].op == SS_OP_RECV_IMM &&
			    comp[i].imm == FINAL_MARK) {
				c->marks++;
				continue;
			}
			if (comp[i].op == SS_OP_RECV_IMM) {
				fail_if(comp[i].imm != (uint32_t)got,
					"immediate %u, want %d (in order)",
					comp[i].imm, got);
				got++;
			} else {
				done++;
			}
		}
	}
	return finish_together(c);
}

Test(fabric, ranks_that_flood_each_other_with_immediates_both_get_through,
     .timeout = 240)
{
	/* a 5 s timeout: waiting on each other would fail the posts */
	struct job job = { .world = 2, .body = body_flood, .timeout_ms = 5000 };

	skip_without_device();
	cr_assert_eq(run_job(&job), 0);
}

/* The same with the fabric's default timeout (0 given): its posts wait
 * for room too (a 0 taken as the wait made them fail at once). */
Test(fabric, a_default_timeout_waits_for_room_in_a_full_queue, .timeout = 240)
{
	struct job job = { .world = 2,
			   .body = body_flood,
			   .default_timeout = true };

	skip_without_device();
	cr_assert_eq(run_job(&job), 0);
}

/* ---- READ lists: scattered pieces, one doorbell, one completion -------- */

#define LISTS 24 /* 24 x 64 work requests: far more than the send queue */

static int body_read_list(struct rank_ctx *c, struct job *job)
{
	uint8_t *local = ss_region_ptr(c->r[R_LOCAL]);
	struct ss_fabric_piece pieces[LISTS][SS_FABRIC_MAX_LIST], bad;
	struct ss_completion comp[16];
	size_t at = 0;
	uint32_t imm;
	int done = 0;

	(void)job;
	if (c->rank == 1) {
		fill(ss_region_ptr(c->r[R_READONLY]),
		     ss_region_len(c->r[R_READONLY]), 1, 0);
		if (signal_peer(c, 0, 0) || wait_imm(c, 0, &imm))
			return 1;
		return finish_together(c);
	}
	if (wait_imm(c, 1, &imm))
		return 1;
	/* pieces of 1 to 200 bytes, from scattered unaligned offsets */
	for (int l = 0; l < LISTS; l++)
		for (int i = 0; i < SS_FABRIC_MAX_LIST; i++) {
			struct ss_fabric_piece *p = &pieces[l][i];

			p->len = 1 + (size_t)(l * 61 + i * 37) % 200;
			p->remote_off = (size_t)(l * 7919 + i * 104729) %
					(ss_region_len(c->r[R_READONLY]) - 200);
			p->local_off = at;
			at += p->len + 3;
		}
	for (int l = 0; l < LISTS; l++)
		fail_if(ss_fabric_read_list(c->f, 1, c->r[R_LOCAL], R_READONLY,
					    pieces[l], SS_FABRIC_MAX_LIST,
					    300 + (uint64_t)l),
			"list %d: %s", l, ss_last_error()->why);
	while (done < LISTS) {
		int n = ss_fabric_poll(c->f, comp, 16, 20000);

		fail_if(n <= 0, "poll: %s", ss_strerror(n));
		for (int i = 0; i < n; i++, done++)
			fail_if(comp[i].status || comp[i].op != SS_OP_READ ||
					comp[i].wr_id != 300u + (unsigned)done,
				"list %d: %s wr_id %llu status %d", done,
				ss_op_name(comp[i].op),
				(unsigned long long)comp[i].wr_id,
				comp[i].status);
	}
	for (int l = 0; l < LISTS; l++)
		for (int i = 0; i < SS_FABRIC_MAX_LIST; i++) {
			const struct ss_fabric_piece *p = &pieces[l][i];

			fail_if(mismatch(local + p->local_off, p->len, 1,
					 p->remote_off) >= 0,
				"list %d piece %d", l, i);
			fail_if(local[p->local_off + p->len] != 0,
				"list %d piece %d wrote past its end", l, i);
		}
	/* refused whole, nothing posted: a piece outside, no pieces, too many */
	bad = pieces[0][5];
	pieces[0][5].remote_off = ss_region_len(c->r[R_READONLY]) - 1;
	fail_if(ss_fabric_read_list(c->f, 1, c->r[R_LOCAL], R_READONLY,
				    pieces[0], 8, 1) != -EINVAL,
		"a piece outside the peer's region was taken");
	pieces[0][5] = bad;
	fail_if(ss_fabric_read_list(c->f, 1, c->r[R_LOCAL], R_READONLY,
				    pieces[0], 0, 1) != -EINVAL,
		"an empty list was taken");
	fail_if(ss_fabric_read_list(c->f, 1, c->r[R_LOCAL], R_READONLY,
				    pieces[0], SS_FABRIC_MAX_LIST + 1,
				    1) != -EINVAL,
		"a list of %d was taken", SS_FABRIC_MAX_LIST + 1);
	if (verbs()) { /* over verbs a piece fits one message (4 KiB here) */
		struct ss_fabric_piece big = { 0, 0, 4097 };

		fail_if(ss_fabric_read_list(c->f, 1, c->r[R_LOCAL], R_READONLY,
					    &big, 1, 1) != -EINVAL,
			"a piece longer than a message was taken");
	}
	fail_if(ss_fabric_poll(c->f, comp, 16, 0) != 0,
		"a refused list completed");
	if (signal_peer(c, 1, 1))
		return 1;
	return finish_together(c);
}

Test(fabric, read_lists_land_every_piece_and_complete_once, .timeout = 240)
{
	struct job job = { .world = 2,
			   .body = body_read_list,
			   .max_message = 4096 };

	skip_without_device();
	job.region_len[R_READONLY] = MIB;
	job.region_len[R_LOCAL] = MIB;
	cr_assert_eq(run_job(&job), 0);
}

/* ---- 3 and 4 ranks: every pair, both directions ------------------------- */

static int body_all_pairs(struct rank_ctx *c, struct job *job)
{
	uint8_t *inbox = ss_region_ptr(c->r[R_INBOX]);
	uint8_t *local = ss_region_ptr(c->r[R_LOCAL]);
	uint32_t seen = 0;

	(void)job;
	fill(ss_region_ptr(c->r[R_READONLY]), 4096, c->rank, 0);
	local[0] = (uint8_t)(0xa0 + c->rank);
	/* Each rank writes its mark into slot [rank] of every peer's inbox. */
	for (int p = 0; p < c->world; p++) {
		if (p == c->rank)
			continue;
		fail_if(ss_fabric_write_imm(c->f, p, c->r[R_LOCAL], 0, R_INBOX,
					    (size_t)c->rank * 64, 1,
					    (uint32_t)c->rank, (uint64_t)p),
			"write_imm to %d", p);
	}
	for (int got = 0; got < 2 * (c->world - 1);) {
		struct ss_completion comp;

		if (wait_one(c, &comp))
			return 1;
		fail_if(comp.status, "%s: %s", ss_op_name(comp.op),
			ss_strerror(comp.status));
		if (comp.op == SS_OP_RECV_IMM) {
			fail_if(comp.imm != (uint32_t)comp.peer,
				"imm %u from %d", comp.imm, comp.peer);
			fail_if(inbox[comp.peer * 64] != 0xa0 + comp.peer,
				"slot %d holds 0x%x", comp.peer,
				inbox[comp.peer * 64]);
			seen |= 1u << comp.peer;
		}
		got++;
	}
	fail_if(seen != (((1u << c->world) - 1) & ~(1u << c->rank)),
		"immediates from 0x%x", seen);
	/* Then READ every peer's read-only region. */
	for (int p = 0; p < c->world; p++) {
		if (p == c->rank)
			continue;
		fail_if(ss_fabric_read(c->f, p, c->r[R_LOCAL], 0, R_READONLY, 0,
				       4096, 77),
			"read from %d", p);
		if (wait_op(c, 77, SS_OP_READ))
			return 1;
		fail_if(mismatch(local, 4096, p, 0) >= 0, "data of %d", p);
	}
	/* Nobody leaves before everyone has read: a last round of marks. */
	return finish_together(c);
}

Test(fabric, three_ranks_every_pair, .timeout = 240)
{
	struct job job = { .world = 3, .body = body_all_pairs };

	skip_without_device();
	cr_assert_eq(run_job(&job), 0);
}

Test(fabric, four_ranks_every_pair, .timeout = 240)
{
	struct job job = { .world = 4, .body = body_all_pairs };

	skip_without_device();
	cr_assert_eq(run_job(&job), 0);
}

/* ---- rights ------------------------------------------------------------- */

/* Rank 0 tries @op on region @index of rank 1 and expects a refusal. */
static int refused(struct rank_ctx *c, enum ss_op op, int index)
{
	struct ss_completion comp;
	int rc;

	if (c->rank == 1) {
		/* Wait until rank 0 is done or our connection dies. */
		for (int i = 0; i < 2000 && ss_fabric_peer_ok(c->f, 0); i++)
			if (ss_fabric_poll(c->f, &comp, 1, 10) == 1)
				break;
		return 0;
	}
	rc = op == SS_OP_READ ? ss_fabric_read(c->f, 1, c->r[R_LOCAL], 0, index,
					       0, 64, 5) :
				ss_fabric_write(c->f, 1, c->r[R_LOCAL], 0,
						index, 0, 64, 5);
	fail_if(rc != 0, "post: %s", ss_strerror(rc));
	if (wait_one(c, &comp))
		return 1;
	fail_if(comp.wr_id != 5 || comp.status != SS_EREMOTE,
		"%s into region %d completed with '%s', want a remote access error",
		ss_op_name(comp.op), index, ss_strerror(comp.status));
	/* shm keeps the connection; tell rank 1 we are done. */
	if (ss_fabric_peer_ok(c->f, 1))
		return signal_peer(c, 1, 3);
	return 0;
}

static int body_write_readonly(struct rank_ctx *c, struct job *job)
{
	(void)job;
	return refused(c, SS_OP_WRITE, R_READONLY);
}

static int body_read_inbox(struct rank_ctx *c, struct job *job)
{
	(void)job;
	return refused(c, SS_OP_READ, R_INBOX);
}

Test(fabric, write_into_read_only_region_is_a_remote_access_error,
     .timeout = 120)
{
	struct job job = { .world = 2, .body = body_write_readonly };

	skip_without_device();
	cr_assert_eq(run_job(&job), 0);
}

Test(fabric, read_from_write_only_inbox_is_a_remote_access_error,
     .timeout = 120)
{
	struct job job = { .world = 2, .body = body_read_inbox };

	skip_without_device();
	cr_assert_eq(run_job(&job), 0);
}

/* ---- handshake ---------------------------------------------------------- */

#define EXIT_TIMED_OUT 3

static int expect_mismatch(struct rank_ctx *c, int rc)
{
	const char *why = ss_last_error()->why;

	fprintf(stderr, "rank %d: connect: %s: %s\n", c->rank,
		ss_last_error()->what, why);
	if (rc == -ETIMEDOUT && !strstr(why, "differs"))
		return EXIT_TIMED_OUT; /* the other side saw it first */
	fail_if(rc != SS_EHANDSHAKE && rc != -ETIMEDOUT, "connect: %s",
		ss_strerror(rc));
	fail_if(!strstr(why, "differs"),
		"reason '%s' does not say what differs", why);
	return 0;
}

/* Both sides stop; at least one of them says what differed. */
static void assert_refused(struct job *job)
{
	int exits[2] = { -1, -1 };

	int me;

	run_job_status(job, exits);
	if (ranks_cluster(&me, NULL)) {
		/* one rank here: the other's status is on its own host */
		cr_assert(exits[me] == 0 || exits[me] == EXIT_TIMED_OUT,
			  "exit status %d", exits[me]);
		return;
	}
	cr_assert((exits[0] == 0 || exits[0] == EXIT_TIMED_OUT) &&
			  (exits[1] == 0 || exits[1] == EXIT_TIMED_OUT),
		  "exit statuses %d and %d", exits[0], exits[1]);
	cr_assert(exits[0] == 0 || exits[1] == 0,
		  "neither rank said what differed");
	/*
	 * Over shm the side that refuses leaves its reason in the other's
	 * control object, so the one that came first says it too, at once,
	 * instead of "no answer" at its timeout.
	 */
	if (!verbs())
		cr_assert(exits[0] == 0 && exits[1] == 0,
			  "exit statuses %d and %d: one side timed out",
			  exits[0], exits[1]);
}

static int body_never(struct rank_ctx *c, struct job *job)
{
	(void)job;
	fail_if(true, "connected despite the mismatch");
}

Test(fabric, mismatched_job_key_is_refused, .timeout = 120)
{
	struct job job = { .world = 2,
			   .body = body_never,
			   .on_connect_error = expect_mismatch,
			   .timeout_ms = 4000 };

	skip_without_device();
	job.job_key[1] = 0xbad;
	assert_refused(&job);
}

Test(fabric, mismatched_layout_is_refused, .timeout = 120)
{
	struct job job = { .world = 2,
			   .body = body_never,
			   .on_connect_error = expect_mismatch,
			   .timeout_ms = 4000 };

	skip_without_device();
	job.layout_hash[0] = 7;
	assert_refused(&job);
}

static int expect_timeout(struct rank_ctx *c, int rc)
{
	fail_if(rc != -ETIMEDOUT, "connect: %s", ss_strerror(rc));
	fail_if(!strstr(ss_last_error()->what, ":"),
		"detail does not name the missing peer: %s",
		ss_last_error()->what);
	return 0;
}

static int expect_timeout_body(struct rank_ctx *c, struct job *job)
{
	(void)job;
	fail_if(true, "connected to a peer that does not exist");
}

Test(fabric, missing_peer_times_out_naming_it, .timeout = 120)
{
	/* Rank 1 of a world of two, alone: its peer never comes. */
	struct job job = { .world = 2,
			   .body = expect_timeout_body,
			   .on_connect_error = expect_timeout,
			   .timeout_ms = 2000 };
	uint64_t start = ss_now_ns();

	skip_without_device();
	cr_assert_eq(run_rank(&job, 1, ranks_port_base(), 1), 0);
	cr_assert_lt(ss_now_ns() - start, 30000000000ull,
		     "the 2 s timeout took more than 30 s");
}

/* ---- a partial connect -------------------------------------------------- */

static int body_partial(struct rank_ctx *c, struct job *job)
{
	int late = job->late, other = 3 - late - c->rank;
	struct ss_completion comp;
	uint32_t imm;

	if (c->rank == late) /* let in by both, as a failed peer come back */
		return finish_together(c);
	fail_if(ss_fabric_peer_ok(c->f, late), "peer %d ok: never started",
		late);
	fail_if(!ss_fabric_peer_ok(c->f, other), "peer %d not connected",
		other);
	/* the two that answered work together */
	fail_if(signal_peer(c, other, 7) || wait_imm(c, other, &imm),
		"an immediate to and from peer %d", other);
	fail_if(imm != 7, "immediate %u from peer %d, want 7", imm, other);
	__atomic_add_fetch(partial_up, 1, __ATOMIC_SEQ_CST);
	for (int i = 0; i < 1200 && !ss_fabric_peer_ok(c->f, late); i++) {
		int n = ss_fabric_poll(c->f, &comp, 1, 50);

		c->marks += n == 1 && comp.op == SS_OP_RECV_IMM &&
			    comp.imm == FINAL_MARK;
	}
	fail_if(!ss_fabric_peer_ok(c->f, late) ||
			ss_fabric_peer_epoch(c->f, late) != 2,
		"late peer %d: ok %d, epoch %u", late,
		ss_fabric_peer_ok(c->f, late),
		ss_fabric_peer_epoch(c->f, late));
	return finish_together(c);
}

/*
 * Two ranks of 3 connect partially (as a rank that rejoins a job does):
 * at the 2 s timeout the third, not started, is failed, and the two go
 * on together; when it starts, both let it in as a failed peer that came
 * back (epoch 2): rank 2 connects to them, and they to rank 0 (lower
 * ranks accept) by their background retries.  Before, both connects
 * failed with -ETIMEDOUT.
 */
static void partial_connect(int late)
{
	struct job job = { .world = 3,
			   .body = body_partial,
			   .timeout_ms = 2000,
			   .one_comes_late = true,
			   .late = late };

	skip_without_device();
	partial_up = mmap(NULL, sizeof(*partial_up), PROT_READ | PROT_WRITE,
			  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(partial_up, MAP_FAILED);
	cr_assert_eq(run_job(&job), 0);
}

Test(fabric, a_partial_connect_goes_on_without_a_missing_peer, .timeout = 180)
{
	partial_connect(2);
}

Test(fabric, a_partial_connect_lets_in_a_late_lowest_rank, .timeout = 180)
{
	partial_connect(0);
}

/* ---- a peer that dies --------------------------------------------------- */

static int body_killed(struct rank_ctx *c, struct job *job)
{
	struct ss_completion comp;
	uint64_t deadline;
	uint32_t imm;

	(void)job;
	/* Both sides up before rank 1 dies. */
	if (c->rank == 1) {
		if (wait_imm(c, 0, &imm) || signal_peer(c, 0, 0))
			return 1;
		raise(SIGKILL); /* no goodbye */
	}
	if (signal_peer(c, 1, 0) || wait_imm(c, 1, &imm))
		return 1;
	ss_log_debug("rank 0: both up; reading from rank 1 until it fails");
	/* Keep reading from the dead peer: it must fail, not hang. */
	deadline = ss_deadline_ns(60000);
	for (uint64_t i = 0;; i++) {
		int rc = ss_fabric_read(c->f, 1, c->r[R_LOCAL], 0, R_SHARED, 0,
					4096, i);
		int n;

		if (rc == SS_EPEER)
			break; /* noticed while posting */
		fail_if(rc != 0, "read: %s", ss_strerror(rc));
		/*
		 * Noticed means an error completion, or the peer marked
		 * failed: a poll that merely times out is no notice.
		 */
		do {
			n = ss_fabric_poll(c->f, &comp, 1, 1000);
			fail_if(ss_deadline_passed(deadline),
				"the dead peer was not noticed in 60 s");
		} while (n == -ETIMEDOUT && ss_fabric_peer_ok(c->f, 1));
		ss_log_debug("rank 0: read %llu: poll %d, status %d",
			     (unsigned long long)i, n,
			     n == 1 ? comp.status : 0);
		if ((n == 1 && comp.status != 0) || !ss_fabric_peer_ok(c->f, 1))
			break;
		fail_if(n != 1, "poll: %s", ss_strerror(n));
	}
	ss_log_warn("rank 0 noticed the dead peer: %s: %s",
		    ss_last_error()->what, ss_last_error()->why);
	return 0;
}

Test(fabric, killed_peer_gives_an_error_not_a_hang, .timeout = 180)
{
	struct job job = { .world = 2, .body = body_killed };
	int failed;

	skip_without_device();
	failed = run_job(&job);
	/* rank 1 died of SIGKILL on purpose; rank 0 must have succeeded */
	cr_assert_eq(failed, 1, "%d ranks failed", failed);
}

/*
 * A peer that closes its endpoint in order (a rank at its end) has left:
 * over shm the operations to it fail, saying so, and no warning of a
 * failure is logged (every job's end would print one).
 */
static int body_closes(struct rank_ctx *c, struct job *job)
{
	uint64_t deadline = ss_deadline_ns(30000);
	uint32_t imm;

	(void)job;
	if (c->rank == 1) /* both up, then closed (run_rank closes it) */
		return wait_imm(c, 0, &imm) || signal_peer(c, 0, 0);
	if (signal_peer(c, 1, 0) || wait_imm(c, 1, &imm))
		return 1;
	for (uint64_t i = 0;; i++) {
		struct ss_completion comp;
		int rc = ss_fabric_read(c->f, 1, c->r[R_LOCAL], 0, R_SHARED, 0,
					64, i);

		if (rc == SS_EPEER)
			break; /* the post found it gone */
		fail_if(rc != 0, "read: %s", ss_strerror(rc));
		ss_fabric_poll(c->f, &comp, 1, 100);
		fail_if(ss_deadline_passed(deadline),
			"the closed peer was not noticed in 30 s");
	}
	fail_if(ss_fabric_peer_ok(c->f, 1), "peer 1 still taken for up");
	fail_if(!strstr(ss_last_error()->why, "it left"), "why: %s",
		ss_last_error()->why);
	return 0;
}

Test(fabric, a_peer_that_closes_in_order_has_left_not_failed, .timeout = 120)
{
	struct job job = { .world = 2, .body = body_closes };

	if (verbs())
		cr_skip_test("over verbs a close and a crash look alike (the "
			     "connection's teardown)");
	cr_assert_eq(run_job(&job), 0, "a rank failed (its message above)");
}

/* ---- options and limits ------------------------------------------------- */

Test(fabric, bad_options_are_refused)
{
	const char *addrs[] = { "127.0.0.1:1", "nocolon" };
	struct ss_fabric_options o;
	struct ss_fabric *f = (void *)1;
	enum ss_transport t;

	ss_fabric_options_init(&o);
	o.transport = SS_TRANSPORT_SHM;
	o.world = 0;
	cr_assert_eq(ss_fabric_open(&f, &o), SS_EUSAGE);
	cr_assert_null(f);
	o.world = 2;
	o.rank = 2;
	o.addrs = addrs;
	cr_assert_eq(ss_fabric_open(&f, &o), SS_EUSAGE);
	o.rank = 0;
	cr_assert_eq(ss_fabric_open(&f, &o), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->what, "rank 1 'nocolon'"), "%s",
		  ss_last_error()->what);
	cr_assert_eq(ss_transport_parse("--transport", "ib", &t), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->hint, "auto, verbs, shm"));
	cr_assert_eq(ss_transport_parse("--transport", "verbs", &t), 0);
	cr_assert_eq(t, SS_TRANSPORT_VERBS);
}

/* Drop CAP_IPC_LOCK, which lets root pin memory past the limit. */
static void drop_ipc_lock(void)
{
	struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];

	cr_assert_eq(syscall(SYS_capget, &h, d), 0);
	d[CAP_IPC_LOCK / 32].effective &= ~(1u << (CAP_IPC_LOCK % 32));
	cr_assert_eq(syscall(SYS_capset, &h, d), 0);
}

Test(fabric, memlock_limit_too_low_says_how_to_raise_it)
{
	char addr[1][64];
	const char *addrs[1];
	struct rlimit rl = { 256 * 1024, 256 * 1024 };
	struct ss_fabric_options o;
	struct ss_fabric *f;
	struct ss_region *r;

	if (!verbs())
		cr_skip_test("the memory lock limit applies to verbs only");
	skip_without_device();
	ranks_addrs(1, ranks_port_base(), addr, addrs);
	ss_fabric_options_init(&o);
	o.transport = SS_TRANSPORT_VERBS;
	o.world = 1;
	o.addrs = addrs;
	cr_assert_eq(ss_fabric_open(&f, &o), 0, "%s: %s", ss_last_error()->what,
		     ss_last_error()->why);
	drop_ipc_lock();
	cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
	cr_assert_eq(ss_fabric_alloc(f, 4 * MIB, SS_ACCESS_REMOTE_READ, &r),
		     -ENOMEM);
	cr_assert(strstr(ss_last_error()->why, "ulimit -l"), "%s",
		  ss_last_error()->why);
	cr_assert(strstr(ss_last_error()->hint, "memlock unlimited"), "%s",
		  ss_last_error()->hint);
	cr_assert(strstr(ss_last_error()->what, "RLIMIT_MEMLOCK"), "%s",
		  ss_last_error()->what);
	ss_fabric_close(&f);
	cr_assert_null(f);
}

/*
 * A rank killed with SIGKILL leaves its shared objects behind, naming its
 * pid.  When another process later gets that pid (pid_max is often
 * 32768), the address is still free: the owner is known by its pid and
 * its start time.  The test hands the dead rank's pid to a new process
 * through /proc/sys/kernel/ns_last_pid, which needs root.
 */
Test(fabric, a_dead_ranks_reused_pid_does_not_hold_its_address, .timeout = 60)
{
	char addr[2][64], ctl[128];
	const char *addrs[2];
	struct ss_fabric_options o;
	struct ss_fabric *f;
	pid_t dead, heir;
	FILE *last;
	int rc;

	if (verbs())
		cr_skip_test("shm objects only");
	ranks_addrs(2, ranks_port_base(), addr, addrs);
	ss_fabric_options_init(&o);
	o.transport = SS_TRANSPORT_SHM;
	o.world = 2;
	o.addrs = addrs;
	o.timeout_ms = 20000;
	snprintf(ctl, sizeof(ctl), "/dev/shm/ss-%s-ctl", addr[0]);
	unlink(ctl);
	/* rank 0 waits for a rank 1 that never comes, and is killed */
	dead = fork();
	if (dead == 0) {
		if (ss_fabric_open(&f, &o) == 0)
			ss_fabric_connect(f);
		_exit(1);
	}
	for (int i = 0; i < 200 && access(ctl, F_OK) != 0; i++)
		ss_sleep_ns(10000000);
	cr_assert_eq(access(ctl, F_OK), 0, "no %s", ctl);
	kill(dead, SIGKILL);
	waitpid(dead, NULL, 0);
	/* start times count in ticks of 10 ms: let one pass, at least */
	ss_sleep_ns(50000000);
	last = fopen("/proc/sys/kernel/ns_last_pid", "w");
	if (!last) {
		ranks_clean_ports();
		cr_skip_test("cannot choose the next pid (not root)");
	}
	fprintf(last, "%d", (int)dead - 1);
	if (fclose(last) != 0) {
		ranks_clean_ports();
		cr_skip_test("cannot choose the next pid");
	}
	heir = fork();
	if (heir == 0) {
		pause();
		_exit(0);
	}
	if (heir != dead) {
		kill(heir, SIGKILL);
		waitpid(heir, NULL, 0);
		ranks_clean_ports();
		cr_skip_test("pid %d was taken before the test could reuse it",
			     (int)dead);
	}
	rc = ss_fabric_open(&f, &o);
	kill(heir, SIGKILL);
	waitpid(heir, NULL, 0);
	cr_assert_eq(rc, 0, "%s: %s", ss_last_error()->what,
		     ss_last_error()->why);
	ss_fabric_close(&f);
	unlink(ctl);
}
