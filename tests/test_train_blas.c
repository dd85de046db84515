// SPDX-License-Identifier: BSD-2-Clause
/* Which BLIS kernels the trainer asks for, and that they compute right. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "shadowsync/train.h"
#include "train/blas_kernels.h"

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

/*
 * C = A B^T of @m x @k and @n x @k, as the forward pass multiplies by the
 * weights, through the CBLAS call the dense layers make, against a
 * double-precision product; @label names the kernels in a failure.
 */
static void check_product(int m, int n, int k, const char *label)
{
	float *a = malloc(sizeof(float) * (size_t)(m * k));
	float *b = malloc(sizeof(float) * (size_t)(n * k));
	float *c = malloc(sizeof(float) * (size_t)(m * n));

	cr_assert(a && b && c);
	for (int i = 0; i < m * k; i++)
		a[i] = (float)sin(i * 0.37);
	for (int i = 0; i < n * k; i++)
		b[i] = (float)cos(i * 0.11);
	cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a,
		    k, b, k, 0.0f, c, n);
	for (int r = 0; r < m; r++)
		for (int col = 0; col < n; col++) {
			double want = 0;

			for (int i = 0; i < k; i++)
				want += (double)a[r * k + i] * b[col * k + i];
			cr_assert_float_eq(
				c[r * n + col], want, 1e-5 * (k + fabs(want)),
				"%s, %dx%dx%d: C[%d][%d]: %f, want %f", label,
				m, n, k, r, col, c[r * n + col], want);
		}
	free(a);
	free(b);
	free(c);
}

/* The kernels chosen for this machine, through the CBLAS call the dense
 * layers make, against a double-precision product. */
Test(blas, the_chosen_kernels_compute_the_product)
{
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
	check_product(37, 70, 45, note);
}

/* An AVX2 server CPU without AVX-512 (Zen 3, Haswell to Skylake client). */
#define AVX2_CPU                                                     \
	(SS__ISA_SSE3 | SS__ISA_SSSE3 | SS__ISA_AVX | SS__ISA_FMA3 | \
	 SS__ISA_AVX2)

static const struct ss__blas_kernels *kernels_named(const char *name)
{
	size_t n;
	const struct ss__blas_kernels *k = ss__blas_kernels(&n);

	for (size_t i = 0; i < n; i++)
		if (strcmp(k[i].name, name) == 0)
			return &k[i];
	return NULL;
}

/*
 * BLIS_ARCH_TYPE beyond the CPU is refused with what, why and the way out:
 * the variable, the kernels, the instruction sets missing, the kernels this
 * CPU can take.  Before, BLIS ran them and the process died of SIGILL.
 */
