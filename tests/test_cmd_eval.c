// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync eval and predict: a saved model used without training.  The
 * figures eval gives are those train gave for the same file; predict's
 * probabilities are the model's, one a line; what cannot be evaluated is
 * refused, saying why.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cmd.h"
#include "ranks.h"

static char dir[] = CMD_TMPFS_DIR("eval");

#define MODEL "--emb-dim 4 --bottom 13-16-4 --top 16-1 --hash-size 2000"

static void setup(void)
{
	strcpy(dir, CMD_TMPFS_DIR("eval"));
	cmd_data_dir(dir);
}

static void teardown(void)
{
	cmd_rm_dir(dir);
}

TestSuite(cmd_eval, .init = setup, .fini = teardown, .timeout = 120);

#define run(out, size, fmt, ...)                                     \
	cmd_run(out, size, "cd %s && S=%s && " fmt, dir, SS_COMMAND, \
		##__VA_ARGS__)

Test(cmd_eval, eval_gives_trains_figures_and_predict_the_probabilities)
{
	char trained[8192], evaluated[4096], out[4096];
	double sum = 0, p;
	int lines = 0;
	FILE *f;

	cr_assert_eq(run(trained, sizeof(trained),
			 "$S train --data train.txt --test test.txt " MODEL
			 " --threads 1 --progress 0 --save m.ckpt --json "
			 "2>&1"),
		     0, "%s", trained);
	cr_assert_eq(run(evaluated, sizeof(evaluated),
			 "$S eval --load m.ckpt --data test.txt --json 2>&1"),
		     0, "%s", evaluated);
	cr_assert_eq(cmd_json_number(evaluated, "ne"),
		     cmd_json_number(trained, "test_ne"), "%s\n%s", trained,
		     evaluated);
	cr_assert_eq(cmd_json_number(evaluated, "auc"),
		     cmd_json_number(trained, "test_auc"));
	cr_assert_eq(cmd_json_number(evaluated, "calibration"),
		     cmd_json_number(trained, "test_calibration"));
	cr_assert_eq(cmd_json_number(evaluated, "examples"), 1000);
	/* the text form says the same */
	cr_assert_eq(run(out, sizeof(out),
			 "$S eval --load m.ckpt --data test.txt 2>&1"),
		     0, "%s", out);
	cr_assert(strstr(out, "1000 examples: NE "), "%s", out);
	/* one probability a line; their mean over the click rate is the
	 * calibration eval gave */
	cr_assert_eq(run(out, sizeof(out),
			 "$S predict --load m.ckpt --data test.txt --out p.txt "
			 "2>&1"),
		     0, "%s", out);
	snprintf(out, sizeof(out), "%s/p.txt", dir);
	f = fopen(out, "r");
	cr_assert_not_null(f);
	while (fscanf(f, "%lf", &p) == 1) {
		cr_assert(p > 0 && p < 1, "line %d: %g", lines + 1, p);
		sum += p;
		lines++;
	}
	fclose(f);
	cr_assert_eq(lines, 1000);
	cr_assert_float_eq(sum / lines / cmd_json_number(evaluated, "ctr"),
			   cmd_json_number(evaluated, "calibration"), 1e-4);
	/* and to standard output, the same lines */
	cr_assert_eq(run(out, sizeof(out),
			 "$S predict --load m.ckpt --data test.txt | "
			 "cmp - p.txt && echo same"),
		     0, "%s", out);
}

/*
 * A gzip copy of the file, given by name or on standard input (gzip or
 * plain), gives the figures and the probabilities of the plain file.
 */
Test(cmd_eval, gzip_and_standard_input_read_as_the_plain_file)
{
	char out[4096];

	cr_assert_eq(
		run(out, sizeof(out),
		    "$S train --data train.txt " MODEL " --threads 1 "
		    "--sync none --progress 0 --save m.ckpt 2>&1 && "
		    "gzip -c test.txt > test.gz && "
		    "$S eval --load m.ckpt --data test.txt > e.txt && "
		    "$S eval --load m.ckpt --data test.gz | cmp - e.txt && "
		    "$S eval --load m.ckpt --data - < test.gz | "
		    "cmp - e.txt && "
		    "$S predict --load m.ckpt --data test.txt > p.txt && "
		    "$S predict --load m.ckpt --data test.gz | "
		    "cmp - p.txt && "
		    "cat test.txt | $S predict --load m.ckpt --data - | "
		    "cmp - p.txt && wc -l < p.txt && cat e.txt"),
		0, "%s", out);
	cr_assert(strstr(out, "1000\n1000 examples: NE "), "%s", out);
}

/*
 * A sharded model's files read together: eval gives the held-out figures
 * rank 0 gave at the end of training (its MLPs, every row from its
 * owner), and predict one probability an example.
 */
/*
 * Two ranks of @model train with sharded tables and save their shards;
 * eval reads them together: rank 0's held-out NE at the end of training
 * (into @evaluated, eval's JSON; @rank0, that rank's summary).
 */
static void sharded_eval_is_rank0s(const char *model, char *evaluated,
				   size_t size, char *trained, size_t tsize,
				   const char **rank0)
{
	int port = ranks_port_base();

	cr_assert_eq(run(trained, tsize,
			 "$S launch -n 2 --port %d --json -- train --data "
			 "train.txt --test test.txt %s --threads 1 "
			 "--progress 0 --save 's.{rank}' 2>/dev/null",
			 port, model),
		     0, "%s", trained);
	*rank0 = strstr(trained, "{\"rank\":0");
	cr_assert_not_null(*rank0, "%s", trained);
	cr_assert_eq(run(evaluated, size,
			 "$S eval --load 's.{rank}' --data test.txt --json "
			 "2>&1"),
		     0, "%s", evaluated);
	/* the same model on the same kernels: the same figures, exactly
	 * (eval on BLIS's own kernels gave them to about 1e-8, and the
	 * printed sixth digit differed one run in twenty) */
	cr_assert_eq(cmd_json_number(evaluated, "ne"),
		     cmd_json_number(*rank0, "test_ne"), "%s\n%s", *rank0,
		     evaluated);
}

Test(cmd_eval, a_sharded_models_files_are_read_together)
{
	char trained[16384], evaluated[4096], out[4096];
	const char *rank0;

	sharded_eval_is_rank0s(MODEL, evaluated, sizeof(evaluated), trained,
			       sizeof(trained), &rank0);
	cr_assert_eq(cmd_json_number(evaluated, "auc"),
		     cmd_json_number(rank0, "test_auc"));
	cr_assert_eq(
		run(out, sizeof(out),
		    "$S predict --load 's.{rank}' --data test.txt | wc -l"),
		0, "%s", out);
	cr_assert_eq(atoi(out), 1000, "%s", out);
}

Test(cmd_eval, what_cannot_be_evaluated_is_refused)
{
	char out[8192];
	int port = ranks_port_base();

	/* a shard of a sharded model */
	cr_assert_eq(
		run(out, sizeof(out),
		    "$S launch -n 2 --port %d -- train --data train.txt " MODEL
		    " --threads 1 --progress 0 --save 's.{rank}' "
		    ">/dev/null 2>&1 && "
		    "$S eval --load s.0 --data test.txt 2>&1",
		    port),
		2, "%s", out);
	cr_assert(strstr(out, "one shard of a sharded model"), "%s", out);
	cr_assert(strstr(out, "--load 'PATH.{rank}'"), "%s", out);
	/* a checkpoint that does not say what model it holds */
	cr_assert_eq(run(out, sizeof(out),
			 "$S eval --load %s/tests/checkpoints/v1-tiny.ckpt "
			 "--data test.txt 2>&1",
			 SS_SOURCE_DIR),
		     2, "%s", out);
	cr_assert(strstr(out, "does not say what model it holds"), "%s", out);
	/* a missing data file: no half-written --out left */
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data test.txt " MODEL " --threads 1 "
			 "--progress 0 --save m.ckpt >/dev/null 2>&1 && "
			 "$S predict --load m.ckpt --data none.txt --out q.txt "
			 "2>&1; ls"),
		     0, "%s", out);
	cr_assert(strstr(out, "data file 'none.txt'"), "%s", out);
	cr_assert_null(strstr(out, "q.txt"), "%s", out);
	/* the options both need */
	cr_assert_eq(run(out, sizeof(out), "$S eval --load m.ckpt 2>&1"), 2,
		     "%s", out);
	cr_assert(strstr(out, "--load and --data"), "%s", out);
}

