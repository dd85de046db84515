// SPDX-License-Identifier: BSD-2-Clause
/*
 * The barrier: every live rank comes, the round numbers line up, and a
 * new process of a rank is let in.
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sync_internal.h"

/*
 * The word of @p's round in a barrier: two per peer, by the barrier's
 * parity, because a peer can be one barrier ahead of us, and its round
 * for the next one must not overwrite the one it sent for this one (we
 * then took the next barrier's round for this one's, and came out a round
 * ahead of the others).
 */
static size_t ss_barrier_word(const struct ss_sync *s, int p)
{
	return (size_t)(s->barrier_seq & 1) * (size_t)s->world + (size_t)p;
}

/*
 * Whether @p is in a later barrier, which it held without us: a barrier
 * message of the next one with no DONE of this one before it (a peer that
 * met us here says DONE before it leaves, and we have not said ours, so it
 * cannot have left with us), or one further on.
 */
static bool ss_ahead_without_us(const struct ss_sync *s, int p)
{
	int32_t ahead =
		ss__rounds_after(s->seen[SS_MSG_BARRIER][p], s->barrier_seq);

	return ahead >= 2 ||
	       (ahead == 1 && ss__rounds_after(s->seen[SS_MSG_BARRIER_DONE][p],
					       s->barrier_seq) < 0);
}

/*
 * The barrier's second half.  A peer's barrier message comes after
 * everything it sent before it (one ordered queue pair), so once we have
 * every peer's, we have consumed what they sent for earlier rounds, and
 * say so (DONE).  Nobody leaves before every peer it met here has said
 * so: a rank that left as soon as it had the barrier messages could send
 * its next round into an inbox slot whose previous message the slower
 * peer had yet to read (an S-EASGD delta then counted twice and another
 * lost; the round after a barrier often has the parity of the one before).
 */
/*
 * Whether @p came to this barrier: its message is here, and it takes part.
 * Not one whose message is of a later barrier that it held without us: it
 * did not come to this one (it came back on its connection to us during
 * our second half, say), never says DONE here, and waits for us there.
 */
static bool ss_came(const struct ss_sync *s, int p)
{
	return p != s->rank && ss__got(s, SS_MSG_BARRIER, p) &&
	       ss__expected(s, SS_MSG_BARRIER, p) && !ss_ahead_without_us(s, p);
}

/* Our barrier message to @p, once per barrier (ss__barrier may repeat). */
static void ss_barrier_send(struct ss_sync *s, int p)
{
	if (s->barrier_sent[p])
		return;
	s->barrier_sent[p] = true;
	ss__send(s, p, SS_R_SNAP, s->n, SS_R_INBOX,
		 ss__ctrl_off(s) + ss_barrier_word(s, s->rank), 1,
		 SS_MSG_BARRIER);
}

/*
 * Whether @p held our barrier without us, which its message numbered past
 * it says (ss_ahead_without_us).  After a link's outage the ranks count
 * barriers apart: those that held one without us are ahead, and wait for
 * our message with their number while we would wait for their DONE of
 * ours, which they never send.
 * Only a member counts: ranks that each went on with their own members
 * (a partition both sides lived through) meet again through
 * ss__rejoin(), the side cut off giving up what it trained alone.
 */
static bool ss_held_without_us(const struct ss_sync *s, int p)
{
	return s->member_index[p] >= 0 && ss_ahead_without_us(s, p);
}

/*
 * The first half: every expected peer's message.  One that held this
 * barrier without us gives us its number: we take it and send ours again
 * under it, so that the ranks meet in one barrier (the others, still at
 * ours, see the new number from us and take it in turn), with the whole
 * wait (@wait_ms) from there.  Not in a barrier whose number came from
 * the rank we join through (@numbered): our members then may be the side
 * we leave.  Returns 0, or -ETIMEDOUT with *@deadline passed.
 */
