/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ShadowSync sync layer: keeps the replicas of a flat float array close
 * across ranks, in the background (the shadow thread) or in the foreground
 * (trainers stop every k iterations), with one of four algorithms:
 *
 *  - S-MA: exact average, decentralized and bandwidth-optimal (each rank
 *    owns a shard: reduce-scatter then all-gather by one-sided writes);
 *  - S-EASGD: elastic averaging with the center sharded across owners;
 *  - S-BMUF: block momentum on top of the S-MA average;
 *  - gossip: each round reads one peer's replica and moves toward it.
 *
 * Every algorithm applies its result as `w += target - snapshot`, so what
 * the trainers added while the round ran is kept, but for a trainer's
 * store that lands between the apply's load and store of the same float
 * (Hogwild: that one update is lost; docs/algorithms.md, "Concurrency").
 * It knows nothing about models.  See docs/algorithms.md for the rules,
 * costs and failure behaviour.
 *
 * Use:
 *   ss_fabric_open()          the endpoint
 *   ss_sync_create()          allocates its regions on the fabric
 *   fill ss_sync_params()     the initial replica
 *   ss_fabric_connect()
 *   ss_sync_begin()           barrier; the center and w_g start from here
 *   ss_shadow_start() ... ss_shadow_stop()   or   ss_sync_foreground()
 *   ss_sync_destroy(), ss_fabric_close()
 *
 * Threads: one thread drives a sync at a time, in the order above: the
 * caller up to ss_shadow_start(), the shadow thread until ss_shadow_stop()
 * (in the foreground mode the trainers, inside ss_sync_foreground()), the
 * caller again after.  ss_sync_round(), ss_sync_barrier() and
 * ss_sync_leave() hold the sync's lock on its endpoint for their whole
 * run, so a call from another thread while the shadow thread runs waits
 * for the round in progress and runs after it: safe, though rounds are
 * the shadow thread's job.  While it runs, any thread may call
 * ss_sync_params() (the trainers write the replica without locks, as
 * Hogwild does), ss_sync_len(), ss_sync_synced_len(),
 * ss_sync_add_iterations(), ss_sync_claim(), ss_sync_get_stats(),
 * ss_sync_peer_left_out() and ss_sync_print_stats(), each at once with
 * the others.  The endpoint is the sync's until ss_sync_destroy(): call
 * only its fixed accessors (fabric.h) meanwhile.  The functions that take
 * no sync may run in any thread at once.
 */
#ifndef SHADOWSYNC_SYNC_H
#define SHADOWSYNC_SYNC_H

#include <stddef.h>
#include <stdint.h>

#include "shadowsync/fabric.h"
#include "shadowsync/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

enum ss_sync_algo {
	SS_SYNC_NONE,
	SS_SYNC_MA,
	SS_SYNC_EASGD,
	SS_SYNC_BMUF,
	SS_SYNC_GOSSIP,
};