/*
 * The floats of the .npy files model.json lists in @dir/@folder, in its
 * order, appended at @out (room for @cap): each file's header checked
 * (NumPy 1.0, little-endian float32, C order) and its shape against the
 * floats that follow.  Returns how many floats, -1 on a bad file.
 */
static long read_export(const char *folder, float *out, size_t cap)
{
	char path[512], json[16384], *at;
	long total = 0;
	size_t len;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s/model.json", dir, folder);
	f = fopen(path, "r");
	if (!f)
		return -1;
	len = fread(json, 1, sizeof(json) - 1, f);
	fclose(f);
	json[len] = '\0';
	for (at = strstr(json, "\"file\": \""); at;
	     at = strstr(at + 1, "\"file\": \"")) {
		unsigned char head[10];
		char name[64], header[512], *shape;
		size_t rows = 1, cols = 0, n, hlen;

		if (sscanf(at, "\"file\": \"%63[^\"]", name) != 1)
			return -1;
		snprintf(path, sizeof(path), "%s/%s/%s", dir, folder, name);
		f = fopen(path, "rb");
		if (!f || fread(head, 1, 10, f) != 10 ||
		    memcmp(head, "\x93NUMPY\x01\x00", 8) != 0)
			return -1;
		hlen = head[8] | (size_t)head[9] << 8;
		if ((10 + hlen) % 64 != 0 || hlen >= sizeof(header) ||
		    fread(header, 1, hlen, f) != hlen)
			return -1;
		header[hlen] = '\0';
		shape = strstr(header, "'shape': (");
		if (!strstr(header, "'descr': '<f4', 'fortran_order': False") ||
		    !shape)
			return -1;
		/* (rows, cols), or (cols,) */
		if (sscanf(shape, "'shape': (%zu, %zu)", &rows, &cols) != 2) {
			rows = 1;
			if (sscanf(shape, "'shape': (%zu,)", &cols) != 1)
				return -1;
		}
		n = fread(out + total, sizeof(float), cap - (size_t)total, f);
		fclose(f);
		if (n != rows * cols)
			return -1;
		total += (long)n;
	}
	return total;
}

