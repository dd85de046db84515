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

#include "train_cmd.h"

/* FNV-1a over the model's sizes: peers with another model are refused. */
uint64_t ss_layout_hash(const struct ss_model_config *m)
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
 * SIGTERM (launch stopping the ranks) or Ctrl-C during a save: remove the
 * half-written PATH.tmp, then die of the signal as before.  unlink() is
 * async-signal-safe; the path is set before the save and cleared after.
 */
static char ss_saving_tmp[4096 + sizeof(SS_CHECKPOINT_TMP_SUFFIX)];
static volatile sig_atomic_t ss_saving;

void ss_train_on_signal(int sig)
{
	if (ss_saving)
		unlink(ss_saving_tmp);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Saves this rank's replica (and Adagrad's accumulators, when it has
 * them), if it is the one that saves. */
int ss_train_save(const struct ss_train_cmd *c, const float *params,
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
