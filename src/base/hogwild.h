/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Benign Hogwild races, annotated.
 *
 * Trainer threads update the replica without locks, by design (Hogwild),
 * and the shadow thread reads and writes it while they do: an update that
 * lands between another thread's load and store of one float is lost,
 * which SGD tolerates.  The functions that touch the replica in this way
 * are marked SS_HOGWILD so that ThreadSanitizer does not report those
 * races, and only those: everything else stays checked.  Inside them, copy
 * with loops, not memcpy (which TSan checks wherever it is called from);
 * files that do so compile with no-tree-loop-distribute-patterns so that
 * GCC does not turn the loops back into memcpy calls.
 */
#ifndef SS_HOGWILD_H
#define SS_HOGWILD_H

#define SS_HOGWILD __attribute__((no_sanitize("thread")))

#endif /* SS_HOGWILD_H */
