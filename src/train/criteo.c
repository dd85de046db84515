// SPDX-License-Identifier: BSD-2-Clause
/*
 * The Criteo Kaggle format: label, I1..I13 (integers, possibly empty or
 * negative), C1..C26 (8 hex digits, possibly empty), tab-separated.  The
 * reader streams a byte range of a file one line at a time, so memory stays
 * bounded by the longest line, and N readers with adjacent ranges read
 * every line exactly once: a line belongs to the range holding its first
 * byte.
 *
 * A categorical field may hold several values, comma-separated
 * (multi-hot data, train.h): ss_reader_fill_bags() keeps them all, one
 * after the other in a struct ss_bags; the single-value calls refuse
 * such a line.
 *
 * Every file is read through zlib's gz calls: a gzip file (its magic
 * bytes, 1f 8b, say so, not its name) decompressed, one member or several
 * (`cat a.gz b.gz`), any other file as it is.  Positions are bytes of the
 * uncompressed data, so a range of a gzip file holds the same lines as
 * the range of its plain copy; reaching one decompresses the file from
 * its start (a plain file is opened where the range starts).  "-" is
 * standard input, read once from its start.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "shadowsync/train.h"

#define SS_FIELDS (1 + SS_DENSE + SS_SPARSE)
#define SS_MAX_LINE (1 << 20) /* a longer line is not Criteo data */
/* The line buffer's first size (a Criteo line is about 300 bytes); it
 * doubles for a longer line, up to SS_MAX_LINE + 2. */
#define SS_LINE_START 1024
/* zlib's buffer for a file (its default, 8 KiB, means more reads) */
#define SS_GZ_BUFFER (128 << 10)
/* a gzip file this large is said when its length is measured: seconds */
#define SS_GZ_SAID (64 << 20)

/*
 * Several files are one stream, in order: byte b of the stream is in the
 * file whose bytes [base, base + size) hold it, and every file starts a
 * line (one whose last line has no newline ends it at its end).
 */
struct ss_reader {
	gzFile f; /* the file being read, @file of @n_files */
	char *path; /* its name (one of @files) */
	char **files;
	/* in the stream (a gzip file's uncompressed), as far as known:
	 * the files before the one read are */
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
	char name[16]; /* "C26"; room for any int, as GCC counts */

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

/*
 * Where a multi-hot line's values go: @b's ids from @n on, its feature j's
 * first at @start[j] (the example's row of the bags' starts).
 */
struct ss_bag_sink {
	struct ss_bags *b;
	uint32_t *start;
	size_t n;
};

static int ss_sink_put(struct ss_bag_sink *k, uint32_t v)
{
	if (k->n == k->b->cap) {
		size_t cap = k->b->cap ? 2 * k->b->cap : 4096;
		/* the starts are 32-bit */
		uint32_t *ids =
			cap > UINT32_MAX ?
				NULL :
				realloc(k->b->ids, cap * sizeof(uint32_t));

		if (!ids)
			return -1;
		k->b->ids = ids;
		k->b->cap = cap;
	}
	k->b->ids[k->n++] = v;
	return 0;
}

/*
 * Categorical field @field (C1 at 1 + SS_DENSE) of @len bytes at @s:
 * its first value into *@out, and with a sink every value into it.
 */
static int ss_parse_bag(const char *s, size_t len, int field, uint32_t *out,
			struct ss_bag_sink *k, char *why, size_t size)
{
	const char *comma = memchr(s, ',', len), *end = s + len;

	if (!comma) {
		if (ss_parse_sparse(s, len, out) < 0)
			return ss_bad_field(field, s, len,
					    "is not 8 hex digits", why, size);
		return k && ss_sink_put(k, *out) < 0 ? -ENOMEM : 0;
	}
	if (!k)
		return ss_bad_field(field, s, len,
				    "holds several values (multi-hot data), "
				    "where one is read",
				    why, size);
	for (const char *p = s;; p = comma + 1) {
		uint32_t v;

		comma = memchr(p, ',', (size_t)(end - p));
		if ((comma ? comma : end) == p)
			return ss_bad_field(field, s, len,
					    p == s   ? "starts with a comma" :
					    p == end ? "ends with a comma" :
						       "has an empty value "
						       "between commas",
					    why, size);
		if (ss_parse_sparse(p, (size_t)((comma ? comma : end) - p),
				    &v) < 0)
			return ss_bad_field(field, s, len,
					    "has a value that is not 8 hex "
					    "digits",
					    why, size);
		if (p == s)
			*out = v;
		if (ss_sink_put(k, v) < 0)
			return -ENOMEM;
		if (!comma)
			return 0;
	}
}

/* A line into @ex, and with @k its values into the bags. */
static int ss_parse_line(const char *line, size_t len, struct ss_example *ex,
			 struct ss_bag_sink *k, char *why, size_t size)
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
		} else {
			int j = field - 1 - SS_DENSE, rc;

			if (k)
				k->start[j] = (uint32_t)k->n;
			rc = ss_parse_bag(p, flen, field, &ex->sparse[j], k,
					  why, size);
			if (rc < 0)
				return rc == -ENOMEM ? rc : SS_EPARSE;
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
	if (k)
		k->start[SS_SPARSE] = (uint32_t)k->n;
	return 0;
}