Test(blas, kernels_beyond_the_cpu_are_refused)
{
	const struct ss_error *e = ss_last_error();
	char id[16];

	if (!kernels_named("skx") || !kernels_named("haswell"))
		cr_skip_test("this BLIS has no skx or haswell kernels");
	snprintf(id, sizeof(id), "%d", kernels_named("skx")->id);
	cr_assert_eq(ss__blas_arch_check(id, AVX2_CPU), SS_EUSAGE);
	cr_assert(strstr(e->what, "BLIS_ARCH_TYPE=0 (skx kernels)"), "%s",
		  e->what);
	cr_assert(strstr(e->why,
			 "lacks AVX-512F, AVX-512DQ, AVX-512BW, AVX-512VL"),
		  "%s", e->why);
	cr_assert(strstr(e->hint, "3 haswell"), "%s", e->hint);
	cr_assert(strstr(e->hint, "6 zen3"), "%s", e->hint);
	cr_assert(!strstr(e->hint, "skx"), "%s", e->hint);
	/* the same number, a CPU with AVX-512: taken */
	cr_assert_eq(ss__blas_arch_check(
			     id, AVX2_CPU | SS__ISA_AVX512F | SS__ISA_AVX512DQ |
					 SS__ISA_AVX512BW | SS__ISA_AVX512VL),
		     0);
	/* leading zeros are the same number (BLIS reads it with strtol) */
	cr_assert_eq(ss__blas_arch_check("0003", AVX2_CPU), 0);
	/* FMA4 (Bulldozer to Steamroller) on a CPU without it */
	if (kernels_named("bulldozer")) {
		cr_assert_eq(ss__blas_arch_check("12", AVX2_CPU), SS_EUSAGE);
		cr_assert(strstr(e->why, "lacks FMA4,"), "%s", e->why);
	}
	/* a name, nothing, a number past BLIS's, another processor's */
	cr_assert_eq(ss__blas_arch_check("haswell", AVX2_CPU), SS_EUSAGE);
	cr_assert(strstr(e->why, "not a number"), "%s", e->why);
	cr_assert(strstr(e->hint, "3 haswell"), "%s", e->hint);
	cr_assert_eq(ss__blas_arch_check("", AVX2_CPU), SS_EUSAGE);
	cr_assert_eq(ss__blas_arch_check("3x", AVX2_CPU), SS_EUSAGE);
	cr_assert_eq(ss__blas_arch_check("99", AVX2_CPU), SS_EUSAGE);
	cr_assert(strstr(e->why, "not one of BLIS's kernel numbers"), "%s",
		  e->why);
	cr_assert_eq(ss__blas_arch_check("-1", AVX2_CPU), SS_EUSAGE);
	cr_assert_eq(ss__blas_arch_check("14", AVX2_CPU), SS_EUSAGE);
	cr_assert(strstr(e->why, "built without those kernels"), "%s", e->why);
	cr_assert(strstr(e->what, "(a64fx)"), "%s", e->what);
	/* generic runs everywhere, even without SSE3 */
	if (kernels_named("generic")) {
		snprintf(id, sizeof(id), "%d", kernels_named("generic")->id);
		cr_assert_eq(ss__blas_arch_check(id, 0), 0);
	}
}

/* What this machine's CPU says of itself, in the test's log. */
Test(blas, this_cpu_is_named)
{
	char names[128];

	cr_log_info("this CPU runs %s",
		    ss__isa_names(ss__cpu_isa(), names, sizeof(names)));
#if defined(__x86_64__)
	/* every x86-64 CPU BLIS 0.9 has kernels for has SSE3 */
	cr_assert(ss__cpu_isa() & SS__ISA_SSE3);
#endif
}

/*
 * Each kernel family this BLIS has, forced through BLIS_ARCH_TYPE in a
 * process of its own (Criterion runs each test so): where this CPU can run
 * it, the check takes it, BLIS runs it and the product is right; where it
 * cannot, the check refuses it and names what is missing.  So every
 * machine tests every family it can, and the refusal of the rest.
 */
ParameterizedTestParameters(blas, each_kernel_family_forced)
{
	/* indexes, not the entries: a test's process is a new one, where
	 * the parent's pointers (the names) mean nothing */
	static size_t index[64];
	size_t n;

	ss__blas_kernels(&n);
	for (size_t i = 0; i < n && i < 64; i++)
		index[i] = i;
	return cr_make_param_array(size_t, index, n < 64 ? n : 64);
}

ParameterizedTest(size_t *i, blas, each_kernel_family_forced)
{
	size_t n;
	const struct ss__blas_kernels *k = &ss__blas_kernels(&n)[*i];
	unsigned int have = ss__cpu_isa();
	char id[16], note[256], names[128];
	const char *arch;

	snprintf(id, sizeof(id), "%d", k->id);
	cr_assert_eq(setenv("BLIS_ARCH_TYPE", id, 1), 0);
	if (k->needs & ~have) {
		const struct ss_error *e = ss_last_error();

		cr_assert_eq(ss_blas_check(), SS_EUSAGE);
		ss__isa_names(k->needs & ~have, names, sizeof(names));
		cr_assert(strstr(e->why, names), "%s: %s", e->why, names);
		cr_assert(strstr(e->what, k->name), "%s", e->what);
		cr_log_info("%s kernels refused: %s", k->name, e->why);
		return;
	}
	cr_assert_eq(ss_blas_check(), 0, "%s: %s", k->name,
		     ss_last_error()->why);
	arch = ss_blas_setup(note, sizeof(note));
	cr_assert_str_eq(arch, k->name, "%s", note);
	/* small (BLIS's unpacked path) and large (packed, its micro-kernel) */
	check_product(29, 53, 67, k->name);
	check_product(300, 260, 280, k->name);
	cr_log_info("%s kernels: right", k->name);
}
