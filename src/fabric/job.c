// SPDX-License-Identifier: BSD-2-Clause
/*
 * A job's ranks: the address every rank listens on and which of them this
 * process is, from what the user gives (a list, a host file) or what the
 * launcher says (Slurm's node list; the rank and world of Slurm, Open MPI,
 * PMI or torchrun).  The rules of `shadowsync train`, in the library so
 * that a program of the user's (the Python package) finds its peers the
 * same way.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/options.h"
#include "fabric_internal.h"

struct ss_job {
	int rank, world;
	const char *source; /* who said the rank; NULL: nobody (rank 0) */
	const char **addrs; /* world pointers into owned or the list */
	char **owned; /* addresses made here */
	int n_owned;
	char *list; /* a copy of @peers, cut at its commas */
	char alone[64]; /* a world of one's own address */
};

void ss_job_request_init_size(struct ss_job_request *req, size_t size)
{
	struct ss_job_request d = { .size = sizeof(d),
				    .rank = -1,
				    .port = 7000 };

	ss__options_out(req, size, &d, sizeof(d));
}

/* "host:port" into job->owned; returns it, or NULL (-ENOMEM recorded). */
static char *ss_job_own(struct ss_job *job, const char *host, long port)
{
	char **grown = realloc(job->owned,
			       (size_t)(job->n_owned + 1) * sizeof(char *));

	if (!grown) {
		ss_error_set(-ENOMEM, NULL, NULL, "peers");
		return NULL;
	}
	job->owned = grown;
	if (asprintf(&job->owned[job->n_owned], "%s:%ld", host, port) < 0) {
		ss_error_set(-ENOMEM, NULL, NULL, "peers");
		return NULL;
	}
	return job->owned[job->n_owned++];
}

/* The list: every entry a rank, a host without a port taking @port. */
static int ss_job_from_list(struct ss_job *job, const char *peers,
			    const char *name, int port)
{
	char *rest, *tok;
	int n = 0;

	job->list = strdup(peers);
	if (!job->list)
		return ss_error_set(-ENOMEM, NULL, NULL, "peers");
	rest = job->list;
	while ((tok = strsep(&rest, ",")) != NULL) {
		/* an empty entry is not skipped over: it would renumber */
		if (!*tok)
			return ss_error_set(
				SS_EUSAGE, "an empty entry",
				"separate the host:port of each rank by one "
				"comma, none at either end",
				"%s entry %d", name, n + 1);
		if (n == SS_FABRIC_MAX_PEERS)
			return ss_error_set(SS_EUSAGE, "too many ranks", NULL,
					    "%s: more than %d", name,
					    SS_FABRIC_MAX_PEERS);
		/* a name, an IPv4 address or [an IPv6 one], without a port */
		if (!strchr(tok, ':') ||
		    (tok[0] == '[' && tok[strlen(tok) - 1] == ']')) {
			tok = ss_job_own(job, tok, port);
			if (!tok)
				return -ENOMEM;
		}
		job->addrs[n++] = tok;
	}
	return n;
}

/* Slurm's node list: its tasks spread in blocks over the nodes. */
static int ss_job_from_slurm(struct ss_job *job, const char *nodelist,
			     int world, int port)
{
	char **hosts = NULL;
	int n = 0, rc = ss_nodelist_expand(nodelist, &hosts, &n);

	if (rc < 0)
		return ss_error_prefix("SLURM_JOB_NODELIST");
	for (int r = 0; r < world; r++) {
		int per = (world + n - 1) / n; /* tasks per node */

		job->addrs[r] = ss_job_own(job, hosts[r / per], port + r % per);
		if (!job->addrs[r]) {
			ss_strings_free(&hosts, n);
			return -ENOMEM;
		}
	}
	ss_strings_free(&hosts, n);
	return world;
}

/*
 * Whether the launcher says all its @world tasks run on this host
 * (torchrun's LOCAL_WORLD_SIZE, Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE):
 * then they listen on 127.0.0.1, at @port + rank.
 */
static bool ss_job_all_local(int world)
{
	static const char *const vars[] = { "LOCAL_WORLD_SIZE",
					    "OMPI_COMM_WORLD_LOCAL_SIZE" };

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);
		char *end;
		long n;

		if (!v)
			continue;
		n = strtol(v, &end, 10);
		if (end != v && !*end && n == world)
			return true;
	}
	return false;
}

