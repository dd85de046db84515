// SPDX-License-Identifier: BSD-2-Clause
/*
 * A job's shard checkpoints (train --tables sharded --save 'PATH.{rank}')
 * in memory, each whole: what reshard re-divides, and what eval and
 * predict gather into one model.  A row's place r' in its table's
 * permutation (ss_table_place_of()) does not depend on the job's size:
 * of N shards, shard r' mod N holds it, at index r' div N.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "train_cmd.h"

/* @pattern with {rank} replaced by @rank (a path without: itself). */
void ss_rank_path(const char *pattern, int rank, char *buf, size_t size)
{
	const char *at = strstr(pattern, "{rank}");

	if (!at)
		snprintf(buf, size, "%s", pattern);
	else
		snprintf(buf, size, "%.*s%d%s", (int)(at - pattern), pattern,
			 rank, at + 6);
}

int ss_shards_alloc(struct ss_shard_set *s, const struct ss_model_config *m,
		    int world)
{
	uint32_t slots = 0;

	s->world = world;
	for (int t = 0; t < SS_SPARSE; t++) {
		s->slot[t] = slots;
		slots += ss_table_rows_per_owner(ss_model_table_rows(m, t),
						 world);
	}
	s->dense = ss_model_dense_len(m);
	s->width = (size_t)m->emb_dim;
	s->rows = (size_t)slots * s->width;
	s->w = calloc((size_t)world, sizeof(float *));
	s->acc = calloc((size_t)world, sizeof(float *));
	if (!s->w || !s->acc)
		return ss_error_set(-ENOMEM, NULL, NULL, "%d shards", world);
	return 0;
}

void ss_shards_free(struct ss_shard_set *s)
{
	for (int k = 0; s->w && k < s->world; k++) {
		free(s->w[k]);
		free(s->acc[k]);
	}
	free(s->w);
	free(s->acc);
}

int ss_shard_at(const struct ss_shard_set *s, int t, uint32_t p, size_t *at)
{
	*at = s->dense +
	      (size_t)(s->slot[t] + p / (uint32_t)s->world) * s->width;
	return (int)(p % (uint32_t)s->world);
}

/* Shard @k's memory (the accumulators too); zeroed. */
int ss_shard_alloc(struct ss_shard_set *s, int k)
{
	s->w[k] = calloc(s->dense + s->rows, sizeof(float));
	s->acc[k] = calloc(s->dense + s->rows, sizeof(float));
	if (!s->w[k] || !s->acc[k])
		return ss_error_set(
			-ENOMEM, NULL,
			"resharding holds the whole model in memory",
			"shard %d (%zu floats)", k, s->dense + s->rows);
	return 0;
}

int ss_shards_read(struct ss_shard_set *s, const char *from,
		   uint64_t model_hash, const char *option, const char *ours,
		   const char *size_hint)
{
	char path[4096];

	for (int k = 0; k < s->world; k++) {
		struct ss_checkpoint_part p = { NULL, 0 }, st = { NULL, 0 };
		uint64_t examples = 0;
		bool has = false, told;
		int rc = ss_shard_alloc(s, k);

		if (rc < 0)
			return rc;
		p = (struct ss_checkpoint_part){ s->w[k], s->dense + s->rows };
		st = (struct ss_checkpoint_part){ s->acc[k],
						  s->dense + s->rows };
		ss_rank_path(from, k, path, sizeof(path));
		rc = ss_checkpoint_load_parts(
			path, &p, 1, &st, 1,
			ss_shard_layout_hash(model_hash, s->world, k),
			&examples, &has);
		rc = ss_shard_layout_why(
			rc, path, model_hash, s->world, k, ours, size_hint,
			"a shard set is what train --tables sharded --save "
			"'ckpt.{rank}' writes",
			&told);
		if (rc == SS_ELAYOUT && !told)
			return ss_error_prefix(
				"%s (shard %d of %d; the model options must "
				"be the saving job's)",
				option, k, s->world);
		if (rc < 0)
			return ss_error_prefix("%s", option);
		if (k > 0 && has != s->has_acc)
			return ss_error_set(SS_EPARSE,
					    "some shards hold accumulators, "
					    "others not",
					    "they come from different jobs",
					    "'%s'", path);
		s->has_acc = has;
		s->examples += examples;
	}
	return 0;
}

