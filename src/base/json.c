// SPDX-License-Identifier: BSD-2-Clause
/* The pieces of JSON that need care when printing by hand: strings, and
 * numbers that may not be numbers. */
#include <math.h>

#include "shadowsync/base.h"

void ss_json_double(FILE *out, const char *format, double v)
{
	if (isfinite(v))
		fprintf(out, format, v);
	else
		fputs("null", out);
}

void ss_json_string(FILE *out, const char *text)
{
	if (!text) {
		fputs("null", out);
		return;
	}
	fputc('"', out);
	for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(out, "\\%c", *p);
		else if (*p == '\n')
			fputs("\\n", out);
		else if (*p == '\t')
			fputs("\\t", out);
		else if (*p < 0x20)
			fprintf(out, "\\u%04x", *p);
		else
			fputc(*p, out);
	}
	fputc('"', out);
}
