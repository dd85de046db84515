// SPDX-License-Identifier: BSD-2-Clause
/*
 * The sharded tables: where each row lives, this rank's shard and the
 * memory around it, and the endpoint they are served on.
 *
 * A row's owner comes from a permutation of each table's rows, r' = (a r
 * + b) mod rows with a coprime to rows (a and b hashed from the table):
 * owner r' mod N, index r' div N in the owner's part of that table.
 * Neighbouring rows land on different owners, every owner holds about
 * rows / N of each table, and where rows are ids hashed into a table, hot
 * ones spread like any others.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/mix.h"
#include "base/options.h"
#include "table_internal.h"

void ss_table_options_init_size(struct ss_table_options *opts, size_t size)
{
	struct ss_table_options o = {
		.size = sizeof(o),
		.tables = 1,
		.rows = 1000,
		.width = 16,
		.update = SS_TABLE_SGD,
		.lr = 0.1f,
		.eps = 1e-8f,
		.seed = 1,
		.clients = 1,
		.max_rows = 4096,
		.depth = 2,
		.log_entries = 16384,
		.cache_rows = 65536,
		.timeout_ms = 5000,
	};

	ss__options_out(opts, size, &o, sizeof(o));
}

void ss_table_init_row(uint64_t seed, int table, uint32_t row, int width,
		       float bound, float *out)
{
	uint64_t s = ss__mix64(ss__mix64(seed ^ 0x7ab1e) ^
			       ((uint64_t)(uint32_t)table << 32 | row));

	for (int i = 0; i < width; i++)
		out[i] = bound * (float)(2.0 * ss__uniform(&s) - 1.0);
}

static int ss_addr_cmp(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Whether no table address in @addrs is one of @sync_addrs (SS_EUSAGE
 * naming both ranks when one is). */
static int ss_table_addrs_apart(const char *const *sync_addrs, int world,
				const char **addrs)
{
	const char **sorted = malloc((size_t)world * sizeof(*sorted));
	int rc = 0;

	if (!sorted)
		return ss_error_set(-ENOMEM, NULL, NULL, "table addresses");
	memcpy(sorted, sync_addrs, (size_t)world * sizeof(*sorted));
	qsort(sorted, (size_t)world, sizeof(*sorted), ss_addr_cmp);
	for (int r = 0; r < world && rc == 0; r++) {
		const char **hit = bsearch(&addrs[r], sorted, (size_t)world,
					   sizeof(*sorted), ss_addr_cmp);
		int k = 0;

		if (!hit)
			continue;
		while (k < world && strcmp(sync_addrs[k], addrs[r]))
			k++;
		rc = ss_error_set(SS_EUSAGE, "it is another rank's address",
				  "the tables listen on each rank's port + the "
				  "number of ranks: give the ranks of a host "
				  "consecutive ports (P, P + 1, ...), or leave "
				  "N ports free above each",
				  "table address of rank %d, '%s' (its port + "
				  "%d ranks), and rank %d",
				  r, addrs[r], world, k);
	}
	free(sorted);
	return rc;
}

int ss_table_addrs(const char *const *sync_addrs, int world,
		   char (*buf)[SS_TABLE_ADDR_LEN], const char **addrs)
{
	for (int r = 0; r < world; r++) {
		const char *colon = strrchr(sync_addrs[r], ':');
		long port = colon ? strtol(colon + 1, NULL, 10) : 0;
		int host = colon ? (int)(colon - sync_addrs[r]) : 0;

		if (!colon || port <= 0 || port + world > 65535)
			return ss_error_set(
				SS_EUSAGE, "no port, or one too large",
				"the tables listen on each rank's port + the "
				"number of ranks: keep it under 65536",
				"table address of rank %d from '%s'", r,
				sync_addrs[r]);
		if (host > SS_TABLE_ADDR_LEN - 8)
			return ss_error_set(SS_EUSAGE, "the host is too long",
					    "host names have at most 255 "
					    "characters",
					    "table address of rank %d from "
					    "'%.64s...'",
					    r, sync_addrs[r]);
		snprintf(buf[r], SS_TABLE_ADDR_LEN, "%.*s:%ld", host,
			 sync_addrs[r], port + world);
		addrs[r] = buf[r];
	}
	/* A table endpoint on another rank's address: the second to open
	 * found the first's objects (shm: "a live process has it", the
	 * other rank "model layout differs").  (Two table endpoints on one
	 * address would need two ranks on one, refused before.)  Looked up
	 * in the sorted sync addresses: a double loop was 4 x 10^9 string
	 * compares at the most ranks. */
	return ss_table_addrs_apart(sync_addrs, world, addrs);
}

