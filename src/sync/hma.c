// SPDX-License-Identifier: BSD-2-Clause
/*
 * Hierarchical S-MA: the flat round's 2 (N-1) messages a rank grow with
 * the job; in groups of G ~ sqrt(M) of the M members (C = M / G groups)
 * a rank sends 2 (G - 1) + 2 (C - 1), the same bytes in all.
 *
 * Member j is position q = j % G in group g = j / G.  The replica is cut
 * into M pieces as the flat round cuts it into shards (piece k: floats
 * [n k / M, n (k + 1) / M)); chunk q is pieces q C .. q C + C - 1, and
 * piece q C + g ends at member g G + q.  A round:
 *
 *   1. each rank writes its snapshot's chunk q' to its group's position q'
 *      (reduce-scatter in the group); position q averages chunk q over
 *      its group, into AVG;
 *   2. each writes piece q C + g' of that group mean to position q of
 *      group g' (reduce-scatter among the chunk's owners); each averages
 *      its piece over the groups: the mean of every member;
 *   3. each writes its piece to position q of every other group (into
 *      an area of the inbox, a place per group and round parity, copied
 *      into AVG when it came), and
 *   4. its chunk, whole now, to every other position of its group
 *      (all-gather both ways); then w += avg - snapshot, as the flat round.
 *
 * Messages of steps 1 and 2 are MA_PART, of 3 and 4 MA_AVG: the senders
 * of the two steps are disjoint (the group's and the column's), so each
 * message still counts once a round.  In the inbox, position q' of the
 * group writes chunk q's contribution at slot q' C (C slots long); the
 * groups' owners of chunk q write at slot q C + g' (one slot), the slots
 * no group member writes to position q.  A group that misses a member
 * averages without it, and a piece whose owner did not answer keeps the
 * group's mean: a partial round is a mean of means.
 */
#include <math.h>

#include "sync_internal.h"

int ss__hma_group(int members)
{
	double root = sqrt((double)members);
	int best = 1;

	for (int g = 2; g < members; g++)
		if (members % g == 0 &&
		    (best == 1 || fabs(g - root) < fabs(best - root)))
			best = g;
	return best;
}

static int ss_hma_from(const struct ss_sync *s)
{
	return s->opts.hierarchical_from ? s->opts.hierarchical_from :
					   SS_SYNC_HIERARCHICAL_FROM;
}

bool ss__hma_possible(const struct ss_sync *s)
{
	return s->opts.algo == SS_SYNC_MA && ss_hma_from(s) > 0 &&
	       s->world >= ss_hma_from(s);
}

bool ss__hma_wanted(const struct ss_sync *s)
{
	return ss__hma_possible(s) && s->n_members >= ss_hma_from(s) &&
	       s->hma_group > 1;
}

/* Where group @g's average of our piece lands in our inbox this round. */
static size_t ss_hma_piece_slot(const struct ss_sync *s, int g)
{
	return ss__hma_area_off(s->n, s->world) +
	       (size_t)(s->round & 1) * ss__hma_half(s->n, s->world) +
	       (size_t)g * s->shard_max;
}

struct ss_hma {
	int g, q, G, C; /* our group and position; their sizes */
	size_t base; /* this round's half of the inbox */
	int *group, n_group; /* the ranks of our group, but us */
	int *column, n_column; /* position q of the other groups */
};

/* Floats of pieces [@k, @k + @count), and where they start. */
static size_t ss_pieces(const struct ss_sync *s, int k, int count, size_t *len)
{
	size_t off = ss__member_off(s, k);

	*len = ss__member_off(s, k + count) - off;
	return off;
}

/* w += avg - snap over [@off, + @len), measured for the divergence. */
static void ss_hma_apply(struct ss_sync *s, size_t off, size_t len,
			 struct ss__round_result *res)
{
	ss__apply_measured(s->w + off, s->avg + off, s->snap + off, len,
			   &res->diff2, &res->norm2);
}

/* Our place, and the ranks we talk to, from the members. */
static void ss_hma_place(struct ss_sync *s, struct ss_hma *h)
{
	int me = s->member_index[s->rank];

	h->G = s->hma_group;
	h->C = s->n_members / h->G;
	h->g = me / h->G;
	h->q = me % h->G;
	h->base = (size_t)(s->round & 1) * (size_t)s->n_members * s->shard_max;
	h->group = s->hma_peers;
	h->n_group = 0;
	for (int q = 0; q < h->G; q++)
		if (q != h->q)
			h->group[h->n_group++] =
				s->member_rank[h->g * h->G + q];
	h->column = h->group + h->n_group;
	h->n_column = 0;
	for (int g = 0; g < h->C; g++)
		if (g != h->g)
			h->column[h->n_column++] =
				s->member_rank[g * h->G + h->q];
}

/*
 * Step @step's messages from @from, until @step quarters of the round
 * timeout from the round's @start.  With one rank silent, the live ranks
 * of its group or column wait for it until their step's end and only
 * then send the next step's messages: had every step the round's whole
 * timeout, the others would give up on those milliseconds before they
 * came (each live rank left others out, and every piece averaged fewer
 * ranks).  With a step's own end, each step absorbs one wait.
 */
