// SPDX-License-Identifier: BSD-2-Clause
/* shadowsync topo: print the placement plan as a table or as JSON. */
#include <getopt.h>
#include <stdlib.h>
#include <string.h>

#include "command.h"
#include "shadowsync/shadowsync.h"

static const char ss_topo_prog[] = "shadowsync topo";

static void ss_topo_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowsync topo [--trainers N] [--device NAME] [--topology SYNTHETIC|FILE.xml]\n"
		"                       [--oversubscribe] [--json] [--verbose]\n"
		"\n"
		"Print where the shadow thread, each trainer, the replica's memory and\n"
		"the sharded tables' applier go.\n"
		"\n"
		"  -t, --trainers N     trainer threads (default: one per core, less the shadow's)\n"
		"  -d, --device NAME    RDMA device to place next to (default: $SS_DEVICE, else\n"
		"                       the first one found)\n"
		"  -T, --topology SRC   plan for another machine: an hwloc synthetic description\n"
		"                       such as 'package:2 core:16 pu:2', or an XML file from\n"
		"                       `lstopo --of xml FILE` (default: this machine)\n"
		"  -o, --oversubscribe  allow more trainers than cores\n"
		"  -j, --json           print JSON instead of a table\n"
		"  -v, --verbose        log at debug level (same as SS_LOG=debug)\n"
		"  -h, --help           print this help\n");
}

static const char *ss_plural(int n, const char *one, const char *many)
{
	return n == 1 ? one : many;
}

static void ss_topo_print_table(const char *source,
				const struct ss_topo_summary *sum,
				const struct ss_plan *plan)
{
	printf("topology   %s: %d %s, %d NUMA %s, %d %s, %d %s\n", source,
	       sum->packages, ss_plural(sum->packages, "package", "packages"),
	       sum->numa_nodes, ss_plural(sum->numa_nodes, "node", "nodes"),
	       sum->cores, ss_plural(sum->cores, "core", "cores"), sum->pus,
	       ss_plural(sum->pus, "PU", "PUs"));
	printf("device     %s\n", plan->device[0] ? plan->device : "none");
	printf("placement  %s\n", plan->note);
	printf("replica    NUMA node %d (and a rank's shard of sharded tables)\n",
	       plan->replica_numa);
	if (plan->n_slots > 0)
		printf("applier    the table proxy thread (sharded tables), with "
		       "the shadow thread on PU %d\n",
		       plan->slots[0].pu);
	printf("trainers   %d; shadow thread %s%s\n", plan->trainers,
	       plan->shadow_own_core ? "on a core of its own" :
				       "shares a core with a trainer",
	       plan->oversubscribed ? "; cores oversubscribed" : "");
	printf("\n%-12s %5s %5s %5s  %s\n", "thread", "core", "PU", "NUMA",
	       "shares core");
	for (int i = 0; i < plan->n_slots; i++) {
		const struct ss_plan_slot *s = &plan->slots[i];
		char name[32];

		if (s->role == SS_ROLE_SHADOW)
			snprintf(name, sizeof(name), "shadow");
		else
			snprintf(name, sizeof(name), "trainer %d", s->trainer);
		printf("%-12s %5d %5d %5d  %s\n", name, s->core, s->pu, s->numa,
		       s->shares_core ? "yes" : "no");
	}
}

static void ss_topo_print_json(const char *source,
			       const struct ss_topo_summary *sum,
			       const struct ss_plan *plan)
{
	printf("{\"topology\":");
	ss_json_string(stdout, source);
	printf(",\"packages\":%d,\"numa_nodes\":%d,\"cores\":%d,\"pus\":%d,",
	       sum->packages, sum->numa_nodes, sum->cores, sum->pus);
	printf("\"device\":");
	ss_json_string(stdout, plan->device[0] ? plan->device : NULL);
	printf(",\"nic_local\":%s,\"note\":",
	       plan->nic_local ? "true" : "false");
	ss_json_string(stdout, plan->note);
	printf(",\"replica_numa\":%d,\"applier_pu\":%d,\"trainers\":%d,"
	       "\"shadow_own_core\":%s,\"oversubscribed\":%s,\"threads\":[",
	       plan->replica_numa, plan->n_slots > 0 ? plan->slots[0].pu : -1,
	       plan->trainers, plan->shadow_own_core ? "true" : "false",
	       plan->oversubscribed ? "true" : "false");
	for (int i = 0; i < plan->n_slots; i++) {
		const struct ss_plan_slot *s = &plan->slots[i];

		printf("%s{\"role\":\"%s\",\"trainer\":", i ? "," : "",
		       s->role == SS_ROLE_SHADOW ? "shadow" : "trainer");
		if (s->role == SS_ROLE_SHADOW)
			printf("null");
		else
			printf("%d", s->trainer);
		printf(",\"core\":%d,\"pu\":%d,\"numa\":%d,\"shares_core\":%s}",
		       s->core, s->pu, s->numa,
		       s->shares_core ? "true" : "false");
	}
	printf("]}\n");
}

int ss_cmd_topo(int argc, char **argv)
{
	static const struct option options[] = {
		{ "trainers", required_argument, NULL, 't' },
		{ "device", required_argument, NULL, 'd' },
		{ "topology", required_argument, NULL, 'T' },
		{ "oversubscribe", no_argument, NULL, 'o' },
		{ "json", no_argument, NULL, 'j' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct ss_plan_request request;
	struct ss_topo_summary summary;
	struct ss_topo *topo = NULL;
	struct ss_plan *plan = NULL;
	const char *source = NULL;
	bool json = false;
	long trainers;
	int opt, rc;

	ss_plan_request_init(&request);
	request.device = getenv("SS_DEVICE");
	while ((opt = getopt_long(argc, argv, "t:d:T:ojvh", options, NULL)) !=
	       -1) {
		switch (opt) {
		case 't':
			rc = ss_parse_long("--trainers", optarg, 1, 4096,
					   &trainers);
			if (rc < 0)
				return ss_cmd_fail(ss_topo_prog, rc);
			request.trainers = (int)trainers;
			break;
		case 'd':
			request.device = optarg;
			break;
		case 'T':
			source = optarg;
			break;
		case 'o':
			request.oversubscribe = true;
			break;
		case 'j':
			json = true;
			break;
		case 'v':
			ss_log_set_level(SS_LOG_DEBUG);
			break;
		case 'h':
			ss_topo_usage(stdout);
			return SS_EXIT_OK;
		default:
			return ss_cmd_fail(
				ss_topo_prog,
				ss_cmd_unknown_option("topo", argv, options));
		}
	}
	if (optind < argc) {
		fprintf(stderr, "%s: error: unexpected argument '%s'\n",
			ss_topo_prog, argv[optind]);
		return SS_EXIT_USAGE;
	}

	rc = ss_topo_open(&topo, source);
	if (rc < 0)
		return ss_cmd_fail(ss_topo_prog, rc);
	rc = ss_topo_plan(topo, &request, &plan);
	if (rc < 0) {
		ss_topo_close(&topo);
		return ss_cmd_fail(ss_topo_prog, rc);
	}
	ss_topo_summarize(topo, &summary);
	if (json)
		ss_topo_print_json(source ? source : "this machine", &summary,
				   plan);
	else
		ss_topo_print_table(source ? source : "this machine", &summary,
				    plan);
	ss_plan_free(&plan);
	ss_topo_close(&topo);
	return SS_EXIT_OK;
}
