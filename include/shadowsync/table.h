/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ShadowSync table layer: rows of fixed width, sharded over the ranks.
 *
 * One logical set of @tables tables of @rows rows of @width floats each.
 * Every row has one owner rank, which keeps it (and its Adagrad
 * accumulators) in its own registered memory.  The other ranks READ the
 * rows they need, one-sided, and send the rows' gradients to the owner by
 * one-sided WRITEs into a log of their own in the owner's memory; the
 * owner's applier applies them.  The layer knows nothing of what the rows
 * mean.
 *
 * Threads: ss_table_open() starts one proxy thread per rank, which posts
 * every RDMA operation of the rank's clients (batched, one queue pair per
 * peer, no lock on the data path: each client talks to it through rings
 * of its own), and applies the gradients that come in.  Client @c's calls
 * (lookup, wait, push) come from one thread at a time; different clients
 * may call at the same time.  So may any thread call ss_table_flush(),
 * ss_table_stats(), ss_table_pause_applier(), ss_table_owner() and
 * ss_table_row(); ss_table_barrier() one thread at a time;
 * ss_table_open() and ss_table_close() the thread that owns the table,
 * with no other call overlapping the close.  The functions that take no
 * table may run in any thread at once.
 *
 * A lookup is posted (ss_table_lookup) and waited for later
 * (ss_table_wait): a trainer posts the rows of its next batches while it
 * computes this one, and waits for nothing when the network keeps up.
 * Rows of the own shard are read in place; others land in a staging area
 * of the client's, a slot per lookup in flight (@depth).
 *
 * The table layer listens on its own endpoint: @addrs are its own
 * addresses, not the sync layer's (ss_table_addrs() derives them).
 */
#ifndef SHADOWSYNC_TABLE_H
#define SHADOWSYNC_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "shadowsync/base.h"
#include "shadowsync/fabric.h"
#include "shadowsync/topo.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ss_table; /* one rank's endpoint: its shard, its proxy thread */

enum ss_table_update {
	SS_TABLE_SGD, /* row -= lr * g */
	SS_TABLE_ADAGRAD, /* acc += g^2; row -= lr * g / (sqrt(acc) + eps) */
};

/* Fill with ss_table_options_init() first (base.h, "Option structs"). */
struct ss_table_options {
	size_t size; /* sizeof the caller's struct, set by the init */
	int tables; /* logical tables */
	uint32_t rows; /* rows in each (unless table_rows says) */
	int width; /* floats in a row */
	enum ss_table_update update;
	float lr, eps;
	uint64_t seed; /* rows start as ss_table_init_row() makes them */
	float init_bound; /* uniform in +-init_bound; 0: sqrt(1 / rows) */
	int clients; /* threads that look up and push */
	int max_rows; /* rows in one lookup or push, at most */
	int depth; /* lookups in flight per client (1 + prefetch) */
	uint32_t log_entries; /* gradient log per sender at each owner */
	/*
	 * Rows each client keeps of what it fetched last (direct-mapped,
	 * a power of two; 0: none): a row whose owner has failed is served
	 * from there, as last fetched, instead of zeros.
	 */
	uint32_t cache_rows;
	unsigned timeout_ms; /* a lookup, and credits for a push */
	/*
	 * Optional placement (NULL: none): every region bound to NUMA node
	 * @numa of @topo before it is registered, and the proxy thread (the
	 * applier) pinned to @proxy_slot, near the NIC as the plan has it.
	 */
	struct ss_topo *topo;
	int numa;
	const struct ss_plan_slot *proxy_slot;
	/*
	 * Optional (NULL: none): called with the shard at its first values
	 * before any peer can reach it, so that no gradient is applied to
	 * it and no row read until it returns (ss_table_shard() works in
	 * it): a rank that rejoins a running job loads its checkpoint here.
	 * A negative return fails the open.  The last fields: a caller
	 * built against a shadowsync.h without them passes a shorter
	 * struct, taken as none.
	 */
	int (*fill)(struct ss_table *table, void *arg);
	void *fill_arg;
	/*
	 * Optional (NULL: every table @rows rows): the rows of each of the
	 * @tables tables, copied at the open.  Ids then run on from table
	 * to table: table t's row r is the sum of the earlier tables' rows
	 * plus r.  Each table is permuted and spread over the owners on
	 * its own, its rows starting in +-sqrt(1 / its rows) unless
	 * init_bound says.
	 */
	const uint32_t *table_rows;
};

/*
 * ss_table_options_init() - one table of 1000 rows of 16, SGD at 0.1,
 * 1 client, 4096 rows a lookup, depth 2, logs of 16384 entries, a cache
 * of 65536 rows per client, 5 s.
 */
