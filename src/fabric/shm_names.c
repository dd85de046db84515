// SPDX-License-Identifier: BSD-2-Clause
/*
 * The names of a rank's shared memory objects, the claim on its address,
 * and the removal of what ranks left behind.
 *
 * A rank claims its address before it creates anything: it opens (creating
 * if need be) the claim object /ss-ADDR-claim and locks it with flock().
 * The kernel drops the lock when the process ends, however it ends (a
 * SIGKILL too), so a lock that can be taken means the owner is gone: no
 * pid to compare, no window in which two processes both think the address
 * free.  Every other object of that address is created, replaced or
 * removed only by the holder of its claim.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fabric_internal.h"

#define SS_SHM_DIR "/dev/shm"
/* Longer addresses are cut and end in a hash of the whole, so that two
 * long addresses that share a beginning never share a name. */
#define SS_SHM_STEM_MAX 96
#define SS_SHM_STEM_CUT 78

static uint64_t ss_fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

/* The part of the names that stands for @addr: '/' cannot be in them. */
static void ss_shm_stem(const char *addr, char *stem, size_t size)
{
	size_t len = strlen(addr);

	if (len <= SS_SHM_STEM_MAX)
		snprintf(stem, size, "%s", addr);
	else
		snprintf(stem, size, "%.*s~%016llx", SS_SHM_STEM_CUT, addr,
			 (unsigned long long)ss_fnv1a(addr));
	for (char *c = stem; *c; c++)
		if (*c == '/')
			*c = '_';
}

void ss__shm_name(const char *addr, int object, char *name, size_t size)
{
	char stem[SS_SHM_STEM_MAX + 1];

	ss_shm_stem(addr, stem, sizeof(stem));
	if (object == SS_SHM_CLAIM)
		snprintf(name, size, "/ss-%s-claim", stem);
	else if (object == SS_SHM_CTL)
		snprintf(name, size, "/ss-%s-ctl", stem);
	else
		snprintf(name, size, "/ss-%s-r%d", stem, object);
}

/* ---- the names this process made, for a signal handler ---------------- */

#define SS_SHM_SLOTS 128
#define SS_SHM_PATH (sizeof(SS_SHM_DIR) + 160)

static char ss_shm_paths[SS_SHM_SLOTS][SS_SHM_PATH];
static atomic_bool ss_shm_used[SS_SHM_SLOTS];
static atomic_flag ss_shm_filling[SS_SHM_SLOTS];

void ss__shm_remember(const char *name)
{
	for (int i = 0; i < SS_SHM_SLOTS; i++) {
		if (atomic_load(&ss_shm_used[i]) ||
		    atomic_flag_test_and_set(&ss_shm_filling[i]))
			continue;
		snprintf(ss_shm_paths[i], SS_SHM_PATH, SS_SHM_DIR "%s", name);
		atomic_store(&ss_shm_used[i], true);
		return;
	}
	/* full: that name is only left to shm-clean after a signal */
}

void ss__shm_forget(const char *name)
{
	char path[SS_SHM_PATH];

	snprintf(path, sizeof(path), SS_SHM_DIR "%s", name);
	for (int i = 0; i < SS_SHM_SLOTS; i++) {
		if (!atomic_load(&ss_shm_used[i]) ||
		    strcmp(ss_shm_paths[i], path))
			continue;
		atomic_store(&ss_shm_used[i], false);
		atomic_flag_clear(&ss_shm_filling[i]);
		return;
	}
}

void ss_fabric_remove_names(void)
{
	/* the claims last: they guard the rest */
	for (int pass = 0; pass < 2; pass++)
		for (int i = 0; i < SS_SHM_SLOTS; i++)
			if (atomic_load(&ss_shm_used[i]) &&
			    (strstr(ss_shm_paths[i], "-claim") != NULL) == pass)
				unlink(ss_shm_paths[i]);
}

/* ---- the claim -------------------------------------------------------- */

/* Whether @fd is still the object named @name (an owner that was closing
 * may have removed the name between our open and our lock). */