int ss_parse_example(const char *line, size_t len, struct ss_example *ex,
		     char *why, size_t size)
{
	return ss_parse_line(line, len, ex, NULL, why, size);
}

static bool ss_is_stdin(const char *path)
{
	return strcmp(path, "-") == 0;
}

/*
 * What the gz calls on @f (of @path) met: 0 for nothing or the end of the
 * file, else the error, naming the file and, when @line is not 0, the
 * line being read.  A gzip file that ends inside a member (truncated) or
 * does not decompress is an error of the file, never a bad line that
 * --bad-lines skip would pass over.
 */
static int ss_gz_failed(gzFile f, const char *path, uint64_t line)
{
	static const char hint[] = "check it with gzip -t; copy it again, or "
				   "leave it out";
	char why[200], what[64] = "";
	int err;
	const char *msg = gzerror(f, &err), *colon = strstr(msg, ": ");

	if (err == Z_OK)
		return 0;
	if (colon) /* zlib's "<fd:3>: " */
		msg = colon + 2;
	if (line)
		snprintf(what, sizeof(what), ", line %llu",
			 (unsigned long long)line);
	if (err == Z_MEM_ERROR)
		return ss_error_set(-ENOMEM, NULL, NULL, "reading '%s'", path);
	if (err == Z_ERRNO)
		return ss_error_set(-EIO, msg, NULL, "reading '%s'%s", path,
				    what);
	if (err == Z_BUF_ERROR)
		return ss_error_set(SS_EPARSE,
				    "the gzip data ends early: a truncated "
				    "file",
				    hint, "gzip file '%s'%s", path, what);
	snprintf(why, sizeof(why), "corrupted gzip data (%s)", msg);
	return ss_error_set(SS_EPARSE, why, hint, "gzip file '%s'%s", path,
			    what);
}

/* Whether the file open as @fd starts with gzip's magic bytes, 1f 8b. */
static bool ss_fd_is_gzip(int fd)
{
	unsigned char m[2];

	return pread(fd, m, 2, 0) == 2 && m[0] == 0x1f && m[1] == 0x8b;
}

/* A descriptor of data file @path ("-": standard input's), or the error
 * naming it. */
static int ss_data_fd(const char *path)
{
	int fd = ss_is_stdin(path) ? fcntl(STDIN_FILENO, F_DUPFD_CLOEXEC, 0) :
				     open(path, O_RDONLY | O_CLOEXEC);

	return fd >= 0 ? fd :
			 ss_error_set(-errno, NULL,
				      "check the path given with --data/--test",
				      "data file '%s'", path);
}

/*
 * @path ("-": a copy of standard input) open for the gz calls in *@out,
 * at its byte @at, and whether it is gzip (its first bytes 1f 8b) in
 * *@gzip: a plain file opened there, the gz calls' positions then
 * counting from @at; a gzip file decompressed from its start to it, as
 * the next read comes.  Returns 0, or the error naming the file.
 */
static int ss_data_open(const char *path, uint64_t at, gzFile *out, bool *gzip)
{
	int fd = ss_data_fd(path);

	*out = NULL;
	if (fd < 0)
		return fd;
	/* (standard input is only read from where it is: @at is 0) */
	*gzip = ss_fd_is_gzip(fd);
	*out = gzdopen(fd, "rb");
	if (!*out) {
		close(fd);
		return ss_error_set(-ENOMEM, NULL, NULL, "data file '%s'",
				    path);
	}
	gzbuffer(*out, SS_GZ_BUFFER);
	/*
	 * zlib tells gzip from plain by the first bytes it reads: a plain
	 * file's are read at its start (gzdirect), where they are known not
	 * to be gzip's, since at @at they could look so; its seek is then an
	 * lseek.  A gzip file is decompressed from its start to @at.
	 */
	if (at && !*gzip)
		gzdirect(*out);
	if (at && gzseek(*out, (z_off_t)at, SEEK_SET) < 0) {
		int rc = ss_gz_failed(*out, path, 0) ?:
				 ss_error_set(-EIO, NULL, NULL,
					      "seeking in '%s'", path);

		gzclose(*out);
		*out = NULL;
		return rc;
	}
	return 0;
}

