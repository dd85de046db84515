// SPDX-License-Identifier: BSD-2-Clause
/* Checkpoints: a round trip, and every kind of file that must be refused. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "shadowsync/shadowsync.h"

#define N 3000001 /* more than one chunk, and odd */
#define LAYOUT 0x1234abcdull

static char dir[] = "/tmp/ss-ckpt-XXXXXX";
static char path[128];
static float *w, *back, *acc, *back_acc;

static void setup(void)
{
	strcpy(dir, "/tmp/ss-ckpt-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/model.ckpt", dir);
	w = malloc(N * sizeof(float));
	back = malloc(N * sizeof(float));
	acc = malloc(N * sizeof(float));
	back_acc = malloc(N * sizeof(float));
	cr_assert(w && back && acc && back_acc);
	for (size_t i = 0; i < N; i++) {
		w[i] = (float)i * 0.001f - 7.0f;
		acc[i] = (float)(i % 1000) * 0.5f;
		back[i] = back_acc[i] = -1.0f;
	}
	cr_assert_eq(ss_checkpoint_save(path, w, NULL, N, LAYOUT, 123456), 0);
}

static void teardown(void)
{
	char cmd[128];

	free(w);
	free(back);
	free(acc);
	free(back_acc);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(checkpoint, .init = setup, .fini = teardown);

/* Whether the reload left the replica and the state as they were. */
static bool untouched(void)
{
	for (size_t i = 0; i < N; i++)
		if (back[i] != -1.0f || back_acc[i] != -1.0f)
			return false;
	return true;
}

static int load(uint64_t *examples)
{
	bool has_state;

	return ss_checkpoint_load(path, back, back_acc, N, LAYOUT, examples,
				  &has_state);
}

Test(checkpoint, round_trip_gives_the_same_bits_and_count)
{
	uint64_t examples = 0;
	struct stat st;

	bool has_state = true;

	cr_assert_eq(ss_checkpoint_load(path, back, back_acc, N, LAYOUT,
					&examples, &has_state),
		     0, "%s", ss_last_error()->why);
	cr_assert_eq(examples, 123456);
	cr_assert_eq(memcmp(w, back, N * sizeof(float)), 0);
	/* saved without state: the caller's state is left alone */
	cr_assert_not(has_state);
	for (size_t i = 0; i < N; i++)
		cr_assert_eq(back_acc[i], -1.0f);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_size, 64 + (off_t)N * 4);
}

/* Adagrad's accumulators travel with the parameters, checksummed too. */
Test(checkpoint, optimizer_state_round_trip)
{
	uint64_t examples = 0;
	bool has_state = false;
	struct stat st;
	int fd;
	unsigned char b;

	cr_assert_eq(ss_checkpoint_save(path, w, acc, N, LAYOUT, 99), 0);
	cr_assert_eq(stat(path, &st), 0);
	cr_assert_eq(st.st_size, 64 + 2 * (off_t)N * 4);
	cr_assert_eq(ss_checkpoint_load(path, back, back_acc, N, LAYOUT,
					&examples, &has_state),
		     0, "%s", ss_last_error()->why);
	cr_assert(has_state);
	cr_assert_eq(examples, 99);
	cr_assert_eq(memcmp(w, back, N * sizeof(float)), 0);
	cr_assert_eq(memcmp(acc, back_acc, N * sizeof(float)), 0);
	/* a run without state to restore (SGD) takes the parameters only */
	memset(back, 0, N * sizeof(float));
	cr_assert_eq(ss_checkpoint_load(path, back, NULL, N, LAYOUT, &examples,
					&has_state),
		     0);
	cr_assert_not(has_state);
	cr_assert_eq(memcmp(w, back, N * sizeof(float)), 0);
	/* one flipped bit in the state refuses the file, nothing written */
	fd = open(path, O_RDWR);
	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &b, 1, 64 + 4 * (off_t)N + 4 * 12345), 1);
	b ^= 0x01;
	cr_assert_eq(pwrite(fd, &b, 1, 64 + 4 * (off_t)N + 4 * 12345), 1);
	close(fd);
	for (size_t i = 0; i < N; i++)
		back[i] = back_acc[i] = -1.0f;
	cr_assert_eq(load(&examples), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->why, "checksum"));
	cr_assert(untouched());
}

