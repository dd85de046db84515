// SPDX-License-Identifier: BSD-2-Clause
/*
 * Lookups: a client fills a slot with row ids and posts it; the proxy READs
 * the distinct remote rows into the slot's staging area, one READ a row,
 * all of a slot posted back to back; the client waits for the slot when
 * it needs the rows, which, posted a batch or more ahead, have come by
 * then.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "table_internal.h"

static struct ss__table_lookup *ss_slot(struct ss_table *tb, int client,
					int slot)
{
	if (client < 0 || client >= tb->opts.clients || slot < 0 ||
	    slot >= tb->opts.depth)
		return NULL;
	return &tb->client[client].lookup[slot];
}

/* Wait, at most @ms, for a slot's READs to be over. */
static int ss_wait_done(struct ss__table_lookup *l, uint64_t ms)
{
	uint64_t deadline = 0;
	unsigned spins = 0;

	while (atomic_load_explicit(&l->state, memory_order_acquire) !=
	       SS__LOOKUP_DONE) {
		if (++spins < 256)
			continue;
		if (!deadline)
			deadline = ss_deadline_ns(ms);
		if (ss_deadline_passed(deadline))
			return -ETIMEDOUT;
		ss_sleep_ns(2000);
	}
	return 0;
}

/* The fetches in owner order (a counting sort), the rows renumbered. */
static void ss_sort_by_owner(struct ss_table *tb, struct ss__table_lookup *l)
{
	int32_t *at = l->by_owner;

	memset(at, 0, ((size_t)tb->world + 1) * sizeof(*at));
	for (int k = 0; k < l->n_fetch; k++)
		at[l->fetch_owner[k] + 1]++;
	for (int o = 0; o < tb->world; o++)
		at[o + 1] += at[o];
	memcpy(l->cursor, at, (size_t)tb->world * sizeof(*at));
	for (int k = 0; k < l->n_fetch; k++) {
		int32_t to = l->cursor[l->fetch_owner[k]]++;

		l->renumber[k] = to;
		l->tmp_owner[to] = l->fetch_owner[k];
		l->tmp_slot[to] = l->fetch_slot[k];
		l->tmp_id[to] = l->fetch_id[k];
	}
	memcpy(l->fetch_owner, l->tmp_owner,
	       (size_t)l->n_fetch * sizeof(*l->fetch_owner));
	memcpy(l->fetch_slot, l->tmp_slot,
	       (size_t)l->n_fetch * sizeof(*l->fetch_slot));
	memcpy(l->fetch_id, l->tmp_id,
	       (size_t)l->n_fetch * sizeof(*l->fetch_id));
	for (int i = 0; i < l->n; i++)
		if (l->where[i] >= 0)
			l->where[i] = l->renumber[l->where[i]];
}

/*
 * Where each row is, and the distinct remote rows to READ: worked out by
 * the client, in its own thread, so that the proxy only posts.
 */
static void ss_plan_lookup(struct ss_table *tb, struct ss__table_lookup *l,
			   const uint64_t *ids, int n)
{
	memset(l->seen, 0xff, (l->seen_mask + 1) * sizeof(*l->seen));
	l->n = n;
	l->n_fetch = 0;
	for (int i = 0; i < n; i++) {
		int owner;
		uint32_t slot;
		size_t h;

		ss__table_place_id(tb, ids[i], &owner, &slot);
		if (owner == tb->rank) {
			l->where[i] = -1 - (int64_t)slot;
			continue;
		}
		for (h = (size_t)(ids[i] * 0x9e3779b97f4a7c15ull >> 20) &
			 l->seen_mask;
		     l->seen[h] >= 0 && l->fetch_id[l->seen[h]] != ids[i];
		     h = (h + 1) & l->seen_mask)
			;
		if (l->seen[h] < 0) {
			l->seen[h] = l->n_fetch;
			l->fetch_id[l->n_fetch] = ids[i];
			l->fetch_owner[l->n_fetch] = owner;
			l->fetch_slot[l->n_fetch] = slot;
			l->n_fetch++;
		}
		l->where[i] = l->seen[h];
	}
	ss_sort_by_owner(tb, l);
	memset(l->failed, 0, (size_t)l->n_fetch);
}

