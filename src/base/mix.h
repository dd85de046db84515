/* SPDX-License-Identifier: BSD-2-Clause */
/* splitmix64: a cheap, stateless 64-bit mixer for hashing and seeding. */
#ifndef SS_MIX_H
#define SS_MIX_H

#include <stdint.h>

static inline uint64_t ss__mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

#endif /* SS_MIX_H */