static void ss_hma_wait(struct ss_sync *s, int kind, const int *from, int n,
			uint64_t start, int step)
{
	ss__wait_msgs_from(s, kind, from, n,
			   start + (uint64_t)s->timeout_ms * 1000000ull *
					   (uint64_t)step / 4);
}

static void ss_hma_send(struct ss_sync *s, int p, int local, size_t off,
			int remote, size_t remote_off, size_t len, int kind,
			struct ss__round_result *res)
{
	if (ss__alive(s, p) &&
	    ss__send(s, p, local, off, remote, remote_off, len, kind) == 0)
		res->bytes += len * sizeof(float);
}

int ss__round_hma(struct ss_sync *s, struct ss__round_result *res)
{
	uint64_t start = ss_now_ns();
	const float **parts = s->parts;
	struct ss_hma h;
	size_t c_len, p_len, c_off, p_off, slot;
	int k = 0;

	ss_hma_place(s, &h);
	c_off = ss_pieces(s, h.q * h.C, h.C, &c_len);
	p_off = ss_pieces(s, h.q * h.C + h.g, 1, &p_len);

	/* 1. Chunk q' of the snapshot to position q' of our group. */
	ss__copy(s->snap, s->w, s->n);
	for (int i = 0; i < h.n_group; i++) {
		int p = h.group[i], q = s->member_index[p] % h.G;
		size_t len, off = ss_pieces(s, q * h.C, h.C, &len);

		ss_hma_send(s, p, SS_R_SNAP, off, SS_R_INBOX,
			    h.base + (size_t)h.q * h.C * s->shard_max, len,
			    SS_MSG_MA_PART, res);
	}
	ss_hma_wait(s, SS_MSG_MA_PART, h.group, h.n_group, start, 1);
	for (int i = 0; i < h.n_group; i++) {
		int p = h.group[i];

		if (ss__got(s, SS_MSG_MA_PART, p))
			parts[k++] = s->inbox + h.base +
				     (size_t)(s->member_index[p] % h.G) * h.C *
					     s->shard_max;
	}
	ss__average(s->avg + c_off, s->snap + c_off, parts, k, c_len);

	/* 2. Piece q C + g' of our group's mean to position q of group g'. */
	for (int i = 0; i < h.n_column; i++) {
		int p = h.column[i], g = s->member_index[p] / h.G;
		size_t len, off = ss_pieces(s, h.q * h.C + g, 1, &len);

		ss_hma_send(s, p, SS_R_AVG, off, SS_R_INBOX,
			    h.base + (size_t)(h.q * h.C + h.g) * s->shard_max,
			    len, SS_MSG_MA_PART, res);
	}
	/* our own group's mean of our piece, beside the others' */
	slot = h.base + (size_t)(h.q * h.C + h.g) * s->shard_max;
	ss__copy(s->inbox + slot, s->avg + p_off, p_len);
	ss_hma_wait(s, SS_MSG_MA_PART, h.column, h.n_column, start, 2);
	k = 0;
	for (int i = 0; i < h.n_column; i++) {
		int p = h.column[i];

		if (ss__got(s, SS_MSG_MA_PART, p))
			parts[k++] =
				s->inbox + h.base +
				(size_t)(h.q * h.C + s->member_index[p] / h.G) *
					s->shard_max;
	}
	ss__average(s->avg + p_off, s->inbox + slot, parts, k, p_len);

	/*
	 * 3. Our piece to position q of every other group, into its inbox's
	 * place for our group: not into its AVG, where one that came late
	 * would land in a later round's group mean, which it sends on in
	 * steps 2 and 4 and applies.  Each piece that came is copied into
	 * our chunk; one that did not leaves the group's mean there.
	 */
	for (int i = 0; i < h.n_column; i++)
		ss_hma_send(s, h.column[i], SS_R_AVG, p_off, SS_R_INBOX,
			    ss_hma_piece_slot(s, h.g), p_len, SS_MSG_MA_AVG,
			    res);
	ss_hma_wait(s, SS_MSG_MA_AVG, h.column, h.n_column, start, 3);
	for (int i = 0; i < h.n_column; i++) {
		int p = h.column[i], g = s->member_index[p] / h.G;
		size_t len, off = ss_pieces(s, h.q * h.C + g, 1, &len);

		if (ss__got(s, SS_MSG_MA_AVG, p))
			ss__copy(s->avg + off,
				 s->inbox + ss_hma_piece_slot(s, g), len);
	}
	/* 4. The chunk, whole now, to the rest of our group. */
	for (int i = 0; i < h.n_group; i++)
		ss_hma_send(s, h.group[i], SS_R_AVG, c_off, SS_R_AVG, c_off,
			    c_len, SS_MSG_MA_AVG, res);
	ss_hma_wait(s, SS_MSG_MA_AVG, h.group, h.n_group, start, 4);

	/*
	 * Apply our chunk (a piece whose owner did not answer holds our
	 * group's mean), and each chunk of the group that came; one that did
	 * not is not read: it may still be landing.
	 */
	ss_hma_apply(s, c_off, c_len, res);
	for (int i = 0; i < h.n_group; i++) {
		int p = h.group[i];
		size_t len, off;

		if (!ss__got(s, SS_MSG_MA_AVG, p))
			continue;
		off = ss_pieces(s, (s->member_index[p] % h.G) * h.C, h.C, &len);
		ss_hma_apply(s, off, len, res);
	}
	return 0;
}
