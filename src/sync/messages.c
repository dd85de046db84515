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
	pthread_mutex_lock(&s->lock);
	s->peers_left_out++;
	pthread_mutex_unlock(&s->lock);
	if (!s->left_out[p]) {
		s->left_out[p] = true;
		ss_log_warn(
			"sync: peer %d left out of round %u: %s (within %u ms)",
			p, s->round, what, s->opts.round_timeout_ms);
	}
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
	if (kind == SS_MSG_JOIN) {
		if (!s->joining[c->peer])
			ss_log_info("sync: peer %d asks to join", c->peer);
		s->joining[c->peer] = true;
		return;
	}
	/*
	 * An S-EASGD delta of this round, or a late one of a round that gave
	 * up on its sender, is applied now: the sender has taken it off its
	 * replica, so dropping it would lose that mass from replicas plus
	 * center.  One of a round we have yet to reach waits for it
	 * (ss__easgd_apply_early).
	 */
	if (kind == SS_MSG_EASGD) {
		int32_t ahead = ss__rounds_after(round, s->round);

		if (ahead <= 0)
			ss__easgd_apply_delta(s, c->peer, round);
		if (ahead < 0)
			return; /* late: seen[] keeps the newer round */
		s->easgd_early[c->peer] = ahead > 0;
	}
	s->seen[kind][c->peer] = round;
}

void ss__pump(struct ss_sync *s, unsigned wait_ms)
{
	struct ss_completion c[32];
	int n = ss_fabric_poll(s->fabric, c, 32, wait_ms);

	for (int i = 0; i < n; i++) {
		if (c[i].op == SS_OP_RECV_IMM) {
			ss_sync_message(s, &c[i]);
			continue;
		}
		s->outstanding--;
		if (c[i].op == SS_OP_READ && c[i].status == 0)
			s->reads_ok[c[i].peer] = true;
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
	if (kind == SS_MSG_BARRIER)
		return ss_fabric_peer_ok(s->fabric, p);
	return ss__alive(s, p);
}

bool ss__join_wanted(const struct ss_sync *s)
{
	for (int p = 0; p < s->world; p++)
		if (p != s->rank && s->joining[p] &&
		    ss_fabric_peer_ok(s->fabric, p))
			return true;
	return false;
}

static bool ss_all_sent(struct ss_sync *s, int kind)
{
	for (int p = 0; p < s->world; p++)
		if (ss__expected(s, kind, p) && !ss__got(s, kind, p))
			return false;
	return true;
}

int ss__wait_msgs(struct ss_sync *s, int kind, uint64_t deadline)
{
	while (!ss_all_sent(s, kind)) {
		if (ss_deadline_passed(deadline)) {
			for (int p = 0; p < s->world; p++)
				if (ss__expected(s, kind, p) &&
				    !ss__got(s, kind, p))
					ss__leave_out(s, p, "no answer");
			return -ETIMEDOUT;
		}
		ss__pump(s, 1);
	}
	return 0;
}

void ss__wait_sends(struct ss_sync *s, uint64_t deadline)
{
	while (s->outstanding > 0 && !ss_deadline_passed(deadline))
		ss__pump(s, 1);
	if (s->outstanding > 0) {
		/* The fabric completes them with an error when it gives up. */
		ss_log_warn(
			"sync: %d operations still in flight after the round timeout",
			s->outstanding);
	}
}

int ss__send(struct ss_sync *s, int p, int local, size_t local_off, int remote,
	     size_t remote_off, size_t floats, int kind)
{
	int rc = ss_fabric_write_imm(
		s->fabric, p, s->r[local], local_off * sizeof(float), remote,
		remote_off * sizeof(float), floats * sizeof(float),
		SS_IMM(kind,
		       ss__counts_barriers(kind) ? s->barrier_seq : s->round),
		(uint64_t)p);

	if (rc == 0)
		s->outstanding++;
	else
		ss__leave_out(s, p, ss_strerror(rc));
	return rc;
}

void ss__stop_peers(struct ss_sync *s)
{
	uint64_t deadline = ss_deadline_ns(s->opts.round_timeout_ms);

	for (int p = 0; p < s->world; p++)
		if (p != s->rank && ss_fabric_peer_ok(s->fabric, p))
			ss__send(s, p, SS_R_SNAP, 0, SS_R_INBOX, 0, 0,
				 SS_MSG_STOP);
	ss__wait_sends(s, deadline);
}
