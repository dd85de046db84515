/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The parts of `shadowsync train`, one job a file: options
 * (train_options.c), peers (train_peers.c), checkpoints and signals
 * (train_checkpoint.c), the model and the place in the data a checkpoint
 * keeps, and --resume (train_record.c), progress lines (train_progress.c), evaluation and the summary (train_report.c),
 * the sharded tables (train_tables.c), the metrics file (train_metrics.c),
 * and the run itself (cmd_train.c).
 */
#ifndef SS_TRAIN_CMD_H
#define SS_TRAIN_CMD_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>

#include "command.h"
#include "shadowsync/shadowsync.h"

extern const char ss_train_prog[];

/* --tables: where the embedding tables live. */
enum ss_tables_kind {
	SS_TABLES_REPLICATED, /* a copy on every rank, synchronized */
	SS_TABLES_SHARDED, /* each row at its owner (table.h) */
	SS_TABLES_LOCAL, /* a copy on every rank, each its own */
};
extern const char *const ss_tables_names[];

#define SS_METRICS_PATH_MAX 4096

/* --metrics: the file node_exporter's textfile collector serves. */
struct ss_metrics_file {
	char path[SS_METRICS_PATH_MAX]; /* {rank} replaced */
	uint64_t start_ns; /* when it was first written */
	bool open; /* written once: the later writes may go on */
	bool failing; /* the last write failed (said once) */
};

struct ss_train_cmd {
	struct ss_model_config model;
	struct ss_train_options train;
	struct ss_sync_options sync;
	struct ss_fabric_options fabric;
	const char *test;
	char *peers; /* owned copy of --peers */
	const char *hostfile;
	long port;
	bool rank_given;
	struct ss_job *job; /* the ranks' addresses, from ss_job_find() */
	long threads;
	bool oversubscribe, foreground, json;
	long seed, progress;
	const char *save, *load; /* checkpoint paths, {rank} not yet replaced */
	long save_every;
	uint64_t layout_hash;
	uint64_t resumed; /* examples the loaded checkpoint had seen */
	uint64_t test_skipped; /* malformed lines of --test passed over */
	const char *blas; /* the BLIS kernels' name */
	int tables; /* --tables: enum ss_tables_kind */
	bool prefetch_given; /* --prefetch: refused but with sharded tables */
	float dense_lr; /* --dense-lr; 0: --lr */
	bool rejoin; /* --rejoin: replaces a failed rank of a running job */
	double job_began; /* --job-began: seconds since 1970; 0: not given */
	struct ss_table *table; /* --tables sharded */
	struct ss_table_stats trained; /* its stats when training ended */
	int split; /* --data-split: 0 dynamic, 1 static, -1 not given */
	long chunk_size; /* --chunk-size; 0: automatic */
	const char *metrics; /* --metrics FILE, {rank} not yet replaced */
	struct ss_metrics_file mfile;
	/* --resume: @load is a checkpoint to go on from (train_record.c) */
	bool resume;
	bool epochs_given, split_given, chunk_given;
	struct ss_train_range *resume_ranges; /* its record's, @n_resume */
	int n_resume;
	uint64_t resume_claimed; /* its chunks handed out */
	/* --data's bytes, all its files' (a gzip file's uncompressed); 0
	 * for standard input, whose length is not known */
	uint64_t data_size;
	/* with sharded tables, the most values an example of the first
	 * --data file's first lines holds (26 one a field; more with
	 * multi-hot data): what their lookups are sized by; else 26 */
	int values;
	const char *gzip; /* a --data file that is gzip; NULL: none */
	bool stdin_data; /* --data -: standard input */
	char **data_files; /* --data's files, globs expanded, in order */
	int n_data;
	struct ss_train_control *control; /* stops trainers, says where */
	struct ss_chunks *chunks; /* dynamic data: the chunks claimed */
	uint64_t bytes_total; /* ss_train_bytes_total() as training began */
	long eval_every; /* --eval-every N: --test every N examples, 0: not */
	bool eval_epochs; /* --eval-every: --test at each epoch's end too */
	bool shuffle; /* --shuffle: the chunks' order drawn each epoch */
	uint64_t shuffle_from; /* the value it is drawn from (the record's) */
	const char *log_csv; /* --log-csv FILE, {rank} not yet replaced */
	FILE *csv; /* open on it, where this rank writes one */
	uint64_t saves; /* checkpoints written */
	double last_save; /* when the last was (Unix time), 0: none */
};

