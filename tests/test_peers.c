// SPDX-License-Identifier: BSD-2-Clause
/* Peer lists: Slurm node lists, host files, launchers' environments. */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ranks.h"
#include "shadowsync/shadowsync.h"

static void assert_expands(const char *list, const char *const *want, int n)
{
	char **hosts;
	int got;

	cr_assert_eq(ss_nodelist_expand(list, &hosts, &got), 0, "%s: %s", list,
		     ss_last_error()->why);
	cr_assert_eq(got, n, "%s: %d hosts", list, got);
	for (int i = 0; i < n; i++)
		cr_assert_str_eq(hosts[i], want[i], "%s: host %d", list, i);
	ss_strings_free(&hosts, got);
	cr_assert_null(hosts);
}

Test(peers, slurm_node_lists)
{
	static const char *const a[] = { "node01", "node02", "node03", "node04",
					 "node07" };
	static const char *const b[] = { "login", "gpu8x", "gpu9x", "gpu10x",
					 "db" };

	assert_expands("node[01-04,07]", a, 5);
	assert_expands("login,gpu[8-10]x,db", b, 5);
	assert_expands("solo", (const char *const[]){ "solo" }, 1);
	/* several bracket groups in a name, as Slurm writes them */
	assert_expands("rack[1-2]-node[01-02]",
		       (const char *const[]){ "rack1-node01", "rack1-node02",
					      "rack2-node01", "rack2-node02" },
		       4);
	assert_expands("a[1]b[2]c,d", (const char *const[]){ "a1b2c", "d" }, 2);
}

/* Found by tests/fuzz/nodelist: stray brackets were kept in host names. */
Test(peers, unbalanced_brackets_are_refused)
{
	static const char *const bad[] = { "]",		"a],b",	  "node[1-2]]",
					   "node[[1]]", "a[1]b[", "x[1-2]y]" };
	char **hosts;
	int n;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		cr_assert_eq(ss_nodelist_expand(bad[i], &hosts, &n), SS_EUSAGE,
			     "%s", bad[i]);
		cr_assert_null(hosts);
		cr_assert(strstr(ss_last_error()->why, "brackets"), "%s: %s",
			  bad[i], ss_last_error()->why);
		cr_assert(strstr(ss_last_error()->what, bad[i]), "%s",
			  ss_last_error()->what);
	}
}

Test(peers, bad_node_lists_are_named)
{
	char **hosts;
	int n;

	cr_assert_eq(ss_nodelist_expand("node[01-", &hosts, &n), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->what, "node[01-"), "%s",
		  ss_last_error()->what);
	cr_assert_eq(ss_nodelist_expand("node[4-2]", &hosts, &n), SS_EUSAGE);
	cr_assert_eq(ss_nodelist_expand("node[x]", &hosts, &n), SS_EUSAGE);
	cr_assert_eq(ss_nodelist_expand("", &hosts, &n), SS_EUSAGE);
	cr_assert_eq(ss_nodelist_expand("a,,b", &hosts, &n), SS_EUSAGE);
	/* issue 15: empty brackets gave no host and success (a SIGFPE in
	 * train), numbers past LONG_MAX overflowed */
	cr_assert_eq(ss_nodelist_expand("node[]", &hosts, &n), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->why, "nothing between"), "%s",
		  ss_last_error()->why);
	cr_assert_eq(ss_nodelist_expand("node[,]", &hosts, &n), SS_EUSAGE);
	cr_assert_eq(
		ss_nodelist_expand("node[9223372036854775807]", &hosts, &n),
		SS_EUSAGE);
	cr_assert_eq(
		ss_nodelist_expand("node[99999999999999999999]", &hosts, &n),
		SS_EUSAGE);
	cr_assert_eq(
		ss_nodelist_expand("node[1-99999999999999999999]", &hosts, &n),
		SS_EUSAGE);
	cr_assert_eq(ss_nodelist_expand("node[-3]", &hosts, &n), SS_EUSAGE);
	cr_assert_eq(ss_nodelist_expand("node[+3]", &hosts, &n), SS_EUSAGE);
	cr_assert_eq(ss_nodelist_expand("node[1-+3]", &hosts, &n), SS_EUSAGE);
	/* the largest number still expands */
	cr_assert_eq(ss_nodelist_expand("n[999999999]", &hosts, &n), 0);
	cr_assert_eq(n, 1);
	cr_assert_str_eq(hosts[0], "n999999999");
	ss_strings_free(&hosts, n);
}

