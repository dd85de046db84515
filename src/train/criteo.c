// SPDX-License-Identifier: BSD-2-Clause
/*
 * The Criteo Kaggle format: label, I1..I13 (integers, possibly empty or
 * negative), C1..C26 (8 hex digits, possibly empty), tab-separated.  The
 * reader streams a byte range of a file one line at a time, so memory stays
 * bounded by the longest line, and N readers with adjacent ranges read
 * every line exactly once: a line belongs to the range holding its first
 * byte.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "shadowsync/train.h"

#define SS_FIELDS (1 + SS_DENSE + SS_SPARSE)
#define SS_MAX_LINE (1 << 20) /* a longer line is not Criteo data */
/* The line buffer's first size (a Criteo line is about 300 bytes); it
 * doubles for a longer line, up to SS_MAX_LINE + 2. */
#define SS_LINE_START 1024

/*
 * Several files are one stream, in order: byte b of the stream is in the
 * file whose bytes [base, base + size) hold it, and every file starts a
 * line (one whose last line has no newline ends it at its end).
 */
struct ss_reader {
	FILE *f; /* the file being read, @file of @n_files */
	char *path; /* its name (one of @files) */
	char **files;
	uint64_t *sizes;
	int n_files, file;
	uint64_t base; /* where that file starts in the stream */
	char *line; /* @cap bytes: the line, its newline, a NUL */
	size_t cap;
	uint64_t end, pos; /* in the stream */
	uint64_t lines; /* lines read in this file since @first */
	uint64_t first; /* the byte of the file where they start */
	uint64_t skipped;
	enum ss_bad_lines policy;
};

int ss_bad_lines_parse(const char *option, const char *text,
		       enum ss_bad_lines *policy)
{
	static const char *const names[] = { "fail", "skip", NULL };
	int i;
	int rc = ss_parse_choice(option, text, names, &i);

	if (rc == 0)
		*policy = (enum ss_bad_lines)i;
	return rc;
}

static void ss_field_name(int field, char *name, size_t size)
{
	if (field == 0)
		snprintf(name, size, "label");
	else if (field <= SS_DENSE)
		snprintf(name, size, "I%d", field);
	else
		snprintf(name, size, "C%d", field - SS_DENSE);
}

static int ss_bad_field(int field, const char *text, size_t len,
			const char *what, char *why, size_t size)
{
	char name[8];

	ss_field_name(field, name, sizeof(name));
	snprintf(why, size, "field %d (%s) '%.*s' %s", field + 1, name,
		 (int)(len > 24 ? 24 : len), text, what);
	return SS_EPARSE;
}

static int ss_parse_dense(const char *s, size_t len, float *out)
{
	size_t i = 0;
	bool neg = false;
	double v = 0;

	if (len == 0) {
		*out = 0;
		return 0;
	}
	if (s[0] == '-') {
		neg = true;
		i = 1;
	}
	if (i == len)
		return -1;
	for (size_t d = i; d < len; d++)
		if (s[d] < '0' || s[d] > '9')
			return -1;
	if (len - i > 18)
		return -2; /* an integer, but no count in a log is that long */
	for (; i < len; i++)
		v = v * 10 + (s[i] - '0');
	*out = neg ? 0.0f : (float)log1p(v); /* log(1 + max(x, 0)) */
	return 0;
}

static int ss_parse_sparse(const char *s, size_t len, uint32_t *out)
{
	uint32_t v = 0;

	if (len == 0) {
		*out = 0;
		return 0;
	}
	if (len != 8)
		return -1;
	for (size_t i = 0; i < 8; i++) {
		char c = s[i];
		uint32_t d = c >= '0' && c <= '9' ? (uint32_t)(c - '0') :
			     c >= 'a' && c <= 'f' ? (uint32_t)(c - 'a' + 10) :
			     c >= 'A' && c <= 'F' ? (uint32_t)(c - 'A' + 10) :
						    16;

		if (d == 16)
			return -1;
		v = v << 4 | d;
	}
	*out = v;
	return 0;
}

