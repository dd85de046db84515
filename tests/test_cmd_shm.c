// SPDX-License-Identifier: BSD-2-Clause
/*
 * Shared memory that never leaks: a rank stopped by a signal, a rank
 * killed under launch, leftovers removed by shm-clean (and a live rank's
 * objects left alone), two jobs started at once on one address, and long
 * addresses that must not share names.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "ranks.h"
#include "shadowsync/shadowsync.h"

static char dir[] = "/tmp/ss-shm-XXXXXX";

#define MODEL "--emb-dim 4 --bottom 13-16-4 --top 16-1 --hash-size 2000"

static void setup(void)
{
	strcpy(dir, "/tmp/ss-shm-XXXXXX");
	cmd_data_dir(dir);
}

static void teardown(void)
{
	cmd_rm_dir(dir);
}

TestSuite(cmd_shm, .init = setup, .fini = teardown, .timeout = 120);

/* This test's ports (32, see ranks.h).  A rank at P has its tables at
 * P + world: two ranks of one test two ports apart at least. */
static int port(void)
{
	return ranks_port_base();
}

/* How many objects in /dev/shm belong to 127.0.0.1:@p. */
static int objects_of(int p)
{
	char prefix[64];
	struct dirent *e;
	DIR *d = opendir("/dev/shm");
	int n = 0;

	cr_assert(d);
	snprintf(prefix, sizeof(prefix), "ss-127.0.0.1:%d-", p);
	while ((e = readdir(d)))
		n += !strncmp(e->d_name, prefix, strlen(prefix));
	closedir(d);
	return n;
}

/* A shell fragment that waits (30 s at most: a rank under ASan in a busy
 * make check can take seconds to start) for @p's control object. */
#define WAIT_CTL                                                          \
	"for i in $(seq 600); do [ -e /dev/shm/ss-127.0.0.1:%d-ctl ] && " \
	"break; sleep 0.05; done; "

/* A world of one rank at @p over shm, long enough to be stopped. */
#define LONE_RANK                                                         \
	"%s train --data %s/train.txt " MODEL " --epochs 50 --threads 1 " \
	"--transport shm --peers 127.0.0.1:%d --rank 0 --progress 0"

Test(cmd_shm, a_rank_stopped_by_sigterm_or_sigint_leaves_nothing)
{
	static const char *const sigs[] = { "TERM", "INT" };
	char out[8192];
	int p = port();

	for (int i = 0; i < 2; i++) {
		cr_assert_eq(cmd_run(out, sizeof(out),
				     "{ " LONE_RANK " >/dev/null 2>&1 & }; "
				     "R=$!; " WAIT_CTL "kill -%s $R; wait $R; "
				     "echo status $?",
				     SS_COMMAND, dir, p, p, sigs[i]),
			     0, "%s", out);
		cr_assert(strstr(out, "status 1"), "SIG%s: %s", sigs[i], out);
		cr_assert_eq(objects_of(p), 0, "SIG%s left objects", sigs[i]);
	}
}

Test(cmd_shm, launch_removes_what_a_killed_rank_left)
{
	char out[16384];
	int p = port() + 2;

	cr_assert_eq(cmd_run(out, sizeof(out),
			     "{ %s launch -n 2 --port %d -- train --data "
			     "%s/train.txt " MODEL " --epochs 50 --threads 1 "
			     "--progress 0 >/dev/null 2>&1 & }; L=$!; " WAIT_CTL
			     "pkill -KILL -f '[r]ank 1 --peers 127.0.0.1:%d,'; "
			     "wait $L; echo launch $?",
			     SS_COMMAND, p, dir, p + 1, p),
		     0, "%s", out);
	cr_assert(strstr(out, "launch 1"), "%s", out);
	cr_assert_eq(objects_of(p + 1), 0, "the killed rank's objects");
	cr_assert_eq(objects_of(p), 0, "the rank launch stopped");
	/* and their tables' endpoints, at port + 2 */
	cr_assert_eq(objects_of(p + 3), 0, "the killed rank's tables");
	cr_assert_eq(objects_of(p + 2), 0, "the tables of the rank stopped");
}