static const char *write_tmp(const char *text)
{
	static char path[64];
	FILE *f;
	int fd;

	strcpy(path, "/tmp/ss-hosts-XXXXXX");
	fd = mkstemp(path);
	cr_assert_geq(fd, 0);
	f = fdopen(fd, "w");
	fputs(text, f);
	fclose(f);
	return path;
}

Test(peers, host_files)
{
	const char *path = write_tmp("# the job's hosts\n"
				     "node1\n"
				     "\n"
				     "node2:7100   # its own port\n"
				     "  10.0.0.3\n");
	char **addrs;
	int n;

	cr_assert_eq(ss_hostfile_read(path, 7000, &addrs, &n), 0, "%s",
		     ss_last_error()->why);
	cr_assert_eq(n, 3);
	cr_assert_str_eq(addrs[0], "node1:7000");
	cr_assert_str_eq(addrs[1], "node2:7100");
	cr_assert_str_eq(addrs[2], "10.0.0.3:7000");
	ss_strings_free(&addrs, n);
	unlink(path);

	path = write_tmp("node1\nnode2 node3\n");
	cr_assert_eq(ss_hostfile_read(path, 7000, &addrs, &n), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->what, ":2: 'node2 node3'"), "%s",
		  ss_last_error()->what);
	unlink(path);
	path = write_tmp("# nobody\n");
	cr_assert_eq(ss_hostfile_read(path, 7000, &addrs, &n), SS_EUSAGE);
	unlink(path);
	cr_assert_eq(ss_hostfile_read("/nonexistent/hosts", 7000, &addrs, &n),
		     -ENOENT);
}

/*
 * IPv6 addresses: bracketed, with or without a port; a bare one is
 * refused, naming the line ("fe80::2" was host "fe80:" on port 2, "[::1]"
 * refused as a port out of range).
 */
Test(peers, host_files_with_ipv6_addresses)
{
	const char *path = write_tmp("[::1]\n[fe80::2]:7100\n");
	char **addrs;
	int n;

	cr_assert_eq(ss_hostfile_read(path, 7000, &addrs, &n), 0, "%s",
		     ss_last_error()->why);
	cr_assert_eq(n, 2);
	cr_assert_str_eq(addrs[0], "[::1]:7000");
	cr_assert_str_eq(addrs[1], "[fe80::2]:7100");
	ss_strings_free(&addrs, n);
	unlink(path);
	path = write_tmp("node1\nfe80::2\n");
	cr_assert_eq(ss_hostfile_read(path, 7000, &addrs, &n), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->what, ":2: 'fe80::2'"), "%s",
		  ss_last_error()->what);
	cr_assert_str_eq(ss_last_error()->why,
			 "an IPv6 address without brackets");
	unlink(path);
}

/*
 * issue 15, defect 7: a line longer than the reader's 512-byte buffer was
 * cut in two, the host given the default port and the tail ("...:7100")
 * taken as another host.
 */
