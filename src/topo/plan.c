// SPDX-License-Identifier: BSD-2-Clause
/*
 * The placement plan: which core runs the shadow thread, which run the
 * trainers, and which NUMA node holds the replica.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/options.h"
#include "topo_internal.h"

/* A core, or a PU where the topology has no cores, with its NUMA node. */
struct ss_core {
	hwloc_obj_t obj;
	int numa; /* OS index */
	int rank; /* position of its NUMA node in the nearest-first order */
	int n_pus; /* its PUs, */
	const int *pus; /* their OS indices in logical order */
};

/*
 * Every PU's OS index grouped by core, in one pass over the PUs: asking
 * hwloc for the PUs inside each core's cpuset walks every PU for every
 * core, over bitmaps as long as the machine, and a 32768-PU topology took
 * minutes.  Core c (logical index) has pus[first[c]] to pus[first[c+1]-1].
 */
struct ss_pu_map {
	int *first, *pus;
};

static int ss_pu_map_build(struct ss_topo *topo, hwloc_obj_type_t type,
			   int n_types, struct ss_pu_map *m)
{
	int n_pu = hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_PU);
	int *fill = calloc((size_t)n_types + 1, sizeof(int));

	m->first = calloc((size_t)n_types + 1, sizeof(int));
	m->pus = calloc((size_t)(n_pu > 0 ? n_pu : 1), sizeof(int));
	if (!fill || !m->first || !m->pus) {
		free(fill);
		return -ENOMEM;
	}
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < n_pu; i++) {
			hwloc_obj_t pu = hwloc_get_obj_by_type(
				topo->hw, HWLOC_OBJ_PU, (unsigned)i);
			hwloc_obj_t core =
				type == HWLOC_OBJ_PU ?
					pu :
					hwloc_get_ancestor_obj_by_type(
						topo->hw, type, pu);
			unsigned c;

			if (!core || core->logical_index >= (unsigned)n_types)
				continue;
			c = core->logical_index;
			if (pass == 0)
				m->first[c + 1]++;
			else
				m->pus[m->first[c] + fill[c]++] =
					(int)pu->os_index;
		}
		for (int c = 0; pass == 0 && c < n_types; c++)
			m->first[c + 1] += m->first[c];
	}
	free(fill);
	return 0;
}

static void ss_pu_map_free(struct ss_pu_map *m)
{
	free(m->first);
	free(m->pus);
}

/* A NUMA node and how far it is from the NIC's node. */
struct ss_node {
	hwloc_obj_t obj;
	double distance;
};

static hwloc_obj_type_t ss_core_type(struct ss_topo *topo)
{
	return hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_CORE) > 0 ?
		       HWLOC_OBJ_CORE :
		       HWLOC_OBJ_PU;
}

/*
 * Distance between two NUMA nodes: the firmware's matrix (SLIT) when hwloc
 * has one, else how high in the tree their common ancestor sits.
 */
static double ss_node_distance(struct ss_topo *topo, hwloc_obj_t a,
			       hwloc_obj_t b)
{
	struct hwloc_distances_s *dist[1];
	unsigned nr = 1;
	hwloc_uint64_t ab, ba;
	hwloc_obj_t anc;
	double d = -1;

	if (a == b)
		return 0;
	if (hwloc_distances_get_by_type(topo->hw, HWLOC_OBJ_NUMANODE, &nr, dist,
					0, 0) == 0 &&
	    nr > 0) {
		if (hwloc_distances_obj_pair_values(dist[0], a, b, &ab, &ba) ==
		    0)
			d = (double)ab;
		hwloc_distances_release(topo->hw, dist[0]);
		if (d >= 0)
			return d;
	}
	/* NUMA nodes hang off normal objects; compare those. */
	anc = hwloc_get_common_ancestor_obj(topo->hw, a->parent, b->parent);
	return 1000.0 - (anc ? anc->depth : 0);
}

static int ss_node_cmp(const void *pa, const void *pb)
{
	const struct ss_node *a = pa, *b = pb;

	if (a->distance != b->distance)
		return a->distance < b->distance ? -1 : 1;
	return (int)a->obj->logical_index - (int)b->obj->logical_index;
}

/* The NUMA nodes nearest-first from @home. */
static struct ss_node *ss_nodes_by_distance(struct ss_topo *topo,
					    hwloc_obj_t home, int *count)
{
	int n = hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_NUMANODE);
	struct ss_node *nodes = calloc((size_t)(n > 0 ? n : 1), sizeof(*nodes));

	if (!nodes)
		return NULL;
	for (int i = 0; i < n; i++) {
		nodes[i].obj = hwloc_get_obj_by_type(
			topo->hw, HWLOC_OBJ_NUMANODE, (unsigned)i);
		nodes[i].distance = ss_node_distance(topo, home, nodes[i].obj);
	}
	qsort(nodes, (size_t)n, sizeof(*nodes), ss_node_cmp);
	*count = n;
	return nodes;
}

