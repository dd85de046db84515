// SPDX-License-Identifier: BSD-2-Clause
/*
 * Lookups: a client fills a slot with row ids and posts it; the proxy READs
 * the remote rows into the slot's staging area, one READ a row, all of a
 * slot posted back to back; the client waits for the slot when it needs
 * the rows, which, posted a batch or more ahead, have come by then.
 */
#include <errno.h>
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

/* Wait, at most the timeout, for a slot's READs to be over. */
static int ss_wait_done(struct ss_table *tb, struct ss__table_lookup *l)
{
	uint64_t deadline = 0;
	unsigned spins = 0;

	while (atomic_load_explicit(&l->state, memory_order_acquire) !=
	       SS__LOOKUP_DONE) {
		if (++spins < 256)
			continue;
		if (!deadline)
			deadline = ss_deadline_ns(tb->opts.timeout_ms);
		if (ss_deadline_passed(deadline))
			return -ETIMEDOUT;
		ss_sleep_ns(2000);
	}
	return 0;
}

int ss_table_lookup(struct ss_table *tb, int client, int slot,
		    const uint64_t *ids, int n)
{
	struct ss__table_lookup *l = ss_slot(tb, client, slot);
	uint64_t all = (uint64_t)tb->opts.tables * tb->opts.rows;

	if (!l || n < 0 || n > tb->opts.max_rows)
		return ss_error_set(-EINVAL, "bad client, slot or size", NULL,
				    "table lookup of %d rows", n);
	for (int i = 0; i < n; i++)
		if (ids[i] >= all)
			return ss_error_set(-EINVAL, "no such row", NULL,
					    "table lookup of id %llu",
					    (unsigned long long)ids[i]);
	/* a wait that timed out left READs in flight into this slot */
	if (atomic_load(&l->state) != SS__LOOKUP_FREE &&
	    ss_wait_done(tb, l) < 0)
		return ss_error_set(-EBUSY, "its last READs never completed",
				    "the fabric fails a silent peer in time",
				    "table lookup slot %d of client %d", slot,
				    client);
	memcpy(l->ids, ids, (size_t)n * sizeof(uint64_t));
	l->n = n;
	atomic_store_explicit(&l->state, SS__LOOKUP_POSTED,
			      memory_order_release);
	return 0;
}

int ss_table_wait(struct ss_table *tb, int client, int slot, const float **rows)
{
	struct ss__table_lookup *l = ss_slot(tb, client, slot);
	size_t width = (size_t)tb->opts.width;
	uint64_t start = ss_now_ns(), local = 0;

	if (!l || atomic_load(&l->state) == SS__LOOKUP_FREE)
		return ss_error_set(-EINVAL, "nothing posted there", NULL,
				    "table wait on slot %d of client %d", slot,
				    client);
	if (ss_wait_done(tb, l) < 0)
		/* what has come is there; the rest counts as stale */
		ss__table_count(&tb->st.rows_stale, 1);
	ss__table_count(&tb->st.lookup_wait_ns, ss_now_ns() - start);
	for (int i = 0; i < l->n; i++) {
		int t = (int)(l->ids[i] / tb->opts.rows), owner;
		uint32_t s;

		ss__table_place(tb, t, (uint32_t)(l->ids[i] % tb->opts.rows),
				&owner, &s);
		if (owner == tb->rank) {
			rows[i] = ss__table_slot_row(tb, s);
			local++;
		} else {
			rows[i] = l->stage + (size_t)i * width;
		}
	}
	ss__table_count(&tb->st.lookups, 1);
	ss__table_count(&tb->st.rows_local, local);
	ss__table_count(&tb->st.rows_fetched, (uint64_t)l->n - local);
	return 0;
}

/* The proxy: READ the remote rows of every slot posted since. */
bool ss__table_post_lookups(struct ss_table *tb)
{
	size_t row_bytes = (size_t)tb->opts.width * sizeof(float);
	size_t stage_off = (size_t)((uint8_t *)tb->stage -
				    (uint8_t *)ss_region_ptr(tb->r_local));
	bool did = false;

	for (int c = 0; c < tb->opts.clients; c++)
		for (int s = 0; s < tb->opts.depth; s++) {
			struct ss__table_lookup *l = &tb->client[c].lookup[s];
			uint32_t who = (uint32_t)c * 64u + (uint32_t)s;

			if (atomic_load_explicit(&l->state,
						 memory_order_acquire) !=
			    SS__LOOKUP_POSTED)
				continue;
			did = true;
			l->pending = 1; /* until all are posted */
			for (int i = 0; i < l->n; i++) {
				int t = (int)(l->ids[i] / tb->opts.rows), owner;
				uint32_t slot;
				float *dst = l->stage +
					     (size_t)i * (size_t)tb->opts.width;

				ss__table_place(
					tb, t,
					(uint32_t)(l->ids[i] % tb->opts.rows),
					&owner, &slot);
				if (owner == tb->rank)
					continue;
				if (ss_fabric_read(
					    tb->fabric, owner, tb->r_local,
					    stage_off +
						    (size_t)((uint8_t *)dst -
							     (uint8_t *)
								     tb->stage),
					    SS_TABLE_R_ROWS,
					    (size_t)slot * row_bytes, row_bytes,
					    SS__WR(SS__WR_LOOKUP, who,
						   (uint32_t)i)) == 0) {
					l->pending++;
				} else {
					/* its owner is gone: a neutral row */
					memset(dst, 0, row_bytes);
					ss__table_count(&tb->st.rows_stale, 1);
				}
			}
			if (--l->pending == 0)
				atomic_store_explicit(&l->state,
						      SS__LOOKUP_DONE,
						      memory_order_release);
			else
				atomic_store_explicit(&l->state,
						      SS__LOOKUP_IN_FLIGHT,
						      memory_order_relaxed);
		}
	return did;
}

void ss__table_lookup_done(struct ss_table *tb, const struct ss_completion *c)
{
	uint32_t who = SS__WR_A(c->wr_id);
	struct ss__table_lookup *l = &tb->client[who / 64].lookup[who % 64];

	if (c->status) {
		memset(l->stage + (size_t)SS__WR_B(c->wr_id) *
					  (size_t)tb->opts.width,
		       0, (size_t)tb->opts.width * sizeof(float));
		ss__table_count(&tb->st.rows_stale, 1);
	}
	if (--l->pending == 0)
		atomic_store_explicit(&l->state, SS__LOOKUP_DONE,
				      memory_order_release);
}
