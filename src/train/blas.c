// SPDX-License-Identifier: BSD-2-Clause
/*
 * Which BLIS kernels this process's GEMMs run on.
 *
 * BLIS 0.9 takes its AVX-512 kernels (skx) only where it can count the
 * CPU's FMA units, from a table of Skylake and Cascade Lake Xeon names
 * ("Gold 6148": two units, "Silver 4110": one).  Later Xeons, all with two
 * units (Ice Lake, Sapphire and Emerald Rapids, ...), are not in it, nor is
 * a virtual machine's "Intel(R) Xeon(R) Processor"; there BLIS falls back
 * to its AVX2 kernels (haswell), at half the vector width.  On the
 * development VM, an Emerald Rapids, the model's GEMMs take 1.7x less time
 * on skx (docs/perf.md).  So: on an Intel CPU with AVX-512 of a later
 * generation than those BLIS's table covers, ask for skx, through
 * BLIS_ARCH_TYPE, before the first BLIS call.  AMD's the same, from family
 * 0x1a (Zen 5) on: BLIS 0.9 knows families 0x17 and 0x19 (Zen to Zen 4,
 * its zen3 kernels at most) and runs its generic C kernels on a later
 * one, where skx trains 2.8x faster (docs/perf.md).  A BLIS_ARCH_TYPE set
 * by the user is left alone.
 */
#include <blis.h>
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shadowsync/base.h"
#include "shadowsync/train.h"

/* Family 6, model 0x55: Skylake-SP and Cascade Lake, BLIS's table. */
#define SS_SKYLAKE_SP 0x55
/* AMD's first family past those BLIS 0.9 knows (0x19: Zen 3 and 4). */
#define SS_AMD_ZEN5 0x1a

bool ss_blas_wants_skx(const struct ss_cpu_facts *cpu, const char **why)
{
	if (cpu->env_arch) {
		*why = "BLIS_ARCH_TYPE is set";
		return false;
	}
	if (!cpu->avx512) {
		*why = "BLIS's own choice: no AVX-512";
		return false;
	}
	if (cpu->intel && cpu->family == 6 && cpu->model == SS_SKYLAKE_SP) {
		*why = "BLIS's own choice: it counts this generation's FMA units";
		return false;
	}
	if (cpu->intel) {
		*why = "Intel AVX-512 of a generation BLIS 0.9 does not know";
		return true;
	}
	if (cpu->amd && cpu->family >= SS_AMD_ZEN5) {
		*why = "AMD AVX-512 of a family BLIS 0.9 does not know: its "
		       "generic kernels otherwise";
		return true;
	}
	*why = cpu->amd ? "BLIS's own choice: an AMD family it knows" :
			  "BLIS's own choice: neither Intel nor AMD";
	return false;
}

void ss_cpu_facts_read(struct ss_cpu_facts *cpu)
{
	memset(cpu, 0, sizeof(*cpu));
	cpu->env_arch = getenv("BLIS_ARCH_TYPE") != NULL;
#if defined(__x86_64__) || defined(__i386__)
	unsigned int r[4];

	if (__get_cpuid(0, &r[0], &r[1], &r[2], &r[3])) {
		cpu->intel = r[1] == 0x756e6547 && r[3] == 0x49656e69 &&
			     r[2] == 0x6c65746e; /* "GenuineIntel" */
		cpu->amd = r[1] == 0x68747541 && r[3] == 0x69746e65 &&
			   r[2] == 0x444d4163; /* "AuthenticAMD" */
	}
	if (__get_cpuid(1, &r[0], &r[1], &r[2], &r[3])) {
		cpu->family = (r[0] >> 8) & 0xf;
		cpu->model = (r[0] >> 4) & 0xf;
		if (cpu->family == 6 || cpu->family == 15)
			cpu->model += ((r[0] >> 16) & 0xf) << 4;
		if (cpu->family == 15) /* AMD's since 0x10, as Linux counts */
			cpu->family += (r[0] >> 20) & 0xff;
	}
	/* What BLIS's skx check asks for (the OS's zmm state included). */
	__builtin_cpu_init();
	cpu->avx512 = __builtin_cpu_supports("avx512f") &&
		      __builtin_cpu_supports("avx512dq") &&
		      __builtin_cpu_supports("avx512bw") &&
		      __builtin_cpu_supports("avx512vl");
#endif /* elsewhere: neither Intel nor AMD, BLIS's own choice */
}

const char *ss_blas_setup(char *note, size_t size)
{
	struct ss_cpu_facts cpu;
	const char *why, *arch;
	bool skx = false;

	ss_cpu_facts_read(&cpu);
	if (cpu.env_arch) {
		const char *env = getenv("BLIS_ARCH_TYPE");
		char *end;

		errno = 0;
		(void)strtol(env, &end, 10);
		if (end == env || *end || errno)
			ss_log_warn("BLIS_ARCH_TYPE='%s' is not a number: BLIS "
				    "0.9 reads it as 0 (skx, which needs "
				    "AVX-512); give the number from arch_t in "
				    "blis.h",
				    env);
	}
#ifdef BLIS_CONFIG_SKX /* this BLIS has the kernels */
	if (ss_blas_wants_skx(&cpu, &why)) {
		char id[16];

		/* BLIS 0.9 reads a number: its arch enum, not a name. */
		snprintf(id, sizeof(id), "%d", (int)BLIS_ARCH_SKX);
		skx = setenv("BLIS_ARCH_TYPE", id, 0) == 0;
	}
#else
	why = "this BLIS was built without its AVX-512 kernels";
#endif
	bli_init();
	arch = bli_arch_string(bli_arch_query_id());
	snprintf(note, size, "BLIS %s, %s kernels (%s%s)",
		 bli_info_get_version_str(), arch, skx ? "asked for: " : "",
		 why);
	return arch;
}