static int ss_core_cmp(const void *pa, const void *pb)
{
	const struct ss_core *a = pa, *b = pb;

	if (a->rank != b->rank)
		return a->rank - b->rank;
	return (int)a->obj->logical_index - (int)b->obj->logical_index;
}

/* Every usable core, ordered by its node's distance from the NIC's node:
 * a core is on the nearest node that holds one of its PUs. */
static struct ss_core *
ss_cores_by_distance(struct ss_topo *topo, const struct ss_node *nodes,
		     int n_nodes, const struct ss_pu_map *m, int *count)
{
	hwloc_obj_type_t type = ss_core_type(topo);
	int n = hwloc_get_nbobjs_by_type(topo->hw, type), used = 0;
	int last =
		hwloc_bitmap_last(hwloc_topology_get_topology_cpuset(topo->hw));
	struct ss_core *cores = calloc((size_t)(n > 0 ? n : 1), sizeof(*cores));
	int *rank_of = malloc((size_t)(last >= 0 ? last + 1 : 1) * sizeof(int));

	if (!cores || !rank_of) {
		free(cores);
		free(rank_of);
		return NULL;
	}
	/* each PU's nearest node, nodes being in nearest-first order */
	for (int i = 0; i <= last; i++)
		rank_of[i] = -1;
	for (int k = n_nodes - 1; k >= 0; k--) {
		unsigned id;

		hwloc_bitmap_foreach_begin(id, nodes[k].obj->cpuset)
		{
			if ((int)id <= last)
				rank_of[id] = k;
		}
		hwloc_bitmap_foreach_end();
	}
	for (int i = 0; i < n; i++) {
		hwloc_obj_t obj =
			hwloc_get_obj_by_type(topo->hw, type, (unsigned)i);
		const int *pus = m->pus + m->first[i];
		int n_pus = m->first[i + 1] - m->first[i], k = -1;

		for (int j = 0; j < n_pus; j++)
			if (rank_of[pus[j]] >= 0 &&
			    (k < 0 || rank_of[pus[j]] < k))
				k = rank_of[pus[j]];
		if (k < 0)
			continue;
		cores[used].obj = obj;
		cores[used].numa = (int)nodes[k].obj->os_index;
		cores[used].rank = k;
		cores[used].n_pus = n_pus;
		cores[used].pus = pus;
		used++;
	}
	free(rank_of);
	qsort(cores, (size_t)used, sizeof(*cores), ss_core_cmp);
	*count = used;
	return cores;
}

/* OS index of the @nth PU of @core, or -1 when it has fewer. */
static int ss_core_pu(const struct ss_core *core, int nth)
{
	return nth < core->n_pus ? core->pus[nth] : -1;
}

static void ss_slot_set(struct ss_plan_slot *slot, enum ss_role role,
			int trainer, const struct ss_core *core, int pu)
{
	slot->role = role;
	slot->trainer = trainer;
	slot->core = (int)core->obj->logical_index;
	slot->numa = core->numa;
	slot->pu = pu;
}

/*
 * Trainers go one per core, in nearest-first order, skipping the shadow's
 * core when it has one of its own.  Past one per core (--oversubscribe)
 * they take the cores' second PUs (SMT siblings), then wrap around.
 */
static void ss_place_trainers(struct ss_plan *plan, const struct ss_core *cores,
			      int n_cores, int shadow_core)
{
	int t = 0, max_pus = 1;

	for (int c = 0; c < n_cores; c++)
		if (cores[c].n_pus > max_pus)
			max_pus = cores[c].n_pus;
	while (t < plan->trainers) {
		int before = t;

		for (int nth = 0; nth < max_pus && t < plan->trainers; nth++) {
			for (int c = 0; c < n_cores && t < plan->trainers;
			     c++) {
				int pu = ss_core_pu(&cores[c], nth);

				if (c == shadow_core && plan->shadow_own_core)
					continue;
				if (pu < 0)
					continue;
				ss_slot_set(&plan->slots[1 + t],
					    SS_ROLE_TRAINER, t, &cores[c], pu);
				t++;
			}
		}
		if (t == before)
			break; /* no core has a PU: cannot happen with hwloc */
	}
}

/* Slots whose core holds another slot too; @n_cores bounds the cores'
 * logical indices. */
static int ss_mark_shared_cores(struct ss_plan *plan, int n_cores)
{
	int first = plan->shadow ? 0 : 1; /* slots[0] is unused without one */
	int *on = calloc((size_t)n_cores, sizeof(int));

	if (!on)
		return -ENOMEM;
	for (int i = first; i < plan->n_slots; i++)
		on[plan->slots[i].core]++;
	for (int i = first; i < plan->n_slots; i++)
		plan->slots[i].shares_core = on[plan->slots[i].core] > 1;
	free(on);
	return 0;
}

static void ss_plan_note(struct ss_plan *plan, const struct ss__nic *nic)
{
	if (nic->numa)
		snprintf(plan->note, sizeof(plan->note),
			 "%s on NUMA node %d, next to %s",
			 plan->shadow ? "shadow thread and replica" : "replica",
			 plan->replica_numa, nic->name);
	else
		snprintf(plan->note, sizeof(plan->note),
			 "%s: falling back to the first NUMA node (%d)",
			 nic->why, plan->replica_numa);
}

