// SPDX-License-Identifier: BSD-2-Clause
/* The placement plan on synthetic and XML topologies of other machines. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "shadowsync/shadowsync.h"

#define TOPOLOGY(name) SS_SOURCE_DIR "/tests/topologies/" name

static struct ss_topo *topo;
static struct ss_plan *plan;

static void teardown(void)
{
	ss_plan_free(&plan);
	ss_topo_close(&topo);
}

TestSuite(plan, .fini = teardown);

static void make_plan(const char *source, int trainers, const char *device,
		      bool oversubscribe)
{
	struct ss_plan_request req;
	int rc = ss_topo_open(&topo, source);

	ss_plan_request_init(&req);
	req.trainers = trainers;
	req.device = device;
	req.oversubscribe = oversubscribe;
	cr_assert_eq(rc, 0, "open %s: %s: %s", source, ss_last_error()->what,
		     ss_last_error()->why);
	rc = ss_topo_plan(topo, &req, &plan);
	cr_assert_eq(rc, 0, "plan on %s: %s: %s", source, ss_last_error()->what,
		     ss_last_error()->why);
	cr_assert_eq(plan->n_slots, plan->trainers + 1);
	cr_assert_eq(plan->slots[0].role, SS_ROLE_SHADOW);
}

static const struct ss_plan_slot *trainer(int t)
{
	cr_assert_lt(t, plan->trainers);
	cr_assert_eq(plan->slots[1 + t].role, SS_ROLE_TRAINER);
	cr_assert_eq(plan->slots[1 + t].trainer, t);
	return &plan->slots[1 + t];
}

/* No two trainers share a PU, and none shares the shadow's core. */
static void assert_one_per_core(void)
{
	for (int i = 1; i < plan->n_slots; i++) {
		if (plan->shadow_own_core)
			cr_assert_neq(plan->slots[i].core, plan->slots[0].core,
				      "trainer %d on the shadow's core", i - 1);
		for (int j = i + 1; j < plan->n_slots; j++)
			cr_assert_neq(plan->slots[i].core, plan->slots[j].core,
				      "trainers %d and %d share core %d", i - 1,
				      j - 1, plan->slots[i].core);
	}
}

Test(plan, this_machine_shape_leaves_a_core_to_the_shadow)
{
	make_plan("numa:1 core:2 pu:1", 0, NULL, false);
	cr_assert_eq(plan->trainers, 1);
	cr_assert(plan->shadow_own_core);
	cr_assert_not(plan->nic_local);
	cr_assert_eq(plan->slots[0].core, 1);
	cr_assert_eq(trainer(0)->core, 0);
	cr_assert_eq(plan->replica_numa, 0);
	cr_assert(strstr(plan->note, "no RDMA device"), "note: %s", plan->note);
	cr_assert_not(plan->slots[0].shares_core);
}

/* No shadow thread (train --sync none, or the foreground): every core
 * trains, and none is marked shared. */
Test(plan, without_a_shadow_every_core_trains)
{
	struct ss_plan_request req;

	ss_plan_request_init(&req);
	req.no_shadow = true;
	cr_assert_eq(ss_topo_open(&topo, "numa:1 core:4 pu:2"), 0);
	cr_assert_eq(ss_topo_plan(topo, &req, &plan), 0);
	cr_assert_eq(plan->trainers, 4);
	cr_assert_not(plan->shadow);
	cr_assert_not(plan->shadow_own_core);
	cr_assert_not(plan->oversubscribed);
	for (int t = 0; t < 4; t++) {
		cr_assert_eq(trainer(t)->core, t);
		cr_assert_not(trainer(t)->shares_core, "trainer %d", t);
	}
}

Test(plan, as_many_trainers_as_cores_shadow_shares)
{
	make_plan("numa:1 core:2 pu:1", 2, NULL, false);
	cr_assert_not(plan->shadow_own_core);
	cr_assert_not(plan->oversubscribed);
	assert_one_per_core();
	cr_assert(plan->slots[0].shares_core);
	cr_assert_eq(plan->slots[0].core, trainer(1)->core);
	cr_assert(trainer(1)->shares_core);
	cr_assert_not(trainer(0)->shares_core);
}

Test(plan, more_trainers_than_cores_refused)
{
	struct ss_plan_request req;

	ss_plan_request_init(&req);
	req.trainers = 3;
	cr_assert_eq(ss_topo_open(&topo, "numa:1 core:2 pu:1"), 0);
	cr_assert_eq(ss_topo_plan(topo, &req, &plan), SS_ENOCORES);
	cr_assert_null(plan);
	cr_assert(strstr(ss_last_error()->what, "3 trainers on 2 cores"),
		  "what: %s", ss_last_error()->what);
	cr_assert(strstr(ss_last_error()->hint, "--oversubscribe"), "hint: %s",
		  ss_last_error()->hint);
}

