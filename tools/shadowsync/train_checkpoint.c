// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync train: checkpoints, and the signals that must not leave a
 * half-written one.
 */
#include <signal.h>
#include <unistd.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "train_cmd.h"

/* FNV-1a over the model's sizes: peers with another model are refused. */
uint64_t ss_layout_hash(const struct ss_model_config *m)
{
	uint64_t h = 0xcbf29ce484222325ull;
	int v[8 + 2 * (SS_MAX_LAYERS + 1) + SS_SPARSE], n = 0;

	v[n++] = m->emb_dim;
	v[n++] = (int)m->hash_size;
	/* tables of several sizes: each one's (uniform ones hash as ever) */
	for (int j = 0; !ss_model_uniform(m) && j < SS_SPARSE; j++)
		v[n++] = (int)ss_model_table_rows(m, j);
	for (int i = 0; i < m->n_bottom; i++)
		v[n++] = m->bottom[i];
	v[n++] = -1;
	for (int i = 0; i < m->n_top; i++)
		v[n++] = m->top[i];
	/* DLRM's dot model hashes as it always did */
	if (m->interaction != SS_INTERACTION_DOT) {
		v[n++] = (int)m->interaction;
		v[n++] = m->cross_layers;
		v[n++] = m->cross_rank;
	}
	if (m->pooling != SS_POOLING_SUM)
		v[n++] = -2 - (int)m->pooling;
	for (int i = 0; i < n; i++)
		h = (h ^ (uint64_t)(uint32_t)v[i]) * 0x100000001b3ull;
	return h;
}

/* PATH with {rank} replaced by this rank; NULL when this rank does not
 * save (only rank 0 does, unless the path names the rank). */
const char *ss_checkpoint_path(const struct ss_train_cmd *c, const char *path,
			       bool saving, char *buf, size_t size)
{
	const char *at = strstr(path, "{rank}");

	if (!at)
		return saving && c->fabric.rank != 0 ? NULL : path;
	snprintf(buf, size, "%.*s%d%s", (int)(at - path), path, c->fabric.rank,
		 at + 6);
	return buf;
}

/*
 * SIGTERM (launch stopping the ranks), Ctrl-C, a hangup or output that
 * has gone (launch killed: SIGPIPE): remove the names of our
 * shared memory (over shm), during a save the half-written PATH.tmp, and
 * a --metrics FILE.tmp being written, then die of the signal as before.
 * unlink() is async-signal-safe; the path is set before the save and
 * cleared after.
 *
 * While trainers run with --save, the first SIGTERM or SIGINT stops them
 * instead (ss_train_stop is async-signal-safe, and so is alarm): the run
 * saves where they stopped and then dies of that signal, within
 * SS_TRAIN_STOP_S (SIGALRM ends it as above).  A SIGTERM after it is
 * launch passing on the Ctrl-C its ranks had from the terminal, and is
 * let be; a second SIGINT is the user's, and ends the rank at once.
 */
static char ss_saving_tmp[4096 + sizeof(SS_CHECKPOINT_TMP_SUFFIX)];
static volatile sig_atomic_t ss_saving;
static struct ss_train_control *volatile ss_stop_ctl;
static volatile sig_atomic_t ss_stop_sig;

void ss_train_stop_on_signals(struct ss_train_control *ctl)
{
	ss_stop_ctl = ctl;
}

int ss_train_stop_signal(void)
{
	return ss_stop_sig;
}

void ss_train_on_signal(int sig)
{
	struct ss_train_control *ctl = ss_stop_ctl;

	if ((sig == SIGTERM || sig == SIGINT) && ctl && !ss_stop_sig) {
		ss_stop_sig = sig;
		ss_train_stop(ctl);
		alarm(SS_TRAIN_STOP_S);
		return;
	}
	if (sig == SIGTERM && ss_stop_sig)
		return;
	ss_fabric_remove_names();
	if (ss_saving)
		unlink(ss_saving_tmp);
	ss_train_metrics_on_signal();
	signal(sig, SIG_DFL);
	raise(sig);
}

