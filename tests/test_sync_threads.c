// SPDX-License-Identifier: BSD-2-Clause
/*
 * Trainer threads write the replica while the shadow thread synchronizes
 * it: run under ThreadSanitizer by `make check`.  The races between the
 * trainers and the shadow's kernels are the benign Hogwild ones annotated
 * in src/sync/kernels.c; anything else TSan finds fails the test.  Two
 * ranks over shm, the second a forked process.
 */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ranks.h"
#include "scenario.h"

#define NPARAMS 4096

struct trainer {
	struct ss_sync *sync;
	float *w;
	size_t from, to;
	atomic_bool *stop;
};

/*
 * A Hogwild trainer: lock-free updates on its half of the replica, and a
 * chunk of the data claimed now and then, as train's trainers do (the
 * claim's deadline reads the round timeout the shadow thread sets), and
 * waits for a round past the gap bound.
 */
static void *trainer_main(void *arg)
{
	struct trainer *t = arg;
	uint64_t chunk;

	for (unsigned it = 0; !atomic_load(t->stop); it++) {
		for (size_t i = t->from; i < t->to; i++)
			t->w[i] += 0.001f;
		ss_sync_add_iterations(t->sync, 1);
		if (it % 256 == 0 && ss_sync_claim(t->sync, &chunk) < 0)
			return (void *)1;
	}
	return NULL;
}

static int rank_main(int rank, int port_base, uint64_t key)
{
	struct ss_sync_options so;
	struct ss_fabric *f = NULL;
	struct ss_sync *s = NULL;
	struct trainer t[2];
	pthread_t th[2];
	atomic_bool stop = false;
	struct ss_sync_stats st;
	float *w;

	check(ranks_fabric_open(rank, 2, port_base, key, 0, &f) == 0, "open");
	ss_sync_options_init(&so, SS_SYNC_MA);
	so.max_gap = 16; /* the trainers' waits for a round, checked too */
	check(ss_sync_create(&s, f, NPARAMS, &so) == 0, "sync");
	w = ss_sync_params(s);
	for (int i = 0; i < NPARAMS; i++)
		w[i] = (float)rank;
	check(ss_fabric_connect(f) == 0, "connect");
	check(ss_sync_begin(s) == 0, "begin");
	check(ss_shadow_start(s, NULL, NULL) == 0, "shadow");
	for (int i = 0; i < 2; i++) {
		t[i] = (struct trainer){ s, w, (size_t)i * NPARAMS / 2,
					 (size_t)(i + 1) * NPARAMS / 2, &stop };
		check(pthread_create(&th[i], NULL, trainer_main, &t[i]) == 0,
		      "trainer %d", i);
	}
	/* the progress thread's reads, meanwhile */
	for (uint64_t end = ss_now_ns() + 300000000; ss_now_ns() < end;) {
		ss_sync_get_stats(s, &st);
		ss_sleep_ns(1000000);
	}
	atomic_store(&stop, true);
	for (int i = 0; i < 2; i++) {
		void *ret;

		pthread_join(th[i], &ret);
		check(ret == NULL, "trainer %d: a claim failed: %s", i,
		      ss_last_error()->why);
	}
	check(ss_shadow_stop(s) == 0, "the shadow thread failed");
	ss_sync_get_stats(s, &st);
	check(st.rounds > 0, "no round ran");
	check(st.iterations > 0, "no trainer iteration");
	{
		uint64_t waits;
		double waited;

		ss_sync_gap_waits(s, &waits, &waited);
		fprintf(stderr, "rank %d: %llu rounds, %llu waits for one\n",
			rank, (unsigned long long)st.rounds,
			(unsigned long long)waits);
	}
	check(ss_sync_barrier(s) == 0, "barrier");
	ss_sync_destroy(&s);
	ss_fabric_close(&f);
	return 0;
}

SCENARIO(sync_threads, trainers_write_while_the_shadow_runs)
{
	int port_base = ranks_port_base(), status;
	uint64_t key = ((uint64_t)getpid() << 16) ^ ss_now_ns();
	pid_t pid = fork();
	int rc;

	check(pid >= 0, "fork");
	if (pid == 0)
		_exit(rank_main(1, port_base, key) ? 1 : 0);
	rc = rank_main(0, port_base, key);
	if (rc) {
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return rc;
	}
	waitpid(pid, &status, 0);
	check(WIFEXITED(status) && WEXITSTATUS(status) == 0,
	      "rank 1 failed (status 0x%x; a TSan report exits 66)", status);
	return 0;
}
