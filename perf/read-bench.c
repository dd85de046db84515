// SPDX-License-Identifier: BSD-2-Clause
/*
 * read-bench: the Criteo reader alone, for timing it from outside (time,
 * perf stat): every example of FILE, PASSES times (1), through
 * ss_reader_open() and ss_reader_next(), as eval and the trainers read.
 * Prints the examples read and a sum of one feature (so that nothing is
 * optimized away).  docs/perf.md, "Reading through zlib".
 *
 *   read-bench FILE [PASSES]
 */
#include <stdio.h>
#include <stdlib.h>

#include "shadowsync/shadowsync.h"

int main(int argc, char **argv)
{
	int passes = argc > 2 ? atoi(argv[2]) : 1, rc = 0;
	struct ss_reader *r;
	struct ss_example ex;
	unsigned long n = 0;
	double sum = 0;

	if (argc < 2 || argc > 3 || passes < 1) {
		fprintf(stderr, "usage: read-bench FILE [PASSES]\n");
		return 2;
	}
	for (int k = 0; k < passes && rc == 0; k++) {
		rc = ss_reader_open(&r, argv[1], 0, 0, SS_BAD_LINES_FAIL);
		if (rc < 0)
			break;
		while ((rc = ss_reader_next(r, &ex)) == 1) {
			n++;
			sum += ex.dense[0];
		}
		ss_reader_close(&r);
	}
	if (rc < 0) {
		ss_error_print(stderr, "read-bench", rc);
		return 1;
	}
	printf("%lu %g\n", n, sum);
	return 0;
}
