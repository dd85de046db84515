// SPDX-License-Identifier: BSD-2-Clause
/*
 * The sync layer's common part: options, the replica's regions, rounds
 * and their statistics.  Messages are in messages.c, barriers in
 * barrier.c, the start (and joining) in join.c, the foreground mode in
 * foreground.c.
 */
#include <endian.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "sync_internal.h"

static const char *const ss_algo_names[] = { "none", "ma",     "easgd",
					     "bmuf", "gossip", NULL };

void ss_sync_options_init_size(struct ss_sync_options *opts, size_t size,
			       enum ss_sync_algo algo)
{
	struct ss_sync_options o = {
		.size = sizeof(o), .algo = algo, .eta = -1, .nesterov = true
	};

	ss__options_out(opts, size, &o, sizeof(o));
}

int ss_sync_algo_parse(const char *option, const char *text,
		       enum ss_sync_algo *algo)
{
	int i;
	int rc = ss_parse_choice(option, text, ss_algo_names, &i);

	if (rc == 0)
		*algo = (enum ss_sync_algo)i;
	return rc;
}

const char *ss_sync_algo_name(enum ss_sync_algo algo)
{
	return ss_algo_names[algo];
}

/* Fill in the defaults that depend on the number of ranks. */
static void ss_sync_defaults(struct ss_sync *s)
{
	struct ss_sync_options *o = &s->opts;

	if (o->zeta <= 0)
		o->zeta = 1.0;
	if (o->beta <= 0)
		o->beta = 0.5;
	s->timeout_ms = o->round_timeout_ms ? o->round_timeout_ms :
					      SS_ROUND_TIMEOUT_MIN_MS;
	/* what a round moves to and from one peer, both directions at once */
	s->peer_round_bytes =
		(double)(o->algo == SS_SYNC_GOSSIP ? s->n : 2 * s->shard_max) *
		sizeof(float);
	s->gossip_state =
		o->seed ? o->seed : 0x9e3779b97f4a7c15ull ^ (uint64_t)s->rank;
}

/* Floats in each region: one table for allocating and for sizing. */
static size_t ss_region_floats(int region, size_t n, int world, bool hma)
{
	switch (region) {
	case SS_R_INBOX: /* 2 x M slots of ceil(n / M) floats for any M
			  * members, then two barrier words per rank, then
			  * where hierarchical rounds may run their pieces'
			  * averages (ss__hma_piece_off) */
		return ss__hma_area_off(n, world) +
		       (hma ? 2 * ss__hma_half(n, world) : 0);
	case SS_R_STATE:
		return ss__state_bytes(world) / sizeof(float);
	case SS_R_SNAP: /* and the word a barrier sends, then a peer's
			 * state as READ (ss__view_off) */
		return (ss__view_off(n) + ss__state_bytes(world)) /
		       sizeof(float);
	case SS_R_CLAIMS: /* the counter, a word per claim in flight, and
			   * SS_CLAIM_CHECK's and SS_CLAIM_SEED's */
		return 2 * (3 + SS_CLAIM_SLOTS);
	default: /* PARAMS, AVG, CENTER */
		return n;
	}
}

size_t ss_sync_registered_bytes(size_t n, int world)
{
	const size_t page = 4096;
	bool hma = world >= SS_SYNC_HIERARCHICAL_FROM;
	size_t total = 0;

	for (int i = 0; i < SS_R_COUNT; i++)
		total += (ss_region_floats(i, n, world, hma) * sizeof(float) +
			  page - 1) /
			 page * page;
	return total;
}

size_t ss_sync_registered_bytes_for(size_t n,
				    const struct ss_sync_options *given,
				    int world)
{
	const size_t page = 4096;
	struct ss_sync_options o;
	int from;
	size_t synced, total = 0;

	ss_sync_options_init(&o, SS_SYNC_NONE);
	if (ss__options_in(&o, sizeof(o), given,
			   offsetof(struct ss_sync_options, hierarchical_from),
			   "ss_sync_options") < 0)
		return 0;
	synced = o.synced && o.synced < n ? o.synced : n;
	from = o.hierarchical_from ? o.hierarchical_from :
				     SS_SYNC_HIERARCHICAL_FROM;
	/* as ss_sync_alloc(): the whole replica, the rest for the synced
	 * prefix, the hierarchical area where ss__hma_possible() says */
	for (int i = 0; i < SS_R_COUNT; i++)
		total += (ss_region_floats(i, i == SS_R_PARAMS ? n : synced,
					   world,
					   o.algo == SS_SYNC_MA && from > 0 &&
						   world >= from) *
				  sizeof(float) +
			  page - 1) /
			 page * page;
	return total;
}

