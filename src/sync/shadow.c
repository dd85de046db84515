// SPDX-License-Identifier: BSD-2-Clause
/*
 * The shadow thread: pinned where the plan says, it runs rounds back to
 * back for as long as it runs, slowed down only by the caps (rounds or
 * bytes per second) that leave bandwidth to the trainers.
 */
#include <errno.h>
#include <inttypes.h>
#include <string.h>

#include "sync_internal.h"

/* What the thread has done since it started, for the caps. */
struct ss_shadow_base {
	uint64_t start_ns, rounds, bytes;
};

/*
 * Sleep as long as it takes to bring this thread's rate back under the
 * caps, in slices of at most 10 ms so that a stop is not kept waiting.
 */
static void ss_shadow_cap(struct ss_sync *s, const struct ss_shadow_base *b)
{
	struct ss_sync_stats st;
	double elapsed, wait = 0;

	if (s->opts.max_rounds_per_s <= 0 && s->opts.max_bytes_per_s <= 0)
		return;
	ss_sync_get_stats(s, &st);
	elapsed = (double)(ss_now_ns() - b->start_ns) / 1e9;
	if (s->opts.max_rounds_per_s > 0)
		wait = (double)(st.rounds - b->rounds) /
			       s->opts.max_rounds_per_s -
		       elapsed;
	if (s->opts.max_bytes_per_s > 0) {
		double w = (double)(st.bytes_sent - b->bytes) /
				   s->opts.max_bytes_per_s -
			   elapsed;

		if (w > wait)
			wait = w;
	}
	while (wait > 0 &&
	       !atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		double slice = wait < 0.01 ? wait : 0.01;

		ss_sleep_ns((uint64_t)(slice * 1e9));
		wait -= slice;
	}
}

/* Someone to run a round with, or a peer asking to join. */
static bool ss_any_peer(struct ss_sync *s)
{
	return ss__any_alive(s) || ss__barrier_due(s);
}

/*
 * Whether trainers past the gap bound may wait for our rounds: only while
 * we run them with a live peer (not alone, nor while only a barrier or a
 * join is due, which apply no round).  Waiters are woken on a change, so
 * that none waits out its timeout for a shadow thread that went alone or
 * stopped; iterations run alone do not count toward the next gap.
 */
static void ss_shadow_bounds_gap(struct ss_sync *s, bool bound)
{
	if (atomic_load_explicit(&s->gap_bound, memory_order_relaxed) == bound)
		return;
	pthread_mutex_lock(&s->lock);
	if (bound)
		atomic_store(&s->round_iterations, atomic_load(&s->iterations));
	atomic_store(&s->gap_bound, bound);
	pthread_cond_broadcast(&s->round_cond);
	pthread_mutex_unlock(&s->lock);
}

/*
 * Whether a trainer waits (under s->lock): the gap reached, our rounds
 * running with a peer, the last one whole (a partial round, a peer left
 * out for the round timeout, says the next may be as slow: the trainers
 * do not wait on a stalled peer round after round), and no wait given up
 * since the last round.
 */
static bool ss_gap_holds_trainers(struct ss_sync *s)
{
	return ss__gap(s) >= (int64_t)s->opts.max_gap &&
	       atomic_load_explicit(&s->gap_bound, memory_order_relaxed) &&
	       !s->gap_last_partial && s->gap_gave_up != s->rounds + 1;
}

void ss__gap_wait(struct ss_sync *s)
{
	unsigned timeout_ms = __atomic_load_n(&s->timeout_ms, __ATOMIC_RELAXED);
	uint64_t start = ss_now_ns(),
		 deadline = start + timeout_ms * 1000000ull;
	bool waited = false, gave_up = false;

	pthread_mutex_lock(&s->lock);
	while (ss_gap_holds_trainers(s)) {
		struct timespec until;

		if (ss_now_ns() >= deadline) {
			/* the others go on too, and none waits again until
			 * a round is applied */
			gave_up = !s->gap_warned;
			s->gap_warned = true;
			s->gap_gave_up = s->rounds + 1;
			pthread_cond_broadcast(&s->round_cond);
			break;
		}
		waited = true;
		until.tv_sec = (time_t)(deadline / 1000000000ull);
		until.tv_nsec = (long)(deadline % 1000000000ull);
		pthread_cond_timedwait(&s->round_cond, &s->lock, &until);
	}
	if (waited) {
		s->gap_waits++;
		s->gap_wait_s += (double)(ss_now_ns() - start) / 1e9;
	}
	pthread_mutex_unlock(&s->lock);
	if (gave_up)
		ss_log_warn("sync: rank %d: a trainer waited the round "
			    "timeout (%u ms) for a round past the gap bound "
			    "(%" PRIu64
			    " iterations); the trainers go on until "
			    "one is applied (warned once)",
			    s->rank, timeout_ms, s->opts.max_gap);
}

static void *ss_shadow_main(void *arg)
{
	struct ss_sync *s = arg;
	struct ss_sync_stats st;
	struct ss_shadow_base base;

	if (s->slot && s->topo && ss_topo_is_this_machine(s->topo) &&
	    ss_topo_pin_thread(s->topo, s->slot) < 0)
		ss_log_warn("shadow: cannot pin to PU %d: %s", s->slot->pu,
			    ss_last_error()->why);
	ss_log_info("shadow: %s rounds start", ss_sync_algo_name(s->opts.algo));
	ss_sync_get_stats(s, &st);
	base.start_ns = ss_now_ns();
	base.rounds = st.rounds;
	base.bytes = st.bytes_sent;
	while (!atomic_load_explicit(&s->stop, memory_order_relaxed)) {
		int rc;
		bool alone, bound;

		pthread_mutex_lock(&s->fabric_lock);
		alone = !ss_any_peer(s);
		bound = ss__any_alive(s);
		if (alone) {
			/*
			 * Alone: no round to run, but a peer coming back must
			 * be reconnected (fabric progress) and its request to
			 * join heard (messages).
			 */
			ss__pump(s, 0);
			ss_fabric_progress(s->fabric);
		}
		pthread_mutex_unlock(&s->fabric_lock);
		ss_shadow_bounds_gap(s, bound);
		if (alone) {
			ss_sleep_ns(1000000);
			continue;
		}
		rc = ss_sync_round(s);
		if (rc < 0 && !s->thread_rc) {
			s->thread_rc = rc;
			ss_log_warn("shadow: round failed: %s",
				    ss_strerror(rc));
		}
		ss_shadow_cap(s, &base);
	}
	ss_shadow_bounds_gap(s, false);
	/* Peers in a round with us need not wait out their timeout. */
	pthread_mutex_lock(&s->fabric_lock);
	ss__stop_peers(s);
	pthread_mutex_unlock(&s->fabric_lock);
	return NULL;
}

int ss_shadow_start(struct ss_sync *s, struct ss_topo *topo,
		    const struct ss_plan_slot *slot)
{
	int rc;

	if (s->running)
		return ss_error_set(-EBUSY, "already running", NULL,
				    "shadow thread");
	s->topo = topo;
	s->slot = slot;
	s->thread_rc = 0;
	atomic_store(&s->stop, false);
	rc = pthread_create(&s->thread, NULL, ss_shadow_main, s);
	if (rc)
		return ss_error_set(-rc, NULL, NULL,
				    "starting the shadow thread");
	s->running = true;
	return 0;
}

int ss_shadow_stop(struct ss_sync *s)
{
	if (!s->running)
		return 0;
	atomic_store(&s->stop, true);
	pthread_join(s->thread, NULL);
	s->running = false;
	return s->thread_rc;
}
