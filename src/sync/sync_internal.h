/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the sync layer share; not part of the public API. */
#ifndef SS_SYNC_INTERNAL_H
#define SS_SYNC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "shadowsync/sync.h"

/* Regions, in allocation order: the same numbers on every rank. */
enum {
	SS_R_PARAMS, /* n floats, remote-READ: the replica */
	SS_R_INBOX, /* 2 x (n + world) floats, remote-WRITE: contributions,
		     * a slot per member and round parity, of the members'
		     * shard size; then two words per rank for barriers */
	SS_R_AVG, /* n floats, remote-WRITE: averages; local scratch */
	SS_R_CENTER, /* n floats, remote-READ: S-EASGD center of our shard,
		      * from its start (a shard is up to n with one member) */
	SS_R_SNAP, /* n floats, local: snapshot and deltas, sent from here;
		    * then the word a barrier sends */
	SS_R_STATE, /* struct ss__state, remote-READ: whether we run */
	SS_R_CLAIMS, /* remote-ATOMIC: word 0 rank 0's chunk counter, then
		      * where our fetch-adds put what they fetched */
	SS_R_COUNT
};

/*
 * What a rank shows its peers, read by a rank that starts: a peer that
 * has begun means the job runs already and the newcomer joins (reseeds)
 * rather than starting with the others.  Big-endian.
 */
struct ss__state {
	uint32_t began; /* SS_STATE_BEGAN once past ss_sync_begin */
	uint32_t lowest; /* the lowest rank among our members */
	uint32_t in_barrier; /* SS_STATE_IN_BARRIER | its number, or 0 */
	/*
	 * The chunks: the highest this rank has claimed, plus one; and at
	 * rank 0, SS_STATE_COUNTER_READY once its counter counts from where
	 * the job is (a restarted rank 0 sets it from the others' highest).
	 */
	uint32_t claims;
	/*
	 * A barrier's agreement on its members (barrier.c), a slot per
	 * parity of its number: a peer may be a barrier ahead.  Each tag is
	 * SS_STATE_IN_BARRIER | the barrier's number once its set is written.
	 */
	uint32_t came_tag[2], decided_tag[2];
	/*
	 * Then the sets, a bit a rank of the world (ss__set_words() words
	 * each), per slot: who came, as we saw; the lowest's decision.
	 */
	uint64_t sets[];
};

/* ss__set_words() - words of a set of @world ranks: a bit each. */
static inline size_t ss__set_words(int world)
{
	return ((size_t)world + 63) / 64;
}

/* ss__state_bytes() - the state of a rank of a @world-rank job. */
static inline size_t ss__state_bytes(int world)
{
	return sizeof(struct ss__state) +
	       4 * ss__set_words(world) * sizeof(uint64_t);
}

/* ss__state_set() - set @which (0: came, 1: members) of barrier slot @slot. */
static inline uint64_t *ss__state_set(const struct ss__state *st, int world,
				      int slot, int which)
{
	return (uint64_t *)st->sets +
	       (size_t)(2 * slot + which) * ss__set_words(world);
}
#define SS_STATE_BEGAN 0x53534247u /* "SSBG" */
#define SS_STATE_COUNTER_READY 0x80000000u
#define SS_STATE_IN_BARRIER 0x80000000u

/*
 * Messages, in the immediate: kind in the top 4 bits, round below.  The
 * kinds up to SS_MSG_EASGD carry data into an inbox slot and belong to
 * exactly one round (see ss__got); the others are control.
 */
enum ss_msg {
	SS_MSG_MA_PART = 1, /* S-MA: my snapshot of your shard */
	SS_MSG_MA_AVG, /* S-MA: the average of my shard */
	SS_MSG_EASGD, /* S-EASGD: my delta for your center */
	SS_MSG_BARRIER,
	SS_MSG_STOP, /* my shadow thread stopped: do not wait for me */
	SS_MSG_JOIN, /* I (re)started while you run: barrier, let me in */
	SS_MSG_BARRIER_DONE, /* I have every peer's barrier message, and with
			      * it all it sent before: you may leave */
	SS_MSG_SKIP, /* I run this round without you (you are behind,
		      * your slot may still be in use): do not wait for me,
		      * and catch up */
	SS_MSG_LEAVE, /* I am done: go on without me, my shards re-divided */
	SS_MSG_CALL, /* my members change (one failed, came back or asked to
		      * join, which you may not have seen): come to the
		      * barrier I hold, numbered as this */
	SS_MSG_KINDS
};
#define SS_IMM(kind, round) (((uint32_t)(kind) << 28) | ((round)&0x0fffffffu))
#define SS_IMM_KIND(imm) ((int)((imm) >> 28))
#define SS_IMM_ROUND(imm) ((imm)&0x0fffffffu)
#define SS_ROUND_MASK 0x0fffffffu