/*
 * The caller's record after the floats (train's place in its data):
 * back as saved, its length told when larger than the buffer, a file
 * without one says so, and one flipped bit of it refuses the file.
 */
Test(checkpoint, a_record_after_the_floats_round_trips_checksummed)
{
	struct ss_checkpoint_part p = { w, N }, st = { acc, N },
				  bp = { back, N }, bst = { back_acc, N };
	const char record[] = "where the trainers were";
	char got[64] = { 0 };
	size_t len = 0;
	uint64_t examples;
	bool has_state;
	unsigned char head[64], b;
	struct stat sb;
	int fd;

	cr_assert_eq(ss_checkpoint_save_extra(path, &p, 1, &st, 1, LAYOUT, 77,
					      record, sizeof(record)),
		     0, "%s", ss_last_error()->why);
	cr_assert_eq(stat(path, &sb), 0);
	cr_assert_eq(sb.st_size, 64 + 2 * (off_t)N * 4 + (off_t)sizeof(record));
	cr_assert_eq(ss_checkpoint_load_extra(path, &bp, 1, &bst, 1, LAYOUT,
					      &examples, &has_state, got,
					      sizeof(got), &len),
		     0, "%s", ss_last_error()->why);
	cr_assert_eq(len, sizeof(record));
	cr_assert_str_eq(got, record);
	cr_assert(has_state);
	cr_assert_eq(memcmp(w, back, N * sizeof(float)), 0);
	cr_assert_eq(memcmp(acc, back_acc, N * sizeof(float)), 0);
	/* version 3 where a record is; a plain load ignores it */
	fd = open(path, O_RDONLY);
	cr_assert_eq(pread(fd, head, 64, 0), 64);
	close(fd);
	cr_assert_eq(head[8], 3);
	cr_assert_eq(head[56], sizeof(record));
	cr_assert_eq(load(&examples), 0, "%s", ss_last_error()->why);
	/* a short buffer gets the start, and the whole length */
	memset(got, 0, sizeof(got));
	cr_assert_eq(ss_checkpoint_load_extra(path, &bp, 1, &bst, 1, LAYOUT,
					      &examples, &has_state, got, 5,
					      &len),
		     0);
	cr_assert_eq(len, sizeof(record));
	cr_assert_str_eq(got, "where");
	/* one bit of the record flipped: the checksum refuses it */
	fd = open(path, O_RDWR);
	cr_assert_eq(pread(fd, &b, 1, sb.st_size - 3), 1);
	b ^= 0x04;
	cr_assert_eq(pwrite(fd, &b, 1, sb.st_size - 3), 1);
	close(fd);
	for (size_t i = 0; i < N; i++)
		back[i] = back_acc[i] = -1.0f;
	cr_assert_eq(load(&examples), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->why, "checksum"), "%s",
		  ss_last_error()->why);
	cr_assert(untouched());
	/* a file saved without one: version 2, length 0 */
	cr_assert_eq(ss_checkpoint_save(path, w, NULL, N, LAYOUT, 1), 0);
	len = 99;
	cr_assert_eq(ss_checkpoint_load_extra(path, &bp, 1, NULL, 0, LAYOUT,
					      &examples, &has_state, got,
					      sizeof(got), &len),
		     0);
	cr_assert_eq(len, 0);
	fd = open(path, O_RDONLY);
	cr_assert_eq(pread(fd, head, 64, 0), 64);
	close(fd);
	cr_assert_eq(head[8], 2);
}

