// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync train: its usage and options.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "train_cmd.h"

#include <getopt.h>
#include <glob.h>
#include <limits.h>

static void ss_train_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowsync train --data FILE [OPTIONS]\n"
		"\n"
		"Train the CTR model on this rank's share of FILE (Criteo format) with\n"
		"Hogwild trainer threads, keeping the replica in sync with the other ranks.\n"
		"\n"
		"data\n"
		"  --data FILE            training data; again for more files, or a\n"
		"                         pattern ('day_*.txt'): one stream, in order.\n"
		"                         Gzip files are read as they are, split static\n"
		"                         (each rank decompresses from the start to its\n"
		"                         share; for many ranks, decompress or split\n"
		"                         first); - reads standard input (one rank, one\n"
		"                         epoch, no --resume; the trainers take its\n"
		"                         batches in turn)\n"
		"  --data-split S         dynamic (default with several ranks): ranks claim\n"
		"                         the next chunk of the file as they go (a counter\n"
		"                         at rank 0, one-sided fetch-and-add), so fast ranks\n"
		"                         take more; static (default for one rank, with\n"
		"                         --sync none, and with gzip files): each rank\n"
		"                         reads its fixed 1/N\n"
		"  --chunk-size BYTES     dynamic: bytes a chunk (default: the file over 64\n"
		"                         per rank, 64 KiB to 64 MiB)\n"
		"  --shuffle              each epoch's chunks in another order, drawn from\n"
		"                         --seed (every chunk once an epoch; dynamic, the\n"
		"                         split it takes when none is given)\n"
		"  --test FILE            held-out data: NE, AUC and calibration at the end\n"
		"  --bad-lines P          fail (default) or skip malformed lines\n"
		"  --eval-every N         also evaluate on --test every N examples of the\n"
		"                         rank while it trains, and at each epoch's end;\n"
		"                         'epoch': only there (replicated or local tables)\n"
		"model\n"
		"  --emb-dim N            embedding size (default 16)\n"
		"  --bottom SIZES         bottom MLP, 13 first, emb-dim last (13-512-256-64-16)\n"
		"  --top SIZES            top MLP after the interaction, 1 last (512-256-1)\n"
		"  --interaction I        dot (default: DLRM's pairwise dot products) or dcn\n"
		"                         (DCNv2's low-rank cross network, as MLPerf's\n"
		"                         DLRM-DCNv2: the top MLP then takes 27 x emb-dim)\n"
		"  --cross-layers L       dcn: cross layers (default 3)\n"
		"  --cross-rank R         dcn: their rank (default 64; DLRMv2: 512)\n"
		"  --pooling P            sum (default) or mean of a feature's rows where\n"
		"                         its field holds several values (multi-hot data:\n"
		"                         comma-separated)\n"
		"  --hash-size N          rows per embedding table (default 100000); or 26\n"
		"                         numbers, one a table (N1,N2,...), or @FILE of them\n"
		"  --seed S               model initialization; the same on every rank (1)\n"
		"training\n"
		"  --threads N            trainer threads (default: one per core but the shadow's)\n"
		"  --batch N              mini-batch (default 128)\n"
		"  --optimizer O          adagrad (default) or sgd; Adagrad's accumulators\n"
		"                         stay on this node, shared by its trainers, not synced\n"
		"  --lr X                 learning rate (default 0.01 for adagrad, 0.1 for sgd)\n"
		"  --dense-lr X           sharded: the MLPs' rate, the tables keeping --lr\n"
		"                         (default: --lr)\n"
		"  --adagrad-eps X        added to Adagrad's sqrt(sum of g^2) (default 1e-8)\n"
		"  --lr-schedule S        constant (default), warmup-linear (to 0, linearly,\n"
		"                         as the data is trained) or cosine (to 0 along a\n"
		"                         half cosine); sharded: the MLPs' rate\n"
		"  --warmup N             the rate rises linearly over the first N examples\n"
		"                         of the rank (default 0: none)\n"
		"  --epochs N             passes over the data (default 1)\n"
		"  --oversubscribe        allow more trainers than cores\n"
		"synchronization\n"
		"  --sync A               ma (default), easgd, bmuf, gossip or none\n"
		"  --mode M               shadow (default) or foreground\n"
		"  --sync-every K         foreground: a round every K steps per trainer (10)\n"
		"  --alpha X --eta X --zeta X --beta X   the algorithms' parameters\n"
		"  --nesterov yes|no      S-BMUF: Nesterov block momentum (yes)\n"
		"  --max-rounds-per-s X   cap the shadow thread (default: no cap)\n"
		"  --max-sync-gap N       trainers wait for a round once N iterations (of\n"
		"                         the rank's trainers together) passed without one:\n"
		"                         for a shadow thread that shares its core\n"
		"                         (default 0: they never wait)\n"
		"  --hierarchical-from N  S-MA: in groups of about sqrt(ranks) from N ranks\n"
		"                         on (32; 0: never)\n"
		"  --tables T             sharded (default with several ranks): one copy of\n"
		"                         each row in all, at its owner rank, read and\n"
		"                         updated one-sided, the MLPs synchronized;\n"
		"                         replicated (default for one): every rank a copy\n"
		"                         of the tables, synchronized with the MLPs; local:\n"
		"                         each rank its own tables, not synchronized\n"
		"  --prefetch D           sharded: the rows of the next D batches are read\n"
		"                         while this one computes, up to D steps stale\n"
		"                         (0, the default: the next batch's rows are read\n"
		"                         once this step's gradients are sent; exact: once\n"
		"                         they are applied, slow)\n"
		"  --round-timeout-ms N   leave a silent peer out of a round after N ms (5000)\n"
		"cluster\n"
		"  --rank R               this rank (default: from srun/mpirun/PMI, else 0)\n"
		"  --peers LIST           host[:port] of every rank, comma-separated, in rank\n"
		"                         order\n"
		"  --hostfile FILE        the same, one host[:port] a line ('#' comments)\n"
		"  --port N               port for hosts given without one (default 7000);\n"
		"                         under Slurm, SLURM_JOB_NODELIST gives the hosts\n"
		"  --transport T          verbs, shm or auto (default auto)\n"
		"  --device NAME          RDMA device ($SS_DEVICE)\n"
		"  --gid-index N          GID index ($SS_GID_INDEX; default: automatic)\n"
		"  --job-key K            refuse peers of another job, K from 1 ($SS_JOB_KEY;\n"
		"                         default 1)\n"
		"  --connect-timeout S    wait up to S seconds for every peer at the start,\n"
		"                         and in the fabric's other waits on a peer (30)\n"
		"checkpoints\n"
		"  --save PATH            write the model (and Adagrad's accumulators) at the\n"
		"                         end (rank 0; every rank when PATH contains {rank},\n"
		"                         which sharded tables need), atomically\n"
		"  --save-every S         also every S seconds while training\n"
		"  --load PATH            start from a checkpoint's model ({rank} as for\n"
		"                         --save): a warm start, on this run's data from its\n"
		"                         start; refused when its model layout or checksum\n"
		"                         differs\n"
		"  --resume PATH          go on where the run that saved PATH was: its model,\n"
		"                         and of the same --data only what it had left\n"
		"                         ({rank} as for --save: with several ranks each\n"
		"                         resumes its own).  SIGTERM or Ctrl-C stops a run\n"
		"                         with --save at its next batch, saves, then exits\n"
		"  --rejoin               this rank replaces one that failed in a running job\n"
		"                         (launch --restarts passes it): with --tables sharded\n"
		"                         its rows come from its own --save checkpoint, the\n"
		"                         last --save-every wrote, when there is one; peers\n"
		"                         that do not answer within 7 s, once one has, are\n"
		"                         left out (a host lost for good)\n"
		"  --job-began T          with --rejoin: when the job began, in seconds since\n"
		"                         1970 (launch passes it); a --save checkpoint older\n"
		"                         than T is an earlier job's, and is not loaded\n"
		"output\n"
		"  --progress S           a progress line every S seconds (default 5; 0: none)\n"
		"  --metrics FILE         the progress figures for Prometheus, replaced\n"
		"                         atomically every --progress S and at the end\n"
		"                         (node_exporter's textfile collector reads *.prom;\n"
		"                         {rank} as for --save; docs/deploying.md)\n"
		"  --log-csv FILE         the progress figures, a row every --progress S\n"
		"                         and one at the end, for plotting ({rank} as for\n"
		"                         --save; docs/deploying.md)\n"
		"  --json                 print the summary as JSON\n"
		"  -v, --verbose          log at debug level\n"
		"  -h, --help             this help\n");
}

