// SPDX-License-Identifier: BSD-2-Clause
/*
 * The sync layer's common part: the replica's regions, messages between
 * ranks, barriers, rounds and their statistics, and the foreground mode.
 */
#include <endian.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sync_internal.h"

static const char *const ss_algo_names[] = { "none", "ma",     "easgd",
					     "bmuf", "gossip", NULL };

void ss_sync_options_init(struct ss_sync_options *o, enum ss_sync_algo algo)
{
	memset(o, 0, sizeof(*o));
	o->algo = algo;
	o->eta = -1;
	o->nesterov = true;
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

	if (o->alpha <= 0)
		o->alpha = 0.5 / s->world;
	if (o->eta < 0)
		o->eta = 1.0 - 1.0 / s->world;
	if (o->zeta <= 0)
		o->zeta = 1.0;
	if (o->beta <= 0)
		o->beta = 0.5;
	if (!o->round_timeout_ms)
		o->round_timeout_ms = 5000;
	s->gossip_state =
		o->seed ? o->seed : 0x9e3779b97f4a7c15ull ^ (uint64_t)s->rank;
}

/* Floats in each region: one table for allocating and for sizing. */
static size_t ss_region_floats(int region, size_t n, int world)
{
	size_t shard_max = (n + (size_t)world - 1) / (size_t)world;

	switch (region) {
	case SS_R_INBOX: /* two slots per peer, then two barrier words */
		return 2 * (size_t)world * shard_max + 2 * (size_t)world;
	case SS_R_CENTER:
		return shard_max;
	case SS_R_STATE:
		return sizeof(struct ss__state) / sizeof(float);
	default: /* PARAMS, AVG, SNAP */
		return n;
	}
}

size_t ss_sync_registered_bytes(size_t n, int world)
{
	const size_t page = 4096;
	size_t total = 0;

	for (int i = 0; i < SS_R_COUNT; i++)
		total += (ss_region_floats(i, n, world) * sizeof(float) + page -
			  1) /
			 page * page;
	return total;
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
	};

	for (int i = 0; i < SS_R_COUNT; i++) {
		/* the whole replica; the rest sized for what is synchronized */
		size_t floats = i == SS_R_PARAMS ?
					s->len :
					ss_region_floats(i, s->n, s->world);
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
	s->ctrl = (uint32_t *)(s->inbox + 2 * (size_t)s->world * s->shard_max);
	for (int i = 0; s->opts.topo && i < SS_R_COUNT; i++) {
		if (ss_topo_bind(s->opts.topo, ss_region_ptr(s->r[i]),
				 ss_region_len(s->r[i]), s->opts.numa) < 0) {
			ss_log_warn(
				"sync: replica memory not bound to NUMA node %d: %s: %s",
				s->opts.numa, ss_last_error()->what,
				ss_last_error()->why);
			break;
		}
	}
	return 0;
}

