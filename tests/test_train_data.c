// SPDX-License-Identifier: BSD-2-Clause
/* The Criteo reader, the metrics and the synthetic data generator. */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include "shadowsync/shadowsync.h"
#include "shadowsync/train.h"
#include "train/zipf.h"

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* A good line: label, 13 integers (some empty or negative), 26 hashes. */
#define GOOD                                                             \
	"1\t5\t\t-3\t0\t12\t1\t2\t3\t4\t5\t6\t7\t100\t"                  \
	"68fd1e64\t80e26c9b\tfb936136\t7b4723c4\t25c83c98\t7e0ccccf\t"   \
	"de7995b8\t1f89b562\ta73ee510\ta8cd5504\tb2cb9c98\t37c9c164\t"   \
	"2824a5f6\t1adce6ef\t8ba8b39a\t891b62e7\te5ba7672\tf54016b9\t"   \
	"21ddcdc9\tb1252a9d\t07b5194c\t\t3a171ecb\tc5c50484\te8b83407\t" \
	"9727dd16"

static char dir[] = "/tmp/ss-train-XXXXXX";

static void setup(void)
{
	strcpy(dir, "/tmp/ss-train-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	char cmd[128];

	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

TestSuite(data, .init = setup, .fini = teardown);

static const char *write_file(const char *name, const char *text)
{
	static char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fputs(text, f);
	fclose(f);
	return path;
}

Test(data, good_line_is_parsed)
{
	struct ss_example ex;
	char why[160];

	cr_assert_eq(
		ss_parse_example(GOOD, strlen(GOOD), &ex, why, sizeof(why)), 0,
		"%s", why);
	cr_assert_eq(ex.label, 1);
	cr_assert_float_eq(ex.dense[0], log1p(5.0), 1e-6);
	cr_assert_eq(ex.dense[1], 0, "empty is 0");
	cr_assert_eq(ex.dense[2], 0, "negative is clipped to 0");
	cr_assert_float_eq(ex.dense[12], log1p(100.0), 1e-5);
	cr_assert_eq(ex.sparse[0], 0x68fd1e64u);
	cr_assert_eq(ex.sparse[21], 0, "empty hash is 0");
	cr_assert_eq(ex.sparse[25], 0x9727dd16u);
}

static void assert_bad(const char *line, const char *expect)
{
	struct ss_example ex;
	char why[160] = "";

	cr_assert_eq(
		ss_parse_example(line, strlen(line), &ex, why, sizeof(why)),
		SS_EPARSE, "accepted: %s", line);
	cr_assert(strstr(why, expect), "reason '%s' lacks '%s'", why, expect);
}

Test(data, every_kind_of_bad_line)
{
	char line[1024], why[256];
	struct ss_example ex;

	assert_bad("1\t2\t3", "3 fields, want 40");
	assert_bad("", "label");
	snprintf(line, sizeof(line), "%s\textra", GOOD);
	assert_bad(line, "more than 40 fields");
	snprintf(line, sizeof(line), "2%s", GOOD + 1);
	assert_bad(line, "field 1 (label) '2' is not 0 or 1");
	snprintf(line, sizeof(line), "1\t5x%s", GOOD + 3);
	assert_bad(line, "field 2 (I1) '5x' is not an integer");
	/* an integer, too long to be a count (it was "not an integer") */
	snprintf(line, sizeof(line), "1\t1000000000000000000%s", GOOD + 3);
	assert_bad(line, "'1000000000000000000' has more than 18 digits");
	snprintf(line, sizeof(line), "1\t999999999999999999%s", GOOD + 3);
	cr_assert_eq(
		ss_parse_example(line, strlen(line), &ex, why, sizeof(why)), 0,
		"%s", why);
	snprintf(line, sizeof(line), "%s", GOOD);
	memcpy(strstr(line, "68fd1e64"), "68fd1e6g", 8);
	assert_bad(line, "field 15 (C1) '68fd1e6g' is not 8 hex digits");
	snprintf(line, sizeof(line), "%s", GOOD);
	memcpy(strstr(line, "9727dd16"), "9727d\0", 6);
	assert_bad(line, "(C26) '9727d' is not 8 hex digits");
}

Test(data, crlf_and_missing_final_newline)
{
	char text[4096];
	struct ss_reader *r;
	struct ss_example ex;

	snprintf(text, sizeof(text), "%s\r\n%s", GOOD, GOOD); /* no final \n */
	cr_assert_eq(ss_reader_open(&r, write_file("crlf.txt", text), 0, 0,
				    SS_BAD_LINES_FAIL),
		     0);
	cr_assert_eq(ss_reader_next(r, &ex), 1, "%s", ss_last_error()->why);
	cr_assert_eq(ex.sparse[25], 0x9727dd16u, "CR not stripped");
	cr_assert_eq(ss_reader_next(r, &ex), 1, "%s", ss_last_error()->why);
	cr_assert_eq(ss_reader_next(r, &ex), 0);
	ss_reader_close(&r);
	cr_assert_null(r);
}

Test(data, error_names_file_and_line)
{
	char text[4096];
	struct ss_reader *r;
	struct ss_example ex;
	const char *path;

	snprintf(text, sizeof(text), "%s\n%s\n1\tbad\n%s\n", GOOD, GOOD, GOOD);
	path = write_file("bad.txt", text);
	cr_assert_eq(ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_FAIL), 0);
	cr_assert_eq(ss_reader_next(r, &ex), 1);
	cr_assert_eq(ss_reader_next(r, &ex), 1);
	cr_assert_eq(ss_reader_next(r, &ex), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->what, "bad.txt:3"), "%s",
		  ss_last_error()->what);
	cr_assert(strstr(ss_last_error()->hint, "--bad-lines=skip"));
	ss_reader_close(&r);

	/* The same line found from a range that starts mid-file. */
	cr_assert_eq(ss_reader_open(&r, path, strlen(GOOD) + 5, 0,
				    SS_BAD_LINES_FAIL),
		     0);
	cr_assert_eq(ss_reader_next(r, &ex), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->what, "bad.txt:3"), "%s",
		  ss_last_error()->what);
	ss_reader_close(&r);

	/*
	 * From a range that starts on line 2, the bad line is its second:
	 * the lines before the range are counted once, then added.
	 */
	cr_assert_eq(ss_reader_open(&r, path, 1, 0, SS_BAD_LINES_FAIL), 0);
	cr_assert_eq(ss_reader_next(r, &ex), 1);
	cr_assert_eq(ss_reader_next(r, &ex), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->what, "bad.txt:3"), "%s",
		  ss_last_error()->what);
	ss_reader_close(&r);

	/* Skipped and counted instead. */
	cr_assert_eq(ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_SKIP), 0);
	for (int i = 0; i < 3; i++)
		cr_assert_eq(ss_reader_next(r, &ex), 1);
	cr_assert_eq(ss_reader_next(r, &ex), 0);
	cr_assert_eq(ss_reader_skipped(r), 1);
	ss_reader_close(&r);
}

/*
 * Each line skipped from a range that starts mid-file is named in the
 * debug log by its byte in the whole file (a line number would cost a
 * pass over the file before the range, for every range).
 */
