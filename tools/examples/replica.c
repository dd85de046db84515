// SPDX-License-Identifier: BSD-2-Clause
/*
 * The library from a C program of your own, with only the public headers:
 * a replica of N floats kept in sync across the ranks of a job by S-MA.
 *
 *   cc replica.c -o replica $(pkg-config --cflags --libs shadowsync)
 *   shadowsync launch -n 2 -- ./replica          (or srun, mpirun, ...)
 *
 * Each rank fills its replica with its rank number, runs one round, and
 * prints what it holds: the mean of the ranks, on every rank.  Where a
 * real program trains (its threads writing the replica while the shadow
 * thread runs rounds: ss_shadow_start), this one only waits.
 */
#include <shadowsync/shadowsync.h>
#include <stdio.h>
#include <stdlib.h>

#define N 1000

static int fail(const char *prog, int rc)
{
	ss_error_print(stderr, prog, rc);
	return 1;
}

int main(void)
{
	struct ss_job_request req;
	struct ss_fabric_options fo;
	struct ss_sync_options so;
	struct ss_job *job = NULL;
	struct ss_fabric *fabric = NULL;
	struct ss_sync *sync = NULL;
	const char *peers = getenv("SS_PEERS"), *rank = getenv("SS_RANK");
	float *w;
	int rc;

	/* who the ranks are: launch's SS_PEERS and SS_RANK, else Slurm,
	 * mpirun or torchrun, as `shadowsync train` finds them */
	ss_job_request_init(&req);
	req.peers = peers;
	req.rank = rank ? atoi(rank) : -1;
	rc = ss_job_find(&job, &req);
	if (rc < 0)
		return fail("replica", rc);

	ss_fabric_options_init(&fo);
	fo.rank = ss_job_rank(job);
	fo.world = ss_job_world(job);
	fo.addrs = ss_job_addrs_of(job);
	if (getenv("SS_TRANSPORT") &&
	    (rc = ss_transport_parse("SS_TRANSPORT", getenv("SS_TRANSPORT"),
				     &fo.transport)) < 0)
		return fail("replica", rc);
	if (getenv("SS_JOB_KEY"))
		fo.job_key = strtoull(getenv("SS_JOB_KEY"), NULL, 10);
	ss_sync_options_init(&so, SS_SYNC_MA);

	rc = ss_fabric_open(&fabric, &fo);
	if (rc == 0)
		rc = ss_sync_create(&sync, fabric, N, &so);
	if (rc == 0) {
		w = ss_sync_params(sync); /* registered memory: the replica */
		for (int i = 0; i < N; i++)
			w[i] = (float)fo.rank;
		rc = ss_fabric_connect(fabric);
	}
	if (rc == 0)
		rc = ss_sync_begin(sync); /* every rank is here */
	if (rc == 0)
		rc = ss_sync_round(sync); /* or ss_shadow_start() */
	if (rc == 0) {
		printf("rank %d of %d holds %g (the mean of the ranks)\n",
		       fo.rank, fo.world, (double)ss_sync_params(sync)[0]);
		rc = ss_sync_finish(sync, NULL);
	}
	if (rc < 0)
		fail("replica", rc);
	ss_sync_destroy(&sync);
	ss_fabric_close(&fabric);
	ss_job_free(&job);
	return rc < 0;
}
