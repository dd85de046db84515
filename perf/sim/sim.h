// SPDX-License-Identifier: BSD-2-Clause
/*
 * ss-sim: ShadowSync's jobs simulated on SimGrid, to node counts this
 * machine cannot run.  A node is T trainer actors and one shadow actor on
 * one host; trainers compute for a calibrated step time, the shadow sends
 * the messages the real algorithm sends (src/sync/ma.c, easgd.c,
 * gossip.c), and SimGrid's network model times them on the platform.
 *
 * sim.c reads the options and prints the figures, platform.c writes the
 * platform, node.c runs the trainers and the shadow, rounds.c holds each
 * algorithm's messages.
 */
#ifndef SS_SIM_H
#define SS_SIM_H

#include <stdbool.h>
#include <stdint.h>

#include <simgrid/barrier.h>
#include <simgrid/forward.h>

enum sim_algo { SIM_MA, SIM_BMUF, SIM_EASGD, SIM_GOSSIP, SIM_HMA, SIM_NONE };

/* What one node's shadow (or foreground round) sends, by kind. */
enum sim_msg_type {
	SIM_PART, /* S-MA: a snapshot shard to its owner */
	SIM_AVG, /* S-MA: the owner's average to every rank */
	SIM_COL_PART, /* hierarchical: a piece to its column owner */
	SIM_COL_AVG, /* hierarchical: the piece's average back */
	SIM_DELTA, /* S-EASGD: the elastic delta to the owner */
	SIM_READ_REPLY, /* a READ's data (S-EASGD's center, gossip) */
	SIM_READ_REQ, /* a READ request, to the peer's NIC */
	SIM_ROWS, /* sharded tables: rows READ for a trainer's next batch */
	SIM_GRADS, /* sharded tables: row gradients to their owner's log */
	SIM_MSG_TYPES
};

struct sim_msg {
	int type, from;
	uint32_t round;
	double bytes;
	double ready_at; /* shm: when its receiver is scheduled to see it */
	sg_mailbox_t reply_to; /* a READ's: where the data goes (NULL: inbox) */
};

/* The platform a job runs on: its links and how hosts share them. */
struct sim_platform {
	const char *name; /* hdr, ndr, roce or shm */
	double link_bps; /* bytes/s of a node's link */
	double link_lat_s; /* one link's latency */
	bool shared_host; /* shm: every rank on one host, copies by CPU */
};

struct sim_cfg {
	struct sim_platform plat;
	int nodes, threads, cores; /* cores: a host's (shm: the machine's) */
	enum sim_algo algo;
	bool foreground;
	int sync_every; /* foreground: a round every K steps a trainer */
	int group; /* hierarchical S-MA: ranks a group */
	double n_floats; /* the dense part that is averaged */
	int batch; /* examples a step */
	double step_s; /* one trainer step, calibrated for this T */
	double step_sigma; /* log-normal spread of step times */
	double slow_frac; /* fraction of nodes that are slow */
	double slow_factor; /* their steps take this many times longer */
	int lose_node; /* a node powered off mid-run (-1: none) */
	double lose_at_s;
	double detect_s; /* time for survivors to mark a dead peer failed */
	double round_timeout_s;
	double max_rounds_per_s; /* the shadow's cap, as train's (0: none) */
	double duration_s; /* simulated seconds of training measured */
	int end_rounds; /* or until rank 0 has done this many rounds */
	int min_steps; /* ... and the trainers this many steps */
	double copy_bps; /* memory kernels: bytes/s the arrays move */
	double kernel_bps;
	double msg_cpu_s; /* CPU time to post and complete one message */
	double interference; /* trainer slowdown while shadow kernels run */
	double sched_slice_s; /* shm: the scheduler's time slice (see node.c) */
	bool tables_sharded; /* trainers READ rows and WRITE gradients */
	int emb; /* a row's floats (the shape's embedding size) */
	unsigned seed;
	bool verbose;
};

/* Data messages a sender has in flight (node.c, sim_put). */
#define SIM_WINDOW 4
struct sim_window {
	sg_comm_t comms[SIM_WINDOW];
	int next;
};

struct sim_node {
	int rank;
	sg_host_t host;
	sg_mailbox_t inbox, nic, log; /* log: sharded tables' gradients */
	struct sim_window sends, nic_sends; /* the shadow's, the NIC's */
	bool slow, lost;
	int kernels_running; /* shadow kernels now, for the interference */
	double steps; /* trainer steps done within the measured time */
	double bytes_measured; /* written within it */
	uint64_t rounds; /* rounds applied within the measured time */
	uint64_t bytes_sent, msgs_sent; /* writes, and READs answered */
	double table_bytes; /* sharded tables' rows and gradients sent */
	uint64_t started; /* rounds begun, measured or not */
	uint64_t left_out; /* peers left out of a round at its deadline */
	uint32_t round;
	uint64_t rng;
	sg_bar_t barrier; /* foreground: the node's trainers */
	int fg_arrived; /* trainers at the barrier so far */
	bool stop;
	/* messages that came for a later round than the one waited for */
	struct sim_early {
		uint32_t round;
		int count;
	} early[SIM_MSG_TYPES][4];
	int gossip_step;
};

#define SIM_HIST 1000

struct sim {
	struct sim_cfg cfg;
	struct sim_node *nodes;
	double round_hist[SIM_HIST]; /* round latencies, log-spaced */
	uint64_t round_count;
};

extern struct sim sim;

/* platform.c: writes the platform of @cfg to @path. */
int sim_write_platform(const struct sim_cfg *cfg, const char *path);
int sim_platform_by_name(const char *name, struct sim_platform *out);

/* node.c */
void sim_start_nodes(void);
bool sim_peer_failed(int peer);
double sim_now(void);
void sim_cpu(struct sim_node *nd, double seconds, bool kernel);
void sim_send(struct sim_node *nd, int peer, int type, double bytes);
void sim_read(struct sim_node *nd, int peer, double bytes);
int sim_await(struct sim_node *nd, int type, int want, double deadline);
void sim_record_round(double seconds);
void sim_round_done(struct sim_node *nd, double t0);

/* rounds.c: one round of the configured algorithm on node @nd. */
void sim_round(struct sim_node *nd);

#endif
