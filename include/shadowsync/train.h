/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ShadowSync train layer: the Criteo data reader, the dense layers and the
 * CTR model with its optimizers, the Hogwild trainers, the metrics (log
 * loss, normalized entropy, AUC, calibration), and the synthetic data
 * generator with its planted teacher.
 *
 * Threads: a reader and a model work area are each one thread's at a
 * time; different ones serve different threads at once.  The model's
 * steps (ss_model_step() and its kin, ss_dense_backward_sgd()) may run in
 * many threads at once on the same parameters, each with its own work
 * area and buffers: they update the parameters without locks (Hogwild),
 * and a prediction made meanwhile sees some of the updates.
 * ss_model_init() and ss_model_init_dense() write every parameter: no
 * other thread may use them meanwhile.  ss_train() starts and joins its
 * own trainer threads: while it runs, other threads may read its
 * progress (ss_train_progress_read()) and the sync's statistics.
 * ss_blas_setup() is the exception to the rest, which may run in any
 * thread at once: call it before any other thread starts.
 */
#ifndef SHADOWSYNC_TRAIN_H
#define SHADOWSYNC_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "shadowsync/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SS_DENSE 13 /* I1..I13 */
#define SS_SPARSE 26 /* C1..C26 */

/* One example of the Criteo Kaggle format. */
struct ss_example {
	float label; /* 0 or 1 */
	float dense[SS_DENSE]; /* log(1 + max(x, 0)); 0 when empty */
	uint32_t sparse[SS_SPARSE]; /* the 8 hex digits; 0 when empty */
};

enum ss_bad_lines {
	SS_BAD_LINES_FAIL, /* stop at the first malformed line */
	SS_BAD_LINES_SKIP, /* skip it, count it, go on */
};

/* ss_bad_lines_parse() - "fail" or "skip". */
int ss_bad_lines_parse(const char *option, const char *text,
		       enum ss_bad_lines *policy);

struct ss_reader;

/* ss_data_size()'s length of standard input: not known before its end. */
#define SS_DATA_SIZE_UNKNOWN UINT64_MAX

/*
 * ss_data_size() - the bytes data file @path adds to a reader's stream
 * into *@size, and into *@gzip (unless NULL) whether it is gzip (its
 * first bytes 1f 8b, whatever its name): a plain file's size; a gzip
 * file's uncompressed length, measured by reading it through once
 * (seconds for a large one, logged at info level) and kept for the
 * process (by device, inode, size and modification time);
 * SS_DATA_SIZE_UNKNOWN for "-", standard input.  Any thread may call it.
 *
 * Returns 0; -errno naming the file; SS_EPARSE for a truncated or
 * corrupted gzip file.
 */
int ss_data_size(const char *path, uint64_t *size, bool *gzip);

/*
 * ss_reader_open() - stream the examples of @path whose line starts in
 * bytes [@begin, @end) (@end 0: to the end of the file), so that N readers
 * with adjacent ranges read every line exactly once.  Memory stays bounded
 * whatever the file's size.  A gzip file is read decompressed, its bytes
 * (ranges, ss_reader_tell()) those of the uncompressed data: reaching
 * @begin decompresses it from its start.  "-" reads standard input (plain
 * or gzip), from @begin 0 only, once.
 *
 * Returns 0; -errno naming the file; SS_EUSAGE for "-" from a @begin
 * other than 0, or with other files; SS_EPARSE for a truncated or
 * corrupted gzip file.
 */
int ss_reader_open(struct ss_reader **reader, const char *path, uint64_t begin,
		   uint64_t end, enum ss_bad_lines policy);

/*
 * ss_reader_open_files() - as ss_reader_open(), over @n files read as
 * one stream in order: @begin and @end are bytes of their concatenation,
 * every file starts a line, and errors name the file and its own line.
 */
int ss_reader_open_files(struct ss_reader **reader, const char *const *paths,
			 int n, uint64_t begin, uint64_t end,
			 enum ss_bad_lines policy);

/*
 * ss_reader_next() - the next example.  Returns 1, 0 at the end of the
 * range, SS_EPARSE for a malformed line under SS_BAD_LINES_FAIL (the detail
 * names the file, the line and what was wrong) and, whatever the policy,
 * for gzip data that is truncated or does not decompress (the file and
 * the line reached), -errno on a read error.
 */
int ss_reader_next(struct ss_reader *reader, struct ss_example *example);

/*
 * ss_reader_fill() - up to @max next examples into @examples (a batch).
 * Returns how many (fewer than @max only at the end of the range, 0
 * there), or what ss_reader_next() returned on a bad line or an error.
 */
int ss_reader_fill(struct ss_reader *reader, struct ss_example *examples,
		   int max);