/* Whether messages of @kind fill an inbox slot for one round. */
static inline bool ss__round_kind(int kind)
{
	return kind >= SS_MSG_MA_PART && kind <= SS_MSG_EASGD;
}

/*
 * How many rounds' messages of @kind a receiver holds from one sender:
 * two inbox slots (by round parity) for contributions and deltas, one
 * place in the averages for an average.
 */
static inline int ss__slots(int kind)
{
	return kind == SS_MSG_MA_AVG ? 1 : 2;
}

/*
 * An operation's wr_id: the peer, the message kind it sends (0: READ,
 * SS_WR_CLAIM: a chunk claim), and for a claim the word it fetches into.
 */
#define SS_WR_ID(peer, kind) ((uint64_t)(peer) | (uint64_t)(kind) << 32)
#define SS_WR_KIND(wr_id) ((int)(((wr_id) >> 32) & 0xff))
#define SS_WR_CLAIM 0xff
#define SS_WR_CLAIM_SLOT(wr_id) ((int)((wr_id) >> 40))
#define SS_CLAIM_SLOTS 8 /* claims in flight at once */
/* the claims region's words past the slots': rank 0's readiness READ,
 * and a restarted rank 0's fetch-add that sets its counter */
#define SS_CLAIM_CHECK SS_CLAIM_SLOTS
#define SS_CLAIM_SEED (SS_CLAIM_SLOTS + 1)
#define SS_CLAIM_QUEUE 64 /* claimed chunks not yet taken */

/* The round timeout, unless the options set it: scaled between these. */
#define SS_ROUND_TIMEOUT_MIN_MS 5000u
#define SS_ROUND_TIMEOUT_MAX_MS 600000u

/* Operations to a peer unanswered this long, at least, fail it. */
#define SS_SILENCE_MIN_MS 10000u

/* A peer's bandwidth before any round measured it, bytes/s: guess low. */
#define SS_BW_GUESS 100e6

#define SS_LATENCIES 1024 /* round latencies kept for percentiles */

struct ss_sync {
	struct ss_fabric *fabric;
	struct ss_sync_options opts;
	size_t n; /* floats synchronized: a prefix of the replica */
	size_t len; /* floats of the replica */
	int rank, world;
	/*
	 * The members: the ranks rounds are among and shards divided over,
	 * in rank order; set by every barrier to those that came to it.
	 */
	int *member_index; /* per rank: its place among them, -1: none */
	int n_members;
	size_t shard_max; /* floats in the members' largest shard */
	bool *left; /* it said LEAVE: no member, not waited for, until it
		     * asks to join again */
	bool leaving; /* we said LEAVE */
	bool place_warned; /* a region could not be bound: said once */
	int placement_off; /* sampled replica pages off the planned node */
	bool barrier_members_only; /* ss_sync_finish's last: no one else */
	struct ss_region *r[SS_R_COUNT];
	float *w, *inbox, *avg, *center, *snap;
	/* S-BMUF global model and block momentum, of our shard: one copy of
	 * each shard's, at its owner, so that no partial round can make the
	 * ranks' copies differ */
	float *w_g, *momentum;

