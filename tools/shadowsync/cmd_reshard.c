// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync reshard: the shard checkpoints of a job of N ranks
 * (train --tables sharded --save 'PATH.{rank}') re-divided for M ranks.
 *
 * A row's slot in its owner's shard is r' div N, its owner r' mod N, where
 * r' is its place in its table's permutation (src/table/table.c), which
 * does not depend on N: so the rows move by r' alone, without their ids.
 * The MLPs (and their accumulators) come from shard 0.  The examples the
 * old shards had seen are shared out among the new ones, so that their
 * sum stays the job's.  The model and the old job's size come from the
 * record train keeps in its checkpoints (shard 0's); each new shard gets
 * one too, of the model alone (no place in the data: a resume refuses
 * it), so that eval, predict, export and reshard read the new set.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "train_cmd.h"

static const char ss_reshard_prog[] = "shadowsync reshard";

static void ss_reshard_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowsync reshard --from PATH --to PATH --new-ranks M [--ranks N]\n"
		"                          [--emb-dim N] [--bottom SIZES] [--top SIZES]\n"
		"                          [--hash-size N]\n"
		"\n"
		"Re-divide the shard checkpoints of a job of N ranks (train --tables\n"
		"sharded --save 'PATH.{rank}') among M ranks, for a job of another size\n"
		"to --load (or eval, predict, export).  PATH contains {rank}; every old\n"
		"file is read, every new one written atomically.  The shards say their\n"
		"model and their job's size; shards of an older version do not: then\n"
		"give --ranks and the model options of the job that saved them.\n"
		"Memory: the whole model (its N files) at once.\n"
		"\n"
		"  --from PATH            the old shards, {rank} for the rank\n"
		"  --ranks N              how many there are (default: as they say)\n"
		"  --to PATH              the new shards, {rank} for the rank\n"
		"  --new-ranks M          how many to write\n"
		"  --emb-dim, --bottom, --top, --hash-size   as for train\n"
		"  -h, --help             this help\n");
}

/* New shard @j of @to: its rows from the old shards, by place r'. */
static void ss_shard_fill(const struct ss_shard_set *old,
			  struct ss_shard_set *to, int j,
			  const struct ss_model_config *m)
{
	size_t W = (size_t)m->emb_dim;

	memcpy(to->w[j], old->w[0], old->dense * sizeof(float));
	memcpy(to->acc[j], old->acc[0], old->dense * sizeof(float));
	for (int t = 0; t < SS_SPARSE; t++)
		for (uint32_t p = (uint32_t)j; p < ss_model_table_rows(m, t);
		     p += (uint32_t)to->world) {
			size_t src, dst;
			int k = ss_shard_at(old, t, p, &src);

			ss_shard_at(to, t, p, &dst);
			memcpy(to->w[j] + dst, old->w[k] + src,
			       W * sizeof(float));
			memcpy(to->acc[j] + dst, old->acc[k] + src,
			       W * sizeof(float));
		}
}

static int ss_cmp_file(const void *a, const void *b)
{
	const struct stat *x = a, *y = b;

	if (x->st_dev != y->st_dev)
		return x->st_dev < y->st_dev ? -1 : 1;
	return (x->st_ino > y->st_ino) - (x->st_ino < y->st_ino);
}

/*
 * No new shard may replace an old one: the new are renamed into place
 * one by one, so a failure part way would leave neither set whole.  By
 * file, not by name ('./ckpt.{rank}' is 'ckpt.{rank}').
 */
static int ss_reshard_no_overlap(const char *from, long ranks, const char *to,
				 long new_ranks)
{
	struct stat *old = calloc((size_t)ranks, sizeof(*old)), st;
	char path[4096];
	int n = 0, rc = 0;

	if (!old)
		return ss_error_set(-ENOMEM, NULL, NULL, "--from");
	for (long k = 0; k < ranks; k++) {
		ss_rank_path(from, (int)k, path, sizeof(path));
		if (stat(path, &old[n]) == 0)
			n++;
	}
	qsort(old, (size_t)n, sizeof(*old), ss_cmp_file);
	for (long j = 0; j < new_ranks && rc == 0; j++) {
		ss_rank_path(to, (int)j, path, sizeof(path));
		if (stat(path, &st) == 0 &&
		    bsearch(&st, old, (size_t)n, sizeof(*old), ss_cmp_file))
			rc = ss_error_set(
				SS_EUSAGE,
				"it would replace a --from shard, and a "
				"failure part way would leave neither set "
				"whole",
				"write the new shards under another name, "
				"then move them",
				"--to '%s' ('%s')", to, path);
	}
	free(old);
	return rc;
}