Test(data, skipped_lines_are_named_by_their_byte_mid_file)
{
	char text[4096], log[4096];
	struct ss_reader *r;
	struct ss_example ex;
	const char *path;
	FILE *err = tmpfile();
	int saved = dup(2);
	size_t n;

	snprintf(text, sizeof(text), "%s\n1\tbad\n%s\n2\tbad\n%s\n", GOOD, GOOD,
		 GOOD);
	path = write_file("skips.txt", text);
	cr_assert_not_null(err);
	ss_log_set_level(SS_LOG_DEBUG);
	fflush(stderr);
	dup2(fileno(err), 2);
	cr_assert_eq(ss_reader_open(&r, path, 1, 0, SS_BAD_LINES_SKIP), 0);
	cr_assert_eq(ss_reader_next(r, &ex), 1);
	cr_assert_eq(ss_reader_next(r, &ex), 1);
	cr_assert_eq(ss_reader_next(r, &ex), 0);
	cr_assert_eq(ss_reader_skipped(r), 2);
	ss_reader_close(&r);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	rewind(err);
	n = fread(log, 1, sizeof(log) - 1, err);
	log[n] = '\0';
	fclose(err);
	snprintf(text, sizeof(text),
		 "skips.txt: skipped the line at byte %zu: ", strlen(GOOD) + 1);
	cr_assert(strstr(log, text), "wanted '%s' in: %s", text, log);
	snprintf(text, sizeof(text),
		 "skips.txt: skipped the line at byte %zu: ",
		 2 * strlen(GOOD) + 8);
	cr_assert(strstr(log, text), "wanted '%s' in: %s", text, log);
}

Test(data, missing_file_is_named)
{
	struct ss_reader *r;

	cr_assert_eq(ss_reader_open(&r, "/nonexistent/day_0", 0, 0,
				    SS_BAD_LINES_FAIL),
		     -ENOENT);
	cr_assert(strstr(ss_last_error()->what, "/nonexistent/day_0"));
}

/* Count the lines of [begin, end). */
static int count_range(const char *path, uint64_t begin, uint64_t end,
		       float *label_sum)
{
	struct ss_reader *r;
	struct ss_example ex;
	int n = 0, rc;

	cr_assert_eq(ss_reader_open(&r, path, begin, end, SS_BAD_LINES_FAIL),
		     0);
	while ((rc = ss_reader_next(r, &ex)) == 1) {
		n++;
		*label_sum += ex.label;
	}
	cr_assert_eq(rc, 0, "%s: %s", ss_last_error()->what,
		     ss_last_error()->why);
	ss_reader_close(&r);
	return n;
}

/*
 * Files read as one stream: any cut of the stream's bytes into ranges
 * reads every example once, in the order of the files' concatenation;
 * an empty file, and a last line without its newline, are no trouble;
 * a bad line is named by its own file and line.
 */
Test(data, several_files_read_as_one_stream)
{
	static const char *const names[] = { "s0.txt", "s1.txt", "s2.txt",
					     "s3.txt" };
	char paths[4][256];
	const char *p[4];
	char text[8192] = "", *at = text;
	uint64_t size = 0;
	uint32_t want[64], got[64];
	int n_want = 0;
	struct ss_reader *r;
	struct ss_example ex;

	/* 5 lines, none, 3 ending without a newline, 4: hashes 1..12 */
	for (int f = 0, v = 1; f < 4; f++) {
		int lines = f == 0 ? 5 : f == 1 ? 0 : f == 2 ? 3 : 4;

		at = text;
		*at = '\0';
		for (int l = 0; l < lines; l++, v++) {
			at += sprintf(at, "%d", v & 1);
			for (int k = 0; k < 13; k++)
				at += sprintf(at, "\t%d", v);
			for (int k = 0; k < 26; k++)
				at += sprintf(at, "\t%08x", (unsigned)v);
			if (f != 2 || l + 1 < lines)
				*at++ = '\n';
			*at = '\0';
			want[n_want++] = (uint32_t)v;
		}
		snprintf(paths[f], sizeof(paths[f]), "%s",
			 write_file(names[f], text));
		p[f] = paths[f];
		size += strlen(text);
	}
	for (int parts = 1; parts <= 9; parts++) {
		int n = 0;

		for (int k = 0; k < parts; k++) {
			int rc;

			cr_assert_eq(
				ss_reader_open_files(&r, p, 4,
						     size * (uint64_t)k /
							     (uint64_t)parts,
						     size * (uint64_t)(k + 1) /
							     (uint64_t)parts,
						     SS_BAD_LINES_FAIL),
				0, "%s", ss_last_error()->why);
			while ((rc = ss_reader_next(r, &ex)) == 1) {
				cr_assert_lt(n, 64);
				got[n++] = ex.sparse[0];
			}
			cr_assert_eq(rc, 0, "%s: %s", ss_last_error()->what,
				     ss_last_error()->why);
			ss_reader_close(&r);
		}
		cr_assert_eq(n, n_want, "%d parts read %d lines", parts, n);
		for (int i = 0; i < n; i++)
			cr_assert_eq(got[i], want[i], "%d parts: line %d",
				     parts, i);
	}
	/* a bad line in the third file: its name and its own line */
	write_file("s2.txt", GOOD "\nnot a line\n");
	cr_assert_eq(ss_reader_open_files(&r, p, 4, 0, 0, SS_BAD_LINES_FAIL),
		     0);
	while (ss_reader_next(r, &ex) == 1)
		;
	cr_assert(strstr(ss_last_error()->what, "s2.txt:2"), "%s",
		  ss_last_error()->what);
	ss_reader_close(&r);
}

Test(data, byte_ranges_read_every_line_once)
{
	struct ss_gen_options o;
	struct ss_metrics m;
	char path[256];
	FILE *f;
	long size;
	float all = 0;
	int total;

	snprintf(path, sizeof(path), "%s/gen.txt", dir);
	ss_gen_options_init(&o);
	o.examples = 997;
	f = fopen(path, "w");
	cr_assert_eq(ss_gen_data(f, &o, &m), 0);
	size = ftell(f);
	fclose(f);
	total = count_range(path, 0, 0, &all);
	cr_assert_eq(total, 997);
	for (int parts = 2; parts <= 7; parts++) {
		int n = 0;
		float labels = 0;

		for (int k = 0; k < parts; k++)
			n += count_range(path, (uint64_t)(size * k / parts),
					 (uint64_t)(size * (k + 1) / parts),
					 &labels);
		cr_assert_eq(n, total, "%d parts read %d lines", parts, n);
		cr_assert_eq(labels, all, "%d parts", parts);
	}
}

/*
 * A plain file holding gzip's magic bytes in a line (binary junk, skipped
 * as malformed) is read as plain from any byte: a range may start
 * there, where zlib would take the bytes for a gzip header.
 */
Test(data, gzip_magic_inside_a_plain_file_is_plain)
{
	char path[256], good[512] = "1", text[8192] = "";
	size_t junk, len;
	FILE *f;

	for (int i = 0; i < SS_DENSE; i++)
		strcat(good, "\t7");
	for (int j = 0; j < SS_SPARSE; j++)
		strcat(good, "\t68fd1e64");
	strcat(good, "\n");
	for (int i = 0; i < 5; i++)
		strcat(text, good);
	junk = strlen(text);
	strcat(text, "0\tjunk\x1f\x8b\x08\x00binary\n");
	for (int i = 0; i < 5; i++)
		strcat(text, good);
	len = strlen(text);
	snprintf(path, sizeof(path), "%s/magic.txt", dir);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fwrite(text, 1, len, f);
	fclose(f);
	for (size_t at = junk; at < junk + 12; at++) {
		int n = 0;

		for (int k = 0; k < 2; k++) {
			struct ss_reader *r;
			struct ss_example ex;
			int rc;

			cr_assert_eq(ss_reader_open(&r, path, k ? at : 0,
						    k ? 0 : at,
						    SS_BAD_LINES_SKIP),
				     0);
			while ((rc = ss_reader_next(r, &ex)) == 1)
				n++;
			cr_assert_eq(rc, 0, "split at %zu: %s: %s", at,
				     ss_last_error()->what,
				     ss_last_error()->why);
			ss_reader_close(&r);
		}
		cr_assert_eq(n, 10, "split at %zu: %d examples", at, n);
	}
}

