// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync train: the record its checkpoints keep after the floats,
 * what the model is and where the run was in its data, for eval and
 * predict (the model) and --resume (the place), which goes on from there.
 *
 * The record (little-endian; docs/architecture.md, "Resuming"):
 *
 *    0  magic "SSTRAIN\0"        8 bytes
 *    8  version (1, 2 or 3)      u32  2: tables of several sizes;
 *                                     3: a model other than DLRM's dot
 *   12  split                    u32  0 chunks claimed, 1 a fixed share
 *   16  data size                u64  --data's bytes when it was saved
 *   24  epochs                   u32
 *   28  world                    u32  the job's ranks
 *   32  rank                     u32  whose record it is
 *   36  ranges                   u32  how many follow the header
 *   40  chunk                    u64  chunk bytes (chunks claimed)
 *   48  claimed                  u64  chunks handed out: rank 0's
 *                                     counter, or this rank's own
 *   56  tables                   u32  0 replicated, 1 sharded, 2 local
 *   60  emb-dim                  u32
 *   64  hash-size                u32  rows per table
 *   68  bottom, top layers       u32 each: how many of the 9 below
 *   76  bottom sizes             9 x u32
 *  112  top sizes                9 x u32
 *  148  flags                    u32  1: the model alone, no place in
 *                                     the data (reshard writes it)
 *  152  shuffle                  u64  what the chunks' order is drawn
 *                                     from (--shuffle), 0: none
 *  160  ranges: begin, end, passes, u64 each
 *
 * Version 2, written when the tables differ in size, has each table's
 * rows (26 x u32) at 160 and the ranges after them, at 264.  Version 3,
 * written for a model other than DLRM's (--interaction dcn, --pooling
 * mean), has them too, then at 264 the interaction (0 dot, 1 dcn), the
 * cross layers, their rank and the pooling (0 sum, 1 mean), u32 each,
 * and the ranges at 280.
 *
 * With a fixed share, the ranges are all a rank has left; with chunks,
 * the chunks it had open, and the counter hands out the rest from
 * @claimed (rank 0's, where every rank had stopped claiming when it was
 * saved at a stop; a periodic save's may be behind the others' claims,
 * and a chunk claimed between is then trained twice).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "train_cmd.h"

#define SS_RECORD_MAGIC "SSTRAIN\0"
#define SS_RESUME_HEAD 160
#define SS_RESUME_HEAD_2 (SS_RESUME_HEAD + 4 * SS_SPARSE)
#define SS_RESUME_HEAD_3 (SS_RESUME_HEAD_2 + 16)
#define SS_RECORD_LAYERS (SS_MAX_LAYERS + 1)
#define SS_RESUME_RANGE 24
#define SS_RECORD_MODEL_ONLY 1u /* flags: no place in the data */
_Static_assert(SS_RESUME_HEAD_3 <= SS_RECORD_SHARD_MAX,
	       "a shard's record is a head");

