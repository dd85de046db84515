/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * BLIS 0.9's x86-64 kernel families and the instruction sets each needs,
 * so that a BLIS_ARCH_TYPE asking for kernels this CPU cannot run is
 * refused with a message instead of dying of SIGILL at the first GEMM
 * (BLIS runs the kernels it is told to, unchecked).  Internal to blas.c
 * and its tests; not part of the public API.
 */
#ifndef SS_TRAIN_BLAS_KERNELS_H
#define SS_TRAIN_BLAS_KERNELS_H

#include <stddef.h>

/* Instruction sets, as bits of a mask. */
enum ss__isa {
	SS__ISA_SSE3 = 1u << 0,
	SS__ISA_SSSE3 = 1u << 1,
	SS__ISA_AVX = 1u << 2,
	SS__ISA_FMA3 = 1u << 3,
	SS__ISA_FMA4 = 1u << 4,
	SS__ISA_AVX2 = 1u << 5,
	SS__ISA_AVX512F = 1u << 6,
	SS__ISA_AVX512DQ = 1u << 7,
	SS__ISA_AVX512BW = 1u << 8,
	SS__ISA_AVX512VL = 1u << 9,
	SS__ISA_AVX512PF = 1u << 10,
};

struct ss__blas_kernels {
	int id; /* BLIS_ARCH_TYPE's number: blis.h's arch_t */
	const char *name; /* as bli_arch_string() says it */
	unsigned int needs; /* enum ss__isa bits */
};

/*
 * ss__blas_kernels() - the kernel families this BLIS was built with, in
 * arch_t order; *@n gets their number.
 */
const struct ss__blas_kernels *ss__blas_kernels(size_t *n);

/* ss__cpu_isa() - the instruction sets this CPU and OS can run. */
unsigned int ss__cpu_isa(void);

/*
 * ss__isa_names() - "AVX-512F, AVX-512DQ" for the bits of @isa into @buf;
 * returns @buf.
 */
const char *ss__isa_names(unsigned int isa, char *buf, size_t size);

/*
 * ss__blas_arch_check() - whether BLIS_ARCH_TYPE=@value asks for kernels
 * this BLIS has and a CPU with the instruction sets @have can run.
 * Returns 0, or SS_EUSAGE with the detail naming the variable, the
 * kernels, what is missing and the kernels this CPU can take.
 */
int ss__blas_arch_check(const char *value, unsigned int have);

#endif /* SS_TRAIN_BLAS_KERNELS_H */
