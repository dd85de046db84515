// SPDX-License-Identifier: BSD-2-Clause
/* The main job (tools/demo, run by `make demo`) end to end, reduced. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"

static char dir[] = "/tmp/ss-demo-XXXXXX";
static char out[65536];

static void setup(void)
{
	strcpy(dir, "/tmp/ss-demo-XXXXXX");
	cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
	cmd_rm_dir(dir);
}

TestSuite(cmd_demo, .init = setup, .fini = teardown, .timeout = 300);

/* tools/demo --quick with @args; its output in out. */
static int demo(const char *args)
{
	return cmd_run(out, sizeof(out),
		       "%s/tools/demo --quick --bin %s --out %s %s 2>&1",
		       SS_SOURCE_DIR, SS_COMMAND, dir, args);
}

Test(cmd_demo, prints_the_four_line_table)
{
	cr_assert_eq(demo("--transport shm"), 0, "%s", out);
	cr_assert(strstr(out, "teacher floor NE 0."), "%s", out);
	cr_assert(strstr(out, "examples/s"), "%s", out);
	cr_assert(strstr(out, "\n1 node "), "%s", out);
	cr_assert(strstr(out, "\n4 nodes, shadow S-MA "), "%s", out);
	cr_assert(strstr(out, "\n4 nodes, foreground MA (same syncs) "), "%s",
		  out);
	cr_assert(strstr(out, "\n4 nodes, shadow S-EASGD "), "%s", out);
	cr_assert(strstr(out, "shadow S-MA NE vs 1 node: "), "%s", out);
	cr_assert(strstr(out, "as fast as foreground MA"), "%s", out);
	/* the straggler line, or why it could not run (no cgroup here) */
	cr_assert(strstr(out, "with one node held to 5% of a CPU: shadow S-MA "
			      "trains ") ||
			  strstr(out, "straggler line skipped: "),
		  "%s", out);
	/* every line trained: figures, not blanks, in each row */
	cr_assert_null(strstr(out, " nan "), "%s", out);
}

/* One line alone; the foreground one then has no shadow run to match. */
Test(cmd_demo, runs_one_line_alone)
{
	cr_assert_eq(demo("--only fg-ma"), 0, "%s", out);
	cr_assert(strstr(out, "no shadow S-MA run to match"), "%s", out);
	cr_assert(strstr(out, "\n4 nodes, foreground MA (same syncs) "), "%s",
		  out);
	cr_assert_null(strstr(out, "\n1 node "), "%s", out);
}

Test(cmd_demo, refuses_an_unknown_line)
{
	cr_assert_eq(demo("--only nine-nodes"), 2, "%s", out);
	cr_assert(strstr(out, "not 1node, shadow-ma, fg-ma, shadow-easgd or "
			      "straggler"),
		  "%s", out);
}

/* --cluster runs on each host of rxe-vm --hosts: outside one it says so. */
Test(cmd_demo, cluster_mode_needs_the_cluster_environment)
{
	cr_assert_eq(demo("--cluster 1"), 2, "%s", out);
	cr_assert(strstr(out, "--cluster needs SS_RANK, SS_WORLD and SS_HOSTS"),
		  "%s", out);
	cr_assert_eq(cmd_run(out, sizeof(out),
			     "SS_RANK=0 SS_WORLD=2 SS_HOSTS=a,b %s/tools/demo "
			     "--quick --bin %s --out %s --cluster 1 --only "
			     "fg-ma 2>&1",
			     SS_SOURCE_DIR, SS_COMMAND, dir),
		     2, "%s", out);
	cr_assert(strstr(out, "--cluster runs the shadow-ma line only"), "%s",
		  out);
}