/*
 * The model and the job's size of the shards of @from, from shard 0's
 * record: into @m (given options must agree) and *@ranks (unless given).
 * Shards of an older version have no record: then the options say.
 */
static int ss_reshard_what(const char *from, bool model_given,
			   struct ss_model_config *m, long *ranks)
{
	struct ss_model_config said;
	char path[4096];
	int tables, world, rc;

	ss_rank_path(from, 0, path, sizeof(path));
	rc = ss_train_record_model(path, &said, &tables, &world);
	if (rc < 0 && rc != SS_EUSAGE) /* unreadable, not only recordless */
		return ss_error_prefix("--from");
	if (rc < 0)
		return *ranks ? 0 :
				ss_error_set(SS_EUSAGE,
					     "its shards do not say how many "
					     "they are (saved by an older "
					     "version)",
					     "give --ranks, and the model "
					     "options of the job that saved "
					     "them",
					     "--from '%s'", from);
	if (tables != SS_TABLES_SHARDED)
		return ss_error_set(SS_EUSAGE,
				    "it is a whole model, not a shard",
				    "reshard re-divides what train --tables "
				    "sharded --save 'PATH.{rank}' wrote",
				    "--from '%s'", path);
	if (model_given && ss_layout_hash(m) != ss_layout_hash(&said))
		return ss_error_set(SS_EUSAGE,
				    "the model options are not the model its "
				    "shards hold",
				    "drop them: the shards say their model",
				    "--from '%s'", path);
	*m = said;
	if (!*ranks)
		*ranks = world;
	return 0;
}

static int ss_reshard(const struct ss_model_config *m, const char *from,
		      long ranks, const char *to_path, long new_ranks)
{
	struct ss_shard_set old = { 0 }, to = { 0 };
	uint64_t hash = ss_layout_hash(m);
	unsigned char rec[SS_RECORD_SHARD_MAX];
	char path[4096], ours[32];
	int rc = ss_shards_alloc(&old, m, (int)ranks);

	if (rc == 0)
		rc = ss_shards_alloc(&to, m, (int)new_ranks);
	snprintf(ours, sizeof(ours), "--ranks %ld", ranks);
	if (rc == 0)
		rc = ss_shards_read(&old, from, hash, "--from", ours,
				    "give --ranks the number of ranks that "
				    "saved them");
	for (int j = 0; rc == 0 && j < to.world; j++) {
		struct ss_checkpoint_part p, st;
		uint64_t examples =
			old.examples / (uint64_t)to.world +
			(j == 0 ? old.examples % (uint64_t)to.world : 0);

		rc = ss_shard_alloc(&to, j);
		if (rc < 0)
			break;
		ss_shard_fill(&old, &to, j, m);
		p = (struct ss_checkpoint_part){ to.w[j], to.dense + to.rows };
		st = (struct ss_checkpoint_part){ to.acc[j],
						  to.dense + to.rows };
		ss_rank_path(to_path, j, path, sizeof(path));
		rc = ss_checkpoint_save_extra(
			path, &p, 1, old.has_acc ? &st : NULL,
			old.has_acc ? 1 : 0,
			ss_shard_layout_hash(hash, to.world, j), examples, rec,
			ss_train_record_shard(m, to.world, j, rec));
		if (rc < 0) {
			ss_error_prefix("--to");
			break;
		}
		free(to.w[j]);
		free(to.acc[j]);
		to.w[j] = to.acc[j] = NULL;
		printf("wrote %s: shard %d of %d\n", path, j, to.world);
	}
	if (rc == 0)
		printf("resharded %ld shards into %ld (%" PRIu64
		       " examples seen in all%s)\n",
		       ranks, new_ranks, old.examples,
		       old.has_acc ? ", Adagrad's accumulators" : "");
	ss_shards_free(&old);
	ss_shards_free(&to);
	return rc;
}

