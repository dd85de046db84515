// SPDX-License-Identifier: BSD-2-Clause
/*
 * The proxy thread: the one thread that drives the table endpoint.  It
 * posts the clients' lookups and pushes as they come, takes every
 * completion, and applies the peers' gradients to our shard.  One thread
 * owns the queue pairs, so nothing on the data path takes a lock, and the
 * READs of all clients to one owner go out back to back.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "table_internal.h"

/* Whether any of the proxy's operations has yet to complete. */
static bool ss_in_flight(const struct ss_table *tb)
{
	for (int p = 0; p < tb->world; p++)
		if (tb->flight[p] > 0)
			return true;
	return false;
}

/*
 * A peer that came back (a new process, or ours reconnected): our log at
 * it starts again from zero, and it is sent a hello before any entry of
 * the new log (ss__table_post_pushes waits for that).  Its log at us is
 * restarted when its hello comes (ss_completed), not here: the fabric
 * may deliver the entries it sends after its hello before we see the new
 * epoch, and a reset here then put the two counts out of step for good.
 */
static void ss_peer_epochs(struct ss_table *tb, uint32_t *epoch)
{
	for (int p = 0; p < tb->world; p++) {
		uint32_t e = ss_fabric_peer_epoch(tb->fabric, p);
		struct ss__table_outbound *ob = &tb->out[p];

		/* for the flushing and barrier threads (peer_live) */
		atomic_store_explicit(&tb->peer_live[p],
				      ss_fabric_peer_ok(tb->fabric, p),
				      memory_order_relaxed);
		if (p == tb->rank || e == epoch[p])
			continue;
		tb->hello_due[p] = true;
		if (epoch[p]) {
			/* what its old process had yet to apply is lost, and
			 * what we had placed for it (in places of the old log) */
			if (ob->tail > ob->head)
				ss__table_count(&tb->st.dropped,
						ob->tail - ob->head);
			__atomic_store_n(&ob->head, 0, __ATOMIC_RELEASE);
			__atomic_store_n(&ob->tail, 0, __ATOMIC_RELEASE);
			ob->posted = 0;
			ob->head_reading = false;
		}
		epoch[p] = e;
	}
}

static void ss_completed(struct ss_table *tb, const struct ss_completion *c)
{
	if (c->peer >= 0 && c->peer < tb->world)
		tb->answered_ns[c->peer] = ss_now_ns();
	if (c->op != SS_OP_RECV_IMM && c->peer >= 0 && c->peer < tb->world)
		tb->flight[c->peer] -= ss__table_wrs(c->wr_id);
	if (c->op == SS_OP_RECV_IMM && (c->imm & SS__IMM_BARRIER)) {
		/* a hello from a new process replaces what its old one said */
		atomic_store(&tb->barrier_seen[c->peer],
			     c->imm & ~(SS__IMM_BARRIER | SS__IMM_HELLO));
		if (c->imm & SS__IMM_HELLO) {
			/* its log at us starts again: its entries follow */
			tb->consumed[c->peer] = 0;
			tb->queued[c->peer] = 0;
			atomic_store(&tb->head_out[c->peer], 0);
			atomic_store(&tb->hello_seen[c->peer], true);
		}
		return;
	}
	if (c->op == SS_OP_RECV_IMM) {
		ss__table_log_arrived(tb, c);
		return;
	}
	switch (SS__WR_KIND(c->wr_id)) {
	case SS__WR_LOOKUP:
		ss__table_lookup_done(tb, c);
		break;
	case SS__WR_HEAD:
		ss__table_head_done(tb, c);
		break;
	case SS__WR_LOG:
		ss__table_push_done(tb, c);
		break;
	default:
		break;
	}
}

/* Tell every peer (or one, @only) barrier number @imm; false when some
 * live one's queue has no room, or took none. */
static bool ss_send_barrier(struct ss_table *tb, int only, uint32_t imm)
{
	for (int p = 0; p < tb->world; p++)
		if (p != tb->rank && (only < 0 || p == only) &&
		    ss_fabric_peer_ok(tb->fabric, p) &&
		    tb->flight[p] >= tb->max_flight)
			return false;
	for (int p = 0; p < tb->world; p++) {
		if (p == tb->rank || (only >= 0 && p != only) ||
		    !ss_fabric_peer_ok(tb->fabric, p))
			continue;
		if (ss_fabric_write_imm(tb->fabric, p, tb->r_local, 0,
					SS_TABLE_R_LOG, 0, 0, imm,
					SS__WR(SS__WR_BARRIER, 0, 0)) == 0)
			ss__table_posted(tb, p, 1);
		else if (ss_fabric_peer_ok(tb->fabric, p))
			/* not sent to a live peer (a stalled one): the
			 * hello or barrier is sent again later (a barrier
			 * number seen twice is seen once) */
			return false;
	}
	return true;
}

/*
 * A barrier asked for: tell every peer, after all we sent before it.
 * And a hello to each peer that has (re)connected: the barriers we have
 * sent so far.
 */
static bool ss_post_barrier(struct ss_table *tb)
{
	uint32_t want = atomic_load(&tb->barrier_wanted),
		 sent = atomic_load(&tb->barrier_sent);
	bool did = false;

	for (int p = 0; p < tb->world; p++)
		if (tb->hello_due[p] &&
		    ss_send_barrier(tb, p,
				    SS__IMM_BARRIER | SS__IMM_HELLO | sent)) {
			tb->hello_due[p] = false;
			did = true;
		}
	if (want == sent || !ss_send_barrier(tb, -1, SS__IMM_BARRIER | want))
		return did;
	atomic_store(&tb->barrier_sent, want);
	return true;
}