/* ---- gzip ---------------------------------------------------------------- */

/* @n generated examples in @dir/@name; the file's bytes in *@text. */
static size_t gen_text(const char *name, int n, char **text)
{
	struct ss_gen_options o;
	struct ss_metrics m;
	char path[256];
	size_t len;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	ss_gen_options_init(&o);
	o.examples = (uint64_t)n;
	f = fopen(path, "w+");
	cr_assert_eq(ss_gen_data(f, &o, &m), 0);
	len = (size_t)ftell(f);
	*text = malloc(len + 1);
	rewind(f);
	cr_assert_eq(fread(*text, 1, len, f), len);
	(*text)[len] = '\0';
	fclose(f);
	return len;
}

/* @len bytes of @text into @dir/@name as one gzip member (appended). */
static const char *write_gz(const char *name, const char *text, size_t len,
			    const char *mode)
{
	static char path[256];
	gzFile f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = gzopen(path, mode);
	cr_assert_not_null(f);
	cr_assert_eq(gzwrite(f, text, (unsigned)len), (int)len);
	cr_assert_eq(gzclose(f), Z_OK);
	return path;
}

/* The examples of [@begin, @end) of @paths into @ex (at most @max). */
static int read_examples(const char *const *paths, int n, uint64_t begin,
			 uint64_t end, struct ss_example *ex, int max)
{
	struct ss_reader *r;
	int got = 0, rc;

	cr_assert_eq(ss_reader_open_files(&r, paths, n, begin, end,
					  SS_BAD_LINES_FAIL),
		     0, "%s: %s", ss_last_error()->what, ss_last_error()->why);
	while (got < max && (rc = ss_reader_next(r, &ex[got])) == 1)
		got++;
	cr_assert_eq(rc, 0, "%s: %s", ss_last_error()->what,
		     ss_last_error()->why);
	ss_reader_close(&r);
	return got;
}

/* Both lists hold the same examples, bit for bit. */
static void assert_same(const struct ss_example *a, int na,
			const struct ss_example *b, int nb, const char *what)
{
	cr_assert_eq(na, nb, "%s: %d examples against %d", what, na, nb);
	for (int i = 0; i < na; i++)
		cr_assert_eq(memcmp(&a[i], &b[i], sizeof(*a)), 0,
			     "%s: example %d differs", what, i);
}

/*
 * A gzip file reads as its plain copy: whole, and cut into byte ranges
 * (bytes of the uncompressed data) each range holds the same lines as
 * the plain file's, so every line once; its size is the uncompressed one.
 */
Test(data, gzip_reads_as_its_plain_copy)
{
	char *text, plain[256], gz[256];
	const char *pp[1] = { plain }, *pg[1] = { gz };
	struct ss_example *a = calloc(2000, sizeof(*a)),
			  *b = calloc(2000, sizeof(*b));
	size_t len = gen_text("p.txt", 997, &text);
	uint64_t size;
	bool is_gz;
	int na, nb;

	snprintf(plain, sizeof(plain), "%s/p.txt", dir);
	snprintf(gz, sizeof(gz), "%s", write_gz("p.gz", text, len, "wb"));
	cr_assert_eq(ss_data_size(gz, &size, &is_gz), 0);
	cr_assert(is_gz);
	cr_assert_eq(size, len);
	cr_assert_eq(ss_data_size(plain, &size, &is_gz), 0);
	cr_assert_not(is_gz);
	na = read_examples(pp, 1, 0, 0, a, 2000);
	nb = read_examples(pg, 1, 0, 0, b, 2000);
	cr_assert_eq(na, 997);
	assert_same(a, na, b, nb, "whole");
	for (int parts = 2; parts <= 5; parts++) {
		int total = 0;

		for (int k = 0; k < parts; k++) {
			uint64_t from = len * (uint64_t)k / (uint64_t)parts,
				 to = len * (uint64_t)(k + 1) / (uint64_t)parts;

			na = read_examples(pp, 1, from, to, a, 2000);
			nb = read_examples(pg, 1, from, to, b, 2000);
			assert_same(a, na, b, nb, "a range");
			total += nb;
		}
		cr_assert_eq(total, 997, "%d parts read %d lines", parts,
			     total);
	}
	free(text);
	free(a);
	free(b);
}

/*
 * Two gzip files concatenated (cat a.gz b.gz) read as the concatenation
 * of their data; a reader reopened where another stopped (ss_reader_tell)
 * goes on there.
 */
Test(data, gzip_members_and_reopening_where_one_stopped)
{
	char *text, gz[256], plain[256];
	const char *p[1] = { gz }, *pp[1] = { plain };
	struct ss_example *a = calloc(1000, sizeof(*a)),
			  *b = calloc(1000, sizeof(*b));
	size_t len = gen_text("m.txt", 500, &text), half;
	struct ss_reader *r;
	uint64_t size, at;
	int na, nb = 0, rc;

	half = (size_t)(strchr(text + len / 2, '\n') + 1 - text);
	snprintf(gz, sizeof(gz), "%s", write_gz("m.gz", text, half, "wb"));
	write_gz("m.gz", text + half, len - half, "ab");
	cr_assert_eq(ss_data_size(gz, &size, NULL), 0);
	cr_assert_eq(size, len);
	snprintf(plain, sizeof(plain), "%s/m.txt", dir);
	na = read_examples(pp, 1, 0, 0, a, 1000);
	cr_assert_eq(na, 500);
	/* 3 readers in turn, each reopened where the last stopped */
	at = 0;
	for (int k = 0; k < 3; k++) {
		cr_assert_eq(ss_reader_open_files(&r, p, 1, at, 0,
						  SS_BAD_LINES_FAIL),
			     0);
		for (int i = 0; i < (k < 2 ? 123 : 1000) &&
				(rc = ss_reader_next(r, &b[nb])) == 1;
		     i++)
			nb++;
		at = ss_reader_tell(r);
		ss_reader_close(&r);
	}
	assert_same(a, na, b, nb, "members, reopened");
	cr_assert_eq(at, len);
	free(text);
	free(a);
	free(b);
}

/* Plain and gzip files read as one stream: any cut, every line once. */
Test(data, plain_and_gzip_files_as_one_stream)
{
	char *text, paths[4][256], plain[256];
	const char *p[4], *pp[1] = { plain };
	struct ss_example *a = calloc(800, sizeof(*a)),
			  *b = calloc(800, sizeof(*b));
	size_t len = gen_text("all.txt", 400, &text), cut[5] = { 0 };
	int na, nb;

	/* four pieces of 100 lines: plain, gzip, plain, gzip */
	for (int k = 1; k < 4; k++) {
		char *at = text + cut[k - 1];

		for (int l = 0; l < 100; l++)
			at = strchr(at, '\n') + 1;
		cut[k] = (size_t)(at - text);
	}
	cut[4] = len;
	for (int k = 0; k < 4; k++) {
		char name[16],
			*piece = strndup(text + cut[k], cut[k + 1] - cut[k]);

		snprintf(name, sizeof(name), "f%d", k);
		snprintf(paths[k], sizeof(paths[k]), "%s",
			 k & 1 ? write_gz(name, piece, strlen(piece), "wb") :
				 write_file(name, piece));
		p[k] = paths[k];
		free(piece);
	}
	snprintf(plain, sizeof(plain), "%s/all.txt", dir);
	na = read_examples(pp, 1, 0, 0, a, 800);
	for (int parts = 1; parts <= 7; parts++) {
		nb = 0;
		for (int k = 0; k < parts; k++)
			nb += read_examples(
				p, 4, len * (uint64_t)k / (uint64_t)parts,
				len * (uint64_t)(k + 1) / (uint64_t)parts,
				b + nb, 800 - nb);
		assert_same(a, na, b, nb, "mixed");
	}
	free(text);
	free(a);
	free(b);
}

