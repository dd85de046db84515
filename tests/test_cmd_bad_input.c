// SPDX-License-Identifier: BSD-2-Clause
/*
 * Bad input through the command: each is refused with a non-zero exit and
 * an error that names the file, option, variable or host, before any
 * training where it can be known before.
 */
#include <criterion/criterion.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd.h"
#include "ranks.h"
#include "train/blas_kernels.h"

static char dir[] = "/tmp/ss-bad-XXXXXX";

#define MODEL "--emb-dim 4 --bottom 13-16-4 --top 16-1 --hash-size 2000"

static void setup(void)
{
	strcpy(dir, "/tmp/ss-bad-XXXXXX");
	cmd_data_dir(dir);
}

static void teardown(void)
{
	cmd_rm_dir(dir);
}

TestSuite(cmd_bad_input, .init = setup, .fini = teardown, .timeout = 120);

static void write_file(const char *name, const void *bytes, size_t len)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "wb");
	cr_assert(f, "%s", path);
	cr_assert_eq(fwrite(bytes, 1, len, f), len);
	fclose(f);
}

/*
 * Runs `shadowsync ARGS 2>&1` from the test's folder: the exit status is
 * @status and the output holds @expect, and no summary line (no training
 * reported) when @before_training.
 */
static void refused(int status, const char *expect, bool before_training,
		    const char *fmt, ...)
{
	char args[1024], out[8192];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(args, sizeof(args), fmt, ap);
	va_end(ap);
	cr_assert_eq(cmd_run(out, sizeof(out), "cd %s && %s %s 2>&1", dir,
			     SS_COMMAND, args),
		     status, "%s\n%s", args, out);
	cr_assert(strstr(out, expect), "%s: expected '%s' in:\n%s", args,
		  expect, out);
	if (before_training)
		cr_assert(!strstr(out, "training log loss"),
			  "%s: trained before refusing:\n%s", args, out);
}

Test(cmd_bad_input, an_empty_data_file)
{
	write_file("empty.txt", "", 0);
	refused(2, "--data 'empty.txt': the file is empty", true,
		"train " MODEL " --data empty.txt");
}

Test(cmd_bad_input, every_line_bad_under_skip)
{
	static const char text[] = "garbage\nmore garbage\n";

	write_file("bad.txt", text, sizeof(text) - 1);
	refused(1, "every line is malformed", false,
		"train " MODEL " --data bad.txt --bad-lines skip");
	refused(1, "(2 lines skipped)", false,
		"train " MODEL " --data bad.txt --bad-lines skip");
}

/*
 * A --test file of another format is refused before training (its first
 * line was read only after it); under --bad-lines skip its malformed lines
 * are counted in the summary (they were dropped without a word).
 */
Test(cmd_bad_input, a_malformed_test_file)
{
	char out[8192];

	cr_assert_eq(cmd_run(out, sizeof(out),
			     "cd %s && (echo garbage; head -50 train.txt; "
			     "echo more garbage) > t.txt && echo garbage > "
			     "g.txt && tail -n +2 t.txt > late.txt",
			     dir),
		     0);
	refused(1, "error: g.txt:1: field 1 (label) 'garbage'", true,
		"train " MODEL " --data train.txt --test g.txt");
	refused(1, "error: --test 'g.txt': no examples in it", true,
		"train " MODEL " --data train.txt --test g.txt "
		"--bad-lines skip");
	/* a bad line further in fails the evaluation, after the training,
	 * whose summary is printed all the same (it was lost) */
	refused(1, "error: late.txt:51: field 1 (label) 'more", false,
		"train " MODEL " --data train.txt --test late.txt --sync none "
		"--progress 0 --json");
	refused(1, "{\"rank\":0,\"world\":1,\"examples\":", false,
		"train " MODEL " --data train.txt --test late.txt --sync none "
		"--progress 0 --json");
	cr_assert_eq(cmd_run(out, sizeof(out),
			     "cd %s && %s train " MODEL
			     " --data train.txt --test t.txt --bad-lines skip "
			     "--sync none --progress 0 --json 2>&1",
			     dir, SS_COMMAND),
		     0, "%s", out);
	cr_assert(strstr(out, "\"test_examples\":50,\"test_skipped\":2"), "%s",
		  out);
	/* the first lines skipped are named, with why */
	cr_assert(strstr(out, "--bad-lines skip: t.txt:1 skipped: field 1 "
			      "(label) 'garbage'"),
		  "%s", out);
	cr_assert(strstr(out, "--bad-lines skip: t.txt:52 skipped: "), "%s",
		  out);
}

