// SPDX-License-Identifier: BSD-2-Clause
/*
 * Several clients look up and push at once while the proxy thread serves
 * them and the owner's applier applies: run under ThreadSanitizer by `make
 * check`.  Two ranks over shm, the second a forked process that owns the
 * rows the clients push to; once flushed, every row holds the clients'
 * summed SGD steps (one applier: nothing is lost to a race).
 */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ranks.h"
#include "scenario.h"

#define CLIENTS 3
#define ROUNDS 50
#define ROWS 256
#define WIDTH 4
#define N 32 /* rows a lookup */

struct client {
	struct ss_table *t;
	int c;
	const uint64_t *ids;
	int bad;
};

/* Look up N rows of rank 1 two slots deep, push 1.0 to each, ROUNDS times. */
static void *client_main(void *arg)
{
	struct client *cl = arg;
	float g[N * WIDTH];
	const float *rows[N];

	for (int i = 0; i < N * WIDTH; i++)
		g[i] = 1.0f;
	for (int k = 0; k < ROUNDS; k++) {
		int slot = k & 1;

		if (ss_table_lookup(cl->t, cl->c, slot, cl->ids, N) ||
		    ss_table_wait(cl->t, cl->c, slot, rows) ||
		    ss_table_push(cl->t, cl->c, cl->ids, g, N))
			cl->bad++;
	}
	return NULL;
}

static int rank_main(int rank, int port_base, uint64_t key, _Atomic int *phase)
{
	char buf[2][64];
	const char *addrs[2];
	struct ss_fabric_options fo;
	struct ss_table_options o;
	struct ss_table *t = NULL;
	struct client cl[CLIENTS];
	pthread_t th[CLIENTS];
	uint64_t ids[N];
	int n = 0;

	ranks_addrs(2, port_base, buf, addrs);
	ss_fabric_options_init(&fo);
	fo.transport = SS_TRANSPORT_SHM;
	fo.rank = rank;
	fo.world = 2;
	fo.addrs = addrs;
	fo.job_key = key;
	ss_table_options_init(&o);
	o.rows = ROWS;
	o.width = WIDTH;
	o.lr = 1.0f / 1024;
	o.clients = CLIENTS;
	o.max_rows = N;
	o.init_bound = 1.0f / 1024;
	check(ss_table_open(&t, &o, &fo) == 0, "open: %s",
	      ss_last_error()->why);
	if (rank == 1) {
		uint64_t deadline = ss_deadline_ns(60000);

		while (atomic_load(phase) == 0 && !ss_deadline_passed(deadline))
			ss_sleep_ns(1000000);
		ss_table_close(&t);
		return 0;
	}
	for (uint32_t r = 0; n < N; r++)
		if (ss_table_owner(t, 0, r) == 1)
			ids[n++] = r;
	for (int c = 0; c < CLIENTS; c++) {
		cl[c] = (struct client){ t, c, ids, 0 };
		check(pthread_create(&th[c], NULL, client_main, &cl[c]) == 0,
		      "client %d", c);
	}
	for (int c = 0; c < CLIENTS; c++)
		pthread_join(th[c], NULL);
	for (int c = 0; c < CLIENTS; c++)
		check(cl[c].bad == 0, "client %d: %d calls failed: %s", c,
		      cl[c].bad, ss_last_error()->why);
	check(ss_table_flush(t, 20000) == 0, "flush");
	{
		const float *rows[N];
		float init[WIDTH];

		check(ss_table_lookup(t, 0, 0, ids, N) == 0, "lookup");
		check(ss_table_wait(t, 0, 0, rows) == 0, "wait");
		for (int i = 0; i < N; i++) {
			ss_table_init_row(o.seed, 0, (uint32_t)ids[i], WIDTH,
					  o.init_bound, init);
			for (int j = 0; j < WIDTH; j++) {
				float want = init[j] -
					     (float)(CLIENTS * ROUNDS) / 1024;

				check(fabsf(rows[i][j] - want) < 1e-5f,
				      "row %llu [%d]: %g, want %g",
				      (unsigned long long)ids[i], j, rows[i][j],
				      want);
			}
		}
	}
	atomic_store(phase, 1);
	ss_table_close(&t);
	return 0;
}

SCENARIO(table_threads, clients_push_at_once_and_nothing_is_lost)
{
	int port_base = ranks_port_base(), status;
	uint64_t key = ((uint64_t)getpid() << 16) ^ ss_now_ns();
	_Atomic int *phase = mmap(NULL, sizeof(*phase), PROT_READ | PROT_WRITE,
				  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	pid_t pid;
	int rc;

	check(phase != MAP_FAILED, "mmap");
	atomic_store(phase, 0);
	pid = fork();
	check(pid >= 0, "fork");
	if (pid == 0)
		_exit(rank_main(1, port_base, key, phase) ? 1 : 0);
	rc = rank_main(0, port_base, key, phase);
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