int ss_parse_example(const char *line, size_t len, struct ss_example *ex,
		     char *why, size_t size)
{
	const char *p = line, *end;
	int field = 0;

	if (len && line[len - 1] == '\r')
		len--; /* CRLF files */
	end = line + len;
	for (;;) {
		const char *tab = memchr(p, '\t', (size_t)(end - p));
		const char *stop = tab ? tab : end;
		size_t flen = (size_t)(stop - p);

		if (field >= SS_FIELDS) {
			snprintf(why, size, "more than %d fields", SS_FIELDS);
			return SS_EPARSE;
		}
		if (field == 0) {
			if (flen != 1 || (p[0] != '0' && p[0] != '1'))
				return ss_bad_field(field, p, flen,
						    "is not 0 or 1", why, size);
			ex->label = (float)(p[0] - '0');
		} else if (field <= SS_DENSE) {
			int rc = ss_parse_dense(p, flen, &ex->dense[field - 1]);

			if (rc < 0)
				return ss_bad_field(
					field, p, flen,
					rc == -2 ? "has more than 18 digits" :
						   "is not an integer",
					why, size);
		} else if (ss_parse_sparse(p, flen,
					   &ex->sparse[field - 1 - SS_DENSE]) <
			   0) {
			return ss_bad_field(field, p, flen,
					    "is not 8 hex digits", why, size);
		}
		field++;
		if (!tab)
			break;
		p = tab + 1;
	}
	if (field != SS_FIELDS) {
		snprintf(why, size, "%d fields, want %d (tab-separated)", field,
			 SS_FIELDS);
		return SS_EPARSE;
	}
	return 0;
}

/*
 * @r on file @i from stream byte @at (in it, or its end): a line that
 * started before @at belongs to the range before.  Returns 0, or -errno
 * naming the file.
 */
static int ss_reader_goto(struct ss_reader *r, int i, uint64_t at)
{
	int c;

	if (r->f)
		fclose(r->f);
	r->file = i;
	r->path = r->files[i];
	r->base = 0;
	for (int k = 0; k < i; k++)
		r->base += r->sizes[k];
	r->f = fopen(r->path, "r");
	if (!r->f)
		return ss_error_set(-errno, NULL,
				    "check the path given with --data/--test",
				    "data file '%s'", r->path);
	r->pos = at;
	if (at > r->base) {
		if (fseeko(r->f, (off_t)(at - r->base - 1), SEEK_SET) < 0)
			return ss_error_set(-errno, NULL, NULL,
					    "seeking in '%s'", r->path);
		r->pos = at - 1;
		while ((c = fgetc(r->f)) != EOF) {
			r->pos++;
			if (c == '\n')
				break;
		}
	}
	r->first = r->pos - r->base;
	r->lines = 0;
	return 0;
}

int ss_reader_open_files(struct ss_reader **out, const char *const *paths,
			 int n, uint64_t begin, uint64_t end,
			 enum ss_bad_lines policy)
{
	struct ss_reader *r;
	struct stat st;
	uint64_t total = 0;
	int i = 0, rc;

	*out = NULL;
	if (n < 1)
		return ss_error_set(SS_EUSAGE, "no data files", NULL, "reader");
	r = calloc(1, sizeof(*r));
	if (r) {
		r->files = calloc((size_t)n, sizeof(*r->files));
		r->sizes = calloc((size_t)n, sizeof(*r->sizes));
		r->n_files = n;
		r->cap = SS_LINE_START;
		r->line = malloc(r->cap);
	}
	if (!r || !r->files || !r->sizes || !r->line) {
		ss_reader_close(&r);
		return ss_error_set(-ENOMEM, NULL, NULL, "reader");
	}
	for (int k = 0; k < n; k++) {
		if (!(r->files[k] = strdup(paths[k]))) {
			ss_reader_close(&r);
			return ss_error_set(-ENOMEM, NULL, NULL, "reader");
		}
		if (stat(paths[k], &st) < 0) {
			rc = ss_error_set(-errno, NULL,
					  "check the path given with "
					  "--data/--test",
					  "data file '%s'", paths[k]);
			ss_reader_close(&r);
			return rc;
		}
		r->sizes[k] = (uint64_t)st.st_size;
		/* the file @begin is in (the last one at the end) */
		if (begin >= total + r->sizes[k] && k + 1 < n)
			i = k + 1;
		total += r->sizes[k];
	}
	r->end = end;
	r->policy = policy;
	rc = ss_reader_goto(r, i, begin);
	if (rc < 0) {
		ss_reader_close(&r);
		return rc;
	}
	*out = r;
	return 0;
}

