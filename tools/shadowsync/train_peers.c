// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync train: who the peers are (--peers, --hostfile, Slurm, the
 * launcher's environment).
 */
#include <errno.h>
#include <unistd.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "train_cmd.h"

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

/* "@host:--port", kept in c->owned until the command ends. */
static int ss_train_own_addr(struct ss_train_cmd *c, const char *host)
{
	char **grown =
		realloc(c->owned, (size_t)(c->n_owned + 1) * sizeof(char *));

	if (!grown)
		return ss_error_set(-ENOMEM, NULL, NULL, "peers");
	c->owned = grown;
	if (asprintf(&c->owned[c->n_owned], "%s:%ld", host, c->port) < 0)
		return ss_error_set(-ENOMEM, NULL, NULL, "peers");
	c->n_owned++;
	return 0;
}

/*
 * The peers: --peers, else --hostfile, else Slurm's node list; the rank:
 * --rank, else the launcher's environment.  Without any: a world of one.
 */
int ss_train_peers(struct ss_train_cmd *c)
{
	static char alone[64];
	const char *launcher = NULL, *nodelist = getenv("SLURM_JOB_NODELIST");
	char *rest = c->peers, *tok;
	int lrank = 0, lworld = 0, n = 0, rc;

	if (ss_launcher_rank(&lrank, &lworld, &launcher) < 0)
		launcher = NULL;
	if (!c->rank_given && launcher)
		c->fabric.rank = lrank;
	c->addrs = calloc(SS_FABRIC_MAX_PEERS, sizeof(char *));
	if (!c->addrs)
		return ss_error_set(-ENOMEM, NULL, NULL, "peers");
	if (c->peers) {
		/* every entry is a rank: an empty one is not skipped over */
		while ((tok = strsep(&rest, ",")) != NULL) {
			if (!*tok)
				return ss_error_set(
					SS_EUSAGE, "an empty entry",
					"separate the host:port of each rank by "
					"one comma, none at either end",
					"--peers entry %d", n + 1);
			if (n == SS_FABRIC_MAX_PEERS)
				return ss_error_set(SS_EUSAGE, "too many ranks",
						    NULL,
						    "--peers: more than %d",
						    SS_FABRIC_MAX_PEERS);
			/* a host without a port takes --port, as in a host
			 * file: a name, an IPv4 address or [an IPv6 one] */
			if (!strchr(tok, ':') ||
			    (tok[0] == '[' && tok[strlen(tok) - 1] == ']')) {
				rc = ss_train_own_addr(c, tok);
				if (rc < 0)
					return rc;
				tok = c->owned[c->n_owned - 1];
			}
			c->addrs[n++] = tok;
		}
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

int ss_train_connect_failed(const struct ss_train_cmd *c, int rc)
{
	struct ss_error e;

	if (!c->rejoin || rc != -ETIMEDOUT)
		return rc;
	e = *ss_last_error(); /* set below overwrites it */
	return ss_error_set(
		rc, e.why,
		"this rank was started again (--rejoin) and no other rank "
		"answered: if they have finished, the job has ended and there "
		"is nothing to rejoin; else see their messages",
		"%s", e.what);
}
