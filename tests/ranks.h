/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Running the ranks of a test as processes, over the transport that
 * SS_TEST_TRANSPORT names (shm by default; verbs inside tools/rxe-vm).
 */
#ifndef SS_TEST_RANKS_H
#define SS_TEST_RANKS_H

#include <stdbool.h>
#include <stdio.h>

#include "shadowsync/shadowsync.h"

#define RANKS_MAX 9

/* In a rank's code: on failure say where and why, and return 1. */
#define rank_fail_if(rank, cond, ...)                                         \
	do {                                                                  \
		if (cond) {                                                   \
			fprintf(stderr, "rank %d: %s:%d: ", (rank), __FILE__, \
				__LINE__);                                    \
			fprintf(stderr, __VA_ARGS__);                         \
			fprintf(stderr, " (last error: %s: %s)\n",            \
				ss_last_error()->what, ss_last_error()->why); \
			return 1;                                             \
		}                                                             \
	} while (0)

/* ranks_transport() - the transport the tests run over. */
enum ss_transport ranks_transport(void);

/* ranks_no_device() - why verbs tests cannot run here, or NULL. */
const char *ranks_no_device(void);

/*
 * ranks_cluster() - whether this test runs on one host of a soft-RoCE
 * cluster (tools/rxe-vm --hosts: SS_HOSTS and SS_RANK set, over verbs):
 * then each host runs only its own rank (@rank), the world is the hosts
 * (@world), rank i listens on host i, and ports and job keys come from
 * the test's name, the same on every host.
 */
bool ranks_cluster(int *rank, int *world);

/* ranks_job_key() - a key for this test's job (the cluster's, see above). */
uint64_t ranks_job_key(void);

/* ranks_addrs() - "host:port" of each rank, from a per-test port base. */
void ranks_addrs(int world, int port_base, char buf[][64], const char **addrs);

/*
 * ranks_port_base() - the first of RANKS_PORTS ports that this test
 * process holds alone (on a cluster: from the test's name, the same on
 * every host).  A test takes its ports from base to base + RANKS_PORTS
 * - 1 and no others: a job's tables listen past its ranks (port + world).
 */
/* 64: the launch tests' jobs over hosts take ports up to base + 63 */
#define RANKS_PORTS 64
int ranks_port_base(void);

/*
 * ranks_clean_ports() - over shm, remove what ranks this test killed on
 * purpose left on its ports (a live rank's objects are never touched):
 * no test leaves /dev/shm objects behind (tests/run checks).  ranks_run()
 * calls it when its ranks are done.
 */
void ranks_clean_ports(void);

/*
 * ranks_fabric_open() - the endpoint of @rank of @world on this test's
 * addresses (from @port_base) and transport, 20 s timeout.
 */
int ranks_fabric_open(int rank, int world, int port_base, uint64_t job_key,
		      uint64_t layout_hash, struct ss_fabric **fabric);

/*
 * ranks_run() - fork @world processes that each return fn(rank, arg) as
 * their exit status, and wait for all, at most @timeout_s: then every rank
 * still running is killed.  Exit statuses go to @exits (-1: killed by a
 * signal) when it is not NULL.  Returns the number of ranks that failed.
 */
int ranks_run(int world, int (*fn)(int rank, void *arg), void *arg,
	      int timeout_s, int *exits);

/* 0 in a rank's first process, 1 in the one ranks_run_restart() started. */
extern int ranks_life;

/*
 * ranks_run_restart() - ranks_run(), and when a rank of the bit mask
 * @restarts (bit r: rank r) dies of a signal the first time, a new process
 * of it is started (ranks_life 1 in it), as a launcher that restarts a
 * failed rank does.  @exits gets the status of the last process of each
 * rank.
 */
int ranks_run_restart(int world, int (*fn)(int rank, void *arg), void *arg,
		      int timeout_s, int *exits, unsigned int restarts);

#endif /* SS_TEST_RANKS_H */