void ss_shards_gather(const struct ss_shard_set *s,
		      const struct ss_model_config *m, float *params,
		      float *acc)
{
	size_t W = s->width;

	memcpy(params, s->w[0], s->dense * sizeof(float));
	if (acc && s->has_acc)
		memcpy(acc, s->acc[0], s->dense * sizeof(float));
	for (int t = 0; t < SS_SPARSE; t++) {
		uint32_t rows = ss_model_table_rows(m, t);
		uint64_t first = ss_model_table_first(m, t);

		for (uint32_t r = 0; r < rows; r++) {
			size_t src;
			int k = ss_shard_at(s, t, ss_table_place_of(rows, t, r),
					    &src);

			memcpy(params + s->dense + (first + r) * W,
			       s->w[k] + src, W * sizeof(float));
			if (acc && s->has_acc)
				memcpy(acc + s->dense + (first + r) * W,
				       s->acc[k] + src, W * sizeof(float));
		}
	}
}

/* The shards of @pattern ({rank}) gathered into *@params, a whole model. */
static int ss_shards_load_gather(const char *pattern,
				 const struct ss_model_config *m, int world,
				 float *params, uint64_t *examples)
{
	struct ss_shard_set set = { 0 };
	char hint[128], ours[48];
	int rc = ss_shards_alloc(&set, m, world);

	snprintf(hint, sizeof(hint),
		 "the set is the %d files of the job that saved them", world);
	snprintf(ours, sizeof(ours), "a set of %d, as shard 0 says", world);
	if (rc == 0)
		rc = ss_shards_read(&set, pattern, ss_layout_hash(m), "--load",
				    ours, hint);
	if (rc == 0) {
		ss_shards_gather(&set, m, params, NULL);
		*examples = set.examples;
	}
	ss_shards_free(&set);
	return rc;
}

int ss_model_load_any(const char *path, struct ss_model_config *m,
		      float **params, uint64_t *trained)
{
	char first[4096];
	bool set = strstr(path, "{rank}") != NULL;
	const char *one = path;
	int tables, world, rc;
	uint64_t examples;

	*params = NULL;
	if (set) {
		ss_rank_path(path, 0, first, sizeof(first));
		one = first;
	}
	rc = ss_train_record_model(one, m, &tables, &world);
	if (rc == 0 && tables == SS_TABLES_SHARDED && !set)
		return ss_error_set(
			SS_EUSAGE,
			"it is one shard of a sharded model: its rows are spread "
			"over the job's files",
			"give them all: --load 'PATH.{rank}', {rank} where the "
			"rank is in their names",
			"checkpoint '%s' (a shard of %d)", path, world);
	if (rc == 0 && !(*params = malloc(ss_model_len(m) * sizeof(float))))
		rc = ss_error_set(-ENOMEM, NULL, NULL, "the model of '%s'",
				  path);
	if (rc == 0 && tables == SS_TABLES_SHARDED)
		rc = ss_shards_load_gather(path, m, world, *params, &examples);
	else if (rc == 0)
		rc = ss_checkpoint_load(one, *params, NULL, ss_model_len(m),
					ss_layout_hash(m), &examples, NULL);
	if (rc < 0) {
		free(*params);
		*params = NULL;
		return ss_error_prefix("--load");
	}
	if (trained)
		*trained = examples;
	return 0;
}

int ss_shard_load_whole(const char *path, const struct ss_model_config *m,
			float *params, float *acc, uint64_t *examples,
			bool *has_acc)
{
	struct ss_shard_set set = { 0 };
	int rc = ss_shards_alloc(&set, m, 1);

	if (rc == 0)
		rc = ss_shards_read(&set, path, ss_layout_hash(m), "--load",
				    "a whole model", "");
	if (rc == 0) {
		ss_shards_gather(&set, m, params, acc);
		*examples = set.examples;
		*has_acc = set.has_acc;
	}
	ss_shards_free(&set);
	return rc;
}
