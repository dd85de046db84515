/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The table layer's insides: the shard, the rings between the clients and
 * the proxy thread, the outbound logs and their credits.
 */
#ifndef SS_TABLE_INTERNAL_H
#define SS_TABLE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "shadowsync/table.h"

/*
 * A gradient in a log: the row's place in the owner's shard, then its
 * width floats.  Entries are 8-byte aligned.
 */
struct ss__table_entry {
	uint32_t slot;
	uint32_t pad;
	float g[];
};

/* A lookup slot's life: the client posts, the proxy reads, it is done. */
enum {
	SS__LOOKUP_FREE,
	SS__LOOKUP_POSTED, /* ids in; the proxy has yet to post the READs */
	SS__LOOKUP_IN_FLIGHT, /* READs posted, @pending still to complete */
	SS__LOOKUP_DONE,
};

struct ss__table_lookup {
	_Atomic int state;
	int n;
	int pending; /* the proxy's: READs not yet completed */
	/*
	 * Where id i's row is: where[i] >= 0, at that place in the staging
	 * area; below, in our shard at slot -1 - where[i].  A row a batch
	 * uses several times is READ once: the distinct remote rows, their
	 * owner and slot, are fetch_owner[k], fetch_slot[k] into place k,
	 * found through an open-addressing table of their ids.
	 */
	int64_t *where; /* max_rows */
	int n_fetch;
	int32_t *fetch_owner;
	uint32_t *fetch_slot;
	uint64_t *fetch_id;
	int32_t *seen; /* 2 x max_rows rounded up to a power of two; -1 empty */
	size_t seen_mask;
	/*
	 * The fetches sorted by owner: owner o's are [by_owner[o],
	 * by_owner[o + 1]).  The proxy posts them owner by owner, as far as
	 * each owner's room in flight allows (cursor[o]: the next), and comes
	 * back for the rest: it never blocks on one owner's full queue.
	 */
	int32_t *by_owner, *cursor; /* world + 1, world */
	int remaining; /* the proxy's: fetches not yet posted */
	int32_t *tmp_owner; /* max_rows: scratch for the sort */
	uint32_t *tmp_slot;
	uint64_t *tmp_id;
	int32_t *renumber;
	uint8_t *failed; /* per fetch: its READ failed (set by the proxy) */
	float *stage; /* max_rows x width, in the local region */
	/*
	 * A wait that timed out serves its rows from here (as the cache
	 * last had them, or zeros), malloc'ed then: the stage still holds
	 * the slot's previous rows where READs have not landed, and late
	 * ones may land there while the trainer reads.
	 */
	float *fallback;
};

/* Work requests the proxy keeps in flight to one peer, at most: below
 * the fabric's send depth (256 over verbs), so that posting never waits
 * (tb->max_flight: 3/4 of a smaller one).  A READ list of n rows counts n. */
#define SS__TABLE_MAX_FLIGHT 192

/* What a client hands the proxy: lookups, and a ring of gradients. */
struct ss__table_client {
	struct ss__table_lookup *lookup; /* depth of them */
	/* single producer (the client), single consumer (the proxy) */
	uint64_t *push_ids;
	float *push_grads;
	uint32_t push_cap; /* a power of two */
	_Atomic uint64_t push_tail; /* written by the client */
	_Atomic uint64_t push_head; /* written by the proxy */
	/* rows as last fetched, by id hashed (cache_rows of them) */
	uint64_t *cache_id; /* UINT64_MAX: empty */
	float *cache;
};

/* The proxy's side of the log at one owner. */
struct ss__table_outbound {
	uint64_t tail; /* entries placed in our copy of the log */
	uint64_t posted; /* entries whose WRITE is posted */
	uint64_t head; /* entries the owner applied, as last read */
	bool head_reading; /* a READ of its head is in flight */
	uint64_t full_since_ns; /* 0: not full */
	bool dropping; /* full past the timeout, and said so */
	uint64_t refreshed_ns; /* when its head was last asked for */
};