/*
 * export: the model's floats, every one, in the files model.json lists,
 * in their order; the sizes in model.json; an existing folder is refused
 * and left, and a failed export leaves nothing.
 */
Test(cmd_eval, export_writes_every_float_of_the_model)
{
	enum { CAP = 400000 };
	float *want = malloc(CAP * sizeof(float));
	float *got = malloc(CAP * sizeof(float));
	uint64_t hash, n, examples;
	char out[8192], path[512];
	long floats;

	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data train.txt " MODEL
			 " --threads 1 --progress 0 --save m.ckpt 2>&1 && "
			 "$S export --load m.ckpt --out m 2>&1"),
		     0, "%s", out);
	cr_assert(strstr(out, "to 'm'"), "%s", out);
	snprintf(path, sizeof(path), "%s/m.ckpt", dir);
	cr_assert_eq(ss_checkpoint_peek(path, &hash, &n, &examples), 0);
	cr_assert(n < CAP);
	cr_assert_eq(
		ss_checkpoint_load(path, want, NULL, n, hash, &examples, NULL),
		0);
	floats = read_export("m", got, CAP);
	cr_assert_eq(floats, (long)n);
	cr_assert(memcmp(got, want, n * sizeof(float)) == 0);
	cr_assert_eq(run(out, sizeof(out), "cat m/model.json"), 0);
	cr_assert(strstr(out, "\"bottom\": [13, 16, 4]"), "%s", out);
	cr_assert(strstr(out, "\"top\": [16, 1]"), "%s", out);
	cr_assert(strstr(out, "\"rows\": [2000, 2000,"), "%s", out);
	cr_assert(strstr(out, "\"trained_examples\": 6000"), "%s", out);
	/* an existing folder: refused, left as it was */
	cr_assert_eq(
		run(out, sizeof(out), "$S export --load m.ckpt --out m 2>&1"),
		2, "%s", out);
	cr_assert(strstr(out, "--out 'm': it exists"), "%s", out);
	cr_assert_eq(read_export("m", got, CAP), (long)n);
	/* a folder that cannot be made: nothing left beside it */
	cr_assert_eq(run(out, sizeof(out),
			 "$S export --load m.ckpt --out none/m 2>&1; ls"),
		     0, "%s", out);
	cr_assert(strstr(out, "--out 'none/m'"), "%s", out);
	cr_assert_null(strstr(out, "tmp-"), "%s", out);
	free(want);
	free(got);
}