void ss_plan_request_init_size(struct ss_plan_request *request, size_t size)
{
	struct ss_plan_request r = { .size = sizeof(r) };

	ss__options_out(request, size, &r, sizeof(r));
}

int ss_topo_plan(struct ss_topo *topo, const struct ss_plan_request *given,
		 struct ss_plan **out)
{
	struct ss_plan_request copy;
	const struct ss_plan_request *request = &copy;
	struct ss_node *nodes = NULL;
	struct ss_core *cores = NULL;
	struct ss_plan *plan = NULL;
	struct ss_pu_map pus = { 0 };
	struct ss__nic nic;
	hwloc_obj_t home;
	int n_nodes = 0, n_cores = 0, n_types, trainers, shadow_core = 0, rc;

	*out = NULL;
	ss_plan_request_init(&copy);
	rc = ss__options_in(&copy, sizeof(copy), given, sizeof(copy),
			    "ss_plan_request");
	if (rc < 0)
		return rc;
	if (request->trainers < 0)
		return ss_error_set(SS_EUSAGE, "must not be negative",
				    "give 0 for one per free core",
				    "trainers %d", request->trainers);
	rc = ss__topo_find_nic(topo, request->device, &nic);
	if (rc < 0)
		return rc;
	home = nic.numa ?
		       nic.numa :
		       hwloc_get_obj_by_type(topo->hw, HWLOC_OBJ_NUMANODE, 0);
	nodes = ss_nodes_by_distance(topo, home, &n_nodes);
	if (!nodes)
		return ss_error_set(-ENOMEM, NULL, NULL, "placement plan");
	n_types = hwloc_get_nbobjs_by_type(topo->hw, ss_core_type(topo));
	if (ss_pu_map_build(topo, ss_core_type(topo), n_types, &pus) == 0)
		cores = ss_cores_by_distance(topo, nodes, n_nodes, &pus,
					     &n_cores);
	if (!cores) {
		rc = ss_error_set(-ENOMEM, NULL, NULL, "placement plan");
		goto out_nodes;
	}
	if (n_cores == 0) {
		rc = ss_error_set(SS_ETOPO, "it has no usable core", NULL,
				  "topology '%s'", topo->source);
		goto out_cores;
	}

	trainers = request->trainers		      ? request->trainers :
		   request->no_shadow || n_cores == 1 ? n_cores :
							n_cores - 1;
	if (trainers > n_cores && !request->oversubscribe) {
		char hint[160];

		snprintf(hint, sizeof(hint),
			 "use %d trainer%s or fewer (train --threads, topo "
			 "--trainers), or --oversubscribe to share cores",
			 n_cores, n_cores == 1 ? "" : "s");
		rc = ss_error_set(SS_ENOCORES, "more trainers than cores", hint,
				  "%d trainers on %d core%s", trainers, n_cores,
				  n_cores == 1 ? "" : "s");
		goto out_cores;
	}

	plan = calloc(1, sizeof(*plan) + (size_t)(trainers + 1) *
						 sizeof(plan->slots[0]));
	if (!plan) {
		rc = ss_error_set(-ENOMEM, NULL, NULL, "placement plan");
		goto out_cores;
	}
	plan->trainers = trainers;
	plan->n_slots = trainers + 1;
	plan->replica_numa = (int)nodes[0].obj->os_index;
	plan->nic_local = nic.numa != NULL;
	plan->shadow = !request->no_shadow;
	plan->shadow_own_core = plan->shadow && trainers < n_cores;
	plan->oversubscribed = trainers > n_cores - plan->shadow_own_core;
	snprintf(plan->device, sizeof(plan->device), "%s", nic.name);
	ss_plan_note(plan, &nic);

	/*
	 * The shadow thread takes the last core of the nearest node that has
	 * cores, so trainers number from its first core.  Sharing a core, it
	 * takes the core's last PU: an SMT sibling where there is one.
	 */
	while (shadow_core + 1 < n_cores &&
	       cores[shadow_core + 1].rank == cores[0].rank)
		shadow_core++;
	ss_slot_set(&plan->slots[0], SS_ROLE_SHADOW, -1, &cores[shadow_core],
		    ss_core_pu(&cores[shadow_core],
			       plan->shadow_own_core ?
				       0 :
				       cores[shadow_core].n_pus - 1));
	ss_place_trainers(plan, cores, n_cores, shadow_core);
	if (ss_mark_shared_cores(plan, n_types) < 0) {
		free(plan);
		rc = ss_error_set(-ENOMEM, NULL, NULL, "placement plan");
		goto out_cores;
	}
	*out = plan;
	rc = 0;

out_cores:
	free(cores);
	ss_pu_map_free(&pus);
out_nodes:
	free(nodes);
	return rc;
}

void ss_plan_free(struct ss_plan **plan)
{
	if (!plan)
		return;
	free(*plan);
	*plan = NULL;
}
