// SPDX-License-Identifier: BSD-2-Clause
/*
 * The checkpoint loader, ss_checkpoint_load_parts().  Two kinds of input:
 *  - a file ("SSCKPT..."), loaded as it is for a model of the size its
 *    header names (a small one) and of another size: refused with
 *    SS_EPARSE or SS_ELAYOUT, naming the file, the arrays untouched; or
 *    accepted with the arrays holding the file's floats exactly, and then
 *    saving them again writes the same bytes;
 *  - a recipe: a checkpoint of a few floats (any bits) is saved, then
 *    loaded as it is, into parts cut anywhere: it loads back exactly, and
 *    is refused for another layout; or with one byte changed, cut short
 *    or made longer: refused, the arrays untouched.
 */
#include <string.h>
#include <unistd.h>

#include "fuzz.h"
#include "shadowsync/base.h"
#include "shadowsync/checkpoint.h"

#define HEADER 64
#define MAX_N 4096 /* floats in a model here */
#define SENTINEL 0x5a

static uint64_t get64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static bool untouched(const float *a, size_t n)
{
	const uint8_t *p = (const uint8_t *)a;

	for (size_t i = 0; i < n * sizeof(float); i++)
		if (p[i] != SENTINEL)
			return false;
	return true;
}

/* How a model's floats are laid out: 3 parts of @base, cut at @cut1 and
 * @cut2 (modulo what fits); part @skip (0..2; else none) has no array:
 * read and checked, not kept. */
struct layout {
	size_t cut1, cut2;
	int skip;
};

static void make_parts(float *base, size_t n, const struct layout *l,
		       struct ss_checkpoint_part *parts)
{
	size_t at[4] = { 0, l->cut1 % (n + 1), 0, n };

	at[2] = at[1] + l->cut2 % (n - at[1] + 1);
	for (int i = 0; i < 3; i++) {
		parts[i].ptr = i == l->skip ? NULL : base + at[i];
		parts[i].n = at[i + 1] - at[i];
	}
}

/* The loaded @got against @want, but where a part was skipped. */
static void same_floats(const float *got, const float *want, size_t n,
			const struct layout *l, const char *what)
{
	struct ss_checkpoint_part parts[3];
	size_t at = 0;

	make_parts((float *)got, n, l, parts);
	for (int i = 0; i < 3; i++) {
		if (parts[i].ptr)
			FUZZ_CHECK(!memcmp(got + at, want + at,
					   parts[i].n * sizeof(float)),
				   "%s: part %d differs", what, i);
		else
			FUZZ_CHECK(untouched(got + at, parts[i].n),
				   "%s: part %d has no array, yet was written",
				   what, i);
		at += parts[i].n;
	}
}

/*
 * Load @path for a model of @n floats into @params and @state (room for
 * MAX_N + 1 each), sentinel-filled first.  Refused: SS_EPARSE or
 * SS_ELAYOUT naming the file, the arrays untouched.
 */
static int load(const char *path, size_t n, uint64_t layout,
		const struct layout *l, float *params, float *state,
		uint64_t *examples, bool *has_state)
{
	struct ss_checkpoint_part pp[3], sp[3];
	struct layout whole = { 0, 0, -1 };
	int rc;

	memset(params, SENTINEL, (MAX_N + 1) * sizeof(float));
	memset(state, SENTINEL, (MAX_N + 1) * sizeof(float));
	make_parts(params, n, l, pp);
	make_parts(state, n, &whole, sp);
	rc = ss_checkpoint_load_parts(path, pp, 3, sp, 3, layout, examples,
				      has_state);
	FUZZ_CHECK(rc == 0 || rc == SS_EPARSE || rc == SS_ELAYOUT,
		   "load: rc %d (%s)", rc, ss_last_error()->why);
	if (rc < 0) {
		FUZZ_CHECK(untouched(params, MAX_N + 1) &&
				   untouched(state, MAX_N + 1),
			   "refused (%s), yet the arrays were written",
			   ss_last_error()->why);
		FUZZ_CHECK(strstr(ss_last_error()->what, path),
			   "the error does not name the file: '%s'",
			   ss_last_error()->what);
	}
	return rc;
}

