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
 *  - read whole by ss_reader_fill_bags(), which takes multi-hot lines
 *    (several comma-separated values in a categorical field), it gives
 *    the examples and values a reference written here finds (a line is
 *    good when every value of such a field is 8 hex digits and the line
 *    with the field cut to its first value parses), skipping exactly the
 *    other lines.
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

static bool is_hex8(const char *s, size_t n)
{
	if (n != 8)
		return false;
	for (size_t i = 0; i < 8; i++)
		if (!strchr("0123456789abcdefABCDEF", s[i]) || !s[i])
			return false;
	return true;
}

/*
 * Line @line of @len bytes as multi-hot data: whether it is good, its
 * example into @ex and its values appended at @ids[*@n] (feature j's
 * first at @start[j], the end at @start[26]).
 */
static bool bags_reference(const char *line, size_t len, struct ss_example *ex,
			   uint32_t *ids, size_t *n, uint32_t *start)
{
	char *cut = malloc(len + 1), why[160];
	size_t at = 0, out = 0;
	int f = 0;
	bool ok = true;

	if (len && line[len - 1] == '\r')
		len--;
	while (ok) {
		const char *tab = memchr(line + at, '\t', len - at);
		size_t end = tab ? (size_t)(tab - line) : len;
		const char *comma = memchr(line + at, ',', end - at);

		if (f > SS_DENSE && f <= SS_DENSE + SS_SPARSE && comma) {
			/* each value 8 hex digits; the field cut to its first */
			for (size_t p = at; ok;) {
				const char *c = memchr(line + p, ',', end - p);
				size_t q = c ? (size_t)(c - line) : end;

				ok = is_hex8(line + p, q - p);
				if (!c)
					break;
				p = q + 1;
			}
			if (!ok)
				break;
			memcpy(cut + out, line + at, 8);
			out += 8;
		} else {
			memcpy(cut + out, line + at, end - at);
			out += end - at;
		}
		if (!tab)
			break;
		cut[out++] = '\t';
		at = end + 1;
		f++;
	}
	ok = ok && ss_parse_example(cut, out, ex, why, sizeof(why)) == 0;
	free(cut);
	if (!ok)
		return false;
	/* the values: every one of each field, in order */
	at = 0;
	for (f = 0; f <= SS_DENSE + SS_SPARSE; f++) {
		const char *tab = memchr(line + at, '\t', len - at);
		size_t end = tab ? (size_t)(tab - line) : len;
		int j = f - 1 - SS_DENSE;

		if (j >= 0) {
			start[j] = (uint32_t)*n;
			if (end == at)
				ids[(*n)++] = 0;
			for (size_t p = at; p < end; p += 9) {
				char hex[9] = { 0 };

				memcpy(hex, line + p, 8);
				ids[(*n)++] = (uint32_t)strtoul(hex, NULL, 16);
			}
		}
		at = end + 1;
	}
	start[SS_SPARSE] = (uint32_t)*n;
	return true;
}

/* The whole file through ss_reader_fill_bags(), skipping bad lines,
 * against the reference. */
static void check_bags(const char *path, const uint8_t *data, size_t size)
{
	struct ss_example *want = calloc(size + 1, sizeof(*want)), got[8];
	uint32_t *ids = calloc(size + 1, sizeof(uint32_t));
	uint32_t *start = calloc((size + 1) * SS_SPARSE + 1, sizeof(uint32_t));
	struct ss_bags *bags;
	struct ss_reader *r;
	size_t at = 0, n_ids = 0;
	int lines = 0, good = 0, seen = 0, rc;

	while (at < size) {
		const uint8_t *nl = memchr(data + at, '\n', size - at);
		size_t len = nl ? (size_t)(nl - (data + at)) : size - at;

		lines++;
		if (len <= MAX_LINE && !memchr(data + at, '\0', len) &&
		    bags_reference((const char *)data + at, len, &want[good],
				   ids, &n_ids,
				   start + (size_t)good * SS_SPARSE))
			good++;
		at += len + (nl != NULL);
	}
	FUZZ_CHECK(ss_bags_create(&bags, 8) == 0, "bags");
	FUZZ_CHECK(ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_SKIP) == 0,
		   "open");
	while ((rc = ss_reader_fill_bags(r, got, bags, 8)) > 0) {
		for (int i = 0; i < rc; i++) {
			size_t k = (size_t)(seen + i) * SS_SPARSE;

			FUZZ_CHECK(seen + i < good, "more examples than %d",
				   good);
			FUZZ_CHECK(!memcmp(&got[i], &want[seen + i],
					   sizeof(got[i])),
				   "bags: example %d differs", seen + i);
			for (int j = 0; j < SS_SPARSE; j++) {
				uint32_t a = bags->start[i * SS_SPARSE + j],
					 b = bags->start[i * SS_SPARSE + j + 1];

				FUZZ_CHECK(
					b - a ==
						start[k + j + 1] - start[k + j],
					"example %d, C%d: %u values, want %u",
					seen + i, j + 1, b - a,
					start[k + j + 1] - start[k + j]);
				FUZZ_CHECK(!memcmp(bags->ids + a,
						   ids + start[k + j],
						   (b - a) * sizeof(uint32_t)),
					   "example %d, C%d: values differ",
					   seen + i, j + 1);
			}
		}
		seen += rc;
	}
	FUZZ_CHECK(rc == 0, "bags: rc %d: %s", rc, ss_last_error()->why);
	FUZZ_CHECK(seen == good, "bags: %d examples, want %d", seen, good);
	FUZZ_CHECK(ss_reader_skipped(r) == (uint64_t)(lines - good),
		   "bags: %llu skipped, want %d",
		   (unsigned long long)ss_reader_skipped(r), lines - good);
	ss_reader_close(&r);
	ss_bags_destroy(&bags);
	free(want);
	free(ids);
	free(start);
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
	check_bags(path, data, size);

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