/* Fill with ss_sync_options_init() first (base.h, "Option structs"). */
struct ss_sync_options {
	size_t size; /* sizeof the caller's struct, set by the init */
	enum ss_sync_algo algo;
	double alpha; /* S-EASGD elasticity; 0: 0.5 / N, N the members */
	/*
	 * S-BMUF block momentum; < 0: 1 - 1/min(N, the replica's steps a
	 * round spans), so that rounds of fewer steps than ranks (a fast
	 * network's shadow) do not overshoot
	 */
	double eta;
	double zeta; /* S-BMUF block learning rate; 0: 1 */
	bool nesterov; /* S-BMUF: Nesterov target w_g + eta D (default) */
	double beta; /* gossip step toward the peer; 0: 0.5 */
	bool gossip_random; /* random peers, not the exponential graph */
	uint64_t seed; /* for random gossip */
	/*
	 * A round gives up on a peer after this; 0: scaled, 5 s plus four
	 * times what a round moves to a peer over the bandwidth the slowest
	 * peer has shown (100 MB/s until measured), at most 10 minutes.
	 */
	unsigned round_timeout_ms;
	double max_rounds_per_s; /* shadow thread cap; 0: none */
	double max_bytes_per_s; /* shadow thread cap on bytes sent; 0: none */
	struct ss_topo *topo; /* with numa: where the replica's memory goes */
	int numa; /* NUMA node (plan->replica_numa); ignored without topo */
	/*
	 * Floats synchronized: the first @synced of the replica (the dense
	 * MLPs, when the embedding tables stay each rank's own); 0: all.
	 * Every rank must give the same.
	 */
	size_t synced;
	/*
	 * S-MA: from how many members its rounds are hierarchical (groups of
	 * about sqrt(members) ranks: reduce-scatter in the group, then among
	 * the groups' owners of each piece, then all-gather both ways: about
	 * 4 sqrt(N) messages a rank instead of 2 N); 0: from
	 * SS_SYNC_HIERARCHICAL_FROM, where the simulator has it faster
	 * (docs/scale.md); < 0: never.  Flat when the members are prime.
	 * Every rank must give the same.
	 */
	int hierarchical_from;
	/*
	 * A bound on the sync gap: while the shadow thread runs rounds with
	 * a peer, a trainer waits in ss_sync_add_iterations() once this
	 * many iterations (of all the rank's trainers together, the sync
	 * gap's unit) have passed since the last applied round, until the
	 * next one, or the round timeout.  For machines where the shadow
	 * thread shares its core (more threads than cores): starved of CPU
	 * it ran 1 round while 2 ranks trained apart, and their average was
	 * worse than either.  0: never (the default; the trainers never
	 * wait for the network).
	 */
	uint64_t max_gap;
	/*
	 * At a fresh start, every rank's replica starts from the lowest
	 * rank's (READ in ss_sync_begin() between two barriers, while that
	 * rank's stays still), as PyTorch's DistributedDataParallel starts
	 * from rank 0's: for programs that initialize their model each
	 * with its own seed.  false (the default): each starts from its own
	 * values (the command's ranks make the same model from one seed).
	 */
	bool start_alike;
	/*
	 * A resumed job's chunk counter: rank 0's starts here, the
	 * ss_sync_claimed() of the job it resumes (the others ignore it).
	 * 0 (the default): from 0.
	 */
	uint64_t claims_from;
};

#define SS_SYNC_HIERARCHICAL_FROM 32

/* ss_sync_options_init() - the defaults above, for @algo. */
#define ss_sync_options_init(opts, algo) \
	ss_sync_options_init_size((opts), sizeof(*(opts)), (algo))
void ss_sync_options_init_size(struct ss_sync_options *opts, size_t size,
			       enum ss_sync_algo algo);

/* ss_sync_algo_parse() - "ma", "easgd", "bmuf", "gossip" or "none". */
int ss_sync_algo_parse(const char *option, const char *text,
		       enum ss_sync_algo *algo);

/* ss_sync_algo_name() - the name ss_sync_algo_parse() accepts. */
const char *ss_sync_algo_name(enum ss_sync_algo algo);

struct ss_sync;

/*
 * ss_sync_create() - the replica of @n floats and the buffers the
 * algorithms need for the @opts->synced of them they synchronize (all when
 * 0), allocated on @fabric (which must not be connected yet).
 * Parameters are remote-READ only, the inboxes remote-WRITE only.  With
 * @opts->topo, every region is bound to NUMA node @opts->numa (a failure
 * to bind is logged, not fatal).
 *
 * Returns 0; -EINVAL for n == 0, @opts->synced > n, a connected fabric
 * or @opts of a size this library does not know (base.h); -ENOMEM; what
 * ss_fabric_alloc() returns.
 */
int ss_sync_create(struct ss_sync **sync, struct ss_fabric *fabric, size_t n,
		   const struct ss_sync_options *opts);

/*
 * ss_sync_destroy() - stop the shadow thread if running; clear the
 * pointer.  Threads: no other call on the sync may overlap it.
 */
void ss_sync_destroy(struct ss_sync **sync);

/* ss_sync_params() - the replica: n floats, 64-byte aligned, trainers' to write. */
float *ss_sync_params(struct ss_sync *sync);

/* ss_sync_len() - n, the replica's floats (opts.synced of them synced). */
size_t ss_sync_len(const struct ss_sync *sync);

/* ss_sync_synced_len() - the floats the rounds synchronize (a prefix). */
size_t ss_sync_synced_len(const struct ss_sync *sync);

/*
 * ss_sync_registered_bytes() - memory a replica of @n floats among @world
 * ranks registers with the fabric (what RLIMIT_MEMLOCK must allow).
 */
size_t ss_sync_registered_bytes(size_t n, int world);