/*
 * An option getopt refuses is named with its reason, by every command,
 * with status 2: shm-clean and reshard returned -1000 as their status
 * (24), gen-data and topo printed no error line, and an ambiguous prefix
 * or a missing value (of a short option too) was called an unknown
 * option.
 */
Test(cmd_bad_input, refused_options_say_why)
{
	refused(2, "error: --dat: ambiguous: it begins several options", true,
		"train --dat train.txt");
	refused(2, "error: --data: it needs a value", true, "train --data");
	refused(2, "shm-clean: error: --dryrun: unknown option", true,
		"shm-clean --dryrun");
	refused(2, "reshard: error: --verbose: unknown option", true,
		"reshard --verbose");
	refused(2, "gen-data: error: --outt: unknown option", true,
		"gen-data --outt x.txt");
	refused(2, "topo: error: --bogus: unknown option", true,
		"topo --bogus");
	/* a short option's missing value; and getopt's own line, which
	 * came first ("unrecognized option"), is gone */
	refused(2, "gen-data: error: -o: it needs a value", true,
		"gen-data -o");
	{
		char out[1024];

		cmd_run(out, sizeof(out), "%s train --bogus 2>&1", SS_COMMAND);
		cr_assert(!strstr(out, "unrecognized"), "%s", out);
		cr_assert(strstr(out, "train: error: --bogus: unknown option"),
			  "%s", out);
	}
	/* options that were ignored without a word */
	refused(2, "--peers and --hostfile: give one or the other", true,
		"train " MODEL " --data train.txt --peers 127.0.0.1:7000 "
		"--hostfile nofile");
	refused(2, "--sync-every: only with --mode foreground", true,
		"train " MODEL " --data train.txt --sync-every 5");
	refused(2, "--address 'bogus': not HOST:PORT", true,
		"shm-clean --address bogus");
}

Test(cmd_bad_input, a_folder_as_data)
{
	refused(2, "--data '.': it is a folder", true,
		"train " MODEL " --data .");
}

Test(cmd_bad_input, a_binary_line_is_quoted_without_control_bytes)
{
	static const char text[] = "a\x01\x02\x1b[31mred\n";
	char out[8192];

	write_file("bin.txt", text, sizeof(text) - 1);
	refused(1, "'a\\x01\\x02\\x1b[31mred'", false,
		"train " MODEL " --data bin.txt");
	cmd_run(out, sizeof(out), "cd %s && %s train --data bin.txt 2>&1", dir,
		SS_COMMAND);
	cr_assert(!strchr(out, '\x1b'), "raw escape byte in: %s", out);
}

/* The hint names the option of the command given, not only topo's. */
Test(cmd_bad_input, more_threads_than_cores)
{
	refused(1, "(train --threads, topo --trainers)", true,
		"train " MODEL " --data train.txt --threads 1024");
}

/*
 * gen-data writes OUT.tmp and renames it over OUT: a device or a folder
 * given as --out is refused before, not replaced (as root, /dev/full
 * became a regular file).  A FIFO stands in for the device here.
 */