/* A file as it is. */
static void raw_file(const uint8_t *data, size_t size, float *params,
		     float *state)
{
	const char *path = fuzz_file("ckpt", data, size);
	uint64_t count = size >= HEADER ? get64(data + 24) : 0, examples;
	uint64_t layout = size >= HEADER ? get64(data + 16) : 0;
	size_t n = count <= MAX_N ? count : size % MAX_N, again_size;
	struct layout l = { (size_t)count, (size_t)layout, -1 };
	bool has_state = false;
	uint8_t *again;
	int rc;

	rc = load(path, n, layout, &l, params, state, &examples, &has_state);
	if (rc == 0) {
		float *want = malloc(4 * n + 1);

		/* version 3's record of the caller's, after the floats */
		uint64_t record = data[8] >= 3 ? get64(data + 56) : 0;

		FUZZ_CHECK(count == n &&
				   size == HEADER +
						   4 * n * (has_state ? 2 : 1) +
						   record,
			   "accepted: %zu bytes for %zu floats", size, n);
		memcpy(want, data + HEADER, 4 * n);
		same_floats(params, want, n, &l, "parameters");
		free(want);
		FUZZ_CHECK(!has_state ||
				   !memcmp(state, data + HEADER + 4 * n, 4 * n),
			   "the state differs from the file's");
		FUZZ_CHECK(examples == get64(data + 32), "examples %llu",
			   (unsigned long long)examples);
		/* a version 2 file, its reserved bytes zero, is written
		 * again the same, byte for byte */
		if (data[8] == 2 && !get64(data + 56)) {
			rc = ss_checkpoint_save(path, params,
						has_state ? state : NULL, n,
						layout, examples);
			FUZZ_CHECK(rc == 0, "save: %s", ss_last_error()->why);
			again = fuzz_slurp(path, &again_size);
			FUZZ_CHECK(again && again_size == size &&
					   !memcmp(again, data, size),
				   "saved again, the file differs");
			free(again);
			fuzz_file("ckpt", data, size);
		}
	}
	/* a model of another size: refused */
	rc = load(path, n + 1, layout, &l, params, state, &examples,
		  &has_state);
	FUZZ_CHECK(rc < 0, "loaded for %zu floats and for %zu", n, n + 1);
}

/* A checkpoint saved, then changed as the recipe says. */
static void recipe(const uint8_t *data, size_t size, float *p2, float *s2)
{
	struct fuzz_input in = { data, size };
	unsigned flags = (unsigned)fuzz_take(&in, 1);
	size_t n = fuzz_take(&in, 1) % 65, file_size;
	uint64_t layout = fuzz_take(&in, 8), examples = fuzz_take(&in, 8);
	size_t at = fuzz_take(&in, 2);
	struct layout l = { fuzz_take(&in, 1), fuzz_take(&in, 1),
			    (int)(flags >> 3) % 4 };
	uint8_t flip = (uint8_t)fuzz_take(&in, 1), *file;
	bool with_state = flags & 1, has_state = false;
	int change = (flags >> 1) % 4;
	float *params = calloc(n + 1, sizeof(float));
	float *state = calloc(n + 1, sizeof(float));
	const char *path = fuzz_path("ckpt");
	uint64_t got_examples;
	int rc;

	/* the floats: the rest of the input, any bits */
	memcpy(params, in.data, in.size < 4 * n ? in.size : 4 * n);
	if (in.size > 4 * n)
		memcpy(state, in.data + 4 * n,
		       in.size - 4 * n < 4 * n ? in.size - 4 * n : 4 * n);
	/* the last input's file may be one changed past a checkpoint's
	 * magic, which a save refuses to replace */
	unlink(path);
	rc = ss_checkpoint_save(path, params, with_state ? state : NULL, n,
				layout, examples);
	FUZZ_CHECK(rc == 0, "save: %s", ss_last_error()->why);
	file = fuzz_slurp(path, &file_size);
	FUZZ_CHECK(file && file_size == HEADER + 4 * n * (with_state ? 2 : 1),
		   "saved %zu bytes for %zu floats", file_size, n);

	if (change == 0) { /* as saved: it loads back exactly */
		rc = load(path, n, layout, &l, p2, s2, &got_examples,
			  &has_state);
		FUZZ_CHECK(rc == 0, "refused: %s", ss_last_error()->why);
		same_floats(p2, params, n, &l, "parameters");
		/* (a model of no floats has no state either) */
		FUZZ_CHECK(has_state == (with_state && n > 0),
			   "state %d, saved %d", has_state, with_state);
		FUZZ_CHECK(!with_state || !memcmp(s2, state, 4 * n),
			   "the state differs");
		FUZZ_CHECK(got_examples == examples, "examples differ");
		/* for another layout: refused, untouched */
		rc = load(path, n, layout ^ (1ull << (flip % 64)), &l, p2, s2,
			  &got_examples, &has_state);
		FUZZ_CHECK(rc == SS_ELAYOUT, "another layout: rc %d", rc);
	} else {
		if (change == 1) { /* one byte changed */
			at %= file_size;
			file[at] ^= flip ? flip : 1;
		} else if (change == 2) { /* cut short */
			at %= file_size;
			file_size = at;
		} else { /* made longer */
			at = file_size;
			file = realloc(file, file_size + 1 + flip % 8);
			memset(file + file_size, flip, 1 + flip % 8);
			file_size += 1 + flip % 8;
		}
		fuzz_file("ckpt", file, file_size);
		rc = load(path, n, layout, &l, p2, s2, &got_examples,
			  &has_state);
		FUZZ_CHECK(rc < 0, "changed (%s at byte %zu), yet loaded",
			   change == 1 ? "a byte" :
			   change == 2 ? "cut" :
					 "longer",
			   at);
	}
	free(file);
	free(params);
	free(state);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	float *params = malloc((MAX_N + 1) * sizeof(float));
	float *state = malloc((MAX_N + 1) * sizeof(float));

	if (size >= 6 && !memcmp(data, "SSCKPT", 6))
		raw_file(data, size, params, state);
	else
		recipe(data, size, params, state);
	free(params);
	free(state);
	return 0;
}
