// SPDX-License-Identifier: BSD-2-Clause
/* Running the ranks of a test as processes: see ranks.h. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ranks.h"

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
	const char *host = getenv("SS_RXE_ADDR");

	for (int i = 0; i < world; i++) {
		snprintf(buf[i], 64, "%s:%d", host ? host : "127.0.0.1",
			 port_base + i);
		addrs[i] = buf[i];
	}
}

int ranks_port_base(void)
{
	return 20000 + (int)(getpid() % 2000) * 8;
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
	int failed = 0, started = 0;

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
	return failed;
}