/*
 * --hash-size with a number for each table (Criteo's cardinalities span
 * 3 to 10 million): on two ranks with sharded tables, the set evaluates
 * to rank 0's figures and exports each table at its size; the same sizes
 * from a file make the same model (--load takes the checkpoint); a list
 * of another length, or a bad number, is refused naming it.
 */
#define SIZES \
	"3,500,37,1000,7,2000,4,300,50,10,800,1200,2,90,600,40,9,1500,25,70,5,400,100,30,8,2500"
#define SMALL_MLPS "--emb-dim 4 --bottom 13-16-4 --top 16-1"

Test(cmd_eval, tables_of_several_sizes)
{
	char trained[16384], evaluated[4096], out[8192];
	const char *rank0;

	sharded_eval_is_rank0s(SMALL_MLPS " --hash-size " SIZES, evaluated,
			       sizeof(evaluated), trained, sizeof(trained),
			       &rank0);
	cr_assert_eq(run(out, sizeof(out),
			 "$S export --load 's.{rank}' --out e >/dev/null && "
			 "grep '\"rows\"' e/model.json && "
			 "grep -c 'shape.: .2500, 4' e/model.json"),
		     0, "%s", out);
	cr_assert(strstr(out, "[3, 500, 37, 1000,"), "%s", out);
	/* a file of the same sizes, a line of comment among them */
	cr_assert_eq(run(out, sizeof(out),
			 "printf '# per table\\n" SIZES "\\n' | tr , ' ' "
			 "> sizes.txt && $S train --data test.txt " SMALL_MLPS
			 " --hash-size " SIZES " --threads 1 --progress 0 "
			 "--save l.ckpt >/dev/null 2>&1 && "
			 "$S train --data test.txt " SMALL_MLPS
			 " --hash-size @sizes.txt --load l.ckpt --threads 1 "
			 "--progress 0 2>&1"),
		     0, "%s", out);
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data test.txt --hash-size 3,4 2>&1"),
		     2, "%s", out);
	cr_assert(strstr(out, "(2 numbers): want 1 or 26"), "%s", out);
	cr_assert_eq(run(out, sizeof(out),
			 "echo '3 4 x' > bad.txt && $S train --data test.txt "
			 "--hash-size @bad.txt 2>&1"),
		     2, "%s", out);
	cr_assert(strstr(out, "bad.txt:1 'x': not a decimal integer"), "%s",
		  out);
}