Test(peers, long_host_file_lines)
{
	char host[256], text[1200], want[300];
	const char *path;
	char **addrs;
	int n;

	/* the longest host name, its port kept, and a long comment */
	memset(host, 'h', 255);
	host[255] = '\0';
	snprintf(text, sizeof(text), "%s:7100   # %0600d\nnode2\n", host, 0);
	path = write_tmp(text);
	cr_assert_eq(ss_hostfile_read(path, 7000, &addrs, &n), 0, "%s",
		     ss_last_error()->why);
	cr_assert_eq(n, 2);
	snprintf(want, sizeof(want), "%s:7100", host);
	cr_assert_str_eq(addrs[0], want);
	cr_assert_str_eq(addrs[1], "node2:7000");
	ss_strings_free(&addrs, n);
	unlink(path);

	/* a longer one is refused, naming the line */
	snprintf(text, sizeof(text),
		 "node1\n%sxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx:7100\n", host);
	path = write_tmp(text);
	cr_assert_eq(ss_hostfile_read(path, 7000, &addrs, &n), SS_EUSAGE);
	cr_assert_null(addrs);
	cr_assert(strstr(ss_last_error()->what, ":2: a host name of 285 "),
		  "%s", ss_last_error()->what);
	cr_assert(strstr(ss_last_error()->why, "too long"), "%s",
		  ss_last_error()->why);
	unlink(path);

	/* found by tests/fuzz/hostfile: a control character was kept in
	 * the host name; it is named by its byte, not printed */
	path = write_tmp("node1\nno\x02"
			 "de:7100\n");
	cr_assert_eq(ss_hostfile_read(path, 7000, &addrs, &n), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->what, ":2: byte 0x02 after 'no'"),
		  "%s", ss_last_error()->what);
	unlink(path);
	path = write_tmp("a\vb\n");
	cr_assert_eq(ss_hostfile_read(path, 7000, &addrs, &n), SS_EUSAGE);
	unlink(path);

	/* a binary file is not read as host names */
	path = write_tmp("node1\n");
	{
		FILE *f = fopen(path, "a");

		fwrite("no\0de\n", 1, 6, f);
		fclose(f);
	}
	cr_assert_eq(ss_hostfile_read(path, 7000, &addrs, &n), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->what, ":2"), "%s",
		  ss_last_error()->what);
	cr_assert(strstr(ss_last_error()->why, "NUL"), "%s",
		  ss_last_error()->why);
	unlink(path);
}

static void clear_launchers(void)
{
	static const char *const vars[] = {
		"SLURM_PROCID",
		"SLURM_NTASKS",
		"OMPI_COMM_WORLD_RANK",
		"OMPI_COMM_WORLD_SIZE",
		"PMI_RANK",
		"PMI_SIZE",
		"RANK",
		"WORLD_SIZE",
		"LOCAL_WORLD_SIZE",
		"OMPI_COMM_WORLD_LOCAL_SIZE",
		"SLURM_JOB_NODELIST",
		"TORCHELASTIC_RUN_ID",
		"SS_RANK",
		"SS_WORLD",
		"SS_PEERS",
	};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
}

Test(peers, rank_from_each_launcher)
{
	static const char *const env[][3] = {
		{ "SS_RANK", "SS_WORLD", "shadowsync launch" },
		{ "SLURM_PROCID", "SLURM_NTASKS", "Slurm" },
		{ "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI" },
		{ "PMI_RANK", "PMI_SIZE", "PMI" },
		{ "RANK", "WORLD_SIZE", "torchrun" },
	};
	const char *source;
	int rank, world;

	clear_launchers();
	cr_assert_eq(ss_launcher_rank(&rank, &world, &source), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->hint, "--rank"));
	for (int i = 0; i < 5; i++) {
		clear_launchers();
		setenv(env[i][0], "2", 1);
		setenv(env[i][1], "4", 1);
		cr_assert_eq(ss_launcher_rank(&rank, &world, &source), 0);
		cr_assert_eq(rank, 2);
		cr_assert_eq(world, 4);
		cr_assert_str_eq(source, env[i][2]);
	}
	clear_launchers();
	setenv("PMI_RANK", "4", 1);
	setenv("PMI_SIZE", "4", 1);
	cr_assert_eq(ss_launcher_rank(&rank, &world, &source), SS_EUSAGE);
}