static void ss_put(unsigned char *p, uint64_t v, int bytes)
{
	for (int i = 0; i < bytes; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint64_t ss_get(const unsigned char *p, int bytes)
{
	uint64_t v = 0;

	for (int i = bytes - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

struct ss_record {
	int split, epochs, world, rank, n, tables;
	uint32_t flags;
	uint64_t data_size, chunk, claimed, shuffle;
	struct ss_model_config model;
	const unsigned char *ranges; /* n of them, as stored */
};

/* Chunks handed out: rank 0's counter (as far as this rank knows), or
 * the local one. */
static uint64_t ss_chunks_claimed(struct ss_chunks *k)
{
	return k->sync ? ss_sync_claimed(k->sync) :
			 __atomic_load_n(&k->next, __ATOMIC_RELAXED);
}

/*
 * The record's head with what says the model (rank @rank of @world, its
 * tables kept as @tables), zero elsewhere; returns the head's length.
 */
static size_t ss_record_put_model(unsigned char *buf,
				  const struct ss_model_config *m, int tables,
				  int world, int rank)
{
	bool dlrm = m->interaction == SS_INTERACTION_DOT &&
		    m->pooling == SS_POOLING_SUM;
	int version = !dlrm ? 3 : ss_model_uniform(m) ? 1 : 2;

	memset(buf, 0, SS_RESUME_HEAD_3);
	memcpy(buf, SS_RECORD_MAGIC, 8);
	ss_put(buf + 8, (uint64_t)version, 4);
	ss_put(buf + 28, (uint64_t)world, 4);
	ss_put(buf + 32, (uint64_t)rank, 4);
	ss_put(buf + 56, (uint64_t)tables, 4);
	ss_put(buf + 60, (uint64_t)m->emb_dim, 4);
	ss_put(buf + 64, m->hash_size, 4);
	ss_put(buf + 68, (uint64_t)m->n_bottom, 4);
	ss_put(buf + 72, (uint64_t)m->n_top, 4);
	for (int i = 0; i < SS_RECORD_LAYERS; i++) {
		ss_put(buf + 76 + 4 * i,
		       (uint64_t)(i < m->n_bottom ? m->bottom[i] : 0), 4);
		ss_put(buf + 112 + 4 * i,
		       (uint64_t)(i < m->n_top ? m->top[i] : 0), 4);
	}
	for (int j = 0; version >= 2 && j < SS_SPARSE; j++)
		ss_put(buf + SS_RESUME_HEAD + 4 * j, ss_model_table_rows(m, j),
		       4);
	if (version < 3)
		return version == 1 ? SS_RESUME_HEAD : SS_RESUME_HEAD_2;
	ss_put(buf + SS_RESUME_HEAD_2, (uint64_t)m->interaction, 4);
	ss_put(buf + SS_RESUME_HEAD_2 + 4, (uint64_t)m->cross_layers, 4);
	ss_put(buf + SS_RESUME_HEAD_2 + 8, (uint64_t)m->cross_rank, 4);
	ss_put(buf + SS_RESUME_HEAD_2 + 12, (uint64_t)m->pooling, 4);
	return SS_RESUME_HEAD_3;
}

size_t ss_train_record_shard(const struct ss_model_config *m, int world,
			     int rank, unsigned char *buf)
{
	size_t head =
		ss_record_put_model(buf, m, SS_TABLES_SHARDED, world, rank);

	ss_put(buf + 12, 1, 4); /* a fixed share, of no data */
	ss_put(buf + 148, SS_RECORD_MODEL_ONLY, 4);
	return head;
}

size_t ss_train_record(const struct ss_train_cmd *c, uint64_t data_size,
		       unsigned char *buf)
{
	int max = (SS_RESUME_RECORD_MAX - SS_RESUME_HEAD_3) / SS_RESUME_RANGE,
	    n;
	size_t head;
	struct ss_train_range *left;
	uint64_t claimed = 0;

	if (!c->control || !(left = malloc((size_t)max * sizeof(*left))))
		return 0;
	n = ss_train_left(c->control, left, max);
	if (n > max) { /* never: two a trainer, and the resumed ones */
		free(left);
		return 0;
	}
	if (c->chunks)
		claimed = ss_chunks_claimed(c->chunks);
	head = ss_record_put_model(buf, &c->model, c->tables, c->fabric.world,
				   c->fabric.rank);
	ss_put(buf + 12, c->chunks ? 0 : 1, 4);
	ss_put(buf + 16, data_size, 8);
	ss_put(buf + 24, (uint64_t)c->train.epochs, 4);
	ss_put(buf + 36, (uint64_t)n, 4);
	ss_put(buf + 40, c->chunks ? c->chunks->chunk : 0, 8);
	ss_put(buf + 48, claimed, 8);
	ss_put(buf + 152, c->chunks ? c->chunks->shuffle : 0, 8);
	for (int i = 0; i < n; i++) {
		unsigned char *r = buf + head + (size_t)i * SS_RESUME_RANGE;

		ss_put(r, left[i].begin, 8);
		ss_put(r + 8, left[i].end, 8);
		ss_put(r + 16, left[i].passes, 8);
	}
	free(left);
	return head + (size_t)n * SS_RESUME_RANGE;
}

/* @rec (@len bytes) read into @r, or why not, naming @path. */
static int ss_record_read(const unsigned char *rec, size_t len,
			  const char *path, struct ss_record *r)
{
	if (len == 0)
		return ss_error_set(
			SS_EUSAGE,
			"it holds no place in the data (a checkpoint of an "
			"older version, or written by a program of its own)",
			"start from its model with --load instead",
			"--resume: checkpoint '%s'", path);
	uint64_t version = len < SS_RESUME_HEAD ? 0 : ss_get(rec + 8, 4);
	size_t head = version == 1 ? SS_RESUME_HEAD :
		      version == 2 ? SS_RESUME_HEAD_2 :
				     SS_RESUME_HEAD_3;

	if (len < head || memcmp(rec, SS_RECORD_MAGIC, 8) || version < 1 ||
	    version > 3)
		return ss_error_set(SS_EPARSE,
				    "its record (the model, the place in the "
				    "data) is in a form this version does not "
				    "know",
				    "use the version that saved it",
				    "checkpoint '%s'", path);
	r->split = (int)ss_get(rec + 12, 4);
	r->data_size = ss_get(rec + 16, 8);
	r->epochs = (int)ss_get(rec + 24, 4);
	r->world = (int)ss_get(rec + 28, 4);
	r->rank = (int)ss_get(rec + 32, 4);
	r->n = (int)ss_get(rec + 36, 4);
	r->chunk = ss_get(rec + 40, 8);
	r->claimed = ss_get(rec + 48, 8);
	r->tables = (int)ss_get(rec + 56, 4);
	ss_model_config_init(&r->model);
	r->model.emb_dim = (int)ss_get(rec + 60, 4);
	r->model.hash_size = (uint32_t)ss_get(rec + 64, 4);
	r->model.n_bottom = (int)ss_get(rec + 68, 4);
	r->model.n_top = (int)ss_get(rec + 72, 4);
	for (int i = 0; i < SS_RECORD_LAYERS; i++) {
		r->model.bottom[i] = (int)ss_get(rec + 76 + 4 * i, 4);
		r->model.top[i] = (int)ss_get(rec + 112 + 4 * i, 4);
	}
	r->flags = (uint32_t)ss_get(rec + 148, 4);
	r->shuffle = ss_get(rec + 152, 8);
	for (int j = 0; version >= 2 && j < SS_SPARSE; j++)
		r->model.table_rows[j] =
			(uint32_t)ss_get(rec + SS_RESUME_HEAD + 4 * j, 4);
	if (version == 3) {
		const unsigned char *x = rec + SS_RESUME_HEAD_2;

		r->model.interaction = (enum ss_interaction)ss_get(x, 4);
		r->model.cross_layers = (int)ss_get(x + 4, 4);
		r->model.cross_rank = (int)ss_get(x + 8, 4);
		r->model.pooling = (enum ss_pooling)ss_get(x + 12, 4);
	}
	r->ranges = rec + head;
	if (r->split > 1 || r->n < 0 || r->tables < 0 ||
	    r->tables > SS_TABLES_LOCAL ||
	    len != head + (size_t)r->n * SS_RESUME_RANGE ||
	    r->model.n_bottom > SS_RECORD_LAYERS ||
	    r->model.n_top > SS_RECORD_LAYERS || ss_model_check(&r->model) < 0)
		return ss_error_set(SS_EPARSE,
				    "its record (the model, the place in the "
				    "data) is corrupted",
				    "use an older checkpoint",
				    "checkpoint '%s'", path);
	return 0;
}

int ss_train_record_model(const char *path, struct ss_model_config *model,
			  int *tables, int *world)
{
	unsigned char *rec = malloc(SS_RESUME_RECORD_MAX);
	struct ss_record r;
	size_t len = 0;
	int rc;

	if (!rec)
		return ss_error_set(-ENOMEM, NULL, NULL, "checkpoint '%s'",
				    path);
	rc = ss_checkpoint_peek_extra(path, rec, SS_RESUME_RECORD_MAX, &len);
	if (rc == 0 && len == 0)
		rc = ss_error_set(
			SS_EUSAGE,
			"it does not say what model it holds (saved by an older "
			"version, or by a program of its own)",
			"save it again with this version: train --load CKPT --save NEW, with the model's options",
			"checkpoint '%s'", path);
	if (rc == 0 && len <= SS_RESUME_RECORD_MAX)
		rc = ss_record_read(rec, len, path, &r);
	else if (rc == 0)
		rc = ss_error_set(SS_EPARSE, "its record is too large", NULL,
				  "checkpoint '%s'", path);
	free(rec);
	if (rc < 0)
		return rc;
	*model = r.model;
	*tables = r.tables;
	*world = r.world;
	return 0;
}

/* Whether this run can go on from @r: the same data, job and plan. */
static int ss_record_fits(const struct ss_train_cmd *c,
			  const struct ss_record *r, const char *path,
			  uint64_t data_size)
{
	static const char *const split[] = { "dynamic", "static" };

	if (r->flags & SS_RECORD_MODEL_ONLY)
		return ss_error_set(SS_EUSAGE,
				    "it holds the model alone, no place in the "
				    "data (reshard wrote it)",
				    "start from its model with --load instead",
				    "--resume: checkpoint '%s'", path);
	if (r->data_size != data_size)
		return ss_error_set(
			SS_EUSAGE, "--data is not the data it was saved from",
			"give the --data it trained on, or --load its model "
			"to train on this data from its start",
			"--resume: checkpoint '%s' (%" PRIu64 " bytes of data "
			"then, '%s' has %" PRIu64 ")",
			path, r->data_size, c->train.data, data_size);
	if (r->world != c->fabric.world || r->rank != c->fabric.rank)
		return ss_error_set(
			SS_EUSAGE,
			"it is another rank's, or another job size's",
			"resume with as many ranks as saved it, each from its "
			"own: --resume 'PATH.{rank}'",
			"--resume: checkpoint '%s' (rank %d of %d; this is rank "
			"%d of %d)",
			path, r->rank, r->world, c->fabric.rank,
			c->fabric.world);
	if (c->split_given && c->split != r->split)
		return ss_error_set(SS_EUSAGE,
				    "it was saved by the other split",
				    "drop --data-split: a resumed run takes "
				    "the one it was saved with",
				    "--resume: checkpoint '%s' (--data-split "
				    "%s)",
				    path, split[r->split]);
	if (c->shuffle && !r->shuffle)
		return ss_error_set(SS_EUSAGE, "it was saved without --shuffle",
				    "drop --shuffle: a resumed run reads the "
				    "chunks in the order it was saved with",
				    "--resume: checkpoint '%s'", path);
	if (c->epochs_given && c->train.epochs != r->epochs)
		return ss_error_set(SS_EUSAGE, "it was saved with other epochs",
				    "drop --epochs: a resumed run finishes "
				    "the epochs it was saved with",
				    "--resume: checkpoint '%s' (--epochs %d)",
				    path, r->epochs);
	if (c->chunk_given && r->split == 0 &&
	    (uint64_t)c->chunk_size != r->chunk)
		return ss_error_set(SS_EUSAGE,
				    "it was saved with another chunk size",
				    "drop --chunk-size: a resumed run takes "
				    "the one it was saved with",
				    "--resume: checkpoint '%s' (--chunk-size "
				    "%" PRIu64 ")",
				    path, r->chunk);
	return 0;
}

/* --resume's path for this rank, {rank} replaced, into @buf. */
static const char *ss_resume_path(const struct ss_train_cmd *c, char *buf,
				  size_t size)
{
	return ss_checkpoint_path(c, c->load, false, buf, size);
}

int ss_train_resume_plan(struct ss_train_cmd *c, uint64_t data_size)
{
	unsigned char *rec = malloc(SS_RESUME_RECORD_MAX);
	char buf[4096];
	const char *path = ss_resume_path(c, buf, sizeof(buf));
	struct ss_record r;
	size_t len = 0;
	int rc;

	if (!rec)
		return ss_error_set(-ENOMEM, NULL, NULL, "--resume");
	if (c->fabric.world > 1 && !strstr(c->load, "{rank}")) {
		free(rec);
		return ss_error_set(SS_EUSAGE,
				    "each rank goes on from its own place in "
				    "the data",
				    "give a path with {rank}, as --save "
				    "'PATH.{rank}' wrote them",
				    "--resume '%s' with %d ranks", c->load,
				    c->fabric.world);
	}
	rc = ss_checkpoint_peek_extra(path, rec, SS_RESUME_RECORD_MAX, &len);
	if (rc == 0 && len > SS_RESUME_RECORD_MAX)
		rc = ss_error_set(SS_EPARSE, "its record is too large", NULL,
				  "--resume: checkpoint '%s'", path);
	if (rc == 0)
		rc = ss_record_read(rec, len, path, &r);
	if (rc == 0)
		rc = ss_record_fits(c, &r, path, data_size);
	free(rec);
	if (rc < 0)
		return rc == -ENOENT ? ss_error_prefix("--resume") : rc;
	c->split = r.split;
	c->train.epochs = r.epochs;
	if (r.split == 0)
		c->chunk_size = (long)r.chunk;
	c->resume_claimed = r.claimed;
	c->shuffle = r.shuffle != 0;
	c->shuffle_from = r.shuffle;
	c->sync.claims_from = r.split == 0 ? r.claimed : 0;
	return 0;
}

int ss_train_resume_take(struct ss_train_cmd *c, const char *path,
			 const unsigned char *rec, size_t len,
			 uint64_t data_size)
{
	struct ss_record r;
	int rc = ss_record_read(rec, len, path, &r);

	if (rc == 0)
		rc = ss_record_fits(c, &r, path, data_size);
	/* the plan was made from the file before the load checked it */
	if (rc == 0 &&
	    (r.split != c->split || r.epochs != c->train.epochs ||
	     r.claimed != c->resume_claimed || r.shuffle != c->shuffle_from))
		rc = ss_error_set(SS_EPARSE,
				  "it changed while it was being read",
				  "do not rewrite a checkpoint in place; "
				  "resume again",
				  "--resume: checkpoint '%s'", path);
	if (rc < 0)
		return rc;
	free(c->resume_ranges);
	c->resume_ranges = calloc((size_t)r.n + 1, sizeof(*c->resume_ranges));
	if (!c->resume_ranges)
		return ss_error_set(-ENOMEM, NULL, NULL, "--resume");
	for (int i = 0; i < r.n; i++) {
		const unsigned char *p = r.ranges + i * SS_RESUME_RANGE;

		c->resume_ranges[i] =
			(struct ss_train_range){ ss_get(p, 8), ss_get(p + 8, 8),
						 ss_get(p + 16, 8) };
	}
	c->n_resume = r.n;
	c->train.resume = c->resume_ranges;
	c->train.n_resume = r.n;
	c->train.resuming = true;
	return 0;
}

/* Bytes of @r, each pass counted. */
static uint64_t ss_ranges_bytes(const struct ss_train_range *r, int n)
{
	uint64_t sum = 0;

	for (int i = 0; i < n; i++)
		sum += (r[i].end - r[i].begin) * r[i].passes;
	return sum;
}

/* Bytes in the chunks no rank has claimed, as far as this rank knows. */
static uint64_t ss_unclaimed_bytes(const struct ss_chunks *k, uint64_t claimed)
{
	return claimed < k->total ? (k->total - claimed) * k->chunk : 0;
}

uint64_t ss_train_bytes_total(const struct ss_train_cmd *c)
{
	uint64_t sum = ss_ranges_bytes(c->train.resume, c->train.n_resume);

	if (c->chunks)
		return sum +
		       ss_unclaimed_bytes(c->chunks,
					  c->resume ? c->resume_claimed : 0);
	if (c->train.resuming)
		return sum;
	return (c->train.end - c->train.begin) * (uint64_t)c->train.epochs;
}

uint64_t ss_train_bytes_left(const struct ss_train_cmd *c)
{
	struct ss_train_range *left;
	uint64_t sum;
	int n, max;

	if (!c->control)
		return 0;
	max = ss_train_left(c->control, NULL, 0);
	left = malloc(((size_t)max + 1) * sizeof(*left));
	if (!left)
		return 0;
	n = ss_train_left(c->control, left, max);
	sum = ss_ranges_bytes(left, n < max ? n : max);
	free(left);
	if (c->chunks)
		sum += ss_unclaimed_bytes(c->chunks,
					  ss_chunks_claimed(c->chunks));
	return sum;
}

uint64_t ss_train_shuffle_seed(long seed)
{
	/* nonzero; ss_chunks_next mixes it with the epoch */
	return ((uint64_t)seed + 1) * 0x9e3779b97f4a7c15ull | 1;
}
