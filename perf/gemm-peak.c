// SPDX-License-Identifier: BSD-2-Clause
/*
 * gemm-peak: the core's single-threaded sgemm rate, the physical limit a
 * trainer is held against (perf/vs-peak, issue 40), on the BLIS kernels
 * `shadowsync train` picks (ss_blas_setup()): a large square product,
 * and every GEMM of one training step of the model at its batch; and the
 * model's floating-point operations an example, from its sizes.
 *
 *   gemm-peak [--batch 128] [--emb-dim 16] [--bottom 13-512-256-64-16]
 *             [--top 512-256-1] [--interaction dot|dcn] [--cross-layers L]
 *             [--cross-rank R] [--seconds 1] [--json]
 */
#include <cblas.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shadowsync/shadowsync.h"

static const char prog[] = "gemm-peak";

static void usage(FILE *out)
{
	fprintf(out,
		"usage: gemm-peak [OPTIONS]\n"
		"\n"
		"Measure one core's sgemm rate on the BLIS kernels train picks: a\n"
		"1024 x 1024 x 1024 product, and the GEMMs of one training step of the\n"
		"model (forward, weight gradient, input gradient of each layer) at its\n"
		"batch; and the model's FLOPs an example (forward and backward).\n"
		"\n"
		"  --batch N              examples a step (default 128)\n"
		"  --emb-dim N, --bottom SIZES, --top SIZES, --interaction I,\n"
		"  --cross-layers L, --cross-rank R   the model, as for train\n"
		"  --seconds S            time each measurement at least S (default 1)\n"
		"  --json                 one JSON object\n"
		"  -h, --help             this help\n");
}

/* The layers' shapes: bottom MLP, then top MLP from its input. */
static int layer_shapes(const struct ss_model_config *m, int *in, int *out)
{
	for (int l = 0; l < ss_model_layers(m); l++)
		ss_model_layer_shape(m, l, &in[l], &out[l]);
	return ss_model_layers(m);
}

/*
 * FLOPs an example: each layer's forward, weight gradient and input
 * gradient (2 in out each; the first layer's input needs none), and the
 * interaction: the dot products of the 27 vectors, forward and back
 * (their gradient with respect to both vectors), or the cross network's
 * GEMMs (per layer 2 forward, 4 backward, 2 d R each).
 */
static double model_flops(const struct ss_model_config *m)
{
	int in[2 * SS_MAX_LAYERS + 2], out[2 * SS_MAX_LAYERS + 2];
	int n = layer_shapes(m, in, out);
	double f = 0, pairs = 27.0 * 26 / 2;

	for (int l = 0; l < n; l++)
		f += 2.0 * in[l] * out[l] * (l == 0 ? 2 : 3);
	if (m->interaction == SS_INTERACTION_DCN)
		return f + 12.0 * ss_model_top_input(m) * m->cross_rank *
				   m->cross_layers;
	return f + pairs * 2 * m->emb_dim * 3;
}

