/* SPDX-License-Identifier: BSD-2-Clause */
/* What the files of the topo layer share; not part of the public API. */
#ifndef SS_TOPO_INTERNAL_H
#define SS_TOPO_INTERNAL_H

#include <hwloc.h>

#include "shadowsync/topo.h"

struct ss_topo {
	hwloc_topology_t hw;
	bool this_machine;
	bool xml; /* the source is an XML file */
	char source[256]; /* "this machine", or the synthetic text or file */
};

/* Where the RDMA NIC sits. */
struct ss__nic {
	char name[64]; /* "" when no device was found */
	hwloc_obj_t numa; /* NUMA node next to the NIC; NULL: no locality */
	char why[160]; /* why there is no locality, when numa is NULL */
};

/*
 * ss__topo_find_nic() - locate @device (NULL: the first device found).
 * Returns 0, or SS_ENODEVICE when a named device does not exist.
 */
int ss__topo_find_nic(struct ss_topo *topo, const char *device,
		      struct ss__nic *nic);

#endif /* SS_TOPO_INTERNAL_H */