uint64_t ss_shard_layout_hash(uint64_t model_hash, int world, int rank)
{
	uint64_t h = model_hash ^ 0x5a4d5a4d5a4d5a4dull;

	h = (h ^ (uint64_t)(uint32_t)world) * 0x100000001b3ull;
	h = (h ^ (uint64_t)(uint32_t)rank) * 0x100000001b3ull;
	return h;
}

/* The parts of a shard's file: the MLPs, then the rows; the same for the
 * accumulators.  Returns how many parts each has (2), 0 for SGD's state. */
static int ss_shard_parts(const struct ss_train_cmd *c, float *params,
			  struct ss_checkpoint_part *p,
			  struct ss_checkpoint_part *st)
{
	float *rows, *acc;
	size_t n = ss_table_shard(c->table, &rows, &acc),
	       dense = ss_model_dense_len(&c->model);

	p[0] = (struct ss_checkpoint_part){ params, dense };
	p[1] = (struct ss_checkpoint_part){ rows, n };
	st[0] = (struct ss_checkpoint_part){ c->train.adagrad_acc, dense };
	st[1] = (struct ss_checkpoint_part){ acc, n };
	return acc && c->train.adagrad_acc ? 2 : 0;
}

/* --tables sharded: the MLPs and this rank's rows, under its own name. */
static int ss_train_save_shard(const struct ss_train_cmd *c, const char *path,
			       const float *params, uint64_t examples,
			       const unsigned char *rec, size_t rec_len)
{
	struct ss_checkpoint_part p[2], st[2];
	int ns = ss_shard_parts(c, (float *)params, p, st);

	return ss_checkpoint_save_extra(path, p, 2, ns ? st : NULL, ns,
					ss_shard_layout_hash(c->layout_hash,
							     c->fabric.world,
							     c->fabric.rank),
					examples, rec, rec_len);
}

int ss_train_load_shard(struct ss_train_cmd *c, const char *path, float *params,
			bool *has_acc, unsigned char *rec, size_t *rec_len)
{
	struct ss_checkpoint_part p[2], st[2];
	int ns = ss_shard_parts(c, params, p, st), rc;

	char ours[64];

	rc = ss_checkpoint_load_extra(path, p, 2, ns ? st : NULL, ns,
				      ss_shard_layout_hash(c->layout_hash,
							   c->fabric.world,
							   c->fabric.rank),
				      &c->resumed, has_acc, rec,
				      rec ? SS_RESUME_RECORD_MAX : 0, rec_len);
	snprintf(ours, sizeof(ours), "this job has %d rank%s", c->fabric.world,
		 c->fabric.world == 1 ? "" : "s");
	return ss_shard_layout_why(
		rc, path, c->layout_hash, c->fabric.world, c->fabric.rank, ours,
		"re-divide the shards first: shadowsync reshard --from PATH "
		"--to NEW --new-ranks M",
		"load it with --tables replicated, or save shards with "
		"--tables sharded",
		NULL);
}

/*
 * Whether @hash is the layout of a shard of @model_hash: which rank @r of
 * a job of @w, among the sizes up to 1024 (w^2 / 2 hashes: half a million
 * there, two billion at the largest world; past it none is named).
 */
static bool ss_shard_of(uint64_t model_hash, uint64_t hash, int *w, int *r)
{
	for (*w = 1; *w <= 1024; (*w)++)
		for (*r = 0; *r < *w; (*r)++)
			if (ss_shard_layout_hash(model_hash, *w, *r) == hash)
				return true;
	return false;
}

bool ss_train_shard_of_one(const char *path, uint64_t model_hash)
{
	uint64_t hash, n, examples;

	return ss_checkpoint_peek(path, &hash, &n, &examples) == 0 &&
	       hash == ss_shard_layout_hash(model_hash, 1, 0);
}

