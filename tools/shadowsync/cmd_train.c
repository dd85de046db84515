// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync train: one rank.  Trainer threads train the CTR model on this
 * rank's share of the data while the shadow thread (or, in the foreground
 * mode, the trainers every k steps) keeps the replica in sync with the
 * other ranks; then the held-out metrics and a summary.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "command.h"
#include "shadowsync/shadowsync.h"

static const char ss_train_prog[] = "shadowsync train";

static void ss_train_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowsync train --data FILE [OPTIONS]\n"
		"\n"
		"Train the CTR model on this rank's share of FILE (Criteo format) with\n"
		"Hogwild trainer threads, keeping the replica in sync with the other ranks.\n"
		"\n"
		"data\n"
		"  --data FILE            training data\n"
		"  --data-split S         dynamic (default with several ranks): ranks claim\n"
		"                         the next chunk of the file as they go (a counter\n"
		"                         at rank 0, one-sided fetch-and-add), so fast ranks\n"
		"                         take more; static (default for one rank, and with\n"
		"                         --sync none): each rank reads its fixed 1/N\n"
		"  --chunk-size BYTES     dynamic: bytes a chunk (default: the file over 64\n"
		"                         per rank, 64 KiB to 64 MiB)\n"
		"  --test FILE            held-out data: NE, AUC and calibration at the end\n"
		"  --bad-lines P          fail (default) or skip malformed lines\n"
		"model\n"
		"  --emb-dim N            embedding size (default 16)\n"
		"  --bottom SIZES         bottom MLP, 13 first, emb-dim last (13-512-256-64-16)\n"
		"  --top SIZES            top MLP after the interaction, 1 last (512-256-1)\n"
		"  --hash-size N          rows per embedding table (default 100000)\n"
		"  --seed S               model initialization; the same on every rank (1)\n"
		"training\n"
		"  --threads N            trainer threads (default: one per core but the shadow's)\n"
		"  --batch N              mini-batch (default 128)\n"
		"  --optimizer O          adagrad (default) or sgd; Adagrad's accumulators\n"
		"                         stay on this node, shared by its trainers, not synced\n"
		"  --lr X                 learning rate (default 0.01 for adagrad, 0.1 for sgd)\n"
		"  --adagrad-eps X        added to Adagrad's sqrt(sum of g^2) (default 1e-8)\n"
		"  --epochs N             passes over the data (default 1)\n"
		"  --oversubscribe        allow more trainers than cores\n"
		"synchronization\n"
		"  --sync A               ma (default), easgd, bmuf, gossip or none\n"
		"  --mode M               shadow (default) or foreground\n"
		"  --sync-every K         foreground: a round every K steps per trainer (10)\n"
		"  --alpha X --eta X --zeta X --beta X   the algorithms' parameters\n"
		"  --nesterov yes|no      S-BMUF: Nesterov block momentum (yes)\n"
		"  --max-rounds-per-s X   cap the shadow thread (default: no cap)\n"
		"  --sync-tables yes|no   synchronize the embedding tables too (yes), or\n"
		"                         the dense MLPs only, the tables each rank's own\n"
		"  --round-timeout-ms N   leave a silent peer out of a round after N ms (5000)\n"
		"cluster\n"
		"  --rank R               this rank (default: from srun/mpirun/PMI, else 0)\n"
		"  --peers LIST           host:port of every rank, comma-separated, in rank order\n"
		"  --hostfile FILE        the same, one host[:port] a line ('#' comments)\n"
		"  --port N               port for hosts given without one (default 7000);\n"
		"                         under Slurm, SLURM_JOB_NODELIST gives the hosts\n"
		"  --transport T          verbs, shm or auto (default auto)\n"
		"  --device NAME          RDMA device ($SS_DEVICE)\n"
		"  --gid-index N          GID index ($SS_GID_INDEX; default: automatic)\n"
		"  --job-key K            refuse peers of another job ($SS_JOB_KEY; default 1)\n"
		"checkpoints\n"
		"  --save PATH            write the model (and Adagrad's accumulators) at the\n"
		"                         end (rank 0; every rank when PATH contains {rank}),\n"
		"                         atomically\n"
		"  --save-every S         also every S seconds while training\n"
		"  --load PATH            start from a checkpoint ({rank} as for --save);\n"
		"                         refused when its model layout or checksum differs\n"
		"output\n"
		"  --progress S           a progress line every S seconds (default 5; 0: none)\n"
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
	OPT_SEED,
	OPT_THREADS,
	OPT_BATCH,
	OPT_LR,
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
	OPT_ROUND_TIMEOUT,
	OPT_SYNC_TABLES,
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
	char **owned; /* addresses from a host file or node list */
	int n_owned;
	const char **addrs;
	long threads;
	bool oversubscribe, foreground, json;
	long seed, progress;
	const char *save, *load; /* checkpoint paths, {rank} not yet replaced */
	long save_every;
	uint64_t layout_hash;
	uint64_t resumed; /* examples the loaded checkpoint had seen */
	const char *blas; /* the BLIS kernels' name */
	bool dense_only; /* --sync-tables no */
	int split; /* --data-split: 0 dynamic, 1 static, -1 not given */
	long chunk_size; /* --chunk-size; 0: automatic */
};

