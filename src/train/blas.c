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
#include "train/blas_kernels.h"

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

/*
 * What each kernel family needs: what BLIS's own detection asks of the CPU
 * before it picks them (frame/base/bli_cpuid.c of BLIS 0.9), the
 * instruction sets they are built for.  Bulldozer to Steamroller use
 * AMD's FMA4, which no CPU since Zen 1 has; knl, Xeon Phi's AVX-512PF.
 */
#define SS_AVX2_FMA (SS__ISA_AVX | SS__ISA_FMA3 | SS__ISA_AVX2)
static const struct ss__blas_kernels ss_blas_kernels[] = {
#ifdef BLIS_CONFIG_SKX
	{ BLIS_ARCH_SKX, "skx",
	  SS_AVX2_FMA | SS__ISA_AVX512F | SS__ISA_AVX512DQ | SS__ISA_AVX512BW |
		  SS__ISA_AVX512VL },
#endif
#ifdef BLIS_CONFIG_KNL
	{ BLIS_ARCH_KNL, "knl",
	  SS_AVX2_FMA | SS__ISA_AVX512F | SS__ISA_AVX512PF },
#endif
#ifdef BLIS_CONFIG_HASWELL
	{ BLIS_ARCH_HASWELL, "haswell", SS_AVX2_FMA },
#endif
#ifdef BLIS_CONFIG_SANDYBRIDGE
	{ BLIS_ARCH_SANDYBRIDGE, "sandybridge", SS__ISA_AVX },
#endif
#ifdef BLIS_CONFIG_PENRYN
	{ BLIS_ARCH_PENRYN, "penryn", SS__ISA_SSE3 | SS__ISA_SSSE3 },
#endif
#ifdef BLIS_CONFIG_ZEN3
	{ BLIS_ARCH_ZEN3, "zen3", SS_AVX2_FMA },
#endif
#ifdef BLIS_CONFIG_ZEN2
	{ BLIS_ARCH_ZEN2, "zen2", SS_AVX2_FMA },
#endif
#ifdef BLIS_CONFIG_ZEN
	{ BLIS_ARCH_ZEN, "zen", SS_AVX2_FMA },
#endif
#ifdef BLIS_CONFIG_EXCAVATOR
	{ BLIS_ARCH_EXCAVATOR, "excavator", SS_AVX2_FMA },
#endif
#ifdef BLIS_CONFIG_STEAMROLLER
	{ BLIS_ARCH_STEAMROLLER, "steamroller",
	  SS__ISA_AVX | SS__ISA_FMA3 | SS__ISA_FMA4 },
#endif
#ifdef BLIS_CONFIG_PILEDRIVER
	{ BLIS_ARCH_PILEDRIVER, "piledriver",
	  SS__ISA_AVX | SS__ISA_FMA3 | SS__ISA_FMA4 },
#endif
#ifdef BLIS_CONFIG_BULLDOZER
	{ BLIS_ARCH_BULLDOZER, "bulldozer", SS__ISA_AVX | SS__ISA_FMA4 },
#endif
#ifdef BLIS_CONFIG_GENERIC
	{ BLIS_ARCH_GENERIC, "generic", 0 },
#endif
};

const struct ss__blas_kernels *ss__blas_kernels(size_t *n)
{
	*n = sizeof(ss_blas_kernels) / sizeof(ss_blas_kernels[0]);
	return ss_blas_kernels;
}

unsigned int ss__cpu_isa(void)
{
	unsigned int isa = 0;

#if defined(__x86_64__) || defined(__i386__)
	/* libgcc's answers count the OS's saving of the ymm and zmm state */
	__builtin_cpu_init();
	isa |= __builtin_cpu_supports("sse3") ? SS__ISA_SSE3 : 0;
	isa |= __builtin_cpu_supports("ssse3") ? SS__ISA_SSSE3 : 0;
	isa |= __builtin_cpu_supports("avx") ? SS__ISA_AVX : 0;
	isa |= __builtin_cpu_supports("fma") ? SS__ISA_FMA3 : 0;
	isa |= __builtin_cpu_supports("fma4") ? SS__ISA_FMA4 : 0;
	isa |= __builtin_cpu_supports("avx2") ? SS__ISA_AVX2 : 0;
	isa |= __builtin_cpu_supports("avx512f") ? SS__ISA_AVX512F : 0;
	isa |= __builtin_cpu_supports("avx512dq") ? SS__ISA_AVX512DQ : 0;
	isa |= __builtin_cpu_supports("avx512bw") ? SS__ISA_AVX512BW : 0;
	isa |= __builtin_cpu_supports("avx512vl") ? SS__ISA_AVX512VL : 0;
	isa |= __builtin_cpu_supports("avx512pf") ? SS__ISA_AVX512PF : 0;
#endif
	return isa;
}