int ss_table_lookup(struct ss_table *tb, int client, int slot,
		    const uint64_t *ids, int n)
{
	struct ss__table_lookup *l = ss_slot(tb, client, slot);
	uint64_t all = tb->all_rows;

	if (n > tb->opts.max_rows)
		return ss_error_set(
			-EINVAL, "more rows than a lookup takes (max_rows)",
			"multi-hot data: a batch held more values "
			"than the data's first lines had; a smaller "
			"batch, or those lines first",
			"table lookup of %d rows, at most %d", n,
			tb->opts.max_rows);
	if (!l || n < 0)
		return ss_error_set(-EINVAL, "bad client, slot or size", NULL,
				    "table lookup of %d rows", n);
	for (int i = 0; i < n; i++)
		if (ids[i] >= all)
			return ss_error_set(-EINVAL, "no such row", NULL,
					    "table lookup of id %llu",
					    (unsigned long long)ids[i]);
	/* a wait that timed out left READs in flight into this slot */
	if (atomic_load(&l->state) != SS__LOOKUP_FREE &&
	    ss_wait_done(l, ss__table_silence_ns(tb) / 1000000 +
				    tb->opts.timeout_ms) < 0)
		return ss_error_set(-EBUSY, "its last READs never completed",
				    "a silent peer should have been failed by "
				    "now: report this",
				    "table lookup slot %d of client %d", slot,
				    client);
	ss_plan_lookup(tb, l, ids, n);
	if (l->n_fetch == 0) {
		/* every row is ours: nothing for the proxy to do */
		atomic_store_explicit(&l->state, SS__LOOKUP_DONE,
				      memory_order_release);
		return 0;
	}
	atomic_store_explicit(&l->state, SS__LOOKUP_POSTED,
			      memory_order_seq_cst);
	ss__table_wake(tb);
	return 0;
}

/* Where row @id goes in a client's cache (direct-mapped). */
static size_t ss_cache_at(const struct ss_table *tb, uint64_t id)
{
	return (size_t)(id * 0x9e3779b97f4a7c15ull >> 32) &
	       (tb->opts.cache_rows - 1);
}

/*
 * The client's cache of rows as last fetched: each row that came goes
 * in, each whose READ failed comes out (or stays zero).
 */
static void ss_cache_rows(struct ss_table *tb, struct ss__table_client *cl,
			  struct ss__table_lookup *l)
{
	size_t width = (size_t)tb->opts.width, bytes = width * sizeof(float);
	uint64_t cached = 0;

	if (!cl->cache)
		return;
	for (int k = 0; k < l->n_fetch; k++) {
		size_t at = ss_cache_at(tb, l->fetch_id[k]);
		float *row = l->stage + (size_t)k * width;

		if (!l->failed[k]) {
			cl->cache_id[at] = l->fetch_id[k];
			memcpy(cl->cache + at * width, row, bytes);
		} else if (cl->cache_id[at] == l->fetch_id[k]) {
			memcpy(row, cl->cache + at * width, bytes);
			cached++;
		}
	}
	if (cached)
		ss__table_count(&tb->st.rows_cached, cached);
}

/*
 * A wait that timed out: every fetched row from the client's cache as
 * last fetched, else zeros, into @l's fallback (READs still in flight
 * land in the stage, which is not read).  Returns the rows, or NULL.
 */
static float *ss_fallback_rows(struct ss_table *tb, struct ss__table_client *cl,
			       struct ss__table_lookup *l)
{
	size_t width = (size_t)tb->opts.width, bytes = width * sizeof(float);
	uint64_t cached = 0;

