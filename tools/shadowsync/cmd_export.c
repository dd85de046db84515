// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync export: a trained model's weights and configuration in a
 * folder any framework can read (docs/export.md): model.json says what
 * the model is, how its input is turned into numbers and which file
 * holds each tensor; each tensor is a NumPy .npy file of little-endian
 * float32 (numpy.load, torch.from_numpy).  The folder appears whole or
 * not at all: it is written under another name and renamed.
 */
#include <dirent.h>
#include <fcntl.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_cmd.h"

#define SS_EXPORT_FORMAT "shadowsync-dlrm"
#define SS_EXPORT_VERSION 1

static void ss_export_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowsync export --load CKPT --out DIR\n"
		"\n"
		"Write the model of CKPT into the new folder DIR: model.json (the sizes,\n"
		"how a Criteo line becomes the model's input, the tensors) and one NumPy\n"
		".npy file of float32 a tensor, for serving or for PyTorch\n"
		"(docs/export.md loads it into the DLRM of shadowsync.examples.dlrm).\n"
		"A sharded model's files are read together: --load 'PATH.{rank}'.\n"
		"\n"
		"  --load CKPT            the checkpoint train saved (--save)\n"
		"  --out DIR              the folder to make; it must not exist\n"
		"  -h, --help             this help\n");
}

/* A tensor of the model: @rows x @cols floats at @data, @rows 0: 1-D. */
struct ss_tensor {
	char name[32];
	const float *data;
	size_t rows, cols;
};

/* @name, new in folder @dir, open for writing into *@f. */
static int ss_export_create(int dir, const char *name, FILE **f)
{
	int fd = openat(dir, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
			0644);

	*f = fd < 0 ? NULL : fdopen(fd, "w");
	if (!*f) {
		int rc = -errno;

		if (fd >= 0)
			close(fd);
		return ss_error_set(rc, NULL, NULL, "writing '%s'", name);
	}
	return 0;
}

/* @f (@name) written out to the disk and closed, whatever went wrong. */
static int ss_export_finish(FILE *f, const char *name)
{
	int rc =
		ferror(f) || fflush(f) != 0 || fsync(fileno(f)) != 0 ? -EIO : 0;

	if (fclose(f) != 0 && rc == 0)
		rc = -errno;
	return rc < 0 ? ss_error_set(rc, NULL, "check the free space",
				     "writing '%s'", name) :
			0;
}

/*
 * @t as DIR/NAME.npy: the NumPy format, version 1.0: magic, a header
 * (a Python dict literal) padded with spaces to a multiple of 64 bytes,
 * then the floats in C order.
 */
static int ss_npy_write(int dir, const struct ss_tensor *t)
{
	char header[128], file[sizeof(t->name) + 4], shape[48];
	size_t n = (t->rows ? t->rows : 1) * t->cols;
	/* the magic, version 1.0, the header's length (2 bytes LE) */
	unsigned char magic[10] = { 0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0 };
	int len, rc;
	FILE *f;

	if (t->rows)
		snprintf(shape, sizeof(shape), "(%zu, %zu)", t->rows, t->cols);
	else
		snprintf(shape, sizeof(shape), "(%zu,)", t->cols);
	len = snprintf(header, sizeof(header),
		       "{'descr': '%cf4', 'fortran_order': False, "
		       "'shape': %s, }",
		       __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? '<' : '>',
		       shape);
	while ((len + 1 + (int)sizeof(magic)) % 64)
		header[len++] = ' ';
	header[len++] = '\n';
	magic[8] = (unsigned char)(len & 0xff);
	magic[9] = (unsigned char)(len >> 8);
	snprintf(file, sizeof(file), "%.*s.npy", (int)sizeof(t->name) - 1,
		 t->name);
	rc = ss_export_create(dir, file, &f);
	if (rc < 0)
		return rc;
	fwrite(magic, 1, sizeof(magic), f);
	fwrite(header, 1, (size_t)len, f);
	fwrite(t->data, sizeof(float), n, f);
	return ss_export_finish(f, file);
}

/*
 * The tensors of @params, in the order model.json lists them: each
 * layer's weight (out x in, as torch.nn.Linear keeps it) and bias, the
 * bottom MLP's then the top's; with DCN each cross layer's W (d x R), V
 * (R x d) and bias (d); then each feature's table.  Returns how many; @t
 * holds at least 2 * (2 * SS_MAX_LAYERS) + 3 * SS_MAX_LAYERS + SS_SPARSE.
 */
