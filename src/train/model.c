// SPDX-License-Identifier: BSD-2-Clause
/*
 * The DLRM-shaped CTR model: bottom MLP over the dense features, one
 * embedding table per categorical feature, an interaction of the 27
 * vectors (bottom output and 26 embeddings: their pairwise dot products,
 * or DCNv2's cross network, cross.c), top MLP, sigmoid, binary
 * cross-entropy.  Forward and backward of the MLPs and the cross network
 * go through BLIS (dense.c, cross.c); the dot interaction and the sparse
 * table updates are plain loops.  The update is SGD or Adagrad; Adagrad's
 * accumulators are an array beside the parameters, laid out like them.
 *
 * Layout of the flat parameter array: for each bottom layer then each top
 * layer, W (out x in) then b (out); the cross network's layers (with
 * DCN); then the 26 tables, one after the other, ss_model_table_rows() x
 * emb_dim each.
 */
/*
 * vect-cost-model=dynamic: the loops over a batch and over emb_dim have
 * run-time trip counts, which -O2's "very cheap" model never vectorizes;
 * vectorized (these and dense.c's bias and ReLU loops), a training step
 * takes about a quarter less CPU time (docs/perf.md, against PyTorch).
 */
#pragma GCC optimize("vect-cost-model=dynamic", \
		     "no-tree-loop-distribute-patterns")

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE__
#include <xmmintrin.h>
#endif

#include "base/adagrad.h"
#include "base/hogwild.h"
#include "base/mix.h"
#include "base/wide.h"
#include "cross.h"
#include "train/adagrad_wide.h"
#include "shadowsync/table.h"
#include "shadowsync/train.h"

#define SS_VECS (1 + SS_SPARSE) /* bottom output and the embeddings */
#define SS_PAIRS (SS_VECS * (SS_VECS - 1) / 2)

void ss_model_config_init(struct ss_model_config *c)
{
	static const int bottom[] = { 13, 512, 256, 64, 16 };
	static const int top[] = { 512, 256, 1 };

	memset(c, 0, sizeof(*c));
	c->emb_dim = 16;
	c->n_bottom = 5;
	memcpy(c->bottom, bottom, sizeof(bottom));
	c->n_top = 3;
	memcpy(c->top, top, sizeof(top));
	c->hash_size = 100000;
	c->cross_layers = 3;
	c->cross_rank = 64;
}

int ss_model_interaction_parse(const char *option, const char *text,
			       struct ss_model_config *c)
{
	static const char *const names[] = { "dot", "dcn", NULL };
	int i, rc = ss_parse_choice(option, text, names, &i);

	if (rc == 0)
		c->interaction = i ? SS_INTERACTION_DCN : SS_INTERACTION_DOT;
	return rc;
}

const char *ss_model_interaction_name(enum ss_interaction interaction)
{
	return interaction == SS_INTERACTION_DCN ? "dcn" : "dot";
}

int ss_model_pooling_parse(const char *option, const char *text,
			   struct ss_model_config *c)
{
	static const char *const names[] = { "sum", "mean", NULL };
	int i, rc = ss_parse_choice(option, text, names, &i);

	if (rc == 0)
		c->pooling = i ? SS_POOLING_MEAN : SS_POOLING_SUM;
	return rc;
}

const char *ss_model_pooling_name(enum ss_pooling pooling)
{
	return pooling == SS_POOLING_MEAN ? "mean" : "sum";
}

static bool ss_dcn(const struct ss_model_config *c)
{
	return c->interaction == SS_INTERACTION_DCN;
}

uint32_t ss_model_table_rows(const struct ss_model_config *c, int j)
{
	return c->table_rows[j] ? c->table_rows[j] : c->hash_size;
}

uint64_t ss_model_table_first(const struct ss_model_config *c, int j)
{
	uint64_t first = 0;

	for (int k = 0; k < j; k++)
		first += ss_model_table_rows(c, k);
	return first;
}

bool ss_model_uniform(const struct ss_model_config *c)
{
	for (int j = 0; j < SS_SPARSE; j++)
		if (c->table_rows[j] && c->table_rows[j] != c->hash_size)
			return false;
	return true;
}

int ss_model_layers_parse(const char *option, const char *text, int *sizes,
			  int *n)
{
	static const char hint[] =
		"write the sizes with single dashes, e.g. 13-512-256-64-16";
	char copy[256], *rest = copy, *tok;
	int k = 0;

	if (!text || !*text)
		return ss_error_set(SS_EUSAGE, "no sizes", hint, "%s", option);
	if (strlen(text) >= sizeof(copy))
		return ss_error_set(SS_EUSAGE, "too long", hint,
				    "%s '%.32s...'", option, text);
	strcpy(copy, text);
	/* strsep, not strtok: "13--8" has an empty size, not two dashes. */
	while ((tok = strsep(&rest, "-"))) {
		long v;
		int rc;

		if (!*tok)
			return ss_error_set(SS_EUSAGE, "an empty size", hint,
					    "%s '%s'", option, text);
		if (k == SS_MAX_LAYERS + 1)
			return ss_error_set(SS_EUSAGE, "too many layers",
					    "at most 8 layers", "%s '%s'",
					    option, text);
		rc = ss_parse_long(option, tok, 1, 65536, &v);
		if (rc < 0)
			return rc;
		sizes[k++] = (int)v;
	}
	*n = k;
	return 0;
}

int ss_model_top_input(const struct ss_model_config *c)
{
	return ss_dcn(c) ? SS_VECS * c->emb_dim : c->emb_dim + SS_PAIRS;
}

