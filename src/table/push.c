// SPDX-License-Identifier: BSD-2-Clause
/*
 * Pushes: a client's row gradients go to their owners.  Own rows take
 * their step at once; the others pass through the client's ring to the
 * proxy, which places them in our copy of our log at each owner and WRITEs
 * them there with an immediate that says how many came.
 *
 * Credits: the owner's applier publishes, in its head region, how many of
 * our entries it has applied; we READ that word when the log looks full.
 * An entry is placed only where the owner has applied the one before it
 * in that place, so a slow owner never has its log overwritten.  A log
 * that stays full for the timeout (an owner stopped, or gone) has what is
 * for it dropped, and counted.
 */
#include <errno.h>
#include <string.h>

#include "table_internal.h"

int ss_table_push(struct ss_table *tb, int client, const uint64_t *ids,
		  const float *grads, int n)
{
	struct ss__table_client *cl;
	size_t width = (size_t)tb->opts.width;
	uint64_t all = tb->all_rows, tail, deadline = 0, local = 0, dropped = 0;

	if (client < 0 || client >= tb->opts.clients || n < 0)
		return ss_error_set(-EINVAL, "bad client or size", NULL,
				    "table push of %d rows", n);
	/* all checked first: a bad id must not leave half the batch done */
	for (int i = 0; i < n; i++)
		if (ids[i] >= all)
			return ss_error_set(-EINVAL, "no such row", NULL,
					    "table push of id %llu",
					    (unsigned long long)ids[i]);
	cl = &tb->client[client];
	tail = atomic_load_explicit(&cl->push_tail, memory_order_relaxed);
	for (int i = 0; i < n; i++) {
		int owner;
		uint32_t slot;

		ss__table_place_id(tb, ids[i], &owner, &slot);
		if (owner == tb->rank) {
			ss__table_apply(tb, slot, grads + (size_t)i * width);
			local++;
			continue;
		}
		while (tail - atomic_load_explicit(&cl->push_head,
						   memory_order_acquire) >=
		       cl->push_cap) {
			if (!deadline)
				deadline = ss_deadline_ns(tb->opts.timeout_ms);
			if (ss_deadline_passed(deadline))
				break;
			ss_sleep_ns(5000);
		}
		if (tail - atomic_load_explicit(&cl->push_head,
						memory_order_acquire) >=
		    cl->push_cap) {
			dropped++; /* the proxy took nothing for the timeout */
			continue;
		}
		cl->push_ids[tail & (cl->push_cap - 1)] = ids[i];
		memcpy(cl->push_grads + (tail & (cl->push_cap - 1)) * width,
		       grads + (size_t)i * width, width * sizeof(float));
		tail++;
		/* publish as we go: the proxy may start on them at once */
		if ((tail & 63) == 0)
			atomic_store_explicit(&cl->push_tail, tail,
					      memory_order_release);
	}
	atomic_store_explicit(&cl->push_tail, tail, memory_order_seq_cst);
	if (local < (uint64_t)n)
		ss__table_wake(tb);
	ss__table_count(&tb->st.pushed_local, local);
	ss__table_count(&tb->st.dropped, dropped);
	return 0;
}

/* Ask owner @o how far it has applied our log. */
static void ss_read_head(struct ss_table *tb, int o)
{
	struct ss__table_outbound *ob = &tb->out[o];
	size_t off = (size_t)((uint8_t *)&tb->heads_in[o] -
			      (uint8_t *)ss_region_ptr(tb->r_local));

	if (ob->head_reading || tb->flight[o] >= tb->max_flight)
		return;
	ob->refreshed_ns = ss_now_ns();
	if (ss_fabric_read(tb->fabric, o, tb->r_local, off, SS_TABLE_R_HEAD,
			   (size_t)tb->rank * sizeof(uint64_t),
			   sizeof(uint64_t),
			   SS__WR(SS__WR_HEAD, (uint32_t)o, 0)) == 0) {
		ob->head_reading = true;
		ss__table_posted(tb, o, 1);
	}
}