Test(cmd_bad_input, gen_data_out_that_is_not_a_file)
{
	char fifo[256];
	struct stat st;

	snprintf(fifo, sizeof(fifo), "%s/fifo", dir);
	cr_assert_eq(mkfifo(fifo, 0600), 0);
	refused(2, "--out 'fifo': it is not a regular file", true,
		"gen-data --out fifo --examples 10");
	cr_assert_eq(stat(fifo, &st), 0);
	cr_assert(S_ISFIFO(st.st_mode), "the FIFO was replaced");
	refused(2, "--out '.': it is a folder", true,
		"gen-data --out . --examples 10");
	refused(1, "--out 'nodir/x.txt': writing 'nodir/x.txt.tmp'", true,
		"gen-data --out nodir/x.txt --examples 10");
	/* a count given without its option is not the default million */
	refused(2, "'50000': unexpected argument", true,
		"gen-data --out x.txt 50000");
	/* "-" is no file of that name written without a word */
	refused(2, "--out '-': standard output is not supported", true,
		"gen-data --out - --examples 10");
	/* the sweep's options, each refused by name with its range */
	refused(2, "--zipf '1.4:1.05': the range is empty", true,
		"gen-data --out x.txt --zipf 1.4:1.05");
	refused(2, "--zipf '1:x': A and B must be numbers from 0 to 5", true,
		"gen-data --out x.txt --zipf 1:x");
	refused(2, "--missing '0.7': out of range", true,
		"gen-data --out x.txt --missing 0.7");
	refused(2, "--cap '0': out of range", true,
		"gen-data --out x.txt --cap 0");
	snprintf(fifo, sizeof(fifo), "%s/-", dir);
	cr_assert_neq(stat(fifo, &st), 0, "a file named '-' was written");
}

/*
 * A rank started again (--rejoin) that finds the others gone is told the
 * job may have ended, not to check the peer list; --connect-timeout
 * bounds the wait (no peer here runs: shm names of ports no test uses).
 */
Test(cmd_bad_input, a_rejoining_rank_that_finds_no_one)
{
	const char *peers = "--transport shm --rank 2 --peers "
			    "127.0.0.1:11,127.0.0.1:12,127.0.0.1:13";

	refused(1, "hint: this rank was started again (--rejoin)", true,
		"train " MODEL " --data train.txt %s --rejoin "
		"--connect-timeout 1",
		peers);
	/* the table endpoint's wait says the same */
	refused(1, "hint: this rank was started again (--rejoin)", true,
		"train " MODEL " --data train.txt %s --rejoin --sync none "
		"--tables sharded --connect-timeout 1",
		peers);
	refused(1, "hint: start the ranks named, within the connect timeout",
		true, "train " MODEL " --data train.txt %s --connect-timeout 1",
		peers);
	refused(2, "--connect-timeout '0': out of range", true,
		"train " MODEL " --data train.txt --connect-timeout 0");
}

/*
 * shm joins the ranks of one machine: an IP of another is refused at
 * once, naming it (it was waited for, 30 s, then "no answer").  Names
 * are not looked up.
 */
Test(cmd_bad_input, shm_with_an_address_of_another_machine)
{
	refused(2,
		"shm: address of rank 1 '192.0.2.7:7001': it is on no "
		"interface of this machine",
		true,
		"train " MODEL " --data train.txt --transport shm --rank 0 "
		"--peers 127.0.0.1:7000,192.0.2.7:7001 --connect-timeout 20");
	refused(2, "address of rank 0 '[2001:db8::7]:7000'", true,
		"train " MODEL " --data train.txt --transport shm --rank 1 "
		"--peers [2001:db8::7]:7000,127.0.0.1:7001 "
		"--connect-timeout 20");
}

/*
 * --save naming the --data or --test file (by another spelling too), or
 * whose temporary file PATH.tmp does, or any other file that is not a
 * checkpoint, at PATH or PATH.tmp, is refused before training: the
 * save replaced the data, or the held-out file it then evaluated.  A --load that is a FIFO is refused, not
 * waited on for ever.
 */
/* @name in the test's folder still holds data, not a checkpoint. */
static void assert_not_replaced(const char *name)
{
	char path[256], head[8] = { 0 };
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "r");
	cr_assert_not_null(f);
	cr_assert_eq(fread(head, 1, 6, f), 6);
	fclose(f);
	cr_assert(strncmp(head, "SSCKPT", 6), "the data was replaced");
}