static bool ss_shm_still_named(int fd, const char *name)
{
	char path[SS_SHM_PATH];
	struct stat a, b;

	snprintf(path, sizeof(path), SS_SHM_DIR "%s", name);
	return fstat(fd, &a) == 0 && stat(path, &b) == 0 &&
	       a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

/*
 * The claim launch took for us before it started us: the descriptor in
 * SS_SHM_CLAIM_FD, when it is @name's object.  Its lock is ours already
 * (flock locks belong to the open file, which we share), so two launches
 * that start together cannot each take half of the other's addresses.
 */
static int ss_shm_inherited_claim(const char *name)
{
	const char *env = getenv("SS_SHM_CLAIM_FD");
	char *end;
	long fd;

	if (!env || !*env)
		return -1;
	fd = strtol(env, &end, 10);
	if (*end || fd < 3 || fd > 65535 ||
	    !ss_shm_still_named((int)fd, name) ||
	    flock((int)fd, LOCK_EX | LOCK_NB) < 0)
		return -1;
	fcntl((int)fd, F_SETFD, FD_CLOEXEC);
	return (int)fd;
}

int ss__shm_claim(const char *addr, int rank, int *claim_fd)
{
	char name[160];
	int32_t pid = (int32_t)getpid(), owner = 0;

	ss__shm_name(addr, SS_SHM_CLAIM, name, sizeof(name));
	*claim_fd = ss_shm_inherited_claim(name);
	if (*claim_fd >= 0)
		return pwrite(*claim_fd, &pid, sizeof(pid), 0) == sizeof(pid) ?
			       0 :
			       ss_error_set(-errno, NULL, NULL, "writing %s",
					    name);
	for (int tries = 0; tries < 8; tries++) {
		int fd = shm_open(name, O_RDWR | O_CREAT | O_CLOEXEC, 0600);

		if (fd < 0)
			return ss_error_set(-errno, NULL,
					    "is /dev/shm mounted and writable?",
					    "shm_open %s", name);
		if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
			int err = errno;

			if (err == EWOULDBLOCK &&
			    !ss_shm_still_named(fd, name)) {
				close(fd); /* its owner is removing it */
				continue;
			}
			if (pread(fd, &owner, sizeof(owner), 0) !=
			    sizeof(owner))
				owner = 0;
			close(fd);
			if (err != EWOULDBLOCK)
				return ss_error_set(-err, NULL, NULL,
						    "locking %s", name);
			return ss_error_set(
				-EADDRINUSE, "a live process has it",
				"give each rank its own address (another "
				"--port), or stop that process",
				"rank %d's address '%s' (process %d)", rank,
				addr, owner);
		}
		if (!ss_shm_still_named(fd, name)) {
			close(fd);
			continue;
		}
		if (pwrite(fd, &pid, sizeof(pid), 0) != sizeof(pid)) {
			int rc = ss_error_set(-errno, NULL, NULL, "writing %s",
					      name);

			close(fd);
			return rc;
		}
		*claim_fd = fd;
		return 0;
	}
	return ss_error_set(-EAGAIN, "its claim keeps changing hands",
			    "try again", "rank %d's address '%s'", rank, addr);
}

int ss_fabric_shm_claim(const char *addr, int rank, int *claim_fd)
{
	return ss__shm_claim(addr, rank, claim_fd);
}

void ss__shm_unclaim(const char *addr, int claim_fd)
{
	char name[160];

	if (claim_fd < 0)
		return;
	ss__shm_name(addr, SS_SHM_CLAIM, name, sizeof(name));
	/* the name first: a lock on a nameless object guards nothing */
	ss__shm_forget(name);
	shm_unlink(name);
	close(claim_fd);
}

/* ---- leftovers -------------------------------------------------------- */

/* "ss-STEM-SUFFIX": the stem, or false for another object. */
static bool ss_shm_entry_stem(const char *entry, char *stem, size_t size)
{
	const char *dash = strrchr(entry, '-'), *s = dash ? dash + 1 : NULL;

	if (strncmp(entry, "ss-", 3) || !dash || dash <= entry + 3)
		return false;
	if (strcmp(s, "claim") && strcmp(s, "ctl")) {
		if (*s++ != 'r' || !*s)
			return false;
		for (; *s; s++)
			if (*s < '0' || *s > '9')
				return false;
	}
	if ((size_t)(dash - entry - 3) >= size)
		return false;
	snprintf(stem, size, "%.*s", (int)(dash - entry - 3), entry + 3);
	return true;
}