/*
 * Each region bound to the plan's NUMA node before its first touch (the
 * fabric calls this between mapping and registering): registering pins
 * pages where they are, and binding them afterwards moved nothing.
 */
static void ss_sync_place(void *ctx, void *ptr, size_t len)
{
	struct ss_sync *s = ctx;

	if (ss_topo_place(s->opts.topo, ptr, len, s->opts.numa) < 0 &&
	    !s->place_warned) {
		s->place_warned = true;
		ss_log_warn("sync: replica memory not bound to NUMA node %d: "
			    "%s: %s",
			    s->opts.numa, ss_last_error()->what,
			    ss_last_error()->why);
	}
}

/*
 * Where the replica's pages are, once registered (and so present): a
 * sample of them, each asked of the kernel.  Pages not yet touched (shm
 * maps lazily) cannot be told and are passed over.
 */
static void ss_sync_check_placement(struct ss_sync *s)
{
	size_t len = ss_region_len(s->r[SS_R_PARAMS]), page = 4096;
	const char *base = ss_region_ptr(s->r[SS_R_PARAMS]);
	int wrong = -1, asked = 0, off = 0;

	for (int k = 0; k < 16; k++) {
		size_t at = len / page * (size_t)k / 16 * page;
		int node = ss_topo_memory_node(s->opts.topo, base + at);

		if (node < 0)
			continue;
		asked++;
		if (node != s->opts.numa) {
			wrong = node;
			off++;
		}
	}
	if (off)
		ss_log_warn("sync: %d of %d sampled pages of the replica are "
			    "on NUMA node %d, not the planned %d: trainers and "
			    "the NIC reach them across the interconnect "
			    "(is the memory of node %d full?)",
			    off, asked, wrong, s->opts.numa, s->opts.numa);
	else if (asked)
		ss_log_debug("sync: the replica is on NUMA node %d (%d pages "
			     "sampled)",
			     s->opts.numa, asked);
	s->placement_off = off;
}

static int ss_sync_alloc(struct ss_sync *s)
{
	static const unsigned access[SS_R_COUNT] = {
		[SS_R_PARAMS] = SS_ACCESS_REMOTE_READ,
		[SS_R_INBOX] = SS_ACCESS_REMOTE_WRITE,
		[SS_R_AVG] = SS_ACCESS_REMOTE_WRITE,
		[SS_R_CENTER] = SS_ACCESS_REMOTE_READ,
		[SS_R_SNAP] = SS_ACCESS_LOCAL,
		[SS_R_STATE] = SS_ACCESS_REMOTE_READ,
		[SS_R_CLAIMS] = SS_ACCESS_REMOTE_ATOMIC,
	};

	if (s->opts.topo)
		ss_fabric_set_placement(s->fabric, ss_sync_place, s);
	for (int i = 0; i < SS_R_COUNT; i++) {
		/* the whole replica; the rest sized for what is synchronized */
		size_t floats = i == SS_R_PARAMS ?
					s->len :
					ss_region_floats(i, s->n, s->world,
							 ss__hma_possible(s));
		int rc = ss_fabric_alloc(s->fabric, floats * sizeof(float),
					 access[i], &s->r[i]);

		if (rc < 0)
			return rc;
		if (ss_region_index(s->r[i]) != i)
			return ss_error_set(
				-EINVAL, "the fabric has other regions",
				"create the sync layer first, on a fresh fabric",
				"sync region %d", i);
	}
	s->w = ss_region_ptr(s->r[SS_R_PARAMS]);
	s->inbox = ss_region_ptr(s->r[SS_R_INBOX]);
	s->avg = ss_region_ptr(s->r[SS_R_AVG]);
	s->center = ss_region_ptr(s->r[SS_R_CENTER]);
	s->snap = ss_region_ptr(s->r[SS_R_SNAP]);
	s->state = ss_region_ptr(s->r[SS_R_STATE]);
	s->state->lowest = 0; /* every rank is a member until a barrier */
	s->claim_words = ss_region_ptr(s->r[SS_R_CLAIMS]);
	s->ctrl = (uint32_t *)(s->inbox + ss__ctrl_off(s));
	ss_fabric_set_placement(s->fabric, NULL, NULL);
	if (s->opts.topo)
		ss_sync_check_placement(s);
	return 0;
}

