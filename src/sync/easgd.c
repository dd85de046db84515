// SPDX-License-Identifier: BSD-2-Clause
/*
 * S-EASGD, with the center variable sharded across owners: for each shard
 * a rank READs the owner's center c, computes d = alpha (w - c), moves
 * w -= d, and WRITEs d to the owner, which applies c += d when it arrives.
 * A delta lands in an inbox slot (one per sender and round parity), which
 * the sender writes again only once we have finished the round after it
 * (ss__slot_free): every delta is applied, on arrival when its round has
 * come (late ones too), or at the start of its round when it came early.
 * Peers READ our center while we apply deltas to it: such a read may mix
 * two states, which elastic averaging tolerates.
 */
#include <endian.h>

#include "sync_internal.h"

void ss__easgd_apply_delta(struct ss_sync *s, int sender, uint32_t round)
{
	/*
	 * A sender outside our members (ranks that disagree on who is in,
	 * for the moment) has no slot in our inbox: its delta is dropped,
	 * and with it that mass, rather than read from outside the inbox.
	 */
	if (s->member_index[sender] < 0) {
		ss_log_debug("sync: S-EASGD delta of round %u from rank %d, "
			     "not a member here: dropped",
			     round, sender);
		return;
	}
	ss__add(s->center, s->inbox + ss__slot(s, round & 1, sender),
		ss__shard_len(s, s->rank));
}

void ss__easgd_apply_early(struct ss_sync *s, uint32_t upto)
{
	for (int p = 0; p < s->world; p++) {
		/* both slots' (two rounds' deltas may wait), the older first */
		size_t at[2] = { ss__arrival(s, 0, p), ss__arrival(s, 1, p) };

		if (s->easgd_early[at[0]] && s->easgd_early[at[1]] &&
		    ss__rounds_after(s->easgd_early_round[at[1]],
				     s->easgd_early_round[at[0]]) < 0) {
			at[0] = ss__arrival(s, 1, p);
			at[1] = ss__arrival(s, 0, p);
		}
		for (int i = 0; i < 2; i++) {
			uint32_t round = s->easgd_early_round[at[i]];

			if (s->easgd_early[at[i]] &&
			    ss__rounds_after(round, upto) <= 0) {
				ss__easgd_apply_delta(s, p, round);
				s->easgd_early[at[i]] = false;
			}
		}
	}
}

/*
 * Whether @p's center is of the present division: @p re-divided it in
 * the last barrier before it cleared its in-barrier word, which a READ of
 * its state shows (and a center READ after it, on the same queue pair,
 * finds re-divided).  Asked once after each barrier that changed the
 * members.
 */
static bool ss_center_divided(struct ss_sync *s, int p, uint64_t deadline)
{
	uint32_t last = htobe32(SS_STATE_IN_BARRIER | (s->barrier_seq - 1));
	const struct ss__state *view;

	if (!s->center_unsure[p])
		return true;
	view = ss__read_view(s, p, deadline);
	if (view && view->in_barrier != last)
		s->center_unsure[p] = false;
	return !s->center_unsure[p];
}

int ss__round_easgd(struct ss_sync *s, struct ss__round_result *res)
{
	uint64_t deadline = ss__deadline(s);
	size_t own = ss__shard_off(s, s->rank),
	       own_len = ss__shard_len(s, s->rank);
	uint32_t parity = s->round & 1;
	/* N alpha = 0.5 by default, N the members: the center's pull does
	 * not weaken when ranks leave */
	float alpha =
		(float)(s->opts.alpha > 0 ? s->opts.alpha : 0.5 / s->n_members);

	/* Deltas that came while we were still in the previous round. */
	ss__easgd_apply_early(s, s->round);

	/* 1. Read every owner's center shard into AVG. */
	for (int p = 0; p < s->world; p++) {
		/* reads_ok[p] after the state's READ, which sets it too */
		bool divided = p != s->rank && ss__alive(s, p) &&
			       ss_center_divided(s, p, deadline);

		s->reads_ok[p] = false;
		if (!divided)
			continue;
		ss__post_read(s, p, SS_R_AVG,
			      ss__shard_off(s, p) * sizeof(float), SS_R_CENTER,
			      0, ss__shard_len(s, p) * sizeof(float));
	}
	ss__wait_sends(s, deadline);

	/* 2. Pull toward each center, push the delta to its owner. */
	ss__easgd(s->w + own, s->center, s->snap + own, own_len, alpha);
	ss__distance(s->w + own, s->center, own_len, &res->diff2, &res->norm2);
	ss__add(s->center, s->snap + own, own_len);
	for (int p = 0; p < s->world; p++) {
		size_t off = ss__shard_off(s, p), len = ss__shard_len(s, p);

		if (p == s->rank)
			continue;
		if (!s->reads_ok[p]) {
			if (ss__alive(s, p))
				ss__leave_out(s, p,
					      "its center did not arrive");
			continue; /* the owner is gone: skip its shard */
		}
		if (ss__behind(s, SS_MSG_EASGD, p))
			continue; /* its slot may hold a delta not yet applied */
		ss__distance(s->w + off, s->avg + off, len, &res->diff2,
			     &res->norm2);
		ss__easgd(s->w + off, s->avg + off, s->snap + off, len, alpha);
		if (ss__send(s, p, SS_R_SNAP, off, SS_R_INBOX,
			     ss__slot(s, parity, s->rank), len,
			     SS_MSG_EASGD) == 0)
			res->bytes += len * sizeof(float);
		else /* not sent (the owner is gone): undone */
			ss__add(s->w + off, s->snap + off, len);
	}

	/* 3. Every live peer's delta for our shard, applied as it comes. */
	ss__wait_msgs(s, SS_MSG_EASGD, deadline);
	return 0;
}
