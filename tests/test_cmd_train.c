// SPDX-License-Identifier: BSD-2-Clause
/* The train command: one rank, two ranks over shm, and its refusals. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cmd.h"
#include "ranks.h"

static char dir[] = "/tmp/ss-cmd-XXXXXX";

#define MODEL "--emb-dim 4 --bottom 13-16-4 --top 16-1 --hash-size 2000"

static void setup(void)
{
	strcpy(dir, "/tmp/ss-cmd-XXXXXX");
	cmd_data_dir(dir);
}

static void teardown(void)
{
	cmd_rm_dir(dir);
}

TestSuite(cmd_train, .init = setup, .fini = teardown, .timeout = 120);

Test(cmd_train, one_rank_trains_and_reports_json)
{
	char cmd[1024], out[4096];

	snprintf(cmd, sizeof(cmd),
		 "%s train --data %s/train.txt --test %s/test.txt " MODEL
		 " --threads 1 --sync none --progress 0 --json 2>&1",
		 SS_COMMAND, dir, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	cr_assert(strstr(out, "\"examples\":6000"), "%s", out);
	cr_assert(strstr(out, "\"test_ne\":"), "%s", out);
}

/*
 * The DLRM way of writing the top MLP, its input first (emb-dim 4: 4 + 351
 * = 355), builds the same model as without it: the same parameter count.
 * It built a model with an extra 355-wide layer.
 */