/*
 * Multi-hot data: a categorical field may hold several values, each 8 hex
 * digits, separated by commas ("a3f2c1d0,00ff12ab"), as many as a line
 * holds; the feature's vector pools their rows (ss_model_config.pooling).
 * An empty field is the value 0, one value, as in single-hot data (its
 * own row: the feature's "missing"); an empty value between commas, or
 * a comma that ends the field, is a malformed line.  The values of a
 * run of examples are kept feature by feature: example r's feature j
 * holds ids[start[r * 26 + j]] to ids[start[r * 26 + j + 1] - 1].
 */
struct ss_bags {
	uint32_t *start; /* max * 26 + 1 entries */
	uint32_t *ids; /* cap entries; ss_reader_fill_bags() grows it */
	size_t cap;
	int max; /* examples */
};

/* ss_bags_create() - room for @max examples' bags.  0 or -ENOMEM. */
int ss_bags_create(struct ss_bags **bags, int max);

/* ss_bags_destroy() - release them and clear the pointer; NULL is fine. */
void ss_bags_destroy(struct ss_bags **bags);

/*
 * ss_reader_fill_bags() - as ss_reader_fill(), multi-hot lines too: the
 * values of the examples read into @bags (at most @bags->max examples;
 * bags->ids grows as they need), each example's sparse[j] the first of
 * its feature j's.  ss_reader_next() and ss_reader_fill() refuse a line
 * with several values in a field as malformed.  Returns as
 * ss_reader_fill(), or -ENOMEM.
 */
int ss_reader_fill_bags(struct ss_reader *reader, struct ss_example *examples,
			struct ss_bags *bags, int max);

/*
 * ss_reader_tell() - the byte where the next line starts: reopened at it,
 * a reader goes on where this one stopped.
 */
uint64_t ss_reader_tell(const struct ss_reader *reader);

/* ss_reader_skipped() - malformed lines skipped so far. */
uint64_t ss_reader_skipped(const struct ss_reader *reader);

/* ss_reader_close() - release it and clear the pointer.  NULL is fine. */
void ss_reader_close(struct ss_reader **reader);

/*
 * ss_parse_example() - parse one line (without its newline; a trailing CR
 * is ignored).  Returns 0, or SS_EPARSE with @why saying which field and
 * what was wrong.
 */
int ss_parse_example(const char *line, size_t len, struct ss_example *example,
		     char *why, size_t why_size);

/*
 * A dense layer y = relu?(W x + b) over a mini-batch.  @w (out x in,
 * row-major) and @b point into the caller's memory, the replica.
 */
struct ss_dense {
	int in, out;
	float *w, *b;
	bool relu;
};

/* ss_dense_forward() - @y (batch x out) from @x (batch x in). */
void ss_dense_forward(const struct ss_dense *layer, const float *x, float *y,
		      int batch);

/*
 * ss_dense_backward() - from @dy (batch x out, the loss gradient of the
 * layer's output; masked in place by the ReLU), the gradients of the
 * weights @dw (out x in), of the biases @db (out), and of the input @dx
 * (batch x in; NULL when not needed).  @x and @y as in the forward pass.
 */
void ss_dense_backward(const struct ss_dense *layer, const float *x,
		       const float *y, float *dy, float *dx, float *dw,
		       float *db, int batch);

/*
 * ss_dense_backward_sgd() - the same backward pass fused with an SGD step
 * of learning rate @lr on the layer's weights and biases: @dx is computed
 * from the weights before the step; no weight gradient is kept; @db (out)
 * receives the bias gradient.
 */
void ss_dense_backward_sgd(const struct ss_dense *layer, const float *x,
			   const float *y, float *dy, float *dx, float *db,
			   float lr, int batch);

/* What decides the BLIS kernels (blas.c). */
struct ss_cpu_facts {
	bool intel, avx512; /* AVX-512 F, DQ, BW and VL, usable */
	bool env_arch; /* BLIS_ARCH_TYPE set by the user */
	bool amd; /* in what was padding: the size and offsets stay */
	unsigned int family, model; /* family: base plus extended */
};

/* ss_cpu_facts_read() - this CPU's and this process's facts. */
void ss_cpu_facts_read(struct ss_cpu_facts *cpu);

/*
 * ss_blas_wants_skx() - whether to ask BLIS for its AVX-512 kernels, which
 * BLIS 0.9 takes only on the CPUs it knows; @why says which way and why.
 */
bool ss_blas_wants_skx(const struct ss_cpu_facts *cpu, const char **why);

/*
 * ss_blas_setup() - choose the BLIS kernels for this process, as
 * ss_blas_wants_skx() says for this CPU, and initialize BLIS; @note
 * receives a line for the log.  Returns the kernels' name ("skx").  Call
 * before any thread starts and before the first BLIS call (a GEMM fixes
 * the kernels for the process).
 */
const char *ss_blas_setup(char *note, size_t size);

/*
 * ss_blas_check() - whether BLIS_ARCH_TYPE, when set, asks for kernels this
 * BLIS has and this CPU can run: BLIS runs the kernels it is told to, and
 * ones beyond the CPU die of SIGILL at the first product.  Call before
 * ss_blas_setup().  Returns 0 (unset, or usable), or SS_EUSAGE with the
 * detail naming the variable, the kernels, the instruction sets the CPU
 * lacks and the kernels it can take.
 */
