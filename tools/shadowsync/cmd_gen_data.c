// SPDX-License-Identifier: BSD-2-Clause
/* shadowsync gen-data: synthetic click data from a planted teacher. */
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "command.h"
#include "shadowsync/shadowsync.h"
#include "shadowsync/train.h"

static const char ss_gen_prog[] = "shadowsync gen-data";

static void ss_gen_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowsync gen-data --out FILE [--examples N] [--seed S] [--ctr P]\n"
		"                           [--zipf A[:B]] [--shape S] [--cardinality K]\n"
		"                           [--cap K] [--missing P] [--value-scale X]\n"
		"                           [--pair-scale X] [--dense-pair-scale X]\n"
		"                           [--dense-cat-scale X] [--multi-hot SIZES]\n"
		"                           [--stream K] [--json]\n"
		"\n"
		"Write N examples in the Criteo Kaggle format (label, I1..I13, C1..C26,\n"
		"tab-separated) drawn from a planted teacher model, and FILE.teacher.json\n"
		"with the teacher's own metrics on them: its NE is the floor no model can\n"
		"beat on that file.\n"
		"\n"
		"  -o, --out FILE         where to write (required)\n"
		"  -n, --examples N       examples (default 1000000)\n"
		"  -s, --seed S           the teacher and its sample; the same seed gives\n"
		"                         the same file (default 1)\n"
		"  -t, --stream K         another sample of the same teacher: 1 for a\n"
		"                         held-out file to go with stream 0 (default 0)\n"
		"  -c, --ctr P            click rate to aim for (default 0.25)\n"
		"  -z, --zipf A[:B]       Zipf exponent of categorical values (default 1.1);\n"
		"                         A:B draws each feature's own from A to B\n"
		"  -S, --shape S          distinct values per categorical feature: uniform\n"
		"                         (--cardinality each; the default) or criteo\n"
		"                         (Criteo Kaggle's 26 counts, 3 to 10 million: long\n"
		"                         tails, tables larger than the model's)\n"
		"  -k, --cardinality K    values per feature when uniform (default 30)\n"
		"  -K, --cap K            at most K values a feature (with criteo: the\n"
		"                         counts capped, as a hashed model caps them)\n"
		"  -m, --missing P        share of empty fields, each column its own rate\n"
		"                         from 0 to 2P (default: 5 %% of dense, 3 %% of\n"
		"                         categorical fields in every column)\n"
		"  -w, --value-scale X    standard deviation of each value's own weight in\n"
		"                         the teacher's logit (default 0.35)\n"
		"  -p, --pair-scale X     weight of the teacher's pairwise interactions, dot\n"
		"                         products of 4-dim value embeddings (default 0.05)\n"
		"  -d, --dense-pair-scale X  weight of 6 dense x dense products (default 0)\n"
		"  -x, --dense-cat-scale X   weight of 6 dense x categorical terms: each\n"
		"                         value its own slope on a dense feature (default 0)\n"
		"  -M, --multi-hot SIZES  values in each categorical field: one number for\n"
		"                         all 26, 26 separated by commas, or mlperf (the\n"
		"                         sizes of MLPerf's DLRMv2 synthetic multi-hot\n"
		"                         Criteo 1TB: 3,2,1,2,6,1,1,1,1,7,3,8,1,6,9,5,1,\n"
		"                         1,1,12,100,27,10,3,1,1); comma-separated in the\n"
		"                         field; the teacher sees each bag's mean\n"
		"                         (default 1: one value a field)\n"
		"  -j, --json             print the summary as JSON\n"
		"  -h, --help             this help\n");
}

/* ,"@key": then @v as ss_json_double() writes it (null for NaN). */
static void ss_json_field(FILE *f, const char *key, const char *format,
			  double v)
{
	fprintf(f, ",\"%s\":", key);
	ss_json_double(f, format, v);
}