	if (!l->fallback)
		l->fallback = malloc((size_t)tb->opts.max_rows * bytes);
	if (!l->fallback)
		return NULL;
	for (int k = 0; k < l->n_fetch; k++) {
		size_t at = ss_cache_at(tb, l->fetch_id[k]);
		float *row = l->fallback + (size_t)k * width;

		if (cl->cache && cl->cache_id[at] == l->fetch_id[k]) {
			memcpy(row, cl->cache + at * width, bytes);
			cached++;
		} else {
			memset(row, 0, bytes);
		}
	}
	ss__table_count(&tb->st.rows_cached, cached);
	ss__table_count(&tb->st.rows_stale, (uint64_t)l->n_fetch);
	return l->fallback;
}

int ss_table_wait(struct ss_table *tb, int client, int slot, const float **rows)
{
	struct ss__table_lookup *l = ss_slot(tb, client, slot);
	size_t width = (size_t)tb->opts.width;
	uint64_t start = ss_now_ns(), local = 0;
	const float *fetched;

	if (!l || atomic_load(&l->state) == SS__LOOKUP_FREE)
		return ss_error_set(-EINVAL, "nothing posted there", NULL,
				    "table wait on slot %d of client %d", slot,
				    client);
	if (ss_wait_done(l, tb->opts.timeout_ms) < 0) {
		/* the stage holds the slot's last rows where READs have
		 * not landed: other ids' (a review's run served 8 of 8) */
		fetched = ss_fallback_rows(tb, &tb->client[client], l);
		if (!fetched)
			return ss_error_set(-ENOMEM, NULL, NULL,
					    "table wait on slot %d of client "
					    "%d: rows in place of those late",
					    slot, client);
	} else {
		ss_cache_rows(tb, &tb->client[client], l);
		fetched = l->stage;
	}
	ss__table_count(&tb->st.lookup_wait_ns, ss_now_ns() - start);
	for (int i = 0; i < l->n; i++) {
		if (l->where[i] < 0) {
			rows[i] = ss__table_slot_row(
				tb, (uint32_t)(-1 - l->where[i]));
			local++;
		} else {
			rows[i] = fetched + (size_t)l->where[i] * width;
		}
	}
	ss__table_count(&tb->st.lookups, 1);
	ss__table_count(&tb->st.rows_local, local);
	ss__table_count(&tb->st.rows_remote, (uint64_t)l->n - local);
	ss__table_count(&tb->st.rows_fetched, (uint64_t)l->n_fetch);
	return 0;
}

int ss_table_wait_into(struct ss_table *tb, int client, int slot, float *out)
{
	struct ss__table_lookup *l = ss_slot(tb, client, slot);
	size_t width = (size_t)tb->opts.width;
	const float **rows;
	int n, rc;

	if (!l || atomic_load(&l->state) == SS__LOOKUP_FREE)
		return ss_error_set(-EINVAL, "nothing posted there", NULL,
				    "table wait on slot %d of client %d", slot,
				    client);
	n = l->n;
	rows = malloc((size_t)(n ? n : 1) * sizeof(*rows));
	if (!rows)
		return ss_error_set(-ENOMEM, NULL, NULL,
				    "table wait on slot %d of client %d", slot,
				    client);
	rc = ss_table_wait(tb, client, slot, rows);
	for (int i = 0; rc == 0 && i < n; i++)
		memcpy(out + (size_t)i * width, rows[i], width * sizeof(float));
	free(rows);
	return rc;
}

/* A slot whose READs are all posted and completed is done. */
static void ss_maybe_done(struct ss__table_lookup *l)
{
	if (l->remaining == 0 && l->pending == 0)
		atomic_store_explicit(&l->state, SS__LOOKUP_DONE,
				      memory_order_release);
}