/*
 * Round numbers compare modulo 2^28 (ss__rounds_after): a mark left
 * 2^27 rounds behind would read as ahead.  So each round brings the ones
 * that only say "before this round" up to the round before, which reads
 * the same: a skip of an earlier round, and a peer's newest round (a
 * member sends every round; one silent that long only stays behind).
 */
static void ss_renew_round_marks(struct ss_sync *s)
{
	uint32_t before = (s->round - 1) & SS_ROUND_MASK,
		 far = (s->round - (1u << 26)) & SS_ROUND_MASK;

	for (int p = 0; p < s->world; p++) {
		if (ss__rounds_after(s->skipped[p], s->round) < 0)
			s->skipped[p] = before;
		if (ss__rounds_after(s->latest[p], far) < 0)
			s->latest[p] = far;
	}
}

/* The per-peer state, every round "none yet" (round -1). */
static int ss_sync_alloc_peers(struct ss_sync *s)
{
	size_t w = (size_t)s->world;
	bool ok = true;

	for (int k = 0; k < SS_MSG_KINDS; k++) {
		s->seen[k] = malloc(w * sizeof(uint32_t));
		s->arrived[k] = malloc(2 * w * sizeof(uint32_t));
		ok = ok && s->seen[k] && s->arrived[k];
		for (size_t p = 0; ok && p < w; p++)
			s->seen[k][p] = s->arrived[k][p] =
				s->arrived[k][w + p] = SS_ROUND_MASK;
	}
	s->latest = malloc(w * sizeof(uint32_t));
	s->skipped = malloc(w * sizeof(uint32_t));
	s->skip_sent = malloc(w * sizeof(uint32_t));
	s->left_out_round = malloc(w * sizeof(uint32_t));
	ok = ok && s->latest && s->skipped && s->skip_sent && s->left_out_round;
	for (size_t p = 0; ok && p < w; p++)
		s->latest[p] = s->skipped[p] = s->skip_sent[p] =
			s->left_out_round[p] = SS_ROUND_MASK;
	s->reads_ok = calloc(w, sizeof(bool));
	s->left_out = calloc(w, sizeof(bool));
	s->paused = calloc(w, sizeof(bool));
	s->epoch = calloc(w, sizeof(uint32_t));
	s->view_read_epoch = calloc(w, sizeof(uint32_t));
	s->center_unsure = calloc(w, sizeof(bool));
	s->joining = calloc(w, sizeof(bool));
	s->called = calloc(w, sizeof(bool));
	s->dropped_until = calloc(w, sizeof(uint64_t));
	s->dropped_epoch = calloc(w, sizeof(uint32_t));
	s->came_seen = calloc(w, sizeof(bool));
	s->barrier_sent = calloc(w, sizeof(bool));
	s->easgd_early = calloc(2 * w, sizeof(bool));
	s->easgd_early_round = calloc(2 * w, sizeof(uint32_t));
	s->in_flight = calloc(w, sizeof(int));
	s->flight_start_ns = calloc(w, sizeof(uint64_t));
	s->flight_bytes = calloc(w, sizeof(uint64_t));
	s->left_out_count = calloc(w, sizeof(uint64_t));
	s->bandwidth = calloc(w, sizeof(double));
	s->member_index = calloc(w, sizeof(int));
	s->left = calloc(w, sizeof(bool));
	s->view = malloc(ss__state_bytes(s->world));
	s->parts = calloc(w, sizeof(*s->parts));
	s->came = calloc(w, sizeof(bool));
	s->done_sent = calloc(w, sizeof(bool));
	s->late = calloc(w, sizeof(bool));
	s->member_rank = calloc(w, sizeof(int));
	s->hma_peers = calloc(w, sizeof(int));
	s->answered = calloc(w, sizeof(int));
	if (!s->view || !s->parts || !s->came || !s->done_sent || !s->late ||
	    !s->member_rank || !s->hma_peers || !s->answered)
		ok = false;
	if (!ok || !s->reads_ok || !s->left_out || !s->paused || !s->epoch ||
	    !s->view_read_epoch || !s->center_unsure || !s->joining ||
	    !s->called || !s->dropped_until || !s->dropped_epoch ||
	    !s->came_seen || !s->barrier_sent || !s->easgd_early ||
	    !s->easgd_early_round || !s->in_flight || !s->flight_start_ns ||
	    !s->flight_bytes || !s->left_out_count || !s->bandwidth ||
	    !s->member_index || !s->left)
		return ss_error_set(-ENOMEM, NULL, NULL,
				    "sync state of %d peers", s->world);
	return 0;
}