/*
 * ss_sync_registered_bytes_for() - what ss_sync_create() with @opts
 * registers for a replica of @n floats among @world ranks: the replica
 * whole, the other regions for the @opts->synced floats synchronized, the
 * hierarchical rounds' area only for S-MA from @opts->hierarchical_from
 * ranks.  0 for @opts of a size this library does not know.
 */
size_t ss_sync_registered_bytes_for(size_t n,
				    const struct ss_sync_options *opts,
				    int world);

/*
 * ss_sync_begin() - once, by the thread that drives the sync, before
 * ss_shadow_start() or any claim: after connecting and filling the
 * replica, start the S-EASGD center and the S-BMUF global model from the
 * replica, then wait until every rank is here (a barrier, see
 * ss_sync_barrier).  With @opts->start_alike, the replica is then
 * READ from the lowest rank's, and a second barrier waits for every
 * rank's READ.
 *
 * When a peer has begun already (this process is a restarted rank, or a
 * late one) it joins instead: it asks the running ranks to let it in,
 * READs the replica of the lowest such peer while that peer waits in the
 * barrier that lets it in, restarts the S-EASGD center shard and the
 * S-BMUF state from it, and only then comes to that barrier; its first
 * round is the next one of everyone.  Nothing to set: every rank calls
 * ss_sync_begin and finds out which case it is in.  Returns 0; -ETIMEDOUT
 * when the barrier, or the running peer, did not answer (start it again).
 */
int ss_sync_begin(struct ss_sync *sync);

/*
 * ss_sync_round() - run one round of the algorithm now, in the calling
 * thread.  Peers that do not answer within the round timeout are left out
 * and reported once.  When a restarted peer has asked to join, this call
 * is instead the barrier that lets it in (ss_sync_barrier; counted in the
 * stats' joins, not as a round).  Returns 0, or -errno / SS_E* when the
 * round could not run at all.
 */
int ss_sync_round(struct ss_sync *sync);

/*
 * ss_sync_barrier() - wait until every live rank has called it, at most
 * 4 x the round timeout + 5 s (ranks may be finishing a round).  Ranks
 * then go on from the same round number, and the members of the rounds
 * are those that came.  Returns 0, or -ETIMEDOUT when a connected rank
 * did not come: then too the ranks that came go on together, without it.
 */
int ss_sync_barrier(struct ss_sync *sync);

/*
 * ss_sync_leave() - this rank is done: tell every peer (a LEAVE), which
 * goes on without it, the shards re-divided among the ranks that remain,
 * from its next round.  No round after it (a barrier may still run, and
 * a rank that leaves is not waited for in the others' barriers).  A new
 * process of the rank joins again as any restarted rank.  Returns 0.
 */
int ss_sync_leave(struct ss_sync *sync);

/*
 * ss_sync_finish() - the end of a rank's training, shadow thread stopped:
 * a barrier with the ranks that are done too (or whose shadow threads
 * come to it), for S-MA and S-BMUF one last round among them (all then
 * hold the same exact average), a last barrier, and ss_sync_leave().  A
 * rank that does not come within the barrier's wait (it has far more
 * data left) is not waited for again: it goes on alone and finishes the
 * same way; *@missing says how many (may be NULL).  Returns 0, -EBUSY
 * while the shadow thread runs, or the round's error.
 */
int ss_sync_finish(struct ss_sync *sync, int *missing);

/*
 * ss_shadow_start() - start the shadow thread, pinned to @slot when it is
 * not NULL (and @topo is this machine's).  It runs rounds for as long as it
 * runs, as often as it can within the caps of the options.  Returns 0,
 * -EBUSY when it runs already, or the -errno of pthread_create().
 * Threads: ss_shadow_start() and ss_shadow_stop() from the thread that
 * owns the sync, never both at once.
 */
int ss_shadow_start(struct ss_sync *sync, struct ss_topo *topo,
		    const struct ss_plan_slot *slot);

/* ss_shadow_stop() - stop and join it; returns the first error it met. */
int ss_shadow_stop(struct ss_sync *sync);

/*
 * ss_sync_set_trainers() - how many trainer threads call
 * ss_sync_foreground(); once, before the trainers start.  Returns 0, or
 * -EINVAL for fewer than 1 or a second call.
 */
int ss_sync_set_trainers(struct ss_sync *sync, int trainers);