int ss_blas_check(void);

/*
 * The CTR model, DLRM-shaped: the dense features through a bottom MLP, the
 * 26 categorical values hashed into embedding tables, an interaction of
 * the bottom output and the embeddings, a top MLP, a sigmoid.  The
 * interaction is DLRM's pairwise dot products, or DCNv2's low-rank cross
 * network over their concatenation (MLPerf's DLRM-DCNv2).  All parameters
 * live in one flat float array (the replica): the dense part (the MLPs,
 * then the cross network) in one contiguous block first, then the tables.
 */
#define SS_MAX_LAYERS 8

/*
 * How a feature's bag of values (multi-hot data: several values in one
 * field) becomes its one vector: the sum or the mean of their rows.  A
 * bag of one value gives its row either way; an empty one, zeros.
 */
enum ss_pooling {
	SS_POOLING_SUM,
	SS_POOLING_MEAN,
};

/* How the top MLP's input is made from the 27 vectors. */
enum ss_interaction {
	/* z, then the dot product of every pair: D + 27 * 26 / 2 floats */
	SS_INTERACTION_DOT,
	/*
	 * DCNv2's low-rank cross network over x0, the 27 vectors end to
	 * end (d = 27 D floats): x_{l+1} = x0 * (W_l (V_l x_l) + b_l) + x_l
	 * (elementwise product), W_l d x R, V_l R x d; the top MLP takes
	 * the last x.
	 */
	SS_INTERACTION_DCN,
};

struct ss_model_config {
	int emb_dim; /* embedding size, also the bottom MLP's output */
	int bottom[SS_MAX_LAYERS + 1]; /* sizes, 13 first, emb_dim last */
	int n_bottom; /* entries in bottom[] */
	int top[SS_MAX_LAYERS + 1]; /* sizes after the interaction, 1 last */
	int n_top;
	uint32_t hash_size; /* rows per table, unless table_rows says */
	/*
	 * Table j's rows, when table_rows[j] is not 0: the categoricals'
	 * cardinalities differ by orders of magnitude (Criteo's: 3 to 10
	 * million), and a table needs no more rows than its feature has
	 * values.
	 */
	uint32_t table_rows[SS_SPARSE];
	enum ss_interaction interaction;
	int cross_layers, cross_rank; /* SS_INTERACTION_DCN's L and R */
	enum ss_pooling pooling; /* a bag's rows into its feature's vector */
	int reserved[4]; /* 0 */
};

/*
 * ss_model_config_init() - 16, 13-512-256-64-16, 512-256-1, 100000 rows,
 * dot interaction (with DCN: 3 cross layers of rank 64, when asked for).
 */
void ss_model_config_init(struct ss_model_config *config);

/* ss_model_table_rows() - the rows of table @j (0 to 25). */
uint32_t ss_model_table_rows(const struct ss_model_config *config, int j);

/*
 * ss_model_table_first() - the id of table @j's row 0: the rows of the
 * tables before it.  Table j's row r is id ss_model_table_first(j) + r,
 * its floats at that id times emb_dim after the MLPs.
 */
uint64_t ss_model_table_first(const struct ss_model_config *config, int j);

/* ss_model_uniform() - whether every table has hash_size rows. */
bool ss_model_uniform(const struct ss_model_config *config);

/*
 * ss_model_layers_parse() - "13-512-256-64-16" into @sizes.  Returns 0 or
 * SS_EUSAGE naming the option.
 */
int ss_model_layers_parse(const char *option, const char *text, int *sizes,
			  int *n);

/* ss_model_check() - the sizes fit together; SS_EUSAGE says how not. */
int ss_model_check(const struct ss_model_config *config);

/*
 * ss_model_interaction_parse() - "dot" or "dcn" into config->interaction.
 * Returns 0 or SS_EUSAGE naming @option.
 */
int ss_model_interaction_parse(const char *option, const char *text,
			       struct ss_model_config *config);

/* ss_model_interaction_name() - "dot" or "dcn". */
const char *ss_model_interaction_name(enum ss_interaction interaction);

/* ss_model_pooling_parse() / _name() - "sum" or "mean". */
int ss_model_pooling_parse(const char *option, const char *text,
			   struct ss_model_config *config);
const char *ss_model_pooling_name(enum ss_pooling pooling);

/*
 * ss_model_top_input() - the top MLP's input: emb_dim + 27 * 26 / 2 (dot),
 * 27 * emb_dim (dcn).
 */
int ss_model_top_input(const struct ss_model_config *config);

/*
 * ss_model_cross_offset() - where cross layer @l (0 to cross_layers - 1;
 * cross_layers: the end of the cross network, which is the end of the
 * dense part) starts in the replica: W_l (d x R, row-major), V_l (R x d),
 * b_l (d), with d = ss_model_top_input().  They follow the MLPs' layers.
 */