int ss_reader_open(struct ss_reader **out, const char *path, uint64_t begin,
		   uint64_t end, enum ss_bad_lines policy)
{
	return ss_reader_open_files(out, &path, 1, begin, end, policy);
}

/*
 * The absolute number (from 1) of the line just read, for an error that
 * ends the reading (0 when unknown).  A range that starts mid-file counts
 * the lines before it from the file's start: never for good or skipped
 * lines, which would make reading quadratic in the file's size.
 */
static uint64_t ss_line_number(struct ss_reader *r)
{
	uint64_t n = 0, pos = 0;
	FILE *f;
	int c;

	if (r->first == 0)
		return r->lines;
	f = fopen(r->path, "r");
	if (!f)
		return 0;
	while (pos < r->first && (c = fgetc(f)) != EOF) {
		pos++;
		n += c == '\n';
	}
	fclose(f);
	return n + r->lines;
}

/* Double the line buffer, up to SS_MAX_LINE + 2 bytes. */
static int ss_grow_line(struct ss_reader *r)
{
	size_t cap =
		2 * r->cap > SS_MAX_LINE + 2 ? SS_MAX_LINE + 2 : 2 * r->cap;
	char *line = realloc(r->line, cap);

	if (!line)
		return -ENOMEM;
	r->line = line;
	r->cap = cap;
	return 0;
}

/*
 * The next line into r->line, without its newline, NUL-terminated, NUL
 * bytes in it kept; @bytes: what it took of the file, the newline
 * included (0 at the end).  fgets, fast, does it: a line that ends in its
 * newline holds no NUL (strlen would stop there).  Any other (the file's
 * last, one that fills the buffer, one with a NUL byte that hides the
 * rest from strlen) is measured by the stream's position, the buffer
 * doubling while the line fills it.  A line longer than SS_MAX_LINE is
 * read to its end and comes out as SS_MAX_LINE + 1 long.  Returns the
 * length, or -EIO on a read error, -ENOMEM.
 */
static ssize_t ss_read_line(struct ss_reader *r, uint64_t *bytes)
{
	size_t len;
	off_t at;
	int c, rc;

	*bytes = 0;
	if (!fgets(r->line, (int)r->cap, r->f))
		return ferror(r->f) ? -EIO : 0;
	len = strlen(r->line);
	if (len > 0 && r->line[len - 1] == '\n') {
		*bytes = len;
		return (ssize_t)len - 1;
	}
	for (;;) {
		at = ftello(r->f);
		if (at < 0)
			return -EIO;
		len = (size_t)((uint64_t)at - (r->pos - r->base));
		/* ended by its newline or the file's end, or too long */
		if ((len > 0 && r->line[len - 1] == '\n') || len < r->cap - 1 ||
		    r->cap == SS_MAX_LINE + 2)
			break;
		rc = ss_grow_line(r);
		if (rc < 0)
			return rc;
		if (!fgets(r->line + len, (int)(r->cap - len), r->f)) {
			if (ferror(r->f))
				return -EIO;
			break; /* the file ends where the buffer did */
		}
	}
	*bytes = len;
	if (len > 0 && r->line[len - 1] == '\n') {
		r->line[--len] = '\0';
	} else if (len > SS_MAX_LINE) {
		while ((c = fgetc(r->f)) != EOF) {
			++*bytes;
			if (c == '\n')
				break;
		}
	}
	return (ssize_t)len;
}

