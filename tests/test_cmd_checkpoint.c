// SPDX-License-Identifier: BSD-2-Clause
/* train --save/--load: resuming is exact, bad checkpoints are refused. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmd.h"
#include "ranks.h"

/* on tmpfs: beside a disk writer this suite's fsyncs took 71 s of its
 * 120 (10 s without) */
static char dir[] = CMD_TMPFS_DIR("ckcmd");

#define MODEL "--emb-dim 4 --bottom 13-16-4 --top 16-1 --hash-size 2000"
#define TRAIN MODEL " --threads 1 --sync none --progress 0 --batch 128"

/* 6400 and 1280 examples: whole batches, so that one run over both files
 * takes the same steps as a run over the first and a resumed one over the
 * second. */
static void setup(void)
{
	char cmd[1024];

	strcpy(dir, CMD_TMPFS_DIR("ckcmd"));
	cr_assert_not_null(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd),
		 "cd %s && G='%s gen-data --cardinality 300' && "
		 "$G --out a.txt --examples 6400 >/dev/null && "
		 "$G --out b.txt --examples 1280 --stream 2 >/dev/null && "
		 "$G --out test.txt --examples 1000 --stream 1 >/dev/null && "
		 "cat a.txt b.txt > ab.txt",
		 dir, SS_COMMAND);
	cr_assert_eq(system(cmd), 0);
}

static void teardown(void)
{
	cmd_rm_dir(dir);
}

TestSuite(cmd_checkpoint, .init = setup, .fini = teardown, .timeout = 120);

/* Runs a shell command in the test folder, $S the command. */
#define run(out, size, fmt, ...)                                     \
	cmd_run(out, size, "cd %s && S=%s && " fmt, dir, SS_COMMAND, \
		##__VA_ARGS__)

/* A run over a.txt then a resumed one over b.txt against one over both:
 * the same parameters to the last bit give the same metrics. */
static void check_exact_resume(const char *optimizer)
{
	char whole[4096], first[4096], resumed[4096];

	cr_assert_eq(run(whole, sizeof(whole),
			 "$S train --data ab.txt --test test.txt " TRAIN
			 " %s --json 2>&1",
			 optimizer),
		     0, "%s", whole);
	cr_assert_eq(run(first, sizeof(first),
			 "$S train --data a.txt " TRAIN
			 " %s --save m.ckpt --json 2>&1",
			 optimizer),
		     0, "%s", first);
	cr_assert_eq(run(resumed, sizeof(resumed),
			 "$S train --data b.txt --test test.txt " TRAIN
			 " %s --load m.ckpt --save m2.ckpt --json 2>&1",
			 optimizer),
		     0, "%s", resumed);
	cr_assert_not(strstr(resumed, "holds no Adagrad"), "%s", resumed);
	cr_assert_eq(cmd_json_number(resumed, "resumed_examples"), 6400);
	cr_assert_eq(cmd_json_number(whole, "test_ne"),
		     cmd_json_number(resumed, "test_ne"), "%s\n%s", whole,
		     resumed);
	cr_assert_eq(cmd_json_number(whole, "test_auc"),
		     cmd_json_number(resumed, "test_auc"));
	/* and the second checkpoint counts both runs' examples */
	cr_assert_eq(run(resumed, sizeof(resumed),
			 "$S train --data b.txt " TRAIN
			 " %s --load m2.ckpt --json 2>&1",
			 optimizer),
		     0, "%s", resumed);
	cr_assert_eq(cmd_json_number(resumed, "resumed_examples"), 7680);
}

Test(cmd_checkpoint, resuming_takes_the_same_steps_as_one_run)
{
	check_exact_resume("--optimizer sgd");
}

/* Adagrad's accumulators are in the checkpoint: without them the resumed
 * run's first steps would be larger and its metrics differ. */
Test(cmd_checkpoint, adagrad_resumes_with_its_accumulators)
{
	char out[4096];

	check_exact_resume("--optimizer adagrad --lr 0.05");
	/* a checkpoint an SGD run saved has none: said, and training goes on */
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data a.txt " TRAIN
			 " --optimizer sgd --save s.ckpt 2>&1 && "
			 "$S train --data b.txt " TRAIN
			 " --optimizer adagrad --load s.ckpt 2>&1"),
		     0, "%s", out);
	cr_assert(strstr(out, "holds no Adagrad accumulators"), "%s", out);
}