static int ss_barrier_gather(struct ss_sync *s, bool numbered, unsigned wait_ms,
			     uint64_t *deadline)
{
	for (;;) {
		bool all = true;

		for (int p = 0; !numbered && p < s->world; p++) {
			if (!ss__expected(s, SS_MSG_BARRIER, p) ||
			    !ss_held_without_us(s, p))
				continue;
			ss_log_info("sync: rank %d held barrier %u without us "
				    "(it is at %u): taking its number",
				    p, s->barrier_seq,
				    s->seen[SS_MSG_BARRIER][p]);
			s->barrier_seq = s->seen[SS_MSG_BARRIER][p];
			memset(s->barrier_sent, 0,
			       (size_t)s->world * sizeof(bool));
			s->state->in_barrier =
				htobe32(SS_STATE_IN_BARRIER | s->barrier_seq);
			*deadline = ss_deadline_ns(wait_ms);
		}
		for (int p = 0; p < s->world; p++) {
			if (!ss__expected(s, SS_MSG_BARRIER, p))
				continue;
			ss_barrier_send(s, p);
			all = all && ss__got(s, SS_MSG_BARRIER, p);
		}
		if (all)
			return 0;
		if (ss_deadline_passed(*deadline)) {
			for (int p = 0; p < s->world; p++)
				if (ss__expected(s, SS_MSG_BARRIER, p) &&
				    !ss__got(s, SS_MSG_BARRIER, p)) {
					ss_log_debug(
						"sync: barrier %u: rank %d's "
						"last barrier message was "
						"%u",
						s->barrier_seq, p,
						s->seen[SS_MSG_BARRIER][p]);
					ss__leave_out(s, p, "no answer");
				}
			return -ETIMEDOUT;
		}
		ss__pump(s, 1);
	}
}

/*
 * A peer that comes back while we wait here still gets our barrier
 * message (it waits for it in its own first half), and we wait for its
 * message in turn, as the first half would have: then it has come, gets
 * our DONE and we wait for its.  Not when the message it sent is of a
 * later barrier, held without us: we meet it there, after this one.
 */
static int ss_barrier_done(struct ss_sync *s, uint64_t deadline)
{
	bool *done_sent = s->done_sent, *late = s->late, all;

	memset(done_sent, 0, (size_t)s->world * sizeof(bool));
	memset(late, 0, (size_t)s->world * sizeof(bool));
	do {
		all = true;
		for (int p = 0; p < s->world; p++) {
			bool expected = ss__expected(s, SS_MSG_BARRIER, p);

			if (expected && !s->barrier_sent[p]) {
				ss_barrier_send(s, p);
				late[p] = true;
			}
			if (!ss_came(s, p)) {
				all = all && !(late[p] && expected &&
					       !ss_ahead_without_us(s, p));
				continue;
			}
			if (!done_sent[p]) {
				done_sent[p] = true;
				ss__send(s, p, SS_R_SNAP, 0, SS_R_INBOX, 0, 0,
					 SS_MSG_BARRIER_DONE);
			}
			if (!ss__got(s, SS_MSG_BARRIER_DONE, p))
				all = false;
		}
		if (!all && ss_deadline_passed(deadline)) {
			/* what each peer had done, for the log */
			for (int p = 0; p < s->world; p++)
				if (p != s->rank)
					ss_log_debug(
						"sync: barrier %u, second half: "
						"rank %d: expected %d, ok %d, "
						"message %u, done %u, ours sent "
						"%d, done sent %d, late %d, "
						"in flight %d, epoch %u",
						s->barrier_seq, p,
						ss__expected(s, SS_MSG_BARRIER,
							     p),
						ss_fabric_peer_ok(s->fabric, p),
						s->seen[SS_MSG_BARRIER][p],
						s->seen[SS_MSG_BARRIER_DONE][p],
						s->barrier_sent[p],
						done_sent[p], late[p],
						s->in_flight[p],
						ss_fabric_peer_epoch(s->fabric,
								     p));
			return -ETIMEDOUT;
		}
		if (!all)
			ss__pump(s, 1);
	} while (!all);
	ss__wait_sends(s, deadline);
	return 0;
}

static bool ss_bit(const uint64_t *set, int p)
{
	return be64toh(set[p / 64]) >> (p % 64) & 1;
}

static void ss_set_bit(uint64_t *set, int p)
{
	set[p / 64] = htobe64(be64toh(set[p / 64]) | 1ull << (p % 64));
}

/* @came and ourselves into @set in our state, then @tag into *@tag_at:
 * the set before its tag, for a READ that sees the tag. */