void ss__table_place(const struct ss_table *tb, int t, uint32_t row, int *owner,
		     uint32_t *slot)
{
	uint64_t p = (tb->mult[t] * row + tb->add[t]) % tb->t_rows[t];

	*owner = (int)(p % (uint64_t)tb->world);
	*slot = tb->t_slot[t] + (uint32_t)(p / (uint64_t)tb->world);
}

void ss__table_place_id(const struct ss_table *tb, uint64_t id, int *owner,
			uint32_t *slot)
{
	int lo = 0, hi = tb->opts.tables - 1;

	if (!tb->opts.table_rows) {
		lo = (int)(id / tb->opts.rows);
	} else {
		/* the last table whose first id is at most @id */
		while (lo < hi) {
			int mid = (lo + hi + 1) / 2;

			if (tb->t_first[mid] <= id)
				lo = mid;
			else
				hi = mid - 1;
		}
	}
	ss__table_place(tb, lo, (uint32_t)(id - tb->t_first[lo]), owner, slot);
}

int ss_table_owner(const struct ss_table *tb, int t, uint32_t row)
{
	int owner;
	uint32_t slot;

	if (t < 0 || t >= tb->opts.tables || row >= tb->t_rows[t])
		return -1;
	ss__table_place(tb, t, row, &owner, &slot);
	return owner;
}

float *ss_table_row(struct ss_table *tb, int t, uint32_t row)
{
	int owner;
	uint32_t slot;

	if (t < 0 || t >= tb->opts.tables || row >= tb->t_rows[t])
		return NULL;
	ss__table_place(tb, t, row, &owner, &slot);
	return owner == tb->rank ? ss__table_slot_row(tb, slot) : NULL;
}

/* Table @t's rows. */
static uint32_t ss_table_rows_of(const struct ss_table_options *o, int t)
{
	return o->table_rows ? o->table_rows[t] : o->rows;
}

/* The rows of all the tables. */
static double ss_table_all_rows(const struct ss_table_options *o)
{
	double n = 0;

	for (int t = 0; t < o->tables; t++)
		n += ss_table_rows_of(o, t);
	return n;
}

static int ss_table_check(const struct ss_table_options *o)
{
	const char *bad = NULL;
	bool empty = false;

	for (int t = 0; o->table_rows && t < o->tables; t++)
		empty |= o->table_rows[t] < 1;
	if (o->tables < 1)
		bad = "tables must be at least 1";
	else if ((!o->table_rows && o->rows < 1) || empty)
		bad = "rows must be at least 1";
	else if (o->width < 1 || o->width > 4096)
		bad = "width must be 1 to 4096 floats";
	else if (o->clients < 1 || o->clients > 256)
		bad = "clients must be 1 to 256";
	else if (o->max_rows < 1 || o->max_rows > 1 << 20)
		bad = "max_rows must be 1 to 2^20";
	else if (o->depth < 1 || o->depth > 64)
		bad = "depth must be 1 to 64";
	else if (o->log_entries < 16 || o->log_entries > 1u << 24)
		bad = "log_entries must be 16 to 2^24";
	else if (o->cache_rows & (o->cache_rows - 1))
		bad = "cache_rows must be 0 or a power of two";
	else if (ss_table_all_rows(o) > 4e9)
		bad = "more than 4e9 rows in all";
	else if (!(o->lr > 0))
		bad = "the learning rate must be positive";
	return bad ? ss_error_set(SS_EUSAGE, bad, NULL, "table options") : 0;
}