Test(checkpoint, truncated_file_is_refused_untouched)
{
	uint64_t examples;

	cr_assert_eq(truncate(path, 64 + (off_t)N * 4 - 1), 0);
	cr_assert_eq(load(&examples), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->why, "truncated"), "%s",
		  ss_last_error()->why);
	cr_assert(untouched());
	cr_assert_eq(truncate(path, 10), 0);
	cr_assert_eq(load(&examples), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->why, "truncated"));
}

Test(checkpoint, flipped_bit_is_refused_untouched)
{
	uint64_t examples;
	int fd = open(path, O_RDWR);
	unsigned char b;

	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &b, 1, 64 + 4 * 2000000 + 1), 1);
	b ^= 0x10;
	cr_assert_eq(pwrite(fd, &b, 1, 64 + 4 * 2000000 + 1), 1);
	close(fd);
	cr_assert_eq(load(&examples), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->why, "checksum"), "%s",
		  ss_last_error()->why);
	cr_assert(untouched());
}

/* Two sign bits: a checksum that only carries bits upward misses these. */
Test(checkpoint, two_flipped_signs_are_refused)
{
	uint64_t examples;
	int fd = open(path, O_RDWR);
	unsigned char b;

	cr_assert_geq(fd, 0);
	for (off_t at = 64 + 4 * 1 + 3; at <= 64 + 4 * 3 + 3; at += 8) {
		cr_assert_eq(pread(fd, &b, 1, at), 1);
		b ^= 0x80;
		cr_assert_eq(pwrite(fd, &b, 1, at), 1);
	}
	close(fd);
	cr_assert_eq(load(&examples), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->why, "checksum"));
	cr_assert(untouched());
}

Test(checkpoint, changed_header_count_is_refused)
{
	uint64_t examples;
	int fd = open(path, O_RDWR);
	unsigned char b = 0x99;

	cr_assert_geq(fd, 0);
	cr_assert_eq(pwrite(fd, &b, 1, 32), 1); /* examples field */
	close(fd);
	cr_assert_eq(load(&examples), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->why, "checksum"));
}

Test(checkpoint, other_layout_is_refused_naming_both)
{
	uint64_t examples;
	bool has_state;

	cr_assert_eq(ss_checkpoint_load(path, back, NULL, N, LAYOUT + 1,
					&examples, &has_state),
		     SS_ELAYOUT);
	cr_assert(strstr(ss_last_error()->what, "00000000001234abcd") ||
			  strstr(ss_last_error()->what, "000000001234abcd"),
		  "%s", ss_last_error()->what);
	cr_assert(strstr(ss_last_error()->hint, "--hash-size"));
	cr_assert_eq(ss_checkpoint_load(path, back, NULL, N - 1, LAYOUT,
					&examples, &has_state),
		     SS_ELAYOUT);
	cr_assert(untouched());
}

/* Flips bit @bit of the header's byte @at. */
static void flip_header_bit(off_t at, int bit)
{
	int fd = open(path, O_RDWR);
	unsigned char b;

	cr_assert_geq(fd, 0);
	cr_assert_eq(pread(fd, &b, 1, at), 1);
	b ^= (unsigned char)(1u << bit);
	cr_assert_eq(pwrite(fd, &b, 1, at), 1);
	close(fd);
}

/* A flipped bit in the layout hash or the count is corruption, not
 * another model: the file as its header describes it does not check. */
Test(checkpoint, flipped_layout_hash_is_corruption_not_another_layout)
{
	uint64_t examples;

	flip_header_bit(16 + 3, 5); /* layout hash */
	cr_assert_eq(load(&examples), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->why, "corrupted"), "%s",
		  ss_last_error()->why);
	cr_assert(untouched());
}