static void ss_publish(struct ss_sync *s, const bool *came, uint64_t *set,
		       uint32_t *tag_at, uint32_t tag)
{
	memset(set, 0, ss__set_words(s->world) * sizeof(*set));
	for (int p = 0; p < s->world; p++)
		if (came[p] || p == s->rank)
			ss_set_bit(set, p);
	__atomic_store_n(tag_at, tag, __ATOMIC_RELEASE);
}

/* @set, as READ from the rank we follow, into our decided set of @slot,
 * then @tag: for the ranks that follow us in turn. */
static void ss_relay(struct ss_sync *s, const uint64_t *set, int slot,
		     uint32_t tag)
{
	memcpy(ss__state_set(s->state, s->world, slot, 1), set,
	       ss__set_words(s->world) * sizeof(*set));
	__atomic_store_n(&s->state->decided_tag[slot], tag, __ATOMIC_RELEASE);
}

/*
 * While we agree on who came: a peer back on its connection to us since
 * our second half, whose message for this barrier is here now, still gets
 * ours and our DONE, but is neither waited for nor counted (who came is
 * published).  It waits in its first half for every peer it expects, and
 * holds up with its DONE the peers it met there: before, one of those was
 * the rank whose view we waited for, and the three waited out the barrier
 * (4 x the round timeout + 5 s).  Now it counts us, and takes the decision
 * of the lowest rank it saw come, which leaves it out until the next
 * barrier.  Not a peer that sent us nothing here: a new process, say,
 * which would take our number to join through and be left out.
 */
static void ss_barrier_answer_late(struct ss_sync *s)
{
	for (int p = 0; p < s->world; p++) {
		if (!ss_came(s, p))
			continue;
		ss_barrier_send(s, p);
		if (!s->done_sent[p]) {
			s->done_sent[p] = true;
			ss__send(s, p, SS_R_SNAP, 0, SS_R_INBOX, 0, 0,
				 SS_MSG_BARRIER_DONE);
		}
	}
}

/* Poll @p's state until its slot of this barrier holds this barrier's tag
 * for the set asked (came or decided), and return that set, valid until
 * the next READ of a view; NULL when @p failed or @deadline passed. */
static const uint64_t *ss_wait_view(struct ss_sync *s, int p, bool decided,
				    uint64_t deadline)
{
	uint32_t tag = htobe32(SS_STATE_IN_BARRIER | s->barrier_seq);
	int slot = s->barrier_seq & 1;

	while (ss_fabric_peer_ok(s->fabric, p) &&
	       !ss_deadline_passed(deadline)) {
		const struct ss__state *view = ss__read_view(s, p, deadline);

		if (view && (decided ? view->decided_tag[slot] :
				       view->came_tag[slot]) == tag)
			return ss__state_set(view, s->world, slot, decided);
		ss_barrier_answer_late(s);
		ss__pump(s, 1);
	}
	return NULL;
}

/*
 * Who came, agreed.  Each rank's own view of who came can differ: after a
 * partition, a peer may be back on one rank's connection and not yet on
 * another's, and ranks that went on with different members divided the
 * shards differently (their models drifted apart).  So each publishes who
 * it saw come (its state, READ by the others), and the lowest rank that
 * came decides: of those, the ones that every one of them saw come (it
 * drops a rank that missed one, until no one is missing), and each adopts
 * that.  A rank left out of the decision goes on alone and finds its way
 * back through the decider like a rank cut off by a partition.  When the
 * decider cannot be read (it left at once, say at the job's end), each
 * keeps what it saw, as before.
 *
 * The ranks' views differ exactly when some did not see others come, so
 * the lowest rank each one saw come is not the same rank everywhere: with
 * the connection 0-1 down, rank 2 saw 0 and 1 come and follows rank 0,
 * whose decision leaves 1 out, while rank 1 saw only 2 and decided for
 * itself that 2 was a member (it then waited round after round for a rank
 * that took it for none: link-flap, rank 1 back through rank 2 before its
 * connection to rank 0 was).  So a decider also drops a rank that saw a
 * rank below the decider come, which it follows instead; and each rank
 * publishes the decision it adopted, for a rank that took it for the
 * decider (it saw us come, not the one we follow).
 */
