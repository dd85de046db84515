// SPDX-License-Identifier: BSD-2-Clause
/*
 * The Criteo file reader, ss_reader_*(), which train shards by byte
 * ranges.  The input is a data file.  Properties:
 *  - read whole, it gives the examples of its lines, in order, as
 *    ss_parse_example() parses them (a line with a NUL byte is bad), and
 *    skips (--bad-lines skip) or stops at (fail) exactly its bad lines,
 *    naming the right line;
 *  - read as adjacent byte ranges [0, c1), [c1, c2), ..., [ck, end), cut
 *    anywhere, it gives the same examples, each line exactly once, and the
 *    same first error.
 * A file that starts with gzip's magic bytes is passed over: the reader
 * decompresses it.
 */
#include <string.h>

#include "fuzz.h"
#include "shadowsync/train.h"

#define MAX_LINE (1 << 20) /* as the reader's */

/* What the whole file should give: its lines' examples, bad ones marked. */
struct expect {
	int lines, good, bad, first_bad; /* first_bad: line number, 0 none */
	struct ss_example *ex; /* lines entries; valid where ok[i] */
	bool *ok;
};

static void expect_lines(const uint8_t *data, size_t size, struct expect *e)
{
	char why[160];
	size_t at = 0;

	memset(e, 0, sizeof(*e));
	e->ex = calloc(size + 1, sizeof(*e->ex));
	e->ok = calloc(size + 1, sizeof(*e->ok));
	while (at < size) {
		const uint8_t *nl = memchr(data + at, '\n', size - at);
		size_t len = nl ? (size_t)(nl - (data + at)) : size - at;
		int i = e->lines++;

		e->ok[i] = len <= MAX_LINE && !memchr(data + at, '\0', len) &&
			   ss_parse_example((const char *)data + at, len,
					    &e->ex[i], why, sizeof(why)) == 0;
		if (e->ok[i]) {
			e->good++;
		} else {
			e->bad++;
			if (!e->first_bad)
				e->first_bad = i + 1;
		}
		at += len + (nl != NULL);
	}
}

/* The examples and the first error of reading [begin, end) of @path. */
struct got {
	int n, cap;
	struct ss_example *ex;
	uint64_t skipped;
	int rc; /* the first error, 0 none */
	char what[256], why[256];
};

static void read_range(const char *path, uint64_t begin, uint64_t end,
		       enum ss_bad_lines policy, struct got *g)
{
	struct ss_reader *r;
	struct ss_example ex;
	int rc = ss_reader_open(&r, path, begin, end, policy);

	FUZZ_CHECK(rc == 0, "open [%llu, %llu): %s", (unsigned long long)begin,
		   (unsigned long long)end, ss_last_error()->why);
	while ((rc = ss_reader_next(r, &ex)) == 1) {
		if (g->n == g->cap) {
			g->cap = g->cap ? 2 * g->cap : 16;
			g->ex = realloc(g->ex, (size_t)g->cap * sizeof(ex));
		}
		g->ex[g->n++] = ex;
	}
	if (rc < 0 && !g->rc) {
		g->rc = rc;
		snprintf(g->what, sizeof(g->what), "%s", ss_last_error()->what);
		snprintf(g->why, sizeof(g->why), "%s", ss_last_error()->why);
	}
	g->skipped += ss_reader_skipped(r);
	ss_reader_close(&r);
	FUZZ_CHECK(r == NULL, "close leaves the pointer");
}

/* The ranges cut at @cuts (ascending, in (0, size)), read one after
 * another; under fail, the ranges after the first error are not read. */
static void read_cut(const char *path, size_t size, const size_t *cuts, int k,
		     enum ss_bad_lines policy, bool open_end, struct got *g)
{
	uint64_t begin = 0;

	memset(g, 0, sizeof(*g));
	for (int i = 0; i <= k && !g->rc; i++) {
		uint64_t end = i < k ? cuts[i] : open_end ? 0 : size;

		read_range(path, begin, end, policy, g);
		begin = end;
	}
}

static void same_examples(const struct ss_example *a,
			  const struct ss_example *b, int n, const char *where)
{
	for (int i = 0; i < n; i++)
		FUZZ_CHECK(!memcmp(&a[i], &b[i], sizeof(*a)),
			   "%s: example %d differs", where, i);
}

/* The whole file under skip, then under fail, against @e. */
static void check_whole(const char *path, size_t size, const struct expect *e,
			struct got *skip, struct got *fail)
{
	struct ss_example *good = calloc((size_t)e->good + 1, sizeof(*good));
	char want[64];
	int n = 0;

	for (int i = 0; i < e->lines; i++)
		if (e->ok[i])
			good[n++] = e->ex[i];
	read_cut(path, size, NULL, 0, SS_BAD_LINES_SKIP, true, skip);
	FUZZ_CHECK(skip->rc == 0, "skip: %s: %s", skip->what, skip->why);
	FUZZ_CHECK(skip->n == e->good, "skip: %d examples of %d lines, want %d",
		   skip->n, e->lines, e->good);
	FUZZ_CHECK(skip->skipped == (uint64_t)e->bad,
		   "skip: %llu skipped, "
		   "want %d",
		   (unsigned long long)skip->skipped, e->bad);
	same_examples(skip->ex, good, n, "whole file");