size_t ss_model_cross_offset(const struct ss_model_config *config, int l);

/* ss_model_layers() - the dense layers: the bottom MLP's, then the top's. */
int ss_model_layers(const struct ss_model_config *config);

/*
 * ss_model_layer_shape() - the input and output sizes of dense layer @l
 * (0 to ss_model_layers() - 1): the bottom MLP's layers, then the top
 * MLP's, the first of which takes ss_model_top_input().  Its weights
 * (out x in) then its biases follow the earlier layers' in the replica.
 */
void ss_model_layer_shape(const struct ss_model_config *config, int l, int *in,
			  int *out);

/*
 * ss_model_dense_len() / ss_model_len() - floats of the dense part (the
 * MLPs and the cross network) / of all.
 */
size_t ss_model_dense_len(const struct ss_model_config *config);
size_t ss_model_len(const struct ss_model_config *config);

/*
 * ss_model_init() - initialize @params as DLRM does: weights normal with
 * standard deviation sqrt(2 / (in + out)), biases sqrt(1 / out), table rows
 * uniform in +-sqrt(1 / rows); the cross network's W and V as the
 * weights, its b 0 (TorchRec's LowRankCrossNet).  The same seed gives the
 * same model.
 */
void ss_model_init(const struct ss_model_config *config, float *params,
		   uint64_t seed);

/* ss_model_init_dense() - the MLPs only, as ss_model_init() makes them. */
void ss_model_init_dense(const struct ss_model_config *config, float *params,
			 uint64_t seed);

struct ss_model_work;

/* ss_model_work_create() - a trainer's scratch for batches up to @batch. */
int ss_model_work_create(struct ss_model_work **work,
			 const struct ss_model_config *config, int batch);

/* ss_model_work_destroy() - release it; clear the pointer. */
void ss_model_work_destroy(struct ss_model_work **work);

/* ss_model_predict() - click probabilities of @n examples into @p. */
void ss_model_predict(const struct ss_model_config *config, const float *params,
		      struct ss_model_work *work,
		      const struct ss_example *examples, int n, float *p);

/*
 * ss_model_predict_bags() - as ss_model_predict(), each feature's vector
 * pooled from the rows of its values in @bags (NULL: sparse[j], one
 * each).  Returns 0, or -ENOMEM when @work could not grow to the bags'
 * values.
 */
int ss_model_predict_bags(const struct ss_model_config *config,
			  const float *params, struct ss_model_work *work,
			  const struct ss_example *examples,
			  const struct ss_bags *bags, int n, float *p);

/*
 * ss_model_sgd_step() - forward, backward and an SGD update of @params in
 * place (lock-free: Hogwild), as ss_model_step() with SGD at @lr.  Returns
 * the mean log loss of the @n examples.
 */
double ss_model_sgd_step(const struct ss_model_config *config, float *params,
			 struct ss_model_work *work,
			 const struct ss_example *examples, int n, float lr);

/*
 * How a step updates the parameters.  SGD: w -= lr * g.  Adagrad: per
 * parameter, acc += g^2; w -= lr * g / (sqrt(acc) + eps), with @acc one
 * float per parameter, laid out like the parameters, starting at 0.  The
 * accumulators are the node's own: they are not in the replica and never
 * synchronized.  The trainers of a node share them without locks, as they
 * share the replica (a lost increment only leaves one step a little
 * larger).  A table row is updated once per step with the sum of its
 * gradients over the batch, so a row used twice gets one Adagrad update.
 */
enum ss_optimizer {
	SS_OPT_SGD,
	SS_OPT_ADAGRAD,
};

/* ss_optimizer_parse() - "sgd" or "adagrad". */
int ss_optimizer_parse(const char *option, const char *text,
		       enum ss_optimizer *opt);

/* ss_optimizer_name() - "sgd" or "adagrad". */
const char *ss_optimizer_name(enum ss_optimizer opt);

/*
 * ss_optimizer_default_lr() - the learning rate that trained best in a
 * sweep on Criteo-shaped data (docs/perf.md): 0.01 for Adagrad, 0.1 for
 * SGD.
 */
float ss_optimizer_default_lr(enum ss_optimizer opt);

/*
 * Learning-rate schedules (train --lr-schedule): the rate held
 * (constant), or brought from it to 0 as the run's data is trained,
 * linearly (warmup-linear) or along a half cosine (cosine); any of them
 * after a linear warmup over the first examples when one is asked for.
 */
enum ss_lr_schedule {
	SS_LR_CONSTANT,
	SS_LR_WARMUP_LINEAR,
	SS_LR_COSINE,
};

/* ss_lr_schedule_parse() - "constant", "warmup-linear" or "cosine". */
int ss_lr_schedule_parse(const char *option, const char *text,
			 enum ss_lr_schedule *schedule);
const char *ss_lr_schedule_name(enum ss_lr_schedule schedule);