/*
 * Data by chunks: chunk numbers from the job's counter at rank 0 (a local
 * one without a sync engine, for a single rank's trainers), mapped to
 * byte ranges of the file, epoch after epoch.
 */
struct ss_chunks {
	struct ss_sync *sync;
	uint64_t next; /* the local counter */
	uint64_t size, chunk, per_epoch, total;
};

static int ss_train_next_chunk(void *ctx, uint64_t *begin, uint64_t *end)
{
	struct ss_chunks *k = ctx;
	uint64_t n;

	if (k->sync) {
		int rc = ss_sync_claim(k->sync, &n);

		if (rc < 0)
			return rc;
	} else {
		n = __atomic_fetch_add(&k->next, 1, __ATOMIC_RELAXED);
	}
	if (n >= k->total)
		return 0;
	*begin = n % k->per_epoch * k->chunk;
	*end = *begin + k->chunk < k->size ? *begin + k->chunk : k->size;
	return 1;
}

/* The chunks of a file of @size bytes among @world ranks. */
static void ss_chunks_plan(struct ss_chunks *k, uint64_t size, int world,
			   long chunk_size, int epochs)
{
	uint64_t chunk = chunk_size > 0 ? (uint64_t)chunk_size :
					  size / (64 * (uint64_t)world);

	if (chunk_size <= 0 && chunk < (64u << 10))
		chunk = 64u << 10;
	if (chunk_size <= 0 && chunk > (64u << 20))
		chunk = 64u << 20;
	k->size = size;
	k->chunk = chunk;
	k->per_epoch = size ? (size + chunk - 1) / chunk : 1;
	k->total = k->per_epoch * (uint64_t)epochs;
}