Test(checkpoint, flipped_count_is_corruption_not_another_layout)
{
	uint64_t examples;

	for (int bit = 0; bit < 64; bit += 9) {
		flip_header_bit(24 + bit / 8, bit % 8); /* parameter count */
		cr_assert_eq(load(&examples), SS_EPARSE, "bit %d", bit);
		cr_assert(strstr(ss_last_error()->why, "corrupted"),
			  "bit %d: %s", bit, ss_last_error()->why);
		flip_header_bit(24 + bit / 8, bit % 8);
	}
	cr_assert_eq(load(&examples), 0, "the file checks again");
}

/* A whole file of a larger model into a smaller one: another layout, and
 * the file's floats are checked through a buffer that holds them (one
 * sized for the smaller model overflowed: ASan in make check). */
Test(checkpoint, a_larger_models_file_into_a_smaller_model)
{
	uint64_t examples;
	bool has_state;

	cr_assert_eq(ss_checkpoint_load(path, back, NULL, 1000, LAYOUT + 7,
					&examples, &has_state),
		     SS_ELAYOUT, "%s", ss_last_error()->why);
	cr_assert(untouched());
}

Test(checkpoint, other_file_is_not_a_checkpoint)
{
	uint64_t examples;
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	for (int i = 0; i < 100; i++)
		fputs("0\t1\t2\n", f);
	fclose(f);
	cr_assert_eq(load(&examples), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->why, "not a ShadowSync checkpoint"));
	cr_assert_eq(ss_checkpoint_load("/nonexistent/x", back, NULL, N, LAYOUT,
					&examples, NULL),
		     -ENOENT);
}

/* Whether @path, made of @len bytes of @data, loads with an error whose
 * reason holds @why. */
static bool refused_as(const void *data, size_t len, const char *why)
{
	uint64_t examples;
	FILE *f = fopen(path, "w");

	cr_assert_not_null(f);
	cr_assert_eq(fwrite(data, 1, len, f), len);
	fclose(f);
	return load(&examples) == SS_EPARSE &&
	       strstr(ss_last_error()->why, why) && untouched();
}

/*
 * Files shorter than a header: a foreign or empty one is not called a
 * truncated checkpoint (the hint said it "was not written whole"), one
 * that starts as ours does is.  A longer one than its header says is not
 * called one not written whole either.
 */
Test(checkpoint, short_and_long_files_are_named_for_what_they_are)
{
	char cmd[300];
	uint64_t examples;

	/* the setup's checkpoint with bytes added */
	snprintf(cmd, sizeof(cmd), "echo more >> %s", path);
	cr_assert_eq(system(cmd), 0);
	cr_assert_eq(load(&examples), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->why, "longer than its header says"),
		  "%s", ss_last_error()->why);
	cr_assert(untouched());
	cr_assert(refused_as("", 0, "not a ShadowSync checkpoint"));
	cr_assert(refused_as("24 bytes of someone's!\n", 24,
			     "not a ShadowSync checkpoint"));
	cr_assert(refused_as("SSCKPT\0\0 cut short", 18, "truncated"));
}

/* A save that cannot finish leaves the previous checkpoint whole. */
Test(checkpoint, failed_save_keeps_the_previous_file)
{
	char nowhere[160];
	uint64_t examples;

	snprintf(nowhere, sizeof(nowhere), "%s/no/such/folder/x", dir);
	cr_assert_lt(ss_checkpoint_save(nowhere, w, NULL, N, LAYOUT, 1), 0);
	cr_assert(strstr(ss_last_error()->hint, "folder"));
	/* a save over a folder fails at the rename */
	snprintf(nowhere, sizeof(nowhere), "%s/sub", dir);
	cr_assert_eq(mkdir(nowhere, 0755), 0);
	cr_assert_lt(ss_checkpoint_save(nowhere, w, NULL, N, LAYOUT, 1), 0);
	cr_assert_eq(load(&examples), 0);
	cr_assert_eq(examples, 123456);
	/* and no temporary file is left behind */
	snprintf(nowhere, sizeof(nowhere), "ls %s | grep -q tmp", dir);
	cr_assert_neq(system(nowhere), 0);
}

