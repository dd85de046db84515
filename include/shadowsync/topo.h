/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ShadowSync topo layer: the machine's topology (hwloc), where the RDMA NIC
 * sits, the placement plan for the shadow thread and the trainers, thread
 * pinning, and NUMA-bound memory for the replica.
 *
 * The plan puts the shadow thread on a core of the NIC's NUMA node (a core
 * of its own when one is spare), the trainers on the other cores of that
 * node first and then on the nearest nodes, one trainer per physical core,
 * and the replica's memory on the NIC's node.  A NIC without PCI locality
 * (soft-RoCE) or no NIC at all falls back to the first NUMA node, and the
 * plan's note says so.
 *
 * Threads: a topology is read-only once open, so every call that takes
 * one may run in any number of threads at once (all the trainers pin
 * themselves at the same moment), except ss_topo_close(), which no other
 * call on that topology may overlap or follow.  A plan is plain data:
 * any thread may read it; free it once.  The other functions (the
 * request's init, ss_topo_free()) may run in any thread at once.
 */
#ifndef SHADOWSYNC_TOPO_H
#define SHADOWSYNC_TOPO_H

#include <stdbool.h>
#include <stddef.h>

#include "shadowsync/base.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ss_topo;

/*
 * ss_topo_open() - discover a topology.
 * @source: NULL or "" for this machine; a path to an XML file written by
 *          `lstopo --of xml`; or an hwloc synthetic description such as
 *          "package:2 core:16 pu:2".
 *
 * Only this machine's topology can pin threads and bind memory; the others
 * are for planning.  Returns 0, -ENOMEM, or SS_ETOPO with a detail that
 * names the source and says what was wrong with it.
 */
int ss_topo_open(struct ss_topo **topo, const char *source);

/* ss_topo_close() - release a topology and clear the pointer.  NULL is fine. */
void ss_topo_close(struct ss_topo **topo);

/* ss_topo_is_this_machine() - whether pinning and binding apply. */
bool ss_topo_is_this_machine(const struct ss_topo *topo);

/* Counts of what the topology holds. */
struct ss_topo_summary {
	int packages;
	int numa_nodes;
	int cores;
	int pus;
};

/* ss_topo_summarize() - fill @summary from @topo. */
void ss_topo_summarize(const struct ss_topo *topo,
		       struct ss_topo_summary *summary);

/* What a thread of the plan does. */
enum ss_role {
	SS_ROLE_SHADOW,
	SS_ROLE_TRAINER,
};

/* One thread of the plan: where it runs. */
struct ss_plan_slot {
	enum ss_role role;
	int trainer; /* trainer number, -1 for the shadow thread */
	int core; /* logical index of the core (hwloc's L#) */
	int pu; /* OS index of the PU, the kernel's CPU number */
	int numa; /* OS index of the NUMA node of that core */
	bool shares_core; /* another thread of the plan runs on this core */
};

/*
 * What to plan for.  Fill with ss_plan_request_init() first (base.h,
 * "Option structs").
 */
struct ss_plan_request {
	size_t size; /* sizeof the caller's struct, set by the init */
	int trainers; /* trainer threads; 0 = one per core but the shadow's
		       * (one per core with no_shadow) */
	const char *device; /* RDMA device; NULL = the first one found */
	bool oversubscribe; /* allow more trainers than cores */
	/* no shadow thread (no sync, or the foreground mode): no core is
	 * kept for one, and slots[0] is unused */
	bool no_shadow;
};

/*
 * ss_plan_request_init() - the defaults: a shadow thread, one trainer per
 * core but the shadow's, the first RDMA device, no oversubscription.
 */
#define ss_plan_request_init(request) \
	ss_plan_request_init_size((request), sizeof(*(request)))
void ss_plan_request_init_size(struct ss_plan_request *request, size_t size);

/* The placement plan.  slots[0] is the shadow thread, then the trainers. */
struct ss_plan {
	int trainers;
	int replica_numa; /* OS index of the NUMA node holding the replica */
	bool nic_local; /* the NIC's locality is known and used */
	bool shadow; /* slots[0] is a shadow thread's (not request.no_shadow) */
	bool shadow_own_core; /* the shadow thread has a core to itself */
	bool oversubscribed; /* some trainers share a core */
	char device[64]; /* the RDMA device planned for, "" if none */
	char note[256]; /* why the plan is as it is, for the user */
	int n_slots; /* trainers + 1 */
	struct ss_plan_slot slots[];
};

/*
 * ss_topo_plan() - make the placement plan for @request on @topo.
 *
 * Returns 0 and a plan to release with ss_plan_free(); SS_ENOCORES when more
 * trainers are asked for than there are cores and @request->oversubscribe
 * is not set; SS_ENODEVICE when @request->device names a device the
 * topology does not have; SS_EUSAGE for a negative trainer count; -EINVAL
 * for @request of a size this library does not know (base.h); -ENOMEM.
 */
int ss_topo_plan(struct ss_topo *topo, const struct ss_plan_request *request,
		 struct ss_plan **plan);

/* ss_plan_free() - release a plan and clear the pointer.  NULL is fine. */
void ss_plan_free(struct ss_plan **plan);

/*
 * ss_topo_pin_thread() - bind the calling thread to the PU of @slot (each
 * thread pins itself; any number at once).
 *
 * Returns 0; SS_ETOPO when @topo is not this machine's; -errno when the
 * kernel refuses (the detail names the PU).
 */
int ss_topo_pin_thread(struct ss_topo *topo, const struct ss_plan_slot *slot);

/*
 * ss_topo_alloc() - page-aligned, zeroed memory bound to a NUMA node.
 * @numa: OS index of the node, usually plan->replica_numa.
 * @len:  bytes; rounded up to the page size.
 *
 * The binding is set before the first touch, so every page lands on @numa.
 * Where the kernel cannot bind (no NUMA support, or @topo is not this
 * machine) the memory is still allocated and a warning is logged once.
 * Returns 0 or -ENOMEM; -EINVAL for an unknown node.  Release the memory
 * with ss_topo_free() and the same @len.
 */
int ss_topo_alloc(struct ss_topo *topo, int numa, size_t len, void **ptr);

/*
 * ss_topo_bind() - bind memory allocated elsewhere (a fabric region, say)
 * to NUMA node @numa, moving the pages already touched.
 *
 * Returns 0; SS_ETOPO when @topo is not this machine's; -EINVAL for an
 * unknown node; -errno when the kernel refuses (the detail names the node).
 */
int ss_topo_bind(struct ss_topo *topo, void *ptr, size_t len, int numa);

/*
 * ss_topo_place() - the same for memory not yet touched (a region just
 * mapped): only the policy its first touch follows.  Moving nothing, it
 * asks the kernel for no migration, which drains every CPU's page lists
 * and waits on each: on a loaded machine, seconds (half a minute seen).
 */
int ss_topo_place(struct ss_topo *topo, void *ptr, size_t len, int numa);

/* ss_topo_free() - release memory from ss_topo_alloc().  NULL is fine. */
void ss_topo_free(void *ptr, size_t len);

/*
 * ss_topo_memory_node() - OS index of the NUMA node that holds the (touched)
 * page at @ptr, or a negative status when it cannot be told.
 */
int ss_topo_memory_node(struct ss_topo *topo, const void *ptr);

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_TOPO_H */
