// SPDX-License-Identifier: BSD-2-Clause
/*
 * allreduce: MPI_Allreduce(MPI_IN_PLACE, ..., MPI_FLOAT, MPI_SUM) of each
 * size given (MiB), the anchor perf/vs-mpi holds S-MA's round against
 * (issue 40).  Built by perf/vs-mpi with mpicc (libopenmpi-dev), not by
 * make: the library does not link MPI.  Rank 0 prints one line a size:
 * MiB, then the median of 5 timed calls after one untimed, in ms (the
 * slowest rank's, each call's time the maximum over the ranks).
 *
 *   mpirun -np 2 build/perf/mpi-allreduce 1 4 16 64
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define REPS 5

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	int rank;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	for (int a = 1; a < argc; a++) {
		size_t mib = strtoul(argv[a], NULL, 10);
		size_t n = mib * 1024 * 1024 / sizeof(float);
		float *buf = malloc(n * sizeof(float));
		double t[REPS];

		if (!buf || !mib) {
			fprintf(stderr, "allreduce: '%s': no such size (MiB)\n",
				argv[a]);
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		for (size_t i = 0; i < n; i++)
			buf[i] = (float)(i % 1000) * 1e-3f;
		for (int r = -1; r < REPS; r++) {
			double t0, d;

			MPI_Barrier(MPI_COMM_WORLD);
			t0 = MPI_Wtime();
			MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT,
				      MPI_SUM, MPI_COMM_WORLD);
			d = MPI_Wtime() - t0;
			MPI_Allreduce(MPI_IN_PLACE, &d, 1, MPI_DOUBLE, MPI_MAX,
				      MPI_COMM_WORLD);
			if (r >= 0)
				t[r] = d;
		}
		qsort(t, REPS, sizeof(double), cmp_double);
		if (rank == 0)
			printf("%zu %.3f\n", mib, t[REPS / 2] * 1e3);
		fflush(stdout);
		free(buf);
	}
	MPI_Finalize();
	return 0;
}