struct ss__table_stats {
	_Atomic uint64_t lookups, rows_local, rows_remote, rows_fetched;
	_Atomic uint64_t rows_stale, rows_cached;
	_Atomic uint64_t lookup_wait_ns;
	_Atomic uint64_t pushed_local, pushed, dropped, applied;
	_Atomic uint64_t credit_waits;
};

struct ss_table {
	struct ss_table_options opts;
	int rank, world;
	struct ss_fabric *fabric;
	struct ss_region *r_rows, *r_log, *r_head, *r_local;

	/*
	 * Per table: its rows, the id of its first, its first slot in the
	 * shard (ss_table_rows_per_owner() of its rows a table, in turn).
	 * opts.table_rows points at t_rows.
	 */
	uint32_t *t_rows, *t_slot;
	uint64_t *t_first;
	uint64_t all_rows; /* ids run from 0 to all_rows - 1 */
	uint32_t slots; /* rows in the shard */
	uint64_t *mult, *add; /* per table: the row permutation */
	float *rows; /* slots x width */
	float *acc; /* the same, Adagrad's accumulators; NULL for SGD */
	size_t shard_floats;

	/* logs: one per sender, log_entries entries of entry_bytes */
	size_t entry_bytes;
	uint8_t *log_in; /* in r_log: world logs, peers write */
	_Atomic uint64_t *head_out; /* in r_head: applied from each sender */
	uint64_t *consumed; /* the applier's: entries applied per sender */
	uint64_t *queued; /* entries announced per sender (applied or not) */
	uint8_t *log_out; /* in r_local: our copy of our log at each owner */
	uint64_t *heads_in; /* in r_local: heads READ from the owners */
	struct ss__table_outbound *out;

	struct ss__table_client *client;
	float *stage; /* in r_local */

	pthread_t proxy;
	bool proxy_started;
	/*
	 * Per peer: operations in flight, and when it last answered (or the
	 * first of them went out): a peer that leaves them unanswered past
	 * the silence bound is failed (a dead host answers nothing).
	 */
	int *flight, max_flight;
	uint64_t *answered_ns;
	/* an idle proxy sleeps here; clients with work wake it */
	pthread_mutex_t idle_lock;
	pthread_cond_t idle_cond;
	_Atomic bool sleeping;
	bool idle_ready; /* lock and condition initialized */
	bool place_warned;
	bool bad_slot_warned; /* the applier's, once */
	_Atomic bool stop;
	_Atomic bool paused; /* the applier */
	_Atomic uint64_t flushing; /* flush requests in progress */
	/* barriers: ours asked for (and sent by the proxy), each peer's */
	_Atomic uint32_t barrier_wanted;
	_Atomic uint32_t barrier_sent;
	_Atomic uint32_t *barrier_seen;
	/*
	 * A hello to each peer that (re)connects: our barriers so far, so
	 * that a restarted rank takes up the job's count (proxy's); and
	 * whether each peer's hello has come.
	 */
	bool *hello_due;
	_Atomic bool *hello_seen;
	/* each peer's ss_fabric_peer_ok(), as the proxy last saw it: for
	 * the threads that flush and wait in barriers, which may not call
	 * into the endpoint the proxy drives */
	_Atomic bool *peer_live;
	struct ss__table_stats st;
};

/* wr_id of the proxy's operations: kind, then who it is for. */
enum { SS__WR_LOOKUP = 1, SS__WR_HEAD, SS__WR_LOG, SS__WR_BARRIER };
/* An immediate with this bit is a barrier (its number), else a count;
 * with the hello bit too, the barriers its sender has passed so far. */
#define SS__IMM_BARRIER 0x80000000u
#define SS__IMM_HELLO 0x40000000u
#define SS__WR(kind, a, b) \
	((uint64_t)(kind) << 60 | (uint64_t)(a) << 32 | (uint64_t)(b))