/* The cross-network check of ss_model_check(). */
static int ss_cross_check(const struct ss_model_config *c)
{
	int d = SS_VECS * c->emb_dim;

	if (c->interaction != SS_INTERACTION_DOT && !ss_dcn(c))
		return ss_error_set(SS_EUSAGE, "no such interaction",
				    "dot or dcn", "--interaction %d",
				    (int)c->interaction);
	if (c->pooling != SS_POOLING_SUM && c->pooling != SS_POOLING_MEAN)
		return ss_error_set(SS_EUSAGE, "no such pooling", "sum or mean",
				    "--pooling %d", (int)c->pooling);
	if (!ss_dcn(c))
		return 0;
	if (c->cross_layers < 1 || c->cross_layers > SS_MAX_LAYERS)
		return ss_error_set(SS_EUSAGE, "1 to 8 cross layers",
				    "DLRMv2 takes 3", "--cross-layers %d",
				    c->cross_layers);
	if (c->cross_rank < 1 || c->cross_rank > d)
		return ss_error_set(SS_EUSAGE,
				    "the rank is 1 to the cross network's "
				    "width, 27 x --emb-dim",
				    "a low rank: DLRMv2 takes 512 of 3456",
				    "--cross-rank %d (width %d)", c->cross_rank,
				    d);
	return 0;
}

int ss_model_check(const struct ss_model_config *c)
{
	if (c->n_bottom < 2 || c->bottom[0] != SS_DENSE)
		return ss_error_set(
			SS_EUSAGE, "the bottom MLP takes the 13 dense features",
			"start --bottom with 13", "--bottom");
	if (c->bottom[c->n_bottom - 1] != c->emb_dim)
		return ss_error_set(
			SS_EUSAGE,
			"the bottom MLP must end at the embedding size",
			"end --bottom with --emb-dim",
			"--bottom ending at %d, --emb-dim %d",
			c->bottom[c->n_bottom - 1], c->emb_dim);
	if (c->n_top < 1 || c->top[c->n_top - 1] != 1)
		return ss_error_set(SS_EUSAGE, "the top MLP ends at one output",
				    "end --top with 1", "--top");
	if (c->hash_size == 0)
		return ss_error_set(SS_EUSAGE, "no rows", NULL,
				    "--hash-size 0");
	if (ss_cross_check(c) < 0)
		return SS_EUSAGE;
	if (ss_model_table_first(c, SS_SPARSE - 1) +
		    ss_model_table_rows(c, SS_SPARSE - 1) >
	    UINT32_MAX)
		return ss_error_set(SS_EUSAGE, "more than 2^32 rows in all",
				    "cap the largest tables", "--hash-size");
	return 0;
}

void ss_model_layer_shape(const struct ss_model_config *c, int l, int *in,
			  int *out)
{
	int nb = c->n_bottom - 1;

	if (l < nb) {
		*in = c->bottom[l];
		*out = c->bottom[l + 1];
	} else if (l == nb) {
		*in = ss_model_top_input(c);
		*out = c->top[0];
	} else {
		*in = c->top[l - nb - 1];
		*out = c->top[l - nb];
	}
}

int ss_model_layers(const struct ss_model_config *c)
{
	return c->n_bottom - 1 + c->n_top;
}

size_t ss_model_cross_offset(const struct ss_model_config *c, int l)
{
	size_t n = 0;

	for (int k = 0; k < ss_model_layers(c); k++) {
		int in, out;

		ss_model_layer_shape(c, k, &in, &out);
		n += (size_t)out * (size_t)in + (size_t)out;
	}
	if (ss_dcn(c))
		n += (size_t)l *
		     ss__cross_layer_len(ss_model_top_input(c), c->cross_rank);
	return n;
}

size_t ss_model_dense_len(const struct ss_model_config *c)
{
	return ss_model_cross_offset(c, c->cross_layers);
}

/* The cross network over @params. */
static struct ss__cross ss_cross(const struct ss_model_config *c, float *params)
{
	return (struct ss__cross){ .d = ss_model_top_input(c),
				   .rank = c->cross_rank,
				   .layers = c->cross_layers,
				   .params = params +
					     ss_model_cross_offset(c, 0) };
}

size_t ss_model_len(const struct ss_model_config *c)
{
	return ss_model_dense_len(c) +
	       (size_t)(ss_model_table_first(c, SS_SPARSE - 1) +
			ss_model_table_rows(c, SS_SPARSE - 1)) *
		       (size_t)c->emb_dim;
}

/* Layer @l as a dense layer over @params. */
static struct ss_dense ss_layer(const struct ss_model_config *c, float *params,
				int l)
{
	struct ss_dense d = { 0 };
	size_t off = 0;

	for (int k = 0; k <= l; k++) {
		ss_model_layer_shape(c, k, &d.in, &d.out);
		if (k < l)
			off += (size_t)d.out * (size_t)d.in + (size_t)d.out;
	}
	d.w = params + off;
	d.b = d.w + (size_t)d.out * (size_t)d.in;
	/* ReLU everywhere but on the model's output */
	d.relu = l != ss_model_layers(c) - 1;
	return d;
}

/* Row @row of the table whose first id is @first; @tables is where the
 * tables start in the replica. */
static float *ss_emb_row(const struct ss_model_config *c, float *tables,
			 uint64_t first, uint32_t row)
{
	return tables + ((size_t)first + row) * (size_t)c->emb_dim;
}

void ss_model_init_dense(const struct ss_model_config *c, float *params,
			 uint64_t seed)
{
	uint64_t s = ss__mix64(seed ^ 0x5eed);

	for (int l = 0; l < ss_model_layers(c); l++) {
		struct ss_dense d = ss_layer(c, params, l);
		float sw = (float)sqrt(2.0 / (d.in + d.out));
		float sb = (float)sqrt(1.0 / d.out);

		for (size_t i = 0; i < (size_t)d.out * (size_t)d.in; i++)
			d.w[i] = sw * (float)ss__gauss(&s);
		for (int i = 0; i < d.out; i++)
			d.b[i] = sb * (float)ss__gauss(&s);
	}
	if (ss_dcn(c)) {
		struct ss__cross x = ss_cross(c, params);

		ss__cross_init(&x, &s);
	}
}