void ss__table_head_done(struct ss_table *tb, const struct ss_completion *c)
{
	int o = (int)SS__WR_A(c->wr_id);
	struct ss__table_outbound *ob = &tb->out[o];

	ob->head_reading = false;
	if (c->status == 0 && tb->heads_in[o] > ob->head &&
	    tb->heads_in[o] <= ob->posted)
		__atomic_store_n(&ob->head, tb->heads_in[o], __ATOMIC_RELEASE);
}

/*
 * Place one gradient in our copy of the log at @o.  Returns false when
 * the log is full and the entry must wait; true when placed, or dropped
 * because the log has been full for the timeout.
 */
static bool ss_place(struct ss_table *tb, int o, uint32_t slot, const float *g)
{
	struct ss__table_outbound *ob = &tb->out[o];
	struct ss__table_entry *e;

	if (ob->tail - ob->head >= tb->opts.log_entries) {
		uint64_t now = ss_now_ns();

		if (!ob->full_since_ns) {
			ob->full_since_ns = now;
			ss__table_count(&tb->st.credit_waits, 1);
		}
		ss_read_head(tb, o);
		if (now - ob->full_since_ns <
			    (uint64_t)tb->opts.timeout_ms * 1000000ull &&
		    ss_fabric_peer_ok(tb->fabric, o))
			return false;
		/* a live owner, once a spell (a failed one the sync layer
		 * names): the count alone showed only at the end */
		if (!ob->dropping && ss_fabric_peer_ok(tb->fabric, o)) {
			ss_log_warn("table: rank %d applied none of our "
				    "gradients for %u ms (stopped, or short of "
				    "CPU): dropping those for its rows until "
				    "it does",
				    o, tb->opts.timeout_ms);
			ob->dropping = true;
		}
		ss__table_count(&tb->st.dropped, 1);
		return true;
	}
	if (ob->dropping)
		ss_log_warn("table: rank %d applies our gradients again", o);
	ob->dropping = false;
	ob->full_since_ns = 0;
	e = ss__table_entry(tb, tb->log_out, o, ob->tail);
	e->slot = slot;
	memcpy(e->g, g, (size_t)tb->opts.width * sizeof(float));
	__atomic_store_n(&ob->tail, ob->tail + 1, __ATOMIC_RELEASE);
	return true;
}

/*
 * WRITE what is placed and not yet posted, in at most two pieces.
 * Returns whether any went (posted, or dropped for a failed owner): a
 * live owner with no room takes nothing, and the proxy may sleep.
 */
static bool ss_post_log(struct ss_table *tb, int o)
{
	struct ss__table_outbound *ob = &tb->out[o];
	size_t base = (size_t)o * tb->opts.log_entries * tb->entry_bytes,
	       out_off = (size_t)(tb->log_out -
				  (uint8_t *)ss_region_ptr(tb->r_local));
	uint64_t before = ob->posted;

	while (ob->posted < ob->tail && tb->flight[o] < tb->max_flight) {
		uint64_t at = ob->posted % tb->opts.log_entries,
			 n = ob->tail - ob->posted;
		size_t off;
		int rc;

		if (at + n > tb->opts.log_entries)
			n = tb->opts.log_entries - at; /* to the end, then on */
		off = (size_t)at * tb->entry_bytes;
		/* our log at @o is the @rank-th in its region */
		rc = ss_fabric_write_imm(
			tb->fabric, o, tb->r_local, out_off + base + off,
			SS_TABLE_R_LOG,
			(size_t)tb->rank * tb->opts.log_entries *
					tb->entry_bytes +
				off,
			(size_t)n * tb->entry_bytes, (uint32_t)n,
			SS__WR(SS__WR_LOG, (uint32_t)o, (uint32_t)n));
		if (rc < 0 && ss_fabric_peer_ok(tb->fabric, o)) {
			/*
			 * Not posted to a live owner (over shm, its ring of
			 * immediates full: a stalled process; the proxy's
			 * posts do not wait for room).  Skipped, these places would put its
			 * count of our log out of step for good; failing it
			 * would not help either (a stopped process still
			 * holds the old log's immediates, and applies them to
			 * what the new log wrote over them).  Posted again
			 * later, in order, once it has room.
			 */
			ss_log_debug("table: peer %d: log WRITE not posted "
				     "(%s); again later",
				     o, ss_last_error()->why);
			break;
		}
		if (rc < 0) {
			/* the owner is gone: these never get there */
			ss__table_count(&tb->st.dropped, n);
			/* their places are free again */
			__atomic_store_n(&ob->head, ob->head + n,
					 __ATOMIC_RELEASE);
		} else {
			ss__table_count(&tb->st.pushed, n);
			ss__table_posted(tb, o, 1);
		}
		ob->posted += n;
	}
	return ob->posted != before;
}

