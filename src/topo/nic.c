// SPDX-License-Identifier: BSD-2-Clause
/* Where the RDMA NIC sits: its PCI device's NUMA node, if it has one. */
#include <string.h>

#include <hwloc/openfabrics-verbs.h>

#include "topo_internal.h"

static bool ss_nic_has_pci_parent(hwloc_obj_t osdev)
{
	for (hwloc_obj_t obj = osdev->parent; obj; obj = obj->parent)
		if (obj->type == HWLOC_OBJ_PCI_DEVICE)
			return true;
	return false;
}

/* The first NUMA node whose CPUs intersect @cpuset, or NULL. */
static hwloc_obj_t ss_nic_numa_of_cpuset(struct ss_topo *topo,
					 hwloc_const_cpuset_t cpuset)
{
	hwloc_obj_t node = NULL;

	if (hwloc_bitmap_isequal(
		    cpuset, hwloc_topology_get_complete_cpuset(topo->hw)) &&
	    hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_NUMANODE) > 1)
		return NULL; /* "everywhere" says nothing */
	while ((node = hwloc_get_next_obj_by_type(topo->hw, HWLOC_OBJ_NUMANODE,
						  node)))
		if (hwloc_bitmap_intersects(node->cpuset, cpuset))
			return node;
	return NULL;
}

static void ss_nic_from_osdev(struct ss_topo *topo, hwloc_obj_t osdev,
			      struct ss__nic *nic)
{
	hwloc_obj_t anc;

	if (!ss_nic_has_pci_parent(osdev)) {
		snprintf(nic->why, sizeof(nic->why),
			 "%s has no PCI device (soft-RoCE or virtual)",
			 nic->name);
		return;
	}
	anc = hwloc_get_non_io_ancestor_obj(topo->hw, osdev);
	nic->numa = anc ? ss_nic_numa_of_cpuset(topo, anc->cpuset) : NULL;
	if (!nic->numa)
		snprintf(nic->why, sizeof(nic->why),
			 "the locality of %s is not known", nic->name);
}

/* Without hwloc's view of it, ask the kernel where the device sits. */
static void ss_nic_from_sysfs(struct ss_topo *topo, struct ibv_device *dev,
			      struct ss__nic *nic)
{
	hwloc_bitmap_t set = hwloc_bitmap_alloc();

	if (set && hwloc_ibv_get_device_cpuset(topo->hw, dev, set) == 0 &&
	    !hwloc_bitmap_isequal(set,
				  hwloc_topology_get_complete_cpuset(topo->hw)))
		nic->numa = ss_nic_numa_of_cpuset(topo, set);
	if (!nic->numa)
		snprintf(nic->why, sizeof(nic->why),
			 "%s has no PCI locality (soft-RoCE or virtual)",
			 nic->name);
	hwloc_bitmap_free(set);
}

/* Append the OpenFabrics devices @topo knows of to @list, for a hint. */
static void ss_nic_list_osdevs(struct ss_topo *topo, char *list, size_t size)
{
	hwloc_obj_t osdev = NULL;
	size_t len = strlen(list);

	while ((osdev = hwloc_get_next_osdev(topo->hw, osdev)))
		if (osdev->attr->osdev.type == HWLOC_OBJ_OSDEV_OPENFABRICS &&
		    len < size)
			len += (size_t)snprintf(list + len, size - len, " %s",
						osdev->name);
}

int ss__topo_find_nic(struct ss_topo *topo, const char *device,
		      struct ss__nic *nic)
{
	struct ibv_device **devs = NULL, *dev = NULL;
	hwloc_obj_t osdev = NULL;
	char list[160] = "devices found:";
	int n = 0;

	memset(nic, 0, sizeof(*nic));
	if (device && *device) {
		osdev = hwloc_ibv_get_device_osdev_by_name(topo->hw, device);
	} else {
		while ((osdev = hwloc_get_next_osdev(topo->hw, osdev)))
			if (osdev->attr->osdev.type ==
			    HWLOC_OBJ_OSDEV_OPENFABRICS)
				break;
	}
	if (osdev) {
		snprintf(nic->name, sizeof(nic->name), "%s", osdev->name);
		ss_nic_from_osdev(topo, osdev, nic);
		return 0;
	}

	/* hwloc hides virtual devices such as rxe; verbs still lists them. */
	if (topo->this_machine)
		devs = ibv_get_device_list(&n);
	for (int i = 0; i < n && !dev; i++)
		if (!device || !*device ||
		    strcmp(ibv_get_device_name(devs[i]), device) == 0)
			dev = devs[i];
	if (dev) {
		snprintf(nic->name, sizeof(nic->name), "%s",
			 ibv_get_device_name(dev));
		ss_nic_from_sysfs(topo, dev, nic);
	} else if (device && *device) {
		for (int i = 0; i < n; i++)
			if (strlen(list) < sizeof(list))
				snprintf(list + strlen(list),
					 sizeof(list) - strlen(list), " %s",
					 ibv_get_device_name(devs[i]));
		ss_nic_list_osdevs(topo, list, sizeof(list));
		if (strcmp(list, "devices found:") == 0)
			snprintf(
				list, sizeof(list),
				"no RDMA device found; `ibv_devices` lists them");
	} else {
		snprintf(nic->why, sizeof(nic->why), "no RDMA device found");
	}
	if (devs)
		ibv_free_device_list(devs);
	if (!dev && device && *device)
		return ss_error_set(SS_ENODEVICE, NULL, list, "device '%s'",
				    device);
	return 0;
}
