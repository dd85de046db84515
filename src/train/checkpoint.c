// SPDX-License-Identifier: BSD-2-Clause
/*
 * Checkpoints (layout in include/shadowsync/checkpoint.h): saved through a
 * temporary file and a rename so that a crash never leaves half a file
 * under the real name; loaded only after the whole file has been checked,
 * so a bad file never half-overwrites a replica.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/hogwild.h"
#include "shadowsync/base.h"
#include "shadowsync/checkpoint.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "checkpoints store little-endian floats; add byte swapping here"
#endif

#define SS_CKPT_MAGIC "SSCKPT\0\0"
#define SS_CKPT_HEADER 64
#define SS_CKPT_CHUNK (1u << 20) /* floats copied, hashed, written at once */
/* The caller's bytes after the floats (version 3): a record, not data. */
#define SS_CKPT_MAX_EXTRA (1u << 20)

/*
 * The checksum: xxHash64's round over each 64-bit word (multiply, rotate,
 * multiply), so that a change in any bit reaches every bit of the state;
 * a plain FNV step over whole words never carries a high bit down, and two
 * flipped signs cancel.  Trailing bytes are folded in the same way.
 */
static const uint64_t ss_sum_seed = 0x27d4eb2f165667c5ull;

static uint64_t ss_sum_round(uint64_t h, uint64_t w)
{
	h += w * 0xc2b2ae3d27d4eb4full;
	h = h << 31 | h >> 33;
	return h * 0x9e3779b185ebca87ull;
}

static uint64_t ss_sum(uint64_t h, const void *data, size_t bytes)
{
	const unsigned char *p = data;
	size_t i = 0;

	for (; i + 8 <= bytes; i += 8) {
		uint64_t w;

		memcpy(&w, p + i, 8);
		h = ss_sum_round(h, w);
	}
	for (; i < bytes; i++)
		h = ss_sum_round(h, p[i]);
	return h;
}

static void ss_put64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t ss_get64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void ss_put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t ss_get32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

/* The checksum's end: the header's bytes but the checksum's own. */
static uint64_t ss_head_sum(uint64_t h, const unsigned char *head,
			    uint32_t version)
{
	h = ss_sum(h, head, 40);
	return version == 1 ? h : ss_sum(h, head + 48, SS_CKPT_HEADER - 48);
}

/* A copy of trainers' memory: racy by design, see checkpoint.h. */
SS_HOGWILD static void ss_snapshot(float *dst, const float *src, size_t n)
{
	memcpy(dst, src, n * sizeof(float));
}

static int ss_write_all(int fd, const void *buf, size_t len, const char *path)
{
	const char *p = buf;

	while (len > 0) {
		ssize_t got = write(fd, p, len);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return ss_error_set(-errno, NULL,
					    "check the free space and rights",
					    "writing checkpoint '%s'", path);
		p += got;
		len -= (size_t)got;
	}
	return 0;
}

static int ss_read_all(int fd, void *buf, size_t len, const char *path)
{
	char *p = buf;

	while (len > 0) {
		ssize_t got = read(fd, p, len);

		if (got < 0 && errno == EINTR)
			continue;
		if (got < 0)
			return ss_error_set(-errno, NULL, NULL,
					    "reading checkpoint '%s'", path);
		if (got == 0)
			return ss_error_set(SS_EPARSE, "the file is truncated",
					    "it was not written whole; use an "
					    "older checkpoint",
					    "checkpoint '%s'", path);
		p += got;
		len -= (size_t)got;
	}
	return 0;
}

static size_t ss_parts_len(const struct ss_checkpoint_part *parts, int n)
{
	size_t len = 0;

	for (int i = 0; i < n; i++)
		len += parts[i].n;
	return len;
}

/*
 * Copy the floats [@at, @at + @k) of the parts laid end to end into
 * @chunk (@to_chunk) or out of it.
 */