/* Table @t's permutation of its @rows rows: every rank derives the same. */
static void ss_table_permutation(int t, uint64_t rows, uint64_t *mult,
				 uint64_t *add)
{
	ss__affine_permutation(ss__mix64(0x5ba4dull ^ (uint64_t)t), rows, mult,
			       add);
}

/* Each table's rows, first id and first slot; the options point at ours. */
static void ss_table_index(struct ss_table *tb)
{
	uint64_t id = 0;
	uint32_t slot = 0;

	for (int t = 0; t < tb->opts.tables; t++) {
		tb->t_rows[t] = ss_table_rows_of(&tb->opts, t);
		tb->t_first[t] = id;
		tb->t_slot[t] = slot;
		id += tb->t_rows[t];
		slot += ss_table_rows_per_owner(tb->t_rows[t], tb->world);
	}
	tb->all_rows = id;
	if (tb->opts.table_rows)
		tb->opts.table_rows = tb->t_rows;
}

static void ss_table_permutations(struct ss_table *tb)
{
	for (int t = 0; t < tb->opts.tables; t++)
		ss_table_permutation(t, tb->t_rows[t], &tb->mult[t],
				     &tb->add[t]);
}

uint32_t ss_table_place_of(uint32_t rows, int t, uint32_t row)
{
	uint64_t mult, add;

	ss_table_permutation(t, rows, &mult, &add);
	return (uint32_t)((mult * row + add) % rows);
}

/* The owned rows' starting values, the same as on any other placement. */
static void ss_table_init_shard(struct ss_table *tb)
{
	for (int t = 0; t < tb->opts.tables; t++) {
		float bound = tb->opts.init_bound > 0 ?
				      tb->opts.init_bound :
				      (float)sqrt(1.0 / tb->t_rows[t]);

		for (uint32_t r = 0; r < tb->t_rows[t]; r++) {
			int owner;
			uint32_t slot;

			ss__table_place(tb, t, r, &owner, &slot);
			if (owner == tb->rank)
				ss_table_init_row(tb->opts.seed, t, r,
						  tb->opts.width, bound,
						  ss__table_slot_row(tb, slot));
		}
	}
}

static uint64_t ss_table_layout(const struct ss_table_options *o)
{
	uint64_t h = ss__mix64(0x7ab1e5ull ^ (uint64_t)o->tables);

	h = ss__mix64(h ^ o->rows);
	for (int t = 0; o->table_rows && t < o->tables; t++)
		h = ss__mix64(h ^ ((uint64_t)t << 32 | o->table_rows[t]));
	h = ss__mix64(h ^ (uint64_t)o->width);
	h = ss__mix64(h ^ o->log_entries);
	return ss__mix64(h ^ (uint64_t)o->update);
}

/* One log entry: its header and the gradient, in 8-byte steps. */
static size_t ss_table_entry_bytes(const struct ss_table_options *o)
{
	return (sizeof(struct ss__table_entry) +
		(size_t)o->width * sizeof(float) + 7) &
	       ~(size_t)7;
}

/* The shard's and the log entries' sizes, from the options and world. */
static void ss_table_sizes(struct ss_table *tb)
{
	const struct ss_table_options *o = &tb->opts;

	tb->slots = 0;
	for (int t = 0; t < o->tables; t++)
		tb->slots += ss_table_rows_per_owner(ss_table_rows_of(o, t),
						     tb->world);
	tb->shard_floats = (size_t)tb->slots * (size_t)o->width;
	tb->entry_bytes = ss_table_entry_bytes(o);
}

/* @n bytes, rounded up to 8: what follows holds 64-bit words. */
static size_t ss_round8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

/* The local region's parts, in bytes: accumulators, staging, our copies
 * of our logs (entries of 8-byte steps), the heads we READ. */
