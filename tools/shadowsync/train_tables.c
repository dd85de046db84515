// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync train --tables sharded: this rank's shard of the embedding
 * tables, on an endpoint of its own next to the sync layer's (port + N).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "train_cmd.h"

void ss_train_table_options(const struct ss_model_config *m,
			    const struct ss_train_options *t, int values,
			    struct ss_table_options *o)
{
	int most = t->batch > 256 ? t->batch : 256;

	ss_table_options_init(o);
	o->tables = SS_SPARSE;
	o->rows = m->hash_size;
	/* m outlives the table (the option is read at the open); tables of
	 * several sizes have all 26 set, as --hash-size and the record set
	 * them */
	o->table_rows = ss_model_uniform(m) ? NULL : m->table_rows;
	o->width = m->emb_dim;
	o->update = t->optimizer == SS_OPT_ADAGRAD ? SS_TABLE_ADAGRAD :
						     SS_TABLE_SGD;
	o->lr = t->lr;
	o->eps = t->adagrad_eps;
	o->clients = t->threads;
	/*
	 * A lookup is a batch's values (evaluation looks up 256 examples at
	 * a time): one a field, or with multi-hot data twice the most the
	 * data's first lines showed, for batches of longer lines.
	 */
	o->max_rows = most * (values > SS_SPARSE ? 2 * values : SS_SPARSE);
	o->depth = SS_TRAIN_LOOKUP_DEPTH(t->prefetch);
}

size_t ss_train_registered_bytes(const struct ss_model_config *m,
				 const struct ss_train_options *t, int values,
				 int tables, const struct ss_sync_options *sync,
				 int world)
{
	bool sharded = tables == SS_TABLES_SHARDED;
	size_t need = 0;

	/* as train: sharded, the replica is the MLPs; local, the whole
	 * model with only the MLPs synchronized */
	if (sync && sync->algo != SS_SYNC_NONE) {
		struct ss_sync_options o = *sync;

		o.synced =
			tables == SS_TABLES_LOCAL ? ss_model_dense_len(m) : 0;
		need = ss_sync_registered_bytes_for(
			sharded ? ss_model_dense_len(m) : ss_model_len(m), &o,
			world);
	}
	if (sharded) { /* this rank's shard, logs and staging */
		struct ss_table_options o;

		ss_train_table_options(m, t, values, &o);
		need += ss_table_registered_bytes(&o, world);
	}
	return need;
}

/* What the rejoin's fill needs: ss_table_open() calls it mid-open. */
struct ss_rejoin_fill {
	struct ss_train_cmd *c;
	float *params;
	bool live;
};

static int ss_rejoin_fill(struct ss_table *table, void *arg)
{
	struct ss_rejoin_fill *f = arg;
	int rc;

	f->c->table = table; /* where ss_train_rejoin_shard() loads */
	rc = ss_train_rejoin_shard(f->c, f->params, f->live);
	f->c->table = NULL; /* the open's to give, or not */
	return rc;
}

/* The table endpoints' addresses, port + world: allocated into *@buf and
 * *@addrs (free both), checked against the job's. */
static int ss_train_table_addrs(const struct ss_fabric_options *fo,
				char (**buf)[SS_TABLE_ADDR_LEN],
				const char ***addrs)
{
	*buf = calloc((size_t)fo->world, sizeof(**buf));
	*addrs = calloc((size_t)fo->world, sizeof(**addrs));
	if (!*buf || !*addrs)
		return ss_error_set(-ENOMEM, NULL, NULL, "table addresses");
	return ss_table_addrs(fo->addrs, fo->world, *buf, *addrs);
}

int ss_train_check_table_addrs(const struct ss_train_cmd *c)
{
	char(*buf)[SS_TABLE_ADDR_LEN] = NULL;
	const char **addrs = NULL;
	int rc = c->tables == SS_TABLES_SHARDED ?
			 ss_train_table_addrs(&c->fabric, &buf, &addrs) :
			 0;

	free(buf);
	free(addrs);
	return rc;
}