int ss_sync_create(struct ss_sync **out, struct ss_fabric *fabric, size_t n,
		   const struct ss_sync_options *given)
{
	struct ss_sync_options copy;
	const struct ss_sync_options *opts = &copy;
	struct ss_sync *s;
	int rc;

	*out = NULL;
	ss_sync_options_init(&copy, SS_SYNC_NONE);
	/* the oldest: before hierarchical_from (0.1 as first released) */
	rc = ss__options_in(&copy, sizeof(copy), given,
			    offsetof(struct ss_sync_options, hierarchical_from),
			    "ss_sync_options");
	if (rc < 0)
		return rc;
	if (n == 0)
		return ss_error_set(-EINVAL, "no parameters", NULL,
				    "replica of 0 floats");
	if (opts->synced > n)
		return ss_error_set(-EINVAL,
				    "more floats to synchronize than the "
				    "replica has",
				    NULL, "%zu of a replica of %zu floats",
				    opts->synced, n);
	s = calloc(1, sizeof(*s));
	if (!s)
		return ss_error_set(-ENOMEM, NULL, NULL, "sync");
	s->fabric = fabric;
	s->opts = *opts;
	if (s->opts.max_gap > INT64_MAX) /* compared signed */
		s->opts.max_gap = INT64_MAX;
	s->len = n;
	s->n = opts->synced ? opts->synced : n;
	s->rank = ss_fabric_rank(fabric);
	s->world = ss_fabric_world(fabric);

	pthread_mutex_init(&s->lock, NULL);
	pthread_mutex_init(&s->fabric_lock, NULL);
	pthread_mutex_init(&s->claim_lock, NULL);
	{
		pthread_condattr_t attr; /* claims wait by the monotonic clock */

		pthread_condattr_init(&attr);
		pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
		pthread_cond_init(&s->claim_cond, &attr);
		pthread_cond_init(&s->round_cond, &attr);
		pthread_condattr_destroy(&attr);
	}
	ss_sync_defaults(s);
	rc = ss_sync_alloc_peers(s);
	if (rc < 0)
		goto err;
	for (int p = 0; p < s->world; p++)
		s->came[p] =
			true; /* every rank a member, until a barrier says */
	s->n_members = 0;
	ss__set_members(s, s->came);
	s->view_changes = 0;
	if (opts->algo == SS_SYNC_BMUF) { /* of our shard only */
		s->w_g = calloc(s->n, sizeof(float));
		s->momentum = calloc(s->n, sizeof(float));
		if (!s->w_g || !s->momentum) {
			rc = ss_error_set(-ENOMEM, NULL, NULL,
					  "S-BMUF state of %zu floats", s->n);
			goto err;
		}
	}
	rc = ss_sync_alloc(s);
	if (rc < 0)
		goto err;
	*out = s;
	return 0;

err:
	ss_sync_destroy(&s);
	return rc;
}

void ss_sync_destroy(struct ss_sync **sync)
{
	struct ss_sync *s;

	if (!sync || !*sync)
		return;
	s = *sync;
	if (s->running)
		ss_shadow_stop(s);
	if (s->fg_init) {
		pthread_cond_destroy(&s->fg_cond);
		pthread_mutex_destroy(&s->fg_lock);
	}
	for (int k = 0; k < SS_MSG_KINDS; k++) {
		free(s->seen[k]);
		free(s->arrived[k]);
	}
	free(s->latest);
	free(s->skipped);
	free(s->skip_sent);
	free(s->left_out_round);
	free(s->easgd_early_round);
	free(s->in_flight);
	free(s->flight_start_ns);
	free(s->flight_bytes);
	free(s->left_out_count);
	free(s->bandwidth);
	free(s->member_index);
	free(s->left);
	free(s->view);
	free(s->parts);
	free(s->came);
	free(s->done_sent);
	free(s->late);
	free(s->member_rank);
	free(s->hma_peers);
	free(s->answered);
	free(s->paused);
	free(s->epoch);
	free(s->view_read_epoch);
	free(s->center_unsure);
	free(s->joining);
	free(s->called);
	free(s->dropped_until);
	free(s->dropped_epoch);
	free(s->came_seen);
	free(s->barrier_sent);
	free(s->reads_ok);
	free(s->easgd_early);
	free(s->left_out);
	free(s->w_g);
	free(s->momentum);
	pthread_mutex_destroy(&s->lock);
	pthread_mutex_destroy(&s->fabric_lock);
	pthread_mutex_destroy(&s->claim_lock);
	pthread_cond_destroy(&s->claim_cond);
	pthread_cond_destroy(&s->round_cond);
	free(s);
	*sync = NULL;
}

