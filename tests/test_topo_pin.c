// SPDX-License-Identifier: BSD-2-Clause
/*
 * Applying a plan on this machine: pinning threads and binding memory.
 * Threaded, so written as SCENARIOs that also run under ThreadSanitizer.
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "scenario.h"
#include "shadowsync/shadowsync.h"

/* This machine's topology and its default plan. */
static int open_this_machine(struct ss_topo **topo, struct ss_plan **plan)
{
	struct ss_plan_request req;

	ss_plan_request_init(&req);
	check(ss_topo_open(topo, NULL) == 0, "%s: %s", ss_last_error()->what,
	      ss_last_error()->why);
	check(ss_topo_is_this_machine(*topo), "not this machine");
	check(ss_topo_plan(*topo, &req, plan) == 0, "%s: %s",
	      ss_last_error()->what, ss_last_error()->why);
	return 0;
}

struct pin_result {
	struct ss_topo *topo;
	const struct ss_plan_slot *slot;
	int rc;
	int ncpus; /* CPUs in the thread's affinity mask after pinning */
	bool on_pu; /* the mask holds the slot's PU */
};

static void *pin_and_read_back(void *arg)
{
	struct pin_result *r = arg;
	cpu_set_t set;

	r->rc = ss_topo_pin_thread(r->topo, r->slot);
	if (r->rc == 0 && sched_getaffinity(0, sizeof(set), &set) == 0) {
		r->ncpus = CPU_COUNT(&set);
		r->on_pu = CPU_ISSET(r->slot->pu, &set);
	}
	return NULL;
}

SCENARIO(pin, every_thread_of_the_plan_lands_on_its_pu)
{
	struct ss_topo *topo = NULL;
	struct ss_plan *plan = NULL;
	pthread_t threads[64];
	struct pin_result results[64] = { 0 };
	int n;

	if (open_this_machine(&topo, &plan))
		return -1;
	n = plan->n_slots < 64 ? plan->n_slots : 64;
	for (int i = 0; i < n; i++) {
		results[i].topo = topo;
		results[i].slot = &plan->slots[i];
		check(pthread_create(&threads[i], NULL, pin_and_read_back,
				     &results[i]) == 0,
		      "thread %d", i);
	}
	for (int i = 0; i < n; i++) {
		pthread_join(threads[i], NULL);
		check(results[i].rc == 0, "slot %d: %s", i,
		      ss_strerror(results[i].rc));
		check(results[i].ncpus == 1, "slot %d: %d CPUs", i,
		      results[i].ncpus);
		check(results[i].on_pu, "slot %d not on PU %d", i,
		      plan->slots[i].pu);
	}
	ss_plan_free(&plan);
	ss_topo_close(&topo);
	return 0;
}

SCENARIO(pin, synthetic_topology_cannot_pin)
{
	struct ss_topo *other = NULL;
	struct ss_plan *plan = NULL;
	struct ss_plan_request req;

	ss_plan_request_init(&req);
	req.trainers = 1;
	check(ss_topo_open(&other, "numa:1 core:2 pu:1") == 0, "open");
	check(ss_topo_plan(other, &req, &plan) == 0, "plan");
	check(ss_topo_pin_thread(other, &plan->slots[0]) == SS_ETOPO,
	      "pinned on a synthetic topology");
	check(strstr(ss_last_error()->why, "not this machine"), "why: %s",
	      ss_last_error()->why);
	ss_plan_free(&plan);
	ss_topo_close(&other);
	check(!other && !plan, "pointers not cleared");
	return 0;
}

SCENARIO(pin, replica_memory_is_page_aligned_zeroed_and_bound)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE), len = 3 * page + 5;
	struct ss_topo *topo = NULL;
	struct ss_plan *plan = NULL;
	unsigned char *p = NULL;
	int node;

	if (open_this_machine(&topo, &plan))
		return -1;
	check(ss_topo_alloc(topo, plan->replica_numa, len, (void **)&p) == 0,
	      "%s", ss_strerror(ss_last_error()->code));
	check((uintptr_t)p % page == 0, "%p not page-aligned", (void *)p);
	for (size_t i = 0; i < len; i++)
		check(p[i] == 0, "byte %zu not zero", i);
	memset(p, 0xab, len); /* touch every page */
	node = ss_topo_memory_node(topo, p + len - 1);
	if (node == -ENOSYS || node == -EPERM)
		skip("the kernel does not tell where pages are: %s",
		     ss_strerror(node));
	check(node == plan->replica_numa, "page on node %d, want %d", node,
	      plan->replica_numa);
	ss_topo_free(p, len);
	ss_plan_free(&plan);
	ss_topo_close(&topo);
	return 0;
}

