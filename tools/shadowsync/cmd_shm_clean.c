// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync shm-clean: list and remove the shared memory that ranks over
 * shm left in /dev/shm when they died (SIGKILL, a crash, a power cut of
 * the container).  The objects of live ranks are never touched: each
 * rank holds a lock on its address's claim object while it runs.
 */
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include "command.h"
#include "shadowsync/shadowsync.h"

static const char ss_clean_prog[] = "shadowsync shm-clean";

static void ss_clean_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowsync shm-clean [--job-key K] [--address HOST:PORT]\n"
		"                            [--dry-run]\n"
		"\n"
		"Remove what ranks over shm left in /dev/shm when they died: each\n"
		"rank's objects are named after its address (/dev/shm/ss-ADDR-*).\n"
		"Objects of ranks still running are never touched.\n"
		"\n"
		"  --job-key K            only the leftovers of job K\n"
		"  --address HOST:PORT    only those of the rank at that address,\n"
		"                         with those its process left at its\n"
		"                         other addresses (its tables', at\n"
		"                         PORT + the number of ranks)\n"
		"  -n, --dry-run          list them, remove nothing\n"
		"  -h, --help             this help\n");
}

/* The port of "HOST:PORT", or -1 when there is none. */
static long ss_clean_port(const char *addr)
{
	const char *colon = strrchr(addr, ':');
	long port;

	if (!colon || colon == addr ||
	    ss_parse_long("--address", colon + 1, 1, 65535, &port) < 0)
		return -1;
	return port;
}

struct ss_clean_totals {
	bool dry_run;
	bool address;
	uint64_t bytes;
	/* with --address, the rank's own: the first leftover */
	char first[sizeof(((struct ss_shm_leftover *)0)->stem)];
};

static void ss_clean_one(void *ctx, const struct ss_shm_leftover *l)
{
	struct ss_clean_totals *t = ctx;

	t->bytes += l->bytes;
	printf("%s ss-%s-*: %d objects, %.1f MiB",
	       t->dry_run ? "left" : "removed", l->stem, l->objects,
	       (double)l->bytes / (1 << 20));
	if (l->pid)
		printf(", process %d (gone)", l->pid);
	if (l->job_key)
		printf(", job key %" PRIu64, l->job_key);
	/* another address of the same process: say why it went too */
	if (t->first[0])
		printf(", the same process as ss-%s-*", t->first);
	else if (t->address)
		snprintf(t->first, sizeof(t->first), "%s", l->stem);
	printf("\n");
}

int ss_cmd_shm_clean(int argc, char **argv)
{
	enum { OPT_KEY = 256, OPT_ADDR };
	static const struct option options[] = {
		{ "job-key", required_argument, NULL, OPT_KEY },
		{ "address", required_argument, NULL, OPT_ADDR },
		{ "dry-run", no_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct ss_clean_totals t = { 0 };
	const char *addr = NULL;
	long key = 0;
	int opt, rc = 0;

	optind = 1;
	while ((opt = getopt_long(argc, argv, "nh", options, NULL)) != -1) {
		switch (opt) {
		case OPT_KEY:
			rc = ss_parse_long("--job-key", optarg, 1, LONG_MAX,
					   &key);
			break;
		case OPT_ADDR:
			addr = optarg;
			t.address = true;
			break;
		case 'n':
			t.dry_run = true;
			break;
		case 'h':
			ss_clean_usage(stdout);
			return SS_EXIT_OK;
		default:
			return ss_cmd_fail(ss_clean_prog,
					   ss_cmd_unknown_option(
						   "shm-clean", argv, options));
		}
		if (rc < 0)
			return ss_cmd_fail(ss_clean_prog, rc);
	}
	rc = ss_cmd_no_more_args(argc, argv);
	/* a rank's address, as train names it: "bogus" matched nothing and
	 * was reported as no leftovers */
	if (rc == 0 && addr && ss_clean_port(addr) < 0)
		rc = ss_error_set(SS_EUSAGE, "not HOST:PORT",
				  "give the address of a rank, as in --peers "
				  "(127.0.0.1:7000)",
				  "--address '%s'", addr);
	if (rc == 0)
		rc = ss_fabric_shm_clean(addr, (uint64_t)key, !t.dry_run,
					 ss_clean_one, &t);
	if (rc < 0)
		return ss_cmd_fail(ss_clean_prog, rc);
	printf("%s %d leftovers, %.1f MiB%s\n", t.dry_run ? "found" : "removed",
	       rc, (double)t.bytes / (1 << 20),
	       rc && t.dry_run ? " (run without --dry-run to remove them)" :
				 "");
	return SS_EXIT_OK;
}