Test(cmd_bad_input, save_over_the_data_and_load_of_a_fifo)
{
	char head[8] = { 0 };

	cr_assert_eq(cmd_run(head, sizeof(head),
			     "cd %s && cp train.txt d.txt "
			     "&& cp train.txt t.txt && mkfifo ff "
			     "&& cp train.txt x.tmp && cp train.txt o.txt "
			     "&& cp train.txt y.tmp",
			     dir),
		     0);
	refused(2, "--save 'd.txt': it is the --data file", true,
		"train " MODEL " --data d.txt --save d.txt");
	refused(2, "--save './t.txt': it is the --test file", true,
		"train " MODEL " --data d.txt --test t.txt --save ./t.txt");
	/* nor its temporary file, which the save truncated */
	refused(2, "--save 'x': its temporary file, PATH.tmp, is the --data",
		true, "train " MODEL " --data x.tmp --save x");
	refused(2, "--save 'x': its temporary file, PATH.tmp, is the --test",
		true, "train " MODEL " --data d.txt --test x.tmp --save x");
	refused(2, "--load 'ff': not a regular file", true,
		"train " MODEL " --data d.txt --load ff");
	/* someone's file, or at PATH.tmp: found before, not after training */
	refused(1, "saving 'o.txt': it exists and is not a checkpoint", true,
		"train " MODEL " --data d.txt --save o.txt");
	refused(1, "its temporary file 'y.tmp': it exists and is not a", true,
		"train " MODEL " --data d.txt --save y");
	assert_not_replaced("d.txt");
	assert_not_replaced("x.tmp");
	assert_not_replaced("o.txt");
	assert_not_replaced("y.tmp");
}

/* Each --peers entry is a rank: an empty one is refused, not dropped. */
Test(cmd_bad_input, an_empty_peer_entry)
{
	refused(2, "--peers entry 2: an empty entry", true,
		"train " MODEL " --data train.txt --rank 0 "
		"--peers 127.0.0.1:7001,,127.0.0.1:7002");
	refused(2, "--peers entry 3: an empty entry", true,
		"train " MODEL " --data train.txt --rank 0 "
		"--peers 127.0.0.1:7001,127.0.0.1:7002,");
}

Test(cmd_bad_input, empty_layer_sizes)
{
	refused(2, "--bottom '13--8---4-': an empty size", true,
		"train --data train.txt --bottom 13--8---4-");
}

Test(cmd_bad_input, numbers_are_decimal_only)
{
	char out[8192];

	refused(2, "--hash-size '0x10': not a decimal integer", true,
		"train --data train.txt --hash-size 0x10");
	/* in octal, 010 is 8 and the bottom MLP (ending at 10) would not
	 * end at the embedding size */
	cr_assert_eq(cmd_run(out, sizeof(out),
			     "cd %s && %s train --data train.txt --emb-dim 010 "
			     "--bottom 13-16-10 --top 16-1 --hash-size 010 "
			     "--progress 0 2>&1",
			     dir, SS_COMMAND),
		     0, "%s", out);
}

Test(cmd_bad_input, a_job_key_that_is_not_a_number)
{
	setenv("SS_JOB_KEY", "abc", 1);
	refused(2, "SS_JOB_KEY 'abc': not a decimal integer", true,
		"train " MODEL " --data train.txt");
	unsetenv("SS_JOB_KEY");
	refused(2, "--job-key 'xyz'", true,
		"train " MODEL " --data train.txt --job-key xyz");
	/* 0 is shm-clean's "any job": no job has it */
	refused(2, "--job-key '0': out of range", true,
		"train " MODEL " --data train.txt --job-key 0");
}

Test(cmd_bad_input, outputs_checked_before_training)
{
	refused(1, "--test 'nope.txt': No such file", true,
		"train " MODEL " --data train.txt --test nope.txt");
	refused(1, "--save '/nonexistent/x': its folder is not there", true,
		"train " MODEL " --data train.txt --save /nonexistent/x");
	refused(2, "--save '.': it is a folder", true,
		"train " MODEL " --data train.txt --save .");
	refused(1, "--load 'nope.ckpt': No such file", true,
		"train " MODEL " --data train.txt --load nope.ckpt");
	/* a rank's file that a job of fewer ranks never saved */
	refused(1, "a job of fewer ranks saved fewer (re-divide them", true,
		"train " MODEL " --data train.txt --load 'nope.{rank}' "
		"--rank 1 --peers 127.0.0.1:1,127.0.0.1:2 --transport shm");
}

