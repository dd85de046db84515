// SPDX-License-Identifier: BSD-2-Clause
/* Running the ranks of a test as processes: see ranks.h. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ranks.h"

/*
 * Criterion's current test, where the program has Criterion (the TSan
 * runner does not): its name makes the ports and the job key every host
 * of a cluster agrees on.
 */
struct criterion_test {
	const char *name;
	const char *category;
};
extern const struct criterion_test *const criterion_current_test
	__attribute__((weak));

bool ranks_cluster(int *rank, int *world)
{
	const char *hosts = getenv("SS_HOSTS"), *r = getenv("SS_RANK");
	int n = 1;

	if (!hosts || !*hosts || !r || ranks_transport() != SS_TRANSPORT_VERBS)
		return false;
	for (const char *c = hosts; *c; c++)
		n += *c == ',';
	if (rank)
		*rank = atoi(r);
	if (world)
		*world = n;
	return true;
}

/* FNV-1a of the current test's category and name: the same on every host. */
static uint64_t ranks_test_hash(void)
{
	uint64_t h = 0xcbf29ce484222325ull;
	const char *parts[2] = { NULL, NULL };

	if (&criterion_current_test && criterion_current_test) {
		parts[0] = criterion_current_test->category;
		parts[1] = criterion_current_test->name;
	}
	for (int i = 0; i < 2; i++)
		for (const char *c = parts[i]; c && *c; c++)
			h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
	return h;
}

uint64_t ranks_job_key(void)
{
	if (ranks_cluster(NULL, NULL))
		return ranks_test_hash() | 1;
	return ((uint64_t)getpid() << 32) ^ ss_now_ns();
}

enum ss_transport ranks_transport(void)
{
	const char *t = getenv("SS_TEST_TRANSPORT");

	return t && !strcmp(t, "verbs") ? SS_TRANSPORT_VERBS : SS_TRANSPORT_SHM;
}

const char *ranks_no_device(void)
{
	if (ranks_transport() == SS_TRANSPORT_VERBS &&
	    !ss_fabric_verbs_available())
		return "no active RDMA port here (run under tools/rxe-vm)";
	return NULL;
}

void ranks_addrs(int world, int port_base, char buf[][64], const char **addrs)
{
	const char *host = getenv("SS_RXE_ADDR"), *hosts = getenv("SS_HOSTS");

	if (ranks_cluster(NULL, NULL)) { /* rank i on host i */
		for (int i = 0; i < world; i++) {
			const char *at = hosts;
			size_t len;

			for (int k = 0; k < i && at; k++) {
				at = strchr(at, ',');
				at = at ? at + 1 : NULL;
			}
			len = at ? strcspn(at, ",") : 0;
			snprintf(buf[i], 64, "%.*s:%d", (int)len, at ? at : "",
				 port_base + i);
			addrs[i] = buf[i];
		}
		return;
	}
	for (int i = 0; i < world; i++) {
		snprintf(buf[i], 64, "%s:%d", host ? host : "127.0.0.1",
			 port_base + i);
		addrs[i] = buf[i];
	}
}

/*
 * A block of RANKS_PORTS ports no other test on this machine holds: each
 * block has a lock file, and the first free one from a place picked by
 * the pid is taken (flock, held until this process ends).  Ports from
 * the pid alone collided: Criterion forks the tests of a suite one after
 * another, so two tests running at once often have pids one apart, and
 * one test's ports ran into the next one's.
 */
static int ranks_port_block(void)
{
	static const char dir[] = "/tmp/ss-test-ports";
	int blocks = (52000 - 20000) / RANKS_PORTS;
	int first = (int)(getpid() % blocks);
	char path[64];

	mkdir(dir, 01777);
	for (int i = 0; i < blocks; i++) {
		int b = (first + i) % blocks;
		int fd;

		snprintf(path, sizeof(path), "%s/%d", dir, b);
		fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0666);
		if (fd < 0)
			break;
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return 20000 + b * RANKS_PORTS; /* fd stays open */
		close(fd);
	}
	/* no lock files (a read-only /tmp): the pid's block, unguarded */
	return 20000 + first * RANKS_PORTS;
}

static int ranks_base; /* this process's block, once taken */

int ranks_port_base(void)
{
	if (ranks_cluster(NULL, NULL))
		return 20000 + (int)(ranks_test_hash() %
				     ((52000 - 20000) / RANKS_PORTS)) *
				       RANKS_PORTS;
	if (!ranks_base)
		ranks_base = ranks_port_block();
	return ranks_base;
}