void ss__table_push_done(struct ss_table *tb, const struct ss_completion *c)
{
	if (c->status) {
		struct ss__table_outbound *ob = &tb->out[c->peer];

		/* the WRITE failed: the owner never sees them; their places
		 * are free again (else ss_peer_epochs, when the owner comes
		 * back, counted them as dropped a second time) */
		ss__table_count(&tb->st.dropped, SS__WR_B(c->wr_id));
		ss__table_count(&tb->st.pushed,
				(uint64_t)0 - SS__WR_B(c->wr_id));
		if (ob->tail - ob->head >= SS__WR_B(c->wr_id))
			__atomic_store_n(&ob->head,
					 ob->head + SS__WR_B(c->wr_id),
					 __ATOMIC_RELEASE);
	}
}

bool ss__table_post_pushes(struct ss_table *tb)
{
	size_t width = (size_t)tb->opts.width;
	uint64_t now = ss_now_ns();
	bool did = false;

	for (int c = 0; c < tb->opts.clients; c++) {
		struct ss__table_client *cl = &tb->client[c];
		uint64_t head = atomic_load_explicit(&cl->push_head,
						     memory_order_relaxed),
			 tail = atomic_load_explicit(&cl->push_tail,
						     memory_order_acquire);

		for (; head < tail; head++) {
			uint64_t id = cl->push_ids[head & (cl->push_cap - 1)];
			int owner;
			uint32_t slot;

			ss__table_place_id(tb, id, &owner, &slot);
			if (!ss_place(tb, owner, slot,
				      cl->push_grads +
					      (head & (cl->push_cap - 1)) *
						      width))
				break; /* its log is full: later */
			did = true;
		}
		atomic_store_explicit(&cl->push_head, head,
				      memory_order_release);
	}
	for (int o = 0; o < tb->world; o++) {
		struct ss__table_outbound *ob = &tb->out[o];

		if (o == tb->rank)
			continue;
		/* a new connection's entries go after its hello */
		if (ob->posted < ob->tail && !tb->hello_due[o] &&
		    ss_post_log(tb, o))
			did = true;
		/*
		 * Credits before they run out, and, when someone waits for
		 * the pushes to settle, to see them applied.
		 */
		if (ob->head < ob->posted &&
		    (ob->posted - ob->head > tb->opts.log_entries / 2 ||
		     atomic_load(&tb->flushing) ||
		     now - ob->refreshed_ns > 1000000ull))
			ss_read_head(tb, o);
	}
	return did;
}

bool ss__table_pushes_settled(struct ss_table *tb)
{
	for (int c = 0; c < tb->opts.clients; c++)
		if (atomic_load(&tb->client[c].push_head) !=
		    atomic_load(&tb->client[c].push_tail))
			return false;
	/* read by the flushing thread while the proxy writes: a snapshot */
	for (int o = 0; o < tb->world; o++)
		if (o != tb->rank &&
		    (__atomic_load_n(&tb->out[o].head, __ATOMIC_ACQUIRE) <
			     __atomic_load_n(&tb->out[o].tail,
					     __ATOMIC_ACQUIRE) &&
		     atomic_load(&tb->peer_live[o])))
			return false;
	return true;
}