/*
 * ss_lr_at() - the rate @schedule gives from @lr after @examples examples
 * with @done (0 to 1) of the run's data trained: times (examples + 1) /
 * @warmup while examples < @warmup (0: no warmup), then times 1
 * (constant), 1 - done (warmup-linear) or (1 + cos(pi done)) / 2
 * (cosine).
 */
float ss_lr_at(enum ss_lr_schedule schedule, float lr, uint64_t warmup,
	       uint64_t examples, double done);

struct ss_optim {
	enum ss_optimizer kind;
	float lr;
	float eps; /* Adagrad: added to sqrt(acc) */
	float *acc; /* Adagrad: ss_model_len() floats; NULL for SGD */
};

/*
 * ss_model_step() - forward, backward and an update of @params in place
 * by @opt (lock-free: Hogwild), on the log loss of @n examples (at most the
 * batch @work was made for) summed and divided by that batch size: a full
 * batch steps on its mean loss, and a short one (the end of a trainer's
 * share) takes a step n / batch as long, so that every example weighs the
 * same.  Only the table rows the batch uses (and their accumulators) are
 * touched.  Returns the mean log loss of the @n examples.
 */
double ss_model_step(const struct ss_model_config *config, float *params,
		     struct ss_model_work *work,
		     const struct ss_example *examples, int n,
		     const struct ss_optim *opt);

/*
 * ss_model_step_bags() - as ss_model_step(), on multi-hot examples: each
 * feature's vector pooled from the rows of its values in @bags (NULL:
 * sparse[j], one each), and the pooled gradient spread back to those
 * rows (divided by the bag's size for mean pooling), summed per row.
 * Returns the mean log loss, or NAN with the error detail set when @work
 * could not grow to the bags' values (-ENOMEM).
 */
double ss_model_step_bags(const struct ss_model_config *config, float *params,
			  struct ss_model_work *work,
			  const struct ss_example *examples,
			  const struct ss_bags *bags, int n,
			  const struct ss_optim *opt);

/*
 * Tables served elsewhere (sharded over the ranks, table.h): the caller
 * fetches the rows a batch uses and sends their gradients to where they
 * live.  ss_model_batch_rows() gives the batch's n x 26 row ids (table j,
 * row r: ss_model_table_first(j) + r), in the order ss_model_step_rows() takes
 * @rows, one pointer each.  It steps the MLPs in @params (only
 * ss_model_dense_len() floats are touched) and writes the summed gradient
 * of each distinct row into @grad_ids and @grads (up to n x 26 of them, x
 * emb_dim floats), their number into *@n_grads.
 */
void ss_model_batch_rows(const struct ss_model_config *config,
			 const struct ss_example *examples, int n,
			 uint64_t *ids);
double ss_model_step_rows(const struct ss_model_config *config, float *params,
			  struct ss_model_work *work,
			  const struct ss_example *examples, int n,
			  const struct ss_optim *opt, const float *const *rows,
			  uint64_t *grad_ids, float *grads, int *n_grads);
/* ss_model_predict_rows() - as ss_model_predict(), on at most a batch. */
void ss_model_predict_rows(const struct ss_model_config *config,
			   const float *params, struct ss_model_work *work,
			   const struct ss_example *examples, int n,
			   const float *const *rows, float *p);

/*
 * The same with multi-hot bags (NULL: one value a feature, as above):
 * ss_model_batch_rows_bags() writes the row id of every value of the
 * batch, in the bags' order, and returns how many (@bags->start[n * 26]
 * - start[0]); the step and the prediction take @rows in that order,
 * one pointer a value.  @grad_ids and @grads have room for as many
 * rows as there are values.  The step returns NAN and the prediction
 * -ENOMEM (the error detail set) when @work could not grow to the
 * values.
 */
int ss_model_batch_rows_bags(const struct ss_model_config *config,
			     const struct ss_example *examples,
			     const struct ss_bags *bags, int n, uint64_t *ids);
double ss_model_step_rows_bags(const struct ss_model_config *config,
			       float *params, struct ss_model_work *work,
			       const struct ss_example *examples,
			       const struct ss_bags *bags, int n,
			       const struct ss_optim *opt,
			       const float *const *rows, uint64_t *grad_ids,
			       float *grads, int *n_grads);
int ss_model_predict_rows_bags(const struct ss_model_config *config,
			       const float *params, struct ss_model_work *work,
			       const struct ss_example *examples,
			       const struct ss_bags *bags, int n,
			       const float *const *rows, float *p);

struct ss_topo;
struct ss_plan;
struct ss_sync;
struct ss_table;

/* Running totals of a rank's training, for progress lines. */
struct ss_train_progress {
	uint64_t examples;
	uint64_t clicks; /* examples labelled 1 */
	uint64_t loss_micro; /* summed log loss, in millionths */
};

/*
 * ss_train_progress_read() - a consistent-enough reading of @p (the
 * trainers add to it without locks): examples, the mean training log loss
 * and its normalized entropy (against the click rate seen so far); the
 * two are 0 before the first example.  Any thread, while they train.
 */
