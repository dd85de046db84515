// SPDX-License-Identifier: BSD-2-Clause
/*
 * shadowsync train: who the peers are (--peers, --hostfile, Slurm, the
 * launcher's environment: the library's ss_job_find()), and what to say
 * when a rejoining rank finds none.
 */
#include <errno.h>
#include <unistd.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "train_cmd.h"

/*
 * The peers: --peers, else --hostfile, else Slurm's node list, else the
 * launcher's local tasks; the rank: --rank, else the launcher's
 * environment.  Without any: a world of one (ss_job_find).
 */
int ss_train_peers(struct ss_train_cmd *c)
{
	struct ss_job_request req;
	int rc;

	ss_job_request_init(&req);
	req.peers = c->peers;
	req.hostfile = c->hostfile;
	req.port = (int)c->port;
	req.rank = c->rank_given ? c->fabric.rank : -1;
	rc = ss_job_find(&c->job, &req);
	if (rc < 0)
		return rc;
	c->fabric.rank = ss_job_rank(c->job);
	c->fabric.world = ss_job_world(c->job);
	c->fabric.addrs = ss_job_addrs_of(c->job);
	if (ss_job_source(c->job))
		ss_log_info("rank %d of %d (from %s)", c->fabric.rank,
			    c->fabric.world, ss_job_source(c->job));
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
