// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync train: one rank.  Trainer threads train the CTR model on
 * chunks of the data they claim (or this rank's share) while the shadow
 * thread (or, in the foreground mode, the trainers every k steps) keeps
 * the replica in sync with the other ranks; then the held-out metrics and
 * a summary.  This file is the run; its parts are in train_*.c.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train_cmd.h"

const char ss_train_prog[] = "shadowsync train";

int ss_cmd_train(int argc, char **argv)
{
	struct ss_train_cmd c = { 0 };
	struct ss_topo *topo = NULL;
	struct ss_plan *plan = NULL;
	struct ss_plan_request req;
	char nic[64]; /* the RDMA device of our address, for the plan */
	struct ss_fabric *fabric = NULL;
	struct ss_sync *sync = NULL;
	struct ss_train_result res = { 0 };
	struct ss_metrics test = { 0 };
	struct ss_error eval_err;
	int eval_rc = 0;
	struct ss_progress prog = { .lock = PTHREAD_MUTEX_INITIALIZER };
	pthread_condattr_t cond_attr;
	pthread_t prog_thread = 0;
	bool prog_started = false, shadow = false;
	struct stat st;
	struct ss_chunks chunks = { 0 };
	float *params = NULL;
	size_t len = 0;
	int rc = ss_train_parse(argc, argv, &c);

	if (rc == 1)
		return SS_EXIT_OK;
	if (rc == 0)
		rc = ss_blas_check();
	if (rc == 0) {
		char note[256];

		c.blas = ss_blas_setup(note, sizeof(note));
		ss_log_info("blas: %s", note);
	}
	/* The progress thread's deadlines: immune to wall-clock steps. */
	pthread_condattr_init(&cond_attr);
	pthread_condattr_setclock(&cond_attr, CLOCK_MONOTONIC);
	pthread_cond_init(&prog.cond, &cond_attr);
	pthread_condattr_destroy(&cond_attr);
	/* SIGPIPE and SIGHUP too: when launch dies, our output pipes close
	 * before its death signal reaches us, and a log line written then
	 * killed the rank (SIGPIPE's default) with its shm objects left. */
	signal(SIGTERM, ss_train_on_signal);
	signal(SIGINT, ss_train_on_signal);
	signal(SIGPIPE, ss_train_on_signal);
	signal(SIGHUP, ss_train_on_signal);
	signal(SIGALRM, ss_train_on_signal); /* a stop that took too long */
	if (rc == 0)
		rc = ss_train_peers(&c);
	if (rc == 0 && c.rejoin && c.fabric.world == 1)
		rc = ss_error_set(SS_EUSAGE,
				  "a job of one rank has no one to "
				  "rejoin",
				  "drop --rejoin, or give the job's peers "
				  "(--peers or --hostfile)",
				  "--rejoin");
	/* a rank that rejoins goes on with the ranks that run: one dead
	 * for good (its host lost) must not keep it out of the job */
	c.fabric.partial_connect = c.rejoin;
	/* auto decided once, here: the same for both endpoints, the plan's
	 * NIC and the /dev/shm check (a rank alone: the fabric decides) */
	if (rc == 0 && c.fabric.transport == SS_TRANSPORT_AUTO &&
	    c.fabric.world > 1) {
		bool verbs = ss_fabric_verbs_available();

		c.fabric.transport =
			verbs ? SS_TRANSPORT_VERBS : SS_TRANSPORT_SHM;
		ss_log_info("transport auto: %s (%s)",
			    ss_transport_name(c.fabric.transport),
			    verbs ? "an RDMA port is active" :
				    "no active RDMA port");
	}
	if (rc == 0)
		rc = ss_train_resolve_tables(&c);
	if (rc == 0)
		rc = ss_train_check_table_addrs(&c);
	if (rc == 0)
		rc = ss_train_check_paths(&c, &st);
	/* what the record decides (split, epochs, the chunk counter) comes
	 * before the sync engine is made */
	if (rc == 0 && c.resume)
		rc = ss_train_resume_plan(&c, c.data_size);
	if (rc == 0)
		rc = ss_train_check_split(&c);
	if (rc < 0)
		goto out;
	/* sharded: the replica is the MLPs, the tables live in the shards */
	len = c.tables == SS_TABLES_SHARDED ? ss_model_dense_len(&c.model) :
					      ss_model_len(&c.model);

	/* Where the threads go: near --device; over verbs, $SS_DEVICE,
	 * else the NIC of this rank's address (the first one hwloc listed,
	 * before: on a node of two, both ranks near the first).  Not the
	 * variable over shm: set for a whole cluster, it named a device
	 * that a host without it refused. */
	ss_plan_request_init(&req);
	req.trainers = (int)c.threads;
	req.device = c.fabric.device;
	if (!req.device && c.fabric.transport == SS_TRANSPORT_VERBS) {
		const char *env = getenv("SS_DEVICE");

		if (env && *env)
			req.device = env;
		else if (ss_fabric_device_of(c.fabric.addrs[c.fabric.rank], nic,
					     sizeof(nic)) == 0)
			req.device = nic;
	}
	req.oversubscribe = c.oversubscribe;
	/* with no shadow thread, its core trains too */
	req.no_shadow = c.sync.algo == SS_SYNC_NONE || c.foreground;
	rc = ss_topo_open(&topo, NULL);
	if (rc == 0)
		rc = ss_topo_plan(topo, &req, &plan);
	if (rc < 0)
		goto out;
	c.train.threads = plan->trainers;
	ss_log_info("plan: %d trainer%s; %s", plan->trainers,
		    plan->trainers == 1 ? "" : "s", plan->note);
	rc = ss_train_metrics_open(&c); /* its path, before any training */
	if (rc == 0)
		rc = ss_train_csv_open(&c);
	if (rc < 0)
		goto out;

	rc = ss_train_check_shm_space(&c);
	if (rc < 0)
		goto out;
	c.layout_hash = ss_layout_hash(&c.model);
	if (c.sync.algo != SS_SYNC_NONE) {
		/* ranks that disagree on what is synchronized refuse each
		 * other at the handshake, as for another model layout */
		c.sync.synced = c.tables == SS_TABLES_LOCAL ?
					ss_model_dense_len(&c.model) :
					0;
		c.fabric.layout_hash =
			c.layout_hash ^
			(uint64_t)c.sync.synced * 0x9e3779b97f4a7c15ull ^
			(uint64_t)c.tables << 56;
		c.sync.topo = topo;
		c.sync.numa = plan->replica_numa;
		rc = ss_fabric_open(&fabric, &c.fabric);
		if (rc == 0)
			rc = ss_sync_create(&sync, fabric, len, &c.sync);
		if (rc < 0)
			goto out;
		params = ss_sync_params(sync);
	} else {
		rc = ss_topo_alloc(topo, plan->replica_numa,
				   len * sizeof(float), (void **)&params);
		if (rc < 0)
			goto out;
	}
	/* Adagrad's accumulators are kept here, for checkpoints to hold
	 * them; on the replica's node, zeroed, as ss_train would. */
	if (c.train.optimizer == SS_OPT_ADAGRAD) {
		rc = ss_topo_alloc(topo, plan->replica_numa,
				   len * sizeof(float),
				   (void **)&c.train.adagrad_acc);
		if (rc < 0)
			goto out;
	}
	if (c.tables == SS_TABLES_SHARDED)
		ss_model_init_dense(&c.model, params, (uint64_t)c.seed);
	else
		ss_model_init(&c.model, params, (uint64_t)c.seed);
	if (c.load && c.tables != SS_TABLES_SHARDED) {
		char buf[4096];
		const char *path =
			ss_checkpoint_path(&c, c.load, false, buf, sizeof(buf));
		bool has_acc = false;
		struct ss_checkpoint_part p = { params, len },
					  a = { c.train.adagrad_acc, len };
		unsigned char *rec =
			c.resume ? malloc(SS_RESUME_RECORD_MAX) : NULL;
		size_t rec_len = 0;

		rc = c.resume && !rec ?
			     -ENOMEM :
			     ss_checkpoint_load_extra(
				     path, &p, 1, a.ptr ? &a : NULL,
				     a.ptr ? 1 : 0, c.layout_hash, &c.resumed,
				     &has_acc, rec,
				     rec ? SS_RESUME_RECORD_MAX : 0, &rec_len);
		/* a job of one rank's shard is a whole model, rows permuted */
		if (rc == SS_ELAYOUT && !c.resume &&
		    ss_train_shard_of_one(path, c.layout_hash))
			rc = ss_shard_load_whole(path, &c.model, params,
						 c.train.adagrad_acc,
						 &c.resumed, &has_acc);
		rc = ss_train_load_whole_why(rc, path, c.layout_hash);
		if (rc < 0)
			ss_error_prefix(c.resume ? "--resume" : "--load");
		if (rc == 0 && c.resume)
			rc = ss_train_resume_take(&c, path, rec, rec_len,
						  c.data_size);
		free(rec);
		if (rc < 0)
			goto out;
		ss_log_info("%s %s (%" PRIu64 " examples seen%s)",
			    c.resume ? "resuming from" : "starting from", path,
			    c.resumed,
			    has_acc ? ", Adagrad's accumulators" : "");
		if (c.train.adagrad_acc && !has_acc)
			ss_log_warn("--load: '%s' holds no Adagrad "
				    "accumulators (saved by an SGD run, or an "
				    "older version): they start from zero, so "
				    "the first steps are larger",
				    path);
	}
	if (sync) {
		rc = ss_train_connect_failed(&c, ss_fabric_connect(fabric));
		if (rc == 0)
			rc = ss_sync_begin(sync);
		if (rc < 0)
			goto out;
		/* trainers report iterations; in the foreground they sync */
		c.train.sync = sync;
		if (!c.foreground) {
			rc = ss_shadow_start(sync, topo, &plan->slots[0]);
			if (rc < 0)
				goto out;
			shadow = true;
		}
	}
	c.train.topo = topo;
	c.train.plan = plan;
	if (c.tables == SS_TABLES_SHARDED) {
		rc = ss_train_open_table(&c, params, sync != NULL);
		if (rc == 0 && c.load && !c.rejoin)
			rc = ss_train_resume_shard(&c, params);
		/* every shard is in place before anyone reads a row */
		if (rc == 0)
			rc = ss_table_barrier(c.table, 600000);
		if (rc < 0)
			goto out;
		c.train.table = c.table;
		/* the tables took --lr; the trainers' step is the MLPs' */
		if (c.dense_lr > 0)
			c.train.lr = c.dense_lr;
	}
	/*
	 * The data: by chunks claimed as the trainers go, or this rank's
	 * fixed share of the bytes.  Ranks without a sync engine have no
	 * counter in common: each keeps its own share.
	 */
	if (c.split < 0) /* chunks help ranks, not one rank's trainers */
		c.split = c.shuffle || (sync && c.fabric.world > 1) ? 0 : 1;
	if (c.split == 0 && !sync && c.fabric.world > 1) {
		ss_log_warn("--sync none: no counter in common, so each rank "
			    "reads its own 1/%d of the data (--data-split "
			    "static)%s",
			    c.fabric.world,
			    c.shuffle ? ", in order: no chunks to --shuffle" :
					"");
		c.split = 1;
	}
	if (c.split == 0) {
		ss_chunks_plan(&chunks, c.data_size, c.fabric.world,
			       c.chunk_size, c.train.epochs);
		chunks.sync = sync;
		/* one order on every rank: from --seed, as the model */
		if (c.shuffle && !c.shuffle_from)
			c.shuffle_from = ss_train_shuffle_seed(c.seed);
		chunks.shuffle = c.shuffle ? c.shuffle_from : 0;
		/* resumed: the local counter where it was (a sync engine's
		 * is set at rank 0 by claims_from) */
		if (c.resume && !sync)
			chunks.next = c.resume_claimed;
		c.chunks = &chunks;
		c.train.next_range = ss_chunks_next;
		c.train.range_ctx = &chunks;
		ss_log_info("data: %" PRIu64 " chunks of %" PRIu64
			    " bytes, claimed as the ranks go",
			    chunks.total, chunks.chunk);
	}
	c.train.begin = c.data_size * (uint64_t)c.fabric.rank /
			(uint64_t)c.fabric.world;
	c.train.end = c.data_size * (uint64_t)(c.fabric.rank + 1) /
		      (uint64_t)c.fabric.world;
	/* no bytes for us (more ranks than bytes): [0, 0) would be the whole
	 * file, since end 0 means to its end */
	if (c.train.begin == c.train.end)
		c.train.begin = c.train.end = c.data_size;
	c.train.progress = &prog.totals;
	if (!c.foreground)
		c.train.sync_every = 0; /* the shadow thread does it */
	prog.c = &c;
	prog.sync = sync;
	prog.params = params;
	prog.start_ns = ss_now_ns();
	if (c.eval_epochs) {
		c.train.every_examples = (uint64_t)c.eval_every;
		c.train.every = c.eval_every ? ss_train_eval_hook : NULL;
		c.train.epoch_end = ss_train_epoch_hook;
		c.train.every_ctx = &prog;
	}
	if (c.progress > 0 || c.save_every > 0) {
		int err = pthread_create(&prog_thread, NULL, ss_progress_main,
					 &prog);

		prog_started = err == 0;
		if (err) /* training goes on; the final save still comes */
			ss_log_warn("no progress thread (%s): no progress "
				    "lines and no --save-every checkpoints",
				    strerror(err));
	}
	/* SIGTERM and Ctrl-C now stop the trainers, for a save where they
	 * are (without --save: the rank ends at once, as before) */
	rc = ss_train_control_create(&c.control);
	if (rc < 0)
		goto out;
	c.train.control = c.control;
	if (c.save)
		ss_train_stop_on_signals(c.control);
	c.bytes_total = ss_train_bytes_total(&c);
	/* the schedule's course: the rank's share of the whole run's bytes,
	 * of which a resumed run has trained what it no longer has left */
	c.train.schedule_bytes =
		c.split == 0 ? c.data_size * (uint64_t)c.train.epochs /
				       (uint64_t)c.fabric.world :
			       (c.train.end - c.train.begin) *
				       (uint64_t)c.train.epochs;
	c.train.done_bytes = c.train.schedule_bytes > c.bytes_total ?
				     c.train.schedule_bytes - c.bytes_total :
				     0;
	c.train.done_examples = c.resumed;
	ss_log_info("training%s", c.save ? ": SIGTERM or Ctrl-C stops it at "
					   "its next batch and saves there" :
					   "");
	rc = ss_train(&c.model, params, &c.train, &res);
	if (c.table) /* the lookups of training, not of evaluation */
		ss_table_stats(c.table, &c.trained);
	if (shadow) {
		int src = ss_shadow_stop(sync);

		if (rc == 0)
			rc = src;
		if (rc == 0)
			ss_train_warn_few_rounds(&c, sync);
	}
	if (rc == 0 && res.examples == 0)
		rc = ss_train_nothing_trained(&c, &res);
	if (rc < 0)
		goto out;
	/*
	 * The ranks done by now end together (S-MA and S-BMUF on one exact
	 * average); one with far more data left is not waited for: it goes
	 * on alone, and ends the same way.
	 */
	if (sync) {
		rc = ss_sync_finish(sync, NULL);
		if (rc < 0)
			goto out;
	}
	/*
	 * Only now: a periodic save still writing when the trainers finish
	 * must not hold this rank back from the others' final barrier.
	 */
	ss_progress_stop(&prog, prog_thread, &prog_started);
	ss_train_csv_row(&prog, res.seconds, NULL); /* the last figures */
	/* every row pushed is in before anyone saves or evaluates */
	if (c.table &&
	    ss_table_flush(c.table, 4 * c.sync.round_timeout_ms + 5000) < 0)
		ss_log_warn("tables: %s", ss_last_error()->why);
	if (c.table)
		rc = ss_table_barrier(c.table, 600000);
	if (rc == 0 && c.save)
		rc = ss_train_save(&c, params, res.examples);
	/* saved: a signal from here ends the rank at once again */
	ss_train_stop_on_signals(NULL);
	if (rc == 0 && ss_train_stop_signal())
		ss_log_warn("stopped by %s after %" PRIu64 " examples%s%s",
			    strsignal(ss_train_stop_signal()),
			    c.resumed + res.examples,
			    c.save && !c.stdin_data ? "; to go on: --resume " :
						      "",
			    c.save && !c.stdin_data ? c.save : "");
	if (rc == 0 && c.test && !ss_train_stop_signal()) {
		eval_rc =
			ss_evaluate(&c.model, params, c.table, c.test,
				    c.train.bad_lines, &test, &c.test_skipped);
		if (eval_rc < 0)
			eval_err = *ss_last_error();
	}
	/* and our shard outlives the others' evaluation, ours failed or not */
	if (rc == 0 && c.table)
		rc = ss_table_barrier(c.table, 600000);
	if (rc < 0)
		goto out;

	/* the training's summary stands when its evaluation failed */
	ss_train_report(&c, sync, &res, eval_rc < 0 ? NULL : &test, len);
	if (eval_rc < 0)
		rc = ss_error_set(eval_rc,
				  eval_err.why[0] ? eval_err.why : NULL,
				  eval_err.hint[0] ? eval_err.hint : NULL, "%s",
				  eval_err.what);
out:
	ss_progress_stop(&prog, prog_thread, &prog_started);
	pthread_cond_destroy(&prog.cond);
	if (rc < 0)
		ss_error_print(stderr, ss_train_prog, rc);
	ss_train_metrics_end(&c, sync, &prog.totals, &res,
			     c.test && rc == 0 ? &test : NULL, rc);
	ss_table_close(&c.table);
	ss_sync_destroy(&sync);
	ss_fabric_close(&fabric);
	/* with a sync engine the replica is its memory */
	if (c.sync.algo == SS_SYNC_NONE && params)
		ss_topo_free(params, len * sizeof(float));
	if (c.train.adagrad_acc)
		ss_topo_free(c.train.adagrad_acc, len * sizeof(float));
	ss_plan_free(&plan);
	ss_topo_close(&topo);
	free(c.peers);
	ss_job_free(&c.job);
	ss_train_stop_on_signals(NULL);
	ss_train_csv_close(&c);
	ss_train_control_free(&c.control);
	free(c.resume_ranges);
	for (int i = 0; i < c.n_data; i++)
		free(c.data_files[i]);
	free(c.data_files);
	/* stopped by a signal: die of it, as a rank killed by it would
	 * (launch and shells read the status), its checkpoint saved */
	if (ss_train_stop_signal()) {
		fflush(stdout);
		signal(ss_train_stop_signal(), SIG_DFL);
		raise(ss_train_stop_signal());
	}
	return rc == SS_EUSAGE ? SS_EXIT_USAGE :
	       rc < 0	       ? SS_EXIT_FAILURE :
				 SS_EXIT_OK;
}
