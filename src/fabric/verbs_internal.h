/* SPDX-License-Identifier: BSD-2-Clause */
/* What verbs.c (data path) and verbs_cm.c (connections) share. */
#ifndef SS_VERBS_INTERNAL_H
#define SS_VERBS_INTERNAL_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "fabric_internal.h"

#define SS_VERBS_SQ_DEPTH 256 /* send WRs in flight per peer */
#define SS_VERBS_RQ_DEPTH 128 /* receives a peer, for immediates, ... */
#define SS_VERBS_SRQ_MAX 8192 /* ... on one shared receive queue, at most */
#define SS_VERBS_INLINE 64 /* inline data asked for; the QP may give less */
#define SS_VERBS_ACK_TIMEOUT 17 /* 4.096 us x 2^17 = 0.54 s a try */
#define SS_VERBS_RETRY_COUNT 6 /* retries after the first try */

/* wr_id layout: tag in the top bits, then peer, then sequence number. */
#define SS_WR_RECV (1ull << 63) /* a receive, for an immediate */
#define SS_WR_PART (1ull << 62) /* a signaled WR inside a long operation */
#define SS_WR_TABLE (1ull << 61) /* reading a peer's table, or "ready" */
#define SS_WR_PEER(id) ((int)(((id) >> 32) & 0x1fffffff))
#define SS_WR_SEQ(id) ((uint32_t)(id))

/* One posted user operation, in posting order per peer. */
struct ss_verbs_slot {
	uint64_t wr_id;
	uint16_t n_wrs;
	uint8_t op;
};

enum ss_verbs_state {
	SS_VP_IDLE, /* not yet tried, or waiting to retry */
	SS_VP_ADDR, /* resolving the address */
	SS_VP_ROUTE, /* resolving the route */
	SS_VP_CONNECTING, /* request sent, or accepted: waiting */
	SS_VP_UP, /* connected */
	SS_VP_DOWN, /* disconnected */
};

struct ss_verbs_peer {
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	enum ss_verbs_state state;
	uint64_t retry_ns; /* when an IDLE active side tries again */
	uint64_t attempt_ns; /* the active side's attempt: began, or last moved */
	/*
	 * Its address, looked up at the first attempt only: a reconnection
	 * runs in ss_fabric_poll(), where a name lookup (seconds a try with
	 * a slow DNS server) has no bound of ours.
	 */
	struct sockaddr_storage addr;
	bool resolved;
	struct ss__hello hello; /* theirs, host byte order */
	uint8_t path_mtu; /* negotiated */
	uint8_t rd_atom; /* negotiated outstanding READs */
	uint32_t sq_used; /* send WRs posted and not yet completed */
	uint32_t next_seq; /* sequence number of the next operation */
	uint32_t head_seq; /* the oldest operation not yet completed */
	struct ss_verbs_slot slots[SS_VERBS_SQ_DEPTH];
	bool table_read; /* its descriptor table has arrived */
	bool ready_sent; /* our "connected" immediate has completed */
	bool ready_seen; /* its "connected" immediate has arrived */
	bool disconnect_sent;
	bool given_up; /* by a partial connect: failed, skipped while connecting */
	/* after the first connect: a peer coming back, as ss_finish_connect */
	uint8_t rejoin; /* enum ss_verbs_rejoin */
	uint64_t rejoin_deadline;
};

/* Where a peer coming back is in its handshake (done in the background). */
enum ss_verbs_rejoin {
	SS_RJ_NONE,
	SS_RJ_TABLE, /* connected; its region table being read */
	SS_RJ_READY, /* table read; "ready" sent, waiting for its own */
};

struct ss_verbs {
	struct rdma_event_channel *channel;
	struct rdma_cm_id *listen;
	struct sockaddr_storage local_addr;
	struct ibv_context *ctx; /* the device of our address */
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_device_attr dev_attr;
	struct ibv_port_attr port_attr;
	uint8_t port;
	bool port_down; /* at the last look (port_seen_ns) */
	uint64_t port_seen_ns;
	char dev_name[64];
	int env_gid; /* SS_GID_INDEX, checked at open; -1 when not set */
	uint8_t ack_timeout; /* SS_ACK_TIMEOUT, or SS_VERBS_ACK_TIMEOUT */
	uint32_t max_inline; /* what the QPs really give */
	size_t max_message; /* split operations above this */
	uint8_t rd_atom; /* ours: min of responder and initiator limits */
	size_t registered; /* bytes registered, against RLIMIT_MEMLOCK */
	struct ss__table *table; /* ours, remote-READ */
	struct ibv_mr *table_mr;
	struct ss__table *peer_tables; /* where peers' tables are read to */
	struct ibv_mr *peer_tables_mr;
	struct ss_verbs_peer *peers;
	/* the loopback's responder; its sender is peers[rank].qp */
	struct ibv_qp *loop_qp;
	/*
	 * Every peer's QP receives from one shared receive queue: its depth
	 * stops growing past 64 peers.  A receive's completion names its QP
	 * only by number: @qpns maps numbers to peers (verbs_srq.c).
	 */
	struct ibv_srq *srq;
	uint32_t srq_depth;
	/*
	 * Send WRs in flight a peer (SS_VERBS_SQ_DEPTH, fewer where the
	 * device's CQ cannot hold that many for every peer: every posted WR
	 * may complete, flushed, into the one CQ), and every how many a
	 * long operation's WRs are signaled (at most sq_limit).
	 */
	uint32_t sq_limit, signal_every;
	struct ss_verbs_qpn *qpns;
	uint32_t qpn_cap, qpn_used;
	/* while connecting: the first fatal error, the last peer refused */
	int cm_fatal;
	char cm_refusal[256];
};