	uint32_t round, barrier_seq;
	/*
	 * The next barrier's number was taken from a live rank (joining,
	 * rejoining): it is not to be taken from our members instead, who
	 * may be on the side we leave (barrier.c, ss_barrier_gather).
	 */
	bool barrier_numbered;
	/*
	 * seen[kind][p]: for control kinds, the barrier (or round) of
	 * the newest message of @kind from @p.  arrived[kind][parity * world + p]: for
	 * round kinds, the round of @p's message in the slot of that parity.
	 * latest[p]: the newest round @p has sent anything for, SKIP
	 * included: @p is in that round, so has finished the one before.
	 * skipped[p]: the newest round @p said it runs without us.
	 */
	uint32_t *seen[SS_MSG_KINDS];
	uint32_t *arrived[SS_MSG_KINDS];
	uint32_t *latest, *skipped;
	uint32_t *skip_sent; /* the round we last sent @p a SKIP for */
	/* a peer skipped us in round catch_up, ahead of ours: go there (a
	 * flag, not a mark that 2^27 rounds could make look ahead again) */
	uint32_t catch_up;
	bool catching_up;
	bool *paused; /* its shadow thread stopped; back at the next barrier */
	uint32_t *ctrl; /* the barrier words in the inbox */
	int outstanding; /* our operations not yet completed */
	bool *reads_ok; /* S-EASGD: the center read from each peer arrived */
	/*
	 * S-EASGD, per slot (ss__arrival: round parity and peer): the peer's
	 * delta of round easgd_early_round[] came for a round we have yet to
	 * reach, and waits in that slot.  A slot each, not a peer each: a
	 * peer out of a barrier before us sends the two rounds after it
	 * while we are still in it (ss__barrier frees both slots).
	 */
	bool *easgd_early;
	uint32_t *easgd_early_round;
	/*
	 * Per peer: our operations to it in flight, and since when and how
	 * many bytes (for its bandwidth, bytes/s, 0 before the first); how
	 * many rounds it was left out of.
	 */
	int *in_flight;
	uint64_t *flight_start_ns, *flight_bytes, *left_out_count;
	uint32_t *left_out_round; /* counted for this round already */
	double *bandwidth;
	/* bytes a round moves to and from each peer, for the timeout */
	double peer_round_bytes;
	unsigned timeout_ms; /* this round's: opts' when set, else scaled */
	bool partial; /* this round left a peer out */
	bool *left_out; /* reported as left out, until it answers again */
	/*
	 * The fabric epoch of each peer when it last came to a barrier: a
	 * peer whose epoch has changed since is another process, which
	 * takes part in rounds only once a barrier has let it in.
	 */
	uint32_t *epoch;
	/*
	 * The fabric epoch of each peer whose view we last read for a
	 * partition (ss__cut_off_through): each connection once.
	 */
	uint32_t *view_read_epoch;
	/*
	 * Each peer's S-EASGD center may still be its shard of the division
	 * before the last barrier: it re-divides it on its way out of the
	 * barrier, which we may have left first (ss__round_easgd).
	 */
	bool *center_unsure;
	bool *joining; /* asked to join: our next round is a barrier */
	/* it called us to a barrier (SS_MSG_CALL, its number in
	 * seen[SS_MSG_CALL]): our next round is a barrier */
	bool *called;
	/*
	 * A rank that came to our last barrier and that the agreement left
	 * out (it and the decider do not reach each other): until
	 * dropped_until[p] (ns), on the connection of epoch dropped_epoch[p],
	 * it is no reason for another barrier, which would only leave it out
	 * again (while a connection stayed down, the ranks held barrier after
	 * barrier and no round).
	 */
	uint64_t *dropped_until;
	uint32_t *dropped_epoch;
	bool *barrier_sent; /* within a barrier: our message went to it */
	struct ss__state *state; /* ours, in SS_R_STATE */
	struct ss__state *view; /* a peer's, as last READ (ss__read_view) */
	const float **parts; /* a round's contributions, one a peer */
	bool *came, *done_sent, *late; /* a barrier's, a rank each */
	bool *came_seen; /* a barrier's: who came, before the agreement */
	int *member_rank; /* the rank of each member, by its place */
	int hma_group; /* hma.c: ranks a group for these members (1: flat) */
	int *hma_peers; /* hma.c: whom a round talks to */
	int *answered; /* ma.c: the peers whose contribution came */
	uint64_t gossip_state; /* random gossip: xorshift state */
	uint32_t gossip_step; /* exponential graph: which hop is next */

	/* the shadow thread */
	pthread_t thread;
	bool running;
	atomic_bool stop;
	int thread_rc;
	struct ss_topo *topo;
	const struct ss_plan_slot *slot;

	/*
	 * Held by whoever drives the fabric: a round, a barrier, the shadow
	 * thread polling alone, or a trainer that claims a chunk while none
	 * of those runs.
	 */
	pthread_mutex_t fabric_lock;

