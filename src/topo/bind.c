// SPDX-License-Identifier: BSD-2-Clause
/* Applying a plan: pinning threads and binding the replica's memory. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "topo_internal.h"

int ss_topo_pin_thread(struct ss_topo *topo, const struct ss_plan_slot *slot)
{
	hwloc_bitmap_t set;
	int rc = 0;

	if (!topo->this_machine)
		return ss_error_set(
			SS_ETOPO, "it is not this machine's",
			"plan with the machine's own topology to pin",
			"pinning to PU %d of topology '%s'", slot->pu,
			topo->source);
	set = hwloc_bitmap_alloc();
	if (!set)
		return ss_error_set(-ENOMEM, NULL, NULL, "pinning");
	hwloc_bitmap_only(set, (unsigned)slot->pu);
	if (hwloc_set_cpubind(topo->hw, set, HWLOC_CPUBIND_THREAD) < 0)
		rc = ss_error_set(
			-errno, NULL,
			"the PU may be outside this process's CPU set (taskset, cgroup cpuset)",
			"hwloc_set_cpubind to PU %d", slot->pu);
	hwloc_bitmap_free(set);
	return rc;
}

static size_t ss_page_round(size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (len + page - 1) / page * page;
}

int ss_topo_alloc(struct ss_topo *topo, int numa, size_t len, void **ptr)
{
	static bool warned;
	hwloc_obj_t node;
	void *p;

	*ptr = NULL;
	node = hwloc_get_numanode_obj_by_os_index(topo->hw, (unsigned)numa);
	if (!node)
		return ss_error_set(-EINVAL, "no such NUMA node", NULL,
				    "allocating on NUMA node %d", numa);
	len = ss_page_round(len ? len : 1);
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	if (p == MAP_FAILED)
		return ss_error_set(-errno, NULL, NULL, "mmap of %zu bytes",
				    len);
	/* Bind before the first touch so that every page lands on @numa. */
	if ((!topo->this_machine ||
	     hwloc_set_area_membind(topo->hw, p, len, node->nodeset,
				    HWLOC_MEMBIND_BIND,
				    HWLOC_MEMBIND_BYNODESET) < 0) &&
	    !__atomic_exchange_n(&warned, true, __ATOMIC_RELAXED))
		ss_log_warn(
			"cannot bind memory to NUMA node %d (%s): pages go where they are first touched",
			numa,
			topo->this_machine ? strerror(errno) :
					     "topology is not this machine's");
	*ptr = p;
	return 0;
}

static int ss_bind(struct ss_topo *topo, void *ptr, size_t len, int numa,
		   int flags)
{
	hwloc_obj_t node;

	if (!topo->this_machine)
		return ss_error_set(SS_ETOPO, "it is not this machine's", NULL,
				    "binding memory with topology '%s'",
				    topo->source);
	node = hwloc_get_numanode_obj_by_os_index(topo->hw, (unsigned)numa);
	if (!node)
		return ss_error_set(-EINVAL, "no such NUMA node", NULL,
				    "binding memory to NUMA node %d", numa);
	if (hwloc_set_area_membind(topo->hw, ptr, len, node->nodeset,
				   HWLOC_MEMBIND_BIND,
				   HWLOC_MEMBIND_BYNODESET | flags) < 0)
		return ss_error_set(
			-errno, NULL,
			"the kernel may lack NUMA support, or the container forbids mbind",
			"binding %zu bytes to NUMA node %d", len, numa);
	return 0;
}

int ss_topo_bind(struct ss_topo *topo, void *ptr, size_t len, int numa)
{
	return ss_bind(topo, ptr, len, numa, HWLOC_MEMBIND_MIGRATE);
}

int ss_topo_place(struct ss_topo *topo, void *ptr, size_t len, int numa)
{
	return ss_bind(topo, ptr, len, numa, 0);
}

void ss_topo_free(void *ptr, size_t len)
{
	if (ptr)
		munmap(ptr, ss_page_round(len ? len : 1));
}

int ss_topo_memory_node(struct ss_topo *topo, const void *ptr)
{
	hwloc_nodeset_t set = hwloc_bitmap_alloc();
	int rc;

	if (!set)
		return -ENOMEM;
	if (hwloc_get_area_memlocation(topo->hw, ptr, 1, set,
				       HWLOC_MEMBIND_BYNODESET) < 0)
		rc = -errno;
	else
		rc = hwloc_bitmap_first(set) >= 0 ? hwloc_bitmap_first(set) :
						    -ENOENT;
	hwloc_bitmap_free(set);
	return rc;
}