static void ss_barrier_agree(struct ss_sync *s, bool *came, uint64_t deadline)
{
	uint32_t tag = htobe32(SS_STATE_IN_BARRIER | s->barrier_seq);
	int slot = s->barrier_seq & 1, decider = s->rank;
	size_t words = ss__set_words(s->world);
	const uint64_t *set;
	uint64_t *sets;

	ss_publish(s, came, ss__state_set(s->state, s->world, slot, 0),
		   &s->state->came_tag[slot], tag);
	for (int p = 0; p < s->rank; p++)
		if (came[p]) {
			decider = p;
			break;
		}
	if (decider != s->rank) {
		set = ss_wait_view(s, decider, true, deadline);
		if (!set) {
			ss_log_debug("sync: barrier %u: rank %d's decision "
				     "did not come; keeping ours",
				     s->barrier_seq, decider);
			ss_publish(s, came,
				   ss__state_set(s->state, s->world, slot, 1),
				   &s->state->decided_tag[slot], tag);
			return;
		}
		ss_relay(s, set, slot, tag);
		if (!ss_bit(set, s->rank)) {
			ss_log_warn("sync: rank %d was left out of barrier "
				    "%u by rank %d: going on alone until it "
				    "rejoins",
				    s->rank, s->barrier_seq, decider);
			memset(came, 0, (size_t)s->world * sizeof(bool));
			s->view_read_epoch[decider] = 0; /* look again */
			return;
		}
		for (int p = 0; p < s->world; p++)
			if (came[p] != (p != s->rank && ss_bit(set, p))) {
				ss_log_debug("sync: barrier %u: rank %d %s "
					     "by rank %d's decision",
					     s->barrier_seq, p,
					     came[p] ? "left out" : "let in",
					     decider);
				came[p] = !came[p];
			}
		return;
	}
	/* we decide: who came, as each of them saw it */
	sets = calloc((size_t)s->world * words, sizeof(*sets));
	for (int p = 0; p < s->world; p++) {
		if (!came[p])
			continue;
		set = sets ? ss_wait_view(s, p, false, deadline) : NULL;
		if (set)
			memcpy(sets + (size_t)p * words, set,
			       words * sizeof(*sets));
		else
			came[p] = false;
	}
	/* one that saw a rank below us come follows that one's decision */
	for (int q = 0; sets && q < s->world; q++)
		for (int p = 0; came[q] && p < s->rank; p++)
			if (ss_bit(sets + (size_t)q * words, p)) {
				ss_log_debug("sync: barrier %u: rank %d saw "
					     "rank %d come, which it follows: "
					     "left out",
					     s->barrier_seq, q, p);
				came[q] = false;
			}
	for (bool again = sets != NULL; again;) {
		again = false;
		for (int q = 0; q < s->world; q++)
			for (int p = 0; came[q] && p < s->world; p++)
				if ((came[p] || p == s->rank) &&
				    !ss_bit(sets + (size_t)q * words, p)) {
					ss_log_debug("sync: barrier %u: rank "
						     "%d did not see rank %d "
						     "come: left out",
						     s->barrier_seq, q, p);
					came[q] = false;
					again = true;
				}
	}
	free(sets);
	ss_publish(s, came, ss__state_set(s->state, s->world, slot, 1),
		   &s->state->decided_tag[slot], tag);
}

/*
 * The barrier also lines the ranks' round numbers up: after a shadow thread
 * stopped, ranks may be a round apart.  Each sends its round in its word of
 * the peers' inboxes; all continue from the largest plus one, past any
 * round a peer gave up half-way.  It is also where a new process of a rank
 * is let in: from here it takes part in rounds.
 */