Test(cmd_train, top_mlp_written_with_its_input_is_the_same_model)
{
	char cmd[1024], out[4096];
	double with, without;

	snprintf(
		cmd, sizeof(cmd),
		"%s train --data %s/train.txt --emb-dim 4 --bottom 13-16-4 "
		"--top 355-16-1 --hash-size 2000 --sync none --progress 0 --json 2>&1",
		SS_COMMAND, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	with = cmd_json_number(out, "params");
	snprintf(cmd, sizeof(cmd),
		 "%s train --data %s/train.txt " MODEL
		 " --sync none --progress 0 --json 2>&1",
		 SS_COMMAND, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	without = cmd_json_number(out, "params");
	cr_assert_eq(with, without, "%g params against %g", with, without);
	cr_assert_gt(without, 0, "%s", out);
}

/*
 * More trainers, or ranks, than bytes: a slice or share of no bytes
 * trains nothing.  [0, 0) was read as the whole file (end 0 is its end
 * to a reader): a one-line file was trained twice by 400 trainers, and
 * by ranks 0 and 1 of twice its bytes (--tables local and --sync none:
 * ranks that need no peer).
 */
Test(cmd_train, no_bytes_no_examples)
{
	char out[4096], path[256];
	struct stat st;
	int world;

	cr_assert_eq(cmd_run(out, sizeof(out),
			     "head -1 %s/train.txt > %s/one.txt", dir, dir),
		     0);
	cr_assert_eq(cmd_run(out, sizeof(out),
			     "%s train --data %s/one.txt " MODEL
			     " --threads 400 --oversubscribe --sync none "
			     "--progress 0 --json 2>&1",
			     SS_COMMAND, dir),
		     0, "%s", out);
	cr_assert_eq(cmd_json_number(out, "examples"), 1, "%s", out);
	/* twice as many ranks as bytes: rank 0 has [0, 0), rank 1 [0, 1) */
	snprintf(path, sizeof(path), "%s/one.txt", dir);
	cr_assert_eq(stat(path, &st), 0);
	world = 2 * (int)st.st_size;
	cr_assert_eq(cmd_run(out, sizeof(out),
			     "seq 20000 %d | sed 's/^/127.0.0.1:/' > %s/hosts",
			     20000 + world - 1, dir),
		     0);
	for (int r = 0; r < 2; r++) {
		cr_assert_eq(
			cmd_run(out, sizeof(out),
				"%s train --data %s/one.txt " MODEL
				" --threads 1 --sync none --tables local "
				"--rank %d --hostfile %s/hosts --progress 0 "
				"--json 2>&1",
				SS_COMMAND, dir, r, dir),
			0, "%s", out);
		cr_assert_eq(cmd_json_number(out, "examples"), r, "rank %d: %s",
			     r, out);
	}
}

Test(cmd_train, two_ranks_over_shm_with_shadow_ma)
{
	char cmd[2048], out[8192];
	int port = ranks_port_base(); /* and + 2, + 3: the tables */

	/* Rank 1 in the background, rank 0 in the foreground; both must
	 * succeed, each having read half of the examples. */
	snprintf(
		cmd, sizeof(cmd),
		"P=127.0.0.1:%d,127.0.0.1:%d; "
		"%s train --data %s/train.txt " MODEL
		" --threads 1 --transport shm --peers $P --rank 1 --progress 0 --json --job-key 77 > %s/r1 2>&1 & "
		"%s train --data %s/train.txt " MODEL
		" --threads 1 --transport shm --peers $P --rank 0 --progress 0 --json --job-key 77 2>&1; "
		"r0=$?; wait $!; r1=$?; cat %s/r1; echo \"status $r0 $r1\"",
		port, port + 1, SS_COMMAND, dir, dir, SS_COMMAND, dir, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0);
	cr_assert(strstr(out, "status 0 0"), "%s", out);
	cr_assert(strstr(out, "\"rank\":0,\"world\":2"), "%s", out);
	cr_assert(strstr(out, "\"rank\":1,\"world\":2"), "%s", out);
	cr_assert(strstr(out, "\"sync\":\"ma\""), "%s", out);
}

/*
 * Quality: on the generator's default data set, trained with Adagrad, the
 * held-out NE beats the constant predictor (1) and comes near the
 * teacher's own NE on the same held-out file, the floor.  The margin
 * holds whatever the timing of the two Hogwild trainers: seen QUALITY_SEEN
 * over runs; asserted QUALITY_MARGIN.
 */
#define QUALITY_SEEN "1.040-1.047"
#define QUALITY_MARGIN 1.10

Test(cmd_train, reaches_near_the_teacher_floor, .timeout = 240)
{
	char cmd[2048], out[4096];
	double ne, floor;
	FILE *f;

	snprintf(
		cmd, sizeof(cmd),
		"%s gen-data --out %s/q-train.txt --examples 60000 >/dev/null && "
		"%s gen-data --out %s/q-test.txt --examples 10000 --stream 1 >/dev/null && "
		"%s train --data %s/q-train.txt --test %s/q-test.txt " MODEL
		" --optimizer adagrad --lr 0.02 --threads 2 --oversubscribe"
		" --sync none --progress 0 --json 2>&1",
		SS_COMMAND, dir, SS_COMMAND, dir, SS_COMMAND, dir, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0, "%s", out);
	ne = cmd_json_number(out, "test_ne");
	cr_assert(strstr(out, "\"blas\":\""), "the BLIS kernels named: %s",
		  out);
	snprintf(cmd, sizeof(cmd), "%s/q-test.txt.teacher.json", dir);
	f = fopen(cmd, "r");
	cr_assert_not_null(f);
	out[fread(out, 1, sizeof(out) - 1, f)] = '\0';
	fclose(f);
	floor = cmd_json_number(out, "ne");
	fprintf(stderr, "held-out NE %.4f, teacher floor %.4f: ratio %.4f\n",
		ne, floor, ne / floor);
	cr_assert(floor > 0.3 && floor < 0.9, "floor %f", floor);
	cr_assert_lt(ne, 0.95, "NE %f: no better than a constant", ne);
	cr_assert_lt(ne, QUALITY_MARGIN * floor,
		     "NE %f, floor %f: ratio %f (seen " QUALITY_SEEN ")", ne,
		     floor, ne / floor);
}

/* `train --data train.txt ARGS` exits @code, saying @said. */
static void train_refused(int code, const char *args, const char *said)
{
	char out[8192];

	cr_assert_eq(cmd_run(out, sizeof(out),
			     "%s train --data %s/train.txt %s 2>&1", SS_COMMAND,
			     dir, args),
		     code, "%s", out);
	cr_assert(strstr(out, said), "%s", out);
}

Test(cmd_train, refusals_name_the_option)
{
	char cmd[1024], out[8192];

	snprintf(cmd, sizeof(cmd), "%s train " MODEL " 2>&1", SS_COMMAND);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 2, "%s", out);
	cr_assert(strstr(out, "error: --data"), "%s", out);
	train_refused(2, "--sync allreduce", "ma, easgd, bmuf, gossip");
	snprintf(cmd, sizeof(cmd), "%s train --data %s/nope.txt 2>&1",
		 SS_COMMAND, dir);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 1, "%s", out);
	cr_assert(strstr(out, "nope.txt"), "%s", out);
	train_refused(2, "--rank 3 --peers a:1,b:2", "--rank 3 of 2 peers");
	train_refused(2, "--sync-tables no", "--tables local");
	train_refused(2, "--tables sharded --save x", "--tables replicated");
	/* what the table endpoint takes, by the options' names (it said
	 * "table options: max_rows must be 1 to 2^20") */
	train_refused(2, "--tables sharded --batch 50000",
		      "--batch 50000: at most 40329");
	train_refused(2, "--tables sharded --threads 300",
		      "--threads 300: at most 256");
	/* only rank 0 saved: the others' tables were lost */
	train_refused(2,
		      "--tables local --save x --rank 0 "
		      "--peers 127.0.0.1:1,127.0.0.1:2",
		      "--save with --tables local: each rank's");
	/* both trained on, silently, before */
	train_refused(2, "--rejoin", "--rejoin: a job of one rank");
	train_refused(2, "--transport shm --gid-index 3",
		      "--gid-index with --transport shm");
	/* the foreground's trainers run the rounds themselves */
	train_refused(2, "--mode foreground --max-sync-gap 8",
		      "--max-sync-gap: only with --mode shadow");
	train_refused(2, "--max-sync-gap -1", "--max-sync-gap");
	train_refused(2, "--sync none --max-sync-gap 8",
		      "--max-sync-gap with --sync none");
	/* another algorithm's, optimizer's, split's or tables' option
	 * would change nothing: it was taken in silence */
	train_refused(2, "--alpha 0.3", "--alpha with --sync ma: it would");
	train_refused(2, "--sync bmuf --beta 0.2", "give --sync gossip");
	train_refused(2, "--sync easgd --nesterov no",
		      "--nesterov with --sync easgd");
	train_refused(2, "--sync gossip --hierarchical-from 4",
		      "--hierarchical-from with --sync gossip");
	train_refused(2, "--optimizer sgd --adagrad-eps 1e-6",
		      "--adagrad-eps with --optimizer sgd");
	train_refused(2, "--data-split static --chunk-size 8192",
		      "--chunk-size with --data-split static");
	train_refused(2, "--prefetch -1", "--prefetch '-1': out of range");
	train_refused(2, "--prefetch soon",
		      "--prefetch 'soon': not a decimal integer");
	train_refused(2, "--prefetch 3",
		      "--prefetch with --tables replicated (the default for "
		      "one rank): only with --tables sharded");
	/* it only says which checkpoint a rank that rejoins may load */
	train_refused(2, "--job-began 1700000000",
		      "--job-began: only with "
		      "--rejoin");
	train_refused(2, "--rejoin --job-began soon", "--job-began");
	snprintf(cmd, sizeof(cmd), "%s train --help", SS_COMMAND);
	cr_assert_eq(cmd_run(out, sizeof(out), "%s", cmd), 0);
	cr_assert(strstr(out, "--sync-every"), "%s", out);
	cr_assert(strstr(out, "--max-sync-gap"), "%s", out);
}

