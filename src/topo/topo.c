// SPDX-License-Identifier: BSD-2-Clause
/* Discovering a topology: this machine, an XML file, or a synthetic one. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "topo_internal.h"

static const char ss_topo_hint[] =
	"give a synthetic description such as 'package:2 core:16 pu:2', or an XML file written by `lstopo --of xml FILE`";

/*
 * hwloc reads XML with its own small parser, or with libxml2 where its
 * plugin is installed (libhwloc-plugins); the first refuses a bad file at
 * load, the second already at hwloc_topology_set_xml.  Both give this
 * error, and the hint says how to see the parser's own message.
 */
static const char ss_topo_xml_why[] = "not a readable hwloc XML file";
static const char ss_topo_xml_hint[] =
	"HWLOC_XML_VERBOSE=1 prints the XML parser's message; give an XML file written by `lstopo --of xml FILE`, or a synthetic description such as 'package:2 core:16 pu:2'";

/* A source names a file when it ends in .xml or when such a file exists. */
static bool ss_topo_source_is_file(const char *source)
{
	size_t len = strlen(source);
	struct stat st;

	return (len > 4 && strcmp(source + len - 4, ".xml") == 0) ||
	       stat(source, &st) == 0;
}

static int ss_topo_set_source(struct ss_topo *topo, const char *source)
{
	struct stat st;

	if (!ss_topo_source_is_file(source)) {
		if (hwloc_topology_set_synthetic(topo->hw, source) < 0)
			return ss_error_set(
				SS_ETOPO,
				"not a valid hwloc synthetic description",
				ss_topo_hint, "topology '%s'", source);
		return 0;
	}
	if (stat(source, &st) < 0)
		return ss_error_set(SS_ETOPO, strerror(errno), ss_topo_hint,
				    "topology file '%s'", source);
	if (!S_ISREG(st.st_mode))
		return ss_error_set(SS_ETOPO, "not a regular file",
				    ss_topo_hint, "topology file '%s'", source);
	if (hwloc_topology_set_xml(topo->hw, source) < 0)
		return ss_error_set(SS_ETOPO, ss_topo_xml_why, ss_topo_xml_hint,
				    "topology file '%s'", source);
	topo->xml = true;
	return 0;
}

/*
 * A launcher (Slurm's --cpu-bind, taskset, shadowsync launch) may have given
 * this process part of the machine: plan within it, or the ranks of one
 * machine would all pin their threads to the same cores.  NUMA nodes left
 * without CPUs go (the replica must be near this process's cores); I/O
 * objects move up to what remains, so the NIC is still found.  hwloc
 * unloads the topology when a restriction fails: that is an error.
 */
static int ss_topo_restrict_to_binding(struct ss_topo *topo)
{
	int rc = 0;
	hwloc_bitmap_t set = hwloc_bitmap_alloc();
	hwloc_const_cpuset_t all = hwloc_topology_get_topology_cpuset(topo->hw);

	if (set &&
	    hwloc_get_cpubind(topo->hw, set, HWLOC_CPUBIND_PROCESS) == 0 &&
	    !hwloc_bitmap_iszero(set) && !hwloc_bitmap_isincluded(all, set)) {
		char text[256];

		hwloc_bitmap_list_snprintf(text, sizeof(text), set);
		if (hwloc_topology_restrict(
			    topo->hw, set,
			    HWLOC_RESTRICT_FLAG_REMOVE_CPULESS |
				    HWLOC_RESTRICT_FLAG_ADAPT_IO |
				    HWLOC_RESTRICT_FLAG_ADAPT_MISC) == 0)
			ss_log_info("topo: planning within CPUs %s, this "
				    "process's binding",
				    text);
		else
			rc = ss_error_set(SS_ETOPO, strerror(errno),
					  "run without a CPU binding",
					  "restricting the topology to CPUs %s",
					  text);
	}
	hwloc_bitmap_free(set);
	return rc;
}

int ss_topo_open(struct ss_topo **out, const char *source)
{
	struct ss_topo *topo;
	int rc;

	*out = NULL;
	topo = calloc(1, sizeof(*topo));
	if (!topo)
		return ss_error_set(-ENOMEM, NULL, NULL, "topology");
	if (hwloc_topology_init(&topo->hw) < 0) {
		rc = ss_error_set(-errno, NULL, NULL, "hwloc_topology_init");
		goto err_topo;
	}
	snprintf(topo->source, sizeof(topo->source), "%s",
		 source && *source ? source : "this machine");
	if (source && *source) {
		rc = ss_topo_set_source(topo, source);
		if (rc < 0)
			goto err_hw;
	}
	/* The NIC's place comes from its PCI device and OS device objects. */
	hwloc_topology_set_io_types_filter(topo->hw,
					   HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
	/*
	 * Without hwloc's pci plugin (libhwloc-plugins, on most cluster
	 * nodes): Linux's own backend finds the same PCI devices in sysfs,
	 * bus ids, classes and locality alike.  The plugin adds only their
	 * names, read through libpciaccess, which keeps them in globals
	 * until hwloc unloads the plugin with the last topology; then they
	 * are memory no one can free (LeakSanitizer reports 400 kB from an
	 * "<unknown module>" in every program that closes its topology), and
	 * reading pci.ids took most of a topology's load under TSan.
	 */
	hwloc_topology_set_components(
		topo->hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST, "pci");
	if (hwloc_topology_load(topo->hw) < 0) {
		if (topo->xml)
			rc = ss_error_set(SS_ETOPO, ss_topo_xml_why,
					  ss_topo_xml_hint,
					  "topology file '%s'", topo->source);
		else
			rc = ss_error_set(
				SS_ETOPO,
				source && *source ? "hwloc could not load it" :
						    strerror(errno),
				ss_topo_hint, "topology '%s'", topo->source);
		goto err_hw;
	}
	topo->this_machine = hwloc_topology_is_thissystem(topo->hw);
	if (topo->this_machine && !(source && *source)) {
		rc = ss_topo_restrict_to_binding(topo);
		if (rc < 0)
			goto err_hw;
	}
	*out = topo;
	return 0;

err_hw:
	hwloc_topology_destroy(topo->hw);
err_topo:
	free(topo);
	return rc;
}

void ss_topo_close(struct ss_topo **topo)
{
	if (!topo || !*topo)
		return;
	hwloc_topology_destroy((*topo)->hw);
	free(*topo);
	*topo = NULL;
}

bool ss_topo_is_this_machine(const struct ss_topo *topo)
{
	return topo->this_machine;
}

static int ss_topo_count(const struct ss_topo *topo, hwloc_obj_type_t type)
{
	int n = hwloc_get_nbobjs_by_type(topo->hw, type);

	return n < 0 ? 0 : n;
}

void ss_topo_summarize(const struct ss_topo *topo,
		       struct ss_topo_summary *summary)
{
	summary->packages = ss_topo_count(topo, HWLOC_OBJ_PACKAGE);
	summary->numa_nodes = ss_topo_count(topo, HWLOC_OBJ_NUMANODE);
	summary->cores = ss_topo_count(topo, HWLOC_OBJ_CORE);
	summary->pus = ss_topo_count(topo, HWLOC_OBJ_PU);
}
