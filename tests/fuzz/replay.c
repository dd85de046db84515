// SPDX-License-Identifier: BSD-2-Clause
/*
 * The fuzz corpora replayed without libFuzzer, so that `make check` needs
 * no clang: a harness built with $(CC) and ASan/UBSan around this main is
 * fed every file of tests/fuzz/corpus/NAME and tests/fuzz/regressions/NAME
 * (NAME: this program's name), or the files and folders given.  They run
 * one after another in a child process, which says over a pipe which file
 * it starts; when it dies (a crash, a failed property), that file is the
 * failure, named, and a new child goes on with the next one.  Leaks are
 * looked for once, when a child ends (a leak check per file would cost
 * more than the files).  The harnesses' temporary files go to a folder of
 * this run ($TMPDIR), removed at its end, what a crash left there too.
 * Ends on the line tests/run counts:
 *   replay: N passed, N failed
 * Options (arguments that start with '-', such as the --verbose that
 * tests/run passes to every test program) are ignored.
 */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <libgen.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fuzz.h"

#ifndef SS_SOURCE_DIR
#define SS_SOURCE_DIR "."
#endif

struct files {
	char **path;
	size_t n, cap;
};

static void add_file(struct files *f, const char *path)
{
	if (f->n == f->cap) {
		f->cap = f->cap ? 2 * f->cap : 64;
		f->path = realloc(f->path, f->cap * sizeof(*f->path));
		if (!f->path)
			abort();
	}
	f->path[f->n++] = strdup(path);
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The regular files of folder @dir, in name order; how many. */
static size_t add_dir(struct files *f, const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char path[4096];
	size_t first = f->n;
	struct stat st;

	if (!d)
		return 0;
	while ((e = readdir(d))) {
		snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
		if (e->d_name[0] != '.' && stat(path, &st) == 0 &&
		    S_ISREG(st.st_mode))
			add_file(f, path);
	}
	closedir(d);
	qsort(f->path + first, f->n - first, sizeof(*f->path), by_name);
	return f->n - first;
}

/* In the child: each file from @from on, its index written to @fd first. */
static void run_files(const struct files *f, size_t from, int fd)
{
	for (size_t i = from; i <= f->n; i++) {
		uint32_t at = (uint32_t)i;
		unsigned char *data, *exact;
		size_t size = 0;

		if (write(fd, &at, sizeof(at)) != sizeof(at))
			_exit(3);
		if (i == f->n)
			break;
		data = fuzz_slurp(f->path[i], &size);
		if (!data) {
			fprintf(stderr, "%s: %s\n", f->path[i],
				strerror(errno));
			_exit(2);
		}
		/* exactly @size bytes: ASan sees a read past the input */
		exact = malloc(size ? size : 1);
		memcpy(exact, data, size);
		free(data);
		LLVMFuzzerTestOneInput(exact, size);
		free(exact);
	}
	close(fd);
	exit(0); /* LeakSanitizer looks at the heap here */
}

/* Run the files from @from on in a child; the index it died at, or n. */
static size_t run_child(const struct files *f, size_t from, int *status)
{
	uint32_t at, last = (uint32_t)from;
	int fds[2];
	pid_t pid;

	fflush(NULL);
	if (pipe(fds) < 0 || (pid = fork()) < 0) {
		perror("replay: fork");
		exit(1);
	}
	if (pid == 0) {
		close(fds[0]);
		run_files(f, from, fds[1]);
	}
	close(fds[1]);
	while (read(fds[0], &at, sizeof(at)) == sizeof(at))
		last = at;
	close(fds[0]);
	if (waitpid(pid, status, 0) != pid) {
		perror("replay: waitpid");
		exit(1);
	}
	return last;
}

static int remove_one(const char *path, const struct stat *st, int flag,
		      struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

/* A folder of this run for the harnesses' files; its path, to remove. */
static char *make_tmpdir(void)
{
	const char *base = getenv("TMPDIR");
	char *dir;

	if (asprintf(&dir, "%s/ss-fuzz-replay.XXXXXX",
		     base && *base ? base : "/tmp") < 0 ||
	    !mkdtemp(dir)) {
		perror("replay: mkdtemp");
		exit(1);
	}
	setenv("TMPDIR", dir, 1);
	return dir;
}

static void describe(const char *what, int status)
{
	if (WIFSIGNALED(status))
		fprintf(stderr, "[FAIL] %s: killed by signal %d\n", what,
			WTERMSIG(status));
	else
		fprintf(stderr, "[FAIL] %s: exit status %d\n", what,
			WEXITSTATUS(status));
}

int main(int argc, char **argv)
{
	char *name = basename(argv[0]), dir[4096];
	struct files f = { 0 };
	char *tmp = make_tmpdir();
	int passed = 0, failed = 0, status;
	bool given = false;
	struct stat st;

	for (int i = 1; i < argc; i++) {
		if (argv[i][0] == '-')
			continue;
		given = true;
		if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
			add_dir(&f, argv[i]);
		else
			add_file(&f, argv[i]);
	}
	if (!given) {
		snprintf(dir, sizeof(dir), "%s/tests/fuzz/corpus/%s",
			 SS_SOURCE_DIR, name);
		if (add_dir(&f, dir) == 0) {
			fprintf(stderr, "[FAIL] %s: no seed inputs in %s\n",
				name, dir);
			failed++;
		}
		snprintf(dir, sizeof(dir), "%s/tests/fuzz/regressions/%s",
			 SS_SOURCE_DIR, name);
		add_dir(&f, dir);
	}
	for (size_t from = 0; from < f.n;) {
		size_t died = run_child(&f, from, &status);

		if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
			passed += (int)(f.n - from);
			break;
		}
		if (died >= f.n) { /* at its end: leaks */
			describe("at the end of the inputs (leaks?)", status);
			passed += (int)(f.n - from);
			failed++;
			break;
		}
		describe(f.path[died], status);
		passed += (int)(died - from);
		failed++;
		from = died + 1;
	}
	printf("replay: %d passed, %d failed\n", passed, failed);
	nftw(tmp, remove_one, 16, FTW_DEPTH | FTW_PHYS);
	free(tmp);
	for (size_t i = 0; i < f.n; i++)
		free(f.path[i]);
	free(f.path);
	return failed ? 1 : 0;
}