/*
 * A skipped line, said: the first SS_SKIPS_SAID of the process by file
 * and line number with what was wrong (a warning: what a user looks for
 * first), every one by byte at debug level (a line number costs a pass
 * over the file before the range, for every chunk: five do).
 */
#define SS_SKIPS_SAID 5
static unsigned ss_skips_said;

static void ss_reader_said_skip(struct ss_reader *r, uint64_t start,
				const char *why)
{
	unsigned n = __atomic_fetch_add(&ss_skips_said, 1, __ATOMIC_RELAXED);

	if (n < SS_SKIPS_SAID)
		ss_log_warn("--bad-lines skip: %s:%llu skipped: %s%s", r->path,
			    (unsigned long long)ss_line_number(r), why,
			    n + 1 == SS_SKIPS_SAID ?
				    " (the others are counted; SS_LOG=debug "
				    "names each)" :
				    "");
	ss_log_debug("%s: skipped the line at byte %llu: %s", r->path,
		     (unsigned long long)start, why);
}

int ss_reader_next(struct ss_reader *r, struct ss_example *ex)
{
	char why[160];

	for (;;) {
		uint64_t start = r->pos, bytes;
		ssize_t len;

		if (r->end && start >= r->end)
			return 0;
		/* a buffer of at most SS_MAX_LINE + 2 bytes: memory stays
		 * bounded whatever the file holds; a longer line is read
		 * past and reported */
		len = ss_read_line(r, &bytes);
		if (len < 0)
			return ss_error_set((int)len, NULL, NULL,
					    "reading '%s'", r->path);
		/* this file's end: the next one's first line, if any */
		if (bytes == 0 && r->file + 1 < r->n_files) {
			int rc = ss_reader_goto(r, r->file + 1,
						r->base + r->sizes[r->file]);

			if (rc < 0)
				return rc;
			continue;
		}
		if (bytes == 0)
			return 0;
		/* every byte counts, a NUL too: byte ranges of the file then
		 * hold each line exactly once */
		r->pos += bytes;
		r->lines++;
		if (len > SS_MAX_LINE)
			snprintf(why, sizeof(why), "longer than %d bytes",
				 SS_MAX_LINE);
		else if (memchr(r->line, '\0', (size_t)len))
			snprintf(why, sizeof(why),
				 "a NUL byte in the line (a binary file?)");
		else if (ss_parse_example(r->line, (size_t)len, ex, why,
					  sizeof(why)) == 0)
			return 1;
		if (r->policy == SS_BAD_LINES_SKIP) {
			r->skipped++;
			ss_reader_said_skip(r, start, why);
			continue;
		}
		return ss_error_set(
			SS_EPARSE, why,
			"fix the line, or pass --bad-lines=skip to count and skip such lines",
			"%s:%llu", r->path,
			(unsigned long long)ss_line_number(r));
	}
}

int ss_reader_fill(struct ss_reader *r, struct ss_example *examples, int max)
{
	int got = 0, rc = 1;

	while (got < max && (rc = ss_reader_next(r, &examples[got])) == 1)
		got++;
	return rc < 0 ? rc : got;
}

uint64_t ss_reader_tell(const struct ss_reader *r)
{
	return r->pos;
}

uint64_t ss_reader_skipped(const struct ss_reader *r)
{
	return r->skipped;
}

void ss_reader_close(struct ss_reader **reader)
{
	struct ss_reader *r;

	if (!reader || !*reader)
		return;
	r = *reader;
	if (r->f)
		fclose(r->f);
	free(r->line);
	for (int k = 0; r->files && k < r->n_files; k++)
		free(r->files[k]);
	free(r->files);
	free(r->sizes);
	free(r);
	*reader = NULL;
}
