// SPDX-License-Identifier: BSD-2-Clause
/*
 * train --resume: a run stopped by SIGTERM at a moment drawn at random
 * saves where it was and goes on from there.  One rank ends on the model
 * of the run never stopped, byte for byte; two and four ranks (sharded
 * tables, chunks claimed) train every example exactly as many times as
 * one run would.  And what cannot be resumed is refused, saying why.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cmd.h"
#include "ranks.h"

static char dir[] = CMD_TMPFS_DIR("resume");

#define EXAMPLES 6400
#define MODEL "--emb-dim 4 --bottom 13-16-4 --top 16-1 --hash-size 2000"
#define TRAIN MODEL " --threads 1 --batch 128"

static void setup(void)
{
	char cmd[1024];

	strcpy(dir, CMD_TMPFS_DIR("resume"));
	cr_assert_not_null(mkdtemp(dir));
	snprintf(cmd, sizeof(cmd),
		 "cd %s && %s gen-data --cardinality 300 --out a.txt "
		 "--examples %d >/dev/null && head -n 400 a.txt > b.txt",
		 dir, SS_COMMAND, EXAMPLES);
	cr_assert_eq(system(cmd), 0);
	srand((unsigned)time(NULL));
}

static void teardown(void)
{
	cmd_rm_dir(dir);
}

TestSuite(cmd_resume, .init = setup, .fini = teardown, .timeout = 240);

/* Runs a shell command in the test folder, $S the command. */
#define run(out, size, fmt, ...)                                     \
	cmd_run(out, size, "cd %s && S=%s && " fmt, dir, SS_COMMAND, \
		##__VA_ARGS__)

/*
 * The shell that starts @cmd (its output in run.out, logged at info
 * level), waits until its ranks (the %d after @cmd's) say they train (their trainers have started, and SIGTERM stops them), then a moment drawn at random (below 0.3 s: a run
 * here trains for a second or more), and sends it SIGTERM; it prints the
 * status.
 */
#define STOPPED(cmd)                                               \
	"{ SS_LOG=info " cmd " >run.out 2>&1 & }; P=$!; "          \
	"for i in $(seq 1200); do "                                \
	"[ $(grep -c '] training' run.out) -ge %d ] && break; "    \
	"sleep 0.05; done; sleep 0.%03d; kill -TERM $P; wait $P; " \
	"echo \"status $?\""

/* The examples a checkpoint counts (its header's, at byte 32). */
static uint64_t saved_examples(const char *name)
{
	char path[512];
	unsigned char b[8];
	uint64_t v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "rb");
	cr_assert_not_null(f, "%s", path);
	cr_assert_eq(fseek(f, 32, SEEK_SET), 0);
	cr_assert_eq(fread(b, 1, 8, f), 8);
	fclose(f);
	for (int i = 7; i >= 0; i--)
		v = v << 8 | b[i];
	return v;
}

/*
 * One rank, one trainer, no peers (training is deterministic): stopped
 * and resumed, it saves the same file as the run never stopped, model,
 * Adagrad's state and count, byte for byte.
 */
Test(cmd_resume, one_rank_stopped_anywhere_ends_on_the_same_model)
{
	char out[8192];
	int delay = rand() % 300;

	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data a.txt " TRAIN " --sync none "
			 "--epochs 30 --progress 0 --save ref.ckpt 2>&1"),
		     0, "%s", out);
	cr_assert_eq(run(out, sizeof(out),
			 STOPPED("$S train --data a.txt " TRAIN
				 " --sync none --epochs 30 --progress 0 "
				 "--save s.ckpt") "; cat run.out",
			 1, delay),
		     0, "%s", out);
	cr_assert(strstr(out, "status 143"), "not stopped by SIGTERM: %s", out);
	cr_assert(strstr(out, "stopped by Terminated after"), "%s", out);
	cr_assert(strstr(out, "--resume s.ckpt"), "%s", out);
	cr_assert_lt(saved_examples("s.ckpt"), 30 * EXAMPLES);
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data a.txt " TRAIN " --sync none "
			 "--progress 0 --resume s.ckpt --save r.ckpt 2>&1 && "
			 "cmp ref.ckpt r.ckpt && echo same"),
		     0,
		     "stopped after %llu examples (%d ms after it said it "
		     "trains): %s",
		     (unsigned long long)saved_examples("s.ckpt"), delay, out);
}

