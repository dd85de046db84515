// SPDX-License-Identifier: BSD-2-Clause
/*
 * Messages between the ranks' sync layers: WRITE_WITH_IMMs whose immediate
 * names the kind and the round, the completions that bring them, and the
 * bounded waits for them and for our own operations.
 */
#include <errno.h>

#include "sync_internal.h"

void ss__leave_out(struct ss_sync *s, int p, const char *what)
{
	if (s->left_out_round[p] == s->round)
		return; /* counted once a round */
	s->left_out_round[p] = s->round;
	pthread_mutex_lock(&s->lock);
	s->peers_left_out++;
	s->left_out_count[p]++;
	pthread_mutex_unlock(&s->lock);
	s->partial = true;
	if (!s->left_out[p]) {
		s->left_out[p] = true;
		ss_log_warn(
			"sync: peer %d left out of round %u: %s (round timeout %u ms)",
			p, s->round, what, s->timeout_ms);
	}
}

/* A round message: which slot it filled, and what it says of its sender. */
static void ss_round_message(struct ss_sync *s, int kind, int p, uint32_t round)
{
	int32_t ahead = ss__rounds_after(round, s->round);

	if (ss__rounds_after(round, s->latest[p]) > 0)
		s->latest[p] = round;
	if (kind == SS_MSG_SKIP) {
		if (ss__rounds_after(round, s->skipped[p]) > 0)
			s->skipped[p] = round;
		if (ahead > 0 && (!s->catching_up ||
				  ss__rounds_after(round, s->catch_up) > 0)) {
			s->catch_up = round; /* we are behind: go there */
			s->catching_up = true;
		}
		return;
	}
	/*
	 * An S-EASGD delta of this round, or a late one of a round that gave
	 * up on its sender, is applied now: the sender has taken it off its
	 * replica, so dropping it would lose that mass from replicas plus
	 * center.  One of a round we have yet to reach waits for it in its
	 * slot (ss__easgd_apply_early), marked per slot: the sender writes a
	 * slot again only once we have finished with it, but two of its
	 * deltas can wait at once.  Leaving a barrier frees both of our slots
	 * at the sender, which may then send the two rounds after it while we
	 * are still in the barrier: with one mark a peer, the second delta's
	 * mark replaced the first's, and the first was never applied.
	 */
	if (kind == SS_MSG_EASGD) {
		size_t at = ss__arrival(s, round, p);

		if (ahead <= 0)
			ss__easgd_apply_delta(s, p, round);
		if (ahead > 0) {
			s->easgd_early[at] = true;
			s->easgd_early_round[at] = round;
		}
	} else if (ahead < 0) {
		/* late for its round, which has ended here: discarded */
		pthread_mutex_lock(&s->lock);
		s->messages_late++;
		pthread_mutex_unlock(&s->lock);
	}
	s->arrived[kind][ss__arrival(s, round, p)] = round;
}

static void ss_sync_message(struct ss_sync *s, const struct ss_completion *c)
{
	int kind = SS_IMM_KIND(c->imm);
	uint32_t round = SS_IMM_ROUND(c->imm);

	if (kind <= 0 || kind >= SS_MSG_KINDS)
		return;
	if (s->left_out[c->peer]) {
		s->left_out[c->peer] = false;
		ss_log_info("sync: peer %d answers again", c->peer);
	}
	if (kind == SS_MSG_STOP) {
		s->paused[c->peer] = true;
		return;
	}
	if (kind == SS_MSG_LEAVE) {
		ss_log_info("sync: rank %d leaves", c->peer);
		__atomic_store_n(&s->left[c->peer], true, __ATOMIC_RELAXED);
		s->paused[c->peer] = true;
		return;
	}
	if (kind == SS_MSG_JOIN) {
		if (!s->joining[c->peer])
			ss_log_info("sync: peer %d asks to join", c->peer);
		s->joining[c->peer] = true;
		return;
	}
	if (kind == SS_MSG_CALL) {
		if (!s->called[c->peer])
			ss_log_debug("sync: rank %d calls us to its barrier %u",
				     c->peer, round);
		s->called[c->peer] = true;
	}
	if (ss__round_kind(kind) || kind == SS_MSG_SKIP)
		ss_round_message(s, kind, c->peer, round);
	else
		s->seen[kind][c->peer] = round;
}