/*
 * --interaction dcn through every command that reads a model: two ranks
 * on sharded tables train it (the cross network synced with the MLPs)
 * and eval reads their set back to rank 0's figures; one rank's
 * checkpoint exports every float, the cross layers named and shaped in
 * model.json; a checkpoint of the dot model is refused by a DCN run that
 * loads it; bad cross options are refused naming them.
 */
#define DCN "--interaction dcn --cross-layers 2 --cross-rank 8"

Test(cmd_eval, the_dcn_model_trains_evaluates_and_exports)
{
	enum { CAP = 400000 };
	float *want = malloc(CAP * sizeof(float));
	float *got = malloc(CAP * sizeof(float));
	char trained[16384], evaluated[4096], out[8192], path[512];
	uint64_t hash, n, examples;
	const char *rank0;

	sharded_eval_is_rank0s(MODEL " " DCN, evaluated, sizeof(evaluated),
			       trained, sizeof(trained), &rank0);
	cr_assert(strstr(rank0, "\"interaction\":\"dcn\",\"cross_layers\":2,"
				"\"cross_rank\":8"),
		  "%s", rank0);
	cr_assert_lt(cmd_json_number(rank0, "test_ne"), 1.0, "%s", rank0);
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data train.txt " MODEL " " DCN
			 " --threads 1 --progress 0 --save m.ckpt 2>&1 && "
			 "$S export --load m.ckpt --out m 2>&1 && "
			 "cat m/model.json"),
		     0, "%s", out);
	cr_assert(strstr(out, "\"interaction_kind\": \"dcn\",\n  "
			      "\"cross_layers\": 2,\n  \"cross_rank\": 8"),
		  "%s", out);
	/* width 27 x 4 = 108: W 108 x 8, V 8 x 108, the bias 108 */
	cr_assert(strstr(out, "\"name\": \"cross.1.W\", \"file\": "
			      "\"cross.1.W.npy\", \"shape\": [108, 8]"),
		  "%s", out);
	cr_assert(strstr(out, "\"name\": \"cross.1.V\", \"file\": "
			      "\"cross.1.V.npy\", \"shape\": [8, 108]"),
		  "%s", out);
	cr_assert(strstr(out, "\"top\": [16, 1]"), "%s", out);
	cr_assert(strstr(out, "\"top_input\": 108"), "%s", out);
	snprintf(path, sizeof(path), "%s/m.ckpt", dir);
	cr_assert_eq(ss_checkpoint_peek(path, &hash, &n, &examples), 0);
	cr_assert(n < CAP);
	cr_assert_eq(
		ss_checkpoint_load(path, want, NULL, n, hash, &examples, NULL),
		0);
	cr_assert_eq(read_export("m", got, CAP), (long)n);
	cr_assert(memcmp(got, want, n * sizeof(float)) == 0);
	/* the dot model's checkpoint is another model */
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data test.txt " MODEL
			 " --threads 1 --progress 0 --save dot.ckpt >/dev/null "
			 "2>&1 && $S train --data test.txt " MODEL " " DCN
			 " --threads 1 --progress 0 --load dot.ckpt 2>&1"),
		     1, "%s", out);
	cr_assert(strstr(out, "'dot.ckpt'"), "%s", out);
	cr_assert(strstr(out, "another model layout"), "%s", out);
	cr_assert(strstr(out, "--interaction"), "%s", out);
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data test.txt " MODEL
			 " --interaction dcn --cross-rank 109 2>&1"),
		     2, "%s", out);
	cr_assert(strstr(out, "--cross-rank 109 (width 108)"), "%s", out);
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data test.txt " MODEL
			 " --interaction cross 2>&1"),
		     2, "%s", out);
	cr_assert(strstr(out, "--interaction"), "%s", out);
	cr_assert(strstr(out, "dot"), "%s", out);
	free(want);
	free(got);
}

