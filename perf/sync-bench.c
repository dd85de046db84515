// SPDX-License-Identifier: BSD-2-Clause
/*
 * sync-bench: the sync layer's costs.
 *
 *   sync-bench kernels [--mib N]      each kernel's memory throughput against
 *                                     memcpy on the same buffers, same run
 *   sync-bench rounds [--max-mib N] [--ranks LIST]
 *                                     round time of each algorithm against
 *                                     model size and ranks, over shm
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shadowsync/shadowsync.h"
#include "sync/sync_internal.h"

static const char prog[] = "sync-bench";

/* Best of @reps timings of @fn, in seconds. */
#define BEST_OF(reps, secs, stmt)                                      \
	do {                                                           \
		secs = 1e30;                                           \
		for (int r_ = 0; r_ < (reps); r_++) {                  \
			uint64_t t0_ = ss_now_ns();                    \
			stmt;                                          \
			double d_ = (double)(ss_now_ns() - t0_) / 1e9; \
			if (d_ < secs)                                 \
				secs = d_;                             \
		}                                                      \
	} while (0)

static float *alloc_floats(size_t n, float value)
{
	float *p = aligned_alloc(64, n * sizeof(float));

	if (!p) {
		fprintf(stderr, "%s: out of memory for %zu floats\n", prog, n);
		exit(1);
	}
	for (size_t i = 0; i < n; i++)
		p[i] = value + (float)(i % 97) * 1e-3f;
	return p;
}

static int cmp_double(const void *x, const void *y)
{
	double a = *(const double *)x, b = *(const double *)y;

	return a < b ? -1 : a > b;
}

/*
 * Each kernel is timed in turn with memcpy on the same buffers, rep by
 * rep, and its ratio is the median of the reps' ratios, each against the
 * memcpy just before it: on a shared machine memory bandwidth moves
 * between runs and within one (memcpy itself 12 to 18 GB/s here from
 * memory), and a memcpy timed once at the start let a kernel's ratio
 * swing from 0.5x to 1.9x between runs of the same build.  Best of 7
 * reps, more for small arrays (a rep at 4 MiB lasts about 0.1 ms).
 */