void ss_train_progress_read(struct ss_train_progress *p, uint64_t *examples,
			    double *loss, double *ne);

#define SS_TRAIN_MAX_PREFETCH 8
/* ss_train_options.prefetch: each step's gradients applied before the
 * next rows are read (exact, slow; for tests) */
#define SS_TRAIN_PREFETCH_EXACT (-1)
/* The lookups a trainer has in flight at @prefetch: the table client's
 * depth (ss_table_options.depth) that ss_train() needs. */
#define SS_TRAIN_LOOKUP_DEPTH(prefetch) (1 + ((prefetch) > 0 ? (prefetch) : 0))

/*
 * Data left to train: bytes [@begin, @end) of the file (a line belongs to
 * the range holding its first byte), @passes times over.  What a stopped
 * ss_train() leaves (ss_train_left()), and what a resumed one trains
 * first (ss_train_options.resume).
 */
struct ss_train_range {
	uint64_t begin, end;
	uint64_t passes;
};

/*
 * A running ss_train() seen from outside: stop it, and see where its
 * trainers are, for a checkpoint that resumes.  Made by the caller,
 * handed to ss_train() in its options (one call at a time), read from
 * any thread.
 */
struct ss_train_control;

/* ss_train_control_create() - a new control, not stopped.  0 or -ENOMEM. */
int ss_train_control_create(struct ss_train_control **ctl);

/* ss_train_control_free() - release it and clear the pointer; NULL is fine. */
void ss_train_control_free(struct ss_train_control **ctl);

/*
 * ss_train_stop() - every trainer ends after the batch it is computing
 * (with sharded tables, after the batches whose rows it has asked for),
 * and ss_train() returns 0 with the data left in ss_train_left().
 * Async-signal-safe: a SIGTERM handler may call it.
 */
void ss_train_stop(struct ss_train_control *ctl);

/* ss_train_stopping() - whether ss_train_stop() was called. */
bool ss_train_stopping(const struct ss_train_control *ctl);

/*
 * ss_train_left() - the data the last ss_train() with @ctl has not
 * trained: each trainer's open range from the line after its last
 * computed batch (with its passes still to come), and the resume ranges
 * no trainer has taken; with a fixed share of the data (no next_range),
 * that is all of it, and a chunk claimer hands out the rest.  After
 * ss_train() returns it is exact; while it runs, each trainer's part is
 * as of its last batch (a checkpoint then holds a little more training
 * than its ranges say: what was trained while it was saved).  Writes at
 * most @max ranges to @out and returns how many there are, which may be
 * more than @max.
 */
int ss_train_left(struct ss_train_control *ctl, struct ss_train_range *out,
		  int max);

/*
 * How to train one rank.  Fill with ss_train_options_init() first (base.h,
 * "Option structs").
 */