	/* chunk claims (claims.c), under claim_lock */
	pthread_mutex_t claim_lock;
	pthread_cond_t claim_cond;
	uint64_t *claim_words; /* SS_R_CLAIMS: [0] the counter, [1..] fetched */
	uint64_t claim_queue[SS_CLAIM_QUEUE];
	unsigned claim_head, claim_count;
	int claims_wanted; /* asked for and not yet handed out */
	bool claim_busy[SS_CLAIM_SLOTS]; /* a fetch-add into word 1 + i */
	int claims_in_flight;
	int claim_rc; /* the counter refused a claim: claims fail */
	bool claim_stall_said; /* a wait past the round timeout was logged */
	uint32_t claims_high; /* the highest chunk claimed here, plus one */
	/* rank 0's fabric epoch whose counter was READ ready; a READ of it
	 * in flight, for which epoch, and when to ask again */
	uint32_t counter_epoch, check_epoch;
	bool check_in_flight, seed_done;
	uint64_t check_retry_ns;
	int seed_status;

	/* the foreground barrier: bounded, and trainers may leave it */
	pthread_mutex_t fg_lock;
	pthread_cond_t fg_cond;
	bool fg_init;
	bool fg_need_last; /* released by a leave: the first awake goes on */
	bool fg_running; /* the last to come runs the round: wait for it */
	int trainers; /* still taking part */
	int fg_waiting;
	unsigned fg_generation;
	int fg_rc;

	/* statistics, under lock */
	pthread_mutex_t lock;
	atomic_uint_fast64_t iterations;
	uint64_t begin_ns, rounds, bytes_sent, peers_left_out, joins, reseeds;
	uint64_t rounds_partial, rounds_skipped, messages_late, easgd_dropped;
	uint64_t view_changes;
	uint64_t last_iterations;
	double gap_sum, divergence;
	double latencies[SS_LATENCIES];

	/*
	 * The bound on the sync gap (opts.max_gap): a trainer past it waits
	 * on round_cond, under lock, for the next round ss_record() applies.
	 */
	atomic_uint_fast64_t round_iterations; /* iterations at that round */
	atomic_bool gap_bound; /* the shadow thread runs rounds with a peer */
	pthread_cond_t round_cond;
	uint64_t gap_waits, gap_gave_up; /* gave up: at rounds + 1 */
	double gap_wait_s;
	bool gap_warned;
	bool gap_last_partial; /* the last round left a peer out */
};

/*
 * Shard @k: floats [ss__shard_off(k), + ss__shard_len(k)), by rank @k's
 * place among the members (empty for a rank that is none).
 */
static inline size_t ss__member_off(const struct ss_sync *s, int j)
{
	return s->n * (size_t)j / (size_t)s->n_members;
}

static inline size_t ss__shard_off(const struct ss_sync *s, int k)
{
	int j = s->member_index[k];

	return j < 0 ? s->n : ss__member_off(s, j);
}

static inline size_t ss__shard_len(const struct ss_sync *s, int k)
{
	int j = s->member_index[k];

	return j < 0 ? 0 : ss__member_off(s, j + 1) - ss__member_off(s, j);
}

/* Offset in floats of the inbox slot of @sender for rounds of @parity. */
static inline size_t ss__slot(const struct ss_sync *s, uint32_t parity,
			      int sender)
{
	return ((size_t)(parity & 1) * (size_t)s->n_members +
		(size_t)s->member_index[sender]) *
	       s->shard_max;
}

/*
 * Hierarchical S-MA's area in the inbox, after the barrier words, where
 * the other groups' averages of our chunk's pieces land (step 3), a half
 * per round parity, a place of shard_max floats per group: C groups of
 * G >= 2 take C ceil(n / M) <= (n + M) / 2 floats.  Only where
 * hierarchical rounds may run (ss__hma_possible).
 */
static inline size_t ss__hma_area_off(size_t n, int world)
{
	return 2 * (n + (size_t)world) + 2 * (size_t)world;
}

static inline size_t ss__hma_half(size_t n, int world)
{
	return (n + (size_t)world + 1) / 2;
}

/* Where the barrier words start in the inbox, in floats: fixed. */
static inline size_t ss__ctrl_off(const struct ss_sync *s)
{
	return 2 * (s->n + (size_t)s->world);
}

/*
 * How many rounds @a is after @b, negative when before: round numbers
 * travel in 28 bits and wrap.
 */
static inline int32_t ss__rounds_after(uint32_t a, uint32_t b)
{
	return (int32_t)((a - b) << 4) >> 4;
}