static int kernels(size_t mib)
{
	size_t n = mib * 1024 * 1024 / sizeof(float);
	float *a = alloc_floats(n, 1), *b = alloc_floats(n, 2);
	float *c = alloc_floats(n, 3), *d = alloc_floats(n, 4);
	const float *others[] = { c, d }; /* own is b: 4 arrays */
	double bytes = (double)n * sizeof(float), ratio[128];
	struct {
		const char *name;
		double streams; /* arrays read plus arrays written */
		double secs, memcpy_secs, ratio;
	} k[7];
	int nk = 0, reps = mib >= 64 ? 7 : mib >= 4 ? (int)(512 / mib) : 128;

#define KERNEL(label, streams_, stmt)                                     \
	do {                                                              \
		k[nk].name = label;                                       \
		k[nk].streams = streams_;                                 \
		k[nk].secs = k[nk].memcpy_secs = 1e30;                    \
		for (int r = 0; r < reps; r++) {                          \
			double tm_, tk_;                                  \
			BEST_OF(1, tm_, memcpy(a, b, n * sizeof(float))); \
			BEST_OF(1, tk_, stmt);                            \
			ratio[r] = streams_ / 2.0 * tm_ / tk_;            \
			if (tm_ < k[nk].memcpy_secs)                      \
				k[nk].memcpy_secs = tm_;                  \
			if (tk_ < k[nk].secs)                             \
				k[nk].secs = tk_;                         \
		}                                                         \
		qsort(ratio, (size_t)reps, sizeof(double), cmp_double);   \
		k[nk].ratio = ratio[reps / 2];                            \
		nk++;                                                     \
	} while (0)
	KERNEL("copy (snapshot)", 2, ss__copy(a, b, n));
	KERNEL("average of 3", 4, ss__average(a, b, others, 2, n));
	KERNEL("apply w += t - s", 4, ss__apply(a, b, c, n));
	KERNEL("easgd step", 4, ss__easgd(a, b, c, n, 0.1f));
	KERNEL("gossip step", 3, ss__gossip(a, b, n, 0.5f));
	KERNEL("bmuf step", 6, ss__bmuf(a, c, d, n, 0.5f, 1.0f, false));
	KERNEL("add c += d", 3, ss__add(a, b, n));
#undef KERNEL

	printf("kernels on %zu MiB arrays, %d reps, each a memcpy of the same size\n"
	       "then the kernel; GB/s: the best rep; vs memcpy: the median of the\n"
	       "reps' ratios to the memcpy just before\n\n",
	       mib, reps);
	printf("%-18s %10s %12s %10s %8s\n", "kernel", "GB/s", "memcpy GB/s",
	       "vs memcpy", "goal");
	{
		double best = 1e30; /* perf/sim/calibrate reads this line */

		for (int i = 0; i < nk; i++)
			if (k[i].memcpy_secs < best)
				best = k[i].memcpy_secs;
		printf("%-18s %10.2f %12.2f %10.2f %8s\n", "memcpy",
		       2 * bytes / best / 1e9, 2 * bytes / best / 1e9, 1.0, "");
	}
	for (int i = 0; i < nk; i++)
		printf("%-18s %10.2f %12.2f %10.2f %8s\n", k[i].name,
		       k[i].streams * bytes / k[i].secs / 1e9,
		       2 * bytes / k[i].memcpy_secs / 1e9, k[i].ratio,
		       k[i].ratio >= 0.8 ? "met" : "MISSED");
	free(a);
	free(b);
	free(c);
	free(d);
	return 0;
}

struct round_job {
	int world, rounds, port_base;
	size_t n;
	enum ss_sync_algo algo;
	uint64_t key;
	double *median_us; /* shared: rank 0's result */
};

static int round_rank(struct round_job *job, int rank)
{
	char buf[8][64];
	const char *addrs[8];
	struct ss_fabric_options fo;
	struct ss_sync_options so;
	struct ss_fabric *f = NULL;
	struct ss_sync *s = NULL;
	double t[64];
	int rc;

	for (int i = 0; i < job->world; i++) {
		snprintf(buf[i], sizeof(buf[i]), "127.0.0.1:%d",
			 job->port_base + i);
		addrs[i] = buf[i];
	}
	ss_fabric_options_init(&fo);
	fo.transport = SS_TRANSPORT_SHM;
	fo.rank = rank;
	fo.world = job->world;
	fo.addrs = addrs;
	fo.job_key = job->key;
	fo.timeout_ms = 60000;
	ss_sync_options_init(&so, job->algo);
	so.round_timeout_ms = 60000;
	rc = ss_fabric_open(&f, &fo);
	if (rc == 0)
		rc = ss_sync_create(&s, f, job->n, &so);
	if (rc == 0)
		rc = ss_fabric_connect(f);
	if (rc == 0)
		rc = ss_sync_begin(s);
	for (int r = 0; rc == 0 && r < job->rounds; r++) {
		uint64_t t0 = ss_now_ns();

		rc = ss_sync_round(s);
		t[r] = (double)(ss_now_ns() - t0) / 1e3;
	}
	if (rc == 0)
		rc = ss_sync_barrier(s);
	if (rc == 0 && rank == 0) {
		qsort(t, (size_t)job->rounds, sizeof(double), cmp_double);
		*job->median_us = t[job->rounds / 2];
	}
	if (rc < 0)
		ss_error_print(stderr, prog, rc);
	ss_sync_destroy(&s);
	ss_fabric_close(&f);
	return rc < 0;
}