float *ss_sync_params(struct ss_sync *s)
{
	return s->w;
}

size_t ss_sync_len(const struct ss_sync *s)
{
	return s->len;
}

size_t ss_sync_synced_len(const struct ss_sync *s)
{
	return s->n;
}

/* ---- rounds and statistics ---------------------------------------------- */

static void ss_record(struct ss_sync *s, uint64_t start_ns,
		      const struct ss__round_result *res)
{
	uint64_t it =
		atomic_load_explicit(&s->iterations, memory_order_relaxed);

	pthread_mutex_lock(&s->lock);
	s->latencies[s->rounds % SS_LATENCIES] =
		(double)(ss_now_ns() - start_ns) / 1e3;
	s->rounds++;
	s->rounds_partial += s->partial;
	s->bytes_sent += res->bytes;
	s->gap_sum += (double)(it - s->last_iterations);
	s->last_iterations = it;
	atomic_store_explicit(&s->round_iterations, it, memory_order_relaxed);
	s->gap_last_partial = s->partial;
	if (res->norm2 > 0)
		s->divergence = sqrt(res->diff2 / res->norm2);
	pthread_cond_broadcast(&s->round_cond); /* trainers past max_gap */
	pthread_mutex_unlock(&s->lock);
}

bool ss__set_members(struct ss_sync *s, const bool *in)
{
	int m = 0;
	bool changed = false;

	for (int p = 0; p < s->world; p++) {
		bool member = in[p] || p == s->rank;

		changed = changed || member != (s->member_index[p] >= 0) ||
			  !s->n_members;
		if (member)
			s->member_rank[m] = p;
		s->member_index[p] = member ? m++ : -1;
	}
	pthread_mutex_lock(&s->lock); /* ss_sync_get_stats reads it */
	s->n_members = m;
	pthread_mutex_unlock(&s->lock);
	s->hma_group = ss__hma_group(m);
	for (int p = 0; s->state && p < s->world; p++)
		if (s->member_index[p] >= 0) {
			s->state->lowest = htobe32((uint32_t)p);
			break;
		}
	s->shard_max = (s->n + (size_t)m - 1) / (size_t)m;
	/* what a round moves to and from one peer, both directions at once */
	s->peer_round_bytes =
		(double)(s->opts.algo == SS_SYNC_GOSSIP ? s->n :
							  2 * s->shard_max) *
		sizeof(float);
	if (changed && s->begin_ns) {
		char list[256];
		size_t len = 0;

		list[0] = '\0';
		for (int p = 0; p < s->world && len + 12 < sizeof(list); p++)
			if (s->member_index[p] >= 0)
				len += (size_t)snprintf(
					list + len, sizeof(list) - len, "%s%d",
					len ? "," : "", p);
		ss_log_warn("sync: rank %d goes on with %d members (%s), the "
			    "shards re-divided",
			    s->rank, m, list);
		pthread_mutex_lock(&s->lock);
		s->view_changes++;
		pthread_mutex_unlock(&s->lock);
		ss__state_from_replica(s);
		memset(s->center_unsure, 1, (size_t)s->world * sizeof(bool));
	}
	return changed;
}