void ss_model_init(const struct ss_model_config *c, float *params,
		   uint64_t seed)
{
	size_t dense = ss_model_dense_len(c);

	ss_model_init_dense(c, params, seed);
	/* row by row, as the sharded tables start theirs (table.h) */
	for (int j = 0; j < SS_SPARSE; j++) {
		uint32_t rows = ss_model_table_rows(c, j);
		uint64_t first = ss_model_table_first(c, j);
		float bound = (float)sqrt(1.0 / rows);

		for (uint32_t r = 0; r < rows; r++)
			ss_table_init_row(
				seed, j, r, c->emb_dim, bound,
				ss_emb_row(c, params + dense, first, r));
	}
}

/*
 * A trainer's scratch.  in[l] is the input of layer l (batch x in); the
 * bottom MLP's output is z and the model's output the logits.
 */
struct ss_model_work {
	int batch, emb_dim;
	float **in;
	float *z, *logits, *p;
	float *grad, *grad2; /* activation gradients, batch x widest */
	float *dw, *db; /* one layer's weight gradients */
	float *dz; /* batch x emb_dim */
	float *grad_x0; /* DCN: batch x 27 emb_dim, the gradient of x0 */
	/* batch x 26 x emb_dim: each feature's vector (its rows pooled),
	 * their gradients */
	float *emb, *demb;
	/*
	 * The uses of rows, feature by feature (ss_bags' order): example
	 * r's feature j uses uses start[r * 26 + j] - base to start[r * 26
	 * + j + 1] - base - 1; one a feature (ident) without bags.  rows:
	 * each use's row; ug: each use's gradient (demb itself, one use a
	 * feature; else ugrad).  Room for use_cap uses.
	 */
	const uint32_t *start;
	uint32_t base;
	uint32_t *ident;
	uint32_t *rows;
	float *ugrad, *ug;
	size_t use_cap;
	uint64_t first[SS_SPARSE]; /* each table's first id */
	/* grouping one table's uses by row: an open-addressing table of
	 * use indices (-1: empty), and the first use of each row; room for
	 * table_cap uses of a table */
	int32_t *slots, *firsts;
	size_t slot_mask, table_cap;
	/* rows served by the caller (sharded tables): batch x 26 pointers */
	const float *const *ext;
	struct ss__cross_work *cross; /* with DCN */
};

/*
 * Room in @w for @uses uses of rows in a batch, @table_uses of them in
 * one table, and (@bags: several rows a feature) their own gradients.
 * Returns 0 or -ENOMEM (what there was is kept).
 */
static int ss_work_fit(struct ss_model_work *w, size_t uses, size_t table_uses,
		       bool bags)
{
	size_t D = (size_t)w->emb_dim, mask = 1;

	if (uses > w->use_cap || (bags && !w->ugrad)) {
		size_t cap = uses > w->use_cap ? uses + uses / 2 : w->use_cap;
		uint32_t *rows = realloc(w->rows, cap * sizeof(uint32_t));

		if (!rows)
			return -ENOMEM;
		w->rows = rows;
		if (bags || w->ugrad) {
			float *g = realloc(w->ugrad, cap * D * sizeof(float));

			if (!g)
				return -ENOMEM;
			w->ugrad = g;
		}
		w->use_cap = cap;
	}
	if (table_uses > w->table_cap) {
		int32_t *slots, *firsts;

		/* at most half full: short probes */
		while (mask < 2 * table_uses)
			mask <<= 1;
		slots = realloc(w->slots, mask * sizeof(int32_t));
		if (!slots)
			return -ENOMEM;
		w->slots = slots;
		firsts = realloc(w->firsts, table_uses * sizeof(int32_t));
		if (!firsts)
			return -ENOMEM;
		w->firsts = firsts;
		w->slot_mask = mask - 1;
		w->table_cap = table_uses;
	}
	return 0;
}

int ss_model_work_create(struct ss_model_work **out,
			 const struct ss_model_config *c, int batch)
{
	struct ss_model_work *w = calloc(1, sizeof(*w));
	int layers = ss_model_layers(c), widest = ss_model_top_input(c);
	size_t biggest = 0, nd = (size_t)batch * (size_t)c->emb_dim;
	bool ok;

	*out = NULL;
	if (!w)
		return ss_error_set(-ENOMEM, NULL, NULL, "model scratch");
	w->batch = batch;
	w->emb_dim = c->emb_dim;
	for (int j = 0; j < SS_SPARSE; j++)
		w->first[j] = ss_model_table_first(c, j);
	w->in = calloc((size_t)layers + 1, sizeof(float *)); /* NULL-ended */
	ok = w->in != NULL;
	for (int l = 0; ok && l < layers; l++) {
		int in, o;

		ss_model_layer_shape(c, l, &in, &o);
		widest = in > widest ? in : widest;
		widest = o > widest ? o : widest;
		if ((size_t)in * (size_t)o > biggest)
			biggest = (size_t)in * (size_t)o;
		w->in[l] = malloc((size_t)batch * (size_t)in * sizeof(float));
		ok = w->in[l] != NULL;
	}
	if (ok) {
		w->z = malloc(nd * sizeof(float));
		w->dz = malloc(nd * sizeof(float));
		w->logits = malloc((size_t)batch * sizeof(float));
		w->p = malloc((size_t)batch * sizeof(float));
		w->grad =
			malloc((size_t)batch * (size_t)widest * sizeof(float));
		w->grad2 =
			malloc((size_t)batch * (size_t)widest * sizeof(float));
		w->dw = malloc(biggest * sizeof(float));
		w->db = malloc((size_t)widest * sizeof(float));
		w->emb = malloc(nd * SS_SPARSE * sizeof(float));
		w->demb = malloc(nd * SS_SPARSE * sizeof(float));
		w->ident = malloc(((size_t)batch * SS_SPARSE + 1) *
				  sizeof(uint32_t));
		for (size_t k = 0; w->ident && k <= (size_t)batch * SS_SPARSE;
		     k++)
			w->ident[k] = (uint32_t)k;
		ok = w->z && w->dz && w->logits && w->p && w->grad &&
		     w->grad2 && w->dw && w->db && w->emb && w->demb &&
		     w->ident &&
		     ss_work_fit(w, (size_t)batch * SS_SPARSE, (size_t)batch,
				 false) == 0;
	}
	if (ok && ss_dcn(c)) {
		w->grad_x0 =
			malloc((size_t)batch * (size_t)widest * sizeof(float));
		ok = w->grad_x0 != NULL;
	}
	if (ok && ss_dcn(c))
		ok = ss__cross_work_create(&w->cross, ss_model_top_input(c),
					   c->cross_rank, c->cross_layers,
					   batch) == 0;
	if (!ok) {
		ss_model_work_destroy(&w);
		return ss_error_set(-ENOMEM, NULL, NULL,
				    "model scratch for batch %d", batch);
	}
	w->batch = batch;
	*out = w;
	return 0;
}