static void ss_parts_copy(const struct ss_checkpoint_part *parts, int n,
			  size_t at, float *chunk, size_t k, bool to_chunk)
{
	for (int i = 0; i < n && k > 0; i++) {
		size_t m;

		if (at >= parts[i].n) {
			at -= parts[i].n;
			continue;
		}
		m = parts[i].n - at < k ? parts[i].n - at : k;
		if (to_chunk)
			ss_snapshot(chunk, parts[i].ptr + at, m);
		else if (parts[i].ptr)
			memcpy(parts[i].ptr + at, chunk, m * sizeof(float));
		chunk += m;
		k -= m;
		at = 0;
	}
}

/*
 * Writes a snapshot of the parts' floats through @chunk, adding them to
 * the checksum @h: the mirror of ss_read_summed() below.  The chunks are
 * those of one array of their total length, whatever the parts.
 */
static int ss_write_summed(int fd, const struct ss_checkpoint_part *parts,
			   int np, float *chunk, uint64_t *h, const char *path)
{
	size_t n = ss_parts_len(parts, np);
	int rc = 0;

	for (size_t at = 0; rc == 0 && at < n; at += SS_CKPT_CHUNK) {
		size_t k = n - at < SS_CKPT_CHUNK ? n - at : SS_CKPT_CHUNK;

		ss_parts_copy(parts, np, at, chunk, k, true);
		*h = ss_sum(*h, chunk, k * sizeof(float));
		rc = ss_write_all(fd, chunk, k * sizeof(float), path);
	}
	return rc;
}

/*
 * The buffer for the chunks of @n floats: no larger than they need (a
 * small model's save or load does not take 4 MiB).  The checksum is the
 * same whatever it is, one chunk or many of SS_CKPT_CHUNK.
 */
static float *ss_chunk_alloc(size_t n)
{
	size_t k = n < SS_CKPT_CHUNK ? n : SS_CKPT_CHUNK;

	return malloc((k ? k : 1) * sizeof(float));
}

/* The folder's entry for the rename must reach the disk too. */
static int ss_sync_folder(const char *path)
{
	char *copy = strdup(path);
	int fd, rc = 0;

	if (!copy)
		return ss_error_set(-ENOMEM, NULL, NULL, "saving '%s'", path);
	fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		rc = ss_error_set(-errno, NULL,
				  "the checkpoint is in place but may not "
				  "survive a crash",
				  "fsync of the folder of '%s'", path);
	if (fd >= 0)
		close(fd);
	free(copy);
	return rc;
}

/*
 * Whether @tmp, which exists, is what a save left there: empty, a header
 * not yet written (a hole of zeros: it goes last), or a whole checkpoint
 * not yet renamed.  Anything else is someone's file, which the fixed
 * temporary name must not truncate (`--data x.tmp --save x` lost its
 * data).
 */