/* One of our operations completed: in flight no more; its bandwidth. */
static void ss_op_done(struct ss_sync *s, const struct ss_completion *c)
{
	int p = c->peer, kind = SS_WR_KIND(c->wr_id);

	s->outstanding--;
	if (p < 0 || p >= s->world)
		return;
	if (c->status && ss__counts_barriers(kind))
		ss_log_debug("sync: barrier %u: our %s to peer %d failed: %s",
			     s->barrier_seq,
			     kind == SS_MSG_BARRIER ? "message" :
			     kind == SS_MSG_CALL    ? "call" :
						      "DONE",
			     p, ss_strerror(c->status));
	if (c->op == SS_OP_READ && c->status == 0)
		s->reads_ok[p] = true;
	if (c->status && kind == SS_MSG_EASGD) {
		/* the delta left our replica and never reached the center */
		pthread_mutex_lock(&s->lock);
		s->easgd_dropped++;
		pthread_mutex_unlock(&s->lock);
	}
	if (--s->in_flight[p] == 0 && c->status == 0 &&
	    s->flight_bytes[p] >= 65536) {
		/* small transfers say more about latency than bandwidth */
		double secs = (double)(ss_now_ns() - s->flight_start_ns[p]) /
			      1e9,
		       bw = (double)s->flight_bytes[p] /
			    (secs > 1e-9 ? secs : 1e-9);

		s->bandwidth[p] = s->bandwidth[p] > 0 ?
					  0.75 * s->bandwidth[p] + 0.25 * bw :
					  bw;
	}
}

void ss__pump(struct ss_sync *s, unsigned wait_ms)
{
	struct ss_completion c[32];
	int n;

	ss__claims_post(s); /* trainers' claims ride on our waits */
	n = ss_fabric_poll(s->fabric, c, 32, wait_ms);
	for (int i = 0; i < n; i++) {
		if (c[i].op == SS_OP_RECV_IMM)
			ss_sync_message(s, &c[i]);
		else if (c[i].op == SS_OP_FETCH_ADD ||
			 SS_WR_KIND(c[i].wr_id) == SS_WR_CLAIM)
			ss__claim_done(s, &c[i]);
		else
			ss_op_done(s, &c[i]);
	}
}

/*
 * Whether @p should send @kind now: at barriers every connected peer (a
 * stopped shadow thread, a new process joining), in rounds those alive.
 */
bool ss__expected(const struct ss_sync *s, int kind, int p)
{
	if (p == s->rank)
		return false;
	if (kind == SS_MSG_BARRIER) /* a rank that left, only to join */
		return ss_fabric_peer_ok(s->fabric, p) &&
		       (!s->left[p] || s->joining[p]) &&
		       (!s->barrier_members_only || s->member_index[p] >= 0);
	return ss__alive(s, p);
}

void ss__call_peers(struct ss_sync *s)
{
	for (int p = 0; p < s->world; p++)
		if (p != s->rank && ss_fabric_peer_ok(s->fabric, p))
			ss__send(s, p, SS_R_SNAP, 0, SS_R_INBOX, 0, 0,
				 SS_MSG_CALL);
}

bool ss__join_wanted(const struct ss_sync *s)
{
	for (int p = 0; p < s->world; p++)
		if (p != s->rank && s->joining[p] &&
		    ss_fabric_peer_ok(s->fabric, p))
			return true;
	return false;
}

/* Whether we still wait for @p's message of @kind. */
static bool ss_waiting_for(const struct ss_sync *s, int kind, int p)
{
	return ss__expected(s, kind, p) && !ss__got(s, kind, p) &&
	       ss__may_come(s, kind, p);
}

int ss__wait_msgs(struct ss_sync *s, int kind, uint64_t deadline)
{
	return ss__wait_msgs_from(s, kind, NULL, s->world, deadline);
}

/* @from[i], or rank i when @from is NULL */
int ss__wait_msgs_from(struct ss_sync *s, int kind, const int *from, int n,
		       uint64_t deadline)
{
	int missing = 0;

	for (;;) {
		bool all = true;

		for (int i = 0; i < n && all; i++)
			all = !ss_waiting_for(s, kind, from ? from[i] : i);
		if (all || ss_deadline_passed(deadline))
			break;
		ss__pump(s, 1);
	}
	for (int i = 0; i < n; i++) {
		int p = from ? from[i] : i;

		if (!ss__expected(s, kind, p) || ss__got(s, kind, p))
			continue;
		missing++;
		ss__leave_out(s, p,
			      ss__may_come(s, kind, p) ?
				      "no answer" :
				      "it went on without us (we are behind)");
	}
	return missing;
}

void ss__wait_sends(struct ss_sync *s, uint64_t deadline)
{
	while (s->outstanding > 0 && !ss_deadline_passed(deadline))
		ss__pump(s, 1);
}