void ss_model_work_destroy(struct ss_model_work **work)
{
	struct ss_model_work *w;

	if (!work || !*work)
		return;
	w = *work;
	for (int l = 0; w->in && w->in[l]; l++)
		free(w->in[l]);
	free(w->in);
	free(w->z);
	free(w->dz);
	free(w->logits);
	free(w->p);
	free(w->grad);
	free(w->grad2);
	free(w->dw);
	free(w->db);
	free(w->emb);
	free(w->demb);
	free(w->ident);
	free(w->rows);
	free(w->ugrad);
	free(w->slots);
	free(w->firsts);
	ss__cross_work_destroy(&w->cross);
	free(w->grad_x0);
	free(w);
	*work = NULL;
}

/* Table row of categorical feature @j's value @v. */
static uint32_t ss_row(const struct ss_model_config *c, int j, uint32_t v)
{
	return (uint32_t)(ss__mix64(((uint64_t)j << 32) | v) %
			  ss_model_table_rows(c, j));
}

/* Where layer @l writes its output. */
static float *ss_out(const struct ss_model_config *c, struct ss_model_work *w,
		     int l)
{
	if (l == c->n_bottom - 2)
		return w->z;
	if (l == ss_model_layers(c) - 1)
		return w->logits;
	return w->in[l + 1];
}

/* The 27 vectors of row @r: the bottom output, then the embeddings. */
static void ss_vectors(const struct ss_model_config *c, float *z, float *emb,
		       int r, float **vec)
{
	vec[0] = z + (size_t)r * (size_t)c->emb_dim;
	for (int j = 0; j < SS_SPARSE; j++)
		vec[1 + j] = emb + ((size_t)r * SS_SPARSE + (size_t)j) *
					   (size_t)c->emb_dim;
}

/*
 * The interaction's loops, inlined into one copy per common embedding
 * width (16, the default, and 8): with @D a constant, a vector's floats sit
 * in registers across a whole loop instead of going through memory.
 */
#define SS_INLINE static inline __attribute__((always_inline))

/* The top input @t of one example: z, then the dot product of every pair
 * of its vectors, for any width @D. */
SS_INLINE void ss_interact_fwd_any(float *const *vec, float *t, int D)
{
	size_t k = (size_t)D;

	for (int i = 0; i < D; i++)
		t[i] = vec[0][i];
	for (int a = 1; a < SS_VECS; a++)
		for (int b = 0; b < a; b++) {
			float dot = 0;

			for (int i = 0; i < D; i++)
				dot += vec[a][i] * vec[b][i];
			t[k++] = dot;
		}
}

/*
 * The same for a constant @D of at most 16.  A dot product at a time would
 * end each in a horizontal sum; instead the vectors are transposed, so that
 * vector a's products with all the others build up side by side, one
 * multiply-add per element of a: the same sums, in the same order (the
 * wide clones fuse multiply and add, which may change a last bit).
 */
SS_INLINE void ss_interact_fwd(float *const *vec, float *t, int D)
{
	enum { PAD = 32 }; /* the 27 vectors, rounded up to whole registers */
	float vt[16][PAD];
	size_t k = (size_t)D;

	for (int i = 0; i < D; i++)
		t[i] = vec[0][i];
	for (int b = 0; b < SS_VECS; b++)
		for (int i = 0; i < D; i++)
			vt[i][b] = vec[b][i];
	for (int i = 0; i < D; i++) /* the padding only: the rest is set */
		for (int b = SS_VECS; b < PAD; b++)
			vt[i][b] = 0;
	for (int a = 1; a < SS_VECS; a++) {
		float acc[PAD] = { 0 };

		for (int i = 0; i < D; i++)
			for (int b = 0; b < PAD; b++)
				acc[b] += vec[a][i] * vt[i][b];
		for (int b = 0; b < a; b++)
			t[k++] = acc[b];
	}
}

/*
 * Back through one example's interaction, from @g, the gradient of its top
 * input: dvec[a] = sum over b != a of g(a, b) vec[b], plus z's own part for
 * a = 0.  Each output vector is summed in a local chunk (registers, for a
 * constant @D) and stored once, rather than adding each pair into both of
 * its vectors in memory.
 */