/* A QP number and its peer, in verbs_srq.c's open-addressed map. */
struct ss_verbs_qpn {
	uint32_t qpn;
	int32_t peer; /* -1: empty */
};

/*
 * ss__verbs_srq_depth() - receives on the shared queue of a @world-rank
 * job: SS_VERBS_RQ_DEPTH a peer (as many as each peer's own queue had
 * before), at most SS_VERBS_SRQ_MAX and the device's @max_wr.
 */
uint32_t ss__verbs_srq_depth(int world, uint32_t max_wr);

/*
 * ss__verbs_sq_limit() - send WRs in flight to each of @world QPs (the
 * peers' and the loopback's) such that their completions and the shared
 * queue's @srq_depth receives fit a CQ of @max_cqe entries:
 * SS_VERBS_SQ_DEPTH where they do, fewer where not; 0 where not even one
 * a QP does.
 */
uint32_t ss__verbs_sq_limit(int world, int max_cqe, uint32_t srq_depth);

/* ss__verbs_srq_open() - the shared receive queue, full, and the map. */
int ss__verbs_srq_open(struct ss_fabric *f);

/* ss__verbs_srq_close() - destroy it (after every QP on it). */
void ss__verbs_srq_close(struct ss_verbs *v);

/* ss__verbs_srq_fill() - after a QP is destroyed: the queue full again. */
void ss__verbs_srq_fill(struct ss_verbs *v);

/* ss__verbs_srq_repost() - one receive again, for one consumed. */
int ss__verbs_srq_repost(struct ss_verbs *v);

/* ss__verbs_qpn_add() - @qpn is peer @p's QP from now on. */
int ss__verbs_qpn_add(struct ss_verbs *v, uint32_t qpn, int p);

/* ss__verbs_qpn_peer() - the peer whose QP is number @qpn now, or -1. */
int ss__verbs_qpn_peer(const struct ss_verbs *v, uint32_t qpn);

/* "device mlx5_0 port 1" and the errno text, for messages. */
const char *ss__verbs_where(const struct ss_verbs *v);

/* ss__verbs_create_qp() - an RC QP on our PD, CQ and shared receives. */
int ss__verbs_create_qp(struct ss_fabric *f, int p, struct rdma_cm_id *id);

/*
 * ss__verbs_qp_ready() - move a peer's QP to RTR and RTS with the path MTU
 * and outstanding READs agreed in the hellos.
 */
int ss__verbs_qp_ready(struct ss_fabric *f, int p);

/* ss__verbs_drain() - completions from the CQ; internal ones handled. */
int ss__verbs_drain(struct ss_fabric *f, struct ss_completion *out, int max);

/* ss__verbs_peer_down() - mark @p failed and flush its queue pair. */
void ss__verbs_peer_down(struct ss_fabric *f, int p, const char *why);

/* ss__verbs_resolve() - "host:port" or "[v6]:port" to an address. */
int ss__verbs_resolve(const char *text, struct sockaddr_storage *out);

/*
 * ss__verbs_loopback() - two QPs of ours connected to each other, the
 * sending one as peers[rank]'s, for fetch-adds to our own memory.
 */
int ss__verbs_loopback(struct ss_fabric *f);

/* ss__verbs_connect() - connect to every peer (the backend's connect). */
int ss__verbs_connect(struct ss_fabric *f);

/* ss__verbs_cm_events() - handle connection events; non-blocking. */
void ss__verbs_cm_events(struct ss_fabric *f);

/*
 * ss__verbs_reconnect() - after connecting, bring failed peers back: the
 * higher rank of a pair connects again (on the fabric's backoff), the
 * lower one accepts, and both read the new table and exchange "ready" as
 * at the first connect, without blocking.  For the progress path.
 */
void ss__verbs_reconnect(struct ss_fabric *f);

#endif /* SS_VERBS_INTERNAL_H */
