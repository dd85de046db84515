// SPDX-License-Identifier: BSD-2-Clause
/* shadowsync launch: ranks on one machine, a failing rank, its refusals. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmd.h"
#include "ranks.h"

/* on tmpfs: the ranks here write logs and checkpoints while others wait */
static char dir[] = CMD_TMPFS_DIR("launch");

#define MODEL "--emb-dim 4 --bottom 13-16-4 --top 16-1 --hash-size 2000"

static void setup(void)
{
	strcpy(dir, CMD_TMPFS_DIR("launch"));
	cmd_data_dir(dir);
}

static void teardown(void)
{
	cmd_rm_dir(dir);
}

TestSuite(cmd_launch, .init = setup, .fini = teardown, .timeout = 120);

static int port(void)
{
	return ranks_port_base();
}

Test(cmd_launch, two_ranks_share_the_data_and_sum_up)
{
	char cmd[1024], out[8192];

	snprintf(cmd, sizeof(cmd),
		 "%s launch -n 2 --port %d --json -- train --data %s/train.txt "
		 "--test %s/test.txt " MODEL " --threads 1 --progress 0 2>&1",
		 SS_COMMAND, port(), dir, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	cr_assert(strstr(out, "{\"world\":2,\"transport\":\"shm\",\"failed\":0,"
			      "\"restarts\":0,\"examples\":6000,"),
		  "%s", out);
	cr_assert(strstr(out, "\"test_ne\":"), "%s", out);
	/* each rank's own summary, and its share of the data */
	cr_assert(strstr(out, "{\"rank\":0,\"world\":2,\"examples\":"), "%s",
		  out);
	cr_assert(strstr(out, "{\"rank\":1,\"world\":2,\"examples\":"), "%s",
		  out);
}

/*
 * --data-split dynamic (the default): ranks claim chunks of the file as
 * they go, and over 2 epochs every example is trained exactly twice in
 * all, whichever rank took it; the ranks' chunks add up to the file's.
 */
Test(cmd_launch, dynamic_data_trains_every_example_once_per_epoch)
{
	char cmd[1024], out[16384];
	const char *p;
	double chunks = 0;

	snprintf(
		cmd, sizeof(cmd),
		"%s launch -n 3 --port %d --json -- train --data %s/train.txt " MODEL
		" --threads 2 --oversubscribe --progress 0 --epochs 2 "
		"--chunk-size 16384 2>&1",
		SS_COMMAND, port() + 10, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	cr_assert(
		strstr(out, "\"failed\":0,\"restarts\":0,\"examples\":12000,"),
		"%s", out);
	for (p = strstr(out, "\"data_split\":\"dynamic\""); p;
	     p = strstr(p + 1, "\"data_split\":\"dynamic\""))
		chunks += cmd_json_number(p, "chunks");
	/* 2 epochs of the file in 16 KiB chunks */
	{
		struct stat st;
		char path[256];

		snprintf(path, sizeof(path), "%s/train.txt", dir);
		cr_assert_eq(stat(path, &st), 0);
		cr_assert_float_eq(
			chunks, 2.0 * (double)((st.st_size + 16383) / 16384),
			0.5, "%g chunks trained in all\n%s", chunks, out);
	}
}

/*
 * Ranks that finish far apart: rank 0 trains 1 epoch of its share, rank 1
 * 40.  Rank 0 waits for rank 1 once, the barrier's bounded wait (4 x the
 * round timeout + 5 s), then finishes without it and leaves; rank 1 goes
 * on alone.  Both succeed, and each saves and evaluates.  (Before, rank 0
 * gave up on its final barrier and exited 1 with neither.)
 */
Test(cmd_launch, ranks_that_finish_far_apart_both_save_and_evaluate)
{
	char cmd[4096], out[16384];
	int p = port() + 14;

	snprintf(
		cmd, sizeof(cmd),
		"T='%s train --data %s/train.txt --test %s/test.txt " MODEL
		" --threads 1 --progress 0 --json --transport shm "
		"--data-split static --peers 127.0.0.1:%d,127.0.0.1:%d "
		"--save %s/m{rank}.ssck'; "
		"( $T --rank 0 --epochs 1 > %s/o0 2>&1; echo rc0=$? > %s/r0 ) & "
		"( $T --rank 1 --epochs 40 > %s/o1 2>&1; echo rc1=$? > %s/r1 ); "
		"wait; cat %s/r0 %s/r1 %s/o0 %s/o1; ls %s",
		SS_COMMAND, dir, dir, p, p + 1, dir, dir, dir, dir, dir, dir,
		dir, dir, dir, dir);
	cmd_run(out, sizeof(out), "%s", cmd);
	cr_assert(strstr(out, "rc0=0"), "%s", out);
	cr_assert(strstr(out, "rc1=0"), "%s", out);
	cr_assert(strstr(out, "m0.ssck") && strstr(out, "m1.ssck"), "%s", out);
	{
		const char *r0 = strstr(out, "{\"rank\":0,"),
			   *r1 = strstr(out, "{\"rank\":1,");

		cr_assert(r0 && r1, "%s", out);
		/* its half once, the other half 40 times */
		cr_assert_float_eq(cmd_json_number(r0, "examples") +
					   cmd_json_number(r1, "examples") / 40,
				   6000, 1e-6, "%s", out);
		cr_assert(cmd_json_number(r0, "test_ne") > 0, "%s", out);
		cr_assert(cmd_json_number(r1, "test_ne") > 0, "%s", out);
	}
}

/* --tables local: the shadow synchronizes the dense MLPs only (6005 of
 * this model's floats: bottom 292, top 5713), the tables stay each rank's. */
Test(cmd_launch, dense_only_sync_synchronizes_the_mlps)
{
	char cmd[1024], out[8192];

	snprintf(
		cmd, sizeof(cmd),
		"%s launch -n 2 --port %d --json -- train --data %s/train.txt " MODEL
		" --threads 1 --progress 0 --sync ma --tables local 2>&1",
		SS_COMMAND, port() + 8, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	cr_assert(strstr(out, "\"synced_floats\":6005"), "%s", out);
	cr_assert(strstr(out, "\"failed\":0,"), "%s", out);
}

/*
 * A shadow thread capped at 1 round a second runs 1 or 2 while the
 * trainers run about 190 iterations (static halves of the data): each
 * rank says its replicas trained mostly apart, and names the cap.  Capped at 10 a second, with the gap bounded at 10
 * iterations, the trainers wait for rounds (counted), the ranks average
 * at least every 10 iterations, and neither warns.
 */
Test(cmd_launch, too_few_rounds_are_named_and_a_gap_bound_waits_for_them)
{
	char cmd[1024], out[16384];
	const char *at;
	int ranks = 0;

	snprintf(cmd, sizeof(cmd),
		 "%s launch -n 2 --port %d -- train --data %s/train.txt " MODEL
		 " --threads 1 --batch 16 --progress 0 --tables replicated "
		 "--data-split static --max-rounds-per-s 1 2>&1",
		 SS_COMMAND, port() + 30, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	for (int r = 0; r < 2; r++) {
		char want[64];

		snprintf(want, sizeof(want), "sync: rank %d: only ", r);
		at = strstr(out, want);
		cr_assert(at && strstr(at, " while its trainers ran") &&
				  strstr(at, "raise --max-rounds-per-s (1)"),
			  "%s", out);
	}
	snprintf(
		cmd, sizeof(cmd),
		"%s launch -n 2 --port %d --json -- train --data %s/train.txt " MODEL
		" --threads 1 --batch 16 --progress 0 --tables replicated "
		"--data-split static --max-rounds-per-s 10 --max-sync-gap 10 "
		"2>&1",
		SS_COMMAND, port() + 34, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	cr_assert_null(strstr(out, " while its trainers ran"), "%s", out);
	for (at = strstr(out, "{\"rank\":"); at;
	     at = strstr(at + 1, "{\"rank\":"), ranks++) {
		cr_assert_gt(cmd_json_number(at, "gap_waits"), 0, "%s", at);
		/* the mean over rounds, the last ones after training too */
		cr_assert_leq(cmd_json_number(at, "sync_gap"), 10, "%s", at);
	}
	cr_assert_eq(ranks, 2, "%s", out);
}

/*
 * --tables sharded: each rank holds about half the rows, the shadow
 * synchronizes the MLPs only, every gradient one rank sent the other
 * applied, none dropped, and both end on the same model (the final
 * exact average of the MLPs, the one copy of the tables), which learned.
 * The table endpoints listen on port + 2 and + 3.  Four epochs: one is
 * 24 steps a rank, and on a loaded machine a rank that ran most of them
 * before the other was scheduled barely moved from its first model (its
 * rows owned by the other rank not yet updated), and the final average
 * ended near the constant predictor (NE 0.97 to 1.01, 5 runs in 30).
 */
Test(cmd_launch, sharded_tables_are_held_once_and_every_gradient_applied)
{
	char cmd[1024], out[16384];
	const char *r[2];
	double rows = 26.0 * 2000 * 4 * 4 * 2; /* floats and accumulators */

	snprintf(cmd, sizeof(cmd),
		 "%s launch -n 2 --port %d --json -- train --data %s/train.txt "
		 "--test %s/train.txt " MODEL
		 " --threads 1 --progress 0 --sync ma --tables sharded "
		 "--data-split static --epochs 4 2>&1",
		 SS_COMMAND, port() + 16, dir, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	r[0] = strstr(out, "{\"rank\":0,");
	r[1] = strstr(out, "{\"rank\":1,");
	cr_assert(r[0] && r[1], "%s", out);
	for (int i = 0; i < 2; i++) {
		double bytes = cmd_json_number(r[i], "table_bytes");

		cr_assert(strstr(r[i], "\"tables\":\"sharded\""), "%s", r[i]);
		cr_assert(bytes > 0.45 * rows && bytes < 0.55 * rows,
			  "%g bytes of %g: %s", bytes, rows, r[i]);
		cr_assert_eq(cmd_json_number(r[i], "synced_floats"), 6005, "%s",
			     r[i]);
		cr_assert_eq(cmd_json_number(r[i], "grads_dropped"), 0, "%s",
			     r[i]);
		cr_assert_gt(cmd_json_number(r[i], "grads_pushed"), 0, "%s",
			     r[i]);
		cr_assert_eq(cmd_json_number(r[i], "grads_pushed"),
			     cmd_json_number(r[1 - i], "grads_applied"),
			     "%s\n%s", r[i], r[1 - i]);
		cr_assert_lt(cmd_json_number(r[i], "test_ne"), 0.97, "%s",
			     r[i]);
		/* the next rows read once a step is sent, none ahead */
		cr_assert_eq(cmd_json_number(r[i], "prefetch"), 0, "%s", r[i]);
	}
	cr_assert_float_eq(cmd_json_number(r[0], "test_ne"),
			   cmd_json_number(r[1], "test_ne"), 1e-6, "%s", out);
}

/* --prefetch exact: each step applied before the next rows are read (the
 * library's exactness is tested in test_table.c); the summary names it. */
Test(cmd_launch, prefetch_exact_is_taken_and_named)
{
	char out[16384];

	cr_assert_eq(cmd_run(out, sizeof(out),
			     "%s train --data %s/train.txt " MODEL
			     " --threads 1 --progress 0 --tables sharded "
			     "--prefetch exact 2>&1",
			     SS_COMMAND, dir),
		     0, "%s", out);
	cr_assert(strstr(out, "for rows (prefetch exact)"), "%s", out);
}

Test(cmd_launch, output_is_prefixed_by_rank)
{
	char cmd[1024], out[8192];

	snprintf(cmd, sizeof(cmd),
		 "%s launch -n 2 --port %d -- train --data %s/train.txt " MODEL
		 " --threads 1 --progress 0 --sync ma --verbose 2>&1",
		 SS_COMMAND, port() + 2, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	cr_assert(strstr(out, "[rank 0] "), "%s", out);
	cr_assert(strstr(out, "[rank 1] "), "%s", out);
	cr_assert(strstr(out, "launch: 2 ranks over shm, all succeeded"), "%s",
		  out);
}

/*
 * Runs `launch LAUNCH_ARGS -- train` on 400000 examples (big.txt, its
 * last 4000 also in held.txt) with MODEL, one thread and TRAIN_ARGS, and
 * kills rank @victim with SIGKILL once the shell condition @ready holds
 * in the data folder (NULL: once the victim has trained a second, its
 * first progress line: begun, whatever the machine's load; TRAIN_ARGS
 * then give --progress 1); @out gets "launch status N" and launch's
 * output without the ranks' progress lines (3 ranks' make 16 KiB in 40 s
 * under ASan, and the job's summary at the end would not fit).
 * The ranks run BLIS's generic kernels (BLIS_ARCH_TYPE=25), the kernels
 * these tests passed on before an AMD family 0x1a got skx: with skx, in
 * three make check runs of this session's ASan pass, the victim's first
 * progress line or --save-every checkpoint (the trigger) came only as
 * the others finished (at 12.8 s of a 12 s job, at 33 s of a 32 s one),
 * and the restarted rank found no one.  Not understood; alone, or beside
 * CPU hogs, they came at 1.4 to 2.1 s (and in 4 runs of the suite and
 * one make check of the next session, with skx).  The output gives the
 * kill's time and the victim's first two progress lines, as launch
 * passed them on: their "N s" says whether its progress thread woke on
 * time.
 * The folder is on tmpfs (CMD_TMPFS_DIR): on the disk, the kill came
 * after the others had finished (in one `make check` of ASan builds, and
 * 2 runs of 9 beside a writer of 150 MB files), since `out` and the
 * --save-every checkpoint the test watches waited behind an fsync, and
 * the restarted rank found no one to join.
 */
static void launch_and_kill_a_rank(char *out, size_t size, int p,
				   const char *launch_args,
				   const char *train_args, int victim,
				   const char *ready)
{
	char cmd[2048], progress[64];

	snprintf(progress, sizeof(progress),
		 "grep -q '^.rank %d. rank %d: ' out", victim, victim);
	snprintf(
		cmd, sizeof(cmd),
		"cd %s && %s gen-data --out big.txt --examples 400000 --cardinality 300 >/dev/null && "
		"tail -n 4000 big.txt > held.txt || exit 9; "
		"T0=$(date +%%s%%N); "
		"BLIS_ARCH_TYPE=25 %s launch %s --port %d -- train --data big.txt " MODEL
		" --threads 1 %s > out 2>&1 & L=$!; "
		"for i in $(seq 600); do %s && break; sleep 0.05; done; "
		"for i in $(seq 100); do V=$(pgrep -P $L -f -- '--rank %d --peers') "
		"&& break; sleep 0.05; done; "
		"if [ -n \"$V\" ]; then kill -KILL $V; else echo 'no victim to kill:'; "
		"ps -o pid,args --ppid $L; fi; "
		"echo \"victim killed $((($(date +%%s%%N) - T0) / 1000000)) ms "
		"after launch started\"; wait $L; "
		"echo \"launch status $? after $((($(date +%%s%%N) - T0) / 1000000)) ms\"; "
		"grep -m 2 '^.rank %d. rank %d: [0-9]* s: ' out; "
		"grep -v '^.rank [0-9]*. rank [0-9]*: [0-9]* s: ' out",
		dir, SS_COMMAND, SS_COMMAND, launch_args, p, train_args,
		ready ? ready : progress, victim, victim, victim);
	cmd_run(out, size, "%s", cmd);
}

/*
 * A rank killed from outside: launch stops the other one (which had far
 * more work left: ten epochs, stopped all the same) and exits 1, saying
 * which rank failed.
 */
Test(cmd_launch, a_failing_rank_stops_the_others)
{
	char out[8192];

	launch_and_kill_a_rank(out, sizeof(out), port() + 4, "-n 2",
			       "--progress 1 --epochs 10", 1, NULL);
	cr_assert(strstr(out, "launch status 1"), "%s", out);
	cr_assert(strstr(out, "rank 1 failed (killed by SIGKILL); stopping the "
			      "other ranks"),
		  "%s", out);
	/* launch stopped rank 0: not a failure of its own */
	cr_assert(strstr(out, "    0  stopped (SIGTERM)"), "%s", out);
	cr_assert(strstr(out, "FAILED"), "%s", out);
	/* no rank's summary: no totals, rather than "0 examples" */
	cr_assert(strstr(out, "job  no totals: no rank finished"), "%s", out);
}

/*
 * The same kill with --restarts 1: launch starts the rank again, it
 * rejoins the two that kept running (reading a live replica), and the job
 * succeeds.  Two epochs of the 400000 examples keep the others busy long
 * after the kill (on BLIS's generic kernels: see launch_and_kill_a_rank).
 */
Test(cmd_launch, a_failed_rank_is_started_again_and_rejoins, .timeout = 240)
{
	char out[16384];

	launch_and_kill_a_rank(out, sizeof(out), port() + 6,
			       "-n 3 --restarts 1 --json",
			       "--progress 1 --epochs 2", 2, NULL);
	cr_assert(strstr(out, "launch status 0"), "%s", out);
	cr_assert(strstr(out, "failed (killed by SIGKILL); starting it again "
			      "(restart 1 of 1)"),
		  "%s", out);
	cr_assert(strstr(out, "reseeded its replica from rank"), "%s", out);
	cr_assert(strstr(out, "\"failed\":0,\"restarts\":1,"), "%s", out);
	/*
	 * Data by chunks: the new process takes the next unclaimed chunk, so
	 * the chunks the dead one trained (its counts died with it) are not
	 * trained again, and the final processes' examples add up to less
	 * than the two epochs (by what it trained in its second or more: a
	 * third of the job's rate).  A static share would be trained whole
	 * again: 800000.
	 */
	{
		const char *job = strstr(out, "{\"world\":3");
		double ex = job ? cmd_json_number(job, "examples") : 0;

		cr_assert(ex < 800000 && ex > 400000,
			  "%g examples trained by the final processes\n%s", ex,
			  out);
	}
}

/*
 * Rank 0, which holds the chunk counter, killed and started again: the
 * new process counts from where the others are, not from the first
 * chunk.  The final processes' chunks (the dead one's are not counted)
 * add up to at most three epochs', 3 x 193 at most (64 a rank); a counter
 * from 0 gave the survivors every chunk again on top of those they had
 * (a 1-epoch job trained 1.5 times its file).  Three epochs keep the
 * others busy after a late kill (see launch_and_kill_a_rank).
 */
Test(cmd_launch, a_restarted_rank_0_counts_chunks_from_where_the_job_is,
     .timeout = 240)
{
	char out[16384];
	const char *job, *at;
	double chunks = 0;

	/* killed once rank 1 trains: in two ASan passes rank 0's own first
	 * progress line, the usual trigger, came only as the job ended */
	launch_and_kill_a_rank(out, sizeof(out), port() + 26,
			       "-n 3 --restarts 1 --json",
			       "--progress 1 --epochs 3", 0,
			       "grep -q '^.rank 1. rank 1: ' out");
	cr_assert(strstr(out, "launch status 0"), "%s", out);
	cr_assert(strstr(out, "rank 0 failed (killed by SIGKILL); starting "
			      "it again"),
		  "%s", out);
	job = strstr(out, "{\"world\":3");
	cr_assert_not_null(job, "%s", out);
	for (at = strstr(job, "\"chunks\":"); at;
	     at = strstr(at + 1, "\"chunks\":"))
		chunks += cmd_json_number(at, "chunks");
	cr_assert(chunks > 0 && chunks <= 3 * 193,
		  "%g chunks trained by the final processes\n%s", chunks, out);
}

/*
 * The owner of a shard killed mid-run (partial recovery): the others go
 * on, its rows served as last fetched and the gradients for it counted
 * as dropped; launch starts it again with --rejoin, and it takes its
 * rows from the checkpoint --save-every wrote (killed only once that
 * exists), the MLPs from the running ranks; the job finishes and
 * reports its held-out NE.  5 epochs, so that the others still run when
 * it comes back (on BLIS's generic kernels: see launch_and_kill_a_rank):
 * at 3, a quick run (100000 examples/s a rank) ended the job in 6 s, and
 * under the suite's load the kill came as it ended.
 */
Test(cmd_launch, a_killed_owner_rejoins_from_its_shard_checkpoint,
     .timeout = 240)
{
	char out[32768];
	const char *job;

	launch_and_kill_a_rank(out, sizeof(out), port() + 20,
			       "-n 3 --restarts 1 --json",
			       "--test held.txt --progress 1 --epochs 5 "
			       "--save ck.{rank} --save-every 1",
			       2, "[ -f ck.2 ]");
	cr_assert(strstr(out, "launch status 0"), "%s", out);
	cr_assert(strstr(out, "rank 2 failed (killed by SIGKILL); starting it "
			      "again (restart 1 of 1)"),
		  "%s", out);
	cr_assert(strstr(out, "rejoining: shard 2 of 3 from "), "%s", out);
	cr_assert(strstr(out, "the MLPs from the running ranks"), "%s", out);
	job = strstr(out, "{\"world\":3");
	cr_assert(job, "%s", out);
	cr_assert(strstr(job, "\"failed\":0,\"restarts\":1,"), "%s", out);
	cr_assert_gt(cmd_json_number(job, "test_ne"), 0, "%s", out);
	/* rank 0's gradients for the dead owner's rows, counted */
	cr_assert_gt(
		cmd_json_number(strstr(job, "{\"rank\":0,"), "grads_dropped"),
		0, "%s", out);
}

/*
 * The job's throughput is its examples over the slowest rank's training
 * time (not a sum of per-rank rates), and the per-rank rates are listed.
 */
Test(cmd_launch, throughput_is_examples_over_the_training_time)
{
	char cmd[1024], out[16384];
	double examples, seconds, rate, slowest = 0;
	const char *at;

	snprintf(cmd, sizeof(cmd),
		 "%s launch -n 2 --port %d --json -- train --data %s/train.txt "
		 "--test %s/test.txt " MODEL " --threads 1 --progress 0 2>&1",
		 SS_COMMAND, port() + 10, dir, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	examples = cmd_json_number(out, "examples");
	seconds = cmd_json_number(out, "seconds");
	rate = cmd_json_number(out, "examples_per_s");
	cr_assert_eq(examples, 6000, "%s", out);
	for (at = strstr(out, "{\"rank\":"); at;
	     at = strstr(at + 1, "{\"rank\":"))
		slowest = fmax(slowest, cmd_json_number(at, "seconds"));
	cr_assert_float_eq(seconds, slowest, 1e-3, "%s", out);
	cr_assert_float_eq(rate, examples / seconds, 0.1 + rate * 1e-3, "%s",
			   out);
	cr_assert(strstr(out, "\"rank_examples_per_s\":["), "%s", out);
}

/*
 * Ranks that end far apart are not averaged into one figure: rank 1
 * starts from a model trained on one example, rank 0 from one trained on
 * the whole file, neither synchronized (each its own whole model, tables
 * too): the summary reports rank 1's NE
 * as the job's and names it.
 */
Test(cmd_launch, the_worst_rank_is_named)
{
	char cmd[2048], out[16384];

	snprintf(
		cmd, sizeof(cmd),
		"T='%s'; D=%s; head -n 1 $D/train.txt > $D/one.txt && "
		"$T train --data $D/train.txt " MODEL
		" --sync none --progress 0 --save $D/m.0 >/dev/null 2>&1 && "
		"$T train --data $D/one.txt " MODEL
		" --sync none --progress 0 --save $D/m.1 >/dev/null 2>&1 && "
		"$T launch -n 2 --port %d -- train --data $D/one.txt --test $D/test.txt " MODEL
		" --sync none --tables replicated --threads 1 --progress 0 "
		"--load \"$D/m.{rank}\" 2>&1 && "
		"$T launch -n 2 --port %d --json -- train --data $D/one.txt --test $D/test.txt " MODEL
		" --sync none --tables replicated --threads 1 --progress 0 "
		"--load \"$D/m.{rank}\" 2>&1",
		SS_COMMAND, dir, port() + 12, port() + 14);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	cr_assert(strstr(out, "ranks disagree: rank 1 is worst, NE "), "%s",
		  out);
	cr_assert(strstr(out, "\"worst_rank\":1,"), "%s", out);
	cr_assert(strstr(out, "\"best_rank\":0,\"ranks_disagree\":true"), "%s",
		  out);
	cr_assert(strstr(out, " AUC  calib "), "%s", out);
}

/*
 * `launch -n 4 --json -- train` of @algo on @d's big/held files, into
 * @out; static data, so that both runs have the same rounds; the tables
 * replicated, so that the algorithms average the whole model, as the
 * defect below was found (sharded, they average the MLPs alone, and the
 * prefetched rows' staleness moved calibration by a few percent from
 * run to run).
 *
 * And every round whole, so that a run is the same on a loaded machine
 * as on an idle one.  With the default round timeout (5 s), ranks that
 * went without a CPU for longer were left out of rounds ("peer 0 left
 * out of round 1: no answer"), and the run ended elsewhere: in 10 runs
 * with a nice-0 CPU hog on CPU 0 (where launch binds ranks 0 and 1), 1
 * to 4 rounds a rank were partial, and S-BMUF ended at NE 0.7033 to
 * 0.7131 and calibration 1.0449 to 1.1007 (one past the bound, as a
 * 1.1010 once failed the suite), where a run with whole rounds ends at
 * 0.7123 and 1.0658 every time.  No rank here fails, and launch would
 * stop them all if one did, so a round waits for a slow rank as long as
 * the test may run (its 120 s), and the premise is checked.
 */
static void four_ranks_foreground(char *out, size_t size, int p,
				  const char *algo)
{
	const char *at;

	cr_assert_eq(
		cmd_run(out, size,
			"%s launch -n 4 --port %d --json -- train --data %s/big.txt "
			"--test %s/held.txt --emb-dim 8 --bottom 13-32-8 --top 64-1 "
			"--hash-size 2000 --threads 1 --optimizer adagrad --lr 0.02 "
			"--mode foreground --sync-every 5 --sync %s --progress 0 "
			"--data-split static --tables replicated "
			"--round-timeout-ms 120000 2>&1",
			SS_COMMAND, p, dir, dir, algo),
		0, "%s", out);
	for (at = strstr(out, "{\"rank\":"); at;
	     at = strstr(at + 1, "{\"rank\":"))
		cr_assert_eq(cmd_json_number(at, "rounds_partial"), 0,
			     "%s: a rank was left out of a round: %s", algo,
			     out);
}

/*
 * S-BMUF does what it is for: four ranks trained with it end no worse
 * than with S-MA after the same rounds, and on one model whose click rate
 * is right (every rank's calibration within 0.9 to 1.1).  With a w_g on
 * every rank and Nesterov counted from w_g, it ended at NE 0.7289 against
 * S-MA's 0.7075, calibration 1.16.  300 s: its rounds wait up to 120 s
 * for a starved rank; starved at nice 19 beside a CPU hog, a run took
 * 87 to 119 s (2 to 3 s otherwise).
 */
Test(cmd_launch, bmuf_trains_as_well_as_ma_in_as_many_rounds, .timeout = 300)
{
	char ma[16384], bmuf[16384];
	const char *at;
	double ne_ma, ne_bmuf;
	int ranks = 0;

	cr_assert_eq(
		cmd_run(ma, sizeof(ma),
			"%s gen-data --out %s/big.txt --examples 40000 --seed 3 && "
			"%s gen-data --out %s/held.txt --examples 10000 --seed 3 --stream 1",
			SS_COMMAND, dir, SS_COMMAND, dir),
		0, "%s", ma);
	four_ranks_foreground(ma, sizeof(ma), port() + 10, "ma");
	four_ranks_foreground(bmuf, sizeof(bmuf), port() + 12, "bmuf");
	ne_ma = cmd_json_number(ma, "test_ne");
	ne_bmuf = cmd_json_number(bmuf, "test_ne"); /* the worst rank's */
	fprintf(stderr,
		"4 ranks, 16 foreground rounds: S-MA NE %.4f, S-BMUF %.4f\n",
		ne_ma, ne_bmuf);
	cr_assert_eq(cmd_json_number(ma, "rounds"),
		     cmd_json_number(bmuf, "rounds"), "%s\n%s", ma, bmuf);
	/*
	 * No worse: within 0.5 % (the defect above was 3 %).  The runs are
	 * not bit-for-bit repeatable (ranks end apart), and 0.1 % failed once
	 * in a clean make check: 0.7145 against 0.7122.
	 */
	cr_assert_leq(ne_bmuf, ne_ma * 1.005, "S-BMUF NE %f, S-MA %f", ne_bmuf,
		      ne_ma);
	for (at = strstr(bmuf, "{\"rank\":"); at;
	     at = strstr(at + 1, "{\"rank\":"), ranks++) {
		double cal = cmd_json_number(at, "test_calibration");

		cr_assert(cal >= 0.9 && cal <= 1.1, "calibration %f: %s", cal,
			  at);
	}
	cr_assert_eq(ranks, 4, "%s", bmuf);
}

Test(cmd_launch, refuses_what_it_sets_itself_and_bad_options)
{
	static const struct {
		const char *args, *says;
	} cases[] = {
		{ "-- train --data x", "-n: it is required" },
		{ "-n 0 -- train --data x", "--ranks" },
		{ "-n 2 -- train --data x --rank 1", "train option --rank" },
		{ "-n 2", "launch: nothing to run" },
		{ "-n 2 -- train --data x --peers a:1",
		  "train option --peers" },
		{ "-n 2 -- train --data x --transport shm",
		  "train option --transport: launch sets it for "
		  "each rank" },
		/* shortened, as train's getopt_long would take them */
		{ "-n 2 -- train --data x --trans verbs",
		  "train option --transport (--trans)" },
		{ "-n 2 -- train --data x --ran=5",
		  "train option --rank (--ran)" },
		{ "-n 2 -- train --data x --hostf h",
		  "train option --hostfile" },
		{ "-n 2 -- train --data x --port 9000",
		  "give it to launch, before --" },
		{ "-n 2 -- train --data x --job-began 1700000000",
		  "train option --job-began: launch sets it" },
		{ "-n 33 --port 65471 -- train --data x",
		  "--port 65471 with -n 33: the ranks' ports would pass 65535" },
		{ "-n 2 -- gen-data --out x", "launch runs 'train'" },
		{ "-n 2 -- no-such-program-here x",
		  "'no-such-program-here' after --: no such program on PATH" },
		{ "-n 2 -- ./no/such/file", "'./no/such/file' after --" },
		{ "-n 2 -- /tmp", "'/tmp' after --: Is a directory" },
		{ "-n 2 --transport ib -- train", "--transport" },
		{ "-n 2 --bogus -- train", "unknown option" },
		{ "-n 2 --restarts -1 -- train --data x", "--restarts" },
		{ "--peers a:1,b:1 -- train --data x",
		  "--peers and --rank go together" },
		{ "--rank 1 -- train --data x",
		  "--peers and --rank go together" },
		{ "--peers a:1,b:1 --rank 2 -- train --data x",
		  "--rank 2 (--peers names 2 ranks): there is no such rank" },
		{ "--peers a:1,b:1 --rank 0 --port 7000 -- train --data x",
		  "leave out -n, --host and --port" },
	};
	char cmd[512], out[4096];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(cmd, sizeof(cmd), "%s launch %s 2>&1", SS_COMMAND,
			 cases[i].args);
		cr_expect_eq(cmd_run(out, sizeof(out), "%s", cmd), 2, "%s: %s",
			     cases[i].args, out);
		cr_expect(strstr(out, cases[i].says), "%s: wanted '%s' in: %s",
			  cases[i].args, cases[i].says, out);
	}
	/* a rank that refuses its options is not started again for it (it
	 * was, --restarts times, refused each time) */
	snprintf(cmd, sizeof(cmd),
		 "%s launch -n 2 --restarts 2 -- train --data x --bottom 13-x "
		 "2>&1",
		 SS_COMMAND);
	cr_expect_eq(cmd_run(out, sizeof(out), "%s", cmd), 1, "%s", out);
	cr_expect(strstr(out, "its options were refused): not started again"),
		  "%s", out);
	cr_expect(!strstr(out, "starting it again"), "%s", out);
}

/*
 * A rank's JSON summary longer than 4 KiB (a job of some thousand ranks
 * has a figure per peer in it) is kept whole for the job's summary, not
 * passed on in pieces and lost.  A long BLIS_ARCH_TYPE, which the
 * summary repeats, makes one with one rank: 6000 zeros, then 25, BLIS's
 * generic kernels, which every CPU runs (BLIS reads 0000...025 as 25).
 */
Test(cmd_launch, a_summary_longer_than_4_kib_is_kept)
{
	char out[32768];

	cr_assert_eq(cmd_run(out, sizeof(out),
			     "BLIS_ARCH_TYPE=$(printf '0%%.0s' $(seq 6000))25 "
			     "%s launch -n 1 --port %d --json -- train "
			     "--data %s/train.txt " MODEL
			     " --threads 1 --progress 0 2>&1",
			     SS_COMMAND, port(), dir),
		     0, "%.2000s", out);
	cr_assert(!strstr(out, "[rank 0] {"), "passed on in pieces: %.2000s",
		  out);
	cr_assert_eq(cmd_json_number(out, "examples"), 6000, "%.2000s", out);
}

/*
 * Starting fails part way (no descriptors left for a rank's pipes): the
 * ranks that started are stopped, those that did not are shown as not
 * started, and the claims launch took for them are removed from
 * /dev/shm (they were left behind).
 */
Test(cmd_launch, a_failed_start_leaves_no_claims)
{
	char out[8192];
	int p = port();

	cmd_run(out, sizeof(out),
		"cd %s && sh -c 'B=$(ls /proc/self/fd | wc -l); "
		"ulimit -n $((B + 16)); %s launch -n 8 --port %d -- train "
		"--data nonexistent.txt 2>&1'; echo \"status $?\"; "
		"for i in $(seq 0 15); do ls /dev/shm/ss-127.0.0.1:$((%d + i))-* "
		"2>/dev/null; done",
		dir, SS_COMMAND, p, p);
	cr_assert(strstr(out, "Too many open files"), "%s", out);
	cr_assert(strstr(out, "not started"), "%s", out);
	cr_assert(strstr(out, "status 1\n"), "%s", out);
	cr_assert(!strstr(out, "/dev/shm/"), "left behind:\n%s", out);
}

/*
 * Hosts lost and ranks restarted: three launches of one rank each (a job
 * over hosts; BLIS's generic kernels, as launch_and_kill_a_rank says).  Rank 2's launch and rank dies for good (its host lost);
 * once ranks 0 and 1 go on without it, rank 1 is killed and its launch
 * starts it again: it gives up on rank 2 at the connect timeout (2 s),
 * rejoins rank 0, and both finish.  Before, its connect waited for every
 * peer, failed, and its launch with it.  The file at its --save path, an
 * earlier job's (a checkpoint's magic, then what no load takes), older
 * than the job, is left alone: before, it was loaded as the rank's own
 * shard.
 */
Test(cmd_launch, a_restarted_rank_rejoins_without_a_dead_peer, .timeout = 300)
{
	char cmd[4096], out[16384];
	int p = port() + 40;

	snprintf(
		cmd, sizeof(cmd),
		"cd %s && %s gen-data --out lost.txt --examples 400000 "
		"--cardinality 300 >/dev/null || exit 9; export BLIS_ARCH_TYPE=25; "
		"printf 'SSCKPT\\0\\0 of an earlier job' > ck.1 && "
		"touch -d '-1 hour' ck.1; "
		"P=127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d; "
		"T='train --data lost.txt " MODEL " --threads 1 --progress 1 "
		"--epochs 2 --connect-timeout 2 --save ck.{rank}'; "
		"%s launch --peers $P --rank 0 -- $T > out0 2>&1 & L0=$!; "
		"%s launch --peers $P --rank 1 --restarts 1 -- $T > out1 2>&1 & "
		"L1=$!; "
		"%s launch --peers $P --rank 2 -- $T > out2 2>&1 & L2=$!; "
		"for i in $(seq 1200); do grep -q '^.rank 2. rank 2: ' out2 && "
		"break; sleep 0.05; done; "
		"kill -KILL $L2 $(pgrep -P $L2); "
		"for i in $(seq 1200); do grep -q 'rank 1 goes on with 2 members' "
		"out1 && break; sleep 0.05; done; "
		"kill -KILL $(pgrep -P $L1); "
		"wait $L0; echo \"launch 0 status $?\"; wait $L1; "
		"echo \"launch 1 status $?\"; cat out1; grep -v ' s: ' out0; "
		"for a in %d %d; do %s shm-clean --address 127.0.0.1:$a "
		">/dev/null; done", /* rank 2's endpoints, sync and tables */
		dir, SS_COMMAND, p, p + 10, p + 20, SS_COMMAND, SS_COMMAND,
		SS_COMMAND, p + 20, p + 23, SS_COMMAND);
	cmd_run(out, sizeof(out), "%s", cmd);
	cr_assert(strstr(out, "launch 0 status 0"), "%s", out);
	cr_assert(strstr(out, "launch 1 status 0"), "%s", out);
	cr_assert(strstr(out, "rank 1 failed (killed by SIGKILL); starting it "
			      "again"),
		  "%s", out);
	cr_assert(strstr(out, "failed: no answer within 2000 ms of our partial "
			      "connect"),
		  "%s", out);
	cr_assert(strstr(out, "rank 1 starts while rank 0 runs: joining"), "%s",
		  out);
	cr_assert(strstr(out, "    1  exit 0, restarted 1x"), "%s", out);
	/* the killed process's examples are in no summary: said so */
	cr_assert(strstr(out, "a restarted rank's count is its last process's"),
		  "%s", out);
	/* not the earlier job's checkpoint at its --save path */
	cr_assert(strstr(out, "rejoining: not loading ck.1: it was written "),
		  "%s", out);
	cr_assert(strstr(out, "rejoining: no checkpoint of shard 1 at ck.1 "
			      "from this job"),
		  "%s", out);
}

/*
 * A job over hosts: one launch per rank, each given the whole address
 * list (here two on this machine over shm); each runs its own rank, and
 * they agree on the job key without being told one.
 */
Test(cmd_launch, one_rank_of_a_job_over_hosts_per_launch)
{
	char cmd[1024], out[8192], other[8192];
	FILE *bg;

	snprintf(cmd, sizeof(cmd),
		 "%s launch --peers 127.0.0.1:%d,127.0.0.1:%d --rank 1 -- "
		 "train --data %s/train.txt " MODEL
		 " --threads 1 --progress 0 2>&1",
		 SS_COMMAND, port() + 20, port() + 21, dir);
	bg = popen(cmd, "r");
	cr_assert(bg);
	snprintf(cmd, sizeof(cmd),
		 "%s launch --peers 127.0.0.1:%d,127.0.0.1:%d --rank 0 -- "
		 "train --data %s/train.txt " MODEL
		 " --threads 1 --progress 0 2>&1",
		 SS_COMMAND, port() + 20, port() + 21, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	other[fread(other, 1, sizeof(other) - 1, bg)] = '\0';
	cr_assert_eq(pclose(bg), 0, "%s", other);
	cr_assert(strstr(out, "launch: rank 0 of the job at 127.0.0.1:"), "%s",
		  out);
	cr_assert(strstr(other, "launch: rank 1 of the job at 127.0.0.1:"),
		  "%s", other);
	/* its table's row is rank 1's, the job's number, not launch's 0 */
	cr_assert(strstr(other, "\n    1  exit 0 "), "%s", other);
	cr_assert(strstr(out, "rounds/s"), "%s", out);
}

Test(cmd_launch, help_names_every_option)
{
	char cmd[256], out[4096];

	snprintf(cmd, sizeof(cmd), "%s launch --help", SS_COMMAND);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0);
	cr_assert(strstr(out, "--ranks") && strstr(out, "--transport") &&
			  strstr(out, "--port") && strstr(out, "--timeout") &&
			  strstr(out, "--restarts") && strstr(out, "--json"),
		  "%s", out);
}

/*
 * launch killed outright: its ranks die with it (PR_SET_PDEATHSIG), and
 * remove their shm objects as they go (their output pipes close before
 * the death signal comes: a log line written then raised SIGPIPE, which
 * killed a rank outright in two runs of five).
 */
Test(cmd_launch, ranks_do_not_outlive_launch)
{
	char cmd[2048], out[8192];
	int p = port() + 6; /* ranks p, p + 1; tables p + 2, p + 3 */

	snprintf(
		cmd, sizeof(cmd),
		"{ %s launch -n 2 --port %d -- train --data %s/train.txt " MODEL
		" --threads 1 --progress 0 --epochs 10000 >/dev/null 2>&1 & }; "
		"L=$!; "
		"for i in $(seq 100); do "
		"  [ $(pgrep -P $L | wc -l) = 2 ] && break; sleep 0.1; "
		"done; R=$(pgrep -P $L | tr '\\n' ' '); echo \"ranks $R\"; "
		/* both have made their objects (and can remove them) */
		"for i in $(seq 600); do "
		"  [ -e /dev/shm/ss-127.0.0.1:%d-ctl ] && "
		"  [ -e /dev/shm/ss-127.0.0.1:%d-ctl ] && break; sleep 0.05; "
		"done; kill -KILL $L; "
		/* A zombie is dead; reaping it is up to whoever inherited it.
		 * 10 s: a rank under ASan in a loaded make check took over
		 * 1 s to unmap its memory and go. */
		"for i in $(seq 100); do A=; for p in $R; do "
		"  S=$(ps -o stat= -p $p); "
		"  case \"$S\" in ''|Z*) ;; *) A=\"$A alive $p $S\";; esac; "
		"done; [ -z \"$A\" ] && break; sleep 0.1; done; "
		"echo \"$A\"; echo left $(ls /dev/shm | "
		"grep -cE '^ss-127\\.0\\.0\\.1:(%d|%d|%d|%d)-')",
		SS_COMMAND, p, dir, p, p + 1, p, p + 1, p + 2, p + 3);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	cr_assert(strstr(out, "ranks ") && !strstr(out, "ranks \n"), "%s", out);
	cr_assert_null(strstr(out, "alive"), "%s", out);
	cr_assert(strstr(out, "left 0\n"), "shm objects left: %s", out);
}

/* With two cores or more, two ranks plan within different cores. */
Test(cmd_launch, bind_spread_gives_each_rank_its_own_cores)
{
	char cmd[1024], out[8192];
	const char *r0, *r1;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2)
		cr_skip_test("one CPU: nothing to spread");
	snprintf(cmd, sizeof(cmd),
		 "%s launch -n 2 --port %d -- train --data %s/train.txt " MODEL
		 " --threads 1 --progress 0 --sync none --verbose 2>&1",
		 SS_COMMAND, port() + 8, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	r0 = strstr(out, "[rank 0] ");
	r1 = strstr(out, "[rank 1] ");
	cr_assert(r0 && r1, "%s", out);
	r0 = strstr(out, "planning within CPUs ");
	cr_assert_not_null(r0, "%s", out);
	r1 = strstr(r0 + 1, "planning within CPUs ");
	cr_assert_not_null(r1, "%s", out);
	/* the two lists differ */
	cr_assert_neq(strncmp(r0, r1, strcspn(r0, ",\n")), 0, "%s", out);
}

/*
 * A program of the user's under launch (the Python package's way): each
 * rank finds its rank, the job's peers, transport and key in its
 * environment, and its {"rank": line counts in the job's summary as
 * train's does (the job's examples over the slowest rank's seconds, the
 * worst rank's NE).  Its own arguments are its own: a --job among them
 * is not train's --job-key (the key is still set).
 */
Test(cmd_launch, a_program_of_the_users_gets_its_rank_and_peers)
{
	char out[8192];

	cr_assert_eq(
		cmd_run(out, sizeof(out),
			"%s launch -n 3 --port %d --json -- sh -c 'echo "
			"\"{\\\"rank\\\":$SS_RANK,\\\"examples\\\":10,"
			"\\\"seconds\\\":$((SS_RANK + 1)),"
			"\\\"test_ne\\\":0.8$SS_RANK}\"; "
			"echo \"$SS_RANK/$SS_WORLD $SS_PEERS $SS_TRANSPORT "
			"key${SS_JOB_KEY:+ set}\"' sh --job x 2>&1",
			SS_COMMAND, port()),
		0, "%s", out);
	cr_assert(strstr(out, "[rank 2] 2/3 127.0.0.1:"), "%s", out);
	cr_assert(strstr(out, " shm key set"), "%s", out);
	cr_assert(strstr(out, "\"examples\":30,\"seconds\":3.000,"
			      "\"examples_per_s\":10.0,"),
		  "%s", out);
	cr_assert(strstr(out, "\"test_ne\":0.820000,"), "%s", out);
}

/*
 * The shadowsync command itself as the program (`-- shadowsync train`, not
 * launch's own `-- train`): train finds its rank and peers in launch's
 * environment (SS_RANK, SS_WORLD, SS_PEERS) as in any launcher's, and
 * the two ranks train one job, not two worlds of one.
 */
Test(cmd_launch, the_command_as_a_program_trains_one_job)
{
	char out[16384];

	cr_assert_eq(cmd_run(out, sizeof(out),
			     "%s launch -n 2 --port %d --json -- %s train "
			     "--data %s/train.txt " MODEL " --threads 1 "
			     "--progress 0 --json 2>&1",
			     SS_COMMAND, port(), SS_COMMAND, dir),
		     0, "%s", out);
	cr_assert(strstr(out, "{\"rank\":1,\"world\":2,"), "%s", out);
	cr_assert(strstr(out, "\"failed\":0,\"restarts\":0,\"examples\":6000,"),
		  "%s", out);
}