SS_INLINE void ss_interact_bwd(float *const *vec, float *const *dvec,
			       const float *g, int D)
{
	enum { CHUNK = 64 };
	float pair[SS_VECS][SS_VECS];
	size_t k = (size_t)D;

	for (int a = 1; a < SS_VECS; a++)
		for (int b = 0; b < a; b++, k++)
			pair[a][b] = pair[b][a] = g[k];
	for (int a = 0; a < SS_VECS; a++)
		for (int i0 = 0; i0 < D; i0 += CHUNK) {
			int n = D - i0 < CHUNK ? D - i0 : CHUNK;
			float acc[CHUNK];

			for (int i = 0; i < n; i++)
				acc[i] = a == 0 ? g[i0 + i] : 0;
			for (int b = 0; b < SS_VECS; b++) {
				const float *v = vec[b] + i0;
				float s = pair[a][b];

				if (b == a)
					continue;
				for (int i = 0; i < n; i++)
					acc[i] += s * v[i];
			}
			for (int i = 0; i < n; i++)
				dvec[a][i0 + i] = acc[i];
		}
}

SS_WIDE static void ss_interact_forward(float *const *vec, float *t, int D)
{
	if (D == 16)
		ss_interact_fwd(vec, t, 16);
	else if (D == 8)
		ss_interact_fwd(vec, t, 8);
	else
		ss_interact_fwd_any(vec, t, D);
}

SS_WIDE static void ss_interact_backward(float *const *vec, float *const *dvec,
					 const float *g, int D)
{
	if (D == 16)
		ss_interact_bwd(vec, dvec, g, 16);
	else if (D == 8)
		ss_interact_bwd(vec, dvec, g, 8);
	else
		ss_interact_bwd(vec, dvec, g, D);
}

/* DCN's x0 for one example: its 27 vectors end to end. */
static void ss_concat(float *const *vec, float *x0, int D)
{
	for (int a = 0; a < SS_VECS; a++)
		memcpy(x0 + (size_t)a * (size_t)D, vec[a],
		       (size_t)D * sizeof(float));
}

/* The gradient of x0 back to the 27 vectors it was made of. */
static void ss_split(const float *dx0, float *const *dvec, int D)
{
	for (int a = 0; a < SS_VECS; a++)
		memcpy(dvec[a], dx0 + (size_t)a * (size_t)D,
		       (size_t)D * sizeof(float));
}

/* Copy a table row out of the replica, which other trainers write. */
SS_HOGWILD static void ss_row_read(float *dst, const float *row, int d)
{
	for (int i = 0; i < d; i++)
		dst[i] = row[i];
}

int ss_optimizer_parse(const char *option, const char *text,
		       enum ss_optimizer *opt)
{
	static const char *const names[] = { "sgd", "adagrad", NULL };
	int i, rc = ss_parse_choice(option, text, names, &i);

	if (rc == 0)
		*opt = i == 1 ? SS_OPT_ADAGRAD : SS_OPT_SGD;
	return rc;
}

const char *ss_optimizer_name(enum ss_optimizer opt)
{
	return opt == SS_OPT_ADAGRAD ? "adagrad" : "sgd";
}

float ss_optimizer_default_lr(enum ss_optimizer opt)
{
	return opt == SS_OPT_ADAGRAD ? 0.01f : 0.1f;
}

/*
 * Apply the gradient @g of @n parameters @p, lock-free: straight into the
 * shared replica (Hogwild).  @acc: their Adagrad accumulators, shared by
 * the node's trainers the same way; NULL for SGD.  Racing trainers may
 * lose an increment of acc, which only makes one step a little larger;
 * acc never decreases below what one writer stored and never goes
 * negative, since every store is a loaded value plus a square.
 */
SS_HOGWILD static void ss_update(float *p, float *acc, const float *g, size_t n,
				 const struct ss_optim *o)
{
	if (acc) {
		ss__adagrad(p, acc, g, n, o->lr, o->eps);
		return;
	}
	for (size_t i = 0; i < n; i++)
		p[i] -= o->lr * g[i];
}

/* The accumulators of the parameters at @p, or NULL for SGD. */
static float *ss_acc(const struct ss_optim *o, const float *params,
		     const float *p)
{
	return o->kind == SS_OPT_ADAGRAD ? o->acc + (p - params) : NULL;
}

/*
 * The batch's uses of rows from @bags (NULL: one a feature, sparse[j]):
 * room made for them, and each one's row.  Returns 0 or -ENOMEM.
 */
static int ss_uses(const struct ss_model_config *c, struct ss_model_work *w,
		   const struct ss_example *ex, const struct ss_bags *bags,
		   int n)
{
	const uint32_t *st = bags ? bags->start : w->ident;
	size_t most = (size_t)n;

	w->start = st;
	w->base = st[0];
	for (int j = 0; bags && j < SS_SPARSE; j++) {
		size_t t = 0;

		for (int r = 0; r < n; r++)
			t += st[r * SS_SPARSE + j + 1] - st[r * SS_SPARSE + j];
		most = t > most ? t : most;
	}
	if (ss_work_fit(w, st[(size_t)n * SS_SPARSE] - w->base, most,
			bags != NULL) < 0)
		return ss_error_set(-ENOMEM, NULL, NULL,
				    "model scratch for %u values",
				    st[(size_t)n * SS_SPARSE] - w->base);
	for (int r = 0; r < n; r++)
		for (int j = 0; j < SS_SPARSE; j++) {
			size_t k = (size_t)r * SS_SPARSE + (size_t)j;

			for (uint32_t u = st[k]; u < st[k + 1]; u++)
				w->rows[u - w->base] = ss_row(
					c, j,
					bags ? bags->ids[u] : ex[r].sparse[j]);
		}
	return 0;
}

/* A use's row: the caller's (sharded tables), or the replica's. */
static const float *ss_use_row(const struct ss_model_config *c,
			       struct ss_model_work *w, const float *tables,
			       int j, size_t use)
{
	return w->ext ? w->ext[use] :
			ss_emb_row(c, (float *)tables, w->first[j],
				   w->rows[use]);
}

