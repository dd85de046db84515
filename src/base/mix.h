/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * splitmix64: a cheap, stateless 64-bit mixer for hashing and seeding, and
 * the draws built on it.
 */
#ifndef SS_MIX_H
#define SS_MIX_H

#include <math.h>
#include <stdint.h>

static inline uint64_t ss__mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * A permutation of [0, @n) drawn from @h: i -> (*@mult i + *@add) mod n,
 * *@mult coprime to n.  Stateless and the same everywhere: neighbours
 * land far apart, every place exactly once.
 */
static inline void ss__affine_permutation(uint64_t h, uint64_t n,
					  uint64_t *mult, uint64_t *add)
{
	uint64_t a = n > 1 ? 1 + h % (n - 1) : 1;

	for (;;) { /* the first coprime from a up: gcd(a, n) == 1 */
		uint64_t x = a, y = n;

		while (y) {
			uint64_t t = x % y;

			x = y;
			y = t;
		}
		if (x == 1)
			break;
		a = a + 1 < n ? a + 1 : 1;
	}
	*mult = a;
	*add = n ? ss__mix64(h) % n : 0;
}

/* A uniform draw in (0, 1); advances @state. */
static inline double ss__uniform(uint64_t *state)
{
	*state = ss__mix64(*state);
	return ((double)(*state >> 11) + 0.5) / 9007199254740992.0;
}

/* A standard normal draw (Box-Muller); advances @state twice. */
static inline double ss__gauss(uint64_t *state)
{
	double u1 = ss__uniform(state), u2 = ss__uniform(state);

	return sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2);
}

#endif /* SS_MIX_H */