Test(cmd_shm, shm_clean_removes_leftovers_and_spares_live_ranks)
{
	char out[16384];
	int dead = port() + 8, live = port() + 10;

	/* a rank killed outright leaves its objects */
	cr_assert_eq(cmd_run(out, sizeof(out),
			     "{ " LONE_RANK
			     " >/dev/null 2>&1 & }; R=$!; " WAIT_CTL
			     "kill -KILL $R; wait $R; true",
			     SS_COMMAND, dir, dead, dead),
		     0, "%s", out);
	cr_assert_gt(objects_of(dead), 1);
	cr_assert_eq(cmd_run(out, sizeof(out),
			     "{ " LONE_RANK
			     " >/dev/null 2>&1 & }; R=$!; " WAIT_CTL
			     "%s shm-clean --address 127.0.0.1:%d --dry-run; "
			     "%s shm-clean --address 127.0.0.1:%d; "
			     "%s shm-clean --address 127.0.0.1:%d; "
			     "ls /dev/shm | grep -c 'ss-127.0.0.1:%d-'; "
			     "kill $R; wait $R; true",
			     SS_COMMAND, dir, live, live, SS_COMMAND, dead,
			     SS_COMMAND, dead, SS_COMMAND, live, live),
		     0, "%s", out);
	cr_assert(strstr(out, "left ss-127.0.0.1:"), "%s", out);
	cr_assert(strstr(out, "found 1 leftovers"), "%s", out);
	cr_assert(strstr(out, "removed 1 leftovers"), "%s", out);
	cr_assert(strstr(out, "removed 0 leftovers"), "the live rank: %s", out);
	cr_assert_eq(objects_of(dead), 0);
	cr_assert_eq(objects_of(live), 0, "the live rank ended cleanly");
	/* the dead rank's tables (port + 1), made or not when it died, are
	 * a leftover of their own */
	snprintf(out, sizeof(out), "127.0.0.1:%d", dead + 1);
	cr_assert_geq(ss_fabric_shm_clean(out, 0, true, NULL, NULL), 0);
	cr_assert_eq(objects_of(dead + 1), 0);
}

/*
 * shm-clean --address of a killed rank of a sharded job removes its
 * tables' endpoint too (at port + world, the same process): it stayed
 * until shm-clean --job-key.  The other rank's objects, of another
 * process, are left to an --address of their own.
 */
Test(cmd_shm, shm_clean_address_removes_that_ranks_tables_too)
{
	char out[16384], addr[64];
	int p = port() + 20, before[4], after[4];

	/* started without launch, which would clean up after them */
	cr_assert_eq(
		cmd_run(out, sizeof(out),
			"for r in 0 1; do { %s train --data %s/train.txt " MODEL
			" --epochs 50 --threads 1 --transport shm --peers "
			"127.0.0.1:%d,127.0.0.1:%d --rank $r --progress 0 "
			">/dev/null 2>&1 & }; R=\"$R $!\"; done; "
			"for i in $(seq 600); do "
			"[ -e /dev/shm/ss-127.0.0.1:%d-ctl ] && "
			"[ -e /dev/shm/ss-127.0.0.1:%d-ctl ] && break; "
			"sleep 0.05; done; kill -KILL $R; wait; true",
			SS_COMMAND, dir, p, p + 1, p + 2, p + 3),
		0, "%s", out);
	for (int i = 0; i < 4; i++)
		before[i] = objects_of(p + i);
	cr_assert_eq(cmd_run(out, sizeof(out),
			     "%s shm-clean --address 127.0.0.1:%d 2>&1",
			     SS_COMMAND, p + 1),
		     0, "%s", out);
	for (int i = 0; i < 4; i++)
		after[i] = objects_of(p + i);
	/* whatever the outcome, nothing left behind */
	for (int i = 0; i < 4; i++) {
		snprintf(addr, sizeof(addr), "127.0.0.1:%d", p + i);
		ss_fabric_shm_clean(addr, 0, true, NULL, NULL);
	}
	for (int i = 0; i < 4; i++)
		cr_assert_gt(before[i], 1, "port + %d had %d objects", i,
			     before[i]);
	cr_assert_eq(after[1], 0, "%s", out);
	cr_assert_eq(after[3], 0, "the killed rank's tables: %s", out);
	cr_assert_eq(after[0], before[0], "the other rank's: %s", out);
	cr_assert_eq(after[2], before[2], "the other rank's tables: %s", out);
	snprintf(addr, sizeof(addr), "removed ss-127.0.0.1:%d-*", p + 3);
	cr_assert(strstr(out, addr), "%s", out);
	cr_assert(strstr(out, "removed 2 leftovers"), "%s", out);
}

/*
 * Another user's objects, whose claim we may not open: not ours to judge
 * (they were taken for a dead rank's and "removed", while unlink failed:
 * the live rank's stayed, but shm-clean said it had removed them).  Made
 * by hand as root, mode 0600; shm-clean runs as nobody.
 */