enum {
	OPT_DATA = 256,
	OPT_TEST,
	OPT_BAD_LINES,
	OPT_EMB,
	OPT_BOTTOM,
	OPT_TOP,
	OPT_HASH,
	OPT_INTERACTION,
	OPT_CROSS_LAYERS,
	OPT_CROSS_RANK,
	OPT_POOLING,
	OPT_SEED,
	OPT_THREADS,
	OPT_BATCH,
	OPT_LR,
	OPT_DENSE_LR,
	OPT_REJOIN,
	OPT_JOB_BEGAN,
	OPT_OPTIMIZER,
	OPT_ADAGRAD_EPS,
	OPT_EPOCHS,
	OPT_OVERSUB,
	OPT_SYNC,
	OPT_MODE,
	OPT_EVERY,
	OPT_ALPHA,
	OPT_ETA,
	OPT_ZETA,
	OPT_NESTEROV,
	OPT_BETA,
	OPT_MAX_ROUNDS,
	OPT_MAX_GAP,
	OPT_ROUND_TIMEOUT,
	OPT_CONNECT_TIMEOUT,
	OPT_HIER_FROM,
	OPT_SYNC_TABLES,
	OPT_TABLES,
	OPT_PREFETCH,
	OPT_RANK,
	OPT_PEERS,
	OPT_TRANSPORT,
	OPT_DEVICE,
	OPT_GID,
	OPT_JOB_KEY,
	OPT_PROGRESS,
	OPT_JSON,
	OPT_HOSTFILE,
	OPT_PORT,
	OPT_SAVE,
	OPT_SAVE_EVERY,
	OPT_LOAD,
	OPT_DATA_SPLIT,
	OPT_CHUNK_SIZE,
	OPT_METRICS,
	OPT_RESUME,
	OPT_LOG_CSV,
	OPT_SHUFFLE,
	OPT_LR_SCHEDULE,
	OPT_WARMUP,
	OPT_EVAL_EVERY,
	OPT_END,
};

