// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync eval and predict: a trained model used without training.
 * The model's sizes come from the checkpoint's record (train writes them
 * there), the floats from the checkpoint, checked whole first; eval
 * reports the held-out figures of a file, predict writes one click
 * probability a line.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "train_cmd.h"

static void ss_eval_usage(FILE *out, bool predict)
{
	if (predict)
		fprintf(out,
			"usage: shadowsync predict --load CKPT --data FILE [--out FILE]\n"
			"                          [--bad-lines fail|skip]\n"
			"\n"
			"Write the click probability the model of CKPT gives each example of\n"
			"FILE (the Criteo format train reads; the label is read and not used),\n"
			"one a line, in the examples' order.\n");
	else
		fprintf(out,
			"usage: shadowsync eval --load CKPT --data FILE [--bad-lines fail|skip]\n"
			"                       [--json]\n"
			"\n"
			"Evaluate the model of CKPT on FILE (the Criteo format train reads):\n"
			"examples, log loss, normalized entropy, AUC, calibration, click rate.\n");
	fprintf(out,
		"\n"
		"CKPT is a checkpoint train saved (--save): it says what model it holds.\n"
		"A sharded model's files are read together: --load 'PATH.{rank}'.\n"
		"\n"
		"  --load CKPT            the checkpoint\n"
		"  --data FILE            the examples: plain or gzip (read as it is),\n"
		"                         - for standard input\n"
		"%s"
		"  --bad-lines P          fail at a malformed line (default), or skip it\n"
		"%s"
		"  -h, --help             this help\n",
		predict ?
			"  --out FILE             where to write (default: standard output)\n" :
			"",
		predict ?
			"" :
			"  --json                 print the figures as one JSON line\n");
}

/* Where predict writes. */
struct ss_predict_out {
	FILE *f;
	const char *name;
};

/* Each example's probability, one a line. */
static int ss_predict_write(void *ctx, const struct ss_example *ex,
			    const float *p, int n)
{
	struct ss_predict_out *o = ctx;

	(void)ex;
	for (int i = 0; i < n; i++)
		fprintf(o->f, "%.7g\n", (double)p[i]);
	return ferror(o->f) ? ss_error_set(-EIO, NULL,
					   "check the free space and rights",
					   "writing '%s'", o->name) :
			      0;
}

static void ss_eval_print(const struct ss_metrics *t, uint64_t skipped,
			  bool json)
{
	if (!json) {
		printf("%" PRIu64 " examples: NE %.4f, AUC %.4f, log loss "
		       "%.4f, calibration %.4f, click rate %.4f",
		       t->count, t->ne, t->auc, t->log_loss, t->calibration,
		       t->ctr);
		if (skipped)
			printf(" (%" PRIu64 " malformed lines skipped)",
			       skipped);
		printf("\n");
		return;
	}
	printf("{\"examples\": %" PRIu64 ", \"ne\": ", t->count);
	ss_json_double(stdout, "%.6f", t->ne);
	printf(", \"auc\": ");
	ss_json_double(stdout, "%.6f", t->auc);
	printf(", \"log_loss\": ");
	ss_json_double(stdout, "%.6f", t->log_loss);
	printf(", \"calibration\": ");
	ss_json_double(stdout, "%.6f", t->calibration);
	printf(", \"ctr\": ");
	ss_json_double(stdout, "%.6f", t->ctr);
	printf(", \"skipped\": %" PRIu64 "}\n", skipped);
}