	read_cut(path, size, NULL, 0, SS_BAD_LINES_FAIL, true, fail);
	if (!e->first_bad) {
		FUZZ_CHECK(fail->rc == 0 && fail->n == e->good,
			   "fail: rc %d, %d examples, want %d", fail->rc,
			   fail->n, e->good);
	} else {
		FUZZ_CHECK(fail->rc == SS_EPARSE, "fail: rc %d at line %d",
			   fail->rc, e->first_bad);
		snprintf(want, sizeof(want), ":%d", e->first_bad);
		FUZZ_CHECK(strlen(fail->what) >= strlen(want) &&
				   !strcmp(fail->what + strlen(fail->what) -
						   strlen(want),
					   want),
			   "fail: '%s' does not name line %d", fail->what,
			   e->first_bad);
		FUZZ_CHECK(fail->n == e->first_bad - 1,
			   "fail: %d examples before line %d", fail->n,
			   e->first_bad);
		same_examples(fail->ex, good, fail->n, "whole file, fail");
	}
	free(good);
}

/* Ranges cut at @cuts read the same as the whole file. */
static void check_cut(const char *path, size_t size, const size_t *cuts, int k,
		      const struct got *skip, const struct got *fail)
{
	struct got g;
	bool open_end = k % 2 == 0;

	read_cut(path, size, cuts, k, SS_BAD_LINES_SKIP, open_end, &g);
	FUZZ_CHECK(g.rc == 0, "ranges, skip: %s", g.why);
	FUZZ_CHECK(g.n == skip->n && g.skipped == skip->skipped,
		   "%d ranges from %zu: %d examples, %llu skipped; whole "
		   "file: %d, %llu",
		   k + 1, k ? cuts[0] : size, g.n,
		   (unsigned long long)g.skipped, skip->n,
		   (unsigned long long)skip->skipped);
	same_examples(g.ex, skip->ex, g.n, "ranges, skip");
	free(g.ex);

	read_cut(path, size, cuts, k, SS_BAD_LINES_FAIL, open_end, &g);
	FUZZ_CHECK(g.rc == fail->rc && g.n == fail->n,
		   "%d ranges from %zu, fail: rc %d after %d examples; whole "
		   "file: rc %d after %d",
		   k + 1, k ? cuts[0] : size, g.rc, g.n, fail->rc, fail->n);
	FUZZ_CHECK(!strcmp(g.what, fail->what) && !strcmp(g.why, fail->why),
		   "ranges say '%s: %s', the whole file '%s: %s'", g.what,
		   g.why, fail->what, fail->why);
	same_examples(g.ex, fail->ex, g.n, "ranges, fail");
	free(g.ex);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *path = fuzz_file("data", data, size);
	struct got skip, fail;
	struct expect e;
	size_t cuts[8];
	uint64_t h = 1469598103934665603ull;

	/* gzip's magic: the reader decompresses it (zlib's to parse; the
	 * reader's gzip cases are test_train_data's), not a file of lines */
	if (size >= 2 && data[0] == 0x1f && data[1] == 0x8b)
		return 0;
	expect_lines(data, size, &e);
	check_whole(path, size, &e, &skip, &fail);

	/* two ranges, cut at every byte of a small file; of a larger one,
	 * around its first newlines and at bytes picked by its hash (a few:
	 * many quick runs find more than many cuts of one input) */
	for (size_t i = 0; i < size; i++)
		h = (h ^ data[i]) * 1099511628211ull;
	if (size <= 32) {
		for (size_t c = 1; c < size; c++)
			check_cut(path, size, &c, 1, &skip, &fail);
	} else {
		int newlines = 0;

		for (size_t c = 1; c < size && newlines < 4; c++) {
			if (data[c - 1] != '\n')
				continue;
			newlines++;
			for (size_t d = c > 1 ? c - 1 : 1;
			     d <= c + 1 && d < size; d++)
				check_cut(path, size, &d, 1, &skip, &fail);
		}
		for (int i = 0; i < 4; i++) {
			size_t c = 1 + (size_t)((h >> (16 * i)) % (size - 1));

			check_cut(path, size, &c, 1, &skip, &fail);
		}
	}
	/* and several ranges at once, some of them empty */
	if (size > 1) {
		int k = 2 + (int)(h % 6);

		for (int i = 0; i < k; i++) {
			h = h * 6364136223846793005ull + 1442695040888963407ull;
			cuts[i] = 1 + (size_t)((h >> 33) % (size - 1));
		}
		for (int i = 1; i < k; i++) /* ascending; equal ones: empty */
			for (int j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
				size_t t = cuts[j];

				cuts[j] = cuts[j - 1];
				cuts[j - 1] = t;
			}
		check_cut(path, size, cuts, k, &skip, &fail);
	}
	free(skip.ex);
	free(fail.ex);
	free(e.ex);
	free(e.ok);
	return 0;
}