static float *floats(size_t n)
{
	float *p = malloc(n * sizeof(float));

	if (!p) {
		fprintf(stderr, "%s: out of memory\n", prog);
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
	return p;
}

/* C (m x n) = A (m x k) B (k x n), transposes as a layer's passes have
 * them, @reps times; returns the seconds. */
static double gemm(int tA, int tB, int m, int n, int k, const float *a,
		   const float *b, float *c, int reps)
{
	uint64_t t0 = ss_now_ns();

	for (int r = 0; r < reps; r++)
		cblas_sgemm(CblasRowMajor, tA ? CblasTrans : CblasNoTrans,
			    tB ? CblasTrans : CblasNoTrans, m, n, k, 1.0f, a,
			    tA ? m : k, b, tB ? k : n, 0.0f, c, n);
	return (double)(ss_now_ns() - t0) / 1e9;
}

/* The rate of the square product, best of three runs of @seconds each. */
static double square_gflops(double seconds)
{
	const int n = 1024;
	float *a = floats((size_t)n * n), *b = floats((size_t)n * n),
	      *c = floats((size_t)n * n);
	double flop = 2.0 * n * n * n, best = 0;
	int reps = 1;

	while (gemm(0, 0, n, n, n, a, b, c, reps) < seconds / 4)
		reps *= 2;
	for (int i = 0; i < 3; i++) {
		double s = gemm(0, 0, n, n, n, a, b, c, reps);

		if (flop * reps / s / 1e9 > best)
			best = flop * reps / s / 1e9;
	}
	free(a);
	free(b);
	free(c);
	return best;
}

/* The shapes and buffers of one step's GEMMs; the cross network's
 * (layers 0: none) of width d and rank r. */
struct step {
	int n, in[2 * SS_MAX_LAYERS + 2], out[2 * SS_MAX_LAYERS + 2], batch;
	int layers, d, r;
	float *x, *w, *y;
};

/*
 * @reps steps' GEMMs, each layer's forward Y = X W^T, weight gradient
 * dW = dY^T X and input gradient dX = dY W (not the first layer's);
 * returns the seconds.
 */
static double step_run(const struct step *st, int reps)
{
	double s = 0;

	for (int r = 0; r < reps; r++)
		for (int l = 0; l < st->n; l++) {
			int i = st->in[l], o = st->out[l], b = st->batch;

			s += gemm(0, 1, b, o, i, st->x, st->w, st->y, 1);
			s += gemm(1, 0, o, i, b, st->y, st->x, st->w, 1);
			if (l > 0)
				s += gemm(0, 0, b, i, o, st->y, st->w, st->x,
					  1);
		}
	/* each cross layer: forward x V^T, v W^T; backward dxw W, dxv V,
	 * dxw^T v, dxv^T x */
	for (int r = 0; r < reps; r++)
		for (int l = 0; l < st->layers; l++) {
			int b = st->batch, d = st->d, k = st->r;

			s += gemm(0, 1, b, k, d, st->x, st->w, st->y, 1);
			s += gemm(0, 1, b, d, k, st->y, st->w, st->x, 1);
			s += gemm(0, 0, b, k, d, st->x, st->w, st->y, 1);
			s += gemm(0, 0, b, d, k, st->y, st->w, st->x, 1);
			s += gemm(1, 0, d, k, b, st->x, st->y, st->w, 1);
			s += gemm(1, 0, k, d, b, st->y, st->x, st->w, 1);
		}
	return s;
}

/* One step's GEMMs of the model at @batch: best of three runs of
 * @seconds each. */
static double step_gflops(const struct ss_model_config *m, int batch,
			  double seconds)
{
	struct step st = { .batch = batch };
	double flop = 0, best = 0;
	int widest = 0, reps = 1;

	st.n = layer_shapes(m, st.in, st.out);
	for (int l = 0; l < st.n; l++) {
		widest = st.in[l] > widest ? st.in[l] : widest;
		widest = st.out[l] > widest ? st.out[l] : widest;
		flop += 2.0 * batch * st.in[l] * st.out[l] * (l == 0 ? 2 : 3);
	}
	if (m->interaction == SS_INTERACTION_DCN) {
		st.layers = m->cross_layers;
		st.d = ss_model_top_input(m);
		st.r = m->cross_rank;
		widest = st.d > widest ? st.d : widest;
		flop += 12.0 * batch * st.d * st.r * st.layers;
	}
	st.x = floats((size_t)batch * widest);
	st.y = floats((size_t)batch * widest);
	st.w = floats((size_t)widest * widest);
	while (step_run(&st, reps) < seconds / 4)
		reps *= 2;
	for (int i = 0; i < 3; i++) {
		double s = step_run(&st, reps);

		if (flop * reps / s / 1e9 > best)
			best = flop * reps / s / 1e9;
	}
	free(st.x);
	free(st.y);
	free(st.w);
	return best;
}

int main(int argc, char **argv)
{
	enum {
		OPT_BATCH = 256,
		OPT_EMB,
		OPT_BOTTOM,
		OPT_TOP,
		OPT_INTERACTION,
		OPT_CROSS_LAYERS,
		OPT_CROSS_RANK,
		OPT_SECONDS,
		OPT_JSON
	};
	static const struct option options[] = {
		{ "batch", required_argument, NULL, OPT_BATCH },
		{ "emb-dim", required_argument, NULL, OPT_EMB },
		{ "bottom", required_argument, NULL, OPT_BOTTOM },
		{ "top", required_argument, NULL, OPT_TOP },
		{ "interaction", required_argument, NULL, OPT_INTERACTION },
		{ "cross-layers", required_argument, NULL, OPT_CROSS_LAYERS },
		{ "cross-rank", required_argument, NULL, OPT_CROSS_RANK },
		{ "seconds", required_argument, NULL, OPT_SECONDS },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct ss_model_config m;
	double seconds = 1, square, step, flops;
	char note[256] = "";
	const char *kernels;
	bool json = false;
	long v;
	int opt, rc = 0, batch = 128;

	ss_model_config_init(&m);
	while (rc == 0 &&
	       (opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		switch (opt) {
		case OPT_BATCH:
			rc = ss_parse_long("--batch", optarg, 1, 65536, &v);
			batch = (int)v;
			break;
		case OPT_EMB:
			rc = ss_parse_long("--emb-dim", optarg, 1, 1024, &v);
			m.emb_dim = (int)v;
			break;
		case OPT_BOTTOM:
			rc = ss_model_layers_parse("--bottom", optarg, m.bottom,
						   &m.n_bottom);
			break;
		case OPT_TOP:
			rc = ss_model_layers_parse("--top", optarg, m.top,
						   &m.n_top);
			break;
		case OPT_INTERACTION:
			rc = ss_model_interaction_parse("--interaction", optarg,
							&m);
			break;
		case OPT_CROSS_LAYERS:
			rc = ss_parse_long("--cross-layers", optarg, 1,
					   SS_MAX_LAYERS, &v);
			m.cross_layers = (int)v;
			break;
		case OPT_CROSS_RANK:
			rc = ss_parse_long("--cross-rank", optarg, 1, 65536,
					   &v);
			m.cross_rank = (int)v;
			break;
		case OPT_SECONDS:
			rc = ss_parse_double("--seconds", optarg, 0.01, 60,
					     &seconds);
			break;
		case OPT_JSON:
			json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (rc == 0)
		rc = ss_model_check(&m);
	if (rc == 0)
		rc = ss_blas_check();
	if (rc < 0) {
		ss_error_print(stderr, prog, rc);
		return 2;
	}
	kernels = ss_blas_setup(note, sizeof(note));
	square = square_gflops(seconds);
	step = step_gflops(&m, batch, seconds);
	flops = model_flops(&m);
	if (json)
		printf("{\"kernels\": \"%s\", \"square_gflops\": %.2f, "
		       "\"step_gemm_gflops\": %.2f, \"batch\": %d, "
		       "\"model_flops_per_example\": %.0f}\n",
		       kernels, square, step, batch, flops);
	else
		printf("BLIS kernels %s: sgemm 1024^3 %.1f GFLOP/s, the model's "
		       "GEMMs of a step at batch %d %.1f GFLOP/s; the model: "
		       "%.3f MFLOP an example\n",
		       kernels, square, batch, step, flops / 1e6);
	return 0;
}