#define ss_table_options_init(opts) \
	ss_table_options_init_size((opts), sizeof(*(opts)))
void ss_table_options_init_size(struct ss_table_options *opts, size_t size);

/*
 * ss_table_init_row() - the starting values of row @row of table @table:
 * uniform in +-@bound from a hash of (@seed, @table, @row, i), so that
 * every placement of the rows starts from the same model.
 */
void ss_table_init_row(uint64_t seed, int table, uint32_t row, int width,
		       float bound, float *out);

/*
 * ss_table_addrs() - the table endpoint's address of each rank: the sync
 * address "host:port" with port + @world (launch gives rank r port P + r,
 * so the table ports P + N + r collide with none of the job's).  Writes
 * @world strings of up to SS_TABLE_ADDR_LEN bytes into @buf and points
 * @addrs at them.  Returns 0 or SS_EUSAGE naming the address without a
 * port or with a host longer than 255 characters, or one that is another
 * rank's address or table address as spelled (ranks of a host given
 * ports with gaps: 7800 and 7802 of two ranks).
 */
#define SS_TABLE_ADDR_LEN 272 /* a 255-character host, ':', a port */

int ss_table_addrs(const char *const *sync_addrs, int world,
		   char (*buf)[SS_TABLE_ADDR_LEN], const char **addrs);

/*
 * ss_table_open() - allocate this rank's shard and the logs and staging
 * areas, connect to every peer's table endpoint (@fabric_opts: rank,
 * world, addresses, transport, job key), start the proxy thread.  The
 * layout (tables, rows, width, log size) must be the same on every rank:
 * the handshake refuses a peer whose differs.  Returns 0, SS_EUSAGE for
 * bad options, -EINVAL for either struct of a size this library does not
 * know (base.h), or what ss_fabric_open() and ss_fabric_connect()
 * return.
 */
int ss_table_open(struct ss_table **table, const struct ss_table_options *opts,
		  const struct ss_fabric_options *fabric_opts);

/*
 * ss_table_close() - stop the proxy thread (pushes still queued are
 * flushed for at most the timeout; what is left then is lost with the
 * endpoint, uncounted: call ss_table_flush() first to know), disconnect,
 * release everything, clear the pointer.  NULL is fine.
 */
void ss_table_close(struct ss_table **table);

/* ss_table_owner() - the rank that owns row @row of table @t; -1 when
 * there is no such table or row. */
int ss_table_owner(const struct ss_table *table, int t, uint32_t row);

/*
 * ss_table_row() - this rank's copy of a row it owns (NULL when another
 * rank owns it): for checkpoints, and for reading the model in place.
 */
float *ss_table_row(struct ss_table *table, int t, uint32_t row);

/*
 * ss_table_shard() - this rank's rows, for each table in turn
 * ss_table_rows_per_owner() of its rows, of width floats, each table's in
 * slot order, and Adagrad's
 * accumulators laid out the same (*@acc NULL with SGD); returns their
 * floats.  For checkpoints: the slot of a row depends only on its place
 * in its table's permutation (see table.c), so a shard saved at N ranks
 * can be re-divided among M without the rows' ids.  Read or write them
 * only while nothing is pushed (before the first lookup, or after a
 * flush and a barrier).
 */
size_t ss_table_shard(struct ss_table *table, float **rows, float **acc);

/*
 * ss_table_registered_bytes() - the memory one rank of a job of @world
 * registers for tables of @opts (its shard, logs, heads and local
 * region, in whole pages); 0 for options ss_table_open() would refuse.
 * Any thread.
 */
size_t ss_table_registered_bytes(const struct ss_table_options *opts,
				 int world);

/*
 * ss_table_place_of() - row @row's place r' in table @t's permutation of
 * its @rows rows, which does not depend on the job's size: of a job of N
 * ranks, rank r' mod N owns it, at index r' div N of that table's part
 * of its shard (ss_table_shard()).  For programs that read shards.
 */
uint32_t ss_table_place_of(uint32_t rows, int t, uint32_t row);

/* ss_table_rows_per_owner() - ceil(@rows / @world). */
uint32_t ss_table_rows_per_owner(uint32_t rows, int world);

/*
 * ss_table_lookup() - post the lookup of @n rows (@ids[i] = table * rows +
 * row, or with table_rows the earlier tables' rows + row) into slot @slot (0 <= slot < depth) of client @client.  The slot
 * must be free: never posted, or waited for since.  Returns 0, or -EINVAL
 * for a bad client, slot, size or id.
 */
