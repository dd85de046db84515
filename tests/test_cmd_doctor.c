// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync doctor: on a machine without RDMA it says so with a fix and
 * exits 1; inside the soft-RoCE guest it finds rxe0 healthy and exits 0;
 * a locked-memory limit below what a run registers is a problem.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cmd.h"
#include "ranks.h"

Test(cmd_doctor, reports_the_devices_or_their_absence)
{
	char cmd[256], out[16384];
	int status;

	snprintf(cmd, sizeof(cmd), "%s doctor 2>&1", SS_COMMAND);
	status = cmd_run(out, sizeof(out), "%s", cmd);
	cr_assert(strstr(out, "locked memory") && strstr(out, "hugepages") &&
			  strstr(out, "kernels ("),
		  "%s", out);
	if (!ss_fabric_verbs_available()) {
		cr_assert_eq(status, 1, "%s", out);
		cr_assert(strstr(out, "PROBLEM: no RDMA device"), "%s", out);
		cr_assert(strstr(out, "fix: "), "%s", out);
		return;
	}
	/* the soft-RoCE guest: an active RoCE port with a RoCE v2 GID */
	cr_assert_eq(status, 0, "%s", out);
	cr_assert(strstr(out, "port 1: active, Ethernet (RoCE)"), "%s", out);
	cr_assert(strstr(out, "RoCE v2"), "%s", out);
	cr_assert(strstr(out, "locality: "), "%s", out);
	cr_assert(strstr(out, "no problem found"), "%s", out);
}

/* The limit is lowered and CAP_IPC_LOCK dropped (util-linux tools). */
Test(cmd_doctor, low_memlock_limit_is_a_problem_with_its_fix)
{
	char cmd[512], out[16384];

	snprintf(cmd, sizeof(cmd),
		 "prlimit --memlock=65536:65536 "
		 "setpriv --bounding-set=-ipc_lock --inh-caps=-ipc_lock "
		 "%s doctor --ranks 2 --hash-size 1000 2>&1",
		 SS_COMMAND);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 1, "%s", out);
	cr_assert(strstr(out, "on 2 ranks registers"), "%s", out);
	cr_assert(strstr(out, "PROBLEM: RLIMIT_MEMLOCK (0.1 MiB) is below"),
		  "%s", out);
	cr_assert(strstr(out, "ulimit -l unlimited"), "%s", out);
}

/* The MiB a run registers, as doctor says it, for @args. */
static double registers(const char *args)
{
	char out[16384];
	const char *at;

	cmd_run(out, sizeof(out), "%s doctor %s 2>&1", SS_COMMAND, args);
	at = strstr(out, " registers ");
	cr_assert_not_null(at, "%s", out);
	return atof(at + strlen(" registers "));
}

/*
 * Sized as train would run: with several ranks the tables are sharded
 * (each rank registers the MLPs and its shard), so a model too large
 * for the limit replicated is not a problem sharded.  It sized every run
 * as replicated (963 MiB a rank for train's defaults on 4 ranks, where
 * sharded registers about 100).
 */
Test(cmd_doctor, sizes_the_tables_as_train_does)
{
	double sharded = registers("--ranks 4"),
	       replicated = registers("--ranks 4 --tables replicated");

	cr_assert_gt(replicated, 5 * sharded, "%g MiB replicated, %g sharded",
		     replicated, sharded);
	cr_assert_float_eq(registers("--ranks 4 --tables sharded"), sharded,
			   0.05);
	cr_assert_float_eq(registers("--ranks 1"),
			   registers("--ranks 1 --tables replicated"), 0.05);
}

Test(cmd_doctor, options)
{
	char cmd[256], out[4096];

	snprintf(cmd, sizeof(cmd), "%s doctor --help", SS_COMMAND);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0);
	cr_assert(strstr(out, "--device") && strstr(out, "--ranks"), "%s", out);
	snprintf(cmd, sizeof(cmd), "%s doctor --ranks 0 2>&1", SS_COMMAND);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 2);
	cr_assert(strstr(out, "--ranks"), "%s", out);
	snprintf(cmd, sizeof(cmd), "%s doctor --device nosuch0 2>&1",
		 SS_COMMAND);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 1);
	cr_assert(strstr(out, "PROBLEM: no RDMA device"), "%s", out);
}
