/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Checkpoints: a replica's parameters on disk, with the optimizer's own
 * state where it has one (Adagrad's accumulators), written atomically and
 * refused on reload when they do not belong to the model being trained.
 *
 * File layout (all integers little-endian), 64 bytes of header, then the
 * parameters, then the optimizer state, as little-endian IEEE-754 floats:
 *
 *   0  magic "SSCKPT\0\0"      8 bytes
 *   8  version (2)             u32
 *  12  header size (64)        u32
 *  16  layout hash             u64   the caller's hash of the model's sizes
 *  24  parameters              u64   count of floats that follow
 *  32  examples                u64   examples trained on, as the saver counted
 *  40  checksum                u64   xxHash64's round over the 64-bit words
 *                                    of the parameters and the state, then
 *                                    header bytes 0..39, then 48..63
 *  48  state                   u64   count of state floats after the
 *                                    parameters: 0, or as many (Adagrad)
 *  56  record                  u64   count of the caller's bytes after
 *                                    the floats (version 3; at most
 *                                    1 MiB): what train resumes from
 *
 * The checksum covers the record's bytes too, after the floats'.  A save
 * without a record writes version 2, whose bytes 56..63 are zero; version
 * 1 (before Adagrad's state was kept) is read too: no state, and the
 * checksum over the parameters, then header bytes 0..39.
 *
 * Threads: any thread, at once with the others, with two limits: one save
 * at a time to a path (the saves share PATH.tmp), and a load fills arrays
 * that no other thread uses meanwhile.  A save's arrays may be written by
 * other threads while it runs (see ss_checkpoint_save()).
 */
#ifndef SHADOWSYNC_CHECKPOINT_H
#define SHADOWSYNC_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SS_CHECKPOINT_VERSION 3

/* What a save appends to PATH for its temporary file (see below). */
#define SS_CHECKPOINT_TMP_SUFFIX ".tmp"

/*
 * ss_checkpoint_save() - write @n floats of @params, and @n of @state
 * unless it is NULL, with @layout_hash and @examples to @path: the
 * temporary file PATH.tmp, fsync, rename over @path, fsync of the folder.
 * A crash or a failure leaves the previous file at @path whole.  Both
 * arrays may be written by trainers meanwhile (Hogwild): what is saved is
 * one racy snapshot whose checksum matches what was written.  Returns 0 or
 * an error naming the file.
 */
int ss_checkpoint_save(const char *path, const float *params,
		       const float *state, size_t n, uint64_t layout_hash,
		       uint64_t examples);

/*
 * ss_checkpoint_load() - verify @path (magic, version, layout hash, size,
 * checksum) and only then read its parameters into @params (@n floats)
 * and, when the file has them and @state is not NULL, its @n state floats
 * into @state.  Returns 0 with *@examples set and *@has_state (unless
 * NULL) saying whether @state was filled, or SS_ELAYOUT / SS_EPARSE / -errno with a
 * detail saying what differed.  @params and @state are untouched on every
 * failure but one: a file rewritten in place, or a read error, between
 * the check and the copy (reported as such).
 */
int ss_checkpoint_load(const char *path, float *params, float *state, size_t n,
		       uint64_t layout_hash, uint64_t *examples,
		       bool *has_state);

/*
 * The same file, its floats gathered from (or scattered into) several
 * arrays laid end to end: a shard's MLPs and rows, its accumulators of
 * both.  The state's parts must add up to as many floats as the
 * parameters'; @state NULL (or @ns 0): none.  A part whose @ptr is NULL
 * is skipped on load (read and checked, not kept).
 */
struct ss_checkpoint_part {
	float *ptr;
	size_t n;
};

int ss_checkpoint_save_parts(const char *path,
			     const struct ss_checkpoint_part *params, int np,
			     const struct ss_checkpoint_part *state, int ns,
			     uint64_t layout_hash, uint64_t examples);
int ss_checkpoint_load_parts(const char *path,
			     const struct ss_checkpoint_part *params, int np,
			     const struct ss_checkpoint_part *state, int ns,
			     uint64_t layout_hash, uint64_t *examples,
			     bool *has_state);

/*
 * With a record of the caller's (@extra_len bytes, at most 1 MiB) after
 * the floats: a trainer's place in its data, for a resume.  A load copies
 * at most @cap bytes of the file's record into @extra and sets
 * *@extra_len (unless NULL) to its full length, 0 for a file without.
 */
int ss_checkpoint_save_extra(const char *path,
			     const struct ss_checkpoint_part *params, int np,
			     const struct ss_checkpoint_part *state, int ns,
			     uint64_t layout_hash, uint64_t examples,
			     const void *extra, size_t extra_len);
int ss_checkpoint_load_extra(const char *path,
			     const struct ss_checkpoint_part *params, int np,
			     const struct ss_checkpoint_part *state, int ns,
			     uint64_t layout_hash, uint64_t *examples,
			     bool *has_state, void *extra, size_t cap,
			     size_t *extra_len);

/*
 * ss_checkpoint_tmp_path() - the temporary file a save to @path writes:
 * PATH.tmp, or TARGET.tmp when @path is a symbolic link (a save lands at
 * its target and keeps the link), into @buf of @size bytes.  For a
 * signal handler to remove a save's half-written file.  Returns 0, or
 * -ENAMETOOLONG.
 */
int ss_checkpoint_tmp_path(const char *path, char *buf, size_t size);

/*
 * ss_checkpoint_save_check() - whether a save to @path may go ahead
 * without harm to another file: where it lands (a link's target) is
 * absent, an empty file or a checkpoint, and its temporary file absent or
 * what an earlier save left.  A save makes the same checks and refuses
 * as this does; calling it first finds the problem before the work that
 * the save was to keep (training).  Returns 0, or -EEXIST (or -errno)
 * with an error naming the file.
 */
int ss_checkpoint_save_check(const char *path);

/*
 * ss_checkpoint_peek() - the header's layout hash, parameter count and
 * examples, unchecked otherwise: to say which job a refused file is from.
 */
int ss_checkpoint_peek(const char *path, uint64_t *layout_hash, uint64_t *n,
		       uint64_t *examples);

/*
 * ss_checkpoint_peek_extra() - the record as ss_checkpoint_load_extra()
 * gives it, unchecked (as ss_checkpoint_peek(): the checksum is the
 * load's): to plan from it before the load.  *@extra_len: 0 for none.
 */
int ss_checkpoint_peek_extra(const char *path, void *extra, size_t cap,
			     size_t *extra_len);

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_CHECKPOINT_H */