/* The file's bytes, cut to @keep, or with byte @flip inverted. */
static void damage(const char *path, long keep, long flip)
{
	FILE *f = fopen(path, "r+");
	int c;

	cr_assert_not_null(f);
	if (keep >= 0)
		cr_assert_eq(ftruncate(fileno(f), keep), 0);
	if (flip >= 0) {
		cr_assert_eq(fseek(f, flip, SEEK_SET), 0);
		c = fgetc(f);
		cr_assert_eq(fseek(f, flip, SEEK_SET), 0);
		fputc(~c & 0xff, f);
	}
	fclose(f);
}

/* Examples of @path read to the end (as standard input, as train --data -
 * reads it, with @in), counted in *@got. */
static int read_to_end(const char *path, bool in, enum ss_bad_lines policy,
		       int *got)
{
	struct ss_reader *r;
	struct ss_example ex;
	int saved = dup(0), fd = open(path, O_RDONLY), rc;

	cr_assert(saved >= 0 && fd >= 0);
	cr_assert_eq(dup2(fd, 0), 0);
	close(fd);
	*got = 0;
	rc = ss_reader_open(&r, in ? "-" : path, 0, 0, policy);
	if (rc == 0) {
		while ((rc = ss_reader_next(r, &ex)) == 1)
			++*got;
		ss_reader_close(&r);
	}
	cr_assert_eq(dup2(saved, 0), 0);
	close(saved);
	return rc;
}

/*
 * A truncated or corrupted gzip file is an error naming the file, when
 * its length is measured or, read from standard input, at the line
 * reached: never a short read, nor a bad line --bad-lines skip passes.
 */
Test(data, truncated_or_corrupted_gzip_is_an_error)
{
	char *text, gz[256], what[300];
	size_t len = gen_text("t.txt", 300, &text);
	struct stat st;
	uint64_t size;
	int got;

	snprintf(gz, sizeof(gz), "%s", write_gz("t.gz", text, len, "wb"));
	cr_assert_eq(read_to_end(gz, true, SS_BAD_LINES_FAIL, &got), 0);
	cr_assert_eq(got, 300, "the whole file from standard input");
	cr_assert_eq(stat(gz, &st), 0);
	damage(gz, st.st_size / 2, -1);
	cr_assert_eq(ss_data_size(gz, &size, NULL), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->what, "t.gz"), "%s",
		  ss_last_error()->what);
	cr_assert(strstr(ss_last_error()->why, "truncated"), "%s",
		  ss_last_error()->why);
	for (int k = 0; k < 4; k++) {
		cr_assert_eq(read_to_end(gz, k & 1,
					 k & 2 ? SS_BAD_LINES_SKIP :
						 SS_BAD_LINES_FAIL,
					 &got),
			     SS_EPARSE);
		cr_assert_lt(got, 300);
		snprintf(what, sizeof(what), "'%s', line %d", k & 1 ? "-" : gz,
			 got + 1);
		cr_assert(strstr(ss_last_error()->what, what), "%s",
			  ss_last_error()->what);
		cr_assert(strstr(ss_last_error()->why, "truncated"), "%s",
			  ss_last_error()->why);
	}
	/* a byte of the compressed data changed */
	write_gz("t.gz", text, len, "wb");
	damage(gz, -1, st.st_size / 2);
	cr_assert_eq(ss_data_size(gz, &size, NULL), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->what, "t.gz"));
	cr_assert(strstr(ss_last_error()->why, "gzip data"), "%s",
		  ss_last_error()->why);
	cr_assert_eq(read_to_end(gz, true, SS_BAD_LINES_SKIP, &got), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->why, "gzip data"), "%s",
		  ss_last_error()->why);
	free(text);
}

Test(data, a_large_file_in_bounded_memory, .timeout = 120)
{
	struct ss_gen_options o;
	struct ss_metrics m;
	struct rusage before, after;
	struct ss_reader *r;
	struct ss_example ex;
	char path[256];
	FILE *f;
	long n = 0;

	snprintf(path, sizeof(path), "%s/large.txt", dir);
	ss_gen_options_init(&o);
	o.examples = 150000; /* about 30 MB */
	f = fopen(path, "w");
	cr_assert_eq(ss_gen_data(f, &o, &m), 0);
	fclose(f);
	/* The generator's own arrays are freed; what reading adds is small. */
	getrusage(RUSAGE_SELF, &before);
	cr_assert_eq(ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_FAIL), 0);
	while (ss_reader_next(r, &ex) == 1)
		n++;
	ss_reader_close(&r);
	getrusage(RUSAGE_SELF, &after);
	cr_assert_eq(n, 150000);
	cr_assert_lt(after.ru_maxrss - before.ru_maxrss, 4096,
		     "reading 30 MB grew the peak RSS by %ld KiB",
		     after.ru_maxrss - before.ru_maxrss);
}

/* ---- metrics ------------------------------------------------------------ */

Test(metrics, against_hand_computed_values)
{
	const float p[] = { 0.1f, 0.4f, 0.35f, 0.8f };
	const float y[] = { 0, 0, 1, 1 };
	struct ss_metrics m;
	double ll = -(log(0.9) + log(0.6) + log(0.35) + log(0.8)) / 4;

	cr_assert_eq(ss_metrics_compute(p, y, 4, &m), 0);
	cr_assert_float_eq(m.log_loss, ll, 1e-6);
	cr_assert_float_eq(m.ctr, 0.5, 1e-12);
	cr_assert_float_eq(m.ne, ll / log(2.0), 1e-6);
	/* pairs (pos, neg): (0.35, 0.1) yes, (0.35, 0.4) no, 0.8 beats both */
	cr_assert_float_eq(m.auc, 0.75, 1e-12);
	cr_assert_float_eq(m.calibration, (0.1 + 0.4 + 0.35 + 0.8) / 2, 1e-6);
}

Test(metrics, ties_count_half_and_constant_predictor_has_ne_1)
{
	const float p[] = { 0.25f, 0.25f, 0.25f, 0.25f };
	const float y[] = { 0, 1, 0, 0 };
	struct ss_metrics m;

	cr_assert_eq(ss_metrics_compute(p, y, 4, &m), 0);
	cr_assert_float_eq(m.auc, 0.5, 1e-12);
	/* predicting the click rate itself: NE is exactly 1 */
	cr_assert_float_eq(m.ne, 1.0, 1e-6);
	cr_assert_float_eq(m.calibration, 1.0, 1e-6);
	cr_assert_eq(ss_metrics_compute(p, y, 0, &m), -EINVAL);
}

/*
 * A diverged model's NaN predictions give NaN metrics and are counted:
 * the sort and the tie loop of the AUC once spun for ever on them, and
 * fmin/fmax passed them off as 1e-7 in the log loss.
 */