/* Whether messages of @kind carry the barrier's number, not the round's. */
static inline bool ss__counts_barriers(int kind)
{
	return kind == SS_MSG_BARRIER || kind == SS_MSG_BARRIER_DONE ||
	       kind == SS_MSG_CALL;
}

/* Index of @p's entry for rounds of @round's parity in arrived[]. */
static inline size_t ss__arrival(const struct ss_sync *s, uint32_t round, int p)
{
	return (size_t)(round & 1) * (size_t)s->world + (size_t)p;
}

/*
 * Whether @p's message of @kind for the current round (barrier kinds: the
 * current barrier) has come.  A round message counts only for the round
 * it names: a newer one in its other slot is kept for its own round, an
 * older one is late and was discarded.  A peer can be one barrier ahead
 * of us, and its newer barrier message then stands for this one.
 */
static inline bool ss__got(const struct ss_sync *s, int kind, int p)
{
	if (!ss__round_kind(kind))
		return ss__rounds_after(s->seen[kind][p], s->barrier_seq) >= 0;
	/* one from outside our members has no slot in our inbox to read */
	return s->member_index[p] >= 0 &&
	       s->arrived[kind][ss__arrival(s, s->round, p)] == s->round;
}

/*
 * Whether @p's message of @kind for this round can still come: not when
 * @p said it runs this round without us, nor when it has sent for a later
 * round (one ordered queue pair: what it sent for this one is here).
 */
static inline bool ss__may_come(const struct ss_sync *s, int kind, int p)
{
	if (!ss__round_kind(kind))
		return true;
	return ss__rounds_after(s->skipped[p], s->round) < 0 &&
	       ss__rounds_after(s->latest[p], s->round) <= 0;
}

/*
 * Whether we may write this round's message of @kind into @p's slot: its
 * previous message there is consumed once @p has finished the round that
 * many slots back, which a message of the round after that proves.  A
 * peer further behind gets a SKIP instead, so that no slot is overwritten
 * before it is read and no read sees two rounds' data.
 */
static inline bool ss__slot_free(const struct ss_sync *s, int kind, int p)
{
	return ss__rounds_after(s->latest[p],
				s->round - (uint32_t)ss__slots(kind) + 1) >= 0;
}

/*
 * Whether @p takes part in our rounds: connected, its shadow thread not
 * stopped, the process that came to our last barrier (not a new one that
 * has yet to join), and not already in the next barrier (everything it
 * sent for its rounds came before its barrier message).
 */
static inline bool ss__alive(const struct ss_sync *s, int p)
{
	return s->member_index[p] >= 0 && !s->left[p] &&
	       ss_fabric_peer_ok(s->fabric, p) && !s->paused[p] &&
	       s->epoch[p] == ss_fabric_peer_epoch(s->fabric, p) &&
	       !ss__got(s, SS_MSG_BARRIER, p);
}

/* Whether any peer takes part in our rounds. */
static inline bool ss__any_alive(const struct ss_sync *s)
{
	for (int p = 0; p < s->world; p++)
		if (p != s->rank && ss__alive(s, p))
			return true;
	return false;
}

/*
 * Whether gossip may read @p's replica: connected, and the process that
 * came to our last barrier.  Unlike ss__alive(), a peer already in the
 * next barrier, or whose shadow thread stopped, counts: its replica holds
 * still, which is the best time to read it.
 */
static inline bool ss__readable(const struct ss_sync *s, int p)
{
	return ss_fabric_peer_ok(s->fabric, p) &&
	       s->epoch[p] == ss_fabric_peer_epoch(s->fabric, p);
}

/*
 * ss__expected() - whether @p should send @kind now: at barriers every
 * connected peer (a stopped shadow thread, a new process joining), in
 * rounds those alive.
 */
bool ss__expected(const struct ss_sync *s, int kind, int p);

/*
 * ss__claims_post() - post the fetch-adds that trainers' claims wait for
 * (the caller holds fabric_lock); ss__claim_done() - one completed.
 */
void ss__claims_post(struct ss_sync *s);
void ss__claim_done(struct ss_sync *s, const struct ss_completion *c);
/*
 * ss__claims_seed() - a restarted rank 0, joining: its counter from the
 * others' highest claims, then shown ready (before that, the others do
 * not claim from it).  ss__claims_ready() - rank 0 at a fresh start.
 */