static int ss_train_parse(int argc, char **argv, struct ss_train_cmd *c)
{
	static const struct option options[] = {
		{ "data", required_argument, NULL, OPT_DATA },
		{ "test", required_argument, NULL, OPT_TEST },
		{ "bad-lines", required_argument, NULL, OPT_BAD_LINES },
		{ "emb-dim", required_argument, NULL, OPT_EMB },
		{ "bottom", required_argument, NULL, OPT_BOTTOM },
		{ "top", required_argument, NULL, OPT_TOP },
		{ "hash-size", required_argument, NULL, OPT_HASH },
		{ "seed", required_argument, NULL, OPT_SEED },
		{ "threads", required_argument, NULL, OPT_THREADS },
		{ "batch", required_argument, NULL, OPT_BATCH },
		{ "lr", required_argument, NULL, OPT_LR },
		{ "optimizer", required_argument, NULL, OPT_OPTIMIZER },
		{ "adagrad-eps", required_argument, NULL, OPT_ADAGRAD_EPS },
		{ "epochs", required_argument, NULL, OPT_EPOCHS },
		{ "data-split", required_argument, NULL, OPT_DATA_SPLIT },
		{ "chunk-size", required_argument, NULL, OPT_CHUNK_SIZE },
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
		{ "sync-tables", required_argument, NULL, OPT_SYNC_TABLES },
		{ "round-timeout-ms", required_argument, NULL,
		  OPT_ROUND_TIMEOUT },
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
	bool lr_given = false;

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
	if (key && *key &&
	    ss_parse_long("SS_JOB_KEY", key, 0, LONG_MAX, &v) == 0)
		c->fabric.job_key = (uint64_t)v;
	optind = 1;
	while ((opt = getopt_long(argc, argv, "vh", options, NULL)) != -1) {
		switch (opt) {
		case OPT_DATA:
			c->train.data = optarg;
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
		case OPT_ROUND_TIMEOUT:
			rc = ss_parse_long("--round-timeout-ms", optarg, 1,
					   3600000, &v);
			c->sync.round_timeout_ms = (unsigned)v;
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
			rc = ss_parse_choice("--sync-tables", optarg, yes_no,
					     &i);
			c->dense_only = i == 1;
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
			break;
		case OPT_JOB_KEY:
			rc = ss_parse_long("--job-key", optarg, 0, LONG_MAX,
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
		case OPT_SAVE:
			c->save = optarg;
			break;
		case OPT_SAVE_EVERY:
			rc = ss_parse_long("--save-every", optarg, 1,
					   86400 * 30, &c->save_every);
			break;
		case OPT_LOAD:
			c->load = optarg;
			break;
		case 'v':
			ss_log_set_level(SS_LOG_DEBUG);
			break;
		case 'h':
			ss_train_usage(stdout);
			return 1;
		default:
			return ss_cmd_unknown_option("train", argv);
		}
		if (rc < 0)
			return rc;
	}
	rc = ss_cmd_no_more_args(argc, argv);
	if (rc < 0)
		return rc;
	if (!c->train.data)
		return ss_error_set(SS_EUSAGE, "it is required",
				    "give the training data: --data FILE",
				    "--data");
	if (c->save_every && !c->save)
		return ss_error_set(SS_EUSAGE, "it needs --save",
				    "say where to write: --save PATH",
				    "--save-every");
	if (!lr_given)
		c->train.lr = ss_optimizer_default_lr(c->train.optimizer);
	ss_cmd_model_top_spelling(&c->model);
	return ss_model_check(&c->model);
}

/* Hosts from Slurm's node list: tasks spread in blocks over the nodes. */
static int ss_slurm_addrs(struct ss_train_cmd *c, const char *nodelist,
			  int world)
{
	char **hosts = NULL, addr[300];
	int n = 0, rc = ss_nodelist_expand(nodelist, &hosts, &n);

	if (rc < 0)
		return ss_error_prefix("SLURM_JOB_NODELIST");
	c->owned = calloc((size_t)world, sizeof(char *));
	for (int r = 0; c->owned && r < world; r++) {
		int per = (world + n - 1) / n; /* tasks per node */

		snprintf(addr, sizeof(addr), "%s:%ld", hosts[r / per],
			 c->port + r % per);
		c->owned[r] = strdup(addr);
		if (!c->owned[r])
			break;
		c->n_owned++;
	}
	ss_strings_free(&hosts, n);
	return c->n_owned == world ? 0 :
				     ss_error_set(-ENOMEM, NULL, NULL, "peers");
}

/*
 * The peers: --peers, else --hostfile, else Slurm's node list; the rank:
 * --rank, else the launcher's environment.  Without any: a world of one.
 */
static int ss_train_peers(struct ss_train_cmd *c)
{
	static char alone[64];
	const char *launcher = NULL, *nodelist = getenv("SLURM_JOB_NODELIST");
	char *save = NULL, *tok;
	int lrank = 0, lworld = 0, n = 0, rc;

	if (ss_launcher_rank(&lrank, &lworld, &launcher) < 0)
		launcher = NULL;
	if (!c->rank_given && launcher)
		c->fabric.rank = lrank;
	c->addrs = calloc(SS_FABRIC_MAX_PEERS, sizeof(char *));
	if (!c->addrs)
		return ss_error_set(-ENOMEM, NULL, NULL, "peers");
	if (c->peers) {
		for (tok = strtok_r(c->peers, ",", &save);
		     tok && n < SS_FABRIC_MAX_PEERS;
		     tok = strtok_r(NULL, ",", &save))
			c->addrs[n++] = tok;
	} else {
		if (c->hostfile)
			rc = ss_hostfile_read(c->hostfile, (int)c->port,
					      &c->owned, &c->n_owned);
		else if (launcher && nodelist && !strcmp(launcher, "Slurm"))
			rc = ss_slurm_addrs(c, nodelist, lworld);
		else
			rc = 1;
		if (rc < 0)
			return rc;
		if (rc == 1) { /* a world of one, on a port of its own */
			snprintf(alone, sizeof(alone), "127.0.0.1:%d",
				 20000 + (int)(getpid() % 20000));
			c->addrs[n++] = alone;
		}
		for (int i = 0; i < c->n_owned && n < SS_FABRIC_MAX_PEERS; i++)
			c->addrs[n++] = c->owned[i];
	}
	c->fabric.world = n;
	c->fabric.addrs = c->addrs;
	if (launcher && !c->rank_given && lworld != n)
		return ss_error_set(
			SS_EUSAGE, "the peer list does not match",
			"give as many peers as the launcher starts tasks",
			"%s says %d tasks, the peers are %d", launcher, lworld,
			n);
	if (c->fabric.rank >= n)
		return ss_error_set(SS_EUSAGE, "not in the peer list",
				    "ranks count from 0 in peer order",
				    "--rank %d of %d peers", c->fabric.rank, n);
	if (launcher)
		ss_log_info("rank %d of %d (from %s)", c->fabric.rank, n,
			    c->rank_given ? "--rank" : launcher);
	return 0;
}

/* FNV-1a over the model's sizes: peers with another model are refused. */
static uint64_t ss_layout_hash(const struct ss_model_config *m)
{
	uint64_t h = 0xcbf29ce484222325ull;
	int v[4 + 2 * (SS_MAX_LAYERS + 1)], n = 0;

	v[n++] = m->emb_dim;
	v[n++] = (int)m->hash_size;
	for (int i = 0; i < m->n_bottom; i++)
		v[n++] = m->bottom[i];
	v[n++] = -1;
	for (int i = 0; i < m->n_top; i++)
		v[n++] = m->top[i];
	for (int i = 0; i < n; i++)
		h = (h ^ (uint64_t)(uint32_t)v[i]) * 0x100000001b3ull;
	return h;
}

/* PATH with {rank} replaced by this rank; NULL when this rank does not
 * save (only rank 0 does, unless the path names the rank). */
static const char *ss_checkpoint_path(const struct ss_train_cmd *c,
				      const char *path, bool saving, char *buf,
				      size_t size)
{
	const char *at = strstr(path, "{rank}");

	if (!at)
		return saving && c->fabric.rank != 0 ? NULL : path;
	snprintf(buf, size, "%.*s%d%s", (int)(at - path), path, c->fabric.rank,
		 at + 6);
	return buf;
}

/*
 * SIGTERM (launch stopping the ranks) or Ctrl-C during a save: remove the
 * half-written PATH.tmp, then die of the signal as before.  unlink() is
 * async-signal-safe; the path is set before the save and cleared after.
 */
static char ss_saving_tmp[4096 + sizeof(SS_CHECKPOINT_TMP_SUFFIX)];
static volatile sig_atomic_t ss_saving;

static void ss_train_on_signal(int sig)
{
	if (ss_saving)
		unlink(ss_saving_tmp);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Saves this rank's replica (and Adagrad's accumulators, when it has
 * them), if it is the one that saves. */
static int ss_train_save(const struct ss_train_cmd *c, const float *params,
			 uint64_t examples)
{
	char buf[4096];
	const char *path =
		ss_checkpoint_path(c, c->save, true, buf, sizeof(buf));
	int rc;

	if (!path)
		return 0;
	snprintf(ss_saving_tmp, sizeof(ss_saving_tmp),
		 "%s" SS_CHECKPOINT_TMP_SUFFIX, path);
	ss_saving = 1;
	rc = ss_checkpoint_save(path, params, c->train.adagrad_acc,
				ss_model_len(&c->model), c->layout_hash,
				c->resumed + examples);
	ss_saving = 0;
	if (rc == 0)
		ss_log_info("checkpoint: %s (%" PRIu64 " examples)", path,
			    c->resumed + examples);
	return rc < 0 ? ss_error_prefix("--save") : 0;
}

struct ss_progress {
	struct ss_train_cmd *c;
	struct ss_sync *sync;
	const float *params;
	struct ss_train_progress totals; /* the trainers add to it */
	bool stop;
	pthread_mutex_t lock;
	pthread_cond_t cond;
};

static void ss_progress_line(struct ss_progress *p, double secs)
{
	uint64_t ex;
	double loss, ne;

	ss_train_progress_read(&p->totals, &ex, &loss, &ne);
	fprintf(stderr,
		"rank %d: %.0f s: %" PRIu64
		" examples, %.0f/s (%.0f/s per trainer); training loss %.4f, NE %.4f",
		p->c->fabric.rank, secs, ex, (double)ex / secs,
		(double)ex / secs / p->c->train.threads, loss, ne);
	if (p->sync) {
		struct ss_sync_stats st;

		ss_sync_get_stats(p->sync, &st);
		fprintf(stderr, "; sync %" PRIu64 " rounds, %.1f/s, gap %.1f",
			st.rounds, st.rounds_per_s, st.sync_gap);
	}
	fputc('\n', stderr);
}

/*
 * Progress lines every --progress seconds and checkpoints every
 * --save-every seconds, while the trainers run.  A periodic save that
 * fails is reported and training goes on: the final save says it again.
 */
static void *ss_progress_main(void *arg)
{
	struct ss_progress *p = arg;
	const uint64_t s = 1000000000ull, start = ss_now_ns();
	uint64_t next_line = p->c->progress ?
				     start + (uint64_t)p->c->progress * s :
				     UINT64_MAX;
	uint64_t next_save = p->c->save_every ?
				     start + (uint64_t)p->c->save_every * s :
				     UINT64_MAX;

	pthread_mutex_lock(&p->lock);
	while (!p->stop) {
		uint64_t now = ss_now_ns(),
			 due = next_line < next_save ? next_line : next_save;

		if (due > now) {
			struct timespec until;
			uint64_t ns;

			clock_gettime(CLOCK_MONOTONIC, &until);
			ns = (uint64_t)until.tv_nsec + (due - now);
			until.tv_sec += (time_t)(ns / s);
			until.tv_nsec = (long)(ns % s);
			pthread_cond_timedwait(&p->cond, &p->lock, &until);
			continue;
		}
		pthread_mutex_unlock(&p->lock);
		if (now >= next_line) {
			ss_progress_line(p, (double)(now - start) / 1e9);
			next_line += (uint64_t)p->c->progress * s;
		}
		if (now >= next_save) {
			int rc = ss_train_save(
				p->c, p->params,
				__atomic_load_n(&p->totals.examples,
						__ATOMIC_RELAXED));

			if (rc < 0)
				ss_error_print(stderr, ss_train_prog, rc);
			next_save =
				ss_now_ns() + (uint64_t)p->c->save_every * s;
		}
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static void ss_progress_stop(struct ss_progress *p, pthread_t thread,
			     bool *started)
{
	if (!*started)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
	pthread_join(thread, NULL);
	*started = false;
}

static int ss_evaluate(const struct ss_model_config *m, const float *params,
		       const char *path, enum ss_bad_lines bad,
		       struct ss_metrics *out)
{
	struct ss_model_work *w = NULL;
	struct ss_reader *r = NULL;
	struct ss_example batch[256];
	float *p = NULL, *y = NULL;
	size_t n = 0, cap = 0;
	int rc, got;

	rc = ss_model_work_create(&w, m, 256);
	if (rc == 0)
		rc = ss_reader_open(&r, path, 0, 0, bad);
	while (rc == 0) {
		for (got = 0;
		     got < 256 && (rc = ss_reader_next(r, &batch[got])) == 1;
		     got++)
			;
		if (rc < 0 || got == 0)
			break;
		rc = 0;
		if (n + (size_t)got > cap) {
			float *np, *ny;

			cap = cap ? 2 * cap : 65536;
			np = realloc(p, cap * sizeof(float));
			ny = realloc(y, cap * sizeof(float));
			if (np)
				p = np;
			if (ny)
				y = ny;
			if (!np || !ny) {
				rc = ss_error_set(-ENOMEM, NULL, NULL,
						  "evaluating");
				break;
			}
		}
		ss_model_predict(m, params, w, batch, got, p + n);
		for (int i = 0; i < got; i++)
			y[n + (size_t)i] = batch[i].label;
		n += (size_t)got;
	}
	if (rc == 0 && n == 0)
		rc = ss_error_set(SS_EPARSE, "no examples", NULL,
				  "test file '%s'", path);
	if (rc == 0)
		rc = ss_metrics_compute(p, y, n, out);
	if (rc == 0 && out->not_numbers)
		ss_log_warn("held-out: %" PRIu64 " of %" PRIu64
			    " predictions are not numbers: the model diverged "
			    "(a lower --lr, or --optimizer adagrad, trains "
			    "stably)",
			    out->not_numbers, out->count);
	ss_reader_close(&r);
	ss_model_work_destroy(&w);
	free(p);
	free(y);
	return rc;
}

int ss_cmd_train(int argc, char **argv)
{
	struct ss_train_cmd c = { 0 };
	struct ss_topo *topo = NULL;
	struct ss_plan *plan = NULL;
	struct ss_plan_request req = { 0 };
	struct ss_fabric *fabric = NULL;
	struct ss_sync *sync = NULL;
	struct ss_train_result res = { 0 };
	struct ss_metrics test = { 0 };
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
	if (c.save) {
		signal(SIGTERM, ss_train_on_signal);
		signal(SIGINT, ss_train_on_signal);
	}
	if (rc == 0)
		rc = ss_train_peers(&c);
	if (rc == 0 && stat(c.train.data, &st) < 0)
		rc = ss_error_set(-errno, NULL, "check the --data path",
				  "data file '%s'", c.train.data);
	if (rc < 0)
		goto out;
	len = ss_model_len(&c.model);

	/* Where the threads go. */
	req.trainers = (int)c.threads;
	req.device = c.fabric.device;
	req.oversubscribe = c.oversubscribe;
	/* with no shadow thread, its core trains too */
	req.no_shadow = c.sync.algo == SS_SYNC_NONE || c.foreground;
	rc = ss_topo_open(&topo, NULL);
	if (rc == 0)
		rc = ss_topo_plan(topo, &req, &plan);
	if (rc < 0)
		goto out;
	c.train.threads = plan->trainers;
	ss_log_info("plan: %d trainers; %s", plan->trainers, plan->note);

	c.layout_hash = ss_layout_hash(&c.model);
	if (c.sync.algo != SS_SYNC_NONE) {
		/* ranks that disagree on what is synchronized refuse each
		 * other at the handshake, as for another model layout */
		c.sync.synced = c.dense_only ? ss_model_dense_len(&c.model) : 0;
		c.fabric.layout_hash =
			c.layout_hash ^
			(uint64_t)c.sync.synced * 0x9e3779b97f4a7c15ull;
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
	ss_model_init(&c.model, params, (uint64_t)c.seed);
	if (c.load) {
		char buf[4096];
		const char *path =
			ss_checkpoint_path(&c, c.load, false, buf, sizeof(buf));
		bool has_acc = false;

		rc = ss_checkpoint_load(path, params, c.train.adagrad_acc, len,
					c.layout_hash, &c.resumed, &has_acc);
		if (rc < 0) {
			ss_error_prefix("--load");
			goto out;
		}
		ss_log_info("resuming from %s (%" PRIu64 " examples seen%s)",
			    path, c.resumed,
			    has_acc ? ", Adagrad's accumulators" : "");
		if (c.train.adagrad_acc && !has_acc)
			ss_log_warn("--load: '%s' holds no Adagrad "
				    "accumulators (saved by an SGD run, or an "
				    "older version): they start from zero, so "
				    "the first steps are larger",
				    path);
	}
	if (sync) {
		rc = ss_fabric_connect(fabric);
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
	/*
	 * The data: by chunks claimed as the trainers go, or this rank's
	 * fixed share of the bytes.  Ranks without a sync engine have no
	 * counter in common: each keeps its own share.
	 */
	if (c.split < 0) /* chunks help ranks, not one rank's trainers */
		c.split = sync && c.fabric.world > 1 ? 0 : 1;
	if (c.split == 0 && !sync && c.fabric.world > 1) {
		ss_log_warn("--sync none: no counter in common, so each rank "
			    "reads its own 1/%d of the data (--data-split "
			    "static)",
			    c.fabric.world);
		c.split = 1;
	}
	if (c.split == 0) {
		ss_chunks_plan(&chunks, (uint64_t)st.st_size, c.fabric.world,
			       c.chunk_size, c.train.epochs);
		chunks.sync = sync;
		c.train.next_range = ss_train_next_chunk;
		c.train.range_ctx = &chunks;
		ss_log_info("data: %" PRIu64 " chunks of %" PRIu64
			    " bytes, claimed as the ranks go",
			    chunks.total, chunks.chunk);
	}
	c.train.begin = (uint64_t)st.st_size * (uint64_t)c.fabric.rank /
			(uint64_t)c.fabric.world;
	c.train.end = (uint64_t)st.st_size * (uint64_t)(c.fabric.rank + 1) /
		      (uint64_t)c.fabric.world;
	c.train.topo = topo;
	c.train.plan = plan;
	c.train.progress = &prog.totals;
	if (!c.foreground)
		c.train.sync_every = 0; /* the shadow thread does it */
	prog.c = &c;
	prog.sync = sync;
	prog.params = params;
	if ((c.progress > 0 || c.save_every > 0) &&
	    pthread_create(&prog_thread, NULL, ss_progress_main, &prog) == 0)
		prog_started = true;
	rc = ss_train(&c.model, params, &c.train, &res);
	if (shadow) {
		int src = ss_shadow_stop(sync);

		if (rc == 0)
			rc = src;
	}
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
	if (c.save)
		rc = ss_train_save(&c, params, res.examples);
	if (rc == 0 && c.test)
		rc = ss_evaluate(&c.model, params, c.test, c.train.bad_lines,
				 &test);
	if (rc < 0)
		goto out;

	if (c.json) {
		printf("{\"rank\":%d,\"world\":%d,\"examples\":%" PRIu64
		       ",\"skipped\":%" PRIu64
		       ",\"seconds\":%.3f,\"examples_per_s\":%.1f,"
		       "\"train_log_loss\":%.6f,\"sync\":\"%s\",\"mode\":\"%s\","
		       "\"optimizer\":\"%s\",\"lr\":%g,\"params\":%zu,\"dense_params\":%zu,"
		       "\"blas\":\"%s\",\"data_split\":\"%s\",\"chunks\":%" PRIu64,
		       c.fabric.rank, c.fabric.world, res.examples, res.skipped,
		       res.seconds, (double)res.examples / res.seconds,
		       res.examples ? res.loss_sum / (double)res.examples : 0,
		       ss_sync_algo_name(c.sync.algo),
		       c.foreground ? "foreground" : "shadow",
		       ss_optimizer_name(c.train.optimizer), (double)c.train.lr,
		       len, ss_model_dense_len(&c.model), c.blas,
		       c.split ? "static" : "dynamic", res.ranges);
		/* what BLIS was told, for another run to be given the same */
		printf(",\"blis_arch_type\":");
		if (getenv("BLIS_ARCH_TYPE"))
			ss_json_string(stdout, getenv("BLIS_ARCH_TYPE"));
		else
			printf("null");
		if (c.load)
			printf(",\"resumed_examples\":%" PRIu64, c.resumed);
		if (c.test) {
			printf(",\"test_ne\":");
			ss_json_double(stdout, "%.6f", test.ne);
			printf(",\"test_auc\":");
			ss_json_double(stdout, "%.6f", test.auc);
			printf(",\"test_calibration\":");
			ss_json_double(stdout, "%.6f", test.calibration);
		}
		if (sync) {
			struct ss_sync_stats s;

			ss_sync_get_stats(sync, &s);
			printf(",\"rounds\":%" PRIu64
			       ",\"rounds_per_s\":%.2f,\"sync_gap\":%.2f,\"peers_left_out\":%" PRIu64
			       ",\"rounds_partial\":%" PRIu64
			       ",\"messages_late\":%" PRIu64
			       ",\"round_timeout_ms\":%u,\"synced_floats\":%zu",
			       s.rounds, s.rounds_per_s, s.sync_gap,
			       s.peers_left_out, s.rounds_partial,
			       s.messages_late, s.round_timeout_ms,
			       ss_sync_synced_len(sync));
			printf(",\"left_out_by_peer\":[");
			for (int p = 0; p < c.fabric.world; p++)
				printf("%s%" PRIu64, p ? "," : "",
				       ss_sync_peer_left_out(sync, p));
			printf("]");
		}
		printf("}\n");
	} else {
		printf("rank %d of %d: %" PRIu64
		       " examples in %.1f s (%.0f/s), training log loss %.4f\n",
		       c.fabric.rank, c.fabric.world, res.examples, res.seconds,
		       (double)res.examples / res.seconds,
		       res.examples ? res.loss_sum / (double)res.examples : 0);
		if (c.load)
			printf("resumed from a checkpoint that had seen %" PRIu64
			       " examples\n",
			       c.resumed);
		if (res.skipped)
			printf("skipped %" PRIu64 " malformed lines\n",
			       res.skipped);
		if (c.split == 0)
			printf("trained %" PRIu64 " chunks of the data\n",
			       res.ranges);
		if (c.test)
			printf("held-out: NE %.4f, AUC %.4f, calibration %.3f\n",
			       test.ne, test.auc, test.calibration);
		if (sync)
			ss_sync_print_stats(sync, stdout);
	}
out:
	ss_progress_stop(&prog, prog_thread, &prog_started);
	pthread_cond_destroy(&prog.cond);
	if (rc < 0)
		ss_error_print(stderr, ss_train_prog, rc);
	ss_sync_destroy(&sync);
	ss_fabric_close(&fabric);
	/* with a sync engine the replica is its memory */
	if (c.sync.algo == SS_SYNC_NONE && params)
		ss_topo_free(params, len * sizeof(float));
	if (c.train.adagrad_acc)
		ss_topo_free(c.train.adagrad_acc, len * sizeof(float));
	ss_plan_free(&plan);
	ss_topo_close(&topo);
	free(c.addrs);
	free(c.peers);
	ss_strings_free(&c.owned, c.n_owned);
	return rc == SS_EUSAGE ? SS_EXIT_USAGE :
	       rc < 0	       ? SS_EXIT_FAILURE :
				 SS_EXIT_OK;
}