Test(metrics, predictions_that_are_not_numbers_are_counted, .timeout = 10)
{
	const float p[] = { 0.25f, NAN, 0.5f, INFINITY, NAN };
	const float y[] = { 0, 1, 0, 0, 1 };
	struct ss_metrics m;

	cr_assert_eq(ss_metrics_compute(p, y, 5, &m), 0);
	cr_assert_eq(m.not_numbers, 3);
	cr_assert(isnan(m.ne) && isnan(m.auc) && isnan(m.log_loss) &&
		  isnan(m.calibration));
	cr_assert_float_eq(m.ctr, 0.4, 1e-12);
	cr_assert_eq(ss_metrics_compute(p, y, 1, &m), 0);
	cr_assert_eq(m.not_numbers, 0);
}

/* ---- the generator ------------------------------------------------------ */

/* The progress lines' running figures: 4 examples, 1 click, loss 0.5. */
Test(metrics, running_loss_and_ne_for_progress_lines)
{
	struct ss_train_progress p = { .examples = 4,
				       .clicks = 1,
				       .loss_micro = 2000000 };
	uint64_t n;
	double loss, ne, h = -(0.25 * log(0.25) + 0.75 * log(0.75));

	ss_train_progress_read(&p, &n, &loss, &ne);
	cr_assert_eq(n, 4);
	cr_assert_float_eq(loss, 0.5, 1e-9);
	cr_assert_float_eq(ne, 0.5 / h, 1e-9, "NE %f, want %f", ne, 0.5 / h);
	p = (struct ss_train_progress){ 0 };
	ss_train_progress_read(&p, &n, &loss, &ne);
	cr_assert(n == 0 && loss == 0 && ne == 0);
}

Test(data, generator_is_seeded_and_hits_its_click_rate)
{
	struct ss_gen_options o;
	struct ss_metrics a, b;
	char *buf1 = NULL, *buf2 = NULL;
	size_t len1, len2;
	FILE *f1, *f2;

	ss_gen_options_init(&o);
	o.examples = 20000;
	o.ctr = 0.2;
	f1 = open_memstream(&buf1, &len1);
	f2 = open_memstream(&buf2, &len2);
	cr_assert_eq(ss_gen_data(f1, &o, &a), 0);
	cr_assert_eq(ss_gen_data(f2, &o, &b), 0);
	fclose(f1);
	fclose(f2);
	cr_assert_eq(len1, len2);
	cr_assert_eq(memcmp(buf1, buf2, len1), 0, "same seed, other data");
	cr_assert_float_eq(a.ctr, 0.2, 0.015, "click rate %f", a.ctr);
	/* a teacher that knows the truth beats the constant predictor */
	cr_assert_lt(a.ne, 0.95, "teacher NE %f", a.ne);
	cr_assert_gt(a.auc, 0.65, "teacher AUC %f", a.auc);
	cr_assert_float_eq(a.calibration, 1.0, 0.08);
	free(buf1);
	free(buf2);

	/* Another stream: other examples of the same teacher. */
	o.stream = 1;
	f1 = open_memstream(&buf1, &len1);
	cr_assert_eq(ss_gen_data(f1, &o, &b), 0);
	fclose(f1);
	cr_assert(len1 != len2 || memcmp(buf1, buf2, len1) != 0,
		  "stream 1 repeated stream 0");
	cr_assert_float_eq(b.ctr, 0.2, 0.015);
	cr_assert_float_eq(b.ne, a.ne, 0.05, "same teacher, NE %f vs %f", b.ne,
			   a.ne);
	free(buf1);

	/*
	 * Logits spread wide (--value-scale 10): the bias that gives 0.001
	 * lies past the [-20, 20] once searched (which gave 0.42).
	 */
	o.stream = 0;
	o.value_scale = 10;
	o.ctr = 0.001;
	f1 = open_memstream(&buf1, &len1);
	cr_assert_eq(ss_gen_data(f1, &o, &b), 0);
	fclose(f1);
	cr_assert(b.ctr > 0.0003 && b.ctr < 0.002, "click rate %f for 0.001",
		  b.ctr);
	free(buf1);
}

/* Draws of k^-s over 1..n, counted into @hits[1..cap]; the rest in hits[0]. */
static void zipf_count(uint64_t n, double s, int draws, double *hits,
		       uint64_t cap)
{
	struct ss__zipf z;
	uint64_t rng = 42;

	ss__zipf_init(&z, n, s);
	for (int i = 0; i < draws; i++) {
		uint64_t k = ss__zipf_draw(&z, &rng);

		cr_assert(k >= 1 && k <= n, "draw %llu outside 1..%llu",
			  (unsigned long long)k, (unsigned long long)n);
		hits[k <= cap ? k : 0]++;
	}
}

/* Sum of k^-s over [a, b]. */
static double zipf_mass(uint64_t a, uint64_t b, double s)
{
	double m = 0;

	for (uint64_t k = a; k <= b; k++)
		m += pow((double)k, -s);
	return m;
}

/*
 * Rejection-inversion draws have the Zipf law's frequencies: every value
 * of a small range within 5 standard deviations, and over 10 million
 * values the head, the first 100 and the tail past 100000 (13 % of the
 * draws at s 1.1), and uniform draws at s 0.
 */
Test(data, zipf_draws_follow_the_law)
{
	enum { DRAWS = 400000 };
	static double hits[101];
	const double s_small[] = { 1.1, 0.0, 2.0 };

	for (int t = 0; t < 3; t++) {
		double total = zipf_mass(1, 30, s_small[t]);

		memset(hits, 0, sizeof(hits));
		zipf_count(30, s_small[t], DRAWS, hits, 30);
		for (int k = 1; k <= 30; k++) {
			double p = pow(k, -s_small[t]) / total,
			       sd = sqrt(DRAWS * p * (1 - p));

			cr_assert_float_eq(hits[k], DRAWS * p, 5 * sd + 1,
					   "s %g, value %d: %g draws, want %g",
					   s_small[t], k, hits[k], DRAWS * p);
		}
	}
	{
		const uint64_t n = 10000000;
		double total = zipf_mass(1, n, 1.1), head = 0;

		memset(hits, 0, sizeof(hits));
		zipf_count(n, 1.1, DRAWS, hits, 100);
		for (int k = 1; k <= 100; k++)
			head += hits[k];
		cr_assert_float_eq(hits[1] / DRAWS, 1 / total, 0.003);
		cr_assert_float_eq(head / DRAWS, zipf_mass(1, 100, 1.1) / total,
				   0.004);
	}
	{
		const uint64_t n = 10000000;
		struct ss__zipf z;
		uint64_t rng = 7, far = 0;
		double want = zipf_mass(100001, n, 1.1) / zipf_mass(1, n, 1.1);

		ss__zipf_init(&z, n, 1.1);
		for (int i = 0; i < DRAWS; i++)
			far += ss__zipf_draw(&z, &rng) > 100000;
		cr_assert_float_eq((double)far / DRAWS, want, 0.004,
				   "tail past 100000: %g, want %g",
				   (double)far / DRAWS, want);
	}
}

/*
 * --shape criteo: each feature has Criteo Kaggle's number of values, from
 * 3 (C9) to 10 million (C3); 20000 examples see thousands of values of C3
 * and never more than C9's 3.
 */