struct ss_progress {
	struct ss_train_cmd *c;
	uint64_t start_ns; /* when training began */
	struct ss_sync *sync;
	const float *params;
	struct ss_train_progress totals; /* the trainers add to it */
	bool stop;
	pthread_mutex_t lock;
	pthread_cond_t cond;
};

/* ss_train_parse() - the options into @c; 1 after --help, or an error. */
int ss_train_parse(int argc, char **argv, struct ss_train_cmd *c);

/*
 * ss_train_resolve_tables() - --tables by the world size when not given
 * (sharded with several ranks), and the options that depend on it.
 */
int ss_train_resolve_tables(struct ss_train_cmd *c);

/*
 * ss_train_peers() - every rank's address and this rank, from --peers,
 * --hostfile, Slurm or the launcher's environment.
 */
int ss_train_peers(struct ss_train_cmd *c);

/*
 * ss_train_table_options() - the sharded tables' options for model @m
 * trained with @t on data of at most @values values an example (26: one
 * a field; ss_train_cmd.values) (the seed left at its default): train's,
 * and what doctor sizes.
 */
void ss_train_table_options(const struct ss_model_config *m,
			    const struct ss_train_options *t, int values,
			    struct ss_table_options *o);

/*
 * ss_train_connect_failed() - @rc of opening a fabric; for a --rejoin
 * rank whose peers did not all answer, the hint says why that may be.
 */
int ss_train_connect_failed(const struct ss_train_cmd *c, int rc);

/* ss_layout_hash() - FNV-1a over the model's sizes, for the handshake. */
uint64_t ss_layout_hash(const struct ss_model_config *m);

/* ss_checkpoint_path() - @path with {rank} replaced, into @buf. */
const char *ss_checkpoint_path(const struct ss_train_cmd *c, const char *path,
			       bool saving, char *buf, size_t size);

/*
 * ss_train_check_paths() - before training: --data's files and --test
 * are non-empty regular files we can read (the first --data's stat in
 * @data, all their bytes in @c->data_size, a gzip one in @c->gzip), or
 * --data - alone with the options standard input allows, --load
 * is readable, --save's folder is writable.
 */
int ss_train_check_paths(struct ss_train_cmd *c, struct stat *data);

/*
 * ss_train_check_split() - with gzip --data (once the split is known,
 * a resumed run's too): static, the split it takes when none is given;
 * dynamic, --chunk-size and --shuffle refused.
 */
int ss_train_check_split(struct ss_train_cmd *c);

/*
 * ss_train_nothing_trained() - this rank trained no example: an error
 * alone (every line malformed), a warning as one rank of several.
 */
int ss_train_nothing_trained(const struct ss_train_cmd *c,
			     const struct ss_train_result *res);

/* ss_train_on_signal() - SIGTERM, SIGINT, SIGHUP, SIGPIPE: no shm object
 * nor half-written checkpoint left. */
void ss_train_on_signal(int sig);

/*
 * ss_shard_layout_hash() - a shard file's layout: the model's, the job's
 * size and the rank, so that a shard loads only where it was saved.
 */
uint64_t ss_shard_layout_hash(uint64_t model_hash, int world, int rank);

/*
 * ss_shard_layout_why() - @rc of loading shard file @path, meant as rank
 * @rank of @world; when it is SS_ELAYOUT, says what the file is instead,
 * if it can tell: another rank's shard of a job this size, a shard of
 * another job size (@ours names ours, @size_hint the way out) or the
 * whole model (@whole_hint); *@told (may be NULL) says whether it did.
 */
int ss_shard_layout_why(int rc, const char *path, uint64_t model_hash,
			int world, int rank, const char *ours,
			const char *size_hint, const char *whole_hint,
			bool *told);

/*
 * ss_train_load_whole_why() - @rc of loading the whole model from @path;
 * when it is SS_ELAYOUT and the file is a shard of this model, says so.
 */
int ss_train_load_whole_why(int rc, const char *path, uint64_t model_hash);

/* ss_train_shard_of_one() - whether @path is the shard of a job of one
 * rank of this model (every row, in its permutation's order). */
bool ss_train_shard_of_one(const char *path, uint64_t model_hash);

/*
 * ss_train_load_shard() - --load with --tables sharded: this rank's MLPs,
 * rows and accumulators (and into @rec, unless NULL, the resume record of
 * SS_RESUME_RECORD_MAX bytes at most, its length in *@rec_len); a file of another job size is refused with the
 * reshard command in the hint.
 */