int ss__barrier(struct ss_sync *s)
{
	unsigned wait = 4 * s->timeout_ms + 5000;
	uint64_t deadline = ss_deadline_ns(wait), agree_by;
	uint32_t top = s->round;
	uint64_t joins = 0;
	bool *came = s->came, numbered = s->barrier_numbered;
	int rc = 0;

	s->barrier_numbered = false;

	/*
	 * S-EASGD deltas that came early for the round the barrier skips:
	 * now, before the peers can leave the barrier and send the next ones
	 * into the same slots.
	 */
	ss__easgd_apply_early(s, s->round);
	/* a word of its own: sends of a round may still read the snapshot */
	memcpy(s->snap + s->n, &s->round, sizeof(uint32_t));
	memset(s->barrier_sent, 0, (size_t)s->world * sizeof(bool));
	/* a rank rejoining after a partition waits to see us here */
	s->state->in_barrier = htobe32(SS_STATE_IN_BARRIER | s->barrier_seq);
	ss_log_debug("sync: rank %d enters barrier %u at round %u", s->rank,
		     s->barrier_seq, s->round);
	/* A peer that comes back while we wait gets our message then. */
	rc = ss_barrier_gather(s, numbered, wait, &deadline);
	ss__wait_sends(s, deadline);
	if (ss_barrier_done(s, deadline) < 0)
		rc = -ETIMEDOUT;
	/*
	 * Who came: also one that has gone since it said DONE (it may close
	 * its connections at once): a member still, until a round sees it
	 * gone, so that the members agree on every rank that came.
	 */
	for (int p = 0; p < s->world; p++)
		came[p] = ss_came(s, p) ||
			  (p != s->rank && ss__got(s, SS_MSG_BARRIER, p) &&
			   ss__got(s, SS_MSG_BARRIER_DONE, p) && !s->left[p]);
	/*
	 * The agreement gets a round timeout at least, also in a barrier that
	 * timed out: with no time left, the decider would find no view in
	 * time and go on alone while the others went on with it.
	 */
	agree_by = ss_deadline_ns(s->timeout_ms);
	if (deadline < agree_by)
		deadline = agree_by;
	memcpy(s->came_seen, came, (size_t)s->world * sizeof(bool));
	ss_barrier_agree(s, came, deadline);
	for (int p = 0; p < s->world; p++) {
		if (!s->came_seen[p])
			continue;
		/* its call answered (we met), unless to a later barrier */
		if (ss__rounds_after(s->seen[SS_MSG_CALL][p], s->barrier_seq) <=
		    0)
			s->called[p] = false;
		if (!came[p]) {
			s->dropped_until[p] = ss_deadline_ns(s->timeout_ms);
			s->dropped_epoch[p] =
				ss_fabric_peer_epoch(s->fabric, p);
		}
	}
	for (int p = 0; p < s->world; p++) {
		if (came[p]) {
			uint32_t theirs = s->ctrl[ss_barrier_word(s, p)];

			if (ss__rounds_after(theirs, top) > 0)
				top = theirs;
			/* in rounds from here on, as the process it is now */
			s->epoch[p] = ss_fabric_peer_epoch(s->fabric, p);
			joins += s->joining[p];
			s->joining[p] = false;
			/* trainers read left[0] (claims.c) */
			__atomic_store_n(&s->left[p], false, __ATOMIC_RELAXED);
		}
		if (!s->left[p])
			s->paused[p] = false;
	}
	/* the members from here on: who came */
	ss__set_members(s, came);
	if (joins) {
		pthread_mutex_lock(&s->lock);
		s->joins += joins;
		pthread_mutex_unlock(&s->lock);
	}
	/* and those for the later rounds it jumps over */
	ss__easgd_apply_early(s, top);
	s->round = (top + 1) & SS_ROUND_MASK;
	s->catching_up = false;
	/*
	 * Whoever came has consumed all we sent before (its DONE says so) and
	 * is in our next round with us: its slots are free.
	 */
	for (int p = 0; p < s->world; p++)
		if (came[p])
			s->latest[p] = s->round;
	ss_log_debug("sync: rank %d leaves barrier %u (%s), round %u next",
		     s->rank, s->barrier_seq, rc < 0 ? "timed out" : "all came",
		     s->round);
	s->barrier_seq++;
	/* after the re-divided center: a peer that READs this READs it */
	__atomic_store_n(&s->state->in_barrier, 0, __ATOMIC_RELEASE);
	if (rc < 0)
		return ss_error_set(rc, "a peer did not arrive", NULL,
				    "sync barrier %u of rank %d",
				    s->barrier_seq - 1, s->rank);
	return 0;
}

int ss_sync_barrier(struct ss_sync *s)
{
	int rc;

	pthread_mutex_lock(&s->fabric_lock);
	rc = ss__barrier(s);
	pthread_mutex_unlock(&s->fabric_lock);
	return rc;
}
