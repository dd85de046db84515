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
	SS_R_INBOX, /* 2 x world x shard floats, remote-WRITE: contributions;
		     * then one word per rank for barriers */
	SS_R_AVG, /* n floats, remote-WRITE: averages; local scratch */
	SS_R_CENTER, /* shard floats, remote-READ: S-EASGD center */
	SS_R_SNAP, /* n floats, local: snapshot and deltas, sent from here */
	SS_R_STATE, /* struct ss__state, remote-READ: whether we run */
	SS_R_COUNT
};

/*
 * What a rank shows its peers, read by a rank that starts: a peer that
 * has begun means the job runs already and the newcomer joins (reseeds)
 * rather than starting with the others.  Big-endian.
 */
struct ss__state {
	uint32_t began; /* SS_STATE_BEGAN once past ss_sync_begin */
	uint32_t reserved[3];
};
#define SS_STATE_BEGAN 0x53534247u /* "SSBG" */

/* Messages, in the immediate: kind in the top 4 bits, round below. */
enum ss_msg {
	SS_MSG_MA_PART = 1, /* S-MA: my snapshot of your shard */
	SS_MSG_MA_AVG, /* S-MA: the average of my shard */
	SS_MSG_EASGD, /* S-EASGD: my delta for your center */
	SS_MSG_BARRIER,
	SS_MSG_STOP, /* my shadow thread stopped: do not wait for me */
	SS_MSG_JOIN, /* I (re)started while you run: barrier, let me in */
	SS_MSG_BARRIER_DONE, /* I have every peer's barrier message, and with
			      * it all it sent before: you may leave */
	SS_MSG_KINDS
};
#define SS_IMM(kind, round) (((uint32_t)(kind) << 28) | ((round)&0x0fffffffu))
#define SS_IMM_KIND(imm) ((int)((imm) >> 28))
#define SS_IMM_ROUND(imm) ((imm)&0x0fffffffu)

#define SS_LATENCIES 1024 /* round latencies kept for percentiles */

struct ss_sync {
	struct ss_fabric *fabric;
	struct ss_sync_options opts;
	size_t n; /* floats synchronized: a prefix of the replica */
	size_t len; /* floats of the replica */
	int rank, world;
	size_t shard_max; /* floats in the largest shard */
	struct ss_region *r[SS_R_COUNT];
	float *w, *inbox, *avg, *center, *snap;
	/* S-BMUF global model and block momentum, of our shard: one copy of
	 * each shard's, at its owner, so that no partial round can make the
	 * ranks' copies differ */
	float *w_g, *momentum;

	/*
	 * The round of the last message of each kind from each peer, which
	 * counts for the round it names and any before (see ss__got).
	 */
	uint32_t round, barrier_seq;
	uint32_t *seen[SS_MSG_KINDS];
	bool *paused; /* its shadow thread stopped; back at the next barrier */
	uint32_t *ctrl; /* the barrier words in the inbox */
	int outstanding; /* our operations not yet completed */
	bool *reads_ok; /* S-EASGD: the center read from each peer arrived */
	/* S-EASGD: the peer's delta (of round seen[]) came for a round we
	 * have yet to reach, and waits in its slot */
	bool *easgd_early;
	bool *left_out; /* reported as left out, until it answers again */
	/*
	 * The fabric epoch of each peer when it last came to a barrier: a
	 * peer whose epoch has changed since is another process, which
	 * takes part in rounds only once a barrier has let it in.
	 */
	uint32_t *epoch;
	bool *joining; /* asked to join: our next round is a barrier */
	bool *barrier_sent; /* within a barrier: our message went to it */
	struct ss__state *state; /* ours, in SS_R_STATE */
	uint64_t gossip_state; /* random gossip: xorshift state */
	uint32_t gossip_step; /* exponential graph: which hop is next */

	/* the shadow thread */
	pthread_t thread;
	bool running;
	atomic_bool stop;
	int thread_rc;
	struct ss_topo *topo;
	const struct ss_plan_slot *slot;

