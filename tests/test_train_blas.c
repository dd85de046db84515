// SPDX-License-Identifier: BSD-2-Clause
/* Which BLIS kernels the trainer asks for, and that they compute right. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cblas.h>

#include "shadowsync/train.h"

enum vendor { OTHER, INTEL, AMD };

static bool wants(enum vendor v, bool avx512, bool env, unsigned int family,
		  unsigned int model)
{
	struct ss_cpu_facts cpu = { .intel = v == INTEL,
				    .amd = v == AMD,
				    .avx512 = avx512,
				    .env_arch = env,
				    .family = family,
				    .model = model };
	const char *why = NULL;
	bool skx = ss_blas_wants_skx(&cpu, &why);

	cr_assert(why && *why, "a reason for family %#x model %#x", family,
		  model);
	return skx;
}

Test(blas, skx_where_blis_does_not_know_the_avx512_cpu)
{
	/* Ice Lake-SP, Sapphire Rapids, Emerald Rapids: not in BLIS's table */
	cr_assert(wants(INTEL, true, false, 6, 0x6a));
	cr_assert(wants(INTEL, true, false, 6, 0x8f));
	cr_assert(wants(INTEL, true, false, 6, 0xcf));
	/* Skylake-SP and Cascade Lake: BLIS counts their FMA units itself */
	cr_assert_not(wants(INTEL, true, false, 6, 0x55));
	/* AMD Zen 5 (family 0x1a): BLIS 0.9 would run its generic kernels */
	cr_assert(wants(AMD, true, false, 0x1a, 0x02));
	/* Zen 4 (0x19): BLIS takes its zen3 kernels, its own choice */
	cr_assert_not(wants(AMD, true, false, 0x19, 0x11));
	/* no usable AVX-512, another vendor, or the user has chosen */
	cr_assert_not(wants(INTEL, false, false, 6, 0x8f));
	cr_assert_not(wants(AMD, false, false, 0x1a, 0x02));
	cr_assert_not(wants(OTHER, true, false, 6, 0x8f));
	cr_assert_not(wants(INTEL, true, true, 6, 0x8f));
	cr_assert_not(wants(AMD, true, true, 0x1a, 0x02));
}

/*
 * This CPU's family as Linux counts it (/proc/cpuinfo's "cpu family":
 * base plus extended), which the AMD rule compares.
 */
Test(blas, family_counts_as_linux_does)
{
	struct ss_cpu_facts cpu;
	FILE *f = fopen("/proc/cpuinfo", "r");
	char line[256];
	int family = -1;

	if (!f)
		cr_skip_test("no /proc/cpuinfo");
	while (family < 0 && fgets(line, sizeof(line), f))
		if (sscanf(line, "cpu family : %d", &family) != 1)
			family = -1;
	fclose(f);
	if (family < 0)
		cr_skip_test("no \"cpu family\" in /proc/cpuinfo");
	ss_cpu_facts_read(&cpu);
	cr_assert_eq(cpu.family, (unsigned int)family);
}

/* The kernels chosen for this machine, through the CBLAS call the dense
 * layers make, against a double-precision product. */
Test(blas, the_chosen_kernels_compute_the_product)
{
	enum { M = 37, N = 70, K = 45 };
	static float a[M * K], b[N * K], c[M * N];
	struct ss_cpu_facts cpu;
	const char *why, *arch;
	char note[256];
	bool skx;

	ss_cpu_facts_read(&cpu);
	skx = ss_blas_wants_skx(&cpu, &why);
	arch = ss_blas_setup(note, sizeof(note));
	cr_log_info("%s", note);
	if (skx)
		cr_assert_str_eq(arch, "skx", "%s", note);
	cr_assert(strstr(note, arch), "%s", note);
	for (int i = 0; i < M * K; i++)
		a[i] = (float)sin(i * 0.37);
	for (int i = 0; i < N * K; i++)
		b[i] = (float)cos(i * 0.11);
	/* C = A B^T, as the forward pass multiplies by the weights */
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, N, K, 1.0f, a,
		    K, b, K, 0.0f, c, N);
	for (int m = 0; m < M; m++)
		for (int n = 0; n < N; n++) {
			double want = 0;

			for (int k = 0; k < K; k++)
				want += (double)a[m * K + k] * b[n * K + k];
			cr_assert_float_eq(c[m * N + n], want, 1e-4,
					   "C[%d][%d]: %f, want %f", m, n,
					   c[m * N + n], want);
		}
}
