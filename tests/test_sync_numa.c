// SPDX-License-Identifier: BSD-2-Clause
/*
 * The replica lands on the planned NUMA node, over shm and over verbs.  It needs a
 * machine with two NUMA nodes: `make check` runs it in a soft-RoCE guest
 * that has two (tools/rxe-vm --numa 2: CPU 0 on node 0, CPU 1 on node 1);
 * on one node it reports itself skipped.
 *
 * Each rank runs on CPU 0 (node 0) and plans the replica on node 1.
 * Before, over verbs, the fabric allocated and zeroed the regions from
 * the calling thread (first touch: node 0), registered them (pinning the
 * pages there), and the sync layer bound them to node 1 afterwards, which
 * moved nothing and said nothing.  Now the fabric binds each region
 * between mapping it and registering it.
 */
#include <criterion/criterion.h>
#include <sched.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "ranks.h"
#include "shadowsync/shadowsync.h"

#define NPARAMS (1 << 20) /* 4 MiB: 1024 pages */
#define PLANNED 1

struct placement {
	int pages, on_planned, node_of_first_off;
};

static struct placement *seen; /* per rank, shared with the test */

struct numa_job {
	uint64_t key;
	int port_base;
};

static int numa_rank(int rank, void *arg)
{
	struct numa_job *job = arg;
	struct ss_fabric *f = NULL;
	struct ss_sync *s = NULL;
	struct ss_topo *topo = NULL;
	struct ss_sync_options so;
	cpu_set_t cpu0;
	const char *w;
	int rc;

	/* the topology first: hwloc leaves out what we may not run on */
	rank_fail_if(rank, ss_topo_open(&topo, NULL), "topology");
	CPU_ZERO(&cpu0);
	CPU_SET(0, &cpu0);
	rank_fail_if(rank, sched_setaffinity(0, sizeof(cpu0), &cpu0) < 0,
		     "pinning to CPU 0");
	ss_sync_options_init(&so, SS_SYNC_MA);
	so.topo = topo;
	so.numa = PLANNED;
	rc = ranks_fabric_open(rank, 2, job->port_base, job->key, NPARAMS, &f);
	rank_fail_if(rank, rc, "open: %s", ss_strerror(rc));
	rc = ss_sync_create(&s, f, NPARAMS, &so);
	rank_fail_if(rank, rc, "sync: %s", ss_strerror(rc));
	/* over shm the reservation allocated the pages; touch them anyway */
	memset(ss_sync_params(s), 0, NPARAMS * sizeof(float));
	w = (const char *)ss_sync_params(s);
	seen[rank].node_of_first_off = -1;
	for (size_t at = 0; at < NPARAMS * sizeof(float); at += 16 * 4096) {
		int node = ss_topo_memory_node(topo, w + at);

		seen[rank].pages++;
		if (node == PLANNED)
			seen[rank].on_planned++;
		else if (seen[rank].node_of_first_off < 0)
			seen[rank].node_of_first_off = node;
	}
	rc = ss_fabric_connect(f);
	rank_fail_if(rank, rc, "connect: %s", ss_strerror(rc));
	rank_fail_if(rank, ss_sync_begin(s), "begin");
	rank_fail_if(rank, ss_sync_round(s), "a round on the placed replica");
	rank_fail_if(rank, ss_sync_barrier(s), "final barrier");
	ss_sync_destroy(&s);
	ss_fabric_close(&f);
	ss_topo_close(&topo);
	return 0;
}

Test(sync_numa, the_registered_replica_is_on_the_planned_node, .timeout = 240)
{
	struct ss_topo *topo = NULL;
	struct ss_topo_summary sum;
	struct numa_job job = { ((uint64_t)getpid() << 20) ^ ss_now_ns(),
				ranks_port_base() };

	if (ranks_no_device())
		cr_skip_test("%s", ranks_no_device());
	cr_assert_eq(ss_topo_open(&topo, NULL), 0);
	ss_topo_summarize(topo, &sum);
	ss_topo_close(&topo);
	if (sum.numa_nodes < 2)
		cr_skip_test("one NUMA node here: needs two (make check runs "
			     "it in tools/rxe-vm --numa 2)");
	seen = mmap(NULL, 2 * sizeof(*seen), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(seen, MAP_FAILED);
	cr_assert_eq(ranks_run(2, numa_rank, &job, 180, NULL), 0,
		     "a rank failed (its message is above)");
	for (int r = 0; r < 2; r++) {
		cr_assert_gt(seen[r].pages, 0);
		cr_assert_eq(seen[r].on_planned, seen[r].pages,
			     "rank %d: %d of %d sampled pages on node %d, the "
			     "first other on node %d",
			     r, seen[r].on_planned, seen[r].pages, PLANNED,
			     seen[r].node_of_first_off);
	}
}