int ss_train_open_table(struct ss_train_cmd *c, float *params, bool live)
{
	struct ss_rejoin_fill fill = { c, params, live };
	struct ss_table_options o;
	struct ss_fabric_options fo = c->fabric;
	char(*buf)[SS_TABLE_ADDR_LEN] = NULL;
	const char **addrs = NULL;
	int rc;

	ss_train_table_options(&c->model, &c->train, c->values, &o);
	o.seed = (uint64_t)c->seed;
	/* near the NIC: the shard where the replica is, the applier with
	 * the shadow thread */
	o.topo = c->train.topo;
	o.numa = c->train.plan ? c->train.plan->replica_numa : 0;
	o.proxy_slot = c->train.plan && c->train.plan->n_slots > 0 ?
			       &c->train.plan->slots[0] :
			       NULL;
	/*
	 * A rank that rejoins loads its shard before the running ranks can
	 * reach it: loaded after, it overwrote what they had pushed and
	 * been applied meanwhile, and they read its rows at their first
	 * values (55699 gradients lost in 0.3 s, in a review's run).
	 */
	if (c->rejoin) {
		o.fill = ss_rejoin_fill;
		o.fill_arg = &fill;
	}
	rc = ss_train_table_addrs(&fo, &buf, &addrs);
	if (rc == 0) {
		fo.addrs = addrs;
		rc = ss_train_connect_failed(c,
					     ss_table_open(&c->table, &o, &fo));
	}
	free(buf);
	free(addrs);
	if (rc == 0) {
		struct ss_table_stats st;

		ss_table_stats(c->table, &st);
		ss_log_info("tables: sharded over %d ranks, %zu bytes of rows "
			    "here, %zu registered",
			    fo.world, st.shard_bytes, st.registered_bytes);
	}
	return rc;
}

/* What the trainers waited for rows, as a share of their time. */
static double ss_wait_share(const struct ss_train_cmd *c,
			    const struct ss_table_stats *st,
			    const struct ss_train_result *res)
{
	double busy = res->seconds * c->train.threads;

	return busy > 0 ? (double)st->lookup_wait_ns / 1e9 / busy : 0;
}

/*
 * Lookups and waits as of the end of training (c->trained); gradients as
 * of now, every one applied or dropped.
 */
void ss_table_report_stats(const struct ss_train_cmd *c,
			   struct ss_table_stats *st)
{
	struct ss_table_stats now;

	*st = c->trained;
	ss_table_stats(c->table, &now);
	st->pushed = now.pushed;
	st->applied = now.applied;
	st->dropped = now.dropped;
	st->credit_waits = now.credit_waits;
	st->rows_stale = now.rows_stale;
	st->rows_cached = now.rows_cached;
}

void ss_table_report_json(const struct ss_train_cmd *c,
			  const struct ss_train_result *res)
{
	struct ss_table_stats st;

	ss_table_report_stats(c, &st);
	printf(",\"table_bytes\":%zu,\"table_registered_bytes\":%zu,"
	       "\"lookups_per_s\":%.1f,\"rows_per_lookup\":%.1f,"
	       "\"rows_remote_share\":%.3f,\"rows_fetched_per_lookup\":%.1f,"
	       "\"lookup_wait\":%.4f,"
	       "\"prefetch\":%d,\"rows_stale\":%" PRIu64
	       ",\"rows_cached\":%" PRIu64 ",\"grads_pushed\":%" PRIu64
	       ",\"grads_local\":%" PRIu64 ",\"grads_applied\":%" PRIu64
	       ",\"grads_dropped\":%" PRIu64 ",\"credit_waits\":%" PRIu64,
	       st.shard_bytes, st.registered_bytes,
	       res->seconds > 0 ? (double)st.lookups / res->seconds : 0,
	       st.lookups ? (double)(st.rows_local + st.rows_remote) /
				    (double)st.lookups :
			    0,
	       st.rows_local + st.rows_remote ?
		       (double)st.rows_remote /
			       (double)(st.rows_local + st.rows_remote) :
		       0,
	       st.lookups ? (double)st.rows_fetched / (double)st.lookups : 0,
	       ss_wait_share(c, &st, res), c->train.prefetch, st.rows_stale,
	       st.rows_cached, st.pushed, st.pushed_local, st.applied,
	       st.dropped, st.credit_waits);
}

void ss_table_report_text(const struct ss_train_cmd *c,
			  const struct ss_train_result *res)
{
	struct ss_table_stats st;
	char ahead[16]; /* --prefetch as given */

	snprintf(ahead, sizeof(ahead), "%d", c->train.prefetch);
	ss_table_report_stats(c, &st);
	printf("tables: sharded, %.1f MB of rows (and optimizer state) here; "
	       "%" PRIu64 " lookups (%.0f/s), %.0f%% of rows at peers, "
	       "trainers waited %.1f%% of their time for rows (prefetch %s)\n",
	       (double)st.shard_bytes / 1e6, st.lookups,
	       res->seconds > 0 ? (double)st.lookups / res->seconds : 0,
	       st.rows_local + st.rows_remote ?
		       100.0 * (double)st.rows_remote /
			       (double)(st.rows_local + st.rows_remote) :
		       0,
	       100 * ss_wait_share(c, &st, res),
	       c->train.prefetch == SS_TRAIN_PREFETCH_EXACT ? "exact" : ahead);
	printf("tables: gradients %" PRIu64 " sent, %" PRIu64
	       " applied here from peers, %" PRIu64 " applied locally, %" PRIu64
	       " dropped%s\n",
	       st.pushed, st.applied, st.pushed_local, st.dropped,
	       st.rows_stale ? " (rows of a failed owner served as last "
			       "fetched, or zero)" :
			       "");
}

