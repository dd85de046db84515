// SPDX-License-Identifier: BSD-2-Clause
/*
 * Each algorithm's round as messages and memory passes, following
 * src/sync: the same peers, the same sizes, the same waits.  A memory
 * kernel's time is the bytes it moves over the calibrated kernel
 * bandwidth; a wait ends when every live peer's message came, or at the
 * round deadline (--round-timeout-ms), leaving the silent ones out.
 *
 * A phase's messages go to the peers in shifted order (rank + 1, rank + 2,
 * ...), where src/sync posts them from peer 0 up all at once: the NIC
 * interleaves its queue pairs, so no peer is written by all at once; the
 * simulator's sender has only a few in flight (node.c, sim_put), and
 * shifting keeps them spread over the receivers likewise.
 */
#include "sim.h"

#define F 4.0 /* bytes a float */
/* The j-th peer of a phase, in shifted order */
#define SIM_PEER(j) ((nd->rank + (j)) % c->nodes)

/* A peer a round sends to and waits for: not us, not known failed. */
static int sim_live(const struct sim_node *nd, int p)
{
	return p != nd->rank && !sim_peer_failed(p);
}

static void sim_kernel(struct sim_node *nd, double bytes)
{
	sim_cpu(nd, bytes / sim.cfg.kernel_bps, true);
}

/*
 * S-MA (src/sync/ma.c): snapshot; each shard to its owner; the owner
 * averages the k + 1 copies that came; its average to every rank; apply.
 * S-BMUF adds the block-momentum pass over the owned shard.
 */
static void sim_round_ma(struct sim_node *nd, bool bmuf)
{
	const struct sim_cfg *c = &sim.cfg;
	double deadline = sim_now() + c->round_timeout_s;
	double n = c->n_floats * F, shard = n / c->nodes;
	int sent = 0;

	sim_cpu(nd, 2 * n / c->copy_bps, true); /* the snapshot */
	for (int j = 1; j < c->nodes; j++)
		if (sim_live(nd, SIM_PEER(j))) {
			sim_send(nd, SIM_PEER(j), SIM_PART, shard);
			sent++;
		}
	sim_await(nd, SIM_PART, sent, deadline);
	sim_kernel(nd, (sent + 2) * shard);
	if (bmuf) /* G, D, w_g, target: four arrays read, three written */
		sim_kernel(nd, 7 * shard);
	for (int j = 1; j < c->nodes; j++)
		if (sim_live(nd, SIM_PEER(j)))
			sim_send(nd, SIM_PEER(j), SIM_AVG, shard);
	sim_await(nd, SIM_AVG, sent, deadline);
	sim_kernel(nd, 4 * n); /* w += avg - snap */
}

/*
 * Hierarchical S-MA over G groups of g ranks (N = G g): inside the group
 * the reduce-scatter of n/g shards; across the groups, each shard's G
 * owners (a column) reduce-scatter and all-gather pieces of n/N; then the
 * group's all-gather.  Per rank 2(g-1) + 2(G-1) messages instead of
 * 2(N-1), about the same bytes.
 */
static void sim_round_hma(struct sim_node *nd)
{
	const struct sim_cfg *c = &sim.cfg;
	double deadline = sim_now() + c->round_timeout_s;
	int g = c->group, groups = c->nodes / g;
	int base = nd->rank / g * g, col = nd->rank % g;
	double n = c->n_floats * F, shard = n / g, piece = n / c->nodes;
	int sent = 0, sent_col = 0;

	sim_cpu(nd, 2 * n / c->copy_bps, true);
	for (int j = 1; j < g; j++)
		if (sim_live(nd, base + (col + j) % g)) {
			sim_send(nd, base + (col + j) % g, SIM_PART, shard);
			sent++;
		}
	sim_await(nd, SIM_PART, sent, deadline);
	sim_kernel(nd, (sent + 2) * shard);
	for (int j = 1; j < groups; j++) {
		int p = (nd->rank / g + j) % groups * g + col;

		if (sim_live(nd, p)) {
			sim_send(nd, p, SIM_COL_PART, piece);
			sent_col++;
		}
	}
	sim_await(nd, SIM_COL_PART, sent_col, deadline);
	sim_kernel(nd, (sent_col + 2) * piece);
	for (int j = 1; j < groups; j++) {
		int p = (nd->rank / g + j) % groups * g + col;

		if (sim_live(nd, p))
			sim_send(nd, p, SIM_COL_AVG, piece);
	}
	sim_await(nd, SIM_COL_AVG, sent_col, deadline);
	for (int j = 1; j < g; j++)
		if (sim_live(nd, base + (col + j) % g))
			sim_send(nd, base + (col + j) % g, SIM_AVG, shard);
	sim_await(nd, SIM_AVG, sent, deadline);
	sim_kernel(nd, 4 * n);
}

/*
 * S-EASGD (src/sync/easgd.c): READ every owner's center shard, move
 * toward it, WRITE the delta to its owner, and apply the deltas that
 * come for our own shard.
 */
static void sim_round_easgd(struct sim_node *nd)
{
	const struct sim_cfg *c = &sim.cfg;
	double deadline = sim_now() + c->round_timeout_s;
	double n = c->n_floats * F, shard = n / c->nodes;
	int reads = 0, sent = 0;

	for (int j = 1; j < c->nodes; j++)
		if (sim_live(nd, SIM_PEER(j))) {
			sim_read(nd, SIM_PEER(j), shard);
			reads++;
		}
	sim_await(nd, SIM_READ_REPLY, reads, deadline);
	sim_kernel(nd, 4 * n); /* w, c, snap read; w, snap written */
	for (int j = 1; j < c->nodes; j++)
		if (sim_live(nd, SIM_PEER(j))) {
			sim_send(nd, SIM_PEER(j), SIM_DELTA, shard);
			sent++;
		}
	sim_await(nd, SIM_DELTA, sent, deadline);
	sim_kernel(nd, 3 * shard * sent); /* c += d for each delta */
}

/* Gossip (src/sync/gossip.c): READ one peer's replica, move toward it. */
static void sim_round_gossip(struct sim_node *nd)
{
	const struct sim_cfg *c = &sim.cfg;
	double deadline = sim_now() + c->round_timeout_s;
	double n = c->n_floats * F;
	int hops = 0;

	while ((1 << hops) < c->nodes)
		hops++;
	nd->gossip_step++;
	for (int attempt = 0; attempt < c->nodes; attempt++) {
		int p = (nd->rank +
			 (1 << ((nd->gossip_step + attempt) % hops))) %
			c->nodes;

		if (!sim_live(nd, p))
			continue;
		sim_read(nd, p, n);
		if (sim_await(nd, SIM_READ_REPLY, 1, deadline) == 1)
			sim_kernel(nd, 3 * n);
		return;
	}
}

void sim_round(struct sim_node *nd)
{
	nd->round++;
	nd->started++;
	switch (sim.cfg.algo) {
	case SIM_MA:
		sim_round_ma(nd, false);
		break;
	case SIM_BMUF:
		sim_round_ma(nd, true);
		break;
	case SIM_HMA:
		sim_round_hma(nd);
		break;
	case SIM_EASGD:
		sim_round_easgd(nd);
		break;
	case SIM_GOSSIP:
		sim_round_gossip(nd);
		break;
	case SIM_NONE:
		break;
	}
}
