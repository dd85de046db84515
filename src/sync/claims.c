// SPDX-License-Identifier: BSD-2-Clause
/*
 * Data handed out by chunks: rank 0's claims region holds a counter that
 * every rank (rank 0 too, through the NIC) advances by one-sided
 * fetch-and-add, so the next chunk goes to whoever asks first and every
 * chunk to exactly one rank.  Trainers ask from their own threads; the
 * fetch-adds are posted and completed by whichever thread drives the
 * fabric (a round's waits, the shadow thread, or the asking trainer
 * itself when nobody does), so trainers never share the fabric's queues.
 *
 * A rank 0 started again (launch --restarts) has a new counter, at 0:
 * claimed from at once, it handed out the chunks from the first again
 * (a 1-epoch job trained 1.5 times its file).  So the others claim from a
 * connection of rank 0 only once its state says its counter is ready,
 * and a restarted rank 0 sets its counter, while it joins, from the
 * highest chunk the others say they have claimed (each shows its own in
 * its state).  A chunk whose claim was in flight when rank 0 died may
 * go untrained, and one the dead rank 0 was training, past the others'
 * highest, is trained again.
 */
#include <byteswap.h>
#include <endian.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include "sync_internal.h"

/* Our highest claim into our state, with rank 0's readiness kept. */
static void ss_claims_show(struct ss_sync *s)
{
	uint32_t was = be32toh(s->state->claims);

	s->state->claims =
		htobe32((was & SS_STATE_COUNTER_READY) | s->claims_high);
}

void ss__claims_ready(struct ss_sync *s)
{
	__atomic_store_n(
		&s->state->claims,
		htobe32(be32toh(s->state->claims) | SS_STATE_COUNTER_READY),
		__ATOMIC_RELEASE);
}

/*
 * Whether rank 0's present connection has shown its counter ready; if
 * not, READ its state (again once SS_CLAIM_CHECK_NS passed).  Under
 * claim_lock.
 */
#define SS_CLAIM_CHECK_NS (20 * 1000000ull)
static bool ss_counter_ready(struct ss_sync *s)
{
	uint32_t epoch = ss_fabric_peer_epoch(s->fabric, 0);

	if (s->rank == 0 || s->counter_epoch == epoch)
		return true;
	if (s->check_in_flight || ss_now_ns() < s->check_retry_ns)
		return false;
	if (ss_fabric_read(s->fabric, 0, s->r[SS_R_CLAIMS],
			   8 * (1 + SS_CLAIM_CHECK), SS_R_STATE,
			   offsetof(struct ss__state, claims), sizeof(uint32_t),
			   SS_WR_ID(0, SS_WR_CLAIM) | (uint64_t)SS_CLAIM_CHECK
							      << 40) == 0) {
		s->check_in_flight = true;
		s->check_epoch = epoch;
	}
	return false;
}

void ss__claims_post(struct ss_sync *s)
{
	/*
	 * Rank 0 cut off (a link down, a host not yet back): wait for the
	 * fabric to reconnect it; ss_sync_claim's deadline bounds the wait.
	 */
	if (s->rank != 0 && !ss_fabric_peer_ok(s->fabric, 0))
		return;
	pthread_mutex_lock(&s->claim_lock);
	if (!ss_counter_ready(s)) {
		pthread_mutex_unlock(&s->claim_lock);
		return;
	}
	for (int i = 0;
	     i < SS_CLAIM_SLOTS &&
	     s->claims_wanted > s->claims_in_flight + (int)s->claim_count;
	     i++) {
		if (s->claim_busy[i] || s->claim_rc)
			continue;
		if (ss_fabric_fetch_add(s->fabric, 0, s->r[SS_R_CLAIMS],
					8 * (size_t)(1 + i), SS_R_CLAIMS, 0, 1,
					SS_WR_ID(0, SS_WR_CLAIM) |
						(uint64_t)i << 40) < 0)
			break; /* rank 0 just failed: tried again once back */
		s->claim_busy[i] = true;
		s->claims_in_flight++;
	}
	pthread_mutex_unlock(&s->claim_lock);
}