/*
 * tests/checkpoints/v1-tiny.ckpt was written by the version before
 * Adagrad's state was kept (commit afe36df, format version 1): `train
 * --emb-dim 2 --bottom 13-2 --top 2-1 --hash-size 10 --save` after 300
 * examples.  This build still reads it.
 */
Test(cmd_checkpoint, a_version_1_checkpoint_still_loads)
{
	char out[4096];

	cr_assert_eq(
		run(out, sizeof(out),
		    "$S train --data b.txt --emb-dim 2 --bottom 13-2 "
		    "--top 2-1 --hash-size 10 --threads 1 --sync none "
		    "--progress 0 --load %s/tests/checkpoints/v1-tiny.ckpt "
		    "--json 2>&1",
		    SS_SOURCE_DIR),
		0, "%s", out);
	cr_assert_eq(cmd_json_number(out, "resumed_examples"), 300, "%s", out);
}

Test(cmd_checkpoint, truncated_corrupted_and_foreign_files_are_refused)
{
	char out[4096];

	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data b.txt " TRAIN " --save m.ckpt 2>&1"),
		     0, "%s", out);
	cr_assert_eq(run(out, sizeof(out),
			 "cp m.ckpt t.ckpt && truncate -s -4 t.ckpt && "
			 "$S train --data b.txt " TRAIN " --load t.ckpt 2>&1"),
		     1, "%s", out);
	cr_assert(strstr(out, "--load: checkpoint 't.ckpt'") &&
			  strstr(out, "truncated") && strstr(out, "hint:"),
		  "%s", out);
	/* one byte in the middle of the parameters */
	cr_assert_eq(run(out, sizeof(out),
			 "cp m.ckpt c.ckpt && printf 'X' | dd of=c.ckpt bs=1 "
			 "seek=5000 conv=notrunc 2>/dev/null && "
			 "$S train --data b.txt " TRAIN " --load c.ckpt 2>&1"),
		     1, "%s", out);
	cr_assert(strstr(out, "checksum does not match"), "%s", out);
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data b.txt " TRAIN
			 " --hash-size 3000 --load m.ckpt 2>&1"),
		     1, "%s", out);
	cr_assert(strstr(out, "another model layout") &&
			  strstr(out, "--hash-size"),
		  "%s", out);
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data b.txt " TRAIN " --load b.txt 2>&1"),
		     1, "%s", out);
	cr_assert(strstr(out, "not a ShadowSync checkpoint"), "%s", out);
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data b.txt " TRAIN " --save-every 5 2>&1"),
		     2, "%s", out);
	cr_assert(strstr(out, "--save-every: it needs --save"), "%s", out);
}

/* With {rank} in the path each rank writes its own file; without (and the
 * tables replicated, so that every rank holds the same model), rank 0. */
Test(cmd_checkpoint, ranks_save_their_own_file_when_the_path_names_them)
{
	char out[8192];
	int port = ranks_port_base();

	cr_assert_eq(run(out, sizeof(out),
			 "$S launch -n 2 --port %d -- train --data a.txt " MODEL
			 " --threads 1 --progress 0 --save r{rank}.ckpt "
			 "--save-every 1 2>&1 && "
			 "$S launch -n 2 --port %d -- train --data a.txt " MODEL
			 " --threads 1 --progress 0 --tables replicated "
			 "--save one.ckpt 2>&1 && ls",
			 port, port + 2),
		     0, "%s", out);
	cr_assert(strstr(out, "r0.ckpt\nr1.ckpt\n"), "%s", out);
	cr_assert(strstr(out, "one.ckpt\n"), "%s", out);
	cr_assert_null(strstr(out, ".tmp"), "%s", out);
}

/*
 * A signal that ends a rank at once (SIGHUP: launch's terminal gone; a
 * second Ctrl-C, the stop's time limit) while it saves: the rank removes
 * its half-written PATH.tmp before it dies.  (SIGTERM stops the trainers
 * and lets the save end: test_cmd_resume.)  The model is large enough
 * that a save takes a while; the test stops it as soon as it sees the
 * temporary file (looked for again before the kill, it could be gone by
 * then: a save that ended in between).
 */
Test(cmd_checkpoint, stopped_while_saving_leaves_no_temporary_file)
{
	char out[4096];

	cr_assert_eq(
		run(out, sizeof(out),
		    "{ $S train --data a.txt --threads 1 --sync none --progress 0 "
		    "--epochs 1000 "
		    "--save big.ckpt --save-every 1 2>/dev/null & }; P=$!; "
		    "for i in $(seq 400); do if [ -e big.ckpt.tmp ]; then "
		    "kill -HUP $P; echo caught; break; fi; sleep 0.05; done; "
		    "kill -HUP $P 2>/dev/null; wait $P; "
		    "echo \"status $?\"; ls"),
		0, "%s", out);
	cr_assert(strstr(out, "caught"), "%s", out);
	cr_assert(strstr(out, "status 129"), "%s", out); /* died of SIGHUP */
	cr_assert_null(strstr(out, ".tmp"), "%s", out);
}