static int rounds(size_t max_mib, const int *worlds, int n_worlds)
{
	static const enum ss_sync_algo algos[] = { SS_SYNC_MA, SS_SYNC_BMUF,
						   SS_SYNC_EASGD,
						   SS_SYNC_GOSSIP };
	double *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
			      MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	printf("median round time over shm, 5 rounds, no trainers (ms)\n\n");
	printf("%-8s %6s %5s %10s %14s\n", "algo", "MiB", "ranks", "round ms",
	       "GB/s per rank");
	for (size_t mib = 1; mib <= max_mib; mib *= 4) {
		for (int wi = 0; wi < n_worlds; wi++) {
			for (size_t a = 0; a < sizeof(algos) / sizeof(algos[0]);
			     a++) {
				struct round_job job = {
					.world = worlds[wi],
					.rounds = 5,
					.port_base = 30000 +
						     (int)(getpid() % 1000) * 8,
					.n = mib * 1024 * 1024 / sizeof(float),
					.algo = algos[a],
					.key = ss_now_ns(),
					.median_us = shared,
				};
				int failed = 0;
				double traffic;

				for (int r = 0; r < job.world; r++)
					if (fork() == 0)
						_exit(round_rank(&job, r));
				for (int r = 0; r < job.world; r++) {
					int st;

					wait(&st);
					failed |= !WIFEXITED(st) ||
						  WEXITSTATUS(st);
				}
				if (failed) {
					fprintf(stderr, "%s: a rank failed\n",
						prog);
					return 1;
				}
				/* bytes each rank sends: S-MA/BMUF 2(N-1)/N n,
				 * EASGD (N-1)/N n each way, gossip n read */
				traffic = (double)mib * 1048576 *
					  (algos[a] == SS_SYNC_GOSSIP ?
						   1.0 :
					   algos[a] == SS_SYNC_EASGD ?
						   2.0 * (job.world - 1) /
							   job.world :
						   2.0 * (job.world - 1) /
							   job.world);
				printf("%-8s %6zu %5d %10.2f %14.2f\n",
				       ss_sync_algo_name(algos[a]), mib,
				       job.world, *shared / 1e3,
				       traffic / (*shared / 1e6) / 1e9);
				fflush(stdout);
			}
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	int worlds[8] = { 2, 4 }, n_worlds = 2;
	long mib = 64, max_mib = 64;

	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		printf("usage: sync-bench kernels [--mib N]\n"
		       "       sync-bench rounds [--max-mib N] [--ranks 2,4]\n");
		return argc < 2 ? 2 : 0;
	}
	for (int i = 2; i < argc; i++) {
		int rc = 0;

		if (!strcmp(argv[i], "--mib") && i + 1 < argc)
			rc = ss_parse_long("--mib", argv[++i], 1, 4096, &mib);
		else if (!strcmp(argv[i], "--max-mib") && i + 1 < argc)
			rc = ss_parse_long("--max-mib", argv[++i], 1, 4096,
					   &max_mib);
		else if (!strcmp(argv[i], "--ranks") && i + 1 < argc) {
			char *list = argv[++i], *tok;

			n_worlds = 0;
			for (tok = strtok(list, ","); tok && n_worlds < 8;
			     tok = strtok(NULL, ",")) {
				long w;

				rc = ss_parse_long("--ranks", tok, 2, 8, &w);
				if (rc < 0)
					break;
				worlds[n_worlds++] = (int)w;
			}
		} else
			rc = ss_error_set(SS_EUSAGE, "unknown option",
					  "sync-bench --help", "'%s'", argv[i]);
		if (rc < 0) {
			ss_error_print(stderr, prog, rc);
			return 2;
		}
	}
	if (!strcmp(argv[1], "kernels"))
		return kernels((size_t)mib);
	if (!strcmp(argv[1], "rounds"))
		return rounds((size_t)max_mib, worlds, n_worlds);
	fprintf(stderr, "%s: unknown benchmark '%s' (kernels, rounds)\n", prog,
		argv[1]);
	return 2;
}