static int ss_job_addrs(struct ss_job *job, const struct ss_job_request *req,
			const char *launcher, int lworld)
{
	const char *nodelist = getenv("SLURM_JOB_NODELIST");
	int rc, n;

	if (req->peers)
		return ss_job_from_list(job, req->peers,
					req->peers_name ? req->peers_name :
							  "--peers",
					req->port);
	if (req->hostfile) {
		rc = ss_hostfile_read(req->hostfile, req->port, &job->owned,
				      &job->n_owned);
		if (rc < 0)
			return rc;
		for (n = 0; n < job->n_owned; n++)
			job->addrs[n] = job->owned[n];
		return n;
	}
	/* shadowsync launch -- PROGRAM: the peers it gave its ranks */
	if (launcher && !strcmp(launcher, "shadowsync launch") &&
	    getenv("SS_PEERS"))
		return ss_job_from_list(job, getenv("SS_PEERS"), "SS_PEERS",
					req->port);
	if (launcher && nodelist && !strcmp(launcher, "Slurm"))
		return ss_job_from_slurm(job, nodelist, lworld, req->port);
	if (launcher && lworld > 1 && ss_job_all_local(lworld)) {
		for (n = 0; n < lworld; n++) {
			job->addrs[n] =
				ss_job_own(job, "127.0.0.1", req->port + n);
			if (!job->addrs[n])
				return -ENOMEM;
		}
		return n;
	}
	/* a world of one, on a port of its own; even, so that a second
	 * endpoint at port + 1 (its tables') meets no other process's */
	snprintf(job->alone, sizeof(job->alone), "127.0.0.1:%d",
		 20000 + 2 * (int)(getpid() % 10000));
	job->addrs[0] = job->alone;
	return 1;
}

int ss_job_find(struct ss_job **out, const struct ss_job_request *given)
{
	struct ss_job_request copy, *req = &copy;
	const char *launcher = NULL, *rank_name;
	int lrank = 0, lworld = 0, n, rc;
	struct ss_job *job;

	*out = NULL;
	ss_job_request_init(&copy);
	rc = ss__options_in(&copy, sizeof(copy), given, sizeof(copy),
			    "ss_job_request");
	if (rc < 0)
		return rc;
	if (req->port < 1 || req->port > 65535)
		return ss_error_set(SS_EUSAGE, "not a port", NULL, "port %d",
				    req->port);
	rank_name = req->rank_name ? req->rank_name : "--rank";
	job = calloc(1, sizeof(*job));
	if (job)
		job->addrs = calloc(SS_FABRIC_MAX_PEERS, sizeof(char *));
	if (!job || !job->addrs) {
		free(job);
		return ss_error_set(-ENOMEM, NULL, NULL, "peers");
	}
	if (ss_launcher_rank(&lrank, &lworld, &launcher) < 0)
		launcher = NULL;
	ss_error_clear();
	n = ss_job_addrs(job, req, launcher, lworld);
	if (n < 0) {
		rc = n;
		goto err;
	}
	job->world = n;
	job->rank = req->rank >= 0 ? req->rank : launcher ? lrank : 0;
	job->source = req->rank >= 0 ? rank_name : launcher;
	if (launcher && req->rank < 0 && lworld != n) {
		rc = ss_error_set(SS_EUSAGE, "the peer list does not match",
				  "give as many peers as the launcher starts "
				  "tasks",
				  "%s says %d tasks, the peers are %d",
				  launcher, lworld, n);
		goto err;
	}
	if (job->rank >= n) {
		rc = ss_error_set(SS_EUSAGE, "not in the peer list",
				  "ranks count from 0 in peer order",
				  "%s %d of %d peers", rank_name, job->rank, n);
		goto err;
	}
	*out = job;
	return 0;
err:
	ss_job_free(&job);
	return rc;
}

void ss_job_free(struct ss_job **job)
{
	if (!job || !*job)
		return;
	ss_strings_free(&(*job)->owned, (*job)->n_owned);
	free((*job)->addrs);
	free((*job)->list);
	free(*job);
	*job = NULL;
}

int ss_job_rank(const struct ss_job *job)
{
	return job->rank;
}

int ss_job_world(const struct ss_job *job)
{
	return job->world;
}

const char *const *ss_job_addrs_of(const struct ss_job *job)
{
	return job->addrs;
}

const char *ss_job_source(const struct ss_job *job)
{
	return job->source;
}