/* ---- sharded tables ---------------------------------------------------- */

#define DENSE 6005 /* MODEL's MLPs: bottom 292, top 5713 */

/* Whether bytes [@from, @to) of the two files are the same. */
static bool same_bytes(const char *a, const char *b, long from, long to)
{
	char pa[512], pb[512];
	FILE *fa, *fb;
	bool same = true;

	snprintf(pa, sizeof(pa), "%s/%s", dir, a);
	snprintf(pb, sizeof(pb), "%s/%s", dir, b);
	fa = fopen(pa, "rb");
	fb = fopen(pb, "rb");
	cr_assert(fa && fb, "%s or %s missing", pa, pb);
	fseek(fa, from, SEEK_SET);
	fseek(fb, from, SEEK_SET);
	for (long i = from; same && i < to; i++) {
		int ca = fgetc(fa), cb = fgetc(fb);

		same = ca == cb && ca != EOF;
	}
	fclose(fa);
	fclose(fb);
	return same;
}

/*
 * Four ranks save their shards; re-divided among two and back among
 * four, every shard holds the same rows and accumulators, bit for bit
 * (the MLPs come from shard 0, so shard 0 is the same whole).  The two
 * resume, and a job of another size is refused with the way out.
 */
Test(cmd_checkpoint, shards_reshard_4_to_2_to_4_exactly)
{
	char out[16384];
	int port = ranks_port_base();
	long rows = 26L * 500 * 4, /* 2000 rows over 4: 500 a table */
		floats = DENSE + rows, state = 64 + floats * 4;

	cr_assert_eq(
		run(out, sizeof(out),
		    "$S launch -n 4 --port %d -- train --data a.txt " MODEL
		    " --threads 1 --progress 0 --tables sharded "
		    "--save 's.{rank}' 2>&1 && "
		    "$S reshard --from 's.{rank}' --ranks 4 --to 't.{rank}' "
		    "--new-ranks 2 " MODEL " && "
		    "$S reshard --from 't.{rank}' --ranks 2 --to 'u.{rank}' "
		    "--new-ranks 4 " MODEL " 2>&1",
		    port),
		0, "%s", out);
	cr_assert(strstr(out, "resharded 2 shards into 4"), "%s", out);
	for (int k = 0; k < 4; k++) {
		char s[16], u[16];

		snprintf(s, sizeof(s), "s.%d", k);
		snprintf(u, sizeof(u), "u.%d", k);
		cr_assert(same_bytes(s, u, 64 + DENSE * 4, state),
			  "shard %d: rows differ", k);
		cr_assert(
			same_bytes(s, u, state + DENSE * 4, state + floats * 4),
			"shard %d: the rows' accumulators differ", k);
	}
	cr_assert(same_bytes("s.0", "u.0", 64, state + floats * 4),
		  "shard 0 differs");
	cr_assert_eq(
		run(out, sizeof(out),
		    "$S launch -n 2 --port %d --json -- train --data b.txt " MODEL
		    " --threads 1 --progress 0 --tables sharded "
		    "--load 't.{rank}' 2>&1",
		    port + 4),
		0, "%s", out);
	cr_assert(strstr(out, "\"resumed_examples\":"), "%s", out);
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data b.txt " TRAIN
			 " --tables sharded --load 's.{rank}' 2>&1"),
		     1, "%s", out);
	cr_assert(strstr(out, "rank 0 of 4; this job has 1 rank"), "%s", out);
	cr_assert(strstr(out, "shadowsync reshard"), "%s", out);
	/* not onto its own shards: a failure part way would leave neither
	 * set whole (another spelling of the same files too) */
	cr_assert_eq(run(out, sizeof(out),
			 "cp t.0 v.0 && cp t.1 v.1 && "
			 "$S reshard --from 'v.{rank}' --ranks 2 "
			 "--to './v.{rank}' --new-ranks 4 " MODEL " 2>&1"),
		     2, "%s", out);
	cr_assert(strstr(out, "--to './v.{rank}' ('./v.0'): it would replace "
			      "a --from shard"),
		  "%s", out);
	cr_assert(same_bytes("t.0", "v.0", 0, state), "v.0 was written");
	/* shards read as another size, or as the whole model: said so */
	cr_assert_eq(run(out, sizeof(out),
			 "$S reshard --from 's.{rank}' --ranks 2 --to "
			 "'w.{rank}' --new-ranks 1 " MODEL " 2>&1"),
		     1, "%s", out);
	cr_assert(strstr(out, "(rank 0 of 4; --ranks 2): it is the shard of "
			      "another job size"),
		  "%s", out);
	/* two shards swapped: another rank's, not another size's */
	cr_assert_eq(run(out, sizeof(out),
			 "cp t.0 x.1 && cp t.1 x.0 && "
			 "$S reshard --from 'x.{rank}' --ranks 2 --to "
			 "'y.{rank}' --new-ranks 1 " MODEL " 2>&1"),
		     1, "%s", out);
	cr_assert(strstr(out, "'x.0' (rank 1 of 2, read as rank 0's): it is "
			      "another rank's shard"),
		  "%s", out);
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data b.txt " TRAIN
			 " --tables replicated --load s.1 2>&1"),
		     1, "%s", out);
	cr_assert(strstr(out, "(rank 1 of 4): it is a shard of this model"),
		  "%s", out);
	/* the way out it gives is one (it sent to reshard, which makes
	 * shards again) */
	cr_assert(strstr(out, "load shards with --tables sharded and --load "
			      "'PATH.{rank}', in a job of 4 ranks"),
		  "%s", out);
}