/*
 * This rank's shard from @path, the MLPs into @mlps; @option names what
 * gave the path, in errors and warnings; *@has_acc: whether it held
 * Adagrad's accumulators.  Returns 0 or an error.
 */
static int ss_load_shard(struct ss_train_cmd *c, const char *path, float *mlps,
			 const char *option, bool *has_acc, unsigned char *rec,
			 size_t *rec_len)
{
	*has_acc = false;
	if (ss_train_load_shard(c, path, mlps, has_acc, rec, rec_len) < 0)
		return ss_error_prefix(option);
	if (c->train.adagrad_acc && !*has_acc)
		ss_log_warn("%s: '%s' holds no Adagrad accumulators (saved "
			    "by an SGD run): they start from zero",
			    option, path);
	return 0;
}

int ss_train_resume_shard(struct ss_train_cmd *c, float *params)
{
	char buf[4096];
	const char *path =
		ss_checkpoint_path(c, c->load, false, buf, sizeof(buf));
	bool has_acc;
	unsigned char *rec = c->resume ? malloc(SS_RESUME_RECORD_MAX) : NULL;
	size_t rec_len = 0;
	int rc = c->resume && !rec ?
			 ss_error_set(-ENOMEM, NULL, NULL, "--resume") :
			 ss_load_shard(c, path, params,
				       c->resume ? "--resume" : "--load",
				       &has_acc, rec, &rec_len);

	if (rc == 0 && c->resume)
		rc = ss_train_resume_take(c, path, rec, rec_len, c->data_size);
	free(rec);
	if (rc == 0)
		ss_log_info("%s shard %d of %d from %s (%" PRIu64
			    " examples seen%s)",
			    c->resume ? "resuming" : "starting from",
			    c->fabric.rank, c->fabric.world, path, c->resumed,
			    has_acc ? ", Adagrad's accumulators" : "");
	return rc;
}

/*
 * How long before the job began (--job-began) the --save checkpoint at
 * @path was last written, in seconds: an earlier job that saved to the
 * same path left it.  0 when it is newer, or without --job-began.
 */
static double ss_saved_before_job(const struct ss_train_cmd *c,
				  const char *path)
{
	struct stat st;
	double saved;

	if (!c->job_began || stat(path, &st) < 0)
		return 0;
	saved = (double)st.st_mtim.tv_sec + st.st_mtim.tv_nsec * 1e-9;
	return saved < c->job_began ? c->job_began - saved : 0;
}

int ss_train_rejoin_shard(struct ss_train_cmd *c, float *params, bool live)
{
	char buf[4096], load_buf[4096];
	const char *save = c->save ? ss_checkpoint_path(c, c->save, true, buf,
							sizeof(buf)) :
				     NULL;
	const char *path = save;
	float *mlps = params;
	double before;
	bool has_acc;
	int rc;

	/* what the failed process saved last, else what the job began from */
	if (path && access(path, F_OK) != 0)
		path = NULL;
	if (path && (before = ss_saved_before_job(c, path)) > 0) {
		/* unless it is what the job began from (--load, the same
		 * path: resumed from it, it is loaded as that below) */
		if (!c->load ||
		    strcmp(path, ss_checkpoint_path(c, c->load, false, load_buf,
						    sizeof(load_buf))))
			ss_log_warn("rejoining: not loading %s: it was "
				    "written %.1f s before this job began "
				    "(--job-began), by an earlier job",
				    path, before);
		path = NULL;
	}
	if (!path) {
		if (!c->load) {
			ss_log_warn("rejoining: no checkpoint of shard %d%s%s "
				    "from this job: its rows start again from "
				    "their first values (--save-every keeps "
				    "one)",
				    c->fabric.rank, save ? " at " : "",
				    save ? save : "");
			return 0;
		}
		path = ss_checkpoint_path(c, c->load, false, load_buf,
					  sizeof(load_buf));
	}
	/* the running ranks' MLPs are newer than the checkpoint's */
	if (live) {
		mlps = malloc(ss_model_dense_len(&c->model) * sizeof(float));
		if (!mlps)
			return ss_error_set(-ENOMEM, NULL, NULL,
					    "--rejoin: the checkpoint's MLPs");
	}
	rc = ss_load_shard(c, path, mlps, "--rejoin", &has_acc, NULL, NULL);
	if (live)
		free(mlps);
	if (rc == 0)
		ss_log_warn("rejoining: shard %d of %d from %s (%" PRIu64
			    " examples seen), the MLPs from %s",
			    c->fabric.rank, c->fabric.world, path, c->resumed,
			    live ? "the running ranks" : "it too");
	return rc;
}
