// SPDX-License-Identifier: BSD-2-Clause
/* What the subcommands' option parsers share. */
#include <getopt.h>
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

int ss_cmd_model_option(const char *option, const char *arg,
			struct ss_model_config *m)
{
	long v;
	int rc;

	if (!strcmp(option, "--emb-dim")) {
		rc = ss_parse_long(option, arg, 1, 1024, &v);
		m->emb_dim = (int)v;
	} else if (!strcmp(option, "--hash-size")) {
		rc = ss_parse_long(option, arg, 1, 1L << 30, &v);
		m->hash_size = (uint32_t)v;
	} else if (!strcmp(option, "--bottom")) {
		rc = ss_model_layers_parse(option, arg, m->bottom,
					   &m->n_bottom);
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