#define SS__WR_KIND(id) ((int)((id) >> 60))
#define SS__WR_A(id) ((uint32_t)(((id) >> 32) & 0x0fffffffu))
#define SS__WR_B(id) ((uint32_t)(id))
/* A lookup's READ list, in SS__WR_B: fetches k .. k + n - 1 (n <= 64). */
#define SS__LIST(k, n) (((uint32_t)(n)-1u) << 24 | (uint32_t)(k))
#define SS__LIST_FIRST(b) ((b)&0xffffffu)
#define SS__LIST_LEN(b) ((int)((b) >> 24) + 1)

/* The work requests a completion of the proxy's stands for. */
static inline int ss__table_wrs(uint64_t wr_id)
{
	return SS__WR_KIND(wr_id) == SS__WR_LOOKUP ?
		       SS__LIST_LEN(SS__WR_B(wr_id)) :
		       1;
}

static inline void ss__table_count(_Atomic uint64_t *c, uint64_t n)
{
	atomic_fetch_add_explicit(c, n, memory_order_relaxed);
}

/* Where row (@t, @row) lives: its owner, and its index in that shard. */
void ss__table_place(const struct ss_table *tb, int t, uint32_t row, int *owner,
		     uint32_t *slot);

/* The same for the row of global id @id (below all_rows). */
void ss__table_place_id(const struct ss_table *tb, uint64_t id, int *owner,
			uint32_t *slot);

/* The row at index @slot of our shard, and its accumulators. */
static inline float *ss__table_slot_row(const struct ss_table *tb,
					uint32_t slot)
{
	return tb->rows + (size_t)slot * (size_t)tb->opts.width;
}

/* The entry at position @pos of the log of sender (or owner) @p. */
static inline struct ss__table_entry *
ss__table_entry(const struct ss_table *tb, uint8_t *logs, int p, uint64_t pos)
{
	size_t i = (size_t)p * tb->opts.log_entries +
		   (size_t)(pos % tb->opts.log_entries);

	return (struct ss__table_entry *)(logs + i * tb->entry_bytes);
}

/* The proxy posted @n work requests to @p: in flight until they complete. */
static inline void ss__table_posted(struct ss_table *tb, int p, int n)
{
	if (tb->flight[p] == 0)
		tb->answered_ns[p] = ss_now_ns();
	tb->flight[p] += n;
}

/*
 * How long a peer may leave operations unanswered before it is failed:
 * twice the timeout, at least 10 s (a live peer's NIC answers whatever
 * its process does; soft-RoCE does not fail them by itself).
 */
static inline uint64_t ss__table_silence_ns(const struct ss_table *tb)
{
	uint64_t ms = 2ull * tb->opts.timeout_ms;

	return (ms > 10000 ? ms : 10000) * 1000000ull;
}

/* A client posted work: wake the proxy if it sleeps. */
void ss__table_wake(struct ss_table *tb);

/* One gradient step of the row at @slot of our shard (Hogwild). */
void ss__table_apply(struct ss_table *tb, uint32_t slot, const float *g);

/* The proxy thread's parts (proxy.c, lookup.c, push.c, apply.c). */
void *ss__table_proxy(void *arg);
bool ss__table_post_lookups(struct ss_table *tb);
void ss__table_lookup_done(struct ss_table *tb, const struct ss_completion *c);
bool ss__table_post_pushes(struct ss_table *tb);
void ss__table_push_done(struct ss_table *tb, const struct ss_completion *c);
void ss__table_head_done(struct ss_table *tb, const struct ss_completion *c);
bool ss__table_apply_logs(struct ss_table *tb);
void ss__table_log_arrived(struct ss_table *tb, const struct ss_completion *c);
/* Whether everything pushed so far has been applied or dropped. */
bool ss__table_pushes_settled(struct ss_table *tb);

#endif /* SS_TABLE_INTERNAL_H */