/* --multi-hot: N for all, 26 numbers, or mlperf's sizes. */
static int ss_gen_parse_multi_hot(const char *text, struct ss_gen_options *o)
{
	static const uint32_t mlperf[SS_SPARSE] = {
		3, 2, 1, 2, 6, 1, 1,  1,   1,  7,  3, 8, 1,
		6, 9, 5, 1, 1, 1, 12, 100, 27, 10, 3, 1, 1,
	};
	char copy[512], *rest = copy, *tok;
	int n = 0;

	if (!strcmp(text, "mlperf")) {
		memcpy(o->multi_hot, mlperf, sizeof(mlperf));
		return 0;
	}
	if (strlen(text) >= sizeof(copy))
		return ss_error_set(SS_EUSAGE, "too long", NULL,
				    "--multi-hot '%.32s...'", text);
	strcpy(copy, text);
	while ((tok = strsep(&rest, ","))) {
		long v;
		int rc;

		if (n == SS_SPARSE)
			return ss_error_set(SS_EUSAGE, "more than 26 sizes",
					    "one for all, or one a feature",
					    "--multi-hot '%s'", text);
		rc = ss_parse_long("--multi-hot", tok, 1, SS_GEN_MAX_HOT, &v);
		if (rc < 0)
			return rc;
		o->multi_hot[n++] = (uint32_t)v;
	}
	if (n != 1 && n != SS_SPARSE)
		return ss_error_set(SS_EUSAGE, "want 1 or 26 sizes",
				    "one for all, or one a feature: e.g. "
				    "mlperf's",
				    "--multi-hot '%s' (%d sizes)", text, n);
	for (int j = 1; n == 1 && j < SS_SPARSE; j++)
		o->multi_hot[j] = o->multi_hot[0];
	return 0;
}

static int ss_write_teacher(const char *path, const struct ss_gen_options *o,
			    const struct ss_metrics *m)
{
	char json[4096];
	FILE *f;

	snprintf(json, sizeof(json), "%s.teacher.json", path);
	f = fopen(json, "w");
	if (!f)
		return ss_error_set(-errno, NULL, NULL, "writing '%s'", json);
	/* NE and AUC are NaN on one class (one example, say), calibration on
	 * no clicks: JSON has no NaN, so those are null, as in train --json. */
	fprintf(f, "{\"examples\":%llu,\"seed\":%llu,\"stream\":%llu,\"ctr\":",
		(unsigned long long)o->examples, (unsigned long long)o->seed,
		(unsigned long long)o->stream);
	ss_json_double(f, "%.6f", m->ctr);
	ss_json_field(f, "ne", "%.6f", m->ne);
	ss_json_field(f, "log_loss", "%.6f", m->log_loss);
	ss_json_field(f, "auc", "%.6f", m->auc);
	ss_json_field(f, "calibration", "%.6f", m->calibration);
	/* The criteo shape has a count per feature (ss_gen_cardinality()),
	 * not o->cardinality: its name says it all. */
	if (o->shape == SS_GEN_CRITEO)
		fputs(",\"shape\":\"criteo\"", f);
	else
		fprintf(f, ",\"shape\":\"uniform\",\"cardinality\":%u",
			o->cardinality);
	ss_json_field(f, "zipf", "%g", o->zipf);
	ss_json_field(f, "value_scale", "%g", o->value_scale);
	ss_json_field(f, "pair_scale", "%g", o->pair_scale);
	if (o->zipf_max > o->zipf)
		ss_json_field(f, "zipf_max", "%g", o->zipf_max);
	if (o->cap)
		fprintf(f, ",\"cap\":%u", o->cap);
	if (o->missing >= 0)
		ss_json_field(f, "missing", "%g", o->missing);
	ss_json_field(f, "dense_pair_scale", "%g", o->dense_pair_scale);
	ss_json_field(f, "dense_cat_scale", "%g", o->dense_cat_scale);
	for (int j = 0; j < SS_SPARSE; j++)
		if (o->multi_hot[j] > 1) {
			fputs(",\"multi_hot\":[", f);
			for (int k = 0; k < SS_SPARSE; k++)
				fprintf(f, "%s%u", k ? "," : "",
					o->multi_hot[k] ? o->multi_hot[k] : 1);
			fputs("]", f);
			break;
		}
	fputs("}\n", f);
	return fclose(f) == 0 ?
		       0 :
		       ss_error_set(-errno, NULL, NULL, "writing '%s'", json);
}