SCENARIO(pin, memory_allocated_elsewhere_is_bound_and_moved)
{
	size_t len = 8 * (size_t)sysconf(_SC_PAGESIZE);
	struct ss_topo *topo = NULL;
	struct ss_plan *plan = NULL;
	char *p = NULL;
	int node;

	if (open_this_machine(&topo, &plan))
		return -1;
	check(posix_memalign((void **)&p, (size_t)sysconf(_SC_PAGESIZE), len) ==
		      0,
	      "posix_memalign");
	memset(p, 1, len); /* touched before binding: pages must move */
	if (ss_topo_bind(topo, p, len, plan->replica_numa) < 0)
		skip("binding refused here: %s", ss_last_error()->why);
	node = ss_topo_memory_node(topo, p + len - 1);
	if (node == -ENOSYS || node == -EPERM)
		skip("the kernel does not tell where pages are");
	check(node == plan->replica_numa, "page on node %d, want %d", node,
	      plan->replica_numa);
	check(ss_topo_bind(topo, p, len, 4242) == -EINVAL, "node 4242");
	free(p);
	ss_plan_free(&plan);
	ss_topo_close(&topo);
	return 0;
}

/* Placed before the first touch (a fabric region): pages land there. */
SCENARIO(pin, memory_placed_before_its_first_touch_lands_there)
{
	size_t len = 8 * (size_t)sysconf(_SC_PAGESIZE);
	struct ss_topo *topo = NULL;
	struct ss_plan *plan = NULL;
	char *p;
	int node;

	if (open_this_machine(&topo, &plan))
		return -1;
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	check(p != MAP_FAILED, "mmap");
	if (ss_topo_place(topo, p, len, plan->replica_numa) < 0)
		skip("binding refused here: %s", ss_last_error()->why);
	memset(p, 1, len);
	node = ss_topo_memory_node(topo, p + len - 1);
	if (node == -ENOSYS || node == -EPERM)
		skip("the kernel does not tell where pages are");
	check(node == plan->replica_numa, "page on node %d, want %d", node,
	      plan->replica_numa);
	check(ss_topo_place(topo, p, len, 4242) == -EINVAL, "node 4242");
	munmap(p, len);
	ss_plan_free(&plan);
	ss_topo_close(&topo);
	return 0;
}

SCENARIO(pin, unknown_numa_node_refused)
{
	struct ss_topo *topo = NULL;
	struct ss_plan *plan = NULL;
	void *p = (void *)1;

	if (open_this_machine(&topo, &plan))
		return -1;
	check(ss_topo_alloc(topo, 4242, 4096, &p) == -EINVAL, "allocated");
	check(p == NULL, "pointer not cleared");
	check(strstr(ss_last_error()->what, "4242"), "what: %s",
	      ss_last_error()->what);
	ss_plan_free(&plan);
	ss_topo_close(&topo);
	return 0;
}

/* Threads logging and failing at once: lines whole, details per thread. */
static void *log_and_fail(void *arg)
{
	long id = (long)arg;

	for (int i = 0; i < 200; i++) {
		ss_log_debug("thread %ld line %d", id, i);
		ss_error_set(SS_EPEER, NULL, NULL, "peer %ld", id);
		if (ss_last_error()->code != SS_EPEER)
			return (void *)1;
	}
	return NULL;
}

SCENARIO(base, logging_and_errors_from_many_threads)
{
	pthread_t threads[4];
	void *ret;

	ss_log_set_level(SS_LOG_ERROR); /* exercise the level, print nothing */
	ss_error_set(SS_EPARSE, NULL, NULL, "main");
	for (long i = 0; i < 4; i++)
		check(pthread_create(&threads[i], NULL, log_and_fail,
				     (void *)i) == 0,
		      "thread %ld", i);
	for (int i = 0; i < 4; i++) {
		pthread_join(threads[i], &ret);
		check(ret == NULL, "thread %d saw another's error", i);
	}
	check(ss_last_error()->code == SS_EPARSE &&
		      !strcmp(ss_last_error()->what, "main"),
	      "main thread's detail changed: %s", ss_last_error()->what);
	return 0;
}