Test(cmd_bad_input, hostfile_ports_out_of_range)
{
	static const char *const lines[] = { "a:70000\nb\n", "a:\nb\n",
					     ":abc\nb\n", "a:abc\nb\n" };

	for (size_t i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		write_file("hosts", lines[i], strlen(lines[i]));
		refused(2, "address of rank 0", true,
			"train " MODEL " --data train.txt --hostfile hosts "
			"--rank 1 --transport shm");
	}
}

Test(cmd_bad_input, the_same_address_twice)
{
	refused(2, "ranks 0 and 2 at 'a:7001': two ranks have the same", true,
		"train " MODEL " --data train.txt --peers a:7001,b:7001,a:7001 "
		"--rank 1 --transport shm");
	/* a bare IPv6 address is refused (it was host "::" on port 1) */
	refused(2, "address of rank 0 '::1': an IPv6 address without brackets",
		true,
		"train " MODEL " --data train.txt --peers ::1,b:7001 "
		"--rank 1 --transport shm");
	/* rank 0's tables (port + 2 ranks) at rank 1's address: both
	 * failed to connect, one told "model layout differs" */
	refused(2,
		"table address of rank 0, '127.0.0.1:7802' (its port + 2 "
		"ranks), and rank 1: it is another rank's address",
		true,
		"train " MODEL " --data train.txt --peers "
		"127.0.0.1:7800,127.0.0.1:7802 --rank 1 --transport shm");
	/* --peers hosts without ports take --port, as a host file's do */
	refused(2, "ranks 0 and 2 at 'a:7006': two ranks have the same", true,
		"train " MODEL " --data train.txt --peers a,b:7001,a "
		"--port 7006 --rank 1 --transport shm");
	/* a host file that names a host twice without ports */
	write_file("hosts", "a\nb\na\n", 6);
	refused(2, "ranks 0 and 2 at 'a:7005': two ranks have the same", true,
		"train " MODEL " --data train.txt --hostfile hosts --port 7005 "
		"--rank 1 --transport shm");
}

/* A bit flipped in a checkpoint's parameter count: corruption, not
 * "another model layout" (which would send the user to the options). */
Test(cmd_bad_input, a_flipped_checkpoint_count_is_corruption)
{
	char path[256], out[8192];
	unsigned char b;
	FILE *f;

	cr_assert_eq(cmd_run(out, sizeof(out),
			     "cd %s && %s train " MODEL " --data train.txt "
			     "--progress 0 --save m.ckpt 2>&1",
			     dir, SS_COMMAND),
		     0, "%s", out);
	snprintf(path, sizeof(path), "%s/m.ckpt", dir);
	f = fopen(path, "r+b");
	cr_assert(f);
	cr_assert_eq(fseek(f, 24 + 2, SEEK_SET), 0); /* the count's 3rd byte */
	cr_assert_eq(fread(&b, 1, 1, f), 1);
	b ^= 0x04;
	cr_assert_eq(fseek(f, 24 + 2, SEEK_SET), 0);
	cr_assert_eq(fwrite(&b, 1, 1, f), 1);
	fclose(f);
	refused(1, "the file is corrupted", true,
		"train " MODEL " --data train.txt --load m.ckpt");
}

/* A model larger than /dev/shm is refused at once, saying what it needs
 * and what there is (it died of SIGBUS at the first touch).  A rank
 * alone, with no peer to map its replica, keeps it in private memory and
 * trains (it was refused: a container's /dev/shm is 64 MiB).  A /dev/shm
 * of 16 MiB in a mount namespace of its own; skipped where we may not. */
