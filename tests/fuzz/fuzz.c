// SPDX-License-Identifier: BSD-2-Clause
/* The harnesses' temporary files and input helpers (see fuzz.h). */
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

static char fuzz_dir[256];
static char fuzz_name[512];

static void fuzz_cleanup(void)
{
	DIR *d = opendir(fuzz_dir);
	struct dirent *e;
	char path[512];

	if (!d)
		return;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", fuzz_dir, e->d_name);
		unlink(path);
	}
	closedir(d);
	rmdir(fuzz_dir);
}

const char *fuzz_path(const char *name)
{
	if (!fuzz_dir[0]) {
		const char *tmp = getenv("TMPDIR");

		snprintf(fuzz_dir, sizeof(fuzz_dir), "%s/ss-fuzz-XXXXXX",
			 tmp && *tmp ? tmp : "/tmp");
		if (!mkdtemp(fuzz_dir)) {
			perror(fuzz_dir);
			abort();
		}
		atexit(fuzz_cleanup);
	}
	snprintf(fuzz_name, sizeof(fuzz_name), "%s/%s", fuzz_dir, name);
	return fuzz_name;
}

const char *fuzz_file(const char *name, const void *data, size_t size)
{
	const char *path = fuzz_path(name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	const char *p = data;

	if (fd < 0) {
		perror(path);
		abort();
	}
	while (size > 0) {
		ssize_t n = write(fd, p, size);

		if (n <= 0) {
			perror(path);
			abort();
		}
		p += n;
		size -= (size_t)n;
	}
	close(fd);
	return path;
}

unsigned char *fuzz_slurp(const char *path, size_t *size)
{
	FILE *f = fopen(path, "rb");
	unsigned char *buf = NULL;
	long len;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 &&
	    fseek(f, 0, SEEK_SET) == 0) {
		buf = malloc((size_t)len + 1);
		if (buf && fread(buf, 1, (size_t)len, f) != (size_t)len) {
			free(buf);
			buf = NULL;
		}
		*size = (size_t)len;
	}
	fclose(f);
	return buf;
}

uint64_t fuzz_take(struct fuzz_input *in, unsigned bytes)
{
	uint64_t v = 0;

	for (unsigned i = 0; i < bytes && i < 8; i++) {
		if (in->size > 0) {
			v |= (uint64_t)in->data[0] << (8 * i);
			in->data++;
			in->size--;
		}
	}
	return v;
}

char *fuzz_cstr(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (!s)
		abort();
	memcpy(s, data, size);
	s[size] = '\0';
	return s;
}