struct ss_train_options {
	size_t size; /* sizeof the caller's struct, set by the init */
	int threads; /* Hogwild trainer threads */
	/*
	 * Criteo-format file, plain or gzip (ss_reader_open()); "-" is
	 * standard input, read once: one trainer, one epoch, no chunks, no
	 * resume, from byte 0.
	 */
	const char *data;
	uint64_t begin, end; /* this rank's bytes of it; end 0: to the end */
	int batch;
	float lr;
	enum ss_optimizer optimizer;
	float adagrad_eps;
	/*
	 * Adagrad's accumulators, ss_model_len() floats starting at 0, kept
	 * by the caller across calls; NULL: ss_train allocates them for the
	 * call (bound to the replica's NUMA node with topo and plan).
	 */
	float *adagrad_acc;
	int epochs; /* passes over the data (at least 1) */
	enum ss_bad_lines bad_lines;
	struct ss_topo *topo; /* with plan: pin trainer i to plan slot 1 + i */
	const struct ss_plan *plan;
	struct ss_sync *sync; /* NULL: no synchronization */
	int sync_every; /* > 0: foreground rounds every k steps per trainer */
	/* Optional: running totals, added to atomically, for progress */
	struct ss_train_progress *progress;
	/*
	 * Data by chunks (train --data-split dynamic): when set, trainers
	 * take byte ranges of @data from here, one after another, instead
	 * of a fixed slice of [begin, end) each for @epochs passes (both
	 * then unused).  Returns 1 with a range, 0 when there is no more,
	 * or -errno with the detail set.  Called from every trainer thread.
	 */
	int (*next_range)(void *ctx, uint64_t *begin, uint64_t *end);
	void *range_ctx;
	/*
	 * Sharded tables (train --tables sharded): when set, the rows come
	 * from here (trainer i is its client i, a batch's values a
	 * lookup), @params holds only the MLPs (ss_model_dense_len()
	 * floats, and so do Adagrad's accumulators).  With @prefetch 0
	 * (the default) a trainer posts the next batch's lookup once this
	 * step's gradients are pushed: its rows lack only the updates
	 * still on their way to the owners.  With @prefetch D >= 1 it
	 * posts the lookups of its next D batches before it computes this
	 * one, hiding the READs' latency: rows are then up to D steps
	 * stale, which costs quality where rows are hot (docs/perf.md,
	 * "Quality on data of several kinds").  SS_TRAIN_PREFETCH_EXACT:
	 * each step waits until its gradients are applied (ss_table_flush)
	 * before the next rows are read: the steps of one trainer are then
	 * those of local tables, to rounding; slow.
	 */
	struct ss_table *table;
	int prefetch;
	/* Optional: stop the call, and see where it is (above). */
	struct ss_train_control *control;
	/*
	 * Resume a stopped call: its ss_train_left() ranges, trained first,
	 * each by one trainer.  Then, with chunks (next_range), the chunks
	 * still to claim; without, nothing else: the ranges are all that is
	 * left (@epochs, @begin and @end unused).  @resume is copied.
	 */
	const struct ss_train_range *resume;
	int n_resume;
	bool resuming; /* @resume is given (an empty list: nothing left) */
	/*
	 * Optional: several files read as one stream, in order (@data then
	 * unused; @begin, @end and the chunks are bytes of the stream).
	 */
	const char *const *data_files;
	int n_data_files;
	/*
	 * The rate's schedule (ss_lr_at(), from @lr; with @table the MLPs'
	 * rate: the rows' is the table's): @warmup examples of warmup;
	 * @schedule_bytes the bytes of data the whole run trains (each pass
	 * counted), of which @done_bytes and @done_examples were trained
	 * before this call (a resumed run's).
	 */
	enum ss_lr_schedule lr_schedule;
	uint64_t warmup;
	uint64_t schedule_bytes, done_bytes, done_examples;
	/*
	 * Optional: @every(@every_ctx, n) each time the call's trainers
	 * have trained a multiple n of @every_examples examples, from the
	 * trainer whose batch took them past it (the others train on): an
	 * evaluation while training.
	 */
	void (*every)(void *ctx, uint64_t examples);
	void *every_ctx;
	uint64_t every_examples;
	/*
	 * Optional: @epoch_end(@every_ctx, e, examples) when the bytes this
	 * call has trained, with @done_bytes, pass the end of epoch e (1 to
	 * @epochs - 1; the last one's is the call's return), an epoch being
	 * @schedule_bytes / @epochs (this rank's share of each pass), from
	 * the trainer whose batch took them past it: the examples then
	 * trained, @done_examples included.  With chunks claimed, a rank's
	 * share is the job's bytes over its ranks, so its epoch ends about
	 * when the job's does.  A batch that ends an epoch and passes a
	 * multiple of @every_examples calls this one alone.
	 */
	void (*epoch_end)(void *ctx, int epoch, uint64_t examples);
};

struct ss_train_result {
	uint64_t examples, skipped;
	uint64_t ranges; /* taken from next_range (dynamic data) */
	double loss_sum; /* for the mean training log loss */
	double seconds;
};

/*
 * ss_train_options_init() - 1 thread, batch 128, Adagrad at
 * ss_optimizer_default_lr() (eps 1e-8), one epoch, bad lines fail.
 */
#define ss_train_options_init(opts) \
	ss_train_options_init_size((opts), sizeof(*(opts)))
void ss_train_options_init_size(struct ss_train_options *opts, size_t size);

/*
 * ss_train() - @opts->epochs passes over this rank's part of the data by
 * @opts->threads Hogwild trainers, each on its own slice, updating
 * @params in place.  Returns 0, SS_EUSAGE for bad options, -EINVAL for
 * @opts of a size this library does not know (base.h), or the first
 * trainer's error with its detail (what, which trainer, why).
 */
int ss_train(const struct ss_model_config *config, float *params,
	     const struct ss_train_options *opts,
	     struct ss_train_result *result);

/*
 * The data by chunks: chunk numbers from the job's counter at rank 0
 * (ss_sync_claim: a rank that trains faster takes more), or from a local
 * counter without a sync (@sync NULL: one rank's trainers), mapped to
 * byte ranges of a file, epoch after epoch.  ss_chunks_next() is what
 * ss_train_options.next_range takes; a program of the user's calls it
 * for the next range to read (ss_reader_open).
 */
struct ss_chunks {
	struct ss_sync *sync; /* NULL: the local counter */
	uint64_t next; /* the local counter */
	uint64_t size, chunk, per_epoch, total; /* set by ss_chunks_plan() */
	/*
	 * Nonzero: each epoch's chunks in an order drawn from this value
	 * and the epoch (every chunk once an epoch), the same on every
	 * rank that sets it alike; 0 (ss_chunks_plan's): the file's order.
	 */
	uint64_t shuffle;
};