Test(plan, oversubscribe_wraps_around_cores)
{
	make_plan("numa:1 core:2 pu:1", 5, NULL, true);
	cr_assert(plan->oversubscribed);
	for (int t = 0; t < 5; t++)
		cr_assert_eq(trainer(t)->core, t % 2, "trainer %d on core %d",
			     t, trainer(t)->core);
}

/*
 * A large machine, a trainer on every PU but one: each trainer on a PU of
 * its own, every slot sharing its core, the first PU of each core before
 * any second, the shadow on the last PU of its core.  (The plan is built
 * in one pass over the PUs; asking hwloc for each core's PUs took minutes
 * at 32768 PUs: docs/perf.md.)
 */
Test(plan, every_pu_of_a_large_machine_once)
{
	static bool used[2048];
	int n = 2048;

	make_plan("package:4 numa:2 core:64 pu:4", n - 1, NULL, true);
	cr_assert_eq(plan->trainers, n - 1);
	for (int t = 0; t < plan->trainers; t++) {
		int pu = trainer(t)->pu;

		cr_assert(pu >= 0 && pu < n, "trainer %d on PU %d", t, pu);
		cr_assert(!used[pu], "PU %d taken twice", pu);
		used[pu] = true;
		cr_assert(trainer(t)->shares_core, "trainer %d", t);
	}
	cr_assert(plan->slots[0].shares_core);
	cr_assert_eq(plan->slots[0].pu % 4, 3, "shadow on PU %d",
		     plan->slots[0].pu);
	/* 512 trainers on their cores' first PUs, then the second PUs */
	for (int t = 0; t < 512; t++)
		cr_assert_eq(trainer(t)->pu % 4, 0, "trainer %d on PU %d", t,
			     trainer(t)->pu);
	cr_assert_eq(trainer(512)->pu % 4, 1, "PU %d", trainer(512)->pu);
}

Test(plan, negative_trainers_refused)
{
	struct ss_plan_request req;

	ss_plan_request_init(&req);
	req.trainers = -1;
	cr_assert_eq(ss_topo_open(&topo, "numa:1 core:2 pu:1"), 0);
	cr_assert_eq(ss_topo_plan(topo, &req, &plan), SS_EUSAGE);
}

Test(plan, two_sockets_nic_on_socket1)
{
	make_plan(TOPOLOGY("two-socket-nic1.xml"), 0, NULL, false);
	cr_assert_str_eq(plan->device, "mlx5_0");
	cr_assert(plan->nic_local);
	cr_assert_eq(plan->replica_numa, 1);
	cr_assert_eq(plan->trainers, 31);
	cr_assert(plan->shadow_own_core);
	cr_assert_eq(plan->slots[0].numa, 1);
	cr_assert_eq(plan->slots[0].core, 31);
	/* The NIC's socket fills first, then the other. */
	for (int t = 0; t < 15; t++) {
		cr_assert_eq(trainer(t)->numa, 1, "trainer %d", t);
		cr_assert_eq(trainer(t)->core, 16 + t);
	}
	for (int t = 15; t < 31; t++) {
		cr_assert_eq(trainer(t)->numa, 0, "trainer %d", t);
		cr_assert_eq(trainer(t)->core, t - 15);
	}
	assert_one_per_core();
}

Test(plan, few_trainers_stay_on_the_nic_socket)
{
	make_plan(TOPOLOGY("two-socket-nic1.xml"), 8, NULL, false);
	for (int t = 0; t < 8; t++)
		cr_assert_eq(trainer(t)->numa, 1, "trainer %d", t);
	assert_one_per_core();
}

Test(plan, smt_on_one_trainer_per_physical_core)
{
	make_plan(TOPOLOGY("two-socket-smt-nic1.xml"), 0, NULL, false);
	cr_assert_eq(plan->trainers, 31);
	assert_one_per_core();
	/* Each trainer gets the first PU of its core: even PUs here. */
	for (int t = 0; t < 31; t++)
		cr_assert_eq(trainer(t)->pu % 2, 0, "trainer %d on PU %d", t,
			     trainer(t)->pu);
}