/*
 * A second process given a running rank's address is refused, and the
 * running rank is left alone (over shm the objects are named after it).
 */
Test(cmd_train, a_live_ranks_address_is_refused)
{
	char out[8192];
	int port = ranks_port_base();

	cr_assert_eq(
		cmd_run(out, sizeof(out),
			"P=127.0.0.1:%d,127.0.0.1:%d; "
			"{ %s train --data %s/train.txt " MODEL
			" --threads 1 --transport shm --peers $P --rank 0 --progress 0 >/dev/null 2>&1 & }; "
			"R=$!; for i in $(seq 600); do "
			"[ -e /dev/shm/ss-127.0.0.1:%d-ctl ] && break; sleep 0.05; done; "
			"%s train --data %s/train.txt " MODEL
			" --threads 1 --transport shm --peers $P --rank 0 --progress 0 2>&1; "
			"echo \"second $?\"; kill -0 $R && echo first alive; "
			"kill $R; wait $R; true",
			port, port + 1, SS_COMMAND, dir, port, SS_COMMAND, dir),
		0, "%s", out);
	cr_assert(strstr(out, "second 1"), "%s", out);
	cr_assert(strstr(out, "a live process has it"), "%s", out);
	cr_assert(strstr(out, "another --port"), "%s", out);
	cr_assert(strstr(out, "first alive"), "%s", out);
}

