// SPDX-License-Identifier: BSD-2-Clause
/*
 * S-MA, exact and decentralized: every rank owns a shard.  A round
 * snapshots the replica, writes each shard of the snapshot to its owner
 * (reduce-scatter), each owner averages its shard over the contributions
 * that arrived and writes the average to every rank (all-gather), and each
 * rank applies w += avg - snapshot, keeping what its trainers did during the
 * round.  Traffic per rank and round: 2 (N-1)/N n floats.
 *
 * S-BMUF is this round with a block-momentum step on each owner between
 * its average and the all-gather: G = avg - the last target, D = eta D +
 * zeta G, w_g += D, and the target w_g (or w_g + eta D with Nesterov) goes to
 * every rank instead of the average; then w += target - snapshot.  The
 * owner holds w_g and D of its shard, the only copy, so every rank applies
 * the same target whichever contributions arrived.
 */
#include "sync_internal.h"

/*
 * S-BMUF's block momentum: as given, else 1 - 1/min(N, s) with s the
 * replica's steps a round spans (the mean so far; N before the first).
 * 1 - 1/N makes a block's step about N times the average's, which is what
 * N ranks' blocks of many steps need; rounds that span fewer steps than
 * that overshoot (every step: NE 19 to 21 % above one node's at 8 to 64
 * logical nodes, docs/scale.md "Quality at scale"; with the span's cap at
 * 32 and 64 nodes, 16-step blocks ended 0.7 to 3.5 % better).
 */
double ss__bmuf_eta_for(int members, double span)
{
	if (span > members)
		span = members;
	return span > 1 ? 1 - 1 / span : 0;
}

double ss__bmuf_eta(struct ss_sync *s)
{
	double span = s->n_members;

	if (s->opts.eta >= 0)
		return s->opts.eta;
	pthread_mutex_lock(&s->lock); /* the statistics' */
	if (s->rounds > 0)
		span = s->gap_sum / (double)s->rounds;
	pthread_mutex_unlock(&s->lock);
	return ss__bmuf_eta_for(s->n_members, span);
}

/* w += avg - snapshot over shard @k, measured for the divergence. */
static void ss_ma_apply_shard(struct ss_sync *s, int k,
			      struct ss__round_result *res)
{
	size_t off = ss__shard_off(s, k);

	ss__apply_measured(s->w + off, s->avg + off, s->snap + off,
			   ss__shard_len(s, k), &res->diff2, &res->norm2);
}

int ss__round_ma(struct ss_sync *s, struct ss__round_result *res)
{
	uint64_t deadline = ss__deadline(s);
	size_t own = ss__shard_off(s, s->rank),
	       own_len = ss__shard_len(s, s->rank);
	uint32_t parity = s->round & 1;
	const float **parts = s->parts;
	int k = 0;

	/* 1. Snapshot, and each shard of it to its owner. */
	ss__copy(s->snap, s->w, s->n);
	for (int p = 0; p < s->world; p++) {
		if (p == s->rank || !ss__alive(s, p))
			continue;
		if (ss__send(s, p, SS_R_SNAP, ss__shard_off(s, p), SS_R_INBOX,
			     ss__slot(s, parity, s->rank), ss__shard_len(s, p),
			     SS_MSG_MA_PART) == 0)
			res->bytes += ss__shard_len(s, p) * sizeof(float);
	}

	/* 2. Average our shard over what arrived in time, for this round. */
	ss__wait_msgs(s, SS_MSG_MA_PART, deadline);
	for (int p = 0; p < s->world; p++)
		if (p != s->rank && ss__got(s, SS_MSG_MA_PART, p))
			parts[k++] = s->inbox + ss__slot(s, parity, p);
	ss__average(s->avg + own, s->snap + own, parts, k, own_len);
	if (s->opts.algo == SS_SYNC_BMUF) /* the average becomes its target */
		ss__bmuf(s->w_g, s->momentum, s->avg + own, own_len,
			 (float)ss__bmuf_eta(s),
			 (float)(s->opts.zeta * (k + 1) / s->n_members),
			 s->opts.nesterov);

	/* 3. The average (S-BMUF: target) of our shard to every rank. */
	for (int p = 0; p < s->world; p++) {
		if (p == s->rank || !ss__alive(s, p))
			continue;
		if (ss__send(s, p, SS_R_AVG, own, SS_R_AVG, own, own_len,
			     SS_MSG_MA_AVG) == 0)
			res->bytes += own_len * sizeof(float);
	}
	/*
	 * Their averages: a peer whose contribution came is alive and
	 * answers, but with one rank silent every rank waits the round out
	 * for it before it averages and sends, so the others' averages come
	 * just past the deadline (each live rank left the others out by
	 * milliseconds).  Those peers get a fresh round timeout; the silent
	 * ones what is left of the round's.
	 */
	k = 0;
	for (int p = 0; p < s->world; p++)
		if (p != s->rank && ss__got(s, SS_MSG_MA_PART, p))
			s->answered[k++] = p;
	ss__wait_msgs_from(s, SS_MSG_MA_AVG, s->answered, k, ss__deadline(s));
	ss__wait_msgs(s, SS_MSG_MA_AVG, deadline);

	/*
	 * 4. Apply the shards whose average came.  One whose owner did not
	 * answer stays as it is, and is not even read: its average may still
	 * be landing there.  Our sends still read SNAP and AVG; the next
	 * round waits for them before it writes either (ss__drain).
	 */
	ss_ma_apply_shard(s, s->rank, res);
	for (int p = 0; p < s->world; p++)
		if (p != s->rank && ss__got(s, SS_MSG_MA_AVG, p))
			ss_ma_apply_shard(s, p, res);
	return 0;
}