bool ss__barrier_due(const struct ss_sync *s)
{
	if (ss__join_wanted(s))
		return true;
	for (int p = 0; p < s->world; p++) {
		bool member = s->member_index[p] >= 0,
		     ok = ss_fabric_peer_ok(s->fabric, p);

		if (p == s->rank)
			continue;
		if (member && (s->left[p] || !ok))
			return true; /* a member is gone: re-divide */
		if (!ok || s->left[p])
			continue;
		/*
		 * A peer called us to the barrier it holds: its members
		 * change for a reason that may be its own (one of its
		 * connections failed or came back), and it waits for us.
		 */
		if (s->called[p])
			return true;
		/*
		 * A rank out of the members that is here and has not left
		 * (it came late to a barrier we passed, and went on alone):
		 * take it in again.  It runs this barrier too, for the same
		 * reason, and we meet.  Not at once when the agreement just
		 * left it out, on this connection.
		 */
		if (!member && !(s->dropped_epoch[p] ==
					 ss_fabric_peer_epoch(s->fabric, p) &&
				 ss_now_ns() < s->dropped_until[p]))
			return true;
	}
	return false;
}

int ss_sync_leave(struct ss_sync *s)
{
	uint64_t deadline;

	pthread_mutex_lock(&s->fabric_lock);
	deadline = ss__deadline(s);
	for (int p = 0; p < s->world; p++)
		if (p != s->rank && ss_fabric_peer_ok(s->fabric, p))
			ss__send(s, p, SS_R_SNAP, 0, SS_R_INBOX, 0, 0,
				 SS_MSG_LEAVE);
	ss__wait_sends(s, deadline);
	s->leaving = true;
	pthread_mutex_unlock(&s->fabric_lock);
	return 0;
}

/*
 * The round timeout: the one the options set, else long enough for what a
 * round moves at the bandwidth the slowest live peer has shown (4 times
 * over), and never under SS_ROUND_TIMEOUT_MIN_MS.
 */
static unsigned ss_sync_timeout(const struct ss_sync *s)
{
	double worst = 0, ms;

	if (s->opts.round_timeout_ms)
		return s->opts.round_timeout_ms;
	for (int p = 0; p < s->world; p++) {
		double bw = s->bandwidth[p] > 0 ? s->bandwidth[p] : SS_BW_GUESS;

		if (p != s->rank && ss__readable(s, p) &&
		    s->peer_round_bytes / bw > worst)
			worst = s->peer_round_bytes / bw;
	}
	ms = SS_ROUND_TIMEOUT_MIN_MS + 4e3 * worst;
	return ms < SS_ROUND_TIMEOUT_MAX_MS ? (unsigned)ms :
					      SS_ROUND_TIMEOUT_MAX_MS;
}

/* A round; or, when @may_barrier and one is due, the barrier instead. */
static int ss_round(struct ss_sync *s, bool may_barrier)
{
	struct ss__round_result res = { 0 };
	uint64_t start = ss_now_ns();
	int rc;

	/*
	 * Once a round, the fabric's slow work: a round whose messages are
	 * there at once may never wait long enough to do it, and failed peers
	 * are reconnected from there.
	 */
	ss_fabric_progress(s->fabric);
	/*
	 * With nobody alive to wait for, a round polls nothing: a peer
	 * coming back, or asking to join, would never be heard (its
	 * handshake completes on our queue).  Poll once.
	 */
	if (!ss__any_alive(s))
		ss__pump(s, 0);
	/*
	 * A peer asked to join: this call is the barrier that lets it in (it
	 * reseeds while we wait there), not a round.
	 */
	if (s->leaving)
		return ss_error_set(-EINVAL, "this rank has left", NULL,
				    "sync round of rank %d", s->rank);
	if (may_barrier) {
		int h = ss__cut_off_through(s);

		if (h >= 0)
			return ss__rejoin(s, h);
	}
	if (may_barrier && ss__barrier_due(s)) {
		ss__call_peers(s);
		return ss__barrier(s);
	}

	/*
	 * A peer out of the round must not look, once 2^27 rounds have wrapped
	 * its last round number around, as if its messages had come.
	 */
	for (int p = 0; p < s->world; p++)
		if (p != s->rank && !ss__alive(s, p))
			for (int k = SS_MSG_MA_PART; k <= SS_MSG_EASGD; k++)
				for (uint32_t r = 0; r < 2; r++)
					s->arrived[k][ss__arrival(
						s, s->round + r, p)] =
						(s->round + r - 2) &
						SS_ROUND_MASK;

	/*
	 * A peer ran a round without us, which was behind: that round is
	 * ours now, so that we take part in it instead of waiting, round
	 * after round, for messages that left before we came.
	 */
	if (s->catching_up && ss__rounds_after(s->catch_up, s->round) > 0) {
		ss_log_info("sync: rank %d catches up from round %u to %u",
			    s->rank, s->round, s->catch_up);
		s->round = s->catch_up;
	}
	s->catching_up = false;
	ss_renew_round_marks(s);
	/* trainers read it too (their claims' and stops' deadlines) */
	__atomic_store_n(&s->timeout_ms, ss_sync_timeout(s), __ATOMIC_RELAXED);
	s->partial = false;

	/*
	 * Operations of earlier rounds still in flight read SNAP or AVG, or
	 * fill them: no round touches them before they completed.
	 */
	if (ss__drain(s, ss__deadline(s)) < 0) {
		pthread_mutex_lock(&s->lock);
		s->rounds_skipped++;
		pthread_mutex_unlock(&s->lock);
		return 0;
	}

	switch (s->opts.algo) {
	case SS_SYNC_MA:
		rc = ss__hma_wanted(s) ? ss__round_hma(s, &res) :
					 ss__round_ma(s, &res);
		break;
	case SS_SYNC_BMUF:
		rc = ss__round_ma(s, &res);
		break;
	case SS_SYNC_EASGD:
		rc = ss__round_easgd(s, &res);
		break;
	case SS_SYNC_GOSSIP:
		rc = ss__round_gossip(s, &res);
		break;
	default:
		rc = 0;
		break;
	}
	s->round = (s->round + 1) & SS_ROUND_MASK;
	if (rc == 0)
		ss_record(s, start, &res);
	return rc;
}

