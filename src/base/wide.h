/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * SS_WIDE: compile a hot loop three times, for AVX-512, for AVX2 with FMA
 * and for the x86-64 baseline that the build targets, and let the loader
 * pick the widest this CPU runs (GCC's target_clones).  The build stays
 * portable; the trainer's own loops, next to BLIS's kernels, do not run at
 * a quarter of the vector width.  Elsewhere it compiles the one baseline.
 */
#ifndef SS_WIDE_H
#define SS_WIDE_H

/*
 * Not under ThreadSanitizer: GCC instruments the clones' resolvers, which
 * the dynamic loader runs before the TSan runtime is up (a crash at
 * start-up).
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
	!defined(__SANITIZE_THREAD__)
#define SS_WIDE         \
	__attribute__(( \
		target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SS_WIDE
#endif

#endif /* SS_WIDE_H */