Test(peers, train_takes_ranks_from_open_mpi_and_a_host_file, .timeout = 120)
{
	char cmd[2048], out[8192];
	char data[] = "/tmp/ss-peers-data-XXXXXX";
	const char *hosts;
	int port = ranks_port_base();
	FILE *p;
	size_t n;

	snprintf(cmd, sizeof(cmd), "127.0.0.1:%d\n127.0.0.1:%d\n", port,
		 port + 1);
	hosts = strdup(write_tmp(cmd));
	cr_assert_geq(mkstemp(data), 0);
	snprintf(
		cmd, sizeof(cmd),
		"%s gen-data --out %s --examples 2000 --cardinality 100 >/dev/null && "
		"T='%s train --data %s --emb-dim 4 --bottom 13-8-4 --top 8-1 --hash-size 500"
		" --threads 1 --transport shm --hostfile %s --progress 0 --json'; "
		"OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 $T > %s.r1 2>&1 & "
		"OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=2 $T 2>&1; r0=$?; "
		"wait $!; r1=$?; cat %s.r1; echo \"status $r0 $r1\"; "
		"OMPI_COMM_WORLD_RANK=0 OMPI_COMM_WORLD_SIZE=3 $T 2>&1; echo \"mismatch $?\"",
		SS_COMMAND, data, SS_COMMAND, data, hosts, data, data);
	p = popen(cmd, "r");
	n = fread(out, 1, sizeof(out) - 1, p);
	out[n] = '\0';
	pclose(p);
	snprintf(cmd, sizeof(cmd), "rm -f %s %s.r1 %s.teacher.json %s", data,
		 data, data, hosts);
	cr_assert_eq(system(cmd), 0);
	cr_assert(strstr(out, "status 0 0"), "%s", out);
	cr_assert(strstr(out, "\"rank\":1,\"world\":2"), "%s", out);
	cr_assert(strstr(out, "Open MPI says 3 tasks, the peers are 2"), "%s",
		  out);
	cr_assert(strstr(out, "mismatch 2"), "%s", out);
}

/* Found by tests/fuzz/nodelist: past the cap (SS_FABRIC_MAX_PEERS, 65536
 * hosts) the error did not say which list. */
Test(peers, too_many_hosts_name_their_list)
{
	char **hosts, *text = malloc(2 * 65537 + 1);
	const char *path;
	int n;

	/* a range holds at most 4097: 16 racks of 4096 */
	cr_assert_eq(ss_nodelist_expand("r[0-15]-n[0-4095]", &hosts, &n), 0);
	cr_assert_eq(n, 65536);
	cr_assert_str_eq(hosts[65535], "r15-n4095");
	ss_strings_free(&hosts, n);
	cr_assert_eq(ss_nodelist_expand("a,r[0-15]-n[0-4095]", &hosts, &n),
		     SS_EUSAGE);
	cr_assert_null(hosts);
	cr_assert(strstr(ss_last_error()->what,
			 "node list 'a,r[0-15]-n[0-4095]'"),
		  "%s", ss_last_error()->what);
	cr_assert(strstr(ss_last_error()->why, "more than 65536"), "%s",
		  ss_last_error()->why);

	cr_assert_not_null(text);
	for (int i = 0; i < 65537; i++)
		memcpy(text + 2 * i, "h\n", 3);
	path = write_tmp(text);
	free(text);
	cr_assert_eq(ss_hostfile_read(path, 7000, &hosts, &n), SS_EUSAGE);
	cr_assert(strstr(ss_last_error()->what, ":65537"), "%s",
		  ss_last_error()->what);
	unlink(path);
}

/* ss_job_find() of a request, with the launcher's variables @env
 * ("NAME=value" pairs, NULL-terminated) set and all others cleared. */
static int find_job(struct ss_job **job, const char *peers, int rank,
		    const char *const *env)
{
	struct ss_job_request req;

	clear_launchers();
	for (int i = 0; env && env[i]; i++) {
		char name[64];
		const char *eq = strchr(env[i], '=');

		snprintf(name, sizeof(name), "%.*s", (int)(eq - env[i]),
			 env[i]);
		setenv(name, eq + 1, 1);
	}
	ss_job_request_init(&req);
	req.peers = peers;
	req.rank = rank;
	req.port = 7100;
	return ss_job_find(job, &req);
}

/*
 * The job as train finds it, in the library for any program: a list (a
 * host without a port takes the port), the launcher's rank against its
 * task count, torchrun's and mpirun's tasks all on this host at
 * 127.0.0.1:port + r, Slurm's node list, and the refusals, named.
 */