/* Add a table row into a pooled vector (Hogwild, as ss_row_read). */
SS_HOGWILD static void ss_row_add(float *dst, const float *row, int d)
{
	for (int i = 0; i < d; i++)
		dst[i] += row[i];
}

/* Feature @j's vector of example @r: its rows pooled (a copy of one). */
static void ss_pool(const struct ss_model_config *c, struct ss_model_work *w,
		    const float *tables, int r, int j)
{
	size_t k = (size_t)r * SS_SPARSE + (size_t)j, D = (size_t)c->emb_dim;
	uint32_t from = w->start[k] - w->base, to = w->start[k + 1] - w->base;
	float *v = w->emb + k * D;

	if (from == to) {
		memset(v, 0, D * sizeof(float));
		return;
	}
	ss_row_read(v, ss_use_row(c, w, tables, j, from), (int)D);
	for (uint32_t u = from + 1; u < to; u++)
		ss_row_add(v, ss_use_row(c, w, tables, j, u), (int)D);
	if (c->pooling == SS_POOLING_MEAN && to - from > 1)
		for (size_t i = 0; i < D; i++)
			v[i] /= (float)(to - from);
}

static void ss_forward(const struct ss_model_config *c, float *params,
		       struct ss_model_work *w, const struct ss_example *ex,
		       int n)
{
	float *tables = params + ss_model_dense_len(c);
	int nb = c->n_bottom - 1, layers = ss_model_layers(c), D = c->emb_dim;
	size_t top_in = (size_t)ss_model_top_input(c);

	for (int r = 0; r < n; r++)
		memcpy(w->in[0] + (size_t)r * SS_DENSE, ex[r].dense,
		       sizeof(ex[r].dense));
	for (int l = 0; l < nb; l++) {
		struct ss_dense d = ss_layer(c, params, l);

		ss_dense_forward(&d, w->in[l], ss_out(c, w, l), n);
	}
	/*
	 * The batch's rows (ss_uses), each asked of memory now: the tables
	 * are far larger than the caches, and the reads below then wait for
	 * none of them one at a time.
	 */
	for (int r = 0; !w->ext && r < n; r++)
		for (int j = 0; j < SS_SPARSE; j++) {
			size_t k = (size_t)r * SS_SPARSE + (size_t)j;

			for (uint32_t u = w->start[k]; u < w->start[k + 1]; u++)
				__builtin_prefetch(
					ss_emb_row(c, tables, w->first[j],
						   w->rows[u - w->base]));
		}
	/* Interaction: z, then the dot product of every pair of vectors. */
	for (int r = 0; r < n; r++) {
		float *vec[SS_VECS], *t = w->in[nb] + (size_t)r * top_in;

		for (int j = 0; j < SS_SPARSE; j++)
			ss_pool(c, w, tables, r, j);
		ss_vectors(c, w->z, w->emb, r, vec);
		if (w->cross)
			ss_concat(vec,
				  ss__cross_x0(w->cross) + (size_t)r * top_in,
				  D);
		else
			ss_interact_forward(vec, t, D);
	}
	if (w->cross) {
		struct ss__cross x = ss_cross(c, params);

		ss__cross_forward(&x, w->cross, w->in[nb], n);
	}
	for (int l = nb; l < layers; l++) {
		struct ss_dense d = ss_layer(c, params, l);

		ss_dense_forward(&d, w->in[l], ss_out(c, w, l), n);
	}
	for (int r = 0; r < n; r++)
		w->p[r] = 1.0f / (1.0f + expf(-w->logits[r]));
}

int ss_model_predict_bags(const struct ss_model_config *c, const float *params,
			  struct ss_model_work *w, const struct ss_example *ex,
			  const struct ss_bags *bags, int n, float *p)
{
	w->ext = NULL;
	for (int done = 0; done < n; done += w->batch) {
		int k = n - done < w->batch ? n - done : w->batch;
		/* the bags of these examples: the same values, from here */
		struct ss_bags part = {
			.start = bags ? bags->start + (size_t)done * SS_SPARSE :
					NULL,
			.ids = bags ? bags->ids : NULL,
		};

		if (ss_uses(c, w, ex + done, bags ? &part : NULL, k) < 0)
			return -ENOMEM;
		/* the forward pass only reads the parameters */
		ss_forward(c, (float *)params, w, ex + done, k);
		memcpy(p + done, w->p, (size_t)k * sizeof(float));
	}
	return 0;
}

void ss_model_predict(const struct ss_model_config *c, const float *params,
		      struct ss_model_work *w, const struct ss_example *ex,
		      int n, float *p)
{
	/* one row a feature needs no more room than the batch's */
	(void)ss_model_predict_bags(c, params, w, ex, NULL, n, p);
}

/* Backward through layer @l, then its update; dy in, dx out. */
static void ss_layer_step(const struct ss_model_config *c, float *params,
			  struct ss_model_work *w, int l, float *dy, float *dx,
			  int n, const struct ss_optim *o)
{
	struct ss_dense d = ss_layer(c, params, l);

	if (o->kind == SS_OPT_SGD) {
		ss_dense_backward_sgd(&d, w->in[l], ss_out(c, w, l), dy, dx,
				      w->db, o->lr, n);
		return;
	}
	ss_dense_backward(&d, w->in[l], ss_out(c, w, l), dy, dx, w->dw, w->db,
			  n);
	/* Adagrad here: the dense layers' own loop, at full width */
	ss__dense_update(d.w, ss_acc(o, params, d.w), w->dw,
			 (size_t)d.out * (size_t)d.in, o);
	ss__dense_update(d.b, ss_acc(o, params, d.b), w->db, (size_t)d.out, o);
}

