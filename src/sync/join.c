// SPDX-License-Identifier: BSD-2-Clause
/*
 * The start of the rounds: a barrier at a fresh start, or joining ranks
 * that run already (a restarted or late rank), reseeding from one.
 */
#include <endian.h>
#include <errno.h>
#include <string.h>

#include "sync_internal.h"

/*
 * Our shard of the S-EASGD center and of the S-BMUF global model start
 * from the replica.
 */
void ss__state_from_replica(struct ss_sync *s)
{
	size_t own = ss__shard_off(s, s->rank),
	       own_len = ss__shard_len(s, s->rank);

	ss__copy(s->center, s->w + own, own_len);
	if (s->w_g) {
		ss__copy(s->w_g, s->w + own, own_len);
		memset(s->momentum, 0, own_len * sizeof(float));
	}
}

/* @p's view, READ into SNAP, then copied: NULL when the READ failed. */
const struct ss__state *ss__read_view(struct ss_sync *s, int p,
				      uint64_t deadline)
{
	size_t off = ss__view_off(s->n), len = ss__state_bytes(s->world);
	struct ss__state *st = (struct ss__state *)((char *)s->snap + off);

	memset(st, 0, len);
	s->reads_ok[p] = false;
	if (ss__post_read(s, p, SS_R_SNAP, off, SS_R_STATE, 0, len))
		return NULL;
	ss__wait_sends(s, deadline);
	memcpy(s->view, st, len);
	return s->reads_ok[p] ? s->view : NULL;
}

/*
 * The first connected peer that has begun (the job runs already: we were
 * restarted, or came late), or -1.  No peer can have begun at a fresh
 * start, because its begin barrier waits for us.
 */
static int ss_sync_find_running(struct ss_sync *s)
{
	for (int p = 0; p < s->world; p++) {
		const struct ss__state *view;

		if (p == s->rank || !ss_fabric_peer_ok(s->fabric, p))
			continue;
		view = ss__read_view(s, p, ss__deadline(s));
		if (view && be32toh(view->began) == SS_STATE_BEGAN)
			return p;
	}
	return -1;
}

/*
 * Our replica READ from @h (in a barrier: it holds still), and the
 * S-EASGD center and S-BMUF state started from it; false when it did not
 * arrive by @deadline.
 */
static bool ss_reseed_from(struct ss_sync *s, int h, uint64_t deadline)
{
	s->reads_ok[h] = false;
	if (ss__post_read(s, h, SS_R_PARAMS, 0, SS_R_PARAMS, 0,
			  s->n * sizeof(float)) == 0)
		ss__wait_sends(s, deadline);
	if (!s->reads_ok[h])
		return false;
	ss__state_from_replica(s);
	pthread_mutex_lock(&s->lock);
	s->reseeds++;
	pthread_mutex_unlock(&s->lock);
	ss_log_warn("sync: rank %d reseeded its replica from rank %d", s->rank,
		    h);
	return true;
}

/*
 * Join ranks that run already, through @h, which has begun: ask every
 * peer to let us in (each runs a barrier before its next round), wait
 * until @h is in that barrier (its replica no longer moves with rounds),
 * READ its replica into ours, start the S-EASGD center and S-BMUF state
 * from it, and only then come to the barrier ourselves, with @h's barrier
 * number: from the round after it we contribute like everyone.
 */
static int ss_sync_join(struct ss_sync *s, int h)
{
	uint64_t deadline = ss_deadline_ns(4 * s->timeout_ms + 5000);

	ss_log_warn(
		"sync: rank %d starts while rank %d runs: joining, reseeding from rank %d",
		s->rank, h, h);
	for (int p = 0; p < s->world; p++)
		if (p != s->rank && ss_fabric_peer_ok(s->fabric, p))
			ss__send(s, p, SS_R_SNAP, 0, SS_R_INBOX, 0, 0,
				 SS_MSG_JOIN);
	while (s->seen[SS_MSG_BARRIER][h] == 0x0fffffffu) {
		if (ss_deadline_passed(deadline) ||
		    !ss_fabric_peer_ok(s->fabric, h))
			return ss_error_set(
				-ETIMEDOUT, "it did not let us in",
				"see that rank's own messages; start this rank again",
				"sync: rank %d joining through rank %d",
				s->rank, h);
		ss__pump(s, 1);
	}
	if (!ss_reseed_from(s, h, deadline))
		return ss_error_set(
			-ETIMEDOUT, "its replica did not arrive",
			"start this rank again; it reseeds from a healthy peer",
			"sync: rank %d reseeding %zu floats from rank %d",
			s->rank, s->n, h);
	/* a restarted rank 0 holds a new chunk counter: from where the job is */
	if (s->rank == 0 && ss__claims_seed(s, deadline) < 0)
		return ss_last_error()->code;
	s->barrier_seq = s->seen[SS_MSG_BARRIER][h];
	s->barrier_numbered = true;
	return ss__barrier(s);
}

/*
 * After a partition both sides went on, each without the other, each
 * with its own members and barrier numbers; on the link's return they
 * must not meet as equals (their barriers would not line up).  The side
 * whose members' lowest rank is the higher was cut off: its ranks rejoin
 * the others as restarted ones do, giving up what they trained alone.
 */