static int ss_eval_main(int argc, char **argv, bool predict)
{
	enum { OPT_LOAD = 256, OPT_DATA, OPT_OUT, OPT_BAD, OPT_JSON };
	static const struct option eval_options[] = {
		{ "load", required_argument, NULL, OPT_LOAD },
		{ "data", required_argument, NULL, OPT_DATA },
		{ "bad-lines", required_argument, NULL, OPT_BAD },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const struct option predict_options[] = {
		{ "load", required_argument, NULL, OPT_LOAD },
		{ "data", required_argument, NULL, OPT_DATA },
		{ "out", required_argument, NULL, OPT_OUT },
		{ "bad-lines", required_argument, NULL, OPT_BAD },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const struct option *options = predict ? predict_options : eval_options;
	const char *prog = predict ? "shadowsync predict" : "shadowsync eval";
	const char *load = NULL, *data = NULL, *out_path = NULL;
	enum ss_bad_lines bad = SS_BAD_LINES_FAIL;
	struct ss_model_config m;
	struct ss_metrics t;
	uint64_t skipped = 0;
	float *params = NULL;
	FILE *out = stdout;
	bool json = false;
	int opt, rc = 0;

	optind = 1;
	opterr = 0;
	while (rc == 0 &&
	       (opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		switch (opt) {
		case OPT_LOAD:
			load = optarg;
			break;
		case OPT_DATA:
			data = optarg;
			break;
		case OPT_OUT:
			out_path = optarg;
			break;
		case OPT_BAD:
			rc = ss_bad_lines_parse("--bad-lines", optarg, &bad);
			break;
		case OPT_JSON:
			json = true;
			break;
		case 'h':
			ss_eval_usage(stdout, predict);
			return SS_EXIT_OK;
		default:
			return ss_cmd_fail(prog,
					   ss_cmd_unknown_option(
						   predict ? "predict" : "eval",
						   argv, options));
		}
	}
	if (rc == 0)
		rc = ss_cmd_no_more_args(argc, argv);
	if (rc == 0 && (!load || !data))
		rc = ss_error_set(SS_EUSAGE, "both are required",
				  predict ? "shadowsync predict --load "
					    "model.ckpt --data new.txt" :
					    "shadowsync eval --load model.ckpt "
					    "--data test.txt",
				  "--load and --data");
	if (rc < 0)
		return ss_cmd_fail(prog, rc);
	rc = ss_blas_check();
	/*
	 * The kernels train picks: BLIS's own choice rounds otherwise (on
	 * CPUs where train asks for AVX-512), and eval then gave train's
	 * figures only to about 1e-8.
	 */
	if (rc == 0) {
		char note[256];

		ss_blas_setup(note, sizeof(note));
		ss_log_debug("blas: %s", note);
	}
	if (rc == 0)
		rc = ss_model_load_any(load, &m, &params, NULL);
	if (rc == 0 && out_path && !(out = fopen(out_path, "w")))
		rc = ss_error_set(-errno, NULL,
				  "the folder must exist and be writable",
				  "--out '%s'", out_path);
	if (rc == 0 && predict) {
		struct ss_predict_out po = { out, out_path ?
							  out_path :
							  "standard output" };

		rc = ss_predict_each(&m, params, NULL, data, bad,
				     ss_predict_write, &po, &skipped);
		if (out != stdout && fclose(out) != 0 && rc == 0)
			rc = ss_error_set(-errno, NULL, NULL, "--out '%s'",
					  out_path);
		if (rc == 0 && skipped)
			ss_log_warn("--data '%s': %" PRIu64 " malformed lines "
				    "skipped, no probability written for them",
				    data, skipped);
	} else if (rc == 0) {
		rc = ss_evaluate(&m, params, NULL, data, bad, &t, &skipped);
		if (rc == 0)
			ss_eval_print(&t, skipped, json);
	}
	free(params);
	/* no half-written file of probabilities is left to be taken whole */
	if (rc < 0 && predict && out_path && out != stdout)
		unlink(out_path);
	return rc < 0 ? ss_cmd_fail(prog, rc) : SS_EXIT_OK;
}

int ss_cmd_eval(int argc, char **argv)
{
	return ss_eval_main(argc, argv, false);
}

int ss_cmd_predict(int argc, char **argv)
{
	return ss_eval_main(argc, argv, true);
}