/* The leftover of @stem, counted over /dev/shm; its claim locked in @lock
 * (or -1 when it has none). False when a live process owns it. */
static bool ss_shm_leftover_of(const char *stem, struct ss_shm_leftover *l,
			       int *lock)
{
	char name[160], ctl[160];
	struct dirent *e;
	struct stat st;
	DIR *d;

	memset(l, 0, sizeof(*l));
	snprintf(l->stem, sizeof(l->stem), "%s", stem);
	snprintf(name, sizeof(name), "/ss-%s-claim", stem);
	*lock = shm_open(name, O_RDWR | O_CLOEXEC, 0);
	/* a claim we may not open (another user's) is not ours to judge */
	if (*lock < 0 && errno != ENOENT)
		return false;
	if (*lock >= 0) {
		/* held, or renamed away by an owner closing (a new one may
		 * hold the new claim): not ours to remove */
		if (flock(*lock, LOCK_EX | LOCK_NB) < 0 ||
		    !ss_shm_still_named(*lock, name)) {
			close(*lock);
			return false;
		}
		if (pread(*lock, &l->pid, sizeof(l->pid), 0) != sizeof(l->pid))
			l->pid = 0;
	}
	snprintf(ctl, sizeof(ctl), "/ss-%s-ctl", stem);
	if (!ss__shm_ctl_owner(ctl, &l->pid, &l->job_key, *lock < 0)) {
		/* no claim (made before claims existed) and a live owner */
		if (*lock >= 0)
			close(*lock);
		return false;
	}
	d = opendir(SS_SHM_DIR);
	while (d && (e = readdir(d))) {
		char s[SS_SHM_STEM_MAX + 1], path[SS_SHM_PATH + 256];

		if (!ss_shm_entry_stem(e->d_name, s, sizeof(s)) ||
		    strcmp(s, stem))
			continue;
		snprintf(path, sizeof(path), SS_SHM_DIR "/%s", e->d_name);
		l->objects++;
		if (stat(path, &st) == 0)
			l->bytes += (uint64_t)st.st_blocks * 512;
	}
	if (d)
		closedir(d);
	return true;
}

