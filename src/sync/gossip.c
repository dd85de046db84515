// SPDX-License-Identifier: BSD-2-Clause
/*
 * Gossip: no rounds to agree on and no owners.  Each round READs one peer's
 * replica and moves toward it: w += beta (w_peer - w).  Peers come from the
 * exponential graph (rank + 2^k mod N, k cycling) or at random; a peer that
 * has failed or does not answer in time is passed over for the next one.
 */
#include "sync_internal.h"

/* The peer for this round: exponential graph, or uniform at random. */
static int ss_gossip_peer(struct ss_sync *s, int attempt)
{
	int hops = 0;

	if (s->opts.gossip_random) {
		/* xorshift64: cheap and reproducible with --seed */
		s->gossip_state ^= s->gossip_state << 13;
		s->gossip_state ^= s->gossip_state >> 7;
		s->gossip_state ^= s->gossip_state << 17;
		return (s->rank + 1 +
			(int)(s->gossip_state % (uint64_t)(s->world - 1))) %
		       s->world;
	}
	/* its own count, not the round: barriers skip round numbers */
	while ((1 << hops) < s->world)
		hops++;
	return (s->rank + (1 << ((s->gossip_step + (uint32_t)attempt) %
				 (uint32_t)hops))) %
	       s->world;
}

int ss__round_gossip(struct ss_sync *s, struct ss__round_result *res)
{
	uint64_t deadline = ss__deadline(s);

	if (s->world < 2)
		return 0;
	s->gossip_step++; /* the next hop of the exponential graph */
	for (int attempt = 0; attempt < s->world; attempt++) {
		int p = ss_gossip_peer(s, attempt);

		if (p == s->rank || !ss__readable(s, p))
			continue;
		s->reads_ok[p] = false;
		if (ss__post_read(s, p, SS_R_SNAP, 0, SS_R_PARAMS, 0,
				  s->n * sizeof(float)) != 0)
			continue; /* refused at once: try the next peer */
		ss__wait_sends(s, deadline);
		if (!s->reads_ok[p]) {
			/* Out of time: no more READs into SNAP this round. */
			ss__leave_out(s, p, "its replica did not arrive");
			return 0;
		}
		ss__distance(s->w, s->snap, s->n, &res->diff2, &res->norm2);
		ss__gossip(s->w, s->snap, s->n, (float)s->opts.beta);
		return 0;
	}
	return 0; /* nobody to gossip with this round */
}