/*
 * An option of one algorithm (or optimizer, or data split), given with
 * another: it would change nothing, so it is refused rather than taken
 * in silence (--alpha with --sync ma, --adagrad-eps with sgd).
 */
static int ss_train_unused(const struct ss_train_cmd *c, const bool *given)
{
	static const struct {
		int opt;
		const char *name, *of;
		enum ss_sync_algo algo;
	} of_algo[] = {
		{ OPT_ALPHA, "--alpha", "easgd", SS_SYNC_EASGD },
		{ OPT_ETA, "--eta", "bmuf", SS_SYNC_BMUF },
		{ OPT_ZETA, "--zeta", "bmuf", SS_SYNC_BMUF },
		{ OPT_NESTEROV, "--nesterov", "bmuf", SS_SYNC_BMUF },
		{ OPT_BETA, "--beta", "gossip", SS_SYNC_GOSSIP },
		{ OPT_HIER_FROM, "--hierarchical-from", "ma", SS_SYNC_MA },
	};

	char hint[96];

	for (size_t i = 0; i < sizeof(of_algo) / sizeof(of_algo[0]); i++) {
		if (!given[of_algo[i].opt - OPT_DATA] ||
		    c->sync.algo == of_algo[i].algo)
			continue;
		snprintf(hint, sizeof(hint),
			 "it is --sync %s's: drop it, or give --sync %s",
			 of_algo[i].of, of_algo[i].of);
		return ss_error_set(SS_EUSAGE, "it would change nothing", hint,
				    "%s with --sync %s", of_algo[i].name,
				    ss_sync_algo_name(c->sync.algo));
	}
	if (given[OPT_ADAGRAD_EPS - OPT_DATA] &&
	    c->train.optimizer != SS_OPT_ADAGRAD)
		return ss_error_set(SS_EUSAGE, "it would change nothing",
				    "it is Adagrad's: drop it, or give "
				    "--optimizer adagrad",
				    "--adagrad-eps with --optimizer sgd");
	if (given[OPT_CHUNK_SIZE - OPT_DATA] && c->split == 1)
		return ss_error_set(SS_EUSAGE, "it would change nothing",
				    "a static split reads one byte range a "
				    "rank: drop it, or give --data-split "
				    "dynamic",
				    "--chunk-size with --data-split static");
	if (c->shuffle && c->split == 1)
		return ss_error_set(SS_EUSAGE, "it shuffles chunks",
				    "a static split reads one byte range a "
				    "rank in order: drop --data-split static",
				    "--shuffle with --data-split static");
	return 0;
}

const char *const ss_tables_names[] = { "replicated", "sharded", "local",
					NULL };

/*
 * --data PATH, again and again: the files, in order; a PATH with * ? or [
 * is a pattern, its files in name order (glob), and one that matches
 * none is refused.
 */
