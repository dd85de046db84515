// SPDX-License-Identifier: BSD-2-Clause
/*
 * A job as large as the cap (SS_FABRIC_MAX_PEERS, 65536 ranks): what the
 * handshake carries, what the options check costs, what a barrier's sets
 * take; and a peer of the 16-bit protocol told why it is refused.
 */
#include <criterion/criterion.h>
#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric/fabric_internal.h"
#include "fabric/verbs_internal.h"
#include "sync/sync_internal.h"

static struct ss__hello hello(uint32_t rank, uint32_t world)
{
	struct ss__hello h = { .job_key = 0x1234, .layout_hash = 0x99 };

	h.magic = SS_HELLO_MAGIC;
	h.version = SS_HELLO_VERSION;
	h.rank = rank;
	h.world = world;
	h.n_regions = 8;
	return h;
}

Test(world, the_largest_ranks_cross_the_wire)
{
	struct ss__hello mine = hello(0, 65536), peer = hello(65535, 65536);
	struct ss__hello wire, back;
	char why[256];

	ss__hello_to_wire(&peer, &wire);
	ss__hello_from_wire(&wire, &back);
	cr_assert_eq(back.rank, 65535);
	cr_assert_eq(back.world, 65536);
	cr_assert_eq(ss__hello_check(&mine, &back, 65535, why, sizeof(why)), 0,
		     "%s", why);
	/* a rank past the world is still refused */
	peer.rank = 65536;
	ss__hello_to_wire(&peer, &wire);
	ss__hello_from_wire(&wire, &back);
	cr_assert_eq(ss__hello_check(&mine, &back, -1, why, sizeof(why)),
		     SS_EHANDSHAKE);
	cr_assert(strstr(why, "unexpected rank 65536 (we are 0 of 65536)"),
		  "%s", why);
}

/* Version 4's hello: 16-bit rank, world and region count after the
 * version, as a peer of the last release sends it. */
Test(world, a_peer_of_the_16_bit_protocol_is_told_the_versions)
{
	struct ss__hello mine = hello(0, 2), back;
	unsigned char v4[48] = { 0 };
	uint32_t magic = htobe32(SS_HELLO_MAGIC);
	uint16_t version = htobe16(4), rank = htobe16(1), world = htobe16(2),
		 regions = htobe16(8);
	uint64_t key = htobe64(0x1234), layout = htobe64(0x99);
	char why[256];

	memcpy(v4, &key, 8);
	memcpy(v4 + 8, &layout, 8);
	memcpy(v4 + 24, &magic, 4);
	memcpy(v4 + 32, &version, 2);
	memcpy(v4 + 34, &rank, 2);
	memcpy(v4 + 36, &world, 2);
	memcpy(v4 + 38, &regions, 2);
	ss__hello_from_wire((const struct ss__hello *)v4, &back);
	cr_assert_eq(ss__hello_check(&mine, &back, 1, why, sizeof(why)),
		     SS_EHANDSHAKE);
	cr_assert(strstr(why, "protocol version differs: ours 5, theirs 4"),
		  "%s", why);
	cr_assert(strstr(why, "same ShadowSync release"), "%s", why);
}

/* 65536 addresses: the duplicate check is a sort, not 2 billion strcmps. */
Test(world, twins_among_65536_addresses_are_named, .timeout = 30)
{
	enum { W = 65536 };
	const char **addrs = calloc(W, sizeof(char *));
	char *text = malloc((size_t)W * 24);
	struct ss_fabric_options o;
	struct ss_fabric *f = NULL;

	cr_assert(addrs && text);
	for (int i = 0; i < W; i++) {
		addrs[i] = text + (size_t)i * 24;
		snprintf(text + (size_t)i * 24, 24, "10.%d.%d.%d:7000", i >> 16,
			 (i >> 8) & 255, i & 255);
	}
	addrs[65535] = addrs[40000];
	addrs[50000] = addrs[40001];
	ss_fabric_options_init(&o);
	o.transport = SS_TRANSPORT_SHM;
	o.world = W;
	o.rank = 0;
	o.addrs = addrs;
	cr_assert_eq(ss_fabric_open(&f, &o), SS_EUSAGE);
	cr_assert_null(f);
	cr_assert(strstr(ss_last_error()->what,
			 "ranks 40000 and 65535 at '10.0.156.64:7000'"),
		  "%s", ss_last_error()->what);
	o.world = W + 1;
	cr_assert_eq(ss_fabric_open(&f, &o), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->hint, "1 to 65536"), "%s",
		  ss_last_error()->hint);
	free(addrs);
	free(text);
}