/*
 * The temporary file has a fixed name, PATH.tmp: one a save left (empty,
 * its header a hole of zeros, or whole) is replaced, anyone else's file
 * is refused and kept (`--data x.tmp --save x` truncated the data).
 */
Test(checkpoint, a_foreign_file_at_the_temporary_name_is_kept)
{
	static const char *const left[] = { "", "\0\0\0\0\0\0\0\0\0\0",
					    "SSCKPT\0\0 and the rest" };
	static const size_t left_len[] = { 0, 10, 22 };
	char tmp[160], text[64] = "";
	uint64_t examples;
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	for (int i = 0; i < 3; i++) {
		f = fopen(tmp, "w");
		cr_assert_not_null(f);
		cr_assert_eq(fwrite(left[i], 1, left_len[i], f), left_len[i]);
		fclose(f);
		cr_assert_eq(ss_checkpoint_save(path, w, NULL, N, LAYOUT, 7), 0,
			     "left by a save, case %d: %s", i,
			     ss_last_error()->why);
		cr_assert_neq(access(tmp, F_OK), 0, "case %d", i);
	}
	f = fopen(tmp, "w");
	cr_assert_not_null(f);
	fputs("1\t2\t3 training data\n", f);
	fclose(f);
	cr_assert_lt(ss_checkpoint_save(path, w, NULL, N, LAYOUT, 8), 0);
	cr_assert(strstr(ss_last_error()->why, "not a checkpoint"), "%s",
		  ss_last_error()->why);
	f = fopen(tmp, "r");
	cr_assert_not_null(f);
	cr_assert_not_null(fgets(text, sizeof(text), f));
	fclose(f);
	cr_assert_str_eq(text, "1\t2\t3 training data\n");
	/* the checkpoint itself is the last good save */
	cr_assert_eq(load(&examples), 0);
	cr_assert_eq(examples, 7);
}

/*
 * A save replaces an earlier checkpoint or an empty file, nothing else:
 * `--save data.txt` renamed a checkpoint over the data.  The check
 * (ss_checkpoint_save_check) says the same before any save.
 */
Test(checkpoint, a_save_replaces_only_a_checkpoint)
{
	char other[160], text[64] = "";
	FILE *f;

	cr_assert_eq(ss_checkpoint_save_check(path), 0,
		     "an earlier checkpoint");
	snprintf(other, sizeof(other), "%s/empty", dir);
	f = fopen(other, "w");
	cr_assert_not_null(f);
	fclose(f);
	cr_assert_eq(ss_checkpoint_save_check(other), 0, "an empty file");
	cr_assert_eq(ss_checkpoint_save(other, w, NULL, N, LAYOUT, 1), 0, "%s",
		     ss_last_error()->why);
	snprintf(other, sizeof(other), "%s/data.txt", dir);
	f = fopen(other, "w");
	cr_assert_not_null(f);
	fputs("1\t2\t3 training data\n", f);
	fclose(f);
	cr_assert_eq(ss_checkpoint_save_check(other), -EEXIST);
	cr_assert(strstr(ss_last_error()->why, "not a checkpoint"), "%s",
		  ss_last_error()->why);
	cr_assert_eq(ss_checkpoint_save(other, w, NULL, N, LAYOUT, 2), -EEXIST);
	f = fopen(other, "r");
	cr_assert_not_null(f);
	cr_assert_not_null(fgets(text, sizeof(text), f));
	fclose(f);
	cr_assert_str_eq(text, "1\t2\t3 training data\n");
	/* a folder, and a foreign temporary file, to the check too */
	cr_assert_lt(ss_checkpoint_save_check(dir), 0);
	cr_assert(strstr(ss_last_error()->why, "folder"), "%s",
		  ss_last_error()->why);
	snprintf(other, sizeof(other), "%s.tmp", path);
	f = fopen(other, "w");
	cr_assert_not_null(f);
	fputs("notes\n", f);
	fclose(f);
	cr_assert_eq(ss_checkpoint_save_check(path), -EEXIST);
	cr_assert(strstr(ss_last_error()->what, ".tmp"), "%s",
		  ss_last_error()->what);
	/* a FIFO there (the check waited for a writer for ever), and a
	 * dangling link (passed, then the save refused it after training) */
	unlink(other);
	cr_assert_eq(mkfifo(other, 0600), 0);
	cr_assert_eq(ss_checkpoint_save_check(path), -EEXIST);
	unlink(other);
	cr_assert_eq(symlink("/nonexistent/x", other), 0);
	cr_assert_eq(ss_checkpoint_save_check(path), -EEXIST);
	unlink(other);
	cr_assert_eq(ss_checkpoint_save_check(path), 0);
}

