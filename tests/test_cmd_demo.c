// SPDX-License-Identifier: BSD-2-Clause
/* The main job (tools/demo, run by `make demo`) end to end, reduced. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

Test(cmd_demo, prints_the_four_line_table, .timeout = 300)
{
	char dir[] = "/tmp/ss-demo-XXXXXX", cmd[1024];
	static char out[65536];
	FILE *p;
	size_t n;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd),
		 "%s/tools/demo --quick --transport shm --bin %s --out %s 2>&1",
		 SS_SOURCE_DIR, SS_COMMAND, dir);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	cr_assert_eq(WEXITSTATUS(pclose(p)), 0, "%s", out);
	cr_assert(strstr(out, "teacher floor NE 0."), "%s", out);
	cr_assert(strstr(out, "examples/s"), "%s", out);
	cr_assert(strstr(out, "\n1 node "), "%s", out);
	cr_assert(strstr(out, "\n4 nodes, shadow S-MA "), "%s", out);
	cr_assert(strstr(out, "\n4 nodes, foreground MA (same syncs) "), "%s",
		  out);
	cr_assert(strstr(out, "\n4 nodes, shadow S-EASGD "), "%s", out);
	cr_assert(strstr(out, "shadow S-MA NE vs 1 node: "), "%s", out);
	cr_assert(strstr(out, "as fast as foreground MA"), "%s", out);
	/* every line trained: an NE, not a blank, in each row */
	cr_assert_null(strstr(out, " nan "), "%s", out);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

/* One line alone; the foreground one then has no shadow run to match. */
Test(cmd_demo, runs_one_line_alone, .timeout = 300)
{
	char dir[] = "/tmp/ss-demo-XXXXXX", cmd[1024];
	static char out[65536];
	FILE *p;
	size_t n;

	cr_assert_not_null(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd),
		 "%s/tools/demo --quick --only fg-ma --bin %s --out %s 2>&1",
		 SS_SOURCE_DIR, SS_COMMAND, dir);
	p = popen(cmd, "r");
	cr_assert_not_null(p);
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	cr_assert_eq(WEXITSTATUS(pclose(p)), 0, "%s", out);
	cr_assert(strstr(out, "no shadow S-MA run to match"), "%s", out);
	cr_assert(strstr(out, "\n4 nodes, foreground MA (same syncs) "), "%s",
		  out);
	cr_assert_null(strstr(out, "\n1 node "), "%s", out);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	cr_assert_eq(system(cmd), 0);
}

Test(cmd_demo, refuses_an_unknown_line)
{
	char cmd[512];

	snprintf(cmd, sizeof(cmd),
		 "%s/tools/demo --only nine-nodes --bin %s 2>/dev/null",
		 SS_SOURCE_DIR, SS_COMMAND);
	cr_assert_eq(WEXITSTATUS(system(cmd)), 2);
}