/*
 * A peer whose operations have all stayed unanswered this long is gone: a
 * live peer's NIC answers whatever its process does, so this is a host
 * that died or a link that is down, which send no disconnect.
 */
static uint64_t ss_silence_ns(const struct ss_sync *s)
{
	uint64_t ms = 2ull * s->timeout_ms;

	return (ms > SS_SILENCE_MIN_MS ? ms : SS_SILENCE_MIN_MS) * 1000000ull;
}

/* Fail the peers whose operations in flight have gone unanswered. */
static void ss_fail_silent_peers(struct ss_sync *s)
{
	uint64_t now = ss_now_ns();

	for (int p = 0; p < s->world; p++) {
		char why[128];

		if (p == s->rank || s->in_flight[p] <= 0 ||
		    now - s->flight_start_ns[p] < ss_silence_ns(s))
			continue;
		snprintf(why, sizeof(why),
			 "%d operations unanswered for %.0f s: its host is "
			 "down or unreachable",
			 s->in_flight[p],
			 (double)(now - s->flight_start_ns[p]) / 1e9);
		ss_log_warn("sync: peer %d: %s", p, why);
		ss_fabric_fail_peer(s->fabric, p, why);
	}
}

int ss__drain(struct ss_sync *s, uint64_t deadline)
{
	ss__wait_sends(s, deadline);
	if (s->outstanding > 0) {
		ss_fail_silent_peers(s);
		/* what the failures completed */
		ss__wait_sends(s, ss_deadline_ns(100));
	}
	if (s->outstanding <= 0)
		return 0;
	/* The fabric completes them with an error when it gives up. */
	ss_log_warn(
		"sync: %d operations still in flight after the round timeout: "
		"their buffers are left alone until they complete",
		s->outstanding);
	return -EBUSY;
}

uint64_t ss__deadline(const struct ss_sync *s)
{
	return ss_deadline_ns(s->timeout_ms);
}

/* An operation to @p of @bytes posted: in flight, timed for bandwidth. */
static void ss_op_posted(struct ss_sync *s, int p, size_t bytes)
{
	s->outstanding++;
	if (s->in_flight[p]++ == 0) {
		s->flight_start_ns[p] = ss_now_ns();
		s->flight_bytes[p] = 0;
	}
	s->flight_bytes[p] += bytes;
}

/* Tell @p once a round that we run it without @p: it is behind. */
static void ss_send_skip(struct ss_sync *s, int p)
{
	if (s->skip_sent[p] == s->round)
		return;
	if (ss_fabric_write_imm(s->fabric, p, s->r[SS_R_SNAP], 0, SS_R_INBOX, 0,
				0, SS_IMM(SS_MSG_SKIP, s->round),
				SS_WR_ID(p, SS_MSG_SKIP)) == 0) {
		s->skip_sent[p] = s->round;
		ss_op_posted(s, p, 0);
	}
}

bool ss__behind(struct ss_sync *s, int kind, int p)
{
	if (!ss__round_kind(kind) || ss__slot_free(s, kind, p))
		return false;
	ss_send_skip(s, p);
	ss__leave_out(s, p, "behind: still in an earlier round");
	return true;
}

int ss__send(struct ss_sync *s, int p, int local, size_t local_off, int remote,
	     size_t remote_off, size_t floats, int kind)
{
	int rc;

	if (ss__behind(s, kind, p))
		return -EAGAIN;
	rc = ss_fabric_write_imm(
		s->fabric, p, s->r[local], local_off * sizeof(float), remote,
		remote_off * sizeof(float), floats * sizeof(float),
		SS_IMM(kind,
		       ss__counts_barriers(kind) ? s->barrier_seq : s->round),
		SS_WR_ID(p, kind));
	if (rc == 0)
		ss_op_posted(s, p, floats * sizeof(float));
	else
		ss__leave_out(s, p, ss_strerror(rc));
	return rc;
}

int ss__post_read(struct ss_sync *s, int p, int local, size_t local_off,
		  int remote, size_t remote_off, size_t bytes)
{
	int rc = ss_fabric_read(s->fabric, p, s->r[local], local_off, remote,
				remote_off, bytes, SS_WR_ID(p, 0));

	if (rc == 0)
		ss_op_posted(s, p, bytes);
	return rc;
}

void ss__stop_peers(struct ss_sync *s)
{
	uint64_t deadline = ss__deadline(s);

	for (int p = 0; p < s->world; p++)
		if (p != s->rank && ss_fabric_peer_ok(s->fabric, p))
			ss__send(s, p, SS_R_SNAP, 0, SS_R_INBOX, 0, 0,
				 SS_MSG_STOP);
	ss__wait_sends(s, deadline);
}