static void ss_table_local_parts(const struct ss_table *tb, size_t *acc,
				 size_t *stage, size_t *out, size_t *heads)
{
	const struct ss_table_options *o = &tb->opts;

	*acc = ss_round8(o->update == SS_TABLE_ADAGRAD ?
				 tb->shard_floats * sizeof(float) :
				 0);
	*stage = ss_round8((size_t)o->clients * (size_t)o->depth *
			   (size_t)o->max_rows * (size_t)o->width *
			   sizeof(float));
	*out = (size_t)tb->world * o->log_entries * tb->entry_bytes;
	*heads = (size_t)tb->world * sizeof(uint64_t);
}

/* The four regions' lengths: rows, logs in, heads out, local. */
enum { SS_TR_ROWS, SS_TR_LOG, SS_TR_HEAD, SS_TR_LOCAL, SS_TR_COUNT };

static void ss_table_region_lens(const struct ss_table *tb,
				 size_t len[SS_TR_COUNT])
{
	size_t acc, stage, out, heads;

	ss_table_local_parts(tb, &acc, &stage, &out, &heads);
	len[SS_TR_ROWS] = tb->shard_floats * sizeof(float);
	len[SS_TR_LOG] = out; /* our logs at the peers are as long */
	len[SS_TR_HEAD] = heads;
	len[SS_TR_LOCAL] = acc + stage + out + heads;
}

static int ss_table_memory(struct ss_table *tb)
{
	const struct ss_table_options *o = &tb->opts;
	size_t len[SS_TR_COUNT], acc, stage, out, heads;
	uint8_t *local;
	int rc;

	ss_table_region_lens(tb, len);
	rc = ss_fabric_alloc(tb->fabric, len[SS_TR_ROWS], SS_ACCESS_REMOTE_READ,
			     &tb->r_rows);
	if (!rc)
		rc = ss_fabric_alloc(tb->fabric, len[SS_TR_LOG],
				     SS_ACCESS_REMOTE_WRITE, &tb->r_log);
	if (!rc)
		rc = ss_fabric_alloc(tb->fabric, len[SS_TR_HEAD],
				     SS_ACCESS_REMOTE_READ, &tb->r_head);
	if (!rc)
		rc = ss_fabric_alloc(tb->fabric, len[SS_TR_LOCAL],
				     SS_ACCESS_LOCAL, &tb->r_local);
	if (rc)
		return ss_error_prefix("table shard of rank %d", tb->rank);
	tb->rows = ss_region_ptr(tb->r_rows);
	tb->log_in = ss_region_ptr(tb->r_log);
	tb->head_out = ss_region_ptr(tb->r_head);
	local = ss_region_ptr(tb->r_local);
	ss_table_local_parts(tb, &acc, &stage, &out, &heads);
	if (o->update == SS_TABLE_ADAGRAD)
		tb->acc = (float *)local;
	tb->stage = (float *)(local + acc);
	tb->log_out = local + acc + stage;
	tb->heads_in = (uint64_t *)(void *)(local + acc + stage + out);
	return 0;
}