static int ss_export_tensors(const struct ss_model_config *m,
			     const float *params, struct ss_tensor *t)
{
	int nb = m->n_bottom - 1, n = 0;
	const float *p = params;

	for (int l = 0; l < ss_model_layers(m); l++) {
		bool bottom = l < nb;
		int k = bottom ? l : l - nb, in, out;

		ss_model_layer_shape(m, l, &in, &out);
		t[n] = (struct ss_tensor){ .data = p,
					   .rows = (size_t)out,
					   .cols = (size_t)in };
		snprintf(t[n++].name, sizeof(t->name), "%s.%d.weight",
			 bottom ? "bottom" : "top", k);
		p += (size_t)out * (size_t)in;
		t[n] = (struct ss_tensor){ .data = p, .cols = (size_t)out };
		snprintf(t[n++].name, sizeof(t->name), "%s.%d.bias",
			 bottom ? "bottom" : "top", k);
		p += (size_t)out;
	}
	for (int l = 0;
	     m->interaction == SS_INTERACTION_DCN && l < m->cross_layers; l++) {
		size_t d = (size_t)ss_model_top_input(m),
		       R = (size_t)m->cross_rank;
		static const char *const part[] = { "W", "V", "bias" };

		for (int k = 0; k < 3; k++) {
			t[n] = (struct ss_tensor){ .data = p,
						   .rows = k == 0 ? d :
							   k == 1 ? R :
								    0,
						   .cols = k == 0 ? R : d };
			snprintf(t[n++].name, sizeof(t->name), "cross.%d.%s", l,
				 part[k]);
			p += k < 2 ? d * R : d;
		}
	}
	for (int j = 0; j < SS_SPARSE; j++) {
		uint32_t rows = ss_model_table_rows(m, j);

		t[n] = (struct ss_tensor){ .data = p,
					   .rows = rows,
					   .cols = (size_t)m->emb_dim };
		snprintf(t[n++].name, sizeof(t->name), "embedding.%d", j);
		p += (size_t)rows * (size_t)m->emb_dim;
	}
	return n;
}

static void ss_json_ints(FILE *f, const int *v, int n)
{
	fputc('[', f);
	for (int i = 0; i < n; i++)
		fprintf(f, "%s%d", i ? ", " : "", v[i]);
	fputc(']', f);
}

/* model.json: what the model is, how input becomes numbers, its files. */
static int ss_export_json(int dir, const struct ss_model_config *m,
			  uint64_t trained, const struct ss_tensor *t, int n)
{
	FILE *f;
	int rc = ss_export_create(dir, "model.json", &f);

	if (rc < 0)
		return rc;
	fprintf(f,
		"{\n  \"format\": \"" SS_EXPORT_FORMAT "\",\n"
		"  \"version\": %d,\n"
		"  \"shadowsync\": ",
		SS_EXPORT_VERSION);
	ss_json_string(f, SS_VERSION_STRING);
	fprintf(f,
		",\n  \"trained_examples\": %" PRIu64 ",\n"
		"  \"dense_features\": %d,\n  \"sparse_features\": %d,\n"
		"  \"emb_dim\": %d,\n  \"bottom\": ",
		trained, SS_DENSE, SS_SPARSE, m->emb_dim);
	ss_json_ints(f, m->bottom, m->n_bottom);
	fprintf(f,
		",\n  \"top_input\": %d,\n  \"top\": ", ss_model_top_input(m));
	ss_json_ints(f, m->top, m->n_top);
	fprintf(f, ",\n  \"interaction_kind\": \"%s\"",
		ss_model_interaction_name(m->interaction));
	if (m->interaction == SS_INTERACTION_DCN)
		fprintf(f, ",\n  \"cross_layers\": %d,\n  \"cross_rank\": %d",
			m->cross_layers, m->cross_rank);
	fprintf(f, ",\n  \"rows\": [");
	for (int j = 0; j < SS_SPARSE; j++)
		fprintf(f, "%s%" PRIu32, j ? ", " : "",
			ss_model_table_rows(m, j));
	fprintf(f,
		"],\n"
		"  \"dense_input\": \"log(1 + x) of each integer field, 0 when "
		"it is negative or empty\",\n"
		"  \"sparse_input\": \"feature j's 8 hex digits as a 32-bit "
		"value v (0 when empty); its row: splitmix64((j << 32) | v) "
		"mod rows[j]\",\n"
		"  \"interaction\": \"%s\",\n"
		"  \"activation\": \"relu after every layer but the top's "
		"last; the output is a logit: sigmoid gives the click "
		"probability\",\n"
		"  \"tensors\": [",
		m->interaction == SS_INTERACTION_DCN ?
			"x0 = [z, e_0 .. e_25] end to end (z the bottom MLP's "
			"output); for each cross layer l, x = x0 * (W_l (V_l "
			"x) + bias_l) + x (elementwise product), from x = x0; "
			"the top MLP takes the last x" :
			"z, the bottom MLP's output, then the dot product of "
			"every pair (a, b), b < a, of [z, e_0 .. e_25] in the "
			"order a = 1 .. 26, b = 0 .. a - 1");
	for (int i = 0; i < n; i++) {
		fprintf(f,
			"%s\n    {\"name\": \"%s\", \"file\": \"%s.npy\", "
			"\"shape\": [",
			i ? "," : "", t[i].name, t[i].name);
		if (t[i].rows)
			fprintf(f, "%zu, ", t[i].rows);
		fprintf(f, "%zu]}", t[i].cols);
	}
	fprintf(f, "\n  ]\n}\n");
	return ss_export_finish(f, "model.json");
}