const char *ss__isa_names(unsigned int isa, char *buf, size_t size)
{
	static const char *const names[] = {
		"SSE3",	     "SSSE3",	  "AVX",       "FMA3",
		"FMA4",	     "AVX2",	  "AVX-512F",  "AVX-512DQ",
		"AVX-512BW", "AVX-512VL", "AVX-512PF",
	};
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (isa & (1u << i) && used < size)
			used += (size_t)snprintf(buf + used, size - used,
						 "%s%s", used ? ", " : "",
						 names[i]);
	return buf;
}

/* "3 haswell, 25 generic": the kernels a CPU with @have can take. */
static const char *ss_blas_usable(unsigned int have, char *buf, size_t size)
{
	size_t used = 0;

	buf[0] = '\0';
	for (size_t i = 0;
	     i < sizeof(ss_blas_kernels) / sizeof(ss_blas_kernels[0]); i++) {
		const struct ss__blas_kernels *k = &ss_blas_kernels[i];

		if ((k->needs & ~have) == 0 && used < size)
			used += (size_t)snprintf(buf + used, size - used,
						 "%s%d %s", used ? ", " : "",
						 k->id, k->name);
	}
	return buf;
}

int ss__blas_arch_check(const char *value, unsigned int have)
{
	char usable[224], missing[96], hint[256];
	const struct ss__blas_kernels *k = NULL;
	char *end;
	long id;

	ss_blas_usable(have, usable, sizeof(usable));
	snprintf(hint, sizeof(hint),
		 "unset it to let BLIS choose, or give the number of kernels "
		 "this CPU can run: %s",
		 usable);
	/* BLIS reads it with strtol: a name, or nothing, is 0 (skx) */
	errno = 0;
	id = strtol(value, &end, 10);
	if (end == value || *end || errno)
		return ss_error_set(
			SS_EUSAGE,
			"not a number: BLIS 0.9 takes its kernels' "
			"number from blis.h's arch_t, and reads "
			"only the leading digits (a name as 0, skx)",
			hint, "BLIS_ARCH_TYPE='%.64s'", value);
	for (size_t i = 0;
	     i < sizeof(ss_blas_kernels) / sizeof(ss_blas_kernels[0]); i++)
		if (ss_blas_kernels[i].id == id)
			k = &ss_blas_kernels[i];
	if (!k)
		return ss_error_set(
			SS_EUSAGE,
			id >= 0 && id < BLIS_NUM_ARCHS ?
				"this BLIS was built without those kernels (another processor family's)" :
				"not one of BLIS's kernel numbers",
			hint, "BLIS_ARCH_TYPE=%ld (%s)", id,
			id >= 0 && id < BLIS_NUM_ARCHS ?
				bli_arch_string((arch_t)id) :
				"no kernels");
	if (k->needs & ~have) {
		char why[160];

		snprintf(why, sizeof(why),
			 "this CPU lacks %s, which they need: BLIS would die "
			 "of an illegal instruction at the first product",
			 ss__isa_names(k->needs & ~have, missing,
				       sizeof(missing)));
		return ss_error_set(SS_EUSAGE, why, hint,
				    "BLIS_ARCH_TYPE=%ld (%s kernels)", id,
				    k->name);
	}
	return 0;
}

int ss_blas_check(void)
{
	const char *value = getenv("BLIS_ARCH_TYPE");

	return value ? ss__blas_arch_check(value, ss__cpu_isa()) : 0;
}