/* A barrier's four sets of a 65536-rank job: a bit a rank, apart. */
Test(world, a_barriers_sets_hold_every_rank)
{
	enum { W = 65536 };
	struct ss__state *st = calloc(1, ss__state_bytes(W));

	cr_assert_eq(ss__set_words(W), 1024);
	cr_assert_eq(ss__set_words(65), 2);
	cr_assert_eq(ss__state_bytes(W), sizeof(*st) + 4 * 1024 * 8);
	cr_assert_not_null(st);
	for (int slot = 0; slot < 2; slot++)
		for (int which = 0; which < 2; which++) {
			uint64_t *set = ss__state_set(st, W, slot, which);

			/* the last word of each set is its own */
			set[1023] = htobe64(1ull << 63 |
					    (uint64_t)(2 * slot + which));
		}
	for (int slot = 0; slot < 2; slot++)
		for (int which = 0; which < 2; which++)
			cr_assert_eq(be64toh(ss__state_set(st, W, slot,
							   which)[1023]),
				     1ull << 63 | (uint64_t)(2 * slot + which));
	cr_assert_eq((char *)(ss__state_set(st, W, 1, 1) + 1024),
		     (char *)st + ss__state_bytes(W));
	free(st);
}

/* Receives for immediates: 128 a peer, as each QP's own queue had, up to
 * 64 peers; then one queue of 8192 whatever the world. */
Test(world, shared_receives_stop_growing_with_the_world)
{
	cr_assert_eq(ss__verbs_srq_depth(1, 16384), 128);
	cr_assert_eq(ss__verbs_srq_depth(2, 16384), 128);
	cr_assert_eq(ss__verbs_srq_depth(4, 16384), 384);
	cr_assert_eq(ss__verbs_srq_depth(65, 16384), 8192);
	cr_assert_eq(ss__verbs_srq_depth(4096, 16384), 8192);
	cr_assert_eq(ss__verbs_srq_depth(65536, 16384), 8192);
	cr_assert_eq(ss__verbs_srq_depth(65536, 1000), 1000);
}

/*
 * Every QP's completions and the shared receives go to one CQ, which must
 * never overrun: 256 sends in flight a peer while the device's CQ holds
 * them (4 M entries, mlx5's limit: up to about 16000 ranks), fewer beyond,
 * and none where not even one fits.  The sum never passes the CQ.
 */
Test(world, sends_in_flight_fit_the_completion_queue)
{
	static const struct {
		int world, max_cqe;
		uint32_t srq, want;
	} cases[] = {
		{ 2, 4194303, 128, 256 },
		{ 4096, 4194303, 8192, 256 },
		{ 16384, 4194303, 8192, 255 },
		{ 65536, 4194303, 8192, 63 },
		{ 65536, 65536 + 8192 + 16, 8192, 1 },
		{ 65536, 70000, 8192, 0 },
		{ 3, 100, 384, 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		uint32_t got = ss__verbs_sq_limit(
			cases[i].world, cases[i].max_cqe, cases[i].srq);

		cr_assert_eq(got, cases[i].want,
			     "%d ranks, CQ of %d, %u receives: %u, want %u",
			     cases[i].world, cases[i].max_cqe, cases[i].srq,
			     got, cases[i].want);
		if (got)
			cr_assert_leq((int64_t)cases[i].world * got +
					      cases[i].srq + 16,
				      (int64_t)cases[i].max_cqe);
	}
}

/*
 * A shared receive's completion names its QP by number: the map finds the
 * peer, forgets a number whose peer has a new QP since, and survives more
 * reconnections than it has room (it keeps the live numbers then).
 */
Test(world, a_receive_finds_its_peer_by_qp_number)
{
	enum { W = 1000, RECONNECTS = 5000 };
	struct ss_verbs v = { 0 };
	struct ibv_qp *qps = calloc(W + RECONNECTS, sizeof(*qps));

	v.peers = calloc(W, sizeof(*v.peers));
	v.qpn_cap = 4096;
	v.qpns = malloc(v.qpn_cap * sizeof(*v.qpns));
	cr_assert(qps && v.peers && v.qpns);
	for (uint32_t i = 0; i < v.qpn_cap; i++)
		v.qpns[i].peer = -1;
	for (int p = 0; p < W; p++) {
		qps[p].qp_num = 0x100 + (uint32_t)p * 7919 % 0xfffff;
		v.peers[p].qp = &qps[p];
		cr_assert_eq(ss__verbs_qpn_add(&v, qps[p].qp_num, p), 0);
	}
	for (int k = 0; k < RECONNECTS; k++) { /* peer 5 comes back often */
		struct ibv_qp *old = v.peers[5].qp, *now = &qps[W + k];

		now->qp_num = 0x200000 + (uint32_t)k;
		v.peers[5].qp = now;
		cr_assert_eq(ss__verbs_qpn_add(&v, now->qp_num, 5), 0);
		cr_assert_eq(ss__verbs_qpn_peer(&v, old->qp_num), -1);
		cr_assert_eq(ss__verbs_qpn_peer(&v, now->qp_num), 5);
	}
	cr_assert_leq(v.qpn_used, 3 * v.qpn_cap / 4);
	for (int p = 0; p < W; p++)
		cr_assert_eq(ss__verbs_qpn_peer(&v, v.peers[p].qp->qp_num), p,
			     "peer %d", p);
	cr_assert_eq(ss__verbs_qpn_peer(&v, 0x7fffffff), -1);
	free(v.qpns);
	free(v.peers);
	free(qps);
}