Test(data, criteo_shape_has_the_kaggle_cardinalities)
{
	struct ss_gen_options o;
	struct ss_metrics m;
	struct ss_reader *r;
	struct ss_example ex;
	char path[] = "/tmp/ss-criteo-XXXXXX";
	uint32_t *c3 = malloc(20000 * sizeof(uint32_t)), c9[8];
	int fd = mkstemp(path), n = 0, distinct3 = 0, distinct9 = 0;
	FILE *f;

	cr_assert(fd >= 0 && c3);
	ss_gen_options_init(&o);
	o.examples = 20000;
	o.shape = SS_GEN_CRITEO;
	cr_assert_eq(ss_gen_cardinality(&o, 2), 10131227);
	cr_assert_eq(ss_gen_cardinality(&o, 8), 3);
	f = fdopen(fd, "w");
	cr_assert_eq(ss_gen_data(f, &o, &m), 0);
	fclose(f);
	cr_assert_lt(m.ne, 0.95, "teacher NE %f", m.ne);
	cr_assert_eq(ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_FAIL), 0);
	while (ss_reader_next(r, &ex) == 1) {
		bool seen = false;

		c3[n++] = ex.sparse[2];
		for (int i = 0; i < distinct9 && !seen; i++)
			seen = c9[i] == ex.sparse[8];
		if (!seen && ex.sparse[8] && distinct9 < 8)
			c9[distinct9++] = ex.sparse[8];
	}
	ss_reader_close(&r);
	unlink(path);
	cr_assert_eq(n, 20000);
	qsort(c3, (size_t)n, sizeof(*c3), cmp_u32);
	for (int i = 0; i < n; i++)
		distinct3 += c3[i] && (i == 0 || c3[i] != c3[i - 1]);
	cr_assert_gt(distinct3, 4000, "C3: %d distinct values", distinct3);
	cr_assert_leq(distinct9, 3, "C9: %d distinct values", distinct9);
	free(c3);
}

/* What one file of generated data shows, column by column. */
struct gen_columns {
	int n;
	double empty[SS_DENSE + SS_SPARSE]; /* share of empty fields */
	int distinct[SS_SPARSE]; /* categorical values seen */
	double top[SS_SPARSE]; /* share of the most frequent value */
	double teacher_ne;
};

static void gen_columns(const struct ss_gen_options *o, struct gen_columns *g)
{
	char path[300], line[1024];
	uint32_t *vals[SS_SPARSE];
	struct ss_metrics m;
	int empty[SS_DENSE + SS_SPARSE] = { 0 };
	FILE *f;

	snprintf(path, sizeof(path), "%s/columns.txt", dir);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	cr_assert_eq(ss_gen_data(f, o, &m), 0, "%s", ss_last_error());
	fclose(f);
	memset(g, 0, sizeof(*g));
	g->teacher_ne = m.ne;
	for (int j = 0; j < SS_SPARSE; j++)
		cr_assert_not_null(vals[j] = malloc(o->examples * 4));
	f = fopen(path, "r");
	while (fgets(line, sizeof(line), f)) {
		char *p = strchr(line, '\t');

		for (int c = 0; c < SS_DENSE + SS_SPARSE; c++) {
			char *end = strpbrk(p + 1, "\t\n");

			empty[c] += end == p + 1;
			if (c >= SS_DENSE)
				vals[c - SS_DENSE][g->n] =
					end == p + 1 ? 0 :
						       (uint32_t)strtoul(
							       p + 1, NULL, 16);
			p = end;
		}
		g->n++;
	}
	fclose(f);
	cr_assert_eq(g->n, (int)o->examples);
	for (int c = 0; c < SS_DENSE + SS_SPARSE; c++)
		g->empty[c] = (double)empty[c] / g->n;
	for (int j = 0; j < SS_SPARSE; j++) {
		int run = 0, best = 0, seen = 0;

		qsort(vals[j], (size_t)g->n, sizeof(uint32_t), cmp_u32);
		for (int i = 0; i < g->n; i++) {
			if (!vals[j][i])
				continue;
			seen++;
			run = i && vals[j][i] == vals[j][i - 1] ? run + 1 : 1;
			best = run > best ? run : best;
			g->distinct[j] += run == 1;
		}
		g->top[j] = seen ? (double)best / seen : 0;
		free(vals[j]);
	}
}

static double min_of(const double *v, int n)
{
	double m = v[0];

	for (int i = 1; i < n; i++)
		m = fmin(m, v[i]);
	return m;
}

static double max_of(const double *v, int n)
{
	double m = v[0];

	for (int i = 1; i < n; i++)
		m = fmax(m, v[i]);
	return m;
}

/*
 * The settings of perf/quality-sweep: each column its own missing rate
 * (mean as asked, 0 meaning none), the Criteo counts capped, each feature
 * its own Zipf exponent, and the dense terms in the teacher's logit.
 */
Test(data, gen_data_varies_columns_as_real_logs_do, .timeout = 60)
{
	struct ss_gen_options o;
	struct gen_columns g;
	double base_ne, mean = 0;

	ss_gen_options_init(&o);
	o.examples = 20000;
	o.missing = 0;
	gen_columns(&o, &g);
	cr_assert_eq(max_of(g.empty, SS_DENSE + SS_SPARSE), 0);
	/* the default: 5 % of dense, 3 % of categorical fields, alike */
	ss_gen_options_init(&o);
	o.examples = 20000;
	gen_columns(&o, &g);
	base_ne = g.teacher_ne;
	cr_assert_float_eq(min_of(g.empty, SS_DENSE), 0.05, 0.01);
	cr_assert_float_eq(max_of(g.empty, SS_DENSE), 0.05, 0.01);
	cr_assert_float_eq(min_of(g.empty + SS_DENSE, SS_SPARSE), 0.03, 0.01);
	cr_assert_float_eq(max_of(g.empty + SS_DENSE, SS_SPARSE), 0.03, 0.01);
	/* each column its own rate, from 0 to 0.5: they differ */
	o.missing = 0.25;
	gen_columns(&o, &g);
	for (int c = 0; c < SS_DENSE + SS_SPARSE; c++)
		mean += g.empty[c] / (SS_DENSE + SS_SPARSE);
	cr_assert_float_eq(mean, 0.25, 0.06, "mean missing share %g", mean);
	cr_assert_lt(min_of(g.empty, SS_DENSE + SS_SPARSE), 0.12);
	cr_assert_gt(max_of(g.empty, SS_DENSE + SS_SPARSE), 0.38);
	cr_assert_leq(max_of(g.empty, SS_DENSE + SS_SPARSE), 0.52);
	/* one exponent: the most frequent value's share alike everywhere */
	ss_gen_options_init(&o);
	o.examples = 20000;
	o.cardinality = 1000;
	gen_columns(&o, &g);
	cr_assert_lt(max_of(g.top, SS_SPARSE) / min_of(g.top, SS_SPARSE), 1.3);
	/* 0.5 to 2.5: a few percent where flat, most of it where steep */
	o.zipf = 0.5;
	o.zipf_max = 2.5;
	gen_columns(&o, &g);
	cr_assert_lt(min_of(g.top, SS_SPARSE), 0.06);
	cr_assert_gt(max_of(g.top, SS_SPARSE), 0.5);
	/* the Kaggle counts capped: no feature past the cap, C9 still 3 */
	ss_gen_options_init(&o);
	o.examples = 20000;
	o.shape = SS_GEN_CRITEO;
	o.cap = 40;
	cr_assert_eq(ss_gen_cardinality(&o, 2), 40);
	cr_assert_eq(ss_gen_cardinality(&o, 8), 3);
	gen_columns(&o, &g);
	for (int j = 0; j < SS_SPARSE; j++)
		cr_assert_leq(g.distinct[j], 40, "C%d: %d values", j + 1,
			      g.distinct[j]);
	cr_assert_eq(g.distinct[2], 40);
	/* dense x dense and dense x categorical terms: more of the label
	 * explained, a lower floor */
	ss_gen_options_init(&o);
	o.examples = 20000;
	o.dense_pair_scale = 0.5;
	gen_columns(&o, &g);
	cr_assert_lt(g.teacher_ne, base_ne - 0.02, "%g against %g",
		     g.teacher_ne, base_ne);
	o.dense_pair_scale = 0;
	o.dense_cat_scale = 0.5;
	gen_columns(&o, &g);
	cr_assert_lt(g.teacher_ne, base_ne - 0.02, "%g against %g",
		     g.teacher_ne, base_ne);
	/* out of range through the library too */
	o.missing = 0.6;
	cr_assert_eq(ss_gen_data(stdout, &o, NULL), -EINVAL);
}