/* Rank 0's readiness READ, or our own seeding fetch-add, completed. */
static void ss_claims_control_done(struct ss_sync *s,
				   const struct ss_completion *c, int i)
{
	uint32_t word;

	pthread_mutex_lock(&s->claim_lock);
	if (i == SS_CLAIM_SEED) {
		s->seed_done = true;
		s->seed_status = c->status;
	} else {
		memcpy(&word, &s->claim_words[1 + SS_CLAIM_CHECK],
		       sizeof(word));
		s->check_in_flight = false;
		if (c->status == 0 && (be32toh(word) & SS_STATE_COUNTER_READY))
			s->counter_epoch = s->check_epoch;
		else
			s->check_retry_ns = ss_now_ns() + SS_CLAIM_CHECK_NS;
	}
	pthread_mutex_unlock(&s->claim_lock);
}

void ss__claim_done(struct ss_sync *s, const struct ss_completion *c)
{
	int i = SS_WR_CLAIM_SLOT(c->wr_id);
	uint64_t v = s->claim_words[1 + i];

	if (i >= SS_CLAIM_SLOTS) {
		ss_claims_control_done(s, c, i);
		return;
	}

	/*
	 * Some NICs reply in big-endian on little-endian hosts; counts stay
	 * far below 2^32, so a value that is not is one of those.
	 */
	if (v >> 32)
		v = bswap_64(v);
	pthread_mutex_lock(&s->claim_lock);
	s->claim_busy[i] = false;
	s->claims_in_flight--;
	if (c->status == SS_EPEER) {
		/*
		 * Lost with the connection: rank 0 may have counted it, and
		 * then that chunk goes untrained.  The claim is made again
		 * once rank 0 is back.
		 */
		ss_log_warn("sync: a chunk claim was lost with the connection "
			    "to rank 0: that chunk may go untrained");
	} else if (c->status) {
		s->claim_rc = c->status;
	} else {
		s->claim_queue[(s->claim_head + s->claim_count) %
			       SS_CLAIM_QUEUE] = v;
		s->claim_count++;
		if (v < SS_STATE_COUNTER_READY && v + 1 > s->claims_high) {
			s->claims_high = (uint32_t)v + 1;
			ss_claims_show(s);
		}
	}
	pthread_cond_broadcast(&s->claim_cond);
	pthread_mutex_unlock(&s->claim_lock);
}

int ss_sync_claim(struct ss_sync *s, uint64_t *chunk)
{
	unsigned timeout_ms = __atomic_load_n(&s->timeout_ms, __ATOMIC_RELAXED);
	uint64_t deadline = ss_deadline_ns(4 * timeout_ms + 5000),
		 stall = ss_deadline_ns(timeout_ms);
	int rc = 0;

	pthread_mutex_lock(&s->claim_lock);
	s->claims_wanted++;
	while (!s->claim_count && !s->claim_rc) {
		if (s->rank != 0 &&
		    __atomic_load_n(&s->left[0], __ATOMIC_RELAXED)) {
			/* rank 0 left when it had claimed the last chunk */
			s->claims_wanted--;
			pthread_mutex_unlock(&s->claim_lock);
			*chunk = UINT64_MAX;
			return 0;
		}
		if (ss_deadline_passed(deadline)) {
			rc = -ETIMEDOUT;
			break;
		}
		/* said once a stall, not left silent until the failure */
		if (ss_deadline_passed(stall) && !s->claim_stall_said) {
			s->claim_stall_said = true;
			ss_log_warn("sync: no chunk of the data from rank 0, "
				    "which holds the chunk counter, for %u ms: "
				    "waiting up to %u ms more for it to come "
				    "back (launch --restarts starts it again)",
				    timeout_ms, 3 * timeout_ms + 5000);
		}
		pthread_mutex_unlock(&s->claim_lock);
		if (pthread_mutex_trylock(&s->fabric_lock) == 0) {
			/* nobody drives the fabric: we do */
			ss__claims_post(s);
			ss__pump(s, 1);
			pthread_mutex_unlock(&s->fabric_lock);
			pthread_mutex_lock(&s->claim_lock);
		} else {
			/* the driver posts ours in its next wait (1 ms) */
			struct timespec ts;

			clock_gettime(CLOCK_MONOTONIC, &ts);
			ts.tv_nsec += 2000000;
			if (ts.tv_nsec >= 1000000000) {
				ts.tv_sec++;
				ts.tv_nsec -= 1000000000;
			}
			pthread_mutex_lock(&s->claim_lock);
			if (!s->claim_count && !s->claim_rc)
				pthread_cond_timedwait(&s->claim_cond,
						       &s->claim_lock, &ts);
		}
	}
	if (rc == 0 && s->claim_count) {
		if (s->claim_stall_said)
			ss_log_warn("sync: chunks of the data come again");
		s->claim_stall_said = false;
		*chunk = s->claim_queue[s->claim_head];
		s->claim_head = (s->claim_head + 1) % SS_CLAIM_QUEUE;
		s->claim_count--;
	} else if (rc == 0) {
		rc = s->claim_rc;
	}
	s->claims_wanted--;
	pthread_mutex_unlock(&s->claim_lock);
	if (rc < 0)
		return ss_error_set(
			rc,
			rc == -ETIMEDOUT ?
				"no answer from rank 0, which holds the chunk counter (it failed and has not come back)" :
				"rank 0, which holds the chunk counter, refused it",
			"see rank 0's own messages",
			"claiming a chunk of the data (rank %d)", s->rank);
	return 0;
}