int ss__claims_seed(struct ss_sync *s, uint64_t deadline);
void ss__claims_ready(struct ss_sync *s);
/*
 * ss__claims_from() - a fresh start: shown ready, rank 0's counter first
 * set to opts.claims_from (a resumed job's).  Under fabric_lock.
 */
int ss__claims_from(struct ss_sync *s, uint64_t deadline);

/* ss__barrier() - ss_sync_barrier() with fabric_lock held. */
int ss__barrier(struct ss_sync *s);

/* ss__view_off() - where in SNAP a peer's state is READ to: past the n
 * floats and the barrier's word, 64-byte aligned. */
static inline size_t ss__view_off(size_t n)
{
	return ((n + 1) * sizeof(float) + 63) & ~(size_t)63;
}

/*
 * ss__read_view() - READ @p's state (struct ss__state) and wait for it,
 * until @deadline: a copy, valid until the next call, or NULL when it did
 * not come.  With fabric_lock held, no send in flight reading SNAP's view
 * area.
 */
const struct ss__state *ss__read_view(struct ss_sync *s, int p,
				      uint64_t deadline);

/*
 * ss__cut_off_through() - after a partition healed: a peer back on a new
 * connection, out of our members, whose members' lowest rank is below
 * ours (we were the smaller side: it went on without us), or -1.  It
 * READs each such peer's view once per connection.
 */
int ss__cut_off_through(struct ss_sync *s);

/*
 * ss__rejoin() - we were cut off from @h's members: rejoin them as a
 * restarted rank does, through @h (reseeded from its replica, at its
 * barrier).  0, or an error after which we go on alone and try again.
 */
int ss__rejoin(struct ss_sync *s, int h);

/*
 * ss__barrier_due() - whether the next round must be a barrier instead: a
 * peer asked to join or called us to its barrier, a member left or failed
 * (the barrier makes the members those that come to it), or a live rank
 * is out of the members (it came late to a barrier we passed).  A member
 * waiting in our next barrier is not a reason by itself (it may be an
 * explicit one, ss_sync_barrier's or ss_sync_finish's): it is left out of
 * rounds until our own next call is that barrier, or it calls us there.
 */
bool ss__barrier_due(const struct ss_sync *s);

/*
 * ss__set_members() - the members are now @in (per rank; ours always),
 * the shards re-divided; our new shard's S-EASGD center and S-BMUF
 * state restart from the replica.  Returns whether anything changed.
 */
bool ss__set_members(struct ss_sync *s, const bool *in);

/* ss__state_from_replica() - our shard's center and S-BMUF state. */
void ss__state_from_replica(struct ss_sync *s);

/* ss__join_wanted() - whether a connected peer asked to join. */
bool ss__join_wanted(const struct ss_sync *s);

/*
 * ss__call_peers() - CALL to every connected peer: we hold a barrier
 * because our members change, for a reason a peer may not have seen (a
 * connection of ours that failed, a peer back or asking to join at our
 * end only), and a peer with no reason of its own would wait in rounds
 * while our barrier waited for it.
 */
void ss__call_peers(struct ss_sync *s);

/*
 * ss__pump() - process completions for up to @wait_ms: count our own
 * operations done, record messages, apply S-EASGD deltas as they come.
 */
void ss__pump(struct ss_sync *s, unsigned wait_ms);

/* ss__stop_peers() - tell every peer our shadow thread stopped. */
void ss__stop_peers(struct ss_sync *s);

/*
 * ss__gap() - the trainers' iterations since the last applied round.
 * Signed: a round applied after a trainer's count makes it negative.
 */
static inline int64_t ss__gap(struct ss_sync *s)
{
	return (int64_t)(atomic_load_explicit(&s->iterations,
					      memory_order_relaxed) -
			 atomic_load_explicit(&s->round_iterations,
					      memory_order_relaxed));
}

/*
 * ss__gap_wait() - a trainer past opts.max_gap waits for the shadow
 * thread's next round (ss_sync_add_iterations()).
 */
void ss__gap_wait(struct ss_sync *s);

/*
 * ss__wait_msgs() - until every live peer's message of @kind for this
 * round has come or cannot come any more, at most until @deadline.  The
 * peers missing are left out (ss__leave_out); returns how many.
 */
int ss__wait_msgs(struct ss_sync *s, int kind, uint64_t deadline);