int ss_sync_round(struct ss_sync *s)
{
	int rc;

	pthread_mutex_lock(&s->fabric_lock);
	rc = ss_round(s, true);
	pthread_mutex_unlock(&s->fabric_lock);
	return rc;
}

int ss_sync_finish(struct ss_sync *s, int *missing)
{
	int rc, late = 0;

	if (missing)
		*missing = 0;
	if (s->running)
		return ss_error_set(-EBUSY, "the shadow thread runs",
				    "stop it first (ss_shadow_stop)",
				    "finishing rank %d", s->rank);
	pthread_mutex_lock(&s->fabric_lock);
	rc = ss__barrier(s);
	if (rc == -ETIMEDOUT) {
		/* the ranks that came go on together, the others alone */
		for (int p = 0; p < s->world; p++)
			late += p != s->rank && s->member_index[p] < 0 &&
				ss__expected(s, SS_MSG_BARRIER, p);
		ss_log_warn("sync: rank %d finishes without %d rank(s) that "
			    "did not come within %u ms: they go on alone",
			    s->rank, late, 4 * s->timeout_ms + 5000);
		rc = 0;
	}
	/* S-MA and S-BMUF: the members end on one exact average */
	if (rc == 0 && s->n_members > 1 &&
	    (s->opts.algo == SS_SYNC_MA || s->opts.algo == SS_SYNC_BMUF))
		rc = ss_round(s, false);
	/* and a last barrier among them: the others were waited for once */
	s->barrier_members_only = true;
	if (rc == 0 && ss__barrier(s) == -ETIMEDOUT)
		ss_log_warn("sync: rank %d: a rank left the last barrier "
			    "late; the averages it missed are its own",
			    s->rank);
	s->barrier_members_only = false;
	pthread_mutex_unlock(&s->fabric_lock);
	ss_sync_leave(s);
	if (missing)
		*missing = late;
	return rc;
}

void ss_sync_add_iterations(struct ss_sync *s, uint64_t iterations)
{
	atomic_fetch_add_explicit(&s->iterations, iterations,
				  memory_order_relaxed);
	if (s->opts.max_gap && ss__gap(s) >= (int64_t)s->opts.max_gap)
		ss__gap_wait(s);
}