Test(cmd_shm, shm_clean_leaves_another_users_objects)
{
	char out[4096];
	int p = port() + 14;

	if (geteuid() != 0)
		cr_skip_test("needs root, to run shm-clean as another user");
	if (cmd_run(out, sizeof(out),
		    "setpriv --reuid=65534 --regid=65534 --clear-groups "
		    "%s --version 2>&1",
		    SS_COMMAND) != 0)
		cr_skip_test("nobody cannot run %s: %s", SS_COMMAND, out);
	cr_assert_eq(cmd_run(out, sizeof(out),
			     "umask 077; : > /dev/shm/ss-127.0.0.1:%d-claim && "
			     ": > /dev/shm/ss-127.0.0.1:%d-r0 && "
			     "setpriv --reuid=65534 --regid=65534 "
			     "--clear-groups %s shm-clean --address "
			     "127.0.0.1:%d 2>&1",
			     p, p, SS_COMMAND, p),
		     0, "%s", out);
	cr_assert(strstr(out, "removed 0 leftovers") ||
			  strstr(out, "no leftovers"),
		  "%s", out);
	cr_assert_eq(objects_of(p), 2, "%s", out);
	snprintf(out, sizeof(out), "127.0.0.1:%d", p);
	cr_assert_eq(ss_fabric_shm_clean(out, 0, true, NULL, NULL), 1);
	cr_assert_eq(objects_of(p), 0);
}

/* Two launches at once on the same ports: one runs, one is refused with
 * the reason (before, each took one address and both failed). */
Test(cmd_shm, two_jobs_started_together_one_runs)
{
	char out[16384];
	int p = port() + 12;

	for (int round = 0; round < 3; round++) {
		cr_assert_eq(
			cmd_run(out, sizeof(out),
				"for j in a b; do { %s launch -n 2 --port "
				"%d -- train --data %s/train.txt " MODEL
				" --threads 1 --progress 0 >%s/$j 2>&1; "
				"echo $j $?; } & done; wait; cat %s/a %s/b",
				SS_COMMAND, p, dir, dir, dir, dir),
			0, "%s", out);
		cr_assert(strstr(out, "a 0") || strstr(out, "b 0"), "%s", out);
		if (strstr(out, "a 1") || strstr(out, "b 1"))
			cr_assert(strstr(out, "a live process has it"), "%s",
				  out);
		cr_assert_eq(objects_of(p) + objects_of(p + 1), 0);
	}
}

/* Names are cut to fit NAME_MAX: two addresses that differ past the cut
 * must still not share a claim. */
Test(cmd_shm, long_addresses_do_not_share_names)
{
	char a[200], b[200];
	int fa = -1, fb = -1, again = -1;

	memset(a, 'h', 130);
	snprintf(a + 130, sizeof(a) - 130, "a:%d", port());
	memset(b, 'h', 130);
	snprintf(b + 130, sizeof(b) - 130, "b:%d", port());
	cr_assert_eq(ss_fabric_shm_claim(a, 0, &fa), 0, "%s",
		     ss_last_error()->why);
	cr_assert_eq(ss_fabric_shm_claim(b, 1, &fb), 0, "%s: %s",
		     ss_last_error()->what, ss_last_error()->why);
	cr_assert_eq(ss_fabric_shm_claim(a, 0, &again), -EADDRINUSE);
	cr_assert_eq(again, -1);
	close(fa);
	close(fb);
	/* closed, both claims are leftovers, and removed */
	cr_assert_eq(ss_fabric_shm_clean(a, 0, true, NULL, NULL), 1);
	cr_assert_eq(ss_fabric_shm_clean(b, 0, true, NULL, NULL), 1);
}

/* Through launch: two jobs whose --host of 130 characters differ only at
 * the end both run side by side (their names were cut into one). */
Test(cmd_shm, launch_hosts_that_differ_past_the_cut_both_run)
{
	char out[16384], host[140];

	memset(host, 'h', 129);
	host[129] = '\0';
	cr_assert_eq(cmd_run(out, sizeof(out),
			     "for j in a b; do { %s launch -n 2 --host %s$j "
			     "--port %d -- train --data %s/train.txt " MODEL
			     " --threads 1 --progress 0 >%s/$j 2>&1; "
			     "echo job $j $?; } & done; wait; cat %s/a %s/b",
			     SS_COMMAND, host, port() + 16, dir, dir, dir, dir),
		     0, "%s", out);
	cr_assert(strstr(out, "job a 0"), "%s", out);
	cr_assert(strstr(out, "job b 0"), "%s", out);
}
