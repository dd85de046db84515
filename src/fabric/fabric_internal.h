/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the fabric layer share; not part of the public API. */
#ifndef SS_FABRIC_INTERNAL_H
#define SS_FABRIC_INTERNAL_H

#include <assert.h>
#include <stddef.h>

#include "shadowsync/fabric.h"

#define SS_DEFAULT_TIMEOUT_MS 30000u

/*
 * A partial connect gives up on the peers still missing this long after
 * it began (or at the timeout, if shorter), once one peer is up: more
 * than the longest backoff of a running peer's redials (SS_RETRY_MAX_MS,
 * 5 s: a higher rank connects to us at its next retry) and a connection's
 * round trips; one given up on is retried in the background anyway.
 * With none up it waits the whole timeout.
 */
#define SS_PARTIAL_WAIT_MS 7000u

/* ss__partial_wait_ms() - how long a partial connect waits for all. */
static inline unsigned ss__partial_wait_ms(unsigned timeout_ms)
{
	return timeout_ms < SS_PARTIAL_WAIT_MS ? timeout_ms :
						 SS_PARTIAL_WAIT_MS;
}

struct ss_region {
	struct ss_fabric *fabric;
	int index;
	void *ptr;
	size_t len;
	unsigned access;
	void *backend; /* verbs: struct ibv_mr *; shm: unused */
};

/* A peer's region as its handshake described it. */
struct ss__remote_region {
	uint64_t addr;
	uint64_t len;
	uint32_t rkey;
	uint32_t access;
};

struct ss__peer {
	bool connected;
	bool failed; /* reported once, then every operation is refused */
	uint32_t epoch; /* connections so far: 1 after connect, +1 per return */
	uint64_t retry_ns; /* failed: when to try reconnecting next */
	uint32_t retry_ms; /* failed: the backoff, 500 ms doubling to 5 s */
	char addr[128];
	int n_regions;
	struct ss__remote_region regions[SS_FABRIC_MAX_REGIONS];
	void *backend;
};

/* One posted operation, as the backends see it. */
struct ss__op {
	enum ss_op op;
	int peer;
	struct ss_region *local;
	size_t local_off;
	int remote_index;
	size_t remote_off;
	size_t len;
	uint32_t imm;
	uint64_t wr_id;
	uint64_t add; /* SS_OP_FETCH_ADD */
	/* a READ list: these pieces instead of the one range above */
	const struct ss_fabric_piece *pieces;
	int n_pieces;
};

struct ss__fabric_ops {
	const char *name;
	int (*open)(struct ss_fabric *fabric);
	int (*alloc)(struct ss_fabric *fabric, struct ss_region *region);
	void (*free_region)(struct ss_fabric *fabric, struct ss_region *region);
	int (*connect)(struct ss_fabric *fabric);
	int (*post)(struct ss_fabric *fabric, const struct ss__op *op);
	/* Collect ready completions without waiting; returns how many. */
	int (*poll)(struct ss_fabric *fabric, struct ss_completion *out,
		    int max);
	/* The slow part of waiting: notice failed peers (events, liveness). */
	void (*progress)(struct ss_fabric *fabric);
	/* Fail @peer now: tear it down, complete what is in flight to it. */
	void (*fail_peer)(struct ss_fabric *fabric, int peer, const char *why);
	void (*close)(struct ss_fabric *fabric);
};

extern const struct ss__fabric_ops ss__shm_ops;
extern const struct ss__fabric_ops ss__verbs_ops;

/* ss__verbs_available() - whether some RDMA port is active here. */
bool ss__verbs_available(void);

struct ss_fabric {
	struct ss_fabric_options opts;
	char **addrs; /* owned copy of opts.addrs */
	const struct ss__fabric_ops *ops;
	struct ss_region regions[SS_FABRIC_MAX_REGIONS];
	int n_regions;
	bool connected;
	struct ss__peer *peers; /* world entries; peers[rank] unused */
	void *backend;
	/* Completions produced while not polling, returned by the next poll. */
	struct ss_completion *backlog;
	int backlog_head, backlog_count, backlog_cap;
	unsigned empty_polls; /* non-waiting polls that found nothing */
	uint32_t send_depth; /* ss_fabric_send_depth(); 0: no limit */
	unsigned post_wait_ms; /* ss_fabric_set_post_wait() */
	/* ss_fabric_set_placement(): regions' memory before its first touch */
	void (*place)(void *ctx, void *ptr, size_t len);
	void *place_ctx;
};

/* ss__backlog_push() - queue a completion for the next ss_fabric_poll(). */
int ss__backlog_push(struct ss_fabric *fabric, const struct ss_completion *c);

/*
 * ss__peer_fail() - mark @peer failed and log why, once.  Returns SS_EPEER
 * with the detail recorded.
 */