static int ss_table_clients(struct ss_table *tb)
{
	const struct ss_table_options *o = &tb->opts;
	uint32_t cap = 1;

	/* room for a few batches' gradients before a client waits */
	while (cap < 4u * (uint32_t)o->max_rows)
		cap <<= 1;
	tb->client = calloc((size_t)o->clients, sizeof(*tb->client));
	if (!tb->client)
		return -ENOMEM;
	for (int c = 0; c < o->clients; c++) {
		struct ss__table_client *cl = &tb->client[c];

		cl->lookup = calloc((size_t)o->depth, sizeof(*cl->lookup));
		cl->push_cap = cap;
		cl->push_ids = malloc(cap * sizeof(uint64_t));
		cl->push_grads =
			malloc((size_t)cap * (size_t)o->width * sizeof(float));
		if (!cl->lookup || !cl->push_ids || !cl->push_grads)
			return -ENOMEM;
		if (o->cache_rows) {
			cl->cache_id = malloc(o->cache_rows * sizeof(uint64_t));
			cl->cache = malloc((size_t)o->cache_rows *
					   (size_t)o->width * sizeof(float));
			if (!cl->cache_id || !cl->cache)
				return -ENOMEM;
			memset(cl->cache_id, 0xff,
			       o->cache_rows * sizeof(uint64_t));
		}
		for (int s = 0; s < o->depth; s++) {
			struct ss__table_lookup *l = &cl->lookup[s];

			size_t m = (size_t)o->max_rows, seen = 1;

			while (seen < 2 * m)
				seen <<= 1;
			l->where = malloc(m * sizeof(*l->where));
			l->fetch_owner = malloc(m * sizeof(*l->fetch_owner));
			l->fetch_slot = malloc(m * sizeof(*l->fetch_slot));
			l->fetch_id = malloc(m * sizeof(*l->fetch_id));
			l->seen = malloc(seen * sizeof(*l->seen));
			l->seen_mask = seen - 1;
			l->by_owner = calloc((size_t)tb->world + 1,
					     sizeof(*l->by_owner));
			l->cursor =
				calloc((size_t)tb->world, sizeof(*l->cursor));
			l->tmp_owner = malloc(m * sizeof(*l->tmp_owner));
			l->tmp_slot = malloc(m * sizeof(*l->tmp_slot));
			l->tmp_id = malloc(m * sizeof(*l->tmp_id));
			l->renumber = malloc(m * sizeof(*l->renumber));
			l->failed = malloc(m);
			if (!l->where || !l->fetch_owner || !l->fetch_slot ||
			    !l->fetch_id || !l->seen || !l->by_owner ||
			    !l->cursor || !l->tmp_owner || !l->tmp_slot ||
			    !l->tmp_id || !l->renumber || !l->failed)
				return -ENOMEM;
			l->stage = tb->stage +
				   ((size_t)c * (size_t)o->depth + (size_t)s) *
					   (size_t)o->max_rows *
					   (size_t)o->width;
		}
	}
	return 0;
}

/*
 * Each region bound to the plan's NUMA node before its first touch (the
 * fabric calls this between mapping and registering): the rows, the logs
 * the applier reads and the staging areas live near the NIC.
 */
static void ss_table_place_region(void *ctx, void *ptr, size_t len)
{
	struct ss_table *tb = ctx;

	if (ss_topo_place(tb->opts.topo, ptr, len, tb->opts.numa) < 0 &&
	    !tb->place_warned) {
		tb->place_warned = true;
		ss_log_warn("table: shard memory not bound to NUMA node %d: "
			    "%s: %s",
			    tb->opts.numa, ss_last_error()->what,
			    ss_last_error()->why);
	}
}

/* The proxy's sleep: a condition on the monotonic clock. */
static void ss_table_idle_init(struct ss_table *tb)
{
	pthread_condattr_t attr;

	pthread_mutex_init(&tb->idle_lock, NULL);
	pthread_condattr_init(&attr);
	pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
	pthread_cond_init(&tb->idle_cond, &attr);
	pthread_condattr_destroy(&attr);
	tb->idle_ready = true;
}