/*
 * The shard of a job of one rank (reshard --new-ranks 1 makes it) holds
 * every row, in its permutation's order: a plain --load takes it as the
 * whole model, rows in their places, and trains on as the one-rank
 * sharded job that loads it does.  reshard takes the model and the job's
 * size from the shards and writes them into the new ones: eval reads
 * the new set as the old; model options that differ are refused.
 */
Test(cmd_checkpoint, the_shard_of_a_job_of_one_loads_as_the_whole_model)
{
	char out[16384], whole[1024], sharded[1024];
	int port = ranks_port_base();

	cr_assert_eq(run(out, sizeof(out),
			 "$S launch -n 2 --port %d -- train --data a.txt " MODEL
			 " --threads 1 --progress 0 --tables sharded "
			 "--save 's.{rank}' 2>&1 && "
			 "$S reshard --from 's.{rank}' --to 'w.{rank}' "
			 "--new-ranks 1 2>&1 && "
			 "$S eval --load 's.{rank}' --data test.txt && "
			 "$S eval --load 'w.{rank}' --data test.txt",
			 port),
		     0, "%s", out);
	whole[0] = '\0';
	sscanf(strstr(out, "examples: NE") ? strstr(out, "examples: NE") : "",
	       "%1023[^\n]", whole);
	cr_assert(whole[0] && strstr(strstr(out, whole) + 1, whole),
		  "the resharded set evaluates as the old one:\n%s", out);
	cr_assert_eq(run(out, sizeof(out),
			 "$S reshard --from 's.{rank}' --to 'x.{rank}' "
			 "--new-ranks 1 --hash-size 3000 2>&1"),
		     2, "%s", out);
	cr_assert(strstr(out, "the model options are not the model its "
			      "shards hold"),
		  "%s", out);
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data b.txt " TRAIN
			 " --tables sharded --load 'w.{rank}' --save "
			 "'ws.{rank}' 2>&1 && "
			 "$S train --data b.txt " TRAIN
			 " --tables replicated --load w.0 --save wr.ckpt -v "
			 "2>&1"),
		     0, "%s", out);
	cr_assert(strstr(out, "starting from w.0 (6400 examples seen, "
			      "Adagrad's accumulators)"),
		  "%s", out);
	cr_assert_eq(run(sharded, sizeof(sharded),
			 "$S eval --load 'ws.{rank}' --data b.txt --json"),
		     0, "%s", sharded);
	cr_assert_eq(run(whole, sizeof(whole),
			 "$S eval --load wr.ckpt --data b.txt --json"),
		     0, "%s", whole);
	cr_assert_float_eq(cmd_json_number(whole, "ne"),
			   cmd_json_number(sharded, "ne"), 1e-5, "%s\n%s",
			   whole, sharded);
	/* a resume needs a run's own checkpoint, which says where it was */
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data b.txt " TRAIN
			 " --tables replicated --resume w.0 2>&1"),
		     2, "%s", out);
	cr_assert(strstr(out, "no place in the data (reshard wrote it)"), "%s",
		  out);
}