int ss__cut_off_through(struct ss_sync *s)
{
	uint32_t mine = be32toh(s->state->lowest);

	for (int p = 0; p < s->world; p++) {
		const struct ss__state *view;
		uint32_t epoch;

		if (p == s->rank || s->member_index[p] >= 0 || s->left[p] ||
		    !ss_fabric_peer_ok(s->fabric, p))
			continue;
		epoch = ss_fabric_peer_epoch(s->fabric, p);
		if (epoch == s->view_read_epoch[p] || epoch == s->epoch[p])
			continue; /* read on this connection, or a member's */
		/* what rounds left in flight may still read SNAP */
		if (ss__drain(s, ss__deadline(s)) < 0 ||
		    !(view = ss__read_view(s, p, ss__deadline(s))))
			continue;
		s->view_read_epoch[p] = epoch;
		if (be32toh(view->began) == SS_STATE_BEGAN &&
		    be32toh(view->lowest) < mine)
			return p;
	}
	return -1;
}

/*
 * Forget barrier messages our own side's numbering left ahead of @k, the
 * number we take: they would count as peers having come.
 */
static void ss_forget_ahead(struct ss_sync *s, uint32_t k)
{
	static const int kinds[] = { SS_MSG_BARRIER, SS_MSG_BARRIER_DONE };

	for (int i = 0; i < 2; i++)
		for (int p = 0; p < s->world; p++)
			if (ss__rounds_after(s->seen[kinds[i]][p], k) > 0)
				s->seen[kinds[i]][p] = SS_ROUND_MASK;
}

int ss__rejoin(struct ss_sync *s, int h)
{
	uint64_t deadline = ss_deadline_ns(4 * s->timeout_ms + 5000);
	const struct ss__state *view;
	uint32_t k = 0;

	ss_log_warn("sync: rank %d was cut off from rank %d's members: "
		    "rejoining, reseeding from rank %d",
		    s->rank, h, h);
	/* the other side's ranks; ours find their way back themselves */
	for (int p = 0; p < s->world; p++)
		if (p != s->rank && s->member_index[p] < 0 &&
		    ss_fabric_peer_ok(s->fabric, p))
			ss__send(s, p, SS_R_SNAP, 0, SS_R_INBOX, 0, 0,
				 SS_MSG_JOIN);
	/*
	 * @h in a barrier (its replica holds still; its state says which),
	 * and its message for that barrier here: it sent it because it
	 * expects us, so it waits for ours.
	 */
	for (;;) {
		if (ss_deadline_passed(deadline) ||
		    !ss_fabric_peer_ok(s->fabric, h))
			goto err;
		ss__pump(s, 1);
		view = ss__read_view(s, h, deadline);
		if (!view || !(be32toh(view->in_barrier) & SS_STATE_IN_BARRIER))
			continue;
		k = be32toh(view->in_barrier) & ~SS_STATE_IN_BARRIER;
		ss_forget_ahead(s, k);
		if (s->seen[SS_MSG_BARRIER][h] == k)
			break;
	}
	if (!ss_reseed_from(s, h, deadline))
		goto err;
	s->barrier_seq = k;
	s->barrier_numbered = true;
	return ss__barrier(s);
err:
	/* alone a while more: the next round looks again */
	s->view_read_epoch[h] = 0;
	ss_log_warn("sync: rank %d could not rejoin through rank %d; "
		    "going on alone and trying again",
		    s->rank, h);
	return 0;
}

/*
 * A fresh start with opts.start_alike: our replica READ from the lowest
 * member's, which holds still (that rank is inside ss_sync_begin, between
 * the first barrier and the second, which waits for our READ), and the
 * S-EASGD center and S-BMUF state restarted from it.
 */
static int ss_sync_start_alike(struct ss_sync *s)
{
	uint64_t deadline = ss_deadline_ns(4 * s->timeout_ms + 5000);
	int low = s->rank;

	for (int p = 0; p < s->rank; p++)
		if (s->member_index[p] >= 0) {
			low = p;
			break;
		}
	if (low != s->rank) {
		s->reads_ok[low] = false;
		if (ss__post_read(s, low, SS_R_PARAMS, 0, SS_R_PARAMS, 0,
				  s->n * sizeof(float)) == 0)
			ss__wait_sends(s, deadline);
		if (!s->reads_ok[low])
			return ss_error_set(
				-ETIMEDOUT,
				"its replica could not be read, or did not "
				"arrive in time",
				"see that rank's own messages; start the job "
				"again",
				"sync: rank %d starting from rank %d's %zu "
				"floats",
				s->rank, low, s->n);
		ss__state_from_replica(s);
		ss_log_info("sync: rank %d starts from rank %d's replica",
			    s->rank, low);
	}
	return ss__barrier(s);
}

int ss_sync_begin(struct ss_sync *s)
{
	int h, rc;

	ss__state_from_replica(s);
	s->begin_ns = ss_now_ns();
	s->last_iterations = atomic_load(&s->iterations);
	atomic_store(&s->round_iterations, s->last_iterations);
	h = ss_sync_find_running(s);
	/* After this barrier every rank's center is in place. */
	pthread_mutex_lock(&s->fabric_lock);
	/* a fresh start: every counter counts from 0, or where the resumed
	 * job's stopped */
	rc = h < 0 ? ss__claims_from(s,
				     ss_deadline_ns(4 * s->timeout_ms + 5000)) :
		     0;
	if (rc == 0)
		rc = h < 0 ? ss__barrier(s) : ss_sync_join(s, h);
	if (rc == 0 && h < 0 && s->opts.start_alike)
		rc = ss_sync_start_alike(s);
	pthread_mutex_unlock(&s->fabric_lock);
	if (rc == 0)
		s->state->began = htobe32(SS_STATE_BEGAN);
	return rc;
}