/*
 * ss_sync_foreground() - the foreground baseline: every trainer calls it
 * every k iterations, each from its own thread, all at once; all wait at
 * a barrier while one of them runs the same round as the shadow thread
 * would.  Returns the round's status, -EINVAL before
 * ss_sync_set_trainers(), or -ETIMEDOUT when the other trainers did not
 * come within 4 x the round timeout + 5 s.
 */
int ss_sync_foreground(struct ss_sync *sync);

/*
 * ss_sync_foreground_leave() - a trainer that stops (its data is done)
 * leaves the foreground barrier, so the others do not wait for it.  From
 * that trainer's thread, at any time.
 */
void ss_sync_foreground_leave(struct ss_sync *sync);

/*
 * ss_sync_add_iterations() - trainers report iterations done, for the sync
 * gap.  Thread-safe and cheap (one relaxed atomic add), unless the gap
 * passed @opts->max_gap: then it waits for the shadow thread's next round
 * (at most the round timeout; after a wait that timed out, none until a
 * round is applied).
 */
void ss_sync_add_iterations(struct ss_sync *sync, uint64_t iterations);

/*
 * ss_sync_claim() - the next chunk number of the job's data, from a
 * counter at rank 0 that every rank advances by one-sided fetch-and-add:
 * each number goes to exactly one rank, and a rank that asks more often
 * gets more.  Numbers count up from 0 with no end; the caller maps them
 * to data and stops past its last.  Thread-safe: trainers call it while
 * the shadow thread runs (which posts and completes the fetch-adds in its
 * waits) or, with no round running, it drives the fabric itself.  After
 * ss_sync_begin.  Once rank 0 has left (ss_sync_leave), which it does
 * when its own claims are past the data, every number is UINT64_MAX.
 * Returns 0; SS_EPEER when rank 0 is gone; -ETIMEDOUT after 4 x the
 * round timeout + 5 s without an answer.
 */
int ss_sync_claim(struct ss_sync *sync, uint64_t *chunk);

/*
 * ss_sync_claimed() - at rank 0, the chunk numbers its counter has handed
 * out (each below it went to some rank); at another rank, its highest
 * claim plus one.  For a checkpoint that resumes: rank 0's, read once
 * every rank has stopped claiming (after ss_sync_finish), is where the
 * resumed job's counter starts (ss_sync_options.claims_from).
 */
uint64_t ss_sync_claimed(struct ss_sync *sync);

struct ss_sync_stats {
	uint64_t rounds; /* rounds applied */
	double rounds_per_s; /* since ss_sync_begin */
	uint64_t bytes_sent; /* by this rank, all peers */
	double bytes_per_peer_per_round;
	double round_p50_us, round_p99_us; /* round latency */
	double sync_gap; /* trainer iterations between applied rounds, mean */
	double divergence; /* ||w - consensus|| / ||consensus||, last round */
	uint64_t peers_left_out; /* peer-rounds a peer was left out */
	uint64_t rounds_partial; /* rounds that left a peer out */
	uint64_t rounds_skipped; /* not run: sends of earlier ones in flight */
	uint64_t messages_late; /* came after their round: discarded */
	uint64_t easgd_dropped; /* S-EASGD deltas sent that never arrived */
	unsigned round_timeout_ms; /* the last round's */
	uint64_t view_changes; /* times the members changed, shards re-divided */
	int members; /* ranks in the rounds now, this one included */
	uint64_t joins; /* restarted (or late) peers let in by a barrier */
	uint64_t reseeds; /* times this rank reseeded from a peer (0 or 1) */
	uint64_t iterations; /* as reported by the trainers */
};

/* ss_sync_get_stats() - a consistent snapshot; callable while running. */
void ss_sync_get_stats(struct ss_sync *sync, struct ss_sync_stats *stats);

/*
 * ss_sync_gap_waits() - the trainers' waits for a round past
 * @opts->max_gap: how many, and their seconds, summed over the trainers
 * (kept out of struct ss_sync_stats, which is fixed for a SOVERSION).
 * Callable while running.
 */
void ss_sync_gap_waits(struct ss_sync *sync, uint64_t *waits, double *seconds);

/*
 * ss_sync_peer_left_out() - rounds @peer was left out of (0 for ourselves
 * or a bad rank).  Callable while running.
 */
uint64_t ss_sync_peer_left_out(struct ss_sync *sync, int peer);

/* ss_sync_print_stats() - one line per figure, for the end of a run. */
void ss_sync_print_stats(struct ss_sync *sync, FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_SYNC_H */