int ss_table_open(struct ss_table **table, const struct ss_table_options *given,
		  const struct ss_fabric_options *fabric_opts)
{
	struct ss_table_options copy;
	const struct ss_table_options *opts = &copy;
	struct ss_fabric_options fo;
	struct ss_table *tb;
	uint32_t depth;
	int rc;

	*table = NULL;
	ss_table_options_init(&copy);
	ss_fabric_options_init(&fo);
	rc = ss__options_in(&copy, sizeof(copy), given,
			    offsetof(struct ss_table_options, fill),
			    "ss_table_options");
	if (rc == 0)
		rc = ss__options_in(
			&fo, sizeof(fo), fabric_opts,
			offsetof(struct ss_fabric_options, partial_connect),
			"ss_fabric_options");
	if (rc == 0)
		rc = ss_table_check(opts);
	/* the shard's size divides by it before the fabric checks it */
	if (rc == 0 && (fo.world < 1 || fo.rank < 0 || fo.rank >= fo.world))
		rc = ss_error_set(SS_EUSAGE, "no such rank in the world",
				  "give 0 <= rank < world, world >= 1",
				  "table endpoint of rank %d of %d", fo.rank,
				  fo.world);
	if (rc)
		return rc;
	tb = calloc(1, sizeof(*tb));
	if (!tb)
		return -ENOMEM;
	tb->opts = *opts;
	tb->rank = fo.rank;
	tb->world = fo.world;
	ss_table_sizes(tb);
	tb->mult = calloc((size_t)opts->tables, sizeof(uint64_t));
	tb->add = calloc((size_t)opts->tables, sizeof(uint64_t));
	tb->t_rows = calloc((size_t)opts->tables, sizeof(uint32_t));
	tb->t_slot = calloc((size_t)opts->tables, sizeof(uint32_t));
	tb->t_first = calloc((size_t)opts->tables, sizeof(uint64_t));
	tb->consumed = calloc((size_t)fo.world, sizeof(uint64_t));
	tb->queued = calloc((size_t)fo.world, sizeof(uint64_t));
	tb->out = calloc((size_t)fo.world, sizeof(*tb->out));
	tb->barrier_seen = calloc((size_t)fo.world, sizeof(*tb->barrier_seen));
	tb->flight = calloc((size_t)fo.world, sizeof(*tb->flight));
	tb->answered_ns = calloc((size_t)fo.world, sizeof(*tb->answered_ns));
	tb->hello_due = calloc((size_t)fo.world, sizeof(*tb->hello_due));
	tb->hello_seen = calloc((size_t)fo.world, sizeof(*tb->hello_seen));
	tb->peer_live = calloc((size_t)fo.world, sizeof(*tb->peer_live));
	if (!tb->mult || !tb->add || !tb->t_rows || !tb->t_slot ||
	    !tb->t_first || !tb->consumed || !tb->queued || !tb->out ||
	    !tb->barrier_seen || !tb->flight || !tb->answered_ns ||
	    !tb->hello_due || !tb->hello_seen || !tb->peer_live) {
		rc = -ENOMEM;
		goto fail;
	}
	ss_table_index(tb);
	ss_table_permutations(tb);
	/* peers with other tables (or another optimizer) are refused */
	fo.layout_hash = ss_table_layout(opts);
	rc = ss_fabric_open(&tb->fabric, &fo);
	/*
	 * The proxy posts, polls, applies and serves: a post that waited
	 * for a stopped peer's room (over shm, up to the fabric's timeout)
	 * held every other peer's lookups and logs with it.  Its posts are
	 * tried again later instead.
	 */
	if (!rc)
		ss_fabric_set_post_wait(tb->fabric, 0);
	if (!rc && opts->topo)
		ss_fabric_set_placement(tb->fabric, ss_table_place_region, tb);
	if (!rc)
		rc = ss_table_memory(tb);
	if (tb->fabric)
		ss_fabric_set_placement(tb->fabric, NULL, NULL);
	if (!rc)
		rc = ss_table_clients(tb);
	if (rc)
		goto fail;
	ss_table_init_shard(tb);
	ss_table_idle_init(tb);
	/* before the connect: nobody reaches the shard while it is filled */
	if (opts->fill) {
		rc = opts->fill(tb, opts->fill_arg);
		if (rc < 0)
			goto fail;
	}
	rc = ss_fabric_connect(tb->fabric);
	if (rc) {
		ss_error_prefix("table endpoint of rank %d", tb->rank);
		goto fail;
	}
	for (int p = 0; p < tb->world; p++) /* the proxy's from now on */
		atomic_store(&tb->peer_live[p],
			     ss_fabric_peer_ok(tb->fabric, p));
	depth = ss_fabric_send_depth(tb->fabric);
	tb->max_flight = depth && depth * 3 / 4 < SS__TABLE_MAX_FLIGHT ?
				 (int)(depth * 3 / 4) :
				 SS__TABLE_MAX_FLIGHT;
	rc = pthread_create(&tb->proxy, NULL, ss__table_proxy, tb);
	if (rc) {
		rc = ss_error_set(-rc, NULL, NULL, "table proxy thread");
		goto fail;
	}
	tb->proxy_started = true;
	*table = tb;
	return 0;
fail:
	ss_table_close(&tb);
	return rc;
}