/*
 * @world ranks under launch, stopped by a SIGTERM to launch (which passes
 * it on): each saves its shard and where it was, and the resumed job
 * trains what was left, the chunks the ranks had open and those not yet
 * claimed: all the ranks' examples, the two runs together, are the
 * epochs' examples, exactly.
 */
static void check_ranks(int world, int epochs, const char *options)
{
	char out[16384], name[32];
	int port = ranks_port_base(), delay = rand() % 300;
	uint64_t stopped = 0, total = 0;

	cr_assert_eq(run(out, sizeof(out),
			 STOPPED("$S launch -n %d --port %d -- train --data "
				 "a.txt " TRAIN " --epochs %d --progress 0 "
				 "--save 's.{rank}' %s") "; cat run.out",
			 world, port, epochs, options, world, delay),
		     0, "%s", out);
	cr_assert(strstr(out, "stopped by Terminated after"), "%s", out);
	for (int r = 0; r < world; r++) {
		snprintf(name, sizeof(name), "s.%d", r);
		stopped += saved_examples(name);
	}
	cr_assert_lt(stopped, (uint64_t)epochs * EXAMPLES, "%s", out);
	cr_assert_eq(
		run(out, sizeof(out),
		    "$S launch -n %d --port %d -- train --data a.txt " TRAIN
		    " --progress 0 --resume 's.{rank}' --save 'r.{rank}' "
		    "2>&1",
		    world, port + 8),
		0, "%s", out);
	for (int r = 0; r < world; r++) {
		snprintf(name, sizeof(name), "r.%d", r);
		total += saved_examples(name);
	}
	cr_assert_eq(total, (uint64_t)epochs * EXAMPLES,
		     "%d ranks stopped after %llu examples (%d ms after they "
		     "said they train), %llu in all: %s",
		     world, (unsigned long long)stopped, delay,
		     (unsigned long long)total, out);
}

Test(cmd_resume, two_ranks_train_every_example_as_often_as_one_run)
{
	check_ranks(2, 40, "");
}

/* and with the chunks of each epoch shuffled */
Test(cmd_resume, four_ranks_train_every_example_as_often_as_one_run)
{
	check_ranks(4, 40, "--shuffle");
}

/* What cannot go on from a checkpoint is refused, naming it and why. */
Test(cmd_resume, what_cannot_be_resumed_is_refused)
{
	char out[8192];

	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data b.txt " TRAIN " --sync none "
			 "--progress 0 --save m.ckpt 2>&1"),
		     0, "%s", out);
	/* other data */
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data a.txt " TRAIN " --sync none "
			 "--resume m.ckpt 2>&1"),
		     2, "%s", out);
	cr_assert(strstr(out, "--data is not the data it was saved from"), "%s",
		  out);
	cr_assert(strstr(out, "'m.ckpt'"), "%s", out);
	/* other epochs */
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data b.txt " TRAIN " --sync none "
			 "--epochs 3 --resume m.ckpt 2>&1"),
		     2, "%s", out);
	cr_assert(strstr(out, "drop --epochs"), "%s", out);
	/* chunks shuffled where they were not */
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data b.txt " TRAIN " --sync none "
			 "--shuffle --resume m.ckpt 2>&1"),
		     2, "%s", out);
	cr_assert(strstr(out, "saved without --shuffle"), "%s", out);
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data b.txt " TRAIN " --shuffle "
			 "--data-split static 2>&1"),
		     2, "%s", out);
	cr_assert(strstr(out, "--shuffle with --data-split static"), "%s", out);
	/* a checkpoint with no place in the data: --load it */
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data b.txt --emb-dim 2 --bottom 13-2 "
			 "--top 2-1 --hash-size 10 --threads 1 --sync none "
			 "--resume %s/tests/checkpoints/v1-tiny.ckpt 2>&1",
			 SS_SOURCE_DIR),
		     2, "%s", out);
	cr_assert(strstr(out, "holds no place in the data"), "%s", out);
	cr_assert(strstr(out, "--load"), "%s", out);
	/* both ways to start */
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data b.txt " TRAIN
			 " --load m.ckpt --resume m.ckpt 2>&1"),
		     2, "%s", out);
	cr_assert(strstr(out, "--load and --resume"), "%s", out);
	/* finished: nothing left, and it says so by training nothing */
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data b.txt " TRAIN " --sync none "
			 "--progress 0 --resume m.ckpt --json 2>&1"),
		     0, "%s", out);
}
