/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * What the fuzz harnesses share.  Each harness defines
 * LLVMFuzzerTestOneInput() and checks properties of what it calls, not
 * only that it returns: a property that does not hold is reported by
 * FUZZ_CHECK, which aborts, so that libFuzzer (`make fuzz`) and the replay
 * of the corpora (tests/fuzz/replay.c, `make check`) both see a crash.
 */
#ifndef SS_FUZZ_H
#define SS_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond, ...)                                             \
	do {                                                              \
		if (!(cond)) {                                            \
			fprintf(stderr,                                   \
				"%s:%d: property failed: %s: ", __FILE__, \
				__LINE__, #cond);                         \
			fprintf(stderr, __VA_ARGS__);                     \
			fputc('\n', stderr);                              \
			abort();                                          \
		}                                                         \
	} while (0)

/*
 * fuzz_path() - the path of @name in this process's own temporary folder
 * ($TMPDIR, else /tmp), which is removed with what is in it at exit.
 */
const char *fuzz_path(const char *name);

/* fuzz_file() - write @size bytes of @data to fuzz_path(@name); its path. */
const char *fuzz_file(const char *name, const void *data, size_t size);

/*
 * fuzz_slurp() - the whole file at @path into a malloc'd buffer (*@size
 * bytes); NULL when it cannot be read.
 */
unsigned char *fuzz_slurp(const char *path, size_t *size);

/* The input taken from its front, a field after another. */
struct fuzz_input {
	const uint8_t *data;
	size_t size;
};

/* fuzz_take() - the next @bytes (at most 8) as a little-endian number;
 * 0 for the bytes past the end of the input. */
uint64_t fuzz_take(struct fuzz_input *in, unsigned bytes);

/* fuzz_cstr() - a NUL-terminated copy of @size bytes of @data (malloc). */
char *fuzz_cstr(const uint8_t *data, size_t size);

#endif /* SS_FUZZ_H */