/*
 * Multi-hot data (gen-data --multi-hot: MLPerf's bag sizes): train reads
 * it with mean pooling and the DCN model, eval and predict read the test
 * file's bags as train did (the same NE); two ranks on sharded tables
 * (every value a row of the lookups) train it, and their shards
 * evaluate to rank 0's figures.
 */
Test(cmd_eval, multi_hot_data_trains_and_evaluates)
{
	char trained[8192], evaluated[4096], out[8192];
	int port = ranks_port_base();

	cr_assert_eq(run(out, sizeof(out),
			 "$S gen-data --out mh.txt --examples 4000 "
			 "--cardinality 300 --multi-hot mlperf >/dev/null && "
			 "$S gen-data --out mht.txt --examples 1000 --stream 1 "
			 "--cardinality 300 --multi-hot mlperf >/dev/null && "
			 "grep -c multi_hot mh.txt.teacher.json"),
		     0, "%s", out);
	/* bag sizes: one for all, or 26, each 1 to 256 */
	cr_assert_eq(run(out, sizeof(out),
			 "$S gen-data --out x.txt --multi-hot 1,2 2>&1"),
		     2, "%s", out);
	cr_assert(strstr(out, "--multi-hot '1,2' (2 sizes): want 1 or 26"),
		  "%s", out);
	cr_assert_eq(run(out, sizeof(out),
			 "$S gen-data --out x.txt --multi-hot 257 2>&1"),
		     2, "%s", out);
	cr_assert(strstr(out, "--multi-hot"), "%s", out);
	cr_assert_eq(run(trained, sizeof(trained),
			 "$S train --data mh.txt --test mht.txt " MODEL " " DCN
			 " --pooling mean --threads 2 --progress 0 "
			 "--save mh.ckpt --json 2>&1"),
		     0, "%s", trained);
	cr_assert_eq(cmd_json_number(trained, "examples"), 4000, "%s", trained);
	cr_assert_lt(cmd_json_number(trained, "test_ne"), 1.0, "%s", trained);
	cr_assert_eq(run(evaluated, sizeof(evaluated),
			 "$S eval --load mh.ckpt --data mht.txt --json 2>&1"),
		     0, "%s", evaluated);
	cr_assert_eq(cmd_json_number(evaluated, "ne"),
		     cmd_json_number(trained, "test_ne"), "%s\n%s", trained,
		     evaluated);
	cr_assert_eq(run(out, sizeof(out),
			 "$S predict --load mh.ckpt --data mht.txt | wc -l"),
		     0, "%s", out);
	cr_assert_eq(atoi(out), 1000, "%s", out);
	/* a checkpoint of sum pooling is another model than mean's */
	cr_assert_eq(run(out, sizeof(out),
			 "$S train --data mht.txt " MODEL " " DCN
			 " --threads 1 --progress 0 --load mh.ckpt 2>&1"),
		     1, "%s", out);
	cr_assert(strstr(out, "another model layout"), "%s", out);
	cr_assert_eq(run(trained, sizeof(trained),
			 "$S launch -n 2 --port %d --json -- train --data "
			 "mh.txt --test mht.txt " MODEL " " DCN
			 " --threads 1 --progress 0 --save 's.{rank}' "
			 "2>/dev/null",
			 port),
		     0, "%s", trained);
	cr_assert(strstr(trained, "\"tables\":\"sharded\""), "%s", trained);
	cr_assert_lt(cmd_json_number(strstr(trained, "{\"rank\":0"), "test_ne"),
		     1.0, "%s", trained);
	cr_assert_eq(run(evaluated, sizeof(evaluated),
			 "$S eval --load 's.{rank}' --data mht.txt --json "
			 "2>&1"),
		     0, "%s", evaluated);
	cr_assert_eq(cmd_json_number(evaluated, "ne"),
		     cmd_json_number(strstr(trained, "{\"rank\":0"), "test_ne"),
		     "%s\n%s", trained, evaluated);
}