int ss_sync_create(struct ss_sync **out, struct ss_fabric *fabric, size_t n,
		   const struct ss_sync_options *opts)
{
	struct ss_sync *s;
	int rc;

	*out = NULL;
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
	s->len = n;
	s->n = opts->synced ? opts->synced : n;
	s->rank = ss_fabric_rank(fabric);
	s->world = ss_fabric_world(fabric);
	s->shard_max = (s->n + (size_t)s->world - 1) / (size_t)s->world;
	pthread_mutex_init(&s->lock, NULL);
	ss_sync_defaults(s);
	for (int k = 0; k < SS_MSG_KINDS; k++) {
		s->seen[k] = malloc((size_t)s->world * sizeof(uint32_t));
		if (!s->seen[k]) {
			rc = ss_error_set(-ENOMEM, NULL, NULL, "sync");
			goto err;
		}
		for (int p = 0; p < s->world; p++)
			s->seen[k][p] = 0x0fffffffu; /* round -1: none yet */
	}
	s->reads_ok = calloc((size_t)s->world, sizeof(bool));
	s->left_out = calloc((size_t)s->world, sizeof(bool));
	s->paused = calloc((size_t)s->world, sizeof(bool));
	s->epoch = calloc((size_t)s->world, sizeof(uint32_t));
	s->joining = calloc((size_t)s->world, sizeof(bool));
	s->barrier_sent = calloc((size_t)s->world, sizeof(bool));
	s->easgd_early = calloc((size_t)s->world, sizeof(bool));
	if (!s->reads_ok || !s->left_out || !s->paused || !s->epoch ||
	    !s->joining || !s->barrier_sent || !s->easgd_early) {
		rc = ss_error_set(-ENOMEM, NULL, NULL, "sync");
		goto err;
	}
	if (opts->algo == SS_SYNC_BMUF) { /* of our shard only */
		s->w_g = calloc(s->shard_max, sizeof(float));
		s->momentum = calloc(s->shard_max, sizeof(float));
		if (!s->w_g || !s->momentum) {
			rc = ss_error_set(-ENOMEM, NULL, NULL,
					  "S-BMUF state of %zu floats",
					  s->shard_max);
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
	for (int k = 0; k < SS_MSG_KINDS; k++)
		free(s->seen[k]);
	free(s->paused);
	free(s->epoch);
	free(s->joining);
	free(s->barrier_sent);
	free(s->reads_ok);
	free(s->easgd_early);
	free(s->left_out);
	free(s->w_g);
	free(s->momentum);
	pthread_mutex_destroy(&s->lock);
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

/* ---- messages ----------------------------------------------------------- */

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
static bool ss_expected(const struct ss_sync *s, int kind, int p)
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
		if (ss_expected(s, kind, p) && !ss__got(s, kind, p))
			return false;
	return true;
}

int ss__wait_msgs(struct ss_sync *s, int kind, uint64_t deadline)
{
	while (!ss_all_sent(s, kind)) {
		if (ss_deadline_passed(deadline)) {
			for (int p = 0; p < s->world; p++)
				if (ss_expected(s, kind, p) &&
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

/*
 * The word of @p's round in a barrier: two per peer, by the barrier's
 * parity, because a peer can be one barrier ahead of us, and its round
 * for the next one must not overwrite the one it sent for this one (we
 * then took the next barrier's round for this one's, and came out a round
 * ahead of the others).
 */
static size_t ss_barrier_word(const struct ss_sync *s, int p)
{
	return (size_t)(s->barrier_seq & 1) * (size_t)s->world + (size_t)p;
}

/*
 * The barrier's second half.  A peer's barrier message comes after
 * everything it sent before it (one ordered queue pair), so once we have
 * every peer's, we have consumed what they sent for earlier rounds, and
 * say so (DONE).  Nobody leaves before every peer it met here has said
 * so: a rank that left as soon as it had the barrier messages could send
 * its next round into an inbox slot whose previous message the slower
 * peer had yet to read (an S-EASGD delta then counted twice and another
 * lost; the round after a barrier often has the parity of the one before).
 */
static int ss_barrier_done(struct ss_sync *s, uint64_t deadline)
{
	bool all;

	for (int p = 0; p < s->world; p++)
		if (p != s->rank && ss__got(s, SS_MSG_BARRIER, p))
			ss__send(s, p, SS_R_SNAP, 0, SS_R_INBOX, 0, 0,
				 SS_MSG_BARRIER_DONE);
	do {
		all = true;
		for (int p = 0; p < s->world; p++)
			if (p != s->rank && ss__got(s, SS_MSG_BARRIER, p) &&
			    ss_fabric_peer_ok(s->fabric, p) &&
			    !ss__got(s, SS_MSG_BARRIER_DONE, p))
				all = false;
		if (!all && ss_deadline_passed(deadline))
			return -ETIMEDOUT;
		if (!all)
			ss__pump(s, 1);
	} while (!all);
	ss__wait_sends(s, deadline);
	return 0;
}

/*
 * The barrier also lines the ranks' round numbers up: after a shadow thread
 * stopped, ranks may be a round apart.  Each sends its round in its word of
 * the peers' inboxes; all continue from the largest plus one, past any
 * round a peer gave up half-way.  It is also where a new process of a rank
 * is let in: from here it takes part in rounds.
 */
int ss_sync_barrier(struct ss_sync *s)
{
	unsigned wait = 4 * s->opts.round_timeout_ms + 5000;
	uint64_t deadline = ss_deadline_ns(wait);
	uint32_t top = s->round;
	uint64_t joins = 0;
	int rc = 0;

	/*
	 * S-EASGD deltas that came early for the round the barrier skips:
	 * now, before the peers can leave the barrier and send the next ones
	 * into the same slots.
	 */
	ss__easgd_apply_early(s, s->round);
	memcpy(s->snap, &s->round, sizeof(uint32_t));
	memset(s->barrier_sent, 0, (size_t)s->world * sizeof(bool));
	/* A peer that comes back while we wait gets our message then. */
	for (;;) {
		bool all = true;

		for (int p = 0; p < s->world; p++) {
			if (!ss_expected(s, SS_MSG_BARRIER, p))
				continue;
			if (!s->barrier_sent[p]) {
				s->barrier_sent[p] = true;
				ss__send(s, p, SS_R_SNAP, 0, SS_R_INBOX,
					 2 * (size_t)s->world * s->shard_max +
						 ss_barrier_word(s, s->rank),
					 1, SS_MSG_BARRIER);
			}
			all = all && ss__got(s, SS_MSG_BARRIER, p);
		}
		if (all)
			break;
		if (ss_deadline_passed(deadline)) {
			for (int p = 0; p < s->world; p++)
				if (ss_expected(s, SS_MSG_BARRIER, p) &&
				    !ss__got(s, SS_MSG_BARRIER, p))
					ss__leave_out(s, p, "no answer");
			rc = -ETIMEDOUT;
			break;
		}
		ss__pump(s, 1);
	}
	ss__wait_sends(s, deadline);
	if (ss_barrier_done(s, deadline) < 0)
		rc = -ETIMEDOUT;
	for (int p = 0; p < s->world; p++) {
		if (p != s->rank && ss__got(s, SS_MSG_BARRIER, p)) {
			if (s->ctrl[ss_barrier_word(s, p)] > top)
				top = s->ctrl[ss_barrier_word(s, p)];
			/* in rounds from here on, as the process it is now */
			s->epoch[p] = ss_fabric_peer_epoch(s->fabric, p);
			joins += s->joining[p];
			s->joining[p] = false;
		}
		s->paused[p] = false;
	}
	if (joins) {
		pthread_mutex_lock(&s->lock);
		s->joins += joins;
		pthread_mutex_unlock(&s->lock);
	}
	/* and those for the later rounds it jumps over */
	ss__easgd_apply_early(s, top);
	s->round = top + 1;
	s->barrier_seq++;
	if (rc < 0)
		return ss_error_set(rc, "a peer did not arrive", NULL,
				    "sync barrier %u of rank %d",
				    s->barrier_seq - 1, s->rank);
	return 0;
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

/*
 * Our shard of the S-EASGD center and of the S-BMUF global model start
 * from the replica.
 */
static void ss_sync_state_from_replica(struct ss_sync *s)
{
	size_t own = ss__shard_off(s, s->rank),
	       own_len = ss__shard_len(s, s->rank);

	ss__copy(s->center, s->w + own, own_len);
	if (s->w_g) {
		ss__copy(s->w_g, s->w + own, own_len);
		memset(s->momentum, 0, own_len * sizeof(float));
	}
}

/*
 * The first connected peer that has begun (the job runs already: we were
 * restarted, or came late), or -1: its STATE read into SNAP.  No peer can
 * have begun at a fresh start, because its begin barrier waits for us.
 */
static int ss_sync_find_running(struct ss_sync *s)
{
	struct ss__state *st = (struct ss__state *)s->snap;

	for (int p = 0; p < s->world; p++) {
		uint64_t deadline = ss_deadline_ns(s->opts.round_timeout_ms);

		if (p == s->rank || !ss_fabric_peer_ok(s->fabric, p))
			continue;
		memset(st, 0, sizeof(*st));
		s->reads_ok[p] = false;
		if (ss_fabric_read(s->fabric, p, s->r[SS_R_SNAP], 0, SS_R_STATE,
				   0, sizeof(*st), (uint64_t)p))
			continue;
		s->outstanding++;
		ss__wait_sends(s, deadline);
		if (s->reads_ok[p] && be32toh(st->began) == SS_STATE_BEGAN)
			return p;
	}
	return -1;
}

/*
 * Join ranks that run already, through @h, which has begun: ask every
 * peer to let us in (each runs a barrier before its next round), wait
 * until @h is in that barrier (its replica no longer moves with rounds),
 * READ its replica into ours, start the S-EASGD center and S-BMUF state
 * from it, and only then come to the barrier ourselves, with @h's barrier
 * number: from the round after it we contribute like everyone.
 */
static int ss_sync_join(struct ss_sync *s, int h)
{
	uint64_t deadline = ss_deadline_ns(4 * s->opts.round_timeout_ms + 5000);

	ss_log_warn(
		"sync: rank %d starts while rank %d runs: joining, reseeding from rank %d",
		s->rank, h, h);
	for (int p = 0; p < s->world; p++)
		if (p != s->rank && ss_fabric_peer_ok(s->fabric, p))
			ss__send(s, p, SS_R_SNAP, 0, SS_R_INBOX, 0, 0,
				 SS_MSG_JOIN);
	while (s->seen[SS_MSG_BARRIER][h] == 0x0fffffffu) {
		if (ss_deadline_passed(deadline) ||
		    !ss_fabric_peer_ok(s->fabric, h))
			return ss_error_set(
				-ETIMEDOUT, "it did not let us in",
				"see that rank's own messages; start this rank again",
				"sync: rank %d joining through rank %d",
				s->rank, h);
		ss__pump(s, 1);
	}
	s->reads_ok[h] = false;
	if (ss_fabric_read(s->fabric, h, s->r[SS_R_PARAMS], 0, SS_R_PARAMS, 0,
			   s->n * sizeof(float), (uint64_t)h) == 0) {
		s->outstanding++;
		ss__wait_sends(s, deadline);
	}
	if (!s->reads_ok[h])
		return ss_error_set(
			-ETIMEDOUT, "its replica did not arrive",
			"start this rank again; it reseeds from a healthy peer",
			"sync: rank %d reseeding %zu floats from rank %d",
			s->rank, s->n, h);
	ss_sync_state_from_replica(s);
	pthread_mutex_lock(&s->lock);
	s->reseeds++;
	pthread_mutex_unlock(&s->lock);
	ss_log_warn("sync: rank %d reseeded its replica from rank %d", s->rank,
		    h);
	s->barrier_seq = s->seen[SS_MSG_BARRIER][h];
	return ss_sync_barrier(s);
}

int ss_sync_begin(struct ss_sync *s)
{
	int h, rc;

	ss_sync_state_from_replica(s);
	s->begin_ns = ss_now_ns();
	s->last_iterations = atomic_load(&s->iterations);
	h = ss_sync_find_running(s);
	/* After this barrier every rank's center is in place. */
	rc = h < 0 ? ss_sync_barrier(s) : ss_sync_join(s, h);
	if (rc == 0)
		s->state->began = htobe32(SS_STATE_BEGAN);
	return rc;
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
	s->bytes_sent += res->bytes;
	s->gap_sum += (double)(it - s->last_iterations);
	s->last_iterations = it;
	if (res->norm2 > 0)
		s->divergence = sqrt(res->diff2 / res->norm2);
	pthread_mutex_unlock(&s->lock);
}

int ss_sync_round(struct ss_sync *s)
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
	 * A peer asked to join: this call is the barrier that lets it in (it
	 * reseeds while we wait there), not a round.
	 */
	if (ss__join_wanted(s))
		return ss_sync_barrier(s);

	/*
	 * A peer out of the round must not look, once 2^27 rounds have wrapped
	 * its last round number around, as if its messages had come.
	 */
	for (int p = 0; p < s->world; p++)
		if (p != s->rank && !ss__alive(s, p))
			for (int k = SS_MSG_MA_PART; k <= SS_MSG_EASGD; k++)
				s->seen[k][p] = (s->round - 1) & 0x0fffffffu;

	switch (s->opts.algo) {
	case SS_SYNC_MA:
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
	s->round++;
	if (rc == 0)
		ss_record(s, start, &res);
	return rc;
}

void ss_sync_add_iterations(struct ss_sync *s, uint64_t iterations)
{
	atomic_fetch_add_explicit(&s->iterations, iterations,
				  memory_order_relaxed);
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
		st->round_p50_us = lat[k / 2];
		st->round_p99_us = lat[(size_t)((double)(k - 1) * 0.99)];
	}
}

void ss_sync_print_stats(struct ss_sync *s, FILE *out)
{
	struct ss_sync_stats st;

	ss_sync_get_stats(s, &st);
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
}

/* ---- foreground ----------------------------------------------------- */

int ss_sync_set_trainers(struct ss_sync *s, int trainers)
{
	pthread_condattr_t attr;

	if (trainers < 1 || s->fg_init)
		return ss_error_set(-EINVAL,
				    trainers < 1 ? "must be at least 1" :
						   "already set",
				    NULL, "foreground trainers %d", trainers);
	pthread_mutex_init(&s->fg_lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&s->fg_cond, &attr);
	pthread_condattr_destroy(&attr);
	s->trainers = trainers;
	s->fg_init = true;
	return 0;
}

/* Release everyone waiting; the caller holds the lock. */
static void ss_fg_release(struct ss_sync *s)
{
	s->fg_waiting = 0;
	s->fg_generation++;
	pthread_cond_broadcast(&s->fg_cond);
}

/*
 * Wait until every trainer still taking part is here, at most 4 x the
 * round timeout + 5 s.  The last to come is the one that goes on first
 * (@last), like PTHREAD_BARRIER_SERIAL_THREAD.
 */
static int ss_fg_wait(struct ss_sync *s, bool *last)
{
	uint64_t ns = ss_now_ns() +
		      (4ull * s->opts.round_timeout_ms + 5000) * 1000000ull;
	struct timespec until = { (time_t)(ns / 1000000000u),
				  (long)(ns % 1000000000u) };
	unsigned generation;
	int rc = 0;

	*last = false;
	pthread_mutex_lock(&s->fg_lock);
	generation = s->fg_generation;
	if (++s->fg_waiting >= s->trainers) {
		*last = true;
		ss_fg_release(s);
	}
	while (!*last && generation == s->fg_generation && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&s->fg_cond, &s->fg_lock, &until);
	if (!*last && generation != s->fg_generation && s->fg_need_last) {
		/* released by a trainer leaving: one of us goes first */
		s->fg_need_last = false;
		*last = true;
	}
	if (!*last && generation == s->fg_generation) {
		s->fg_waiting--; /* gave up: no longer waiting */
		pthread_mutex_unlock(&s->fg_lock);
		return ss_error_set(
			-ETIMEDOUT, "other trainers did not come",
			"a trainer that stops must call ss_sync_foreground_leave",
			"foreground barrier of %d trainers", s->trainers);
	}
	pthread_mutex_unlock(&s->fg_lock);
	return 0;
}

int ss_sync_foreground(struct ss_sync *s)
{
	bool last;
	int rc;

	if (!s->fg_init)
		return ss_error_set(-EINVAL, "no trainer count",
				    "call ss_sync_set_trainers first",
				    "foreground round");
	/* Everyone stops; the last to come runs the round; all go on. */
	rc = ss_fg_wait(s, &last);
	if (rc < 0)
		return rc;
	if (last)
		s->fg_rc = ss_sync_round(s);
	rc = ss_fg_wait(s, &last);
	return rc < 0 ? rc : s->fg_rc;
}

void ss_sync_foreground_leave(struct ss_sync *s)
{
	if (!s->fg_init)
		return;
	pthread_mutex_lock(&s->fg_lock);
	s->trainers--;
	if (s->fg_waiting > 0 && s->fg_waiting >= s->trainers) {
		s->fg_need_last = true; /* none of them came last */
		ss_fg_release(s); /* the others need not wait for us */
	}
	pthread_mutex_unlock(&s->fg_lock);
}