/* The bytes @f (of @path) has left, read through. */
static int ss_gz_measure(gzFile f, const char *path, uint64_t *len)
{
	char *buf = malloc(SS_GZ_BUFFER);
	int n;

	*len = 0;
	if (!buf)
		return ss_error_set(-ENOMEM, NULL, NULL, "data file '%s'",
				    path);
	while ((n = gzread(f, buf, SS_GZ_BUFFER)) > 0)
		*len += (uint64_t)n;
	free(buf);
	return ss_gz_failed(f, path, 0);
}

/* The gzip files measured, for the process: a file by what stat says
 * (its change time too: a rewrite can set the modification time back,
 * as cp -p and rsync -t do, but not that). */
struct ss_gzip_len {
	struct ss_gzip_len *next;
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime, ctime;
	uint64_t len;
};

static bool ss_same_time(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}
static struct ss_gzip_len *ss_gzip_lens;
static pthread_mutex_t ss_gzip_lens_lock = PTHREAD_MUTEX_INITIALIZER;

/* Gzip file @path (open as @f, seen as @st)'s length, measured once. */
static int ss_gzip_length(const char *path, gzFile f, const struct stat *st,
			  uint64_t *len)
{
	struct ss_gzip_len *e;
	uint64_t start;
	int rc = 0;

	/* held while measuring: trainers that open the file at once wait
	 * for one measure */
	pthread_mutex_lock(&ss_gzip_lens_lock);
	for (e = ss_gzip_lens; e; e = e->next)
		if (e->dev == st->st_dev && e->ino == st->st_ino &&
		    e->size == st->st_size &&
		    ss_same_time(&e->mtime, &st->st_mtim) &&
		    ss_same_time(&e->ctime, &st->st_ctim))
			break;
	if (e) {
		*len = e->len;
		goto out;
	}
	if (st->st_size >= SS_GZ_SAID)
		ss_log_info("'%s' is gzip: reading it through once for its "
			    "uncompressed length (%lld MiB compressed)",
			    path, (long long)(st->st_size >> 20));
	start = ss_now_ns();
	rc = ss_gz_measure(f, path, len);
	if (rc == 0 && st->st_size >= SS_GZ_SAID)
		ss_log_info("'%s': %llu bytes uncompressed (%.1f s)", path,
			    (unsigned long long)*len,
			    (double)(ss_now_ns() - start) / 1e9);
	e = rc == 0 ? malloc(sizeof(*e)) : NULL;
	if (e) {
		*e = (struct ss_gzip_len){ .next = ss_gzip_lens,
					   .dev = st->st_dev,
					   .ino = st->st_ino,
					   .size = st->st_size,
					   .mtime = st->st_mtim,
					   .ctime = st->st_ctim,
					   .len = *len };
		ss_gzip_lens = e;
	}
out:
	pthread_mutex_unlock(&ss_gzip_lens_lock);
	return rc;
}

int ss_data_size(const char *path, uint64_t *size, bool *gzip)
{
	struct stat st;
	gzFile f = NULL;
	bool gz = false;
	int rc = 0;

	*size = ss_is_stdin(path) ? SS_DATA_SIZE_UNKNOWN : 0;
	if (gzip)
		*gzip = false;
	if (ss_is_stdin(path))
		return 0;
	if (stat(path, &st) < 0)
		return ss_error_set(-errno, NULL,
				    "check the path given with --data/--test",
				    "data file '%s'", path);
	/* opened only when it is a file (a FIFO would hold us), through
	 * zlib only when it is gzip */
	if (S_ISREG(st.st_mode) && st.st_size >= 2) {
		int fd = ss_data_fd(path);

		if (fd < 0)
			return fd;
		gz = ss_fd_is_gzip(fd);
		close(fd);
		if (gz)
			rc = ss_data_open(path, 0, &f, &gz);
	}
	if (rc == 0 && gz)
		rc = ss_gzip_length(path, f, &st, size);
	else if (rc == 0)
		*size = (uint64_t)st.st_size;
	if (f)
		gzclose(f);
	if (gzip)
		*gzip = gz;
	return rc;
}

/*
 * @r on file @i from stream byte @at (in it, or its end): a line that
 * started before @at belongs to the range before.  Returns 0, or the
 * error naming the file.
 */