/* --zipf A or A:B (B > A: each feature's exponent drawn from [A, B]). */
static int ss_gen_parse_zipf(const char *text, struct ss_gen_options *o)
{
	const char *colon = strchr(text, ':');
	char lo[64];
	int rc;

	if (!colon)
		return ss_parse_double("--zipf", text, 0, 5, &o->zipf);
	snprintf(lo, sizeof(lo), "%.*s", (int)(colon - text), text);
	rc = ss_parse_double("--zipf", lo, 0, 5, &o->zipf);
	if (rc == 0)
		rc = ss_parse_double("--zipf", colon + 1, 0, 5, &o->zipf_max);
	/* named whole: the half alone would not say where it came from */
	if (rc < 0)
		return ss_error_set(SS_EUSAGE,
				    "A and B must be numbers from 0 to 5",
				    "give A:B with A < B, or one exponent",
				    "--zipf '%s'", text);
	if (o->zipf_max <= o->zipf)
		return ss_error_set(SS_EUSAGE, "the range is empty",
				    "give A:B with A < B, or one exponent",
				    "--zipf '%s'", text);
	return 0;
}

int ss_cmd_gen_data(int argc, char **argv)
{
	static const struct option options[] = {
		{ "out", required_argument, NULL, 'o' },
		{ "examples", required_argument, NULL, 'n' },
		{ "seed", required_argument, NULL, 's' },
		{ "stream", required_argument, NULL, 't' },
		{ "ctr", required_argument, NULL, 'c' },
		{ "zipf", required_argument, NULL, 'z' },
		{ "shape", required_argument, NULL, 'S' },
		{ "cardinality", required_argument, NULL, 'k' },
		{ "value-scale", required_argument, NULL, 'w' },
		{ "pair-scale", required_argument, NULL, 'p' },
		{ "cap", required_argument, NULL, 'K' },
		{ "missing", required_argument, NULL, 'm' },
		{ "dense-pair-scale", required_argument, NULL, 'd' },
		{ "dense-cat-scale", required_argument, NULL, 'x' },
		{ "multi-hot", required_argument, NULL, 'M' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct ss_gen_options o;
	struct ss_metrics m;
	static const char *const shapes[] = { "uniform", "criteo", NULL };
	const char *out = NULL;
	bool json = false, cardinality_given = false;
	char tmp[4096];
	struct stat st;
	long v;
	FILE *f;
	int opt, rc = 0;

	ss_gen_options_init(&o);
	optind = 1;
	while ((opt = getopt_long(argc, argv,
				  "o:n:s:t:c:z:S:k:K:m:d:x:w:p:M:jh", options,
				  NULL)) != -1) {
		switch (opt) {
		case 'o':
			out = optarg;
			break;
		case 'n':
			rc = ss_parse_long("--examples", optarg, 1, 100000000,
					   &v);
			o.examples = (uint64_t)v;
			break;
		case 's':
			rc = ss_parse_long("--seed", optarg, 0, 1L << 62, &v);
			o.seed = (uint64_t)v;
			break;
		case 't':
			rc = ss_parse_long("--stream", optarg, 0, 1L << 62, &v);
			o.stream = (uint64_t)v;
			break;
		case 'c':
			rc = ss_parse_double("--ctr", optarg, 0.001, 0.999,
					     &o.ctr);
			break;
		case 'z':
			rc = ss_gen_parse_zipf(optarg, &o);
			break;
		case 'K':
			rc = ss_parse_long("--cap", optarg, 1, 100000000, &v);
			o.cap = (uint32_t)v;
			break;
		case 'm':
			rc = ss_parse_double("--missing", optarg, 0, 0.5,
					     &o.missing);
			break;
		case 'd':
			rc = ss_parse_double("--dense-pair-scale", optarg, 0,
					     10, &o.dense_pair_scale);
			break;
		case 'x':
			rc = ss_parse_double("--dense-cat-scale", optarg, 0, 10,
					     &o.dense_cat_scale);
			break;
		case 'S': {
			int i;

			rc = ss_parse_choice("--shape", optarg, shapes, &i);
			o.shape = i == 1 ? SS_GEN_CRITEO : SS_GEN_UNIFORM;
			break;
		}
		case 'k':
			rc = ss_parse_long("--cardinality", optarg, 1,
					   100000000, &v);
			o.cardinality = (uint32_t)v;
			cardinality_given = true;
			break;
		case 'w':
			rc = ss_parse_double("--value-scale", optarg, 0, 10,
					     &o.value_scale);
			break;
		case 'p':
			rc = ss_parse_double("--pair-scale", optarg, 0, 10,
					     &o.pair_scale);
			break;
		case 'M':
			rc = ss_gen_parse_multi_hot(optarg, &o);
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			ss_gen_usage(stdout);
			return SS_EXIT_OK;
		default:
			return ss_cmd_fail(ss_gen_prog,
					   ss_cmd_unknown_option(
						   "gen-data", argv, options));
		}
		if (rc < 0)
			return ss_cmd_fail(ss_gen_prog, rc);
	}
	/* "gen-data --out f 50000" would write the default million */
	rc = ss_cmd_no_more_args(argc, argv);
	if (rc < 0)
		return ss_cmd_fail(ss_gen_prog, rc);
	if (!out)
		return ss_cmd_fail(ss_gen_prog,
				   ss_error_set(SS_EUSAGE, "it is required",
						"give --out FILE", "--out"));
	if (cardinality_given && o.shape == SS_GEN_CRITEO)
		return ss_cmd_fail(
			ss_gen_prog,
			ss_error_set(SS_EUSAGE,
				     "--shape criteo has a count of its own "
				     "for each feature",
				     "give one of --shape criteo and "
				     "--cardinality K",
				     "--cardinality"));
	/* Not standard output: the file is renamed into place when complete,
	 * and the teacher's file goes beside it. */
	if (!strcmp(out, "-"))
		return ss_cmd_fail(
			ss_gen_prog,
			ss_error_set(SS_EUSAGE,
				     "standard output is not supported",
				     "give a file name (FILE.teacher.json is "
				     "written beside it); ./- for a file "
				     "named '-'",
				     "--out '-'"));
	/* The rename below would replace a device or a folder's name. */
	if (stat(out, &st) == 0 && !S_ISREG(st.st_mode))
		return ss_cmd_fail(
			ss_gen_prog,
			ss_error_set(SS_EUSAGE,
				     S_ISDIR(st.st_mode) ?
					     "it is a folder" :
					     "it is not a regular file",
				     "give the path of a file to write (and "
				     "FILE.teacher.json beside it)",
				     "--out '%s'", out));
	/* Written under a temporary name, renamed when complete. */
	snprintf(tmp, sizeof(tmp), "%s.tmp", out);
	f = fopen(tmp, "w");
	if (!f)
		return ss_cmd_fail(
			ss_gen_prog,
			ss_error_set(-errno, NULL,
				     "does its folder exist, and may we write "
				     "there?",
				     "--out '%s': writing '%s'", out, tmp));
	rc = ss_gen_data(f, &o, &m);
	if (fclose(f) != 0 && rc == 0)
		rc = ss_error_set(-errno, NULL, "is the disk full?",
				  "writing '%s'", tmp);
	if (rc == 0 && rename(tmp, out) < 0)
		rc = ss_error_set(-errno, NULL, NULL, "renaming to '%s'", out);
	if (rc == 0)
		rc = ss_write_teacher(out, &o, &m);
	if (rc < 0) {
		unlink(tmp);
		return ss_cmd_fail(ss_gen_prog, rc);
	}
	if (json) {
		/* the path escaped: quotes and control bytes are legal in it */
		printf("{\"file\":");
		ss_json_string(stdout, out);
		printf(",\"examples\":%llu,\"ctr\":",
		       (unsigned long long)o.examples);
		ss_json_double(stdout, "%.6f", m.ctr);
		ss_json_field(stdout, "teacher_ne", "%.6f", m.ne);
		ss_json_field(stdout, "teacher_auc", "%.6f", m.auc);
		fputs("}\n", stdout);
	} else
		printf("wrote %llu examples to %s: click rate %.4f; teacher NE %.4f (the floor), AUC %.4f; details in %s.teacher.json\n",
		       (unsigned long long)o.examples, out, m.ctr, m.ne, m.auc,
		       out);
	return SS_EXIT_OK;
}