void ss_table_close(struct ss_table **table)
{
	struct ss_table *tb = *table;

	if (!tb)
		return;
	if (tb->proxy_started) {
		ss_table_flush(tb, tb->opts.timeout_ms);
		atomic_store(&tb->stop, true);
		ss__table_wake(tb);
		pthread_join(tb->proxy, NULL);
	}
	if (tb->idle_ready) {
		pthread_cond_destroy(&tb->idle_cond);
		pthread_mutex_destroy(&tb->idle_lock);
	}
	ss_fabric_close(&tb->fabric);
	for (int c = 0; tb->client && c < tb->opts.clients; c++) {
		struct ss__table_client *cl = &tb->client[c];

		for (int s = 0; cl->lookup && s < tb->opts.depth; s++) {
			struct ss__table_lookup *l = &cl->lookup[s];

			free(l->where);
			free(l->fallback);
			free(l->fetch_owner);
			free(l->fetch_slot);
			free(l->fetch_id);
			free(l->seen);
			free(l->by_owner);
			free(l->cursor);
			free(l->tmp_owner);
			free(l->tmp_slot);
			free(l->tmp_id);
			free(l->renumber);
			free(l->failed);
		}
		free(cl->lookup);
		free(cl->push_ids);
		free(cl->push_grads);
		free(cl->cache_id);
		free(cl->cache);
	}
	free(tb->client);
	free(tb->mult);
	free(tb->add);
	free(tb->t_rows);
	free(tb->t_slot);
	free(tb->t_first);
	free(tb->consumed);
	free(tb->queued);
	free(tb->out);
	free(tb->barrier_seen);
	free(tb->hello_due);
	free(tb->hello_seen);
	free(tb->peer_live);
	free(tb->flight);
	free(tb->answered_ns);
	free(tb);
	*table = NULL;
}

int ss_table_flush(struct ss_table *tb, unsigned timeout_ms)
{
	uint64_t deadline = ss_deadline_ns(timeout_ms);
	int rc = 0;

	atomic_fetch_add(&tb->flushing, 1);
	ss__table_wake(tb);
	while (!ss__table_pushes_settled(tb)) {
		if (ss_deadline_passed(deadline)) {
			rc = ss_error_set(-ETIMEDOUT,
					  "gradients still on their way", NULL,
					  "table flush of rank %d", tb->rank);
			break;
		}
		ss_sleep_ns(50000);
	}
	atomic_fetch_sub(&tb->flushing, 1);
	return rc;
}

/*
 * The number of the barrier we are to call now: one more than our last,
 * or the highest a live peer has passed, if higher.  A live rank is never
 * ahead of another by more than the barrier it waits in, so this is our
 * last plus one, except in a rank restarted into a running job: its
 * first barrier takes up the job's count (the peers' hellos), and it
 * keeps in step from there.
 */
static uint32_t ss_barrier_number(struct ss_table *tb)
{
	uint32_t want = atomic_load(&tb->barrier_wanted) + 1;

	for (int p = 0; p < tb->world; p++) {
		uint32_t seen = atomic_load(&tb->barrier_seen[p]);

		if (p != tb->rank && atomic_load(&tb->peer_live[p]) &&
		    seen > want)
			want = seen;
	}
	return want;
}

/*
 * Wait, until @deadline, for every live peer's hello (@want 0) or its
 * barrier @want; the error names the first that has not come.
 */
static int ss_wait_peers(struct ss_table *tb, uint64_t deadline, uint32_t want)
{
	uint64_t start = ss_now_ns(), next_note = start + 30000000000ull;

	for (int p = 0; p < tb->world; p++)
		while (p != tb->rank && atomic_load(&tb->peer_live[p]) &&
		       (want ? atomic_load(&tb->barrier_seen[p]) < want :
			       !atomic_load(&tb->hello_seen[p]))) {
			uint64_t now = ss_now_ns();

			if (ss_deadline_passed(deadline))
				return ss_error_set(
					-ETIMEDOUT,
					want ? "it did not come" :
					       "it never said hello",
					"see that rank's messages: it may still "
					"be training, or be stopped or cut off",
					"table barrier of rank %d: rank %d",
					tb->rank, p);
			/* a long wait says what it waits for */
			if (now >= next_note) {
				ss_log_warn(
					"table barrier: waiting %.0f s for rank "
					"%d (still training, or stopped): our "
					"shard serves its lookups till it comes",
					(double)(now - start) / 1e9, p);
				next_note = now + 60000000000ull;
			}
			ss_sleep_ns(200000);
		}
	return 0;
}