	/* the foreground barrier: bounded, and trainers may leave it */
	pthread_mutex_t fg_lock;
	pthread_cond_t fg_cond;
	bool fg_init;
	bool fg_need_last; /* released by a leave: the first awake goes on */
	int trainers; /* still taking part */
	int fg_waiting;
	unsigned fg_generation;
	int fg_rc;

	/* statistics, under lock */
	pthread_mutex_t lock;
	atomic_uint_fast64_t iterations;
	uint64_t begin_ns, rounds, bytes_sent, peers_left_out, joins, reseeds;
	uint64_t last_iterations;
	double gap_sum, divergence;
	double latencies[SS_LATENCIES];
};

/* Shard @k: floats [ss__shard_off(k), + ss__shard_len(k)). */
static inline size_t ss__shard_off(const struct ss_sync *s, int k)
{
	return s->n * (size_t)k / (size_t)s->world;
}

static inline size_t ss__shard_len(const struct ss_sync *s, int k)
{
	return ss__shard_off(s, k + 1) - ss__shard_off(s, k);
}

/* Offset in floats of the inbox slot of @sender for rounds of @parity. */
static inline size_t ss__slot(const struct ss_sync *s, uint32_t parity,
			      int sender)
{
	return ((size_t)(parity & 1) * (size_t)s->world + (size_t)sender) *
	       s->shard_max;
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
	return kind == SS_MSG_BARRIER || kind == SS_MSG_BARRIER_DONE;
}

/*
 * Whether @p's message of @kind for the current round has come: its last
 * one names this round or a later one.  A peer can be a barrier, or an
 * S-EASGD round, ahead of us, and its newer message then stands for the
 * one we wait for.
 */
static inline bool ss__got(const struct ss_sync *s, int kind, int p)
{
	uint32_t now = ss__counts_barriers(kind) ? s->barrier_seq : s->round;

	return ss__rounds_after(s->seen[kind][p], now) >= 0;
}

/*
 * Whether @p takes part in our rounds: connected, its shadow thread not
 * stopped, the process that came to our last barrier (not a new one that
 * has yet to join), and not already in the next barrier (everything it
 * sent for its rounds came before its barrier message).
 */
static inline bool ss__alive(const struct ss_sync *s, int p)
{
	return ss_fabric_peer_ok(s->fabric, p) && !s->paused[p] &&
	       s->epoch[p] == ss_fabric_peer_epoch(s->fabric, p) &&
	       !ss__got(s, SS_MSG_BARRIER, p);
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

/* ss__join_wanted() - whether a connected peer asked to join. */
bool ss__join_wanted(const struct ss_sync *s);

/*
 * ss__pump() - process completions for up to @wait_ms: count our own
 * operations done, record messages, apply S-EASGD deltas as they come.
 */
void ss__pump(struct ss_sync *s, unsigned wait_ms);

/* ss__stop_peers() - tell every peer our shadow thread stopped. */
void ss__stop_peers(struct ss_sync *s);

/* ss__wait_msgs() - until every live peer sent @kind this round. */
int ss__wait_msgs(struct ss_sync *s, int kind, uint64_t deadline);

/* ss__wait_sends() - until our operations have completed. */
void ss__wait_sends(struct ss_sync *s, uint64_t deadline);

/* ss__leave_out() - count a peer missing from this round; report once. */
void ss__leave_out(struct ss_sync *s, int p, const char *what);

/* ss__post_imm() - WRITE_WITH_IMM from SNAP or AVG to a peer's region. */
int ss__send(struct ss_sync *s, int p, int local, size_t local_off, int remote,
	     size_t remote_off, size_t floats, int kind);

/* The rounds of each algorithm; divergence and bytes go to *stats. */
struct ss__round_result {
	double diff2, norm2; /* for the divergence estimate */
	uint64_t bytes;
};
int ss__round_ma(struct ss_sync *s, struct ss__round_result *res);
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

#endif /* SS_SYNC_INTERNAL_H */