static void ss_shm_remove_stem(const char *stem, int lock)
{
	char path[SS_SHM_PATH + 256], s[SS_SHM_STEM_MAX + 1];
	struct dirent *e;
	DIR *d = opendir(SS_SHM_DIR);

	while (d && (e = readdir(d))) {
		if (!ss_shm_entry_stem(e->d_name, s, sizeof(s)) ||
		    strcmp(s, stem) || strstr(e->d_name, "-claim"))
			continue;
		snprintf(path, sizeof(path), SS_SHM_DIR "/%s", e->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	/* the claim last, while we hold it */
	snprintf(path, sizeof(path), SS_SHM_DIR "/ss-%s-claim", stem);
	unlink(path);
	if (lock >= 0)
		close(lock);
}

/* The pid that @stem's control object names (0: none, or not yet
 * written), and its job key in @job_key. */
static int32_t ss_shm_ctl_pid(const char *stem, uint64_t *job_key)
{
	char ctl[160];
	int32_t pid = 0;

	*job_key = 0;
	snprintf(ctl, sizeof(ctl), "/ss-%s-ctl", stem);
	ss__shm_ctl_owner(ctl, &pid, job_key, false);
	return pid;
}

/* The process that made @stem's objects, read without taking its claim
 * (a live owner's are never locked, even for a moment): the pid of its
 * control object, else of its claim; 0 when unknown. */
static int32_t ss_shm_owner(const char *stem)
{
	char name[160];
	uint64_t key;
	int32_t pid = ss_shm_ctl_pid(stem, &key);
	int fd;

	if (pid > 0)
		return pid;
	snprintf(name, sizeof(name), "/ss-%s-claim", stem);
	fd = shm_open(name, O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	if (pread(fd, &pid, sizeof(pid), 0) != sizeof(pid))
		pid = 0;
	close(fd);
	return pid;
}

/*
 * @stem's leftover, when it is one (of job @job_key, 0: any; and when
 * @pid, of that process and not of another job than @pid_key): given to
 * @fn and removed when @remove.  @l is the leftover, @ctl_pid the pid its
 * control object named, read under its claim's lock.
 */
static bool ss_shm_take(const char *stem, uint64_t job_key, int32_t pid,
			uint64_t pid_key, bool remove,
			void (*fn)(void *ctx, const struct ss_shm_leftover *),
			void *ctx, struct ss_shm_leftover *l, int32_t *ctl_pid)
{
	uint64_t key;
	int lock;

	if (!ss_shm_leftover_of(stem, l, &lock))
		return false;
	if ((job_key && l->job_key != job_key) ||
	    (pid && (l->pid != pid ||
		     (l->job_key && pid_key && l->job_key != pid_key)))) {
		if (lock >= 0)
			close(lock);
		return false;
	}
	*ctl_pid = ss_shm_ctl_pid(stem, &key);
	if (fn)
		fn(ctx, l);
	if (remove)
		ss_shm_remove_stem(stem, lock);
	else if (lock >= 0)
		close(lock);
	return true;
}

int ss_fabric_shm_clean(const char *addr, uint64_t job_key, bool remove,
			void (*fn)(void *ctx, const struct ss_shm_leftover *),
			void *ctx)
{
	char only[SS_SHM_STEM_MAX + 1], stem[SS_SHM_STEM_MAX + 1];
	char(*seen)[SS_SHM_STEM_MAX + 1] = NULL;
	int n_seen = 0, cap = 0, found = 0;
	struct ss_shm_leftover l;
	int32_t pid = 0;
	struct dirent *e;
	DIR *d;

	if (addr)
		ss_shm_stem(addr, only, sizeof(only));
	d = opendir(SS_SHM_DIR);
	if (!d)
		return ss_error_set(-errno, NULL, "is /dev/shm mounted?",
				    "listing " SS_SHM_DIR);
	/* with @addr too: the same process's other addresses */
	while ((e = readdir(d))) {
		bool dup = false;

		if (!ss_shm_entry_stem(e->d_name, stem, sizeof(stem)))
			continue;
		for (int i = 0; i < n_seen && !dup; i++)
			dup = !strcmp(seen[i], stem);
		if (dup)
			continue;
		if (n_seen == cap) {
			void *p = realloc(seen, (size_t)(cap ? 2 * cap : 16) *
							sizeof(*seen));

			if (!p) {
				closedir(d);
				free(seen);
				return ss_error_set(-ENOMEM, NULL, NULL,
						    "listing /dev/shm");
			}
			seen = p;
			cap = cap ? 2 * cap : 16;
		}
		strcpy(seen[n_seen++], stem);
	}
	closedir(d);
	if (!addr) {
		for (int i = 0; i < n_seen; i++)
			found += ss_shm_take(seen[i], job_key, 0, 0, remove, fn,
					     ctx, &l, &pid);
		free(seen);
		return found;
	}
	for (int i = 0; i < n_seen && !found; i++)
		found = !strcmp(seen[i], only) &&
			ss_shm_take(only, job_key, 0, 0, remove, fn, ctx, &l,
				    &pid);
	/*
	 * The rank's other endpoints: its tables' (at port + world, which
	 * only the rank knew) are made by the same process, which the pid
	 * of the address's control object names.  A claim alone names
	 * whoever took it (launch, for all its ranks): it says too little.
	 */
	for (int i = 0; found && pid > 0 && i < n_seen; i++) {
		struct ss_shm_leftover other;
		int32_t unused;

		if (strcmp(seen[i], only) && ss_shm_owner(seen[i]) == pid)
			found += ss_shm_take(seen[i], job_key, pid, l.job_key,
					     remove, fn, ctx, &other, &unused);
	}
	free(seen);
	return found;
}
