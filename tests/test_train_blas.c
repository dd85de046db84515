// SPDX-License-Identifier: BSD-2-Clause
/* Which BLIS kernels the trainer asks for, and that they compute right. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include <cblas.h>

#include "shadowsync/train.h"

static bool wants(bool intel, bool avx512, bool env, unsigned int model)
{
	struct ss_cpu_facts cpu = { .intel = intel,
				    .avx512 = avx512,
				    .env_arch = env,
				    .family = 6,
				    .model = model };
	const char *why = NULL;
	bool skx = ss_blas_wants_skx(&cpu, &why);

	cr_assert(why && *why, "a reason for model %#x", model);
	return skx;
}

Test(blas, skx_where_blis_does_not_know_the_avx512_cpu)
{
	/* Ice Lake-SP, Sapphire Rapids, Emerald Rapids: not in BLIS's table */
	cr_assert(wants(true, true, false, 0x6a));
	cr_assert(wants(true, true, false, 0x8f));
	cr_assert(wants(true, true, false, 0xcf));
	/* Skylake-SP and Cascade Lake: BLIS counts their FMA units itself */
	cr_assert_not(wants(true, true, false, 0x55));
	/* no usable AVX-512, not Intel, or the user has chosen */
	cr_assert_not(wants(true, false, false, 0x8f));
	cr_assert_not(wants(false, true, false, 0x8f));
	cr_assert_not(wants(true, true, true, 0x8f));
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
