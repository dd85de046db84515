// SPDX-License-Identifier: BSD-2-Clause
/*
 * The platforms, written as SimGrid platform files: InfiniBand HDR and
 * NDR, and 100 Gb/s RoCE, as two-level non-blocking fat trees (leaf
 * switches of 32 nodes, 32 spines: full bisection, so a node's own link
 * is what limits it); shm, every rank a process of one machine.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "sim.h"

#define SIM_LEAF 32

/* Link figures: the port's data rate after encoding, and a link's
 * latency (a node-to-node path crosses 2 links through a leaf, 4 through
 * a spine: about 1.3 us on IB, 2.6 us on RoCE, switch hops included). */
static const struct sim_platform sim_platforms[] = {
	{ "hdr", 200e9 / 8, 0.33e-6, false },
	{ "ndr", 400e9 / 8, 0.33e-6, false },
	{ "roce", 100e9 / 8, 0.65e-6, false },
	{ "shm", 1e12, 0.2e-6, true },
};

int sim_platform_by_name(const char *name, struct sim_platform *out)
{
	for (size_t i = 0; i < sizeof(sim_platforms) / sizeof(*sim_platforms);
	     i++)
		if (strcmp(name, sim_platforms[i].name) == 0) {
			*out = sim_platforms[i];
			return 0;
		}
	return -EINVAL;
}

/* One host of @cores for every rank: they share its cores, and their
 * transfers are the poster's copies (node.c), not the link's. */
static void sim_write_shm(FILE *f, const struct sim_cfg *c)
{
	fprintf(f,
		"  <zone id=\"machine\" routing=\"Full\">\n"
		"    <host id=\"machine\" speed=\"1Gf\" core=\"%d\"/>\n"
		"    <link id=\"memory\" bandwidth=\"%.0fBps\" latency=\"%gs\"/>\n"
		"    <route src=\"machine\" dst=\"machine\"><link_ctn id=\"memory\"/></route>\n"
		"  </zone>\n",
		c->cores, c->plat.link_bps, c->plat.link_lat_s);
}

/* SimGrid's FAT_TREE cluster: "levels; down-links per level; up-links per
 * level; parallel links".  Up to 32 nodes one switch; above, N/32 leaves
 * of 32 nodes, each with a link to each of 32 spines. */
static void sim_write_fat_tree(FILE *f, const struct sim_cfg *c)
{
	char topo[64];

	if (c->nodes <= SIM_LEAF)
		snprintf(topo, sizeof(topo), "1;%d;1;1", c->nodes);
	else
		snprintf(topo, sizeof(topo), "2;%d,%d;1,%d;1,1", SIM_LEAF,
			 c->nodes / SIM_LEAF, SIM_LEAF);
	fprintf(f,
		"  <cluster id=\"%s\" prefix=\"node-\" radical=\"0-%d\" suffix=\"\"\n"
		"           speed=\"1Gf\" core=\"%d\" bw=\"%.0fBps\" lat=\"%gs\"\n"
		"           topology=\"FAT_TREE\" topo_parameters=\"%s\"\n"
		"           loopback_bw=\"100GBps\" loopback_lat=\"0\"/>\n",
		c->plat.name, c->nodes - 1, c->cores, c->plat.link_bps,
		c->plat.link_lat_s, topo);
}

int sim_write_platform(const struct sim_cfg *c, const char *path)
{
	FILE *f;

	if (!c->plat.shared_host && c->nodes > SIM_LEAF &&
	    c->nodes % SIM_LEAF != 0) {
		fprintf(stderr,
			"ss-sim: --nodes %d: above %d, a multiple of %d "
			"(whole leaf switches)\n",
			c->nodes, SIM_LEAF, SIM_LEAF);
		return -EINVAL;
	}
	f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "ss-sim: %s: %s\n", path, strerror(errno));
		return -errno;
	}
	fprintf(f,
		"<?xml version='1.0'?>\n"
		"<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
		"<platform version=\"4.1\">\n");
	if (c->plat.shared_host)
		sim_write_shm(f, c);
	else
		sim_write_fat_tree(f, c);
	fprintf(f, "</platform>\n");
	if (fclose(f) != 0) {
		fprintf(stderr, "ss-sim: %s: %s\n", path, strerror(errno));
		return -EIO;
	}
	return 0;
}