static int ss_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void ss_sync_get_stats(struct ss_sync *s, struct ss_sync_stats *st)
{
	double lat[SS_LATENCIES];
	size_t k;

	memset(st, 0, sizeof(*st));
	pthread_mutex_lock(&s->lock);
	st->rounds = s->rounds;
	st->bytes_sent = s->bytes_sent;
	st->peers_left_out = s->peers_left_out;
	st->rounds_partial = s->rounds_partial;
	st->rounds_skipped = s->rounds_skipped;
	st->messages_late = s->messages_late;
	st->easgd_dropped = s->easgd_dropped;
	st->view_changes = s->view_changes;
	st->members = s->n_members;
	st->round_timeout_ms =
		__atomic_load_n(&s->timeout_ms, __ATOMIC_RELAXED);
	st->joins = s->joins;
	st->reseeds = s->reseeds;
	st->divergence = s->divergence;
	st->sync_gap = s->rounds ? s->gap_sum / (double)s->rounds : 0;
	k = s->rounds < SS_LATENCIES ? s->rounds : SS_LATENCIES;
	memcpy(lat, s->latencies, k * sizeof(double));
	if (s->begin_ns && s->rounds)
		st->rounds_per_s = (double)s->rounds /
				   ((double)(ss_now_ns() - s->begin_ns) / 1e9);
	pthread_mutex_unlock(&s->lock);
	st->iterations = atomic_load(&s->iterations);
	if (s->world > 1 && st->rounds)
		st->bytes_per_peer_per_round = (double)st->bytes_sent /
					       (double)st->rounds /
					       (s->world - 1);
	if (k) {
		qsort(lat, k, sizeof(double), ss_cmp_double);
		/* nearest rank, ceil(q k): p99 is the largest below 100
		 * rounds (it was below p50 with 2) */
		st->round_p50_us = lat[(k + 1) / 2 - 1];
		st->round_p99_us = lat[(size_t)ceil(0.99 * (double)k) - 1];
	}
}

void ss_sync_gap_waits(struct ss_sync *s, uint64_t *waits, double *seconds)
{
	pthread_mutex_lock(&s->lock);
	*waits = s->gap_waits;
	*seconds = s->gap_wait_s;
	pthread_mutex_unlock(&s->lock);
}

uint64_t ss_sync_peer_left_out(struct ss_sync *s, int p)
{
	uint64_t n = 0;

	if (p < 0 || p >= s->world)
		return 0;
	pthread_mutex_lock(&s->lock);
	n = s->left_out_count[p];
	pthread_mutex_unlock(&s->lock);
	return n;
}

void ss_sync_print_stats(struct ss_sync *s, FILE *out)
{
	uint64_t waits;
	double waited;
	struct ss_sync_stats st;
	int worst = -1;

	ss_sync_get_stats(s, &st);
	for (int p = 0; p < s->world; p++)
		if (ss_sync_peer_left_out(s, p) &&
		    (worst < 0 || ss_sync_peer_left_out(s, p) >
					  ss_sync_peer_left_out(s, worst)))
			worst = p;
	fprintf(out,
		"sync %s: %llu rounds (%.1f/s), round p50 %.0f us, p99 %.0f us, "
		"%.0f bytes per peer per round, sync gap %.1f iterations, "
		"divergence %.2e, peers left out %llu, let in %llu, "
		"reseeded %llu\n",
		ss_sync_algo_name(s->opts.algo), (unsigned long long)st.rounds,
		st.rounds_per_s, st.round_p50_us, st.round_p99_us,
		st.bytes_per_peer_per_round, st.sync_gap, st.divergence,
		(unsigned long long)st.peers_left_out,
		(unsigned long long)st.joins, (unsigned long long)st.reseeds);
	if (st.rounds_partial || st.rounds_skipped || st.messages_late ||
	    st.easgd_dropped) {
		char who[64] = "";

		if (worst >= 0)
			snprintf(who, sizeof(who),
				 " (most left out: peer %d, %llu times)", worst,
				 (unsigned long long)ss_sync_peer_left_out(
					 s, worst));
		fprintf(out,
			"sync %s: %llu rounds partial%s, %llu skipped, %llu "
			"late messages discarded, %llu S-EASGD deltas dropped, "
			"round timeout %u ms\n",
			ss_sync_algo_name(s->opts.algo),
			(unsigned long long)st.rounds_partial, who,
			(unsigned long long)st.rounds_skipped,
			(unsigned long long)st.messages_late,
			(unsigned long long)st.easgd_dropped,
			st.round_timeout_ms);
	}
	ss_sync_gap_waits(s, &waits, &waited);
	if (waits)
		fprintf(out,
			"sync %s: the trainers waited for a round %llu times "
			"(%.2f s in all): the gap reached its bound of %llu "
			"iterations\n",
			ss_sync_algo_name(s->opts.algo),
			(unsigned long long)waits, waited,
			(unsigned long long)s->opts.max_gap);
}