int ss_train_load_shard(struct ss_train_cmd *c, const char *path, float *params,
			bool *has_acc, unsigned char *rec, size_t *rec_len);

/*
 * ss_train_save() - --save, atomically, with @examples seen and, from a
 * run with a control, the record of where its trainers are in the data.
 */
int ss_train_save(struct ss_train_cmd *c, const float *params,
		  uint64_t examples);

/* The most bytes a resume record takes (the checkpoint's limit). */
#define SS_RESUME_RECORD_MAX (1u << 20)

/*
 * ss_train_record_shard() - the record of shard @rank of @world of model
 * @m written by reshard, into @buf (SS_RESUME_RECORD_MAX bytes): the
 * model and the job's size, and no place in the data (--resume refuses
 * it; --load, eval, predict and export take it).  Returns its length,
 * at most SS_RECORD_SHARD_MAX.
 */
#define SS_RECORD_SHARD_MAX 512
size_t ss_train_record_shard(const struct ss_model_config *m, int world,
			     int rank, unsigned char *buf);

/*
 * ss_train_record() - this rank's place in its data now (from
 * @c->control: the ranges left, the chunks handed out) as a checkpoint's
 * record, into @buf of SS_RESUME_RECORD_MAX bytes.  Returns its length,
 * 0 without a control.
 */
size_t ss_train_record(const struct ss_train_cmd *c, uint64_t data_size,
		       unsigned char *buf);

/*
 * ss_train_record_model() - the model a checkpoint that train saved holds
 * (from its record, peeked: the load checks the file), how its tables
 * were kept (enum ss_tables_kind) and its job's size.  Returns 0, or an
 * error naming the file (one without a record: saved by an older version).
 */
int ss_train_record_model(const char *path, struct ss_model_config *model,
			  int *tables, int *world);

/*
 * ss_train_resume_plan() - --resume, before the sync engine is made: the
 * checkpoint's record, peeked, sets what the job's data plan needs from
 * it (the data split, epochs, chunk size, where the chunk counter goes
 * on), or refuses a run that cannot go on from it (another --data,
 * another job size, no record), naming the file.
 */
int ss_train_resume_plan(struct ss_train_cmd *c, uint64_t data_size);

/*
 * ss_train_resume_take() - the record of the checkpoint @path just loaded
 * (@rec, @len bytes, checked by its checksum): its ranges into
 * @c->train's resume, after the same checks as the plan's.
 */
int ss_train_resume_take(struct ss_train_cmd *c, const char *path,
			 const unsigned char *rec, size_t len,
			 uint64_t data_size);

/*
 * ss_train_bytes_total() - the bytes of data this run is to train, each
 * pass counted (with chunks, the job's unclaimed chunks and this rank's
 * resumed ranges), from its options before training; and
 * ss_train_bytes_left() - as many still to train, while it trains (the
 * chunks no rank has claimed, as far as this rank knows: at rank 0 the
 * counter, elsewhere its own highest claim).  For percent done.
 */
uint64_t ss_train_bytes_total(const struct ss_train_cmd *c);
uint64_t ss_train_bytes_left(const struct ss_train_cmd *c);

/* ss_train_shuffle_seed() - --shuffle's value (nonzero) from --seed. */
uint64_t ss_train_shuffle_seed(long seed);

/*
 * ss_train_stop_on_signals() - from now, the first SIGTERM or SIGINT stops
 * @ctl's trainers (NULL: they end the rank at once again, as before
 * training) and gives the rank SS_TRAIN_STOP_S to save and exit; a later
 * SIGINT ends it at once.  ss_train_stop_signal(): the signal that
 * stopped them, 0 if none.
 */
#define SS_TRAIN_STOP_S 60
void ss_train_stop_on_signals(struct ss_train_control *ctl);
int ss_train_stop_signal(void);

/*
 * --log-csv: ss_train_csv_open() - the file, {rank} as for --save, with
 * its header (before training; an error names the option and path);
 * ss_train_csv_row() - a row of the figures so far, @secs into training
 * (the progress thread's every --progress, and one at the end), with the
 * held-out NE and AUC of @test when not NULL (--eval-every);
 * ss_train_csv_close().  Without --log-csv, or a rank that does not
 * write one, they do nothing.
 */
int ss_train_csv_open(struct ss_train_cmd *c);
void ss_train_csv_row(struct ss_progress *p, double secs,
		      const struct ss_metrics *test);