static int ss_reader_goto(struct ss_reader *r, int i, uint64_t at)
{
	bool gz;
	int c, rc;

	if (r->f)
		gzclose(r->f);
	r->f = NULL;
	r->file = i;
	r->path = r->files[i];
	r->base = 0;
	for (int k = 0; k < i; k++)
		r->base += r->sizes[k];
	/* from the byte before @at: is it the newline ending a line? */
	rc = ss_data_open(r->path, at > r->base ? at - r->base - 1 : 0, &r->f,
			  &gz);
	if (rc < 0)
		return rc;
	r->pos = at;
	if (at > r->base) {
		r->pos = at - 1;
		while ((c = gzgetc(r->f)) != -1) {
			r->pos++;
			if (c == '\n')
				break;
		}
		if (c == -1 && (rc = ss_gz_failed(r->f, r->path, 0)) < 0)
			return rc;
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
	int i = 0, rc = 0;

	*out = NULL;
	if (n < 1)
		return ss_error_set(SS_EUSAGE, "no data files", NULL, "reader");
	for (int k = 0; k < n; k++)
		if (ss_is_stdin(paths[k]) && (n > 1 || begin))
			return ss_error_set(
				SS_EUSAGE,
				n > 1 ? "standard input is read alone" :
					"standard input is read from its start",
				"give files to read several, or parts",
				"data file '-'");
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
	for (int k = 0; k < n && rc == 0; k++) {
		r->sizes[k] = SS_DATA_SIZE_UNKNOWN;
		if (!(r->files[k] = strdup(paths[k])))
			rc = ss_error_set(-ENOMEM, NULL, NULL, "reader");
		/* the lengths of the files before the one @begin is in (the
		 * last one at the end); the others are measured as they are
		 * read, a gzip file's not decompressed twice */
		else if (k == i && begin > total) {
			rc = ss_data_size(paths[k], &r->sizes[k], NULL);
			if (rc == 0 && begin >= total + r->sizes[k] &&
			    k + 1 < n)
				i = k + 1;
			total += r->sizes[k];
		} else if (!ss_is_stdin(paths[k]) && stat(paths[k], &st) < 0) {
			rc = ss_error_set(-errno, NULL,
					  "check the path given with "
					  "--data/--test",
					  "data file '%s'", paths[k]);
		}
	}
	r->end = end;
	r->policy = policy;
	if (rc == 0)
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
	gzFile f;
	char *buf;
	bool gz;
	int got = 0;

	if (r->first == 0)
		return r->lines;
	buf = malloc(SS_GZ_BUFFER);
	if (!buf || ss_data_open(r->path, 0, &f, &gz) < 0) {
		free(buf);
		return 0;
	}
	while (pos < r->first &&
	       (got = gzread(f, buf,
			     (unsigned)(r->first - pos < SS_GZ_BUFFER ?
						r->first - pos :
						SS_GZ_BUFFER))) > 0) {
		for (char *p = buf;
		     (p = memchr(p, '\n', (size_t)(buf + got - p))); p++)
			n++;
		pos += (uint64_t)got;
	}
	gzclose(f);
	free(buf);
	return got < 0 ? 0 : n + r->lines;
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
 * The error of @r's file (ss_gz_failed()) at the line after the last one
 * read, 0 when there is none.
 */
static int ss_reader_failed(struct ss_reader *r)
{
	uint64_t n;
	int err;

	gzerror(r->f, &err);
	if (err == Z_OK)
		return 0;
	/* a range that starts mid-file has a newline before it: 0 lines
	 * before it is a count that failed */
	n = ss_line_number(r);
	return ss_gz_failed(r->f, r->path, r->first && !n ? 0 : n + 1);
}

/*
 * The next line into r->line, without its newline, NUL-terminated, NUL
 * bytes in it kept; @bytes: what it took of the file, the newline
 * included (0 at the end).  gzgets, fast, does it: a line that ends in its
 * newline holds no NUL (strlen would stop there).  Any other (the file's
 * last, one that fills the buffer, one with a NUL byte that hides the
 * rest from strlen) is measured by the stream's position, the buffer
 * doubling while the line fills it.  A line longer than SS_MAX_LINE is
 * read to its end and comes out as SS_MAX_LINE + 1 long.  A line that
 * does not end in its newline is the file's last only when zlib met no
 * error: a truncated gzip file's last piece is no line.  Returns the
 * length, or an error with its detail (ss_reader_failed(), -ENOMEM).
 */
static ssize_t ss_read_line(struct ss_reader *r, uint64_t *bytes)
{
	size_t len;
	z_off_t at;
	int c, rc;

	*bytes = 0;
	if (!gzgets(r->f, r->line, (int)r->cap))
		return ss_reader_failed(r);
	len = strlen(r->line);
	if (len > 0 && r->line[len - 1] == '\n') {
		*bytes = len;
		return (ssize_t)len - 1;
	}
	for (;;) {
		at = gztell(r->f);
		if (at < 0)
			return ss_reader_failed(r) ?:
				       ss_error_set(-EIO, NULL, NULL,
						    "reading '%s'", r->path);
		len = (size_t)((uint64_t)at - (r->pos - r->base));
		/* ended by its newline or the file's end, or too long */
		if ((len > 0 && r->line[len - 1] == '\n') || len < r->cap - 1 ||
		    r->cap == SS_MAX_LINE + 2)
			break;
		rc = ss_grow_line(r);
		if (rc < 0)
			return ss_error_set(rc, NULL, NULL, "reading '%s'",
					    r->path);
		if (!gzgets(r->f, r->line + len, (int)(r->cap - len)))
			break; /* the file ends where the buffer did */
	}
	*bytes = len;
	if (len > 0 && r->line[len - 1] == '\n') {
		r->line[--len] = '\0';
		return (ssize_t)len;
	}
	if (len > SS_MAX_LINE) {
		while ((c = gzgetc(r->f)) != -1) {
			++*bytes;
			if (c == '\n')
				break;
		}
	}
	/* the reading may have stopped at an error, not at the end */
	rc = ss_reader_failed(r);
	return rc < 0 ? rc : (ssize_t)len;
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

/* The next example, and with @k its values into the bags. */
static int ss_reader_read(struct ss_reader *r, struct ss_example *ex,
			  struct ss_bag_sink *k)
{
	char why[160];

	for (;;) {
		uint64_t start = r->pos, bytes;
		size_t had = k ? k->n : 0;
		ssize_t len;
		int rc;

		if (r->end && start >= r->end)
			return 0;
		/* a buffer of at most SS_MAX_LINE + 2 bytes: memory stays
		 * bounded whatever the file holds; a longer line is read
		 * past and reported */
		len = ss_read_line(r, &bytes);
		if (len < 0)
			return (int)len;
		/* this file's end: the next one's first line, if any */
		if (bytes == 0 && r->file + 1 < r->n_files) {
			int rc;

			/* measured by reading it */
			r->sizes[r->file] = r->pos - r->base;
			rc = ss_reader_goto(r, r->file + 1, r->pos);

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
		else if ((rc = ss_parse_line(r->line, (size_t)len, ex, k, why,
					     sizeof(why))) == 0)
			return 1;
		else if (rc == -ENOMEM)
			return ss_error_set(
				-ENOMEM, NULL, NULL, "%s:%llu: its values",
				r->path, (unsigned long long)ss_line_number(r));
		if (k) /* the bad line's values, if any */
			k->n = had;
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

int ss_reader_next(struct ss_reader *r, struct ss_example *ex)
{
	return ss_reader_read(r, ex, NULL);
}

int ss_bags_create(struct ss_bags **out, int max)
{
	struct ss_bags *b = calloc(1, sizeof(*b));

	*out = NULL;
	if (b) {
		b->max = max;
		b->start =
			calloc((size_t)max * SS_SPARSE + 1, sizeof(uint32_t));
		b->cap = (size_t)max * SS_SPARSE;
		b->ids = malloc((b->cap ? b->cap : 1) * sizeof(uint32_t));
	}
	if (!b || !b->start || !b->ids) {
		ss_bags_destroy(&b);
		return ss_error_set(-ENOMEM, NULL, NULL, "bags of %d examples",
				    max);
	}
	*out = b;
	return 0;
}

void ss_bags_destroy(struct ss_bags **bags)
{
	if (!bags || !*bags)
		return;
	free((*bags)->start);
	free((*bags)->ids);
	free(*bags);
	*bags = NULL;
}

int ss_reader_fill_bags(struct ss_reader *r, struct ss_example *examples,
			struct ss_bags *bags, int max)
{
	struct ss_bag_sink k = { .b = bags };
	int got = 0, rc = 1;

	max = max < bags->max ? max : bags->max;
	bags->start[0] = 0;
	while (got < max) {
		k.start = bags->start + (size_t)got * SS_SPARSE;
		rc = ss_reader_read(r, &examples[got], &k);
		if (rc != 1)
			break;
		got++;
	}
	return rc < 0 ? rc : got;
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
		gzclose(r->f);
	free(r->line);
	for (int k = 0; r->files && k < r->n_files; k++)
		free(r->files[k]);
	free(r->files);
	free(r->sizes);
	free(r);
	*reader = NULL;
}