static int ss_train_add_data(struct ss_train_cmd *c, const char *path)
{
	glob_t g = { 0 };
	size_t n = 1;
	char **files;
	int rc = 0;

	if (strpbrk(path, "*?[")) {
		rc = glob(path, 0, NULL, &g);
		if (rc == GLOB_NOMATCH)
			return ss_error_set(SS_EUSAGE, "no file matches it",
					    "check the pattern (quoted, so "
					    "that train expands it)",
					    "--data '%s'", path);
		if (rc != 0)
			return ss_error_set(-ENOMEM, NULL, NULL, "--data '%s'",
					    path);
		n = g.gl_pathc;
	}
	files = realloc(c->data_files,
			((size_t)c->n_data + n) * sizeof(*files));
	if (!files) {
		globfree(&g);
		return ss_error_set(-ENOMEM, NULL, NULL, "--data");
	}
	c->data_files = files;
	for (size_t i = 0; i < n && rc == 0; i++) {
		files[c->n_data] = strdup(g.gl_pathc ? g.gl_pathv[i] : path);
		if (!files[c->n_data])
			rc = ss_error_set(-ENOMEM, NULL, NULL, "--data");
		else
			c->n_data++;
	}
	globfree(&g);
	return rc;
}

int ss_train_parse(int argc, char **argv, struct ss_train_cmd *c)
{
	static const struct option options[] = {
		{ "data", required_argument, NULL, OPT_DATA },
		{ "test", required_argument, NULL, OPT_TEST },
		{ "bad-lines", required_argument, NULL, OPT_BAD_LINES },
		{ "emb-dim", required_argument, NULL, OPT_EMB },
		{ "bottom", required_argument, NULL, OPT_BOTTOM },
		{ "top", required_argument, NULL, OPT_TOP },
		{ "hash-size", required_argument, NULL, OPT_HASH },
		{ "interaction", required_argument, NULL, OPT_INTERACTION },
		{ "cross-layers", required_argument, NULL, OPT_CROSS_LAYERS },
		{ "cross-rank", required_argument, NULL, OPT_CROSS_RANK },
		{ "pooling", required_argument, NULL, OPT_POOLING },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "batch", required_argument, NULL, OPT_BATCH },
		{ "lr", required_argument, NULL, OPT_LR },
		{ "dense-lr", required_argument, NULL, OPT_DENSE_LR },
		{ "rejoin", no_argument, NULL, OPT_REJOIN },
		{ "job-began", required_argument, NULL, OPT_JOB_BEGAN },
		{ "optimizer", required_argument, NULL, OPT_OPTIMIZER },
		{ "adagrad-eps", required_argument, NULL, OPT_ADAGRAD_EPS },
		{ "epochs", required_argument, NULL, OPT_EPOCHS },
		{ "data-split", required_argument, NULL, OPT_DATA_SPLIT },
		{ "chunk-size", required_argument, NULL, OPT_CHUNK_SIZE },
		{ "shuffle", no_argument, NULL, OPT_SHUFFLE },
		{ "lr-schedule", required_argument, NULL, OPT_LR_SCHEDULE },
		{ "warmup", required_argument, NULL, OPT_WARMUP },
		{ "eval-every", required_argument, NULL, OPT_EVAL_EVERY },
		{ "oversubscribe", no_argument, NULL, OPT_OVERSUB },
		{ "sync", required_argument, NULL, OPT_SYNC },
		{ "mode", required_argument, NULL, OPT_MODE },
		{ "sync-every", required_argument, NULL, OPT_EVERY },
		{ "alpha", required_argument, NULL, OPT_ALPHA },
		{ "eta", required_argument, NULL, OPT_ETA },
		{ "zeta", required_argument, NULL, OPT_ZETA },
		{ "nesterov", required_argument, NULL, OPT_NESTEROV },
		{ "beta", required_argument, NULL, OPT_BETA },
		{ "max-rounds-per-s", required_argument, NULL, OPT_MAX_ROUNDS },
		{ "max-sync-gap", required_argument, NULL, OPT_MAX_GAP },
		{ "sync-tables", required_argument, NULL, OPT_SYNC_TABLES },
		{ "tables", required_argument, NULL, OPT_TABLES },
		{ "prefetch", required_argument, NULL, OPT_PREFETCH },
		{ "round-timeout-ms", required_argument, NULL,
		  OPT_ROUND_TIMEOUT },
		{ "hierarchical-from", required_argument, NULL, OPT_HIER_FROM },
		{ "connect-timeout", required_argument, NULL,
		  OPT_CONNECT_TIMEOUT },
		{ "rank", required_argument, NULL, OPT_RANK },
		{ "peers", required_argument, NULL, OPT_PEERS },
		{ "hostfile", required_argument, NULL, OPT_HOSTFILE },
		{ "port", required_argument, NULL, OPT_PORT },
		{ "transport", required_argument, NULL, OPT_TRANSPORT },
		{ "device", required_argument, NULL, OPT_DEVICE },
		{ "gid-index", required_argument, NULL, OPT_GID },
		{ "job-key", required_argument, NULL, OPT_JOB_KEY },
		{ "progress", required_argument, NULL, OPT_PROGRESS },
		{ "save", required_argument, NULL, OPT_SAVE },
		{ "save-every", required_argument, NULL, OPT_SAVE_EVERY },
		{ "load", required_argument, NULL, OPT_LOAD },
		{ "resume", required_argument, NULL, OPT_RESUME },
		{ "metrics", required_argument, NULL, OPT_METRICS },
		{ "log-csv", required_argument, NULL, OPT_LOG_CSV },
		{ "json", no_argument, NULL, OPT_JSON },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static const char *const modes[] = { "shadow", "foreground", NULL };
	static const char *const yes_no[] = { "yes", "no", NULL };
	static const char *const splits[] = { "dynamic", "static", NULL };
	const char *key = getenv("SS_JOB_KEY");
	long v;
	double d;
	int opt, i, rc = 0;
	bool lr_given = false, every_given = false, gid_given = false;
	bool given[OPT_END - OPT_DATA] = { false };

	ss_model_config_init(&c->model);
	ss_train_options_init(&c->train);
	ss_sync_options_init(&c->sync, SS_SYNC_MA);
	ss_fabric_options_init(&c->fabric);
	c->train.sync_every = 10;
	c->fabric.job_key = 1;
	c->seed = 1;
	c->progress = 5;
	c->port = 7000;
	c->split = -1;
	c->tables = -1; /* by the world size, once known */
	c->values = SS_SPARSE; /* one a field, until the data says */
	c->train.prefetch = 0;
	/* A key that does not parse is refused: falling back to the default
	 * would let two jobs with different keys join each other. */
	if (key && *key) {
		/* from 1: 0 stands for any job in shm-clean */
		rc = ss_parse_long("SS_JOB_KEY", key, 1, LONG_MAX, &v);
		if (rc < 0)
			return rc;
		c->fabric.job_key = (uint64_t)v;
	}
	optind = 1;
	while ((opt = getopt_long(argc, argv, "vh", options, NULL)) != -1) {
		if (opt >= OPT_DATA && opt < OPT_END)
			given[opt - OPT_DATA] = true;
		switch (opt) {
		case OPT_DATA:
			rc = ss_train_add_data(c, optarg);
			break;
		case OPT_TEST:
			c->test = optarg;
			break;
		case OPT_BAD_LINES:
			rc = ss_bad_lines_parse("--bad-lines", optarg,
						&c->train.bad_lines);
			break;
		case OPT_EMB:
			rc = ss_cmd_model_option("--emb-dim", optarg,
						 &c->model);
			break;
		case OPT_BOTTOM:
			rc = ss_cmd_model_option("--bottom", optarg, &c->model);
			break;
		case OPT_TOP:
			rc = ss_cmd_model_option("--top", optarg, &c->model);
			break;
		case OPT_HASH:
			rc = ss_cmd_model_option("--hash-size", optarg,
						 &c->model);
			break;
		case OPT_INTERACTION:
			rc = ss_cmd_model_option("--interaction", optarg,
						 &c->model);
			break;
		case OPT_CROSS_LAYERS:
			rc = ss_cmd_model_option("--cross-layers", optarg,
						 &c->model);
			break;
		case OPT_CROSS_RANK:
			rc = ss_cmd_model_option("--cross-rank", optarg,
						 &c->model);
			break;
		case OPT_POOLING:
			rc = ss_cmd_model_option("--pooling", optarg,
						 &c->model);
			break;
		case OPT_SEED:
			rc = ss_parse_long("--seed", optarg, 0, LONG_MAX,
					   &c->seed);
			break;
		case OPT_THREADS:
			rc = ss_parse_long("--threads", optarg, 1, 1024,
					   &c->threads);
			break;
		case OPT_BATCH:
			rc = ss_parse_long("--batch", optarg, 1, 65536, &v);
			c->train.batch = (int)v;
			break;
		case OPT_LR:
			rc = ss_parse_double("--lr", optarg, 1e-9, 100, &d);
			c->train.lr = (float)d;
			lr_given = true;
			break;
		case OPT_REJOIN:
			c->rejoin = true;
			break;
		case OPT_JOB_BEGAN:
			rc = ss_parse_double("--job-began", optarg, 1, 1e12,
					     &c->job_began);
			break;
		case OPT_DENSE_LR:
			rc = ss_parse_double("--dense-lr", optarg, 1e-9, 100,
					     &d);
			c->dense_lr = (float)d;
			break;
		case OPT_OPTIMIZER:
			rc = ss_optimizer_parse("--optimizer", optarg,
						&c->train.optimizer);
			break;
		case OPT_ADAGRAD_EPS:
			rc = ss_parse_double("--adagrad-eps", optarg, 1e-12, 1,
					     &d);
			c->train.adagrad_eps = (float)d;
			break;
		case OPT_EPOCHS:
			rc = ss_parse_long("--epochs", optarg, 1, 10000, &v);
			c->train.epochs = (int)v;
			break;
		case OPT_OVERSUB:
			c->oversubscribe = true;
			break;
		case OPT_SYNC:
			rc = ss_sync_algo_parse("--sync", optarg,
						&c->sync.algo);
			break;
		case OPT_MODE:
			rc = ss_parse_choice("--mode", optarg, modes, &i);
			c->foreground = i == 1;
			break;
		case OPT_EVERY:
			rc = ss_parse_long("--sync-every", optarg, 1, 1L << 30,
					   &v);
			c->train.sync_every = (int)v;
			every_given = true;
			break;
		case OPT_ALPHA:
			rc = ss_parse_double("--alpha", optarg, 1e-6, 1,
					     &c->sync.alpha);
			break;
		case OPT_ETA:
			rc = ss_parse_double("--eta", optarg, 0, 0.999,
					     &c->sync.eta);
			break;
		case OPT_ZETA:
			rc = ss_parse_double("--zeta", optarg, 1e-6, 10,
					     &c->sync.zeta);
			break;
		case OPT_NESTEROV:
			rc = ss_parse_choice("--nesterov", optarg, yes_no, &i);
			c->sync.nesterov = i == 0;
			break;
		case OPT_BETA:
			rc = ss_parse_double("--beta", optarg, 1e-6, 1,
					     &c->sync.beta);
			break;
		case OPT_MAX_ROUNDS:
			rc = ss_parse_double("--max-rounds-per-s", optarg,
					     0.001, 1e9,
					     &c->sync.max_rounds_per_s);
			break;
		case OPT_MAX_GAP:
			rc = ss_parse_long("--max-sync-gap", optarg, 0,
					   1L << 40, &v);
			c->sync.max_gap = (uint64_t)v;
			break;
		case OPT_ROUND_TIMEOUT:
			rc = ss_parse_long("--round-timeout-ms", optarg, 1,
					   3600000, &v);
			c->sync.round_timeout_ms = (unsigned)v;
			break;
		case OPT_HIER_FROM: /* 0 here is never; the library's 0 is 32 */
			rc = ss_parse_long("--hierarchical-from", optarg, 0,
					   SS_FABRIC_MAX_PEERS, &v);
			c->sync.hierarchical_from = v ? (int)v : -1;
			break;
		case OPT_DATA_SPLIT:
			rc = ss_parse_choice("--data-split", optarg, splits,
					     &i);
			c->split = i;
			break;
		case OPT_CHUNK_SIZE:
			rc = ss_parse_long("--chunk-size", optarg, 4096,
					   1l << 40, &c->chunk_size);
			break;
		case OPT_SYNC_TABLES:
			return ss_error_set(
				SS_EUSAGE, "it is gone",
				"--tables replaces it: --sync-tables yes is "
				"--tables replicated, no is --tables local",
				"--sync-tables");
		case OPT_TABLES:
			rc = ss_parse_choice("--tables", optarg,
					     ss_tables_names, &i);
			c->tables = i;
			break;
		case OPT_PREFETCH:
			v = SS_TRAIN_PREFETCH_EXACT;
			if (strcmp(optarg, "exact") != 0)
				rc = ss_parse_long("--prefetch", optarg, 0,
						   SS_TRAIN_MAX_PREFETCH, &v);
			c->train.prefetch = (int)v;
			break;
		case OPT_RANK:
			rc = ss_parse_long("--rank", optarg, 0,
					   SS_FABRIC_MAX_PEERS - 1, &v);
			c->fabric.rank = (int)v;
			c->rank_given = true;
			break;
		case OPT_HOSTFILE:
			c->hostfile = optarg;
			break;
		case OPT_PORT:
			rc = ss_parse_long("--port", optarg, 1, 65535,
					   &c->port);
			break;
		case OPT_PEERS:
			c->peers = strdup(optarg);
			break;
		case OPT_TRANSPORT:
			rc = ss_transport_parse("--transport", optarg,
						&c->fabric.transport);
			break;
		case OPT_DEVICE:
			c->fabric.device = optarg;
			break;
		case OPT_GID:
			rc = ss_parse_long("--gid-index", optarg, 0, 255, &v);
			c->fabric.gid_index = (int)v;
			gid_given = true;
			break;
		case OPT_CONNECT_TIMEOUT:
			rc = ss_parse_long("--connect-timeout", optarg, 1,
					   86400, &v);
			c->fabric.timeout_ms = (unsigned)v * 1000u;
			break;
		case OPT_JOB_KEY:
			rc = ss_parse_long("--job-key", optarg, 1, LONG_MAX,
					   &v);
			c->fabric.job_key = (uint64_t)v;
			break;
		case OPT_PROGRESS:
			rc = ss_parse_long("--progress", optarg, 0, 86400,
					   &c->progress);
			break;
		case OPT_JSON:
			c->json = true;
			break;
		case OPT_SHUFFLE:
			c->shuffle = true;
			break;
		case OPT_LR_SCHEDULE:
			rc = ss_lr_schedule_parse("--lr-schedule", optarg,
						  &c->train.lr_schedule);
			break;
		case OPT_EVAL_EVERY:
			c->eval_epochs = true;
			if (strcmp(optarg, "epoch") != 0)
				rc = ss_parse_long("--eval-every", optarg, 1,
						   LONG_MAX, &c->eval_every);
			break;
		case OPT_WARMUP:
			rc = ss_parse_long("--warmup", optarg, 0, LONG_MAX, &v);
			c->train.warmup = (uint64_t)v;
			break;
		case OPT_LOG_CSV:
			c->log_csv = optarg;
			break;
		case OPT_METRICS:
			c->metrics = optarg;
			break;
		case OPT_SAVE:
			c->save = optarg;
			break;
		case OPT_SAVE_EVERY:
			rc = ss_parse_long("--save-every", optarg, 1,
					   86400 * 30, &c->save_every);
			break;
		case OPT_LOAD:
		case OPT_RESUME:
			c->load = optarg;
			c->resume = opt == OPT_RESUME;
			break;
		case 'v':
			ss_log_set_level(SS_LOG_DEBUG);
			break;
		case 'h':
			ss_train_usage(stdout);
			return 1;
		default:
			return ss_cmd_unknown_option("train", argv, options);
		}
		if (rc < 0)
			return rc;
	}
	rc = ss_cmd_no_more_args(argc, argv);
	if (rc < 0)
		return rc;
	if (!c->n_data)
		return ss_error_set(SS_EUSAGE, "it is required",
				    "give the training data: --data FILE",
				    "--data");
	/* one stream: the files in the order given */
	c->train.data = c->data_files[0];
	if (c->n_data > 1) {
		c->train.data_files = (const char *const *)c->data_files;
		c->train.n_data_files = c->n_data;
	}
	if (given[OPT_LOAD - OPT_DATA] && given[OPT_RESUME - OPT_DATA])
		return ss_error_set(SS_EUSAGE, "give one or the other",
				    "--load starts from a checkpoint's model, "
				    "--resume goes on where its run stopped",
				    "--load and --resume");
	if (c->resume && c->rejoin)
		return ss_error_set(SS_EUSAGE, "give one or the other",
				    "a rank that rejoins a running job takes "
				    "its chunks from the job as it is: give "
				    "--load, or --resume the whole job",
				    "--resume with --rejoin");
	c->epochs_given = given[OPT_EPOCHS - OPT_DATA];
	c->split_given = given[OPT_DATA_SPLIT - OPT_DATA];
	c->chunk_given = given[OPT_CHUNK_SIZE - OPT_DATA];
	if (c->eval_epochs && !c->test)
		return ss_error_set(SS_EUSAGE, "it needs --test",
				    "say what to evaluate on: --test FILE",
				    "--eval-every");
	if (c->save_every && !c->save)
		return ss_error_set(SS_EUSAGE, "it needs --save",
				    "say where to write: --save PATH",
				    "--save-every");
	/* one list of peers: the other was ignored, not even opened */
	if (c->peers && c->hostfile)
		return ss_error_set(SS_EUSAGE, "give one or the other",
				    "the peers come from --peers or from a "
				    "host file, not both",
				    "--peers and --hostfile");
	if (every_given && !c->foreground)
		return ss_error_set(SS_EUSAGE, "only with --mode foreground",
				    "the shadow thread runs its rounds on its "
				    "own: give --mode foreground for rounds "
				    "every K steps",
				    "--sync-every");
	if (c->sync.max_gap && c->sync.algo == SS_SYNC_NONE)
		return ss_error_set(SS_EUSAGE,
				    "there are no rounds to wait for",
				    "drop it, or give --sync ma, easgd, bmuf "
				    "or gossip",
				    "--max-sync-gap with --sync none");
	if (c->sync.max_gap && c->foreground)
		return ss_error_set(SS_EUSAGE, "only with --mode shadow",
				    "in the foreground mode the trainers run "
				    "the rounds themselves, every --sync-every "
				    "steps",
				    "--max-sync-gap");
	if (c->job_began && !c->rejoin)
		return ss_error_set(SS_EUSAGE, "only with --rejoin",
				    "it says which --save checkpoint a rank "
				    "that rejoins may load: give --rejoin too, "
				    "or drop it",
				    "--job-began");
	/* $SS_GID_INDEX may be set for the whole cluster; the option is
	 * this run's, and over shm it would be ignored */
	if (gid_given && c->fabric.transport == SS_TRANSPORT_SHM)
		return ss_error_set(SS_EUSAGE, "only over verbs",
				    "shm has no GIDs: drop --gid-index, or "
				    "give --transport verbs",
				    "--gid-index with --transport shm");
	rc = ss_train_unused(c, given);
	if (rc < 0)
		return rc;
	c->prefetch_given = given[OPT_PREFETCH - OPT_DATA];
	if (!lr_given)
		c->train.lr = ss_optimizer_default_lr(c->train.optimizer);
	ss_cmd_model_top_spelling(&c->model);
	return ss_model_check(&c->model);
}