/* Whether a client has posted anything the proxy has yet to take. */
static bool ss_work_posted(struct ss_table *tb)
{
	/* a flush waits for the heads, which the proxy reads */
	if (atomic_load(&tb->barrier_wanted) !=
		    atomic_load(&tb->barrier_sent) ||
	    atomic_load(&tb->flushing))
		return true;
	for (int c = 0; c < tb->opts.clients; c++) {
		struct ss__table_client *cl = &tb->client[c];

		if (atomic_load(&cl->push_tail) != atomic_load(&cl->push_head))
			return true;
		for (int s = 0; s < tb->opts.depth; s++)
			if (atomic_load(&cl->lookup[s].state) ==
			    SS__LOOKUP_POSTED)
				return true;
	}
	return false;
}

/*
 * Sleep until a client posts, at most a millisecond.  The flag is set
 * before the last look for work, and a client sets its work before it
 * looks at the flag (both sequentially consistent), and signals under the
 * lock the sleeper waits with: no wakeup is lost.
 */
static void ss_proxy_sleep(struct ss_table *tb)
{
	struct timespec until;

	pthread_mutex_lock(&tb->idle_lock);
	atomic_store(&tb->sleeping, true);
	if (!ss_work_posted(tb) && !atomic_load(&tb->stop)) {
		clock_gettime(CLOCK_MONOTONIC, &until);
		until.tv_nsec += 1000000;
		if (until.tv_nsec >= 1000000000) {
			until.tv_sec++;
			until.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&tb->idle_cond, &tb->idle_lock, &until);
	}
	atomic_store(&tb->sleeping, false);
	pthread_mutex_unlock(&tb->idle_lock);
}

void ss__table_wake(struct ss_table *tb)
{
	if (!atomic_load(&tb->sleeping))
		return;
	pthread_mutex_lock(&tb->idle_lock);
	pthread_cond_signal(&tb->idle_cond);
	pthread_mutex_unlock(&tb->idle_lock);
}

/*
 * Fail the peers that have left operations unanswered past the silence
 * bound: what is in flight to them completes with an error (lookups get
 * zero rows, pushes count as dropped), and nobody waits on them again.
 */
static void ss_fail_silent(struct ss_table *tb)
{
	uint64_t now = ss_now_ns();

	for (int p = 0; p < tb->world; p++) {
		char why[128];

		if (p == tb->rank || tb->flight[p] <= 0 ||
		    now - tb->answered_ns[p] < ss__table_silence_ns(tb))
			continue;
		snprintf(why, sizeof(why),
			 "%d table operations unanswered for %.0f s: its host "
			 "is down or unreachable",
			 tb->flight[p],
			 (double)(now - tb->answered_ns[p]) / 1e9);
		ss_log_warn("table: peer %d: %s", p, why);
		ss_fabric_fail_peer(tb->fabric, p, why);
		tb->answered_ns[p] = now; /* once: its completions follow */
	}
}

void *ss__table_proxy(void *arg)
{
	struct ss_table *tb = arg;
	uint32_t *epoch = calloc((size_t)tb->world, sizeof(uint32_t));
	struct ss_completion c[64];
	unsigned idle = 0;
	uint64_t progressed = ss_now_ns();

	if (tb->opts.topo && tb->opts.proxy_slot &&
	    ss_topo_is_this_machine(tb->opts.topo) &&
	    ss_topo_pin_thread(tb->opts.topo, tb->opts.proxy_slot) < 0)
		ss_log_warn("table: proxy thread not pinned: %s",
			    ss_last_error()->why);
	while (!atomic_load_explicit(&tb->stop, memory_order_relaxed)) {
		bool did = false;
		int n;

		if (epoch)
			ss_peer_epochs(tb, epoch);
		did |= ss_post_barrier(tb);
		did |= ss__table_post_lookups(tb);
		did |= ss__table_post_pushes(tb);
		n = ss_fabric_poll(tb->fabric, c, 64, 0);
		for (int i = 0; i < n; i++)
			ss_completed(tb, &c[i]);
		did |= n > 0;
		did |= ss__table_apply_logs(tb);
		if (ss_in_flight(tb))
			ss_fail_silent(tb);
		/*
		 * The fabric's slow work (dead peers noticed, failed ones
		 * retried) on time, not after thousands of empty polls: a
		 * proxy that mostly sleeps polls a thousand times a second.
		 */
		if (ss_now_ns() - progressed > 50000000ull) {
			ss_fabric_progress(tb->fabric);
			progressed = ss_now_ns();
		}
		/*
		 * Idle: spin a little (a lookup posted now is served at
		 * once); with operations in flight, nap briefly between
		 * polls for their completions; with none, sleep until a
		 * client posts, or a millisecond (what the peers WRITE into
		 * our logs is taken then).  An idle proxy takes no core from
		 * the trainers.
		 */
		if (did)
			idle = 0;
		else if (++idle > 50 && ss_in_flight(tb))
			ss_sleep_ns(10000);
		else if (idle > 50)
			ss_proxy_sleep(tb);
	}
	free(epoch);
	return NULL;
}