int ss_train_load_whole_why(int rc, const char *path, uint64_t model_hash)
{
	uint64_t hash, n, examples;
	char hint[256];
	int w, r;

	if (rc != SS_ELAYOUT ||
	    ss_checkpoint_peek(path, &hash, &n, &examples) < 0 ||
	    !ss_shard_of(model_hash, hash, &w, &r))
		return rc;
	/* reshard re-divides shards; it does not make a whole model */
	snprintf(hint, sizeof(hint),
		 "load shards with --tables sharded and --load 'PATH.{rank}', "
		 "in a job of %d rank%s (for another size, re-divide them: "
		 "shadowsync reshard --new-ranks N)",
		 w, w == 1 ? "" : "s");
	return ss_error_set(
		SS_ELAYOUT, "it is a shard of this model, not the whole model",
		hint, "checkpoint '%s' (rank %d of %d)", path, r, w);
}

int ss_shard_layout_why(int rc, const char *path, uint64_t model_hash,
			int world, int rank, const char *ours,
			const char *size_hint, const char *whole_hint,
			bool *told)
{
	uint64_t hash, n, examples;
	int w, r;

	if (told)
		*told = true; /* unless we get to the end */

	if (rc != SS_ELAYOUT ||
	    ss_checkpoint_peek(path, &hash, &n, &examples) < 0)
		return rc;
	/* files swapped or renamed: "another job size" misled */
	if (ss_shard_of(model_hash, hash, &w, &r) && w == world && r != rank)
		return ss_error_set(
			SS_ELAYOUT, "it is another rank's shard",
			"each rank loads the shard it saved: 'PATH.{rank}' "
			"names them by rank",
			"checkpoint '%s' (rank %d of %d, read as rank %d's)",
			path, r, w, rank);
	if (ss_shard_of(model_hash, hash, &w, &r))
		return ss_error_set(
			SS_ELAYOUT, "it is the shard of another job size",
			size_hint, "checkpoint '%s' (rank %d of %d; %s)", path,
			r, w, ours);
	if (hash == model_hash)
		return ss_error_set(SS_ELAYOUT,
				    "it holds the whole model, not a shard",
				    whole_hint, "checkpoint '%s'", path);
	if (told)
		*told = false;
	return rc;
}

/* Saves this rank's replica (and Adagrad's accumulators, when it has
 * them), if it is the one that saves; with sharded tables, its shard. */
int ss_train_save(struct ss_train_cmd *c, const float *params,
		  uint64_t examples)
{
	char buf[4096];
	const char *path =
		ss_checkpoint_path(c, c->save, true, buf, sizeof(buf));
	unsigned char *rec;
	size_t rec_len;
	struct timespec now;
	int rc;

	if (!path)
		return 0;
	/* where the trainers are, before the floats are copied: what they
	 * train meanwhile is in the model, and trained again on a resume */
	rec = malloc(SS_RESUME_RECORD_MAX);
	if (!rec)
		return ss_error_set(-ENOMEM, NULL, NULL, "--save '%s'", path);
	rec_len = ss_train_record(c, c->data_size, rec);
	/* through a link, the save writes at its target */
	if (ss_checkpoint_tmp_path(path, ss_saving_tmp, sizeof(ss_saving_tmp)) <
	    0)
		ss_saving_tmp[0] = '\0';
	ss_saving = ss_saving_tmp[0] != '\0';
	if (c->table) {
		rc = ss_train_save_shard(c, path, params, c->resumed + examples,
					 rec, rec_len);
	} else {
		struct ss_checkpoint_part p = { (float *)params,
						ss_model_len(&c->model) },
					  a = { c->train.adagrad_acc, p.n };

		rc = ss_checkpoint_save_extra(
			path, &p, 1, a.ptr ? &a : NULL, a.ptr ? 1 : 0,
			c->layout_hash, c->resumed + examples, rec, rec_len);
	}
	ss_saving = 0;
	free(rec);
	if (rc < 0)
		return ss_error_prefix("--save");
	clock_gettime(CLOCK_REALTIME, &now);
	__atomic_store_n(&c->saves, c->saves + 1, __ATOMIC_RELAXED);
	c->last_save = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
	ss_log_info("checkpoint: %s (%" PRIu64 " examples%s)", path,
		    c->resumed + examples,
		    rec_len ? ", and where the data goes on" : "");
	return 0;
}