/*
 * Each use's gradient, from its feature's pooled one: that one itself
 * with one use a feature; with bags, a copy to each of the bag's uses,
 * divided by the bag's size for mean pooling.
 */
static void ss_use_grads(const struct ss_model_config *c,
			 struct ss_model_work *w, int n)
{
	size_t D = (size_t)c->emb_dim;

	if (w->start == w->ident) {
		w->ug = w->demb;
		return;
	}
	w->ug = w->ugrad;
	for (size_t k = 0; k < (size_t)n * SS_SPARSE; k++) {
		uint32_t len = w->start[k + 1] - w->start[k];
		float scale = c->pooling == SS_POOLING_MEAN && len > 1 ?
				      1.0f / (float)len :
				      1.0f;

		for (uint32_t u = w->start[k]; u < w->start[k + 1]; u++) {
			float *g = w->ugrad + (size_t)(u - w->base) * D;

			for (size_t i = 0; i < D; i++)
				g[i] = w->demb[k * D + i] * scale;
		}
	}
}

/*
 * Group the uses of table @j's rows by row, in example order: the first
 * use of a row takes the later ones' gradients (found through a small
 * hash table of rows, linear probing), and is listed in firsts[].
 * Returns the number of distinct rows.
 */
static int ss_group_rows(struct ss_model_work *w, int j, int n, size_t D)
{
	int uses = 0;

	memset(w->slots, 0xff, (w->slot_mask + 1) * sizeof(int32_t));
	for (int r = 0; r < n; r++) {
		size_t k = (size_t)r * SS_SPARSE + (size_t)j;

		for (uint32_t u0 = w->start[k]; u0 < w->start[k + 1]; u0++) {
			int32_t u = (int32_t)(u0 - w->base);
			uint32_t row = w->rows[u];
			const float *gr = w->ug + (size_t)u * D;
			size_t h = (size_t)(row * 0x9e3779b1u) & w->slot_mask;

			for (;; h = (h + 1) & w->slot_mask) {
				int32_t f = w->slots[h];
				float *g;

				if (f < 0) {
					w->slots[h] = u;
					w->firsts[uses++] = u;
					break;
				}
				if (w->rows[f] != row)
					continue;
				g = w->ug + (size_t)f * D;
				for (size_t i = 0; i < D; i++)
					g[i] += gr[i];
				break;
			}
		}
	}
	return uses;
}

/*
 * Update the rows of table @j the batch used.  For Adagrad the gradients
 * of a row used by several examples are summed, then applied once: one
 * step of the row's summed gradient, as for any other parameter.
 */
static void ss_table_step(const struct ss_model_config *c, float *params,
			  struct ss_model_work *w, int j, int n,
			  const struct ss_optim *o)
{
	float *tables = params + ss_model_dense_len(c);
	size_t D = (size_t)c->emb_dim;
	int uses;

	if (o->kind == SS_OPT_SGD) {
		/* SGD is linear: one step per use adds up to the same. */
		for (int r = 0; r < n; r++) {
			size_t k = (size_t)r * SS_SPARSE + (size_t)j;

			for (uint32_t u = w->start[k] - w->base;
			     u < w->start[k + 1] - w->base; u++)
				ss_update(ss_emb_row(c, tables, w->first[j],
						     w->rows[u]),
					  NULL, w->ug + (size_t)u * D, D, o);
		}
		return;
	}
	uses = ss_group_rows(w, j, n, D);
	for (int u = 0; u < uses; u++) {
		size_t at = (size_t)w->firsts[u];
		float *p = ss_emb_row(c, tables, w->first[j], w->rows[at]);

		ss_update(p, ss_acc(o, params, p), w->ug + at * D, D, o);
	}
}

/* The summed gradient of each row the batch used, for their owners. */
static int ss_table_grads(const struct ss_model_config *c,
			  struct ss_model_work *w, int n, uint64_t *ids,
			  float *grads)
{
	size_t D = (size_t)c->emb_dim;
	int out = 0;

	for (int j = 0; j < SS_SPARSE; j++) {
		int uses = ss_group_rows(w, j, n, D);

		for (int u = 0; u < uses; u++) {
			size_t at = (size_t)w->firsts[u];

			ids[out] = w->first[j] + w->rows[at];
			memcpy(grads + (size_t)out * D, w->ug + at * D,
			       D * sizeof(float));
			out++;
		}
	}
	return out;
}

int ss_model_batch_rows_bags(const struct ss_model_config *c,
			     const struct ss_example *ex,
			     const struct ss_bags *bags, int n, uint64_t *ids)
{
	uint64_t first[SS_SPARSE];
	const uint32_t *st;
	int out = 0;

	if (!bags) {
		ss_model_batch_rows(c, ex, n, ids);
		return n * SS_SPARSE;
	}
	for (int j = 0; j < SS_SPARSE; j++)
		first[j] = ss_model_table_first(c, j);
	st = bags->start;
	for (int r = 0; r < n; r++)
		for (int j = 0; j < SS_SPARSE; j++) {
			size_t k = (size_t)r * SS_SPARSE + (size_t)j;

			for (uint32_t u = st[k]; u < st[k + 1]; u++)
				ids[out++] =
					first[j] + ss_row(c, j, bags->ids[u]);
		}
	return out;
}

void ss_model_batch_rows(const struct ss_model_config *c,
			 const struct ss_example *ex, int n, uint64_t *ids)
{
	uint64_t first[SS_SPARSE];

	for (int j = 0; j < SS_SPARSE; j++)
		first[j] = ss_model_table_first(c, j);
	for (int r = 0; r < n; r++)
		for (int j = 0; j < SS_SPARSE; j++)
			ids[(size_t)r * SS_SPARSE + (size_t)j] =
				first[j] + ss_row(c, j, ex[r].sparse[j]);
}