int ss_table_lookup(struct ss_table *table, int client, int slot,
		    const uint64_t *ids, int n);

/*
 * ss_table_wait() - wait for slot @slot's lookup and point @rows[i] at row
 * i: in place for the own shard, in the staging area for the others
 * (valid until the slot is posted again).  A row whose owner failed
 * holds its values as this client last fetched them (from the cache;
 * zeros when it has none), counted as stale; so does every fetched row
 * of a wait past the timeout (which of them were late is not known).
 * Returns 0, -EINVAL, or -ENOMEM for the rows of a late wait.
 */
int ss_table_wait(struct ss_table *table, int client, int slot,
		  const float **rows);

/*
 * ss_table_wait_into() - ss_table_wait(), then the rows copied into @out
 * (n x width floats, row i at i x width): for a caller that hands the rows
 * on as one array (the Python package's tensors).  Returns as
 * ss_table_wait().
 */
int ss_table_wait_into(struct ss_table *table, int client, int slot,
		       float *out);

/*
 * ss_table_push() - queue the gradients of @n distinct rows (@grads: n x
 * width, summed over the batch) for their owners.  Own rows are updated
 * here, at once; the others go to their owners' logs.  When client
 * @client's queue is full, waits for room at most the timeout, then drops
 * them (counted).  Returns 0, or -EINVAL.
 */
int ss_table_push(struct ss_table *table, int client, const uint64_t *ids,
		  const float *grads, int n);

/*
 * ss_table_flush() - wait until every gradient pushed so far by every
 * client has been applied by its owner (or dropped), at most @timeout_ms.
 * An owner that has failed is not waited for: what was sent to it and
 * not yet applied is lost with it, counted in pushed, not in dropped
 * (how much of it was applied is not known), until it comes back as a
 * new process, which counts what was left as dropped.  Returns 0 or
 * -ETIMEDOUT.
 */
int ss_table_flush(struct ss_table *table, unsigned timeout_ms);

/*
 * ss_table_barrier() - wait until every live peer has called it as often
 * as we have, at most @timeout_ms: a rank's shard must outlive the
 * others' last lookups (their evaluation), so ranks close together.  One
 * thread of the rank at a time.  Returns 0, or -ETIMEDOUT naming a peer
 * that did not come.
 */
int ss_table_barrier(struct ss_table *table, unsigned timeout_ms);

/*
 * ss_table_pause_applier() - stop (@paused true) or restart applying the
 * gradients that come in: for tests of the flow control, and to read a
 * quiet shard.  Senders then wait on credits, and drop after the timeout.
 */
void ss_table_pause_applier(struct ss_table *table, bool paused);

struct ss_table_stats {
	uint64_t lookups; /* ss_table_wait() calls */
	uint64_t rows_local, rows_remote; /* rows looked up, by where */
	uint64_t rows_fetched; /* READs: a row used twice in a lookup, once */
	/* rows whose owner failed, and every fetched row of a wait that
	 * timed out (which of them were late is not known) */
	uint64_t rows_stale;
	uint64_t rows_cached; /* of those, served as last fetched */
	uint64_t lookup_wait_ns; /* time clients waited in ss_table_wait() */
	uint64_t pushed_local, pushed; /* gradients applied here, sent */
	/* gradients never sent, or whose WRITE failed; sent to an owner
	 * that then failed: see ss_table_flush() */
	uint64_t dropped;
	uint64_t applied; /* gradients from peers applied to our shard */
	uint64_t credit_waits; /* times a log was full at its owner */
	size_t shard_bytes; /* rows (and accumulators) this rank holds */
	size_t registered_bytes; /* all its registered memory */
};

/* ss_table_stats() - totals so far (safe from any thread). */
void ss_table_stats(struct ss_table *table, struct ss_table_stats *stats);

/*
 * ss_table_fabric() - the endpoint the layer uses: for tests and
 * benchmarks that address its regions (SS_TABLE_R_*) directly.  The
 * proxy thread drives it: while the table is open, call only the
 * endpoint's fixed accessors (fabric.h, "Threads").
 */
struct ss_fabric *ss_table_fabric(struct ss_table *table);

/* The table endpoint's regions, in their order. */
enum {
	SS_TABLE_R_ROWS, /* the shard, remote-READ only */
	SS_TABLE_R_LOG, /* the senders' gradient logs, remote-WRITE only */
	SS_TABLE_R_HEAD, /* entries applied from each sender, remote-READ */
	SS_TABLE_R_LOCAL, /* accumulators, staging, outbound logs: local */
};

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_TABLE_H */
