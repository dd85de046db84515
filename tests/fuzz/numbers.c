// SPDX-License-Identifier: BSD-2-Clause
/*
 * The option value parsers of src/base/parse.c: ss_parse_long(),
 * ss_parse_double(), ss_parse_choice() and the choices built on it.  The
 * input: a selector byte, 16 bytes of bounds, then the value's text.
 *  - accepted: the value is within the bounds, and printed back it parses
 *    to itself; a plain decimal text is accepted exactly when its value is
 *    within the bounds, and gives that value; a choice is one of the
 *    accepted words, exactly;
 *  - refused: SS_EUSAGE naming the option, the output untouched, and for
 *    a choice the hint lists every accepted word.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "shadowsync/base.h"
#include "shadowsync/fabric.h"
#include "shadowsync/train.h"

static void refused(int rc, const char *option)
{
	FUZZ_CHECK(rc == SS_EUSAGE, "rc %d", rc);
	FUZZ_CHECK(strstr(ss_last_error()->what, option),
		   "'%s' does not name the option", ss_last_error()->what);
}

/* -?(0|[1-9][0-9]*), at most @digits digits */
static bool plain_integer(const char *s, int digits)
{
	int n = 0;

	if (*s == '-')
		s++;
	if (s[0] == '0')
		return s[1] == '\0';
	for (; *s; s++, n++)
		if (*s < '0' || *s > '9')
			return false;
	return n > 0 && n <= digits;
}

static void check_long(const char *text, long min, long max)
{
	long v = 0x5a5a5a5a, again = 0;
	char back[32];
	int rc = ss_parse_long("--opt", text, min, max, &v);

	if (plain_integer(text, 18)) {
		long ref = strtol(text, NULL, 10);

		FUZZ_CHECK((rc == 0) == (ref >= min && ref <= max),
			   "'%s' in [%ld, %ld]: rc %d", text, min, max, rc);
		FUZZ_CHECK(rc != 0 || v == ref, "'%s' read as %ld", text, v);
	}
	if (rc < 0) {
		refused(rc, "--opt");
		FUZZ_CHECK(v == 0x5a5a5a5a, "refused, yet the value was set");
		return;
	}
	FUZZ_CHECK(v >= min && v <= max, "'%s': %ld outside [%ld, %ld]", text,
		   v, min, max);
	snprintf(back, sizeof(back), "%ld", v);
	FUZZ_CHECK(ss_parse_long("--opt", back, min, max, &again) == 0 &&
			   again == v,
		   "'%s' is %ld, but '%s' is not", text, v, back);
}

/* -?[0-9]{1,15}(\.[0-9]{1,15})? */
static bool plain_decimal(const char *s)
{
	const char *dot;

	if (*s == '-')
		s++;
	dot = strchr(s, '.');
	if (!dot)
		return strspn(s, "0123456789") == strlen(s) && *s &&
		       strlen(s) <= 15;
	return dot > s && dot - s <= 15 &&
	       strspn(s, "0123456789") == (size_t)(dot - s) && dot[1] &&
	       strspn(dot + 1, "0123456789") == strlen(dot + 1) &&
	       strlen(dot + 1) <= 15;
}

static void check_double(const char *text, double min, double max)
{
	double v = 12345.5, again = 0;
	char back[64];
	int rc = ss_parse_double("--opt", text, min, max, &v);

	if (plain_decimal(text)) {
		double ref = strtod(text, NULL);

		FUZZ_CHECK((rc == 0) == (ref >= min && ref <= max),
			   "'%s' in [%g, %g]: rc %d", text, min, max, rc);
		FUZZ_CHECK(rc != 0 || v == ref, "'%s' read as %.17g", text, v);
	}
	if (rc < 0) {
		refused(rc, "--opt");
		FUZZ_CHECK(v == 12345.5, "refused, yet the value was set");
		return;
	}
	FUZZ_CHECK(isfinite(v) && v >= min && v <= max,
		   "'%s': %.17g outside [%g, %g]", text, v, min, max);
	snprintf(back, sizeof(back), "%.17g", v);
	FUZZ_CHECK(ss_parse_double("--opt", back, min, max, &again) == 0 &&
			   again == v,
		   "'%s' is %.17g, but '%s' is not", text, v, back);
}

static void check_choice(const char *text, unsigned which)
{
	static const char *const words[][5] = {
		{ "fail", "skip", NULL },
		{ "error", "warn", "info", "debug", NULL },
		{ "auto", "verbs", "shm", NULL },
		{ "a", "", "ab", NULL },
	};
	const char *const *choices = words[which % 4];
	int index = -7, want = -1, rc;

	for (int i = 0; choices[i]; i++)
		if (!strcmp(text, choices[i]))
			want = i;
	switch (which % 4) {
	case 0: {
		enum ss_bad_lines p = (enum ss_bad_lines) - 7;

		rc = ss_bad_lines_parse("--bad-lines", text, &p);
		index = (int)p;
		break;
	}
	case 1: {
		enum ss_log_level l = (enum ss_log_level) - 7;

		rc = ss_log_parse_level(text, &l);
		index = (int)l;
		break;
	}
	case 2: {
		enum ss_transport t = (enum ss_transport) - 7;

		rc = ss_transport_parse("--transport", text, &t);
		index = (int)t;
		break;
	}
	default:
		rc = ss_parse_choice("--opt", text, choices, &index);
	}
	FUZZ_CHECK(rc == 0 ? index == want : want < 0 && index == -7,
		   "'%s': rc %d, index %d, want %d", text, rc, index, want);
	if (rc < 0) {
		FUZZ_CHECK(rc == SS_EUSAGE, "rc %d", rc);
		for (int i = 0; choices[i]; i++)
			FUZZ_CHECK(strstr(ss_last_error()->hint, choices[i]),
				   "the hint '%s' leaves out '%s'",
				   ss_last_error()->hint, choices[i]);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_input in = { data, size };
	unsigned which = (unsigned)fuzz_take(&in, 1);
	uint64_t a = fuzz_take(&in, 8), b = fuzz_take(&in, 8);
	char *text = fuzz_cstr(in.data, in.size);

	if (which % 3 == 0) {
		long lo = (long)a, hi = (long)b;

		check_long(text, lo < hi ? lo : hi, lo < hi ? hi : lo);
	} else if (which % 3 == 1) {
		double lo, hi;

		memcpy(&lo, &a, sizeof(lo));
		memcpy(&hi, &b, sizeof(hi));
		if (!isfinite(lo))
			lo = -1e300;
		if (!isfinite(hi))
			hi = 1e300;
		check_double(text, lo < hi ? lo : hi, lo < hi ? hi : lo);
	} else {
		check_choice(text, which / 3);
	}
	free(text);
	return 0;
}