void ss_train_csv_close(struct ss_train_cmd *c);

/*
 * ss_train_eval_hook() - --eval-every, from the trainer whose batch took
 * the rank past a multiple of it (@ctx the struct ss_progress): the
 * held-out figures of the model as it is (the others train on: a Hogwild
 * read), a line and a CSV row; a failure is said, training goes on.
 */
void ss_train_eval_hook(void *ctx, uint64_t examples);

/* ss_train_epoch_hook() - the same at the end of epoch @epoch. */
void ss_train_epoch_hook(void *ctx, int epoch, uint64_t examples);

/* The progress thread: lines every --progress s, saves every --save-every. */
void *ss_progress_main(void *arg);
void ss_progress_stop(struct ss_progress *p, pthread_t thread, bool *started);

/*
 * ss_predict_each() - the model's predictions for the examples of @path,
 * a batch at a time to @each (@n examples, their @p), which returns 0 or
 * an error that ends the reading; rows from @table when not NULL.
 * *@skipped: malformed lines passed over (--bad-lines skip).
 */
int ss_predict_each(const struct ss_model_config *m, const float *params,
		    struct ss_table *table, const char *path,
		    enum ss_bad_lines bad,
		    int (*each)(void *ctx, const struct ss_example *ex,
				const float *p, int n),
		    void *ctx, uint64_t *skipped);

/*
 * ss_evaluate() - NE, AUC and calibration of @params on the file @path;
 * *@skipped: its malformed lines passed over (--bad-lines skip).
 */
int ss_evaluate(const struct ss_model_config *m, const float *params,
		struct ss_table *table, const char *path,
		enum ss_bad_lines bad_lines, struct ss_metrics *out,
		uint64_t *skipped);

/*
 * ss_train_open_table() - --tables sharded: this rank's shard, connected;
 * with --rejoin filled first (ss_train_rejoin_shard(), @params and @live
 * passed on).
 */
int ss_train_open_table(struct ss_train_cmd *c, float *params, bool live);

/* ss_train_resume_shard() - --load with --tables sharded, into the shard. */
int ss_train_resume_shard(struct ss_train_cmd *c, float *params);

/*
 * ss_train_registered_bytes() - what one rank of @world registers with
 * the fabric (over shm: its objects in /dev/shm) for model @m trained
 * with @t: the sync layer's regions for @sync (NULL or --sync none:
 * none), and with sharded @tables its shard, logs and staging.
 */
size_t ss_train_registered_bytes(const struct ss_model_config *m,
				 const struct ss_train_options *t, int values,
				 int tables, const struct ss_sync_options *sync,
				 int world);

/*
 * ss_train_check_shm_space() - over shm, whether /dev/shm has room for
 * all of this rank's objects, and holds those of the job's ranks (all on
 * this machine): refused at once, with the totals, where the reservation
 * of each object found out one at a time (a user who grew /dev/shm to
 * the first message's size failed at the next object).
 */
int ss_train_check_shm_space(const struct ss_train_cmd *c);

/*
 * ss_train_check_table_addrs() - with --tables sharded, whether the table
 * endpoints' addresses (each rank's port + the world size) are free of
 * the job's other addresses: checked before connecting, where a clash
 * showed only as a peer that did not answer.
 */
int ss_train_check_table_addrs(const struct ss_train_cmd *c);

/*
 * ss_train_rejoin_shard() - --rejoin with --tables sharded: this rank's
 * rows (and accumulators) from its --save checkpoint when one exists,
 * else from --load's; the MLPs there too only when no sync engine gave
 * a live replica (@live).
 */
int ss_train_rejoin_shard(struct ss_train_cmd *c, float *params, bool live);

/* The tables' part of the summary: JSON fields, or text lines. */
void ss_table_report_json(const struct ss_train_cmd *c,
			  const struct ss_train_result *res);
void ss_table_report_text(const struct ss_train_cmd *c,
			  const struct ss_train_result *res);

/*
 * ss_table_report_stats() - the tables' stats as the summary gives them:
 * lookups as of the end of training, gradients as of now.
 */
void ss_table_report_stats(const struct ss_train_cmd *c,
			   struct ss_table_stats *st);

/*
 * ss_train_metrics_open() - --metrics: the path ({rank} replaced), its
 * folder checked, the first file written (before training).  Returns 0
 * (also without --metrics), SS_EUSAGE when another rank on this host
 * would write the same file, or -errno naming --metrics and the path.
 */
int ss_train_metrics_open(struct ss_train_cmd *c);