/*
 * Several --data files, given one by one or as a pattern, are one stream
 * in order: one trainer on the file cut in three saves the model of one
 * trainer on the whole file, byte for byte; a pattern that matches
 * nothing is refused.
 */
Test(cmd_train, several_data_files_train_as_their_concatenation)
{
	char out[4096];

	cr_assert_eq(cmd_run(out, sizeof(out),
			     "cd %s && S=%s && head -n 2500 train.txt > p1.txt "
			     "&& sed -n 2501,4000p train.txt > p2.txt && "
			     "tail -n +4001 train.txt > p3.txt && "
			     "$S train --data train.txt " MODEL
			     " --threads 1 --sync none --progress 0 --epochs 2 "
			     "--save whole.ckpt 2>&1 && "
			     "$S train --data p1.txt --data 'p[23].txt' " MODEL
			     " --threads 1 --sync none --progress 0 --epochs 2 "
			     "--save parts.ckpt --json 2>&1 && "
			     "cmp whole.ckpt parts.ckpt && echo same",
			     dir, SS_COMMAND),
		     0, "%s", out);
	cr_assert(strstr(out, "\"examples\":12000"), "%s", out);
	cr_assert_eq(
		cmd_run(out, sizeof(out),
			"cd %s && %s train --data p1.txt --data 'q*.txt' " MODEL
			" 2>&1",
			dir, SS_COMMAND),
		2, "%s", out);
	cr_assert(strstr(out, "--data 'q*.txt': no file matches it"), "%s",
		  out);
}

/*
 * --lr-schedule and --warmup reach the trainers: a warmup longer than
 * the run keeps the rate near 0 and the loss near where it began; the
 * decaying schedules end elsewhere than the constant rate; an unknown
 * schedule is refused.
 */
Test(cmd_train, the_rate_follows_its_schedule)
{
	char out[4096];
	double loss[4];
	static const char *const sched[] = { "", "--lr-schedule cosine",
					     "--lr-schedule warmup-linear",
					     "--warmup 1000000000" };

	for (int i = 0; i < 4; i++) {
		cr_assert_eq(cmd_run(out, sizeof(out),
				     "%s train --data %s/train.txt " MODEL
				     " --threads 1 --sync none --progress 0 "
				     "--epochs 2 --json %s 2>&1",
				     SS_COMMAND, dir, sched[i]),
			     0, "%s", out);
		loss[i] = cmd_json_number(out, "train_log_loss");
	}
	cr_assert_neq(loss[1], loss[0], "cosine");
	cr_assert_neq(loss[2], loss[0], "warmup-linear");
	cr_assert_gt(loss[3], loss[0] + 0.05,
		     "a warmup longer than the run: "
		     "%f against %f",
		     loss[3], loss[0]);
	cr_assert_eq(cmd_run(out, sizeof(out),
			     "%s train --data %s/train.txt --lr-schedule step "
			     "2>&1",
			     SS_COMMAND, dir),
		     2, "%s", out);
	cr_assert(strstr(out, "--lr-schedule"), "%s", out);
}