/*
 * Without the new options a file is what it was before they came, byte
 * for byte (the figures of docs/perf.md were measured on such files):
 * the CRC-32 of 3000 examples of each shape, as the generator of commit
 * f755797 wrote them.
 */
Test(data, gen_data_defaults_write_the_files_they_always_wrote)
{
	static const unsigned long want[2] = { 0x3c9bc5e8, 0x7fb4e061 };

	for (int shape = 0; shape < 2; shape++) {
		struct ss_gen_options o;
		struct ss_metrics m;
		char *text = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&text, &len);

		ss_gen_options_init(&o);
		o.examples = 3000;
		o.shape = shape ? SS_GEN_CRITEO : SS_GEN_UNIFORM;
		cr_assert_eq(ss_gen_data(f, &o, &m), 0);
		fclose(f);
		cr_assert_eq(crc32(0, (const Bytef *)text, (uInt)len),
			     want[shape], "shape %d: CRC-32 %08lx", shape,
			     crc32(0, (const Bytef *)text, (uInt)len));
		free(text);
	}
}

Test(data, gen_data_command_writes_file_and_floor)
{
	char cmd[512], path[256], json[300], text[512];
	FILE *f;
	int status;

	snprintf(path, sizeof(path), "%s/cmd.txt", dir);
	snprintf(cmd, sizeof(cmd),
		 "%s gen-data --out %s --examples 500 --seed 3 >/dev/null",
		 SS_COMMAND, path);
	status = system(cmd);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	snprintf(json, sizeof(json), "%s.teacher.json", path);
	f = fopen(json, "r");
	cr_assert_not_null(f, "no %s", json);
	cr_assert_not_null(fgets(text, sizeof(text), f));
	fclose(f);
	cr_assert(strstr(text, "\"ne\":"), "%s", text);
	snprintf(cmd, sizeof(cmd),
		 "%s gen-data --examples 5 2>&1 | grep -q 'error: --out'",
		 SS_COMMAND);
	cr_assert_eq(system(cmd), 0, "missing --out not named");
	snprintf(cmd, sizeof(cmd), "%s gen-data --out %s --ctr 2 2>/dev/null",
		 SS_COMMAND, path);
	status = system(cmd);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 2);
	/* --json escapes the path (a quote in it made the line invalid) */
	snprintf(cmd, sizeof(cmd),
		 "cd %s && %s gen-data --out 'q\"x.txt' --examples 10 --json "
		 "| grep -qF '{\"file\":\"q\\\"x.txt\",'",
		 dir, SS_COMMAND);
	cr_assert_eq(system(cmd), 0, "%s", cmd);
}

/* The first line of @path, or of @cmd's output when @path is NULL. */
static void first_line(const char *cmd, const char *path, char *text,
		       size_t size)
{
	FILE *f = path ? fopen(path, "r") : popen(cmd, "r");

	cr_assert_not_null(f, "%s", path ? path : cmd);
	text[0] = '\0';
	cr_assert_not_null(fgets(text, (int)size, f), "%s: nothing read",
			   path ? path : cmd);
	if (path)
		fclose(f);
	else
		cr_assert_eq(pclose(f), 0, "%s failed", cmd);
}

/* @text holds no nan or inf as a value (the path in it may spell either). */
static void no_non_number(const char *text)
{
	static const char *const bad[] = { ":nan", ":-nan", ":inf", ":-inf" };

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_null(strcasestr(text, bad[i]), "%s in %s", bad[i],
			       text);
}

/*
 * One example has one class: its NE and AUC are undefined (NaN), which JSON
 * cannot hold; they were printed as nan, and Python's json.load refused the
 * line and FILE.teacher.json.  They are null, as in train --json.
 */
Test(data, gen_data_json_writes_null_for_undefined_metrics)
{
	char cmd[768], path[256], json[300], text[1024];

	snprintf(path, sizeof(path), "%s/one.txt", dir);
	snprintf(json, sizeof(json), "%s.teacher.json", path);
	snprintf(cmd, sizeof(cmd), "%s gen-data --out %s --examples 1 --json",
		 SS_COMMAND, path);
	first_line(cmd, NULL, text, sizeof(text));
	no_non_number(text);
	cr_assert(strstr(text, "\"teacher_ne\":null"), "%s", text);
	cr_assert(strstr(text, "\"teacher_auc\":null"), "%s", text);
	cr_assert(strstr(text, "\"examples\":1,"), "%s", text);
	first_line(NULL, json, text, sizeof(text));
	no_non_number(text);
	cr_assert(strstr(text, "\"ne\":null"), "%s", text);
	cr_assert(strstr(text, "\"auc\":null"), "%s", text);
	/* the criteo shape has no one cardinality: the default is not it */
	snprintf(cmd, sizeof(cmd),
		 "%s gen-data --out %s --examples 1 --shape criteo --json",
		 SS_COMMAND, path);
	first_line(cmd, NULL, text, sizeof(text));
	no_non_number(text);
	first_line(NULL, json, text, sizeof(text));
	no_non_number(text);
	cr_assert(strstr(text, "\"shape\":\"criteo\""), "%s", text);
	cr_assert_null(strstr(text, "\"cardinality\":"), "%s", text);
	/* the uniform shape still names its cardinality */
	snprintf(cmd, sizeof(cmd),
		 "%s gen-data --out %s --examples 1 --cardinality 7 --json",
		 SS_COMMAND, path);
	first_line(cmd, NULL, text, sizeof(text));
	first_line(NULL, json, text, sizeof(text));
	cr_assert(strstr(text, "\"shape\":\"uniform\",\"cardinality\":7,"),
		  "%s", text);
}

Test(data, an_overlong_line_is_refused_in_bounded_memory)
{
	char path[256];
	struct ss_reader *r;
	struct ss_example ex;
	FILE *f;

	snprintf(path, sizeof(path), "%s/long.txt", dir);
	f = fopen(path, "w");
	cr_assert_not_null(f);
	fprintf(f, "%s\n", GOOD);
	for (int i = 0; i < 3 * 1024 * 1024; i++)
		fputc('7', f);
	fprintf(f, "\n%s\n", GOOD);
	fclose(f);
	cr_assert_eq(ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_SKIP), 0);
	cr_assert_eq(ss_reader_next(r, &ex), 1);
	cr_assert_eq(ss_reader_next(r, &ex), 1, "the line after it is read");
	cr_assert_eq(ss_reader_next(r, &ex), 0);
	cr_assert_eq(ss_reader_skipped(r), 1);
	ss_reader_close(&r);
	cr_assert_eq(ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_FAIL), 0);
	cr_assert_eq(ss_reader_next(r, &ex), 1);
	cr_assert_eq(ss_reader_next(r, &ex), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->why, "longer than"), "%s",
		  ss_last_error()->why);
	cr_assert(strstr(ss_last_error()->what, "long.txt:2"), "%s",
		  ss_last_error()->what);
	ss_reader_close(&r);
}

