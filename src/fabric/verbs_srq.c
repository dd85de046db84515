// SPDX-License-Identifier: BSD-2-Clause
/*
 * The shared receive queue: the receives that immediates (WRITE_WITH_IMM)
 * consume, one queue for every peer's QP, so that their number stops
 * growing with the job (128 a peer on each QP's own queue made 8 million
 * at 65536 ranks).  A receive's completion says which QP took it by
 * number only; the map below gives the peer.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "verbs_internal.h"

uint32_t ss__verbs_srq_depth(int world, uint32_t max_wr)
{
	uint64_t want = (uint64_t)SS_VERBS_RQ_DEPTH *
			(uint64_t)(world > 1 ? world - 1 : 1);

	if (want > SS_VERBS_SRQ_MAX)
		want = SS_VERBS_SRQ_MAX;
	return (uint32_t)(want < max_wr ? want : max_wr);
}

uint32_t ss__verbs_sq_limit(int world, int max_cqe, uint32_t srq_depth)
{
	int64_t room = (int64_t)max_cqe - (int64_t)srq_depth - 16,
		each = world > 0 ? room / world : 0;

	return each <= 0		 ? 0 :
	       each >= SS_VERBS_SQ_DEPTH ? SS_VERBS_SQ_DEPTH :
					   (uint32_t)each;
}

int ss__verbs_srq_repost(struct ss_verbs *v)
{
	struct ibv_recv_wr wr = { .wr_id = SS_WR_RECV }, *bad;

	return -ibv_post_srq_recv(v->srq, &wr, &bad); /* the error itself */
}

static uint32_t ss_qpn_hash(uint32_t qpn, uint32_t cap)
{
	return (qpn * 0x9e3779b1u) & (cap - 1);
}

/* Entries are never removed: a number's last peer is overwritten when the
 * device reuses it, and a stale one is told by the peer's QP now. */
static void ss_qpn_put(struct ss_verbs *v, uint32_t qpn, int p)
{
	uint32_t i = ss_qpn_hash(qpn, v->qpn_cap);

	while (v->qpns[i].peer >= 0 && v->qpns[i].qpn != qpn)
		i = (i + 1) & (v->qpn_cap - 1);
	if (v->qpns[i].peer < 0)
		v->qpn_used++;
	v->qpns[i] = (struct ss_verbs_qpn){ .qpn = qpn, .peer = p };
}

int ss__verbs_qpn_add(struct ss_verbs *v, uint32_t qpn, int p)
{
	/* three quarters full of reconnections: keep the live ones only */
	if (4 * (v->qpn_used + 1) > 3 * v->qpn_cap) {
		struct ss_verbs_qpn *old = v->qpns;

		v->qpns = malloc(v->qpn_cap * sizeof(*v->qpns));
		if (!v->qpns) {
			v->qpns = old;
			return -ENOMEM;
		}
		for (uint32_t i = 0; i < v->qpn_cap; i++)
			v->qpns[i].peer = -1;
		v->qpn_used = 0;
		for (uint32_t i = 0; i < v->qpn_cap; i++) {
			int q = old[i].peer;

			if (q >= 0 && v->peers[q].qp &&
			    v->peers[q].qp->qp_num == old[i].qpn)
				ss_qpn_put(v, old[i].qpn, q);
		}
		free(old);
	}
	ss_qpn_put(v, qpn, p);
	return 0;
}

int ss__verbs_qpn_peer(const struct ss_verbs *v, uint32_t qpn)
{
	uint32_t i = ss_qpn_hash(qpn, v->qpn_cap);

	while (v->qpns[i].peer >= 0) {
		if (v->qpns[i].qpn == qpn) {
			int p = v->qpns[i].peer;

			return v->peers[p].qp && v->peers[p].qp->qp_num == qpn ?
				       p :
				       -1;
		}
		i = (i + 1) & (v->qpn_cap - 1);
	}
	return -1;
}

int ss__verbs_srq_open(struct ss_fabric *f)
{
	struct ss_verbs *v = f->backend;
	struct ibv_srq_init_attr sa = { 0 };
	int err;

	if (v->dev_attr.max_srq == 0 || v->dev_attr.max_srq_wr == 0)
		return ss_error_set(SS_ENODEVICE,
				    "it has no shared receive queues",
				    "use a device with SRQ support (every "
				    "InfiniBand and RoCE HCA, rxe and siw have "
				    "it)",
				    "%s", ss__verbs_where(v));
	v->srq_depth = ss__verbs_srq_depth(f->opts.world,
					   (uint32_t)v->dev_attr.max_srq_wr);
	v->qpn_cap = 16;
	while (v->qpn_cap < 4 * (uint32_t)f->opts.world)
		v->qpn_cap *= 2;
	v->qpns = malloc(v->qpn_cap * sizeof(*v->qpns));
	if (!v->qpns)
		return ss_error_set(-ENOMEM, NULL, NULL, "QP map of %u",
				    v->qpn_cap);
	for (uint32_t i = 0; i < v->qpn_cap; i++)
		v->qpns[i].peer = -1;
	sa.attr.max_wr = v->srq_depth;
	sa.attr.max_sge = 1;
	v->srq = ibv_create_srq(v->pd, &sa);
	if (!v->srq)
		return ss_error_set(-errno, NULL, NULL,
				    "ibv_create_srq of %u receives on %s",
				    v->srq_depth, ss__verbs_where(v));
	v->srq_depth = sa.attr.max_wr; /* the device may round it up */
	for (uint32_t i = 0; i < v->srq_depth; i++) {
		err = ss__verbs_srq_repost(v);
		if (err < 0)
			return ss_error_set(err, NULL, NULL,
					    "ibv_post_srq_recv %u of %u on %s",
					    i + 1, v->srq_depth,
					    ss__verbs_where(v));
	}
	return 0;
}

/*
 * A QP destroyed may take receives it had taken from the queue with it,
 * without a completion (each completion gives its receive back): fill the
 * queue again, up to where the device says it is full.
 */
void ss__verbs_srq_fill(struct ss_verbs *v)
{
	for (uint32_t i = 0; v->srq && i < v->srq_depth; i++)
		if (ss__verbs_srq_repost(v) < 0)
			break;
}

void ss__verbs_srq_close(struct ss_verbs *v)
{
	if (v->srq)
		ibv_destroy_srq(v->srq);
	v->srq = NULL;
	free(v->qpns);
	v->qpns = NULL;
}