void ranks_clean_ports(void)
{
	char addr[64];

	if (!ranks_base || ranks_transport() != SS_TRANSPORT_SHM)
		return;
	for (int p = 0; p < RANKS_PORTS; p++) {
		snprintf(addr, sizeof(addr), "127.0.0.1:%d", ranks_base + p);
		ss_fabric_shm_clean(addr, 0, true, NULL, NULL);
	}
}

int ranks_fabric_open(int rank, int world, int port_base, uint64_t job_key,
		      uint64_t layout_hash, struct ss_fabric **fabric)
{
	char buf[RANKS_MAX][64];
	const char *addrs[RANKS_MAX];
	struct ss_fabric_options o;

	ranks_addrs(world, port_base, buf, addrs);
	ss_fabric_options_init(&o);
	o.transport = ranks_transport();
	o.rank = rank;
	o.world = world;
	o.addrs = addrs; /* copied by ss_fabric_open */
	o.job_key = job_key;
	o.layout_hash = layout_hash;
	o.timeout_ms = 20000;
	return ss_fabric_open(fabric, &o);
}

int ranks_life;

int ranks_run(int world, int (*fn)(int rank, void *arg), void *arg,
	      int timeout_s, int *exits)
{
	return ranks_run_restart(world, fn, arg, timeout_s, exits, 0);
}

int ranks_run_restart(int world, int (*fn)(int rank, void *arg), void *arg,
		      int timeout_s, int *exits, unsigned int restarts)
{
	pid_t pids[RANKS_MAX];
	uint64_t deadline = ss_deadline_ns((uint64_t)timeout_s * 1000);
	int failed = 0, started = 0, me, hosts;

	if (ranks_cluster(&me, &hosts)) {
		/* one rank a host: this host's, as a process of its own */
		pid_t pid;
		int status = 0;

		if (hosts != world || restarts) {
			fprintf(stderr,
				"ranks: %d ranks%s, on a cluster of %d hosts: "
				"run this test on a single host\n",
				world, restarts ? " restarted" : "", hosts);
			return world;
		}
		fflush(NULL);
		pid = fork();
		if (pid == 0)
			_exit(fn(me, arg));
		while (pid > 0 && waitpid(pid, &status, WNOHANG) == 0) {
			if (ss_deadline_passed(deadline)) {
				kill(pid, SIGKILL);
				waitpid(pid, &status, 0);
				return 1;
			}
			ss_sleep_ns(5000000);
		}
		if (exits)
			for (int r = 0; r < world; r++)
				exits[r] = r == me && WIFEXITED(status) ?
						   WEXITSTATUS(status) :
						   -1;
		return pid < 0 || !WIFEXITED(status) ||
		       WEXITSTATUS(status) != 0;
	}

	for (int r = 0; r < world && r < RANKS_MAX; r++) {
		fflush(NULL);
		pids[r] = fork();
		if (pids[r] < 0)
			break;
		if (pids[r] == 0)
			_exit(fn(r, arg));
		started++;
	}
	if (started < world) {
		for (int r = 0; r < started; r++)
			kill(pids[r], SIGKILL);
		return world;
	}
	for (int left = world; left > 0;) {
		int status, who = 0;
		pid_t pid = waitpid(-1, &status, WNOHANG);

		while (pid > 0 && who < world && pids[who] != pid)
			who++;
		if (pid > 0 && who < world && (restarts >> who & 1) &&
		    WIFSIGNALED(status)) {
			pid_t again;

			fflush(NULL);
			again = fork();
			if (again == 0) {
				ranks_life = 1;
				_exit(fn(who, arg));
			}
			if (again > 0) { /* the rank runs on in it */
				pids[who] = again;
				restarts &= ~(1u << who); /* once */
				continue;
			}
		}
		if (pid > 0) {
			left--;
			if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
				failed++;
			for (int r = 0; r < world && exits; r++)
				if (pids[r] == pid)
					exits[r] = WIFEXITED(status) ?
							   WEXITSTATUS(status) :
							   -1;
			continue;
		}
		if (ss_deadline_passed(deadline)) {
			fprintf(stderr,
				"ranks still running after %d s: killed\n",
				timeout_s);
			for (int r = 0; r < world; r++)
				kill(pids[r], SIGKILL);
			while (waitpid(-1, NULL, 0) > 0)
				;
			return world;
		}
		ss_sleep_ns(5000000);
	}
	ranks_clean_ports();
	return failed;
}
