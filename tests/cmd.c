// SPDX-License-Identifier: BSD-2-Clause
/* Running the shadowsync command from tests: see cmd.h. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "cmd.h"

int cmd_run(char *out, size_t size, const char *fmt, ...)
{
	char cmd[8192];
	va_list ap;
	FILE *p;
	size_t n;
	int k;

	va_start(ap, fmt);
	k = vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	cr_assert_lt(k, (int)sizeof(cmd), "command too long: %s", cmd);
	p = popen(cmd, "r");
	cr_assert_not_null(p, "popen: %s", cmd);
	n = fread(out, 1, size - 1, p);
	out[n] = '\0';
	/* Past @size, read the rest all the same: a writer cut off would die
	 * of SIGPIPE and change the status the test checks. */
	while (fread(cmd, 1, sizeof(cmd), p) > 0)
		;
	return WEXITSTATUS(pclose(p));
}

void cmd_data_dir(char *dir)
{
	char out[4096];

	cr_assert_not_null(mkdtemp(dir));
	cr_assert_eq(
		cmd_run(out, sizeof(out),
			"%s gen-data --out %s/train.txt --examples 6000 --cardinality 300 && "
			"%s gen-data --out %s/test.txt --examples 1000 --cardinality 300 --stream 1",
			SS_COMMAND, dir, SS_COMMAND, dir),
		0, "%s", out);
}

void cmd_rm_dir(const char *dir)
{
	char out[256];

	cr_assert_eq(cmd_run(out, sizeof(out), "rm -rf %s", dir), 0);
}

double cmd_json_number(const char *json, const char *key)
{
	char pat[64];
	const char *at;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	at = strstr(json, pat);
	return at ? strtod(at + strlen(pat), NULL) : NAN;
}