/*
 * ss_train_metrics_update() - the file again, from the progress thread,
 * @secs into training; a failure is a warning, said once.
 */
void ss_train_metrics_update(struct ss_progress *p, double secs);

/*
 * ss_train_metrics_end() - the last file: with @rc 0 the summary's
 * figures (@res, and @test when not NULL), else the totals so far and
 * shadowsync_train_failed 1.  After the progress thread has stopped.
 */
void ss_train_metrics_end(struct ss_train_cmd *c, struct ss_sync *sync,
			  struct ss_train_progress *totals,
			  const struct ss_train_result *res,
			  const struct ss_metrics *test, int rc);

/* ss_train_metrics_on_signal() - remove a half-written FILE.tmp. */
void ss_train_metrics_on_signal(void);

/*
 * ss_train_warn_few_rounds() - after training with the shadow thread: a
 * warning when it averaged so rarely that the replicas trained mostly
 * apart (a shadow thread short of CPU), naming what to change.
 */
void ss_train_warn_few_rounds(const struct ss_train_cmd *c,
			      struct ss_sync *sync);

/*
 * ss_train_report() - the summary: text, or one JSON line with --json;
 * held-out figures from @test, none when it is NULL (its evaluation
 * failed).
 */
void ss_train_report(const struct ss_train_cmd *c, struct ss_sync *sync,
		     const struct ss_train_result *res,
		     const struct ss_metrics *test, size_t len);

/*
 * A job's shard checkpoints in memory (shards.c): each shard's MLPs then
 * its rows, and the same of Adagrad's state, for reshard, eval and
 * predict.
 */
struct ss_shard_set {
	int world;
	uint32_t slot[SS_SPARSE]; /* each table's first slot in a shard */
	size_t dense, rows; /* floats of the MLPs, of a shard's rows */
	size_t width; /* floats of a row */
	float **w, **acc; /* per shard: MLPs then rows; the same, state */
	uint64_t examples;
	bool has_acc;
};

/* ss_rank_path() - @pattern with {rank} replaced by @rank, into @buf. */
void ss_rank_path(const char *pattern, int rank, char *buf, size_t size);

/* ss_shards_alloc() - a set of @world shards of @m, none read yet. */
int ss_shards_alloc(struct ss_shard_set *s, const struct ss_model_config *m,
		    int world);
void ss_shards_free(struct ss_shard_set *s);

/*
 * ss_shard_at() - where the row at place @p of table @t's permutation
 * (ss_table_place_of()) is: its shard (the return) and the float it
 * starts at there, *@at.
 */
int ss_shard_at(const struct ss_shard_set *s, int t, uint32_t p, size_t *at);

/* ss_shard_alloc() - shard @k's memory (the state's too), zeroed. */
int ss_shard_alloc(struct ss_shard_set *s, int k);

/*
 * ss_shards_read() - every shard of @from ({rank} for the rank), checked
 * against @model_hash; errors start with @option, and one of another job
 * size says @ours (what the caller took the set for) and @size_hint.
 */
int ss_shards_read(struct ss_shard_set *s, const char *from,
		   uint64_t model_hash, const char *option, const char *ours,
		   const char *size_hint);

/*
 * ss_shards_gather() - the whole model of @m into @params
 * (ss_model_len() floats): the MLPs of shard 0, each row from its owner;
 * Adagrad's state into @acc the same when it is not NULL and the set has
 * it.
 */
void ss_shards_gather(const struct ss_shard_set *s,
		      const struct ss_model_config *m, float *params,
		      float *acc);

/*
 * ss_shard_load_whole() - the one shard of a job of one rank at @path
 * (reshard --new-ranks 1 writes such), which holds every row, into
 * @params and @acc (when not NULL) in the model's order: a whole model.
 */
int ss_shard_load_whole(const char *path, const struct ss_model_config *m,
			float *params, float *acc, uint64_t *examples,
			bool *has_acc);

/*
 * ss_model_load_any() - the model of @path into *@params (ss_model_len()
 * floats, freed by the caller) and its sizes into @m, from the record
 * train keeps in its checkpoints: a whole model, or with {rank} in @path
 * a job's shards gathered (its rank 0's file says how many).  The
 * examples it was trained on into *@trained when not NULL.  Errors start
 * with --load.
 */
int ss_model_load_any(const char *path, struct ss_model_config *m,
		      float **params, uint64_t *trained);

#endif /* SS_TRAIN_CMD_H */