/*
 * ss_chunks_plan() - the chunks of a file of @size bytes: @chunk_size
 * bytes each (<= 0: about 64 a rank of @world, 64 KiB to 64 MiB), for
 * @epochs passes.  Leaves @k->sync, @k->next and @k->shuffle as they
 * are.
 */
void ss_chunks_plan(struct ss_chunks *k, uint64_t size, int world,
		    long chunk_size, int epochs);

/*
 * ss_chunks_next() - the next chunk's bytes [*@begin, *@end) of @ctx (a
 * struct ss_chunks): 1, 0 once every chunk of every epoch is taken, or
 * what ss_sync_claim() returns.  Thread-safe.
 */
int ss_chunks_next(void *ctx, uint64_t *begin, uint64_t *end);

/* Metrics over predictions p (probabilities) and labels y. */
struct ss_metrics {
	uint64_t count;
	double log_loss; /* mean binary cross-entropy */
	double ne; /* log loss / entropy of the empirical click rate */
	double auc; /* area under the ROC curve; ties count half */
	double calibration; /* sum of p / sum of y */
	double ctr; /* empirical click rate */
	uint64_t not_numbers; /* predictions that were NaN or infinite */
};

/*
 * ss_metrics_compute() - all of the above over @n pairs.  AUC sorts a copy
 * (n log n); the others are one pass.  Predictions that are not numbers
 * (a model that diverged) are counted in not_numbers, and then log loss,
 * NE, AUC and calibration are NAN.  Returns 0, or -EINVAL for n == 0 and
 * -ENOMEM.
 */
int ss_metrics_compute(const float *p, const float *y, size_t n,
		       struct ss_metrics *metrics);

/*
 * ss_normalized_entropy() - @log_loss over the entropy of a click rate
 * @ctr; NAN when that entropy is 0 (no clicks, or only clicks).
 */
double ss_normalized_entropy(double log_loss, double ctr);

/* The planted teacher of the synthetic data. */

/* How many distinct values each categorical feature has. */
enum ss_gen_shape {
	SS_GEN_UNIFORM, /* opts.cardinality each */
	SS_GEN_CRITEO, /* Criteo Kaggle's counts: 3 to 10 million, 34 M in all */
};

/* Fill with ss_gen_options_init() first (base.h, "Option structs"). */
struct ss_gen_options {
	size_t size; /* sizeof the caller's struct, set by the init */
	uint64_t examples;
	uint64_t seed;
	double ctr; /* the click rate to aim for */
	double zipf; /* exponent of the categorical values' distribution */
	uint32_t cardinality; /* distinct values per feature, when uniform */
	enum ss_gen_shape shape;
	uint64_t stream; /* which sample of the seed's teacher: 0 train, 1 test */
	double value_scale; /* standard deviation of a value's own weight */
	double pair_scale; /* scale of the interactions' dot products */
	double zipf_max; /* > zipf: each feature's exponent drawn from
			  * [zipf, zipf_max]; otherwise zipf for all */
	uint32_t cap; /* at most this many values a feature; 0: no cap */
	double missing; /* mean share of empty fields, each column's own rate
			 * drawn from [0, 2 * missing]; < 0: 5 % of dense and
			 * 3 % of categorical fields in every column */
	double dense_pair_scale; /* dense x dense terms of the teacher */
	double dense_cat_scale; /* dense x categorical terms */
	/*
	 * Multi-hot data: feature j's field holds multi_hot[j] values (0 or
	 * 1: one), each drawn as a single value is, comma-separated; the
	 * teacher sees the mean of their weights and embeddings.
	 */
	uint32_t multi_hot[SS_SPARSE];
};

/* The most values gen-data writes in one field. */
#define SS_GEN_MAX_HOT 256

/*
 * ss_gen_options_init() - 1000000 examples, seed 1, CTR 0.25, Zipf 1.1 for
 * every feature, 30 values per feature (uniform shape) and no cap, 5 % of
 * dense and 3 % of categorical fields empty, value weights 0.35,
 * categorical interactions 0.05, no dense x dense or dense x categorical
 * terms.
 */
#define ss_gen_options_init(opts) \
	ss_gen_options_init_size((opts), sizeof(*(opts)))
void ss_gen_options_init_size(struct ss_gen_options *opts, size_t size);

/*
 * ss_gen_cardinality() - the distinct values of feature @j (0..25).  It
 * reads @opts in place, only shape and cardinality: fields every size of
 * the struct has.
 */
uint32_t ss_gen_cardinality(const struct ss_gen_options *opts, int j);

/*
 * ss_gen_data() - write @opts->examples lines of Criteo format to @out from
 * a planted logistic teacher over the dense features, the categorical
 * values and a few of their pairwise interactions, and return the
 * teacher's own metrics on the labels drawn: its NE is the floor no model
 * can beat on that file.  Returns 0 or -errno; -EINVAL for nothing to
 * generate or @opts of a size this library does not know (base.h).
 */
int ss_gen_data(FILE *out, const struct ss_gen_options *opts,
		struct ss_metrics *teacher);

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_TRAIN_H */