/* What an export that failed wrote: the files in @tmp, then the folder. */
static void ss_export_remove(const char *tmp)
{
	DIR *d = opendir(tmp);
	struct dirent *e;

	while (d && (e = readdir(d)))
		if (e->d_name[0] != '.')
			unlinkat(dirfd(d), e->d_name, 0);
	if (d)
		closedir(d);
	rmdir(tmp);
}

/* The model's files in a new folder beside @out, renamed to @out. */
static int ss_export_write(const char *out, const struct ss_model_config *m,
			   const float *params, uint64_t trained)
{
	struct ss_tensor t[7 * SS_MAX_LAYERS + SS_SPARSE];
	int n = ss_export_tensors(m, params, t), dir, rc = 0;
	char tmp[4096];
	struct stat st;

	if (lstat(out, &st) == 0)
		return ss_error_set(SS_EUSAGE, "it exists",
				    "name a new folder, or remove this one",
				    "--out '%s'", out);
	if (snprintf(tmp, sizeof(tmp), "%s.tmp-XXXXXX", out) >=
	    (int)sizeof(tmp))
		return ss_error_set(SS_EUSAGE, "too long", NULL, "--out");
	if (!mkdtemp(tmp))
		return ss_error_set(-errno, NULL,
				    "its parent folder must exist and be "
				    "writable",
				    "--out '%s'", out);
	dir = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		rc = ss_error_set(-errno, NULL, NULL, "'%s'", tmp);
	for (int i = 0; rc == 0 && i < n; i++)
		rc = ss_npy_write(dir, &t[i]);
	if (rc == 0)
		rc = ss_export_json(dir, m, trained, t, n);
	if (rc == 0 && chmod(tmp, 0755) < 0)
		rc = ss_error_set(-errno, NULL, NULL, "'%s'", tmp);
	if (rc == 0 && rename(tmp, out) < 0)
		rc = ss_error_set(-errno, NULL, NULL, "renaming '%s' to '%s'",
				  tmp, out);
	if (dir >= 0)
		close(dir);
	if (rc < 0) {
		ss_export_remove(tmp);
		return ss_error_prefix("--out '%s'", out);
	}
	return 0;
}

int ss_cmd_export(int argc, char **argv)
{
	enum { OPT_LOAD = 256, OPT_OUT };
	static const struct option options[] = {
		{ "load", required_argument, NULL, OPT_LOAD },
		{ "out", required_argument, NULL, OPT_OUT },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *load = NULL, *out = NULL;
	struct ss_model_config m;
	float *params = NULL;
	uint64_t trained = 0;
	int opt, rc = 0;

	optind = 1;
	opterr = 0;
	while ((opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		switch (opt) {
		case OPT_LOAD:
			load = optarg;
			break;
		case OPT_OUT:
			out = optarg;
			break;
		case 'h':
			ss_export_usage(stdout);
			return SS_EXIT_OK;
		default:
			return ss_cmd_fail(
				"shadowsync export",
				ss_cmd_unknown_option("export", argv, options));
		}
	}
	rc = ss_cmd_no_more_args(argc, argv);
	if (rc == 0 && (!load || !out))
		rc = ss_error_set(SS_EUSAGE, "both are required",
				  "shadowsync export --load model.ckpt "
				  "--out model",
				  "--load and --out");
	if (rc == 0)
		rc = ss_model_load_any(load, &m, &params, &trained);
	if (rc == 0)
		rc = ss_export_write(out, &m, params, trained);
	free(params);
	if (rc < 0)
		return ss_cmd_fail("shadowsync export", rc);
	printf("exported the model of '%s' (%" PRIu64
	       " examples trained) to '%s'\n",
	       load, trained, out);
	return SS_EXIT_OK;
}