/* ss__wait_msgs_from() - the same, for the @n ranks in @from only. */
int ss__wait_msgs_from(struct ss_sync *s, int kind, const int *from, int n,
		       uint64_t deadline);

/* ss__wait_sends() - until our operations have completed. */
void ss__wait_sends(struct ss_sync *s, uint64_t deadline);

/*
 * ss__drain() - before SNAP or AVG is written again: until no operation
 * that reads or fills them is in flight.  Returns 0, or -EBUSY when some
 * still are at @deadline (the buffers must not be touched).
 */
int ss__drain(struct ss_sync *s, uint64_t deadline);

/* ss__deadline() - this round's deadline, from its timeout. */
uint64_t ss__deadline(const struct ss_sync *s);

/*
 * ss__post_read() - READ from a peer's region into one of ours, counted
 * in flight and in the peer's bandwidth.
 */
int ss__post_read(struct ss_sync *s, int p, int local, size_t local_off,
		  int remote, size_t remote_off, size_t bytes);

/* ss__leave_out() - count a peer missing from this round; report once. */
void ss__leave_out(struct ss_sync *s, int p, const char *what);

/*
 * ss__behind() - whether @p is too far behind for this round's message of
 * @kind (ss__slot_free); then it gets a SKIP and is left out.
 */
bool ss__behind(struct ss_sync *s, int kind, int p);

/*
 * ss__send() - WRITE_WITH_IMM from SNAP or AVG to a peer's region.  A
 * round message goes only where ss__slot_free() allows; otherwise the
 * peer gets a SKIP and -EAGAIN is returned.
 */
int ss__send(struct ss_sync *s, int p, int local, size_t local_off, int remote,
	     size_t remote_off, size_t floats, int kind);

/* The rounds of each algorithm; divergence and bytes go to *stats. */
struct ss__round_result {
	double diff2, norm2; /* for the divergence estimate */
	uint64_t bytes;
};
int ss__round_ma(struct ss_sync *s, struct ss__round_result *res);
/* ma.c: S-BMUF's block momentum for this round */
double ss__bmuf_eta(struct ss_sync *s);
/* ss__bmuf_eta_for() - 1 - 1/min(@members, @span), 0 for a span of 1 or
 * less: the default for rounds of @span steps (quality-k's too) */
double ss__bmuf_eta_for(int members, double span);
/* hma.c: hierarchical S-MA, and whether this round is one (its groups) */
int ss__round_hma(struct ss_sync *s, struct ss__round_result *res);
int ss__hma_group(int members);
bool ss__hma_wanted(const struct ss_sync *s);
/* whether any membership could run hierarchical rounds: the inbox then
 * holds their area */
bool ss__hma_possible(const struct ss_sync *s);
int ss__round_easgd(struct ss_sync *s, struct ss__round_result *res);
int ss__round_gossip(struct ss_sync *s, struct ss__round_result *res);
void ss__easgd_apply_delta(struct ss_sync *s, int sender, uint32_t round);
/*
 * ss__easgd_apply_early() - the deltas that came early, for rounds up to
 * @upto: at the start of a round (@upto its own), and at the end of a
 * barrier (@upto the largest round it jumps over).
 */
void ss__easgd_apply_early(struct ss_sync *s, uint32_t upto);

/*
 * The kernels.  They touch the replica while trainers write it: benign
 * Hogwild races, annotated in kernels.c.
 */
void ss__copy(float *dst, const float *src, size_t n);
void ss__average(float *out, const float *own, const float *const *others,
		 int k, size_t n);
void ss__apply(float *w, const float *target, const float *snap, size_t n);
/* ss__apply() and ss__distance(snap, target) in one pass. */
void ss__apply_measured(float *w, const float *target, const float *snap,
			size_t n, double *diff2, double *norm2);
void ss__distance(const float *a, const float *b, size_t n, double *diff2,
		  double *norm2);
void ss__bmuf(float *w_g, float *momentum, float *avg, size_t n, float eta,
	      float zeta, bool nesterov);
void ss__easgd(float *w, const float *c, float *d, size_t n, float alpha);
void ss__add(float *c, const float *d, size_t n);
void ss__gossip(float *w, const float *peer, size_t n, float beta);
/* Bytes of arrays past which a kernel's output bypasses the cache. */
size_t ss__stream_threshold(void);

#endif /* SS_SYNC_INTERNAL_H */