/*
 * --eval-every: the held-out figures while training, in the log and in
 * --log-csv's rows, and at each epoch's end but the last (whose are the
 * run's); 'epoch' there alone; it needs --test, and whole tables.
 */
Test(cmd_train, eval_every_evaluates_while_training)
{
	char out[8192];

	cr_assert_eq(cmd_run(out, sizeof(out),
			     "cd %s && %s train --data train.txt --test "
			     "test.txt " MODEL " --threads 1 --sync none "
			     "--progress 0 --epochs 4 --eval-every 6000 "
			     "--log-csv ev.csv 2>&1 && "
			     "awk -F, 'NR > 1 && $11 != \"\"' ev.csv | wc -l",
			     dir, SS_COMMAND),
		     0, "%s", out);
	/* at 6000, 12000 and 18000 examples the epochs' ends (one
	 * trainer: exactly there), and at 24000 */
	cr_assert(strstr(out, "s: epoch 1 of 4 done: 6000 examples: held-out "
			      "NE "),
		  "%s", out);
	cr_assert(strstr(out, "s: epoch 3 of 4 done: 18000 examples"), "%s",
		  out);
	cr_assert(strstr(out, "s: 24000 examples: held-out NE "), "%s", out);
	cr_assert_null(strstr(out, "s: 6000 examples"), "%s", out);
	cr_assert(strstr(out, "\n4\n"), "4 rows with held-out figures: %s",
		  out);
	/* at the epochs' ends alone */
	cr_assert_eq(cmd_run(out, sizeof(out),
			     "cd %s && %s train --data train.txt --test "
			     "test.txt " MODEL " --threads 1 --sync none "
			     "--progress 0 --epochs 3 --eval-every epoch "
			     ">ep.log 2>&1 && cat ep.log && "
			     "echo evaluations: $(grep -c eval-every ep.log)",
			     dir, SS_COMMAND),
		     0, "%s", out);
	cr_assert(strstr(out, "s: epoch 2 of 3 done: 12000 examples"), "%s",
		  out);
	cr_assert_null(strstr(out, "epoch 3 of 3"), "%s", out);
	cr_assert(strstr(out, "evaluations: 2\n"), "%s", out);
	cr_assert_eq(
		cmd_run(out, sizeof(out),
			"%s train --data %s/train.txt --eval-every 10 2>&1",
			SS_COMMAND, dir),
		2, "%s", out);
	cr_assert(strstr(out, "--eval-every: it needs --test"), "%s", out);
	cr_assert_eq(cmd_run(out, sizeof(out),
			     "%s train --data %s/train.txt --test %s/test.txt "
			     "--tables sharded --eval-every 10 2>&1",
			     SS_COMMAND, dir, dir),
		     2, "%s", out);
	cr_assert(strstr(out, "not with sharded tables yet"), "%s", out);
}

/*
 * A gzip copy of the data trains the model of the plain file, byte for
 * byte (its length is the uncompressed one); so does standard input, gzip
 * or plain, but for the checkpoint's checksum and its record, whose data
 * size is 0 there (its length is not known before its end).  Two
 * trainers take standard input's batches in turn, every example once;
 * two ranks read a gzip file by a fixed share each, every example once.
 */