Test(cmd_bad_input, a_model_larger_than_dev_shm)
{
	char out[8192];
	int rc;

	rc = cmd_run(out, sizeof(out),
		     "unshare -m sh -c 'mount -t tmpfs -o size=16m tmpfs "
		     "/dev/shm' 2>&1 && echo can");
	if (rc != 0 || !strstr(out, "can"))
		cr_skip_test("no mount namespace here (needs root): %s", out);
	/* over shm, the total before any object: the first object's need
	 * alone was said, so a /dev/shm grown to it failed at the next;
	 * and the job's, all of whose ranks are on this machine */
	rc = cmd_run(
		out, sizeof(out),
		"cd %s && unshare -m sh -c 'mount -t tmpfs -o size=16m "
		"tmpfs /dev/shm && for h in 1000000 4000; do %s train "
		"--data "
		"train.txt --emb-dim 4 --bottom 13-16-4 --top 16-1 "
		"--hash-size $h --peers 127.0.0.1:%d,127.0.0.1:%d "
		"--rank 0 --transport shm --tables replicated "
		"--connect-timeout 2; echo status $?; ls /dev/shm | wc -l; "
		"done; %s train --data train.txt --emb-dim 4 --bottom "
		"13-16-4 --top 16-1 --hash-size 200000 --threads 1; "
		"echo alone $?; ls /dev/shm | wc -l' 2>&1",
		dir, SS_COMMAND, ranks_port_base(), ranks_port_base() + 1,
		SS_COMMAND);
	cr_assert_eq(rc, 0, "%s", out);
	cr_assert(strstr(out, "this rank's objects need 2380 MiB in all (its "
			      "replica and the sync layer's regions), "
			      "/dev/shm has 1"),
		  "%s", out);
	/* 8 MiB a rank fits, 16 for the two do not */
	cr_assert(strstr(out, "the 2 ranks' objects need 1"), "%s", out);
	cr_assert(strstr(out, "/dev/shm holds 16 MiB"), "%s", out);
	{
		const char *first = strstr(out, "status 1\n0\n");

		cr_assert(first && strstr(first + 1, "status 1\n0\n"),
			  "refused twice, no objects left: %s", out);
	}
	/* 21 MB of replica, and the sync layer's regions */
	cr_assert(strstr(out, "alone 0\n0\n"), "%s", out);
}

/*
 * BLIS_ARCH_TYPE asking for kernels this CPU cannot run: refused before
 * training, the variable, the kernels and the missing instruction set
 * named (before, BLIS ran them: SIGILL, exit 132, no word).  The first
 * family this BLIS has that this CPU cannot run is asked for: on every
 * CPU of today at least knl's AVX-512PF (Xeon Phi's) is missing.  doctor
 * calls it a problem.
 */
Test(cmd_bad_input, blis_kernels_beyond_the_cpu)
{
	const struct ss__blas_kernels *k = NULL, *all;
	char expect[256], names[128], id[16];
	size_t n;

	all = ss__blas_kernels(&n);
	for (size_t i = 0; i < n && !k; i++)
		if (all[i].needs & ~ss__cpu_isa())
			k = &all[i];
	if (!k)
		cr_skip_test("this CPU runs all of this BLIS's kernels");
	snprintf(id, sizeof(id), "%d", k->id);
	cr_assert_eq(setenv("BLIS_ARCH_TYPE", id, 1), 0);
	snprintf(
		expect, sizeof(expect),
		"BLIS_ARCH_TYPE=%d (%s kernels): this CPU lacks %s", k->id,
		k->name,
		ss__isa_names(k->needs & ~ss__cpu_isa(), names, sizeof(names)));
	refused(2, expect, true, "train " MODEL " --data train.txt");
	refused(2, "hint: unset it to let BLIS choose, or give the number",
		true, "train " MODEL " --data train.txt");
	refused(1, expect, false, "doctor");
	/* a name is not taken: BLIS would read it as 0 */
	cr_assert_eq(setenv("BLIS_ARCH_TYPE", "haswell", 1), 0);
	refused(2, "BLIS_ARCH_TYPE='haswell': not a number", true,
		"train " MODEL " --data train.txt");
}