/*
 * A PATH that is a symbolic link (to storage elsewhere) is saved through:
 * the link stays, its target takes the checkpoint, there yet or not.
 * (The rename replaced the link with a file beside it, on the node.)
 */
Test(checkpoint, a_save_through_a_link_lands_at_its_target)
{
	char link[160], target[200], sub[160];
	struct stat st;
	uint64_t examples;

	snprintf(sub, sizeof(sub), "%s/elsewhere", dir);
	cr_assert_eq(mkdir(sub, 0755), 0);
	for (int there = 0; there < 2; there++) {
		snprintf(link, sizeof(link), "%s/link%d", dir, there);
		snprintf(target, sizeof(target), "%s/model%d.ckpt", sub, there);
		if (there)
			cr_assert_eq(ss_checkpoint_save(target, w, NULL, N,
							LAYOUT, 1),
				     0);
		/* relative, as `ln -s elsewhere/model.ckpt link` makes it */
		cr_assert_eq(symlink(target + strlen(dir) + 1, link), 0);
		cr_assert_eq(ss_checkpoint_save(link, w, NULL, N, LAYOUT, 77),
			     0, "%s", ss_last_error()->why);
		cr_assert_eq(lstat(link, &st), 0);
		cr_assert(S_ISLNK(st.st_mode), "link %d replaced", there);
		cr_assert_eq(ss_checkpoint_load(target, back, back_acc, N,
						LAYOUT, &examples, NULL),
			     0, "target %d: %s", there, ss_last_error()->why);
		cr_assert_eq(examples, 77);
	}
}

/* What a signal handler removes: the save's own temporary file. */
Test(checkpoint, the_temporary_file_of_a_save_through_a_link_is_the_targets)
{
	char link[160], sub[160], tmp[512], want[512], *real;
	char small[8];

	snprintf(sub, sizeof(sub), "%s/there", dir);
	cr_assert_eq(mkdir(sub, 0755), 0);
	snprintf(link, sizeof(link), "%s/plain.ckpt", dir);
	cr_assert_eq(ss_checkpoint_tmp_path(link, tmp, sizeof(tmp)), 0);
	snprintf(want, sizeof(want), "%s.tmp", link);
	cr_assert_str_eq(tmp, want);
	/* a link to a file not there yet, then one that is */
	snprintf(link, sizeof(link), "%s/link", dir);
	cr_assert_eq(symlink("there/model.ckpt", link), 0);
	for (int there = 0; there < 2; there++) {
		cr_assert_eq(ss_checkpoint_tmp_path(link, tmp, sizeof(tmp)), 0);
		if (there) {
			real = realpath(sub, NULL);
			snprintf(want, sizeof(want), "%s/model.ckpt.tmp", real);
			free(real);
		} else {
			snprintf(want, sizeof(want), "%s/there/model.ckpt.tmp",
				 dir);
		}
		cr_assert_str_eq(tmp, want);
		cr_assert_eq(ss_checkpoint_save(link, w, NULL, N, LAYOUT, 1),
			     0);
	}
	cr_assert_eq(ss_checkpoint_tmp_path(link, small, sizeof(small)),
		     -ENAMETOOLONG);
}