Test(cmd_train, gzip_and_standard_input_train_as_the_plain_file)
{
	char out[8192];

	cr_assert_eq(
		cmd_run(out, sizeof(out),
			"cd %s && gzip -c train.txt > train.gz && "
			"T='%s train " MODEL " --threads 1 --sync none "
			"--progress 0' && "
			"$T --data train.txt --save plain.ckpt 2>&1 && "
			"$T --data train.gz --save gz.ckpt 2>&1 && "
			"$T --data - --save in.ckpt < train.gz 2>&1 && "
			"cat train.txt | $T --data - --save pipe.ckpt 2>&1 && "
			"cmp plain.ckpt gz.ckpt && echo same gzip && "
			"for f in plain in pipe; do "
			"head -c -160 $f.ckpt | tail -c +49 > $f.body; done && "
			"cmp plain.body in.body && cmp plain.body pipe.body && "
			"echo same stdin && "
			"%s train " MODEL
			" --threads 2 --sync none --progress 0 "
			"--data - < train.gz 2>&1 && "
			"%s launch -n 2 -- train --data train.gz " MODEL
			" --threads 1 --progress 0 2>&1",
			dir, SS_COMMAND, SS_COMMAND, SS_COMMAND),
		0, "%s", out);
	cr_assert(strstr(out, "rank 0 of 1: 6000 examples in"), "%s", out);
	cr_assert(strstr(out, "same gzip\n"), "%s", out);
	cr_assert(strstr(out, "same stdin\n"), "%s", out);
	cr_assert(strstr(out, "job  6000 examples"), "%s", out);
}

/*
 * Standard input is read once, in order, by one rank; a
 * gzip file is not read by chunks: what needs more is refused, naming
 * the option and the file.
 */
Test(cmd_train, what_standard_input_and_gzip_cannot_do_is_refused)
{
	static const struct {
		const char *args, *said;
	} refused[] = {
		{ "--data - --epochs 2", "--data - with --epochs 2: standard "
					 "input is read once, by one rank" },
		{ "--data - --resume x.ckpt", "--data - with --resume" },
		{ "--data - --lr-schedule cosine",
		  "--data - with --lr-schedule cosine" },
		{ "--data train.txt --data -",
		  "--data - with other --data files" },
		{ "--data - --peers 127.0.0.1:7100,127.0.0.1:7101 --rank 0",
		  "--data - with 2 ranks" },
		{ "--data train.txt --test -", "--test -: standard input is "
					       "read as --data only" },
		{ "--data train.gz --data-split dynamic",
		  "--data-split dynamic with gzip file 'train.gz': a chunk "
		  "of a gzip file is reached by decompressing it" },
		{ "--data train.gz --shuffle",
		  "--shuffle with gzip file 'train.gz'" },
		{ "--data train.txt --data train.gz --data-split dynamic "
		  "--peers 127.0.0.1:7100,127.0.0.1:7101 --rank 0",
		  "--data-split dynamic with gzip file 'train.gz'" },
	};
	char out[4096];

	cr_assert_eq(cmd_run(out, sizeof(out),
			     "gzip -c %s/train.txt > %s/train.gz", dir, dir),
		     0);
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		cr_assert_eq(cmd_run(out, sizeof(out),
				     "cd %s && %s train %s " MODEL
				     " --progress 0 < train.txt 2>&1",
				     dir, SS_COMMAND, refused[i].args),
			     2, "%s: %s", refused[i].args, out);
		cr_assert(strstr(out, refused[i].said), "%s: %s",
			  refused[i].args, out);
		cr_assert(strstr(out, "hint: "), "%s", out);
	}
	/* standard input closed: nothing in it, not the first file opened */
	cr_assert_eq(cmd_run(out, sizeof(out),
			     "cd %s && %s train --data - " MODEL
			     " --threads 1 --progress 0 <&- 2>&1",
			     dir, SS_COMMAND),
		     1, "%s", out);
	cr_assert(strstr(out, "--data '-': no example in it"), "%s", out);
}
