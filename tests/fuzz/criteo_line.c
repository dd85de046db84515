// SPDX-License-Identifier: BSD-2-Clause
/*
 * The Criteo line parser, ss_parse_example(), against a reference parser
 * written from the format's description (src/train/criteo.c): both accept
 * the same lines and give the same example; a trailing CR changes nothing;
 * a refusal says why within the buffer it is given.
 */
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "shadowsync/train.h"

#define FIELDS (1 + SS_DENSE + SS_SPARSE)

static bool is_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int hex_value(char c)
{
	if (is_digit(c))
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* label, I1..I13 (an optional '-', 1 to 18 digits, or empty), C1..C26
 * (8 hex digits, or empty), tab-separated, an optional CR at the end */
static bool reference(const char *line, size_t len, struct ss_example *ex)
{
	size_t at = 0;

	if (len && line[len - 1] == '\r')
		len--;
	memset(ex, 0, sizeof(*ex));
	for (int f = 0; f < FIELDS; f++) {
		size_t end = at;

		while (end < len && line[end] != '\t')
			end++;
		if (f < FIELDS - 1 && end == len)
			return false; /* too few fields */
		if (f == FIELDS - 1 && end != len)
			return false; /* too many */
		const char *s = line + at;
		size_t n = end - at;

		if (f == 0) {
			if (n != 1 || (s[0] != '0' && s[0] != '1'))
				return false;
			ex->label = s[0] == '1' ? 1.0f : 0.0f;
		} else if (f <= SS_DENSE && n > 0) {
			bool neg = s[0] == '-';
			size_t digits = n - neg;
			unsigned long long v = 0;

			if (digits == 0 || digits > 18)
				return false;
			for (size_t i = neg; i < n; i++) {
				if (!is_digit(s[i]))
					return false;
				v = v * 10 + (unsigned)(s[i] - '0');
			}
			ex->dense[f - 1] = neg ? 0.0f : (float)log1p((double)v);
		} else if (f > SS_DENSE && n > 0) {
			uint32_t v = 0;

			if (n != 8)
				return false;
			for (size_t i = 0; i < 8; i++) {
				if (hex_value(s[i]) < 0)
					return false;
				v = v << 4 | (uint32_t)hex_value(s[i]);
			}
			ex->sparse[f - 1 - SS_DENSE] = v;
		}
		at = end + 1;
	}
	return true;
}

static void same_example(const struct ss_example *a, const struct ss_example *b)
{
	FUZZ_CHECK(a->label == b->label, "label %g, reference %g", a->label,
		   b->label);
	for (int i = 0; i < SS_DENSE; i++) {
		/* the parser sums digits in a double: past 2^53 the last
		 * place may round otherwise than the reference's integer */
		float d = fabsf(a->dense[i] - b->dense[i]);

		FUZZ_CHECK(d <= 1e-6f * fmaxf(1.0f, b->dense[i]),
			   "I%d: %.9g, reference %.9g", i + 1, a->dense[i],
			   b->dense[i]);
		FUZZ_CHECK(a->dense[i] >= 0 && isfinite(a->dense[i]), "I%d: %g",
			   i + 1, a->dense[i]);
	}
	for (int i = 0; i < SS_SPARSE; i++)
		FUZZ_CHECK(a->sparse[i] == b->sparse[i],
			   "C%d: %08x, reference %08x", i + 1, a->sparse[i],
			   b->sparse[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *line = (const char *)data;
	struct ss_example got, want, crlf;
	char why[160], *tiny, *with_cr;
	size_t tiny_size;
	int rc;
	bool ok;

	rc = ss_parse_example(line, size, &got, why, sizeof(why));
	ok = reference(line, size, &want);
	FUZZ_CHECK(rc == 0 || rc == SS_EPARSE, "rc %d", rc);
	FUZZ_CHECK((rc == 0) == ok, "parser %s, reference %s",
		   rc == 0 ? "accepts" : why, ok ? "accepts" : "refuses");
	if (ok) {
		same_example(&got, &want);
	} else {
		FUZZ_CHECK(memchr(why, '\0', sizeof(why)) && why[0],
			   "no reason given");
		FUZZ_CHECK(strstr(why, "field"), "reason '%s'", why);
	}

	/* CRLF files: one CR more at the end changes nothing */
	if (!size || line[size - 1] != '\r') {
		with_cr = malloc(size + 1);
		memcpy(with_cr, line, size);
		with_cr[size] = '\r';
		rc = ss_parse_example(with_cr, size + 1, &crlf, why,
				      sizeof(why));
		FUZZ_CHECK((rc == 0) == ok, "with a CR: %s",
			   rc == 0 ? "accepted" : why);
		if (ok)
			same_example(&crlf, &want);
		free(with_cr);
	}

	/* a reason is cut to the buffer it is given (ASan sees the rest) */
	if (!ok) {
		tiny_size = 1 + (size ? data[0] % 24 : 0);
		tiny = malloc(tiny_size);
		rc = ss_parse_example(line, size, &got, tiny, tiny_size);
		FUZZ_CHECK(rc == SS_EPARSE, "rc %d", rc);
		FUZZ_CHECK(memchr(tiny, '\0', tiny_size), "reason not ended");
		free(tiny);
	}
	return 0;
}
