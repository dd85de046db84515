// SPDX-License-Identifier: BSD-2-Clause
/*
 * The applier: gradients the peers WROTE into their logs in our memory,
 * applied to our shard in the order they came, and the count of those
 * applied published in the head region for the senders to READ.
 */
#include "base/adagrad.h"
#include "base/hogwild.h"
#include "table_internal.h"

/* Trainers and the applier step the same rows without locks: Hogwild. */
SS_HOGWILD void ss__table_apply(struct ss_table *tb, uint32_t slot,
				const float *g)
{
	size_t width = (size_t)tb->opts.width;
	float *row = ss__table_slot_row(tb, slot), lr = tb->opts.lr;

	if (tb->opts.update == SS_TABLE_SGD) {
		for (size_t i = 0; i < width; i++)
			row[i] -= lr * g[i];
		return;
	}
	ss__adagrad(row, tb->acc + (size_t)slot * width, g, width, lr,
		    tb->opts.eps);
}

void ss__table_log_arrived(struct ss_table *tb, const struct ss_completion *c)
{
	/* its data is in place: one ordered queue pair, data before imm */
	tb->queued[c->peer] += c->imm;
}

bool ss__table_apply_logs(struct ss_table *tb)
{
	uint32_t slots = tb->slots;
	bool did = false;

	if (atomic_load_explicit(&tb->paused, memory_order_relaxed))
		return false;
	for (int p = 0; p < tb->world; p++) {
		uint64_t applied = 0, before = tb->consumed[p];

		while (tb->consumed[p] < tb->queued[p]) {
			struct ss__table_entry *e = ss__table_entry(
				tb, tb->log_in, p, tb->consumed[p]);

			/* a sender of another layout is refused at connect:
			 * a slot past ours is a defect, skipped and not counted
			 * as applied, so the job's totals show it */
			if (e->slot < slots) {
				ss__table_apply(tb, e->slot, e->g);
				applied++;
			} else if (!tb->bad_slot_warned) {
				tb->bad_slot_warned = true;
				ss_log_error(
					"table: rank %d sent a gradient for "
					"slot %u of a shard of %u: skipped "
					"(and any more like it); report "
					"this",
					p, e->slot, slots);
			}
			tb->consumed[p]++;
		}
		if (tb->consumed[p] != before) {
			atomic_store_explicit(&tb->head_out[p], tb->consumed[p],
					      memory_order_release);
			ss__table_count(&tb->st.applied, applied);
			did = true;
		}
	}
	return did;
}