Test(peers, a_job_found_as_train_finds_it)
{
	static const char *const torchrun[] = { "RANK=1", "WORLD_SIZE=3",
						"LOCAL_WORLD_SIZE=3", NULL };
	static const char *const mpirun_two_hosts[] = {
		"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=4",
		"OMPI_COMM_WORLD_LOCAL_SIZE=2", NULL
	};
	static const char *const srun[] = { "SLURM_PROCID=3", "SLURM_NTASKS=4",
					    "SLURM_JOB_NODELIST=n[1-2]", NULL };
	const struct ss_error *e = ss_last_error();
	struct ss_job *job = NULL;

	cr_assert_eq(find_job(&job, "a:1,b,c:3", 2, NULL), 0);
	cr_assert_eq(ss_job_world(job), 3);
	cr_assert_eq(ss_job_rank(job), 2);
	cr_assert_str_eq(ss_job_addrs_of(job)[1], "b:7100");
	cr_assert_str_eq(ss_job_source(job), "--rank");
	ss_job_free(&job);
	cr_assert_null(job);

	cr_assert_eq(find_job(&job, NULL, -1, torchrun), 0);
	cr_assert_eq(ss_job_world(job), 3);
	cr_assert_eq(ss_job_rank(job), 1);
	cr_assert_str_eq(ss_job_addrs_of(job)[2], "127.0.0.1:7102");
	cr_assert_str_eq(ss_job_source(job), "torchrun");
	ss_job_free(&job);

	cr_assert_eq(find_job(&job, NULL, -1, srun), 0);
	cr_assert_str_eq(ss_job_addrs_of(job)[0], "n1:7100");
	cr_assert_str_eq(ss_job_addrs_of(job)[3], "n2:7101");
	cr_assert_eq(ss_job_rank(job), 3);
	ss_job_free(&job);

	/* torchrun inside srun: its workers' ranks, not srun's one task */
	static const char *const srun_torchrun[] = {
		"SLURM_PROCID=0",	 "SLURM_NTASKS=1",
		"SLURM_JOB_NODELIST=n1", "RANK=1",
		"WORLD_SIZE=2",		 "LOCAL_WORLD_SIZE=2",
		"TORCHELASTIC_RUN_ID=j", NULL
	};
	cr_assert_eq(find_job(&job, NULL, -1, srun_torchrun), 0);
	cr_assert_eq(ss_job_rank(job), 1);
	cr_assert_eq(ss_job_world(job), 2);
	cr_assert_str_eq(ss_job_source(job), "torchrun");
	ss_job_free(&job);

	/* shadowsync launch -- PROGRAM (train among them), inside srun:
	 * the peers launch gave, its rank, not srun's */
	static const char *const launch_in_srun[] = {
		"SLURM_PROCID=0",
		"SLURM_NTASKS=1",
		"SLURM_JOB_NODELIST=n1",
		"SS_RANK=1",
		"SS_WORLD=2",
		"SS_PEERS=127.0.0.1:7400,127.0.0.1:7401",
		NULL
	};
	cr_assert_eq(find_job(&job, NULL, -1, launch_in_srun), 0);
	cr_assert_eq(ss_job_rank(job), 1);
	cr_assert_eq(ss_job_world(job), 2);
	cr_assert_str_eq(ss_job_addrs_of(job)[1], "127.0.0.1:7401");
	cr_assert_str_eq(ss_job_source(job), "shadowsync launch");
	ss_job_free(&job);
	static const char *const launch_bad_peers[] = {
		"SS_RANK=0", "SS_WORLD=2", "SS_PEERS=127.0.0.1:7400,", NULL
	};
	cr_assert_eq(find_job(&job, NULL, -1, launch_bad_peers), SS_EUSAGE);
	cr_assert(strstr(e->what, "SS_PEERS entry 2"), "%s", e->what);

	/* no list, and the tasks on two hosts: nothing to go by */
	cr_assert_eq(find_job(&job, NULL, -1, mpirun_two_hosts), SS_EUSAGE);
	cr_assert(strstr(e->what, "Open MPI says 4 tasks, the peers are 1"),
		  "%s", e->what);
	cr_assert_null(job);

	cr_assert_eq(find_job(&job, "a:1,,c:3", -1, NULL), SS_EUSAGE);
	cr_assert(strstr(e->what, "--peers entry 2"), "%s", e->what);
	cr_assert_eq(find_job(&job, "a:1,b:2", 2, NULL), SS_EUSAGE);
	cr_assert(strstr(e->what, "--rank 2 of 2 peers"), "%s", e->what);

	/* alone: a world of one, rank 0, nobody said so */
	cr_assert_eq(find_job(&job, NULL, -1, NULL), 0);
	cr_assert_eq(ss_job_world(job), 1);
	cr_assert_eq(ss_job_rank(job), 0);
	cr_assert_null(ss_job_source(job));
	ss_job_free(&job);
	clear_launchers();
}