Test(plan, smt_on_shared_shadow_takes_the_sibling)
{
	make_plan(TOPOLOGY("two-socket-smt-nic1.xml"), 32, NULL, false);
	cr_assert_not(plan->shadow_own_core);
	cr_assert_not(plan->oversubscribed);
	for (int t = 0; t < 32; t++) {
		if (trainer(t)->core != plan->slots[0].core)
			continue;
		cr_assert_neq(trainer(t)->pu, plan->slots[0].pu,
			      "shadow and trainer %d on one PU", t);
	}
}

Test(plan, smt_on_oversubscribed_uses_siblings_first)
{
	make_plan(TOPOLOGY("two-socket-smt-nic1.xml"), 40, NULL, true);
	cr_assert(plan->oversubscribed);
	/* Trainers 32.. go onto the second PU of the NIC socket's cores. */
	cr_assert_eq(trainer(32)->core, 16);
	cr_assert_eq(trainer(32)->pu, trainer(0)->pu + 1);
	cr_assert_eq(trainer(32)->numa, 1);
}

Test(plan, smt_off_synthetic_without_nic_falls_back)
{
	make_plan("package:2 numa:1 core:16 pu:1", 4, NULL, false);
	cr_assert_not(plan->nic_local);
	cr_assert_eq(plan->replica_numa, 0);
	for (int t = 0; t < 4; t++)
		cr_assert_eq(trainer(t)->numa, 0);
	cr_assert_str_eq(plan->device, "");
}

Test(plan, four_numa_nodes_follow_the_distance_matrix)
{
	static const int order[] = { 2, 3, 0, 1 };

	make_plan(TOPOLOGY("four-numa-slit-nic2.xml"), 0, NULL, false);
	cr_assert_eq(plan->replica_numa, 2);
	cr_assert_eq(plan->slots[0].numa, 2);
	cr_assert_eq(plan->trainers, 15);
	/* 3 trainers beside the shadow on node 2, then 4 per node. */
	for (int t = 0; t < 15; t++) {
		int expect = t < 3 ? 2 : order[1 + (t - 3) / 4];

		cr_assert_eq(trainer(t)->numa, expect,
			     "trainer %d on node %d, expected %d", t,
			     trainer(t)->numa, expect);
	}
}

Test(plan, four_numa_nodes_without_matrix_use_the_tree)
{
	make_plan(TOPOLOGY("four-numa-two-nics.xml"), 11, "mlx5_0", false);
	cr_assert_eq(plan->replica_numa, 2);
	/* Node 3 shares the NIC's package, so it comes before 0 and 1. */
	for (int t = 0; t < 3; t++)
		cr_assert_eq(trainer(t)->numa, 2);
	for (int t = 3; t < 7; t++)
		cr_assert_eq(trainer(t)->numa, 3);
	for (int t = 7; t < 11; t++)
		cr_assert_eq(trainer(t)->numa, 0);
}

Test(plan, device_option_selects_the_nic)
{
	make_plan(TOPOLOGY("four-numa-two-nics.xml"), 2, "mlx5_1", false);
	cr_assert_str_eq(plan->device, "mlx5_1");
	cr_assert_eq(plan->replica_numa, 0);
	cr_assert_eq(plan->slots[0].numa, 0);
}

Test(plan, unknown_device_lists_the_known_ones)
{
	struct ss_plan_request req;

	ss_plan_request_init(&req);
	req.device = "mlx5_9";
	cr_assert_eq(ss_topo_open(&topo, TOPOLOGY("four-numa-two-nics.xml")),
		     0);
	cr_assert_eq(ss_topo_plan(topo, &req, &plan), SS_ENODEVICE);
	cr_assert(strstr(ss_last_error()->what, "mlx5_9"));
	cr_assert(strstr(ss_last_error()->hint, "mlx5_0"), "hint: %s",
		  ss_last_error()->hint);
	cr_assert(strstr(ss_last_error()->hint, "mlx5_1"), "hint: %s",
		  ss_last_error()->hint);
}

Test(plan, nic_without_pci_falls_back_and_says_so)
{
	make_plan(TOPOLOGY("two-socket-rxe.xml"), 0, NULL, false);
	cr_assert_str_eq(plan->device, "rxe0");
	cr_assert_not(plan->nic_local);
	cr_assert_eq(plan->replica_numa, 0);
	cr_assert(strstr(plan->note, "rxe0 has no PCI device"), "note: %s",
		  plan->note);
}

