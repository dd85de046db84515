// SPDX-License-Identifier: BSD-2-Clause
/* Parsing option values, with errors that name the option and the range. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "shadowsync/base.h"

int ss_parse_long(const char *option, const char *text, long min, long max,
		  long *value)
{
	char hint[128];
	char *end;
	long v;

	snprintf(hint, sizeof(hint), "give an integer from %ld to %ld", min,
		 max);
	if (!text || !*text)
		return ss_error_set(SS_EUSAGE, "a value is required", hint,
				    "%s", option);
	/* Decimal digits only, an optional '-' first: strtol alone would
	 * take "010" as octal, "0x10" as hex and skip leading blanks. */
	if (!isdigit((unsigned char)text[text[0] == '-']))
		return ss_error_set(SS_EUSAGE, "not a decimal integer", hint,
				    "%s '%s'", option, text);
	errno = 0;
	v = strtol(text, &end, 10);
	if (*end)
		return ss_error_set(SS_EUSAGE, "not a decimal integer", hint,
				    "%s '%s'", option, text);
	if (errno == ERANGE || v < min || v > max)
		return ss_error_set(SS_EUSAGE, "out of range", hint, "%s '%s'",
				    option, text);
	*value = v;
	return 0;
}

int ss_parse_double(const char *option, const char *text, double min,
		    double max, double *value)
{
	char hint[128];
	char *end;
	double v;

	snprintf(hint, sizeof(hint), "give a number from %g to %g", min, max);
	if (!text || !*text)
		return ss_error_set(SS_EUSAGE, "a value is required", hint,
				    "%s", option);
	errno = 0;
	v = strtod(text, &end);
	if (*end || end == text || !isfinite(v))
		return ss_error_set(SS_EUSAGE, "not a number", hint, "%s '%s'",
				    option, text);
	if (errno == ERANGE || v < min || v > max)
		return ss_error_set(SS_EUSAGE, "out of range", hint, "%s '%s'",
				    option, text);
	*value = v;
	return 0;
}

int ss_parse_choice(const char *option, const char *text,
		    const char *const *choices, int *index)
{
	char hint[256] = "accepted values:";
	size_t len = strlen(hint);

	for (int i = 0; choices[i]; i++) {
		if (text && strcmp(text, choices[i]) == 0) {
			*index = i;
			return 0;
		}
		if (len < sizeof(hint))
			len += (size_t)snprintf(hint + len, sizeof(hint) - len,
						"%s %s", i ? "," : "",
						choices[i]);
	}
	return ss_error_set(SS_EUSAGE, "not an accepted value", hint, "%s '%s'",
			    option, text ? text : "");
}
