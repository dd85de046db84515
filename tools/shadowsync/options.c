// SPDX-License-Identifier: BSD-2-Clause
/* What the subcommands' option parsers share. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "command.h"
#include "shadowsync/shadowsync.h"

int ss_cmd_unknown_option(const char *command, char **argv,
			  const struct option *options)
{
	const char *arg = argv[optind - 1], *name = arg + strspn(arg, "-"),
		   *why = "unknown option";
	size_t len = strcspn(name, "=");
	char hint[96];
	int begun = 0;

	/* getopt refuses a long option it does not know, one that begins
	 * several (it takes prefixes), and one given without its value */
	for (const struct option *o = options; arg[1] == '-' && o->name; o++)
		if (!strncmp(o->name, name, len)) {
			if (strlen(o->name) == len) {
				why = "it needs a value";
				break;
			}
			why = ++begun > 1 ? "ambiguous: it begins several "
					    "options" :
					    why;
		}
	/* a short one: known (a long one's letter) but for its value */
	for (const struct option *o = options; arg[1] != '-' && o->name; o++)
		if (optopt && o->val == optopt && o->has_arg)
			why = "it needs a value";
	snprintf(hint, sizeof(hint), "'shadowsync %s --help' lists the options",
		 command);
	return ss_error_set(SS_EUSAGE, why, hint, "%s", arg);
}

int ss_cmd_no_more_args(int argc, char **argv)
{
	if (optind < argc)
		return ss_error_set(SS_EUSAGE, "unexpected argument",
				    "the command takes options only, each "
				    "file after its option (train --data "
				    "FILE); its --help lists them",
				    "'%s'", argv[optind]);
	return 0;
}

/*
 * The numbers of @text (separated by commas or blanks; from # to the line's
 * end a comment) into @rows after the *@n read so far; @where names the
 * option, or the file and line.
 */
static int ss_hash_sizes_scan(const char *where, const char *text,
			      uint32_t *rows, int *n)
{
	const char *p = text;

	while (*p && *p != '#') {
		char token[32];
		size_t len = strcspn(p, ", \t\r\n#");
		long v;
		int rc;

		if (len == 0) {
			p++;
			continue;
		}
		snprintf(token, sizeof(token), "%.*s", (int)len, p);
		rc = ss_parse_long(where, token, 1, 1L << 30, &v);
		if (rc < 0)
			return rc;
		if (*n == SS_SPARSE)
			return ss_error_set(
				SS_EUSAGE, "more than 26 numbers",
				"one number for every table, or one "
				"a table",
				"%s", where);
		rows[(*n)++] = (uint32_t)v;
		p += len;
	}
	return 0;
}

/*
 * --hash-size: one number for every table, 26 separated by commas, or
 * @FILE holding 26.  Tables all of one size are kept as one hash_size,
 * so that such a model is the same whichever way it was written.
 */
static int ss_hash_size_parse(const char *option, const char *text,
			      struct ss_model_config *m)
{
	uint32_t rows[SS_SPARSE];
	char where[4200], line[4096];
	int n = 0, rc = 0;
	bool same = true;

	if (text[0] != '@') {
		rc = ss_hash_sizes_scan(option, text, rows, &n);
	} else {
		FILE *f = fopen(text + 1, "r");

		if (!f)
			return ss_error_set(-errno, NULL,
					    "a file of 26 numbers of rows, "
					    "one a table",
					    "%s: file '%s'", option, text + 1);
		for (int no = 1; rc == 0 && fgets(line, sizeof(line), f);
		     no++) {
			snprintf(where, sizeof(where), "%s %s:%d", option,
				 text + 1, no);
			rc = ss_hash_sizes_scan(where, line, rows, &n);
		}
		fclose(f);
	}
	if (rc == 0 && n != 1 && n != SS_SPARSE)
		rc = ss_error_set(SS_EUSAGE, "want 1 or 26 numbers",
				  "one number for every table, or one a "
				  "table",
				  "%s '%s' (%d numbers)", option, text, n);
	if (rc < 0)
		return rc;
	for (int j = 1; j < n; j++)
		same &= rows[j] == rows[0];
	memset(m->table_rows, 0, sizeof(m->table_rows));
	m->hash_size = rows[0];
	for (int j = 0; !same && j < SS_SPARSE; j++)
		m->table_rows[j] = rows[j];
	return 0;
}

int ss_cmd_model_option(const char *option, const char *arg,
			struct ss_model_config *m)
{
	long v;
	int rc;

	if (!strcmp(option, "--emb-dim")) {
		rc = ss_parse_long(option, arg, 1, 1024, &v);
		m->emb_dim = (int)v;
	} else if (!strcmp(option, "--hash-size")) {
		rc = ss_hash_size_parse(option, arg, m);
	} else if (!strcmp(option, "--bottom")) {
		rc = ss_model_layers_parse(option, arg, m->bottom,
					   &m->n_bottom);
	} else if (!strcmp(option, "--interaction")) {
		rc = ss_model_interaction_parse(option, arg, m);
	} else if (!strcmp(option, "--pooling")) {
		rc = ss_model_pooling_parse(option, arg, m);
	} else if (!strcmp(option, "--cross-layers")) {
		rc = ss_parse_long(option, arg, 1, SS_MAX_LAYERS, &v);
		m->cross_layers = (int)v;
	} else if (!strcmp(option, "--cross-rank")) {
		rc = ss_parse_long(option, arg, 1, 65536, &v);
		m->cross_rank = (int)v;
	} else {
		rc = ss_model_layers_parse(option, arg, m->top, &m->n_top);
	}
	return rc;
}

void ss_cmd_model_top_spelling(struct ss_model_config *m)
{
	int in = ss_model_top_input(m);

	if (m->n_top < 2 || m->top[0] != in)
		return;
	ss_log_info("--top: taking its first size, %d, as the top MLP's input "
		    "(the interaction's output, as DLRM writes it), not as a "
		    "layer",
		    in);
	memmove(m->top, m->top + 1, (size_t)(m->n_top - 1) * sizeof(int));
	m->n_top--;
}