Test(plan, summary_counts)
{
	struct ss_topo_summary sum;

	cr_assert_eq(ss_topo_open(&topo, TOPOLOGY("two-socket-smt-nic1.xml")),
		     0);
	ss_topo_summarize(topo, &sum);
	cr_assert_eq(sum.packages, 2);
	cr_assert_eq(sum.numa_nodes, 2);
	cr_assert_eq(sum.cores, 32);
	cr_assert_eq(sum.pus, 64);
	cr_assert_not(ss_topo_is_this_machine(topo));
}

/* Bad --topology input: each gives SS_ETOPO and says what was wrong. */
static void assert_bad_source(const char *source, const char *why)
{
	cr_assert_eq(ss_topo_open(&topo, source), SS_ETOPO, "source %s",
		     source);
	cr_assert_null(topo);
	cr_assert(strstr(ss_last_error()->what, source), "what: %s",
		  ss_last_error()->what);
	cr_assert(strstr(ss_last_error()->why, why), "why: %s",
		  ss_last_error()->why);
	cr_assert(strstr(ss_last_error()->hint, "lstopo"), "hint: %s",
		  ss_last_error()->hint);
}

Test(plan, bad_synthetic_description)
{
	assert_bad_source("socket:two", "synthetic");
}

Test(plan, missing_xml_file)
{
	assert_bad_source("/nonexistent/machine.xml", "No such file");
}

/*
 * hwloc's own XML parser refuses a bad file at load, the libxml2 one
 * (libhwloc-plugins) already when it is given: the error is the same.
 * Where the plugin is missing hwloc falls back to its own parser.
 */
Test(plan, broken_xml_file_own_parser)
{
	cr_assert_eq(setenv("HWLOC_LIBXML_IMPORT", "0", 1), 0);
	assert_bad_source(TOPOLOGY("broken.xml"),
			  "not a readable hwloc XML file");
	cr_assert(strstr(ss_last_error()->hint, "HWLOC_XML_VERBOSE=1"), "%s",
		  ss_last_error()->hint);
}

Test(plan, broken_xml_file_libxml2_where_installed)
{
	cr_assert_eq(setenv("HWLOC_LIBXML_IMPORT", "1", 1), 0);
	assert_bad_source(TOPOLOGY("broken.xml"),
			  "not a readable hwloc XML file");
}

Test(plan, directory_is_not_a_topology)
{
	assert_bad_source(SS_SOURCE_DIR "/tests/topologies", "regular file");
}

/* Runs the command and returns its exit status, output in @out. */
static int run_command(const char *args, char *out, size_t size)
{
	char cmd[512];
	FILE *p;
	size_t n;

	snprintf(cmd, sizeof(cmd), "%s %s 2>&1", SS_COMMAND, args);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, size - 1, p);
	out[n] = '\0';
	return WEXITSTATUS(pclose(p));
}

Test(plan, command_prints_the_table)
{
	char out[8192];

	cr_assert_eq(run_command("topo --topology " TOPOLOGY(
					 "two-socket-nic1.xml") " --trainers 4",
				 out, sizeof(out)),
		     0, "%s", out);
	cr_assert(strstr(out, "replica    NUMA node 1"), "%s", out);
	cr_assert(strstr(out, "trainer 3"), "%s", out);
	cr_assert(strstr(out, "shadow"), "%s", out);
}

Test(plan, command_prints_json)
{
	char out[8192];

	cr_assert_eq(run_command("topo --json --topology " TOPOLOGY(
					 "two-socket-nic1.xml") " -t 2",
				 out, sizeof(out)),
		     0, "%s", out);
	cr_assert(strstr(out, "\"replica_numa\":1"), "%s", out);
	cr_assert(strstr(out, "\"device\":\"mlx5_0\""), "%s", out);
	cr_assert(strstr(out, "\"role\":\"shadow\""), "%s", out);
}

Test(plan, command_rejects_bad_topology_with_a_hint)
{
	char out[4096];

	cr_assert_eq(run_command("topo --topology 'core:x'", out, sizeof(out)),
		     1, "%s", out);
	cr_assert(strstr(out, "error: topology 'core:x'"), "%s", out);
	cr_assert(strstr(out, "hint:"), "%s", out);
}

Test(plan, command_rejects_bad_options)
{
	char out[4096];

	cr_assert_eq(run_command("topo --trainers 0", out, sizeof(out)), 2,
		     "%s", out);
	cr_assert(strstr(out, "--trainers '0': out of range"), "%s", out);
	cr_assert_eq(run_command("topo --frobnicate", out, sizeof(out)), 2,
		     "%s", out);
	cr_assert_eq(run_command("topo --help", out, sizeof(out)), 0);
	cr_assert(strstr(out, "--oversubscribe"), "%s", out);
}