/*
 * Rank 0's counter to @next, through the fabric as every claim (the NIC
 * may keep it in its own byte order), from 0 where it was; then shown
 * ready.  @why: for the log.
 */
static int ss_claims_set(struct ss_sync *s, uint32_t next, uint64_t deadline,
			 const char *why)
{
	int rc;

	s->seed_done = false;
	rc = ss_fabric_fetch_add(s->fabric, 0, s->r[SS_R_CLAIMS],
				 8 * (1 + SS_CLAIM_SEED), SS_R_CLAIMS, 0, next,
				 SS_WR_ID(0, SS_WR_CLAIM) |
					 (uint64_t)SS_CLAIM_SEED << 40);
	while (rc == 0 && !s->seed_done && !ss_deadline_passed(deadline))
		ss__pump(s, 1);
	if (rc == 0)
		rc = !s->seed_done ? -ETIMEDOUT : s->seed_status;
	if (rc < 0)
		return ss_error_set(rc, NULL, "start this rank again",
				    "sync: rank 0 setting its chunk counter to "
				    "%u",
				    next);
	ss_log_info("sync: %s: chunks counted from %u", why, next);
	ss__claims_ready(s);
	return 0;
}

int ss__claims_seed(struct ss_sync *s, uint64_t deadline)
{
	uint32_t next = 0;

	/* the others' highest claims: none claims from us until we are ready */
	for (int p = 1; p < s->world; p++) {
		const struct ss__state *view;
		uint32_t high;

		if (!ss_fabric_peer_ok(s->fabric, p) ||
		    !(view = ss__read_view(s, p, deadline)))
			continue;
		high = be32toh(view->claims) & ~SS_STATE_COUNTER_READY;
		if (high > next)
			next = high;
	}
	return ss_claims_set(s, next, deadline,
			     "rank 0 started again, where the others are");
}

int ss__claims_from(struct ss_sync *s, uint64_t deadline)
{
	uint64_t from = s->opts.claims_from;

	if (s->rank != 0 || from == 0) {
		ss__claims_ready(s);
		return 0;
	}
	if (from >= SS_STATE_COUNTER_READY)
		return ss_error_set(SS_EUSAGE, "past the counter's range",
				    "resume from a checkpoint this job wrote",
				    "sync: chunks claimed %llu",
				    (unsigned long long)from);
	return ss_claims_set(s, (uint32_t)from, deadline, "a resumed job");
}

uint64_t ss_sync_claimed(struct ss_sync *s)
{
	uint64_t v;

	if (s->rank != 0)
		return __atomic_load_n(&s->claims_high, __ATOMIC_RELAXED);
	/* counts stay far below 2^32: a value that is not is the NIC's
	 * byte order (ss__claim_done) */
	v = __atomic_load_n(&s->claim_words[0], __ATOMIC_RELAXED);
	return v >> 32 ? bswap_64(v) : v;
}