/* Examples in [begin, end) with bad lines skipped; their count in *skipped. */
static int count_skipping(const char *path, uint64_t begin, uint64_t end,
			  int *skipped)
{
	struct ss_reader *r;
	struct ss_example ex;
	int n = 0, rc;

	cr_assert_eq(ss_reader_open(&r, path, begin, end, SS_BAD_LINES_SKIP),
		     0);
	while ((rc = ss_reader_next(r, &ex)) == 1)
		n++;
	cr_assert_eq(rc, 0);
	*skipped += (int)ss_reader_skipped(r);
	ss_reader_close(&r);
	return n;
}

/*
 * A NUL byte inside a line (issue 15: the reader went on by strlen, not
 * by the bytes read, so two byte ranges disagreed with the whole file):
 * the line is bad, named as such, and every split of the file into two
 * ranges reads each line exactly once.  The minimized input too.
 */
Test(data, a_nul_byte_in_a_line_is_a_bad_line_read_once)
{
	static const char good[] = GOOD "\n";
	static const char tiny[] = { 0x40, 0x00, 0x0a, 0x41, 0x0a };
	char path[256], bad[sizeof(good)];
	struct ss_reader *r;
	struct ss_example ex;
	long size;
	FILE *f;

	snprintf(path, sizeof(path), "%s/nul.txt", dir);
	memcpy(bad, good, sizeof(good));
	bad[5] = '\0';
	f = fopen(path, "w");
	cr_assert(f);
	fwrite(good, 1, sizeof(good) - 1, f);
	fwrite(bad, 1, sizeof(good) - 1, f);
	fwrite(good, 1, sizeof(good) - 1, f);
	fwrite(good, 1, sizeof(good) - 1, f);
	size = ftell(f);
	fclose(f);
	for (long at = 0; at <= size; at++) {
		int skipped = 0,
		    n = (at ? count_skipping(path, 0, (uint64_t)at, &skipped) :
			      0) + /* end 0: to the end of the file */
			count_skipping(path, (uint64_t)at, 0, &skipped);

		cr_assert_eq(n, 3, "split at %ld: %d examples", at, n);
		cr_assert_eq(skipped, 1, "split at %ld: %d skipped", at,
			     skipped);
	}
	cr_assert_eq(ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_FAIL), 0);
	cr_assert_eq(ss_reader_next(r, &ex), 1);
	cr_assert_eq(ss_reader_next(r, &ex), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->why, "NUL byte"), "%s",
		  ss_last_error()->why);
	cr_assert(strstr(ss_last_error()->what, "nul.txt:2"), "%s",
		  ss_last_error()->what);
	ss_reader_close(&r);

	f = fopen(path, "w");
	fwrite(tiny, 1, sizeof(tiny), f);
	fclose(f);
	for (long at = 0; at <= (long)sizeof(tiny); at++) {
		int skipped = 0,
		    n = (at ? count_skipping(path, 0, (uint64_t)at, &skipped) :
			      0) +
			count_skipping(path, (uint64_t)at, 0, &skipped);

		cr_assert_eq(n + skipped, 2, "split at %ld: %d lines", at,
			     n + skipped);
	}
}

/*
 * The reader's buffer starts small and doubles while a line fills it:
 * lines that fill it exactly, or just not, or many times over, one with a
 * NUL byte past the first buffer, are each read once, whole, wherever the
 * file is split.
 */
Test(data, lines_longer_than_the_first_buffer_are_read_whole)
{
	static const size_t junk[] = { 1022, 1023, 1024, 5000, 70000 };
	char path[256];
	struct ss_reader *r;
	struct ss_example ex;
	long size, cuts[64];
	int n_cuts = 0, lines = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/long-lines.txt", dir);
	f = fopen(path, "w");
	cr_assert(f);
	for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
		fprintf(f, "%s\n", GOOD);
		cuts[n_cuts++] = ftell(f);
		for (size_t j = 0; j < junk[i]; j++)
			fputc(i == 3 && j == 3000 ? '\0' : '7', f);
		cuts[n_cuts++] = ftell(f) - 1;
		fputc('\n', f);
		cuts[n_cuts++] = ftell(f);
		lines += 2;
	}
	fprintf(f, "%s", GOOD); /* no final newline */
	size = ftell(f);
	fclose(f);
	for (long at = 1; at < size; at += 4099)
		cuts[n_cuts++] = at;
	cuts[n_cuts++] = 0;
	for (int i = 0; i < n_cuts; i++) {
		long at = cuts[i];
		int skipped = 0,
		    n = (at ? count_skipping(path, 0, (uint64_t)at, &skipped) :
			      0) +
			count_skipping(path, (uint64_t)at, 0, &skipped);

		cr_assert_eq(n, lines / 2 + 1, "split at %ld: %d examples", at,
			     n);
		cr_assert_eq(skipped, lines / 2, "split at %ld: %d skipped", at,
			     skipped);
	}
	cr_assert_eq(ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_FAIL), 0);
	cr_assert_eq(ss_reader_next(r, &ex), 1);
	cr_assert_eq(ss_reader_next(r, &ex), SS_EPARSE);
	cr_assert(strstr(ss_last_error()->what, "long-lines.txt:2"), "%s",
		  ss_last_error()->what);
	ss_reader_close(&r);
}

/*
 * The chunks of each epoch, in the file's order or shuffled: every chunk
 * exactly once an epoch; shuffled, in another order each epoch, and the
 * same order for every claimer that sets the same value.
 */
Test(chunks, every_chunk_once_an_epoch_in_order_or_shuffled)
{
	enum { EPOCHS = 3, PER = 37 };
	struct ss_chunks k = { 0 }, again = { 0 };
	uint64_t begin, end, b2, e2, order[EPOCHS][PER];
	int seen[PER];

	ss_chunks_plan(&k, PER * 1000 - 123, 1, 1000, EPOCHS);
	cr_assert_eq(k.per_epoch, PER);
	for (int shuffled = 0; shuffled < 2; shuffled++) {
		k.next = again.next = 0;
		k.shuffle = shuffled ? 0x1234567 : 0;
		again = k;
		for (int e = 0; e < EPOCHS; e++) {
			memset(seen, 0, sizeof(seen));
			for (int i = 0; i < PER; i++) {
				cr_assert_eq(ss_chunks_next(&k, &begin, &end),
					     1);
				cr_assert_eq(ss_chunks_next(&again, &b2, &e2),
					     1);
				cr_assert_eq(begin, b2, "one order for all");
				cr_assert_eq(begin % 1000, 0);
				cr_assert_eq(end, begin + 1000 < k.size ?
							  begin + 1000 :
							  k.size);
				order[e][i] = begin / 1000;
				seen[order[e][i]]++;
			}
			for (int i = 0; i < PER; i++)
				cr_assert_eq(seen[i], 1,
					     "epoch %d: chunk %d "
					     "read %d times",
					     e, i, seen[i]);
		}
		cr_assert_eq(ss_chunks_next(&k, &begin, &end), 0, "the end");
		for (int e = 0; e < EPOCHS; e++) {
			int moved = 0, from_last = 0;

			for (int i = 0; i < PER; i++) {
				moved += order[e][i] != (uint64_t)i;
				from_last +=
					e > 0 && order[e][i] != order[e - 1][i];
			}
			if (!shuffled) {
				cr_assert_eq(moved, 0, "in the file's order");
				continue;
			}
			cr_assert_gt(moved, PER / 2, "epoch %d barely moved",
				     e);
			if (e > 0)
				cr_assert_gt(from_last, PER / 2,
					     "epoch %d in epoch %d's order", e,
					     e - 1);
		}
	}
}
