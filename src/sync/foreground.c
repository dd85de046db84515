// SPDX-License-Identifier: BSD-2-Clause
/*
 * The foreground baseline: every trainer stops every k iterations at a
 * bounded barrier while the last to come runs a round.
 */
#include <errno.h>
#include <time.h>

#include "sync_internal.h"

int ss_sync_set_trainers(struct ss_sync *s, int trainers)
{
	pthread_condattr_t attr;

	if (trainers < 1 || s->fg_init)
		return ss_error_set(-EINVAL,
				    trainers < 1 ? "must be at least 1" :
						   "already set",
				    NULL, "foreground trainers %d", trainers);
	pthread_mutex_init(&s->fg_lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&s->fg_cond, &attr);
	pthread_condattr_destroy(&attr);
	s->trainers = trainers;
	s->fg_init = true;
	return 0;
}

/* Release everyone waiting; the caller holds the lock. */
static void ss_fg_release(struct ss_sync *s)
{
	s->fg_waiting = 0;
	s->fg_generation++;
	pthread_cond_broadcast(&s->fg_cond);
}

/* 4 x the round timeout + 5 s from now, on CLOCK_MONOTONIC. */
static struct timespec ss_fg_until(const struct ss_sync *s)
{
	uint64_t ns = ss_now_ns() + (4ull * __atomic_load_n(&s->timeout_ms,
							    __ATOMIC_RELAXED) +
				     5000) * 1000000ull;

	return (struct timespec){ (time_t)(ns / 1000000000u),
				  (long)(ns % 1000000000u) };
}

/*
 * Wait until every trainer still taking part is here, at most 4 x the
 * round timeout + 5 s, and while the round runs (a barrier's takes longer
 * than that when a peer is gone; every wait in it is bounded).  The last
 * to come is the one that goes on first (@last), like
 * PTHREAD_BARRIER_SERIAL_THREAD.
 */
static int ss_fg_wait(struct ss_sync *s, bool *last)
{
	struct timespec until = ss_fg_until(s);
	unsigned generation;
	int rc = 0;

	*last = false;
	pthread_mutex_lock(&s->fg_lock);
	generation = s->fg_generation;
	if (++s->fg_waiting >= s->trainers) {
		*last = true;
		ss_fg_release(s);
	}
	while (!*last && generation == s->fg_generation && rc != ETIMEDOUT) {
		rc = pthread_cond_timedwait(&s->fg_cond, &s->fg_lock, &until);
		if (rc == ETIMEDOUT && s->fg_running) {
			until = ss_fg_until(s);
			rc = 0;
		}
	}
	if (!*last && generation != s->fg_generation && s->fg_need_last) {
		/* released by a trainer leaving: one of us goes first */
		s->fg_need_last = false;
		*last = true;
	}
	if (!*last && generation == s->fg_generation) {
		s->fg_waiting--; /* gave up: no longer waiting */
		pthread_mutex_unlock(&s->fg_lock);
		return ss_error_set(
			-ETIMEDOUT, "other trainers did not come",
			"a trainer that stops must call ss_sync_foreground_leave",
			"foreground barrier of %d trainers", s->trainers);
	}
	pthread_mutex_unlock(&s->fg_lock);
	return 0;
}

/* The last to come runs the round: the others wait as long as it runs. */
static void ss_fg_set_running(struct ss_sync *s, bool running)
{
	pthread_mutex_lock(&s->fg_lock);
	s->fg_running = running;
	pthread_mutex_unlock(&s->fg_lock);
}

int ss_sync_foreground(struct ss_sync *s)
{
	bool last;
	int rc;

	if (!s->fg_init)
		return ss_error_set(-EINVAL, "no trainer count",
				    "call ss_sync_set_trainers first",
				    "foreground round");
	/* Everyone stops; the last to come runs the round; all go on. */
	rc = ss_fg_wait(s, &last);
	if (rc < 0)
		return rc;
	if (last) {
		ss_fg_set_running(s, true);
		s->fg_rc = ss_sync_round(s);
		ss_fg_set_running(s, false);
	}
	rc = ss_fg_wait(s, &last);
	return rc < 0 ? rc : s->fg_rc;
}

void ss_sync_foreground_leave(struct ss_sync *s)
{
	if (!s->fg_init)
		return;
	pthread_mutex_lock(&s->fg_lock);
	s->trainers--;
	if (s->fg_waiting > 0 && s->fg_waiting >= s->trainers) {
		s->fg_need_last = true; /* none of them came last */
		ss_fg_release(s); /* the others need not wait for us */
	}
	pthread_mutex_unlock(&s->fg_lock);
}