static bool ss_is_left_by_a_save(const char *tmp)
{
	unsigned char head[SS_CKPT_HEADER];
	/* not through a link, and a FIFO's open must not wait */
	int fd = open(tmp, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	ssize_t n = fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ?
			    -1 :
			    read(fd, head, sizeof(head));
	bool zeros = n >= 0;

	if (fd >= 0)
		close(fd);
	for (ssize_t i = 0; i < n && zeros; i++)
		zeros = head[i] == 0;
	return zeros || (n >= 8 && memcmp(head, SS_CKPT_MAGIC, 8) == 0);
}

static int ss_tmp_not_ours(const char *tmp, const char *path)
{
	return ss_error_set(-EEXIST, "it exists and is not a checkpoint",
			    "saving writes PATH.tmp, then renames it to PATH: "
			    "move that file away, or save under another name",
			    "saving '%s': its temporary file '%s'", path, tmp);
}

/*
 * Whether @at (where a save to @path lands) may be replaced: absent, an
 * empty file or a checkpoint.  Anything else is someone's file, which a
 * save must not rename over (`--save data.txt` replaced the data).
 * Non-blocking: a FIFO there would hold the open for ever.
 */
static int ss_check_replaceable(const char *at, const char *path)
{
	unsigned char magic[8];
	struct stat st;
	const char *why = NULL;
	ssize_t n = 0;
	int fd;

	/* what is there, before opening it: a device's open may act */
	if (stat(at, &st) < 0)
		return errno == ENOENT ? 0 :
					 ss_error_set(-errno, NULL,
						      "check the path and "
						      "its rights",
						      "saving '%s'", path);
	if (!S_ISREG(st.st_mode)) {
		why = S_ISDIR(st.st_mode) ? "it is a folder" :
					    "it is not a regular file";
	} else if ((fd = open(at, O_RDONLY | O_CLOEXEC)) < 0) {
		why = "it cannot be read, to see that it is a checkpoint";
	} else {
		n = read(fd, magic, sizeof(magic));
		close(fd);
		if (n != 0 && (n != sizeof(magic) ||
			       memcmp(magic, SS_CKPT_MAGIC, 8) != 0))
			why = "it exists and is not a checkpoint";
	}
	if (!why)
		return 0;
	return ss_error_set(-EEXIST, why,
			    "a save replaces only an earlier checkpoint: "
			    "move that file away, or save under another name",
			    "saving '%s'%s%s%s", path,
			    at != path ? " to '" : "", at != path ? at : "",
			    at != path ? "'" : "");
}

/* A new @tmp, after what an earlier save left there. */
static int ss_open_tmp(const char *tmp, const char *path)
{
	int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	int fd = open(tmp, flags, 0644);

	if (fd < 0 && errno == EEXIST) {
		if (!ss_is_left_by_a_save(tmp))
			return ss_tmp_not_ours(tmp, path);
		unlink(tmp);
		fd = open(tmp, flags, 0644);
	}
	if (fd < 0)
		return ss_error_set(-errno, NULL,
				    "the checkpoint's folder must exist and be "
				    "writable",
				    "creating '%s'", tmp);
	return fd;
}

int ss_checkpoint_save(const char *path, const float *params,
		       const float *state, size_t n, uint64_t layout_hash,
		       uint64_t examples)
{
	struct ss_checkpoint_part p = { (float *)params, n },
				  st = { (float *)state, n };

	return ss_checkpoint_save_parts(path, &p, 1, state ? &st : NULL,
					state ? 1 : 0, layout_hash, examples);
}

/*
 * Where a save to @path goes: a symbolic link's target (the storage it
 * points at, often another file system), else @path.  Renamed over the
 * link, the checkpoint replaced the link with a file beside it, on the
 * node.  Returns a string to free, or NULL for @path itself.
 */
static char *ss_save_target(const char *path)
{
	char link[4096], *dir, *out = NULL;
	struct stat st;
	ssize_t len;

	if (lstat(path, &st) < 0 || !S_ISLNK(st.st_mode))
		return NULL;
	out = realpath(path, NULL);
	if (out)
		return out;
	/* not there yet: the link's text, from the link's folder */
	len = readlink(path, link, sizeof(link) - 1);
	if (len <= 0)
		return NULL;
	link[len] = '\0';
	if (link[0] == '/')
		return strdup(link);
	dir = strdup(path);
	if (dir && asprintf(&out, "%s/%s", dirname(dir), link) < 0)
		out = NULL;
	free(dir);
	return out;
}

int ss_checkpoint_tmp_path(const char *path, char *buf, size_t size)
{
	char *target = ss_save_target(path);
	int len = snprintf(buf, size, "%s" SS_CHECKPOINT_TMP_SUFFIX,
			   target ? target : path);

	free(target);
	if (len < 0 || (size_t)len >= size)
		return ss_error_set(-ENAMETOOLONG, NULL, NULL,
				    "the temporary file of '%s'", path);
	return 0;
}

static int ss_save_parts_at(const char *path,
			    const struct ss_checkpoint_part *params, int np,
			    const struct ss_checkpoint_part *state, int ns,
			    uint64_t layout_hash, uint64_t examples,
			    const void *extra, size_t extra_len)
{
	/* version 2 where it holds no more than version 2 did: an older
	 * build still reads it */
	uint32_t version = extra_len ? 3 : 2;
	size_t n = ss_parts_len(params, np);
	unsigned char head[SS_CKPT_HEADER] = { 0 };
	size_t tmp_len = strlen(path) + sizeof(SS_CHECKPOINT_TMP_SUFFIX);
	char *tmp = malloc(tmp_len);
	float *chunk = ss_chunk_alloc(n);
	uint64_t h = ss_sum_seed;
	int fd = -1, rc = 0;

	if (!tmp || !chunk) {
		rc = ss_error_set(-ENOMEM, NULL, NULL, "saving checkpoint '%s'",
				  path);
		goto out;
	}
	rc = ss_check_replaceable(path, path);
	if (rc < 0)
		goto out;
	/* One fixed name per target: a save killed half-way leaves at most
	 * one stale file, which the next save replaces. */
	snprintf(tmp, tmp_len, "%s" SS_CHECKPOINT_TMP_SUFFIX, path);
	fd = ss_open_tmp(tmp, path);
	if (fd < 0) {
		rc = fd;
		goto out;
	}
	/* The header goes last, once the checksum is known. */
	if (lseek(fd, SS_CKPT_HEADER, SEEK_SET) < 0)
		rc = ss_error_set(-errno, NULL, NULL, "seeking in '%s'", tmp);
	if (state && ss_parts_len(state, ns) != n)
		rc = ss_error_set(-EINVAL,
				  "state and parameters differ in size", NULL,
				  "saving '%s'", path);
	if (rc == 0)
		rc = ss_write_summed(fd, params, np, chunk, &h, tmp);
	if (rc == 0 && state)
		rc = ss_write_summed(fd, state, ns, chunk, &h, tmp);
	if (rc == 0 && extra_len > SS_CKPT_MAX_EXTRA)
		rc = ss_error_set(-EINVAL, "its extra record is too large",
				  NULL, "saving '%s' (%zu bytes, at most %u)",
				  path, extra_len, SS_CKPT_MAX_EXTRA);
	if (rc == 0 && extra_len) {
		h = ss_sum(h, extra, extra_len);
		rc = ss_write_all(fd, extra, extra_len, tmp);
	}
	memcpy(head, SS_CKPT_MAGIC, 8);
	ss_put32(head + 8, version);
	ss_put32(head + 12, SS_CKPT_HEADER);
	ss_put64(head + 16, layout_hash);
	ss_put64(head + 24, n);
	ss_put64(head + 32, examples);
	ss_put64(head + 48, state ? n : 0);
	ss_put64(head + 56, extra_len);
	ss_put64(head + 40, ss_head_sum(h, head, version));
	if (rc == 0 && lseek(fd, 0, SEEK_SET) < 0)
		rc = ss_error_set(-errno, NULL, NULL, "seeking in '%s'", tmp);
	if (rc == 0)
		rc = ss_write_all(fd, head, sizeof(head), tmp);
	if (rc == 0 && fsync(fd) < 0)
		rc = ss_error_set(-errno, NULL, NULL, "fsync '%s'", tmp);
	if (close(fd) < 0 && rc == 0)
		rc = ss_error_set(-errno, NULL, NULL, "closing '%s'", tmp);
	fd = -1;
	if (rc == 0 && rename(tmp, path) < 0)
		rc = ss_error_set(-errno, NULL, NULL, "renaming '%s' to '%s'",
				  tmp, path);
	if (rc == 0)
		rc = ss_sync_folder(path);
	else
		unlink(tmp);
out:
	if (fd >= 0) {
		close(fd);
		unlink(tmp);
	}
	free(chunk);
	free(tmp);
	return rc;
}

int ss_checkpoint_save_check(const char *path)
{
	char *target = ss_save_target(path), *tmp = NULL;
	const char *at = target ? target : path;
	int rc = ss_check_replaceable(at, path);
	struct stat st;

	if (rc == 0 && asprintf(&tmp, "%s" SS_CHECKPOINT_TMP_SUFFIX, at) < 0) {
		tmp = NULL;
		rc = ss_error_set(-ENOMEM, NULL, NULL, "saving '%s'", path);
	}
	/* lstat: a link there, dangling or not, is no save's either */
	if (rc == 0 && lstat(tmp, &st) == 0 && !ss_is_left_by_a_save(tmp))
		rc = ss_tmp_not_ours(tmp, path);
	free(tmp);
	free(target);
	return rc;
}

int ss_checkpoint_save_extra(const char *path,
			     const struct ss_checkpoint_part *params, int np,
			     const struct ss_checkpoint_part *state, int ns,
			     uint64_t layout_hash, uint64_t examples,
			     const void *extra, size_t extra_len)
{
	char *target = ss_save_target(path);
	int rc = ss_save_parts_at(target ? target : path, params, np, state, ns,
				  layout_hash, examples, extra, extra_len);

	free(target);
	return rc;
}

int ss_checkpoint_save_parts(const char *path,
			     const struct ss_checkpoint_part *params, int np,
			     const struct ss_checkpoint_part *state, int ns,
			     uint64_t layout_hash, uint64_t examples)
{
	return ss_checkpoint_save_extra(path, params, np, state, ns,
					layout_hash, examples, NULL, 0);
}

/* The count of the caller's bytes after the floats: none before 3. */
static uint64_t ss_head_extra(const unsigned char *head)
{
	return ss_get32(head + 8) >= 3 ? ss_get64(head + 56) : 0;
}

/* Checks the header against what this run expects; *@state: the count
 * of state floats after the parameters. */
static int ss_check_header(const char *path, const unsigned char *head,
			   size_t n, uint64_t layout_hash, off_t file_size,
			   uint64_t *state)
{
	uint64_t extra = ss_head_extra(head);
	uint64_t count = ss_get64(head + 24);
	uint32_t version = ss_get32(head + 8);
	size_t want;

	if (memcmp(head, SS_CKPT_MAGIC, 8))
		return ss_error_set(SS_EPARSE, "not a ShadowSync checkpoint",
				    "give a file written by --save",
				    "checkpoint '%s'", path);
	if (version < 1 || version > SS_CHECKPOINT_VERSION ||
	    ss_get32(head + 12) != SS_CKPT_HEADER)
		return ss_error_set(SS_EPARSE, "unknown checkpoint version",
				    "load it with the version that wrote it",
				    "checkpoint '%s' (version %u, this build "
				    "reads 1 to %u)",
				    path, version, SS_CHECKPOINT_VERSION);
	if (ss_get64(head + 16) != layout_hash || count != n)
		return ss_error_set(
			SS_ELAYOUT, "it was saved from another model layout",
			"give the model options of the run that saved it "
			"(--emb-dim, --bottom, --top, --hash-size, "
			"--interaction and its --cross-*)",
			"checkpoint '%s' (layout %016llx, %llu parameters; "
			"this model: %016llx, %zu)",
			path, (unsigned long long)ss_get64(head + 16),
			(unsigned long long)count,
			(unsigned long long)layout_hash, n);
	*state = version == 1 ? 0 : ss_get64(head + 48);
	if (*state != 0 && *state != n)
		return ss_error_set(SS_EPARSE,
				    "its optimizer state is neither absent "
				    "nor one float per parameter",
				    "use an older checkpoint",
				    "checkpoint '%s' (%llu state floats, %zu "
				    "parameters)",
				    path, (unsigned long long)*state, n);
	if (extra > SS_CKPT_MAX_EXTRA)
		return ss_error_set(SS_EPARSE,
				    "its header is corrupted (an extra record "
				    "too large)",
				    "use an older checkpoint",
				    "checkpoint '%s' (%llu bytes of record)",
				    path, (unsigned long long)extra);
	want = SS_CKPT_HEADER + (n + (size_t)*state) * sizeof(float) +
	       (size_t)extra;
	if (file_size != (off_t)want)
		return ss_error_set(
			SS_EPARSE,
			file_size < (off_t)want ?
				"the file is truncated" :
				"the file is longer than its header says",
			file_size < (off_t)want ?
				"it was not written whole; use an older "
				"checkpoint" :
				"its header is corrupted, or bytes were added "
				"to it; use an older checkpoint",
			"checkpoint '%s' (%lld bytes, the header says %zu)",
			path, (long long)file_size, want);
	return 0;
}

/* Reads @n floats at the file's offset through @chunk into the parts
 * (none: only summed), and adds them to the checksum @h. */
static int ss_read_summed(int fd, const struct ss_checkpoint_part *parts,
			  int np, float *chunk, size_t n, uint64_t *h,
			  const char *path)
{
	int rc = 0;

	for (size_t at = 0; rc == 0 && at < n; at += SS_CKPT_CHUNK) {
		size_t k = n - at < SS_CKPT_CHUNK ? n - at : SS_CKPT_CHUNK;

		rc = ss_read_all(fd, chunk, k * sizeof(float), path);
		if (rc == 0) {
			*h = ss_sum(*h, chunk, k * sizeof(float));
			ss_parts_copy(parts, np, at, chunk, k, false);
		}
	}
	return rc;
}

int ss_checkpoint_load(const char *path, float *params, float *state, size_t n,
		       uint64_t layout_hash, uint64_t *examples,
		       bool *has_state)
{
	struct ss_checkpoint_part p = { params, n }, st = { state, n };

	return ss_checkpoint_load_parts(path, &p, 1, state ? &st : NULL,
					state ? 1 : 0, layout_hash, examples,
					has_state);
}

int ss_checkpoint_peek(const char *path, uint64_t *layout_hash, uint64_t *n,
		       uint64_t *examples)
{
	unsigned char head[SS_CKPT_HEADER];
	/* O_NONBLOCK: a FIFO without a writer must not hold us here */
	int rc, fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		return ss_error_set(-errno, NULL, NULL, "checkpoint '%s'",
				    path);
	rc = ss_read_all(fd, head, sizeof(head), path);
	close(fd);
	if (rc == 0 && memcmp(head, SS_CKPT_MAGIC, 8))
		rc = ss_error_set(SS_EPARSE, "not a ShadowSync checkpoint",
				  "give a file written by --save",
				  "checkpoint '%s'", path);
	if (rc == 0) {
		*layout_hash = ss_get64(head + 16);
		*n = ss_get64(head + 24);
		*examples = ss_get64(head + 32);
	}
	return rc;
}

int ss_checkpoint_peek_extra(const char *path, void *extra, size_t cap,
			     size_t *extra_len)
{
	unsigned char head[SS_CKPT_HEADER];
	int rc, fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	uint64_t n = 0;
	off_t size;

	if (fd < 0)
		return ss_error_set(-errno, NULL, "check the checkpoint's path",
				    "checkpoint '%s'", path);
	rc = ss_read_all(fd, head, sizeof(head), path);
	if (rc == 0 && memcmp(head, SS_CKPT_MAGIC, 8))
		rc = ss_error_set(SS_EPARSE, "not a ShadowSync checkpoint",
				  "give a file written by --save",
				  "checkpoint '%s'", path);
	if (rc == 0)
		n = ss_head_extra(head);
	size = rc == 0 ? lseek(fd, 0, SEEK_END) : 0;
	if (rc == 0 && (n > SS_CKPT_MAX_EXTRA || size < 0 ||
			(uint64_t)size < SS_CKPT_HEADER + n))
		rc = ss_error_set(SS_EPARSE,
				  "its header does not match its size: the "
				  "file is corrupted",
				  "use an older checkpoint", "checkpoint '%s'",
				  path);
	if (rc == 0 && n && lseek(fd, size - (off_t)n, SEEK_SET) < 0)
		rc = ss_error_set(-errno, NULL, NULL, "checkpoint '%s'", path);
	if (rc == 0 && n)
		rc = ss_read_all(fd, extra, n < cap ? (size_t)n : cap, path);
	close(fd);
	if (rc == 0)
		*extra_len = (size_t)n;
	return rc;
}

/*
 * The header names another layout: either it does, or a bit flipped in
 * its layout hash or count.  The file as its header describes it (size,
 * then checksum) tells the two apart; @rc (the layout error) stands only
 * when the file is whole.
 */
static int ss_layout_or_corrupt(int fd, const unsigned char *head, off_t size,
				const char *path, int rc)
{
	uint32_t version = ss_get32(head + 8);
	uint64_t count = ss_get64(head + 24);
	uint64_t state = version == 1 ? 0 : ss_get64(head + 48);
	uint64_t extra = ss_head_extra(head);
	uint64_t h = ss_sum_seed;
	uint64_t room = (uint64_t)(size - SS_CKPT_HEADER) / sizeof(float);
	unsigned char *record = NULL;
	float *chunk;
	int err;

	if (count > room || state > room - count || extra > SS_CKPT_MAX_EXTRA ||
	    SS_CKPT_HEADER + (count + state) * sizeof(float) + extra !=
		    (uint64_t)size)
		return ss_error_set(SS_EPARSE,
				    "its header does not match its size: the "
				    "file is corrupted",
				    "use an older checkpoint",
				    "checkpoint '%s' (%lld bytes, the header "
				    "says %llu + %llu floats)",
				    path, (long long)size,
				    (unsigned long long)count,
				    (unsigned long long)state);
	/* a chunk for the file's floats: the caller's fits this model's,
	 * and the file may hold more */
	chunk = ss_chunk_alloc(count > state ? count : state);
	if (!chunk)
		return ss_error_set(-ENOMEM, NULL, NULL, "checking '%s'", path);
	err = lseek(fd, SS_CKPT_HEADER, SEEK_SET) < 0 ?
		      ss_error_set(-errno, NULL, NULL, "checkpoint '%s'",
				   path) :
		      0;
	if (err == 0)
		err = ss_read_summed(fd, NULL, 0, chunk, count, &h, path);
	if (err == 0)
		err = ss_read_summed(fd, NULL, 0, chunk, state, &h, path);
	free(chunk);
	if (err == 0 && extra && !(record = malloc(extra)))
		err = ss_error_set(-ENOMEM, NULL, NULL, "checking '%s'", path);
	if (err == 0 && extra)
		err = ss_read_all(fd, record, extra, path);
	if (err == 0 && extra)
		h = ss_sum(h, record, extra);
	free(record);
	if (err < 0)
		return err;
	if (ss_head_sum(h, head, version) != ss_get64(head + 40))
		return ss_error_set(SS_EPARSE,
				    "its checksum does not match: the file is "
				    "corrupted",
				    "use an older checkpoint",
				    "checkpoint '%s'", path);
	return rc;
}

int ss_checkpoint_load_parts(const char *path,
			     const struct ss_checkpoint_part *params, int np,
			     const struct ss_checkpoint_part *state, int ns,
			     uint64_t layout_hash, uint64_t *examples,
			     bool *has_state)
{
	return ss_checkpoint_load_extra(path, params, np, state, ns,
					layout_hash, examples, has_state, NULL,
					0, NULL);
}

/* The file's extra record (@len bytes) into @record, added to @h. */
static int ss_read_record(int fd, unsigned char *record, uint64_t len,
			  uint64_t *h, const char *path)
{
	int rc = len ? ss_read_all(fd, record, len, path) : 0;

	if (rc == 0 && len)
		*h = ss_sum(*h, record, len);
	return rc;
}

int ss_checkpoint_load_extra(const char *path,
			     const struct ss_checkpoint_part *params, int np,
			     const struct ss_checkpoint_part *state, int ns,
			     uint64_t layout_hash, uint64_t *examples,
			     bool *has_state, void *extra, size_t cap,
			     size_t *extra_len)
{
	size_t n = ss_parts_len(params, np);
	unsigned char head[SS_CKPT_HEADER], *record = NULL;
	float *chunk = ss_chunk_alloc(n); /* the state: none, or n floats */
	uint64_t h = ss_sum_seed, n_state = 0, n_extra = 0;
	uint32_t version;
	struct stat st;
	off_t size;
	/* O_NONBLOCK: a FIFO without a writer must not hold us here */
	int rc, fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	if (fd < 0) {
		free(chunk);
		return ss_error_set(-errno, NULL, "check the checkpoint's path",
				    "checkpoint '%s'", path);
	}
	if (!chunk) {
		close(fd);
		return ss_error_set(-ENOMEM, NULL, NULL, "loading '%s'", path);
	}
	rc = 0;
	if (fstat(fd, &st) < 0)
		rc = ss_error_set(-errno, NULL, NULL, "checkpoint '%s'", path);
	else if (!S_ISREG(st.st_mode))
		rc = ss_error_set(SS_EUSAGE, "not a regular file",
				  "give a checkpoint file that --save wrote",
				  "checkpoint '%s'", path);
	size = rc == 0 ? lseek(fd, 0, SEEK_END) : 0;
	if (rc == 0 && size < 0)
		rc = ss_error_set(-errno, NULL, NULL, "checkpoint '%s'", path);
	if (rc == 0 && lseek(fd, 0, SEEK_SET) < 0)
		rc = ss_error_set(-errno, NULL, NULL, "checkpoint '%s'", path);
	/* short: truncated only if what there is starts as ours does */
	if (rc == 0 && size < SS_CKPT_HEADER) {
		bool ours = size >= 8 && ss_read_all(fd, head, 8, path) == 0 &&
			    memcmp(head, SS_CKPT_MAGIC, 8) == 0;

		rc = ss_error_set(SS_EPARSE,
				  ours ? "the file is truncated" :
					 "not a ShadowSync checkpoint",
				  ours ? "it was not written whole; use an "
					 "older checkpoint" :
					 "give a file written by --save",
				  "checkpoint '%s' (%lld bytes)", path,
				  (long long)size);
	}
	if (rc == 0)
		rc = ss_read_all(fd, head, sizeof(head), path);
	if (rc == 0)
		rc = ss_check_header(path, head, n, layout_hash, size,
				     &n_state);
	if (rc == SS_ELAYOUT) {
		/* the message of the layout error, kept while we look */
		struct ss_error layout = *ss_last_error();

		rc = ss_layout_or_corrupt(fd, head, size, path, rc);
		if (rc == SS_ELAYOUT)
			ss_error_set(layout.code, layout.why, layout.hint, "%s",
				     layout.what);
	}
	version = rc == 0 ? ss_get32(head + 8) : 0;
	n_extra = rc == 0 ? ss_head_extra(head) : 0;
	if (rc == 0 && n_extra && !(record = malloc(n_extra)))
		rc = ss_error_set(-ENOMEM, NULL, NULL, "loading '%s'", path);
	/* First pass: the checksum, before anything is overwritten (the
	 * parameters and the state apart: the sum follows the save's
	 * chunks). */
	if (rc == 0)
		rc = ss_read_summed(fd, NULL, 0, chunk, n, &h, path);
	if (rc == 0)
		rc = ss_read_summed(fd, NULL, 0, chunk, (size_t)n_state, &h,
				    path);
	if (rc == 0)
		rc = ss_read_record(fd, record, n_extra, &h, path);
	if (rc == 0 && ss_head_sum(h, head, version) != ss_get64(head + 40))
		rc = ss_error_set(SS_EPARSE,
				  "its checksum does not match: the file is "
				  "corrupted",
				  "use an older checkpoint", "checkpoint '%s'",
				  path);
	/*
	 * Second pass: the floats themselves, summed again, in case the file
	 * was rewritten in place between the passes (a rename-based writer,
	 * like ours, leaves this open file as it was).
	 */
	h = ss_sum_seed;
	if (rc == 0 && lseek(fd, SS_CKPT_HEADER, SEEK_SET) < 0)
		rc = ss_error_set(-errno, NULL, NULL, "checkpoint '%s'", path);
	if (rc == 0)
		rc = ss_read_summed(fd, params, np, chunk, n, &h, path);
	if (rc == 0)
		rc = ss_read_summed(fd, n_state ? state : NULL,
				    n_state ? ns : 0, chunk, (size_t)n_state,
				    &h, path);
	if (rc == 0)
		rc = ss_read_record(fd, record, n_extra, &h, path);
	if (rc == 0 && ss_head_sum(h, head, version) != ss_get64(head + 40))
		rc = ss_error_set(SS_EPARSE,
				  "it changed while it was being read",
				  "do not rewrite a checkpoint in place; load "
				  "it again",
				  "checkpoint '%s'", path);
	if (rc == 0) {
		*examples = ss_get64(head + 32);
		if (has_state)
			*has_state = n_state && state && ns > 0;
		if (extra && n_extra)
			memcpy(extra, record, n_extra < cap ? n_extra : cap);
		if (extra_len)
			*extra_len = (size_t)n_extra;
	}
	close(fd);
	free(chunk);
	free(record);
	return rc;
}