int ss_cmd_reshard(int argc, char **argv)
{
	enum {
		OPT_FROM = 256,
		OPT_TO,
		OPT_RANKS,
		OPT_NEW,
		OPT_EMB,
		OPT_BOTTOM,
		OPT_TOP,
		OPT_HASH
	};
	static const struct option options[] = {
		{ "from", required_argument, NULL, OPT_FROM },
		{ "to", required_argument, NULL, OPT_TO },
		{ "ranks", required_argument, NULL, OPT_RANKS },
		{ "new-ranks", required_argument, NULL, OPT_NEW },
		{ "emb-dim", required_argument, NULL, OPT_EMB },
		{ "bottom", required_argument, NULL, OPT_BOTTOM },
		{ "top", required_argument, NULL, OPT_TOP },
		{ "hash-size", required_argument, NULL, OPT_HASH },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct ss_model_config m;
	const char *from = NULL, *to = NULL;
	long ranks = 0, new_ranks = 0;
	bool model_given = false;
	int opt, rc = 0;

	ss_model_config_init(&m);
	optind = 1;
	while (rc == 0 &&
	       (opt = getopt_long(argc, argv, "h", options, NULL)) != -1) {
		switch (opt) {
		case OPT_FROM:
			from = optarg;
			break;
		case OPT_TO:
			to = optarg;
			break;
		case OPT_RANKS:
			rc = ss_parse_long("--ranks", optarg, 1,
					   SS_FABRIC_MAX_PEERS, &ranks);
			break;
		case OPT_NEW:
			rc = ss_parse_long("--new-ranks", optarg, 1,
					   SS_FABRIC_MAX_PEERS, &new_ranks);
			break;
		case OPT_EMB:
			model_given = true;
			rc = ss_cmd_model_option("--emb-dim", optarg, &m);
			break;
		case OPT_BOTTOM:
			model_given = true;
			rc = ss_cmd_model_option("--bottom", optarg, &m);
			break;
		case OPT_TOP:
			model_given = true;
			rc = ss_cmd_model_option("--top", optarg, &m);
			break;
		case OPT_HASH:
			model_given = true;
			rc = ss_cmd_model_option("--hash-size", optarg, &m);
			break;
		case 'h':
			ss_reshard_usage(stdout);
			return SS_EXIT_OK;
		default:
			return ss_cmd_fail(ss_reshard_prog,
					   ss_cmd_unknown_option(
						   "reshard", argv, options));
		}
	}
	if (rc == 0)
		rc = ss_cmd_no_more_args(argc, argv);
	if (rc == 0 && (!from || !to || !new_ranks))
		rc = ss_error_set(SS_EUSAGE, "all three are required",
				  "shadowsync reshard --from 'ckpt.{rank}' "
				  "--to 'new.{rank}' --new-ranks 2",
				  "--from, --to and --new-ranks");
	if (rc == 0 && (!strstr(from, "{rank}") || !strstr(to, "{rank}")))
		rc = ss_error_set(SS_EUSAGE, "it must contain {rank}",
				  "one file a shard: 'ckpt.{rank}'", "%s",
				  strstr(from, "{rank}") ? "--to" : "--from");
	if (rc == 0) {
		ss_cmd_model_top_spelling(&m);
		rc = ss_model_check(&m);
	}
	if (rc == 0)
		rc = ss_reshard_what(from, model_given, &m, &ranks);
	if (rc == 0)
		rc = ss_reshard_no_overlap(from, ranks, to, new_ranks);
	if (rc == 0)
		rc = ss_reshard(&m, from, ranks, to, new_ranks);
	return rc < 0 ? ss_cmd_fail(ss_reshard_prog, rc) : SS_EXIT_OK;
}