int ss_table_barrier(struct ss_table *tb, unsigned timeout_ms)
{
	uint64_t deadline = ss_deadline_ns(timeout_ms);
	uint32_t want;

	/* every live peer's count known before we number ours */
	if (ss_wait_peers(tb, deadline, 0) < 0)
		return -ETIMEDOUT;
	want = ss_barrier_number(tb);
	atomic_store(&tb->barrier_wanted, want);
	ss__table_wake(tb);

	/*
	 * Ours sent (a rank that leaves the barrier and closes at once must
	 * not take its message with it), and every live peer's come.
	 */
	while (atomic_load(&tb->barrier_sent) < want) {
		if (ss_deadline_passed(deadline))
			return ss_error_set(
				-ETIMEDOUT, "the proxy never sent it", NULL,
				"table barrier of rank %d", tb->rank);
		ss_sleep_ns(20000);
	}
	return ss_wait_peers(tb, deadline, want);
}

void ss_table_pause_applier(struct ss_table *tb, bool paused)
{
	atomic_store(&tb->paused, paused);
}

void ss_table_stats(struct ss_table *tb, struct ss_table_stats *s)
{
	struct ss__table_stats *t = &tb->st;

	memset(s, 0, sizeof(*s));
	s->lookups = atomic_load(&t->lookups);
	s->rows_local = atomic_load(&t->rows_local);
	s->rows_remote = atomic_load(&t->rows_remote);
	s->rows_fetched = atomic_load(&t->rows_fetched);
	s->rows_stale = atomic_load(&t->rows_stale);
	s->rows_cached = atomic_load(&t->rows_cached);
	s->lookup_wait_ns = atomic_load(&t->lookup_wait_ns);
	s->pushed_local = atomic_load(&t->pushed_local);
	s->pushed = atomic_load(&t->pushed);
	s->dropped = atomic_load(&t->dropped);
	s->applied = atomic_load(&t->applied);
	s->credit_waits = atomic_load(&t->credit_waits);
	s->shard_bytes = tb->shard_floats * sizeof(float) * (tb->acc ? 2 : 1);
	s->registered_bytes =
		ss_region_len(tb->r_rows) + ss_region_len(tb->r_log) +
		ss_region_len(tb->r_head) + ss_region_len(tb->r_local);
}

size_t ss_table_shard(struct ss_table *tb, float **rows, float **acc)
{
	*rows = tb->rows;
	*acc = tb->acc;
	return tb->shard_floats;
}

size_t ss_table_registered_bytes(const struct ss_table_options *opts, int world)
{
	struct ss_table tb = { .world = world };
	size_t page = (size_t)sysconf(_SC_PAGESIZE), total = 0,
	       len[SS_TR_COUNT];

	ss_table_options_init(&tb.opts); /* an older caller's struct */
	if (world < 1 ||
	    ss__options_in(&tb.opts, sizeof(tb.opts), opts,
			   offsetof(struct ss_table_options, fill),
			   "ss_table_options") < 0 ||
	    ss_table_check(&tb.opts) < 0)
		return 0;
	ss_table_sizes(&tb);
	/* the four regions of ss_table_memory, each in whole pages */
	ss_table_region_lens(&tb, len);
	for (int i = 0; i < SS_TR_COUNT; i++)
		total += (len[i] + page - 1) / page * page;
	return total;
}

uint32_t ss_table_rows_per_owner(uint32_t rows, int world)
{
	return (uint32_t)(((uint64_t)rows + (uint64_t)world - 1) /
			  (uint64_t)world);
}

struct ss_fabric *ss_table_fabric(struct ss_table *tb)
{
	return tb->fabric;
}