double ss_model_sgd_step(const struct ss_model_config *c, float *params,
			 struct ss_model_work *w, const struct ss_example *ex,
			 int n, float lr)
{
	struct ss_optim o = { .kind = SS_OPT_SGD, .lr = lr };

	return ss_model_step(c, params, w, ex, n, &o);
}

static double ss_step(const struct ss_model_config *c, float *params,
		      struct ss_model_work *w, const struct ss_example *ex,
		      int n, const struct ss_optim *o, uint64_t *grad_ids,
		      float *grads, int *n_grads)
{
	int nb = c->n_bottom - 1, layers = ss_model_layers(c), D = c->emb_dim;
	size_t top_in = (size_t)ss_model_top_input(c);
	float *dy = w->grad, *dx = w->grad2, *swap;
	double loss = 0;

	ss_forward(c, params, w, ex, n);
	/*
	 * The gradient of the summed loss over the full batch size, not the
	 * mean over @n: every example weighs lr / batch, so the short batch
	 * that ends each trainer's share takes a short step.  Divided by @n,
	 * a last batch of one example took a step of full size on that one
	 * label; with T trainers T such steps ended every pass, and one of
	 * them could drag the mean prediction of a trained model from the
	 * click rate to a tenth of it (docs/perf.md, "Hogwild quality").
	 */
	for (int r = 0; r < n; r++) {
		double q = fmin(fmax(w->p[r], 1e-7), 1 - 1e-7);

		loss -= ex[r].label ? log(q) : log(1 - q);
		dy[r] = (w->p[r] - ex[r].label) / (float)w->batch;
	}
	for (int l = layers - 1; l >= nb; l--) {
		ss_layer_step(c, params, w, l, dy, dx, n, o);
		swap = dy;
		dy = dx;
		dx = swap;
	}
	/* dy: the gradient of the top input; through the interaction. */
	if (w->cross) {
		struct ss__cross x = ss_cross(c, params);

		ss__cross_backward(&x, w->cross, dy, dx, w->grad_x0, n, o,
				   o->kind == SS_OPT_ADAGRAD ?
					   ss_acc(o, params, x.params) :
					   NULL);
	}
	for (int r = 0; r < n; r++) {
		float *vec[SS_VECS], *dvec[SS_VECS];

		ss_vectors(c, w->dz, w->demb, r, dvec);
		if (w->cross) {
			ss_split(w->grad_x0 + (size_t)r * top_in, dvec, D);
			continue;
		}
		ss_vectors(c, w->z, w->emb, r, vec);
		ss_interact_backward(vec, dvec, dy + (size_t)r * top_in, D);
	}
	memcpy(dy, w->dz, (size_t)n * (size_t)D * sizeof(float));
	for (int l = nb - 1; l >= 0; l--) {
		ss_layer_step(c, params, w, l, dy, l > 0 ? dx : NULL, n, o);
		swap = dy;
		dy = dx;
		dx = swap;
	}
	/* Only the rows the batch used: here, or their gradients out. */
	ss_use_grads(c, w, n);
	if (w->ext)
		*n_grads = ss_table_grads(c, w, n, grad_ids, grads);
	else
		for (int j = 0; j < SS_SPARSE; j++)
			ss_table_step(c, params, w, j, n, o);
	return loss / n;
}

double ss_model_step_bags(const struct ss_model_config *c, float *params,
			  struct ss_model_work *w, const struct ss_example *ex,
			  const struct ss_bags *bags, int n,
			  const struct ss_optim *o)
{
	w->ext = NULL;
	if (ss_uses(c, w, ex, bags, n) < 0)
		return NAN;
	return ss_step(c, params, w, ex, n, o, NULL, NULL, NULL);
}

double ss_model_step(const struct ss_model_config *c, float *params,
		     struct ss_model_work *w, const struct ss_example *ex,
		     int n, const struct ss_optim *o)
{
	return ss_model_step_bags(c, params, w, ex, NULL, n, o);
}

double ss_model_step_rows_bags(const struct ss_model_config *c, float *params,
			       struct ss_model_work *w,
			       const struct ss_example *ex,
			       const struct ss_bags *bags, int n,
			       const struct ss_optim *o,
			       const float *const *rows, uint64_t *grad_ids,
			       float *grads, int *n_grads)
{
	double loss;

	*n_grads = 0;
	if (ss_uses(c, w, ex, bags, n) < 0)
		return NAN;
	w->ext = rows;
	loss = ss_step(c, params, w, ex, n, o, grad_ids, grads, n_grads);
	w->ext = NULL;
	return loss;
}

double ss_model_step_rows(const struct ss_model_config *c, float *params,
			  struct ss_model_work *w, const struct ss_example *ex,
			  int n, const struct ss_optim *o,
			  const float *const *rows, uint64_t *grad_ids,
			  float *grads, int *n_grads)
{
	/* one row a feature needs no more room than the batch's */
	return ss_model_step_rows_bags(c, params, w, ex, NULL, n, o, rows,
				       grad_ids, grads, n_grads);
}

int ss_model_predict_rows_bags(const struct ss_model_config *c,
			       const float *params, struct ss_model_work *w,
			       const struct ss_example *ex,
			       const struct ss_bags *bags, int n,
			       const float *const *rows, float *p)
{
	if (ss_uses(c, w, ex, bags, n) < 0)
		return -ENOMEM;
	w->ext = rows;
	ss_forward(c, (float *)params, w, ex, n);
	memcpy(p, w->p, (size_t)n * sizeof(float));
	w->ext = NULL;
	return 0;
}

void ss_model_predict_rows(const struct ss_model_config *c, const float *params,
			   struct ss_model_work *w, const struct ss_example *ex,
			   int n, const float *const *rows, float *p)
{
	(void)ss_model_predict_rows_bags(c, params, w, ex, NULL, n, rows, p);
}