/* Fetches @k .. @k + @n - 1 of @l failed: as last fetched, or zero. */
static void ss_fetches_failed(struct ss_table *tb, struct ss__table_lookup *l,
			      int k, int n)
{
	size_t width = (size_t)tb->opts.width;

	memset(l->stage + (size_t)k * width, 0,
	       (size_t)n * width * sizeof(float));
	memset(l->failed + k, 1, (size_t)n);
	ss__table_count(&tb->st.rows_stale, (uint64_t)n);
}

/*
 * Post what @l has yet to post, owner by owner, as READ lists of up to
 * SS_FABRIC_MAX_LIST rows (one doorbell each), as far as each owner's
 * room in flight allows.  Returns whether anything was posted.
 */
static bool ss_post_fetches(struct ss_table *tb, struct ss__table_lookup *l,
			    uint32_t who)
{
	size_t row_bytes = (size_t)tb->opts.width * sizeof(float),
	       base = (size_t)((uint8_t *)l->stage -
			       (uint8_t *)ss_region_ptr(tb->r_local));
	struct ss_fabric_piece pieces[SS_FABRIC_MAX_LIST];
	bool did = false;

	for (int o = 0; o < tb->world && l->remaining > 0; o++)
		while (l->cursor[o] < l->by_owner[o + 1] &&
		       tb->flight[o] < tb->max_flight) {
			int k = l->cursor[o], n = l->by_owner[o + 1] - k;

			if (n > tb->max_flight - tb->flight[o])
				n = tb->max_flight - tb->flight[o];
			if (n > SS_FABRIC_MAX_LIST)
				n = SS_FABRIC_MAX_LIST;
			for (int i = 0; i < n; i++) {
				pieces[i].local_off =
					base + (size_t)(k + i) * row_bytes;
				pieces[i].remote_off =
					(size_t)l->fetch_slot[k + i] *
					row_bytes;
				pieces[i].len = row_bytes;
			}
			l->cursor[o] += n;
			l->remaining -= n;
			did = true;
			if (ss_fabric_read_list(tb->fabric, o, tb->r_local,
						SS_TABLE_R_ROWS, pieces, n,
						SS__WR(SS__WR_LOOKUP, who,
						       SS__LIST(k, n))) == 0) {
				l->pending++;
				ss__table_posted(tb, o, n);
			} else {
				/* its owner is gone */
				ss_fetches_failed(tb, l, k, n);
			}
		}
	return did;
}

/* The proxy: READ the distinct remote rows of every slot posted since. */
bool ss__table_post_lookups(struct ss_table *tb)
{
	bool did = false;

	for (int c = 0; c < tb->opts.clients; c++)
		for (int s = 0; s < tb->opts.depth; s++) {
			struct ss__table_lookup *l = &tb->client[c].lookup[s];
			uint32_t who = (uint32_t)c * 64u + (uint32_t)s;
			int state = atomic_load_explicit(&l->state,
							 memory_order_acquire);

			if (state == SS__LOOKUP_POSTED) {
				memcpy(l->cursor, l->by_owner,
				       (size_t)tb->world * sizeof(*l->cursor));
				l->remaining = l->n_fetch;
				l->pending = 0;
				atomic_store_explicit(&l->state,
						      SS__LOOKUP_IN_FLIGHT,
						      memory_order_relaxed);
				did = true;
			} else if (state != SS__LOOKUP_IN_FLIGHT ||
				   l->remaining == 0) {
				continue;
			}
			did |= ss_post_fetches(tb, l, who);
			ss_maybe_done(l);
		}
	return did;
}

void ss__table_lookup_done(struct ss_table *tb, const struct ss_completion *c)
{
	uint32_t who = SS__WR_A(c->wr_id);
	struct ss__table_lookup *l = &tb->client[who / 64].lookup[who % 64];

	if (c->status)
		ss_fetches_failed(tb, l,
				  (int)SS__LIST_FIRST(SS__WR_B(c->wr_id)),
				  SS__LIST_LEN(SS__WR_B(c->wr_id)));
	l->pending--;
	ss_maybe_done(l);
}