int ss__peer_fail(struct ss_fabric *fabric, int peer, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * ss__peer_left() - the same for a peer that closed its endpoint in
 * order (a rank that finished, or was stopped): said at info level, not
 * as a failure, since every rank's end closes it.  Returns SS_EPEER.
 */
int ss__peer_left(struct ss_fabric *fabric, int peer);

/*
 * ss__retry_due() - whether it is time to try reconnecting failed @peer;
 * when it is, the next attempt is scheduled after a backoff that doubles
 * from 500 ms to 5 s.  Cheap (one clock read): for the progress path.
 */
bool ss__retry_due(struct ss_fabric *fabric, int peer);

/*
 * ss__peer_back() - failed @peer has connected again (a new process of
 * that rank, handshake checked): operations to it resume, its epoch goes
 * up, and it is logged with its rank and address and @how.
 */
void ss__peer_back(struct ss_fabric *fabric, int peer, const char *how);

/* ss__self_regions() - our regions as peers[rank]'s, for fetch-adds. */
void ss__self_regions(struct ss_fabric *fabric);

/* ---- shm object names (shm_names.c) ---------------------------------- */

enum { SS_SHM_CLAIM = -2, SS_SHM_CTL = -1 }; /* regions count from 0 */

/* ss__shm_name() - the POSIX shm name of @object of the rank at @addr. */
void ss__shm_name(const char *addr, int object, char *name, size_t size);

/*
 * ss__shm_claim() - take the address @addr for this process (an flock on
 * its claim object, which the kernel drops when the process ends);
 * -EADDRINUSE naming the live owner.  The lock's descriptor in @claim_fd.
 */
int ss__shm_claim(const char *addr, int rank, int *claim_fd);

/* ss__shm_unclaim() - remove the claim's name, then release it. */
void ss__shm_unclaim(const char *addr, int claim_fd);

/* ss__shm_remember()/_forget() - names ss_fabric_remove_names() removes. */
void ss__shm_remember(const char *name);
void ss__shm_forget(const char *name);

/*
 * ss__shm_ctl_owner() - the last owner's pid and job key from the control
 * object @name, when there is one; false when @check_alive and that owner
 * still runs.
 */
bool ss__shm_ctl_owner(const char *name, int32_t *pid, uint64_t *job_key,
		       bool check_alive);

/* ss__page_round() - @len rounded up to the page size (at least a page). */
size_t ss__page_round(size_t len);

/*
 * ss__addr_host() - the host of "host:port" or "[v6]:port" (brackets
 * taken off) into @host: 0, -EINVAL without a ':' or -ENAMETOOLONG.
 */
int ss__addr_host(const char *addr, char *host, size_t size);

/*
 * The handshake: a fixed-layout, big-endian message that fits in the 56
 * bytes of private data that an InfiniBand CM connect request carries.
 * Region descriptors do not fit there, so the hello carries the address
 * and key of a small remote-readable descriptor table that the peer reads
 * once connected.
 */
#define SS_HELLO_MAGIC 0x5353594eu /* "SSYN" */
/*
 * 2: the shm control block after the hello holds its owner's start time;
 * 3: the sync layer's barriers have a second half (SS_MSG_BARRIER_DONE);
 * 4: its round messages count for their own round only, with flow control
 *    and SKIP messages;
 * 5: rank and world 32 bits wide (jobs past 65535 ranks).  The version
 *    keeps its place (after magic and key) in every version, so that a
 *    peer of another one is told so, whatever its layout.
 */
#define SS_HELLO_VERSION 5

struct ss__hello {
	uint64_t job_key;
	uint64_t layout_hash;
	uint64_t table_addr; /* verbs: the descriptor table */
	uint32_t magic;
	uint32_t table_rkey;
	uint16_t version; /* offset 32 in every version */
	uint16_t n_regions;
	uint32_t rank;
	uint32_t world;
	uint8_t mtu; /* verbs: enum ibv_mtu of the active port */
	uint8_t rd_atom; /* verbs: max outstanding RDMA READs (responder) */
	uint8_t reserved[2];
};
static_assert(sizeof(struct ss__hello) == 48, "hello is 48 bytes on the wire");
static_assert(offsetof(struct ss__hello, version) == 32,
	      "the version where every version has it");

/* Region descriptor table, as read by peers. */
struct ss__table_entry {
	uint64_t addr;
	uint64_t len;
	uint32_t rkey;
	uint32_t access;
};
static_assert(sizeof(struct ss__table_entry) == 24, "24-byte entries");

struct ss__table {
	uint32_t magic;
	uint32_t n_regions;
	struct ss__table_entry entries[SS_FABRIC_MAX_REGIONS];
};
static_assert(sizeof(struct ss__table) == 8 + 24 * SS_FABRIC_MAX_REGIONS,
	      "table layout");

/* ss__hello_make() - this endpoint's hello in host byte order. */
void ss__hello_make(const struct ss_fabric *fabric, struct ss__hello *hello);

/* ss__hello_to_wire() / ss__hello_from_wire() - byte order both ways. */
void ss__hello_to_wire(const struct ss__hello *host, struct ss__hello *wire);
void ss__hello_from_wire(const struct ss__hello *wire, struct ss__hello *host);

/*
 * ss__hello_check() - compare a peer's hello with ours.  @expect_rank is
 * the rank the peer should have, or -1 for any other than ours.  Returns 0,
 * or SS_EHANDSHAKE with @why saying what differed, ours against theirs.
 */
int ss__hello_check(const struct ss__hello *mine, const struct ss__hello *peer,
		    int expect_rank, char *why, size_t size);

/*
 * ss__table_make() / ss__table_read() - the descriptor table, big-endian;
 * a peer's has as many regions as ours (its hello said so).
 */
void ss__table_make(const struct ss_fabric *fabric, const uint32_t *rkeys,
		    struct ss__table *wire);
int ss__table_read(const struct ss__table *wire, int n_regions,
		   struct ss__peer *peer);

#endif /* SS_FABRIC_INTERNAL_H */