int ss_train_resolve_tables(struct ss_train_cmd *c)
{
	const char *why =
		c->tables < 0 ? " (the default with several ranks)" : "";

	if (c->tables < 0)
		c->tables = c->fabric.world > 1 ? SS_TABLES_SHARDED :
						  SS_TABLES_REPLICATED;
	if (c->tables == SS_TABLES_SHARDED &&
	    ((c->save && !strstr(c->save, "{rank}")) ||
	     (c->load && !strstr(c->load, "{rank}"))))
		return ss_error_set(
			SS_EUSAGE,
			c->save && !strstr(c->save, "{rank}") ?
				"every rank saves its own shard" :
				"every rank loads its own shard",
			"put {rank} in the path: 'ckpt.{rank}' (or train with "
			"--tables replicated, whose ranks hold the same model)",
			"%s with --tables sharded%s",
			c->save && !strstr(c->save, "{rank}") ? "--save" :
								"--load",
			why);
	/* a shard's rows are at their owners, and the trainers' table
	 * clients busy: the held-out evaluation runs at the end there */
	if (c->eval_epochs && c->tables == SS_TABLES_SHARDED)
		return ss_error_set(SS_EUSAGE, "not with sharded tables yet",
				    "give --tables replicated or local, or let "
				    "--test evaluate at the end",
				    "--eval-every with --tables sharded%s",
				    why);
	/* only rank 0 saves a path without {rank}: the others' tables
	 * were lost without a word */
	if (c->tables == SS_TABLES_LOCAL && c->fabric.world > 1 && c->save &&
	    !strstr(c->save, "{rank}"))
		return ss_error_set(
			SS_EUSAGE, "each rank's tables are its own",
			"put {rank} in the path: 'ckpt.{rank}' (without it only "
			"rank 0 saves)",
			"--save with --tables local");
	/* what the table endpoint takes (ss_table_check), by our names */
	if (c->tables == SS_TABLES_SHARDED &&
	    c->train.batch * SS_SPARSE > (1 << 20))
		return ss_error_set(
			SS_EUSAGE,
			"at most 40329 with --tables "
			"sharded",
			"a lookup takes 26 rows an example, 2^20 at "
			"most: give a smaller --batch",
			"--batch %d", (int)c->train.batch);
	if (c->tables == SS_TABLES_SHARDED && c->threads > 256)
		return ss_error_set(SS_EUSAGE,
				    "at most 256 with --tables "
				    "sharded",
				    "the table endpoint serves 256 trainers at "
				    "most: give fewer --threads",
				    "--threads %d", (int)c->threads);
	if (c->prefetch_given && c->tables != SS_TABLES_SHARDED)
		return ss_error_set(SS_EUSAGE, "only with --tables sharded",
				    "the other tables are in this rank's "
				    "memory, read as the step needs them: "
				    "drop it",
				    "--prefetch with --tables %s%s",
				    ss_tables_names[c->tables],
				    !*why		? "" :
				    c->fabric.world > 1 ? why :
							  " (the default for "
							  "one rank)");
	if (c->dense_lr > 0 && c->tables != SS_TABLES_SHARDED)
		return ss_error_set(SS_EUSAGE, "only with --tables sharded",
				    "elsewhere one step updates the tables and "
				    "the MLPs: set --lr",
				    "--dense-lr");
	return 0;
}
