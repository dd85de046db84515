// SPDX-License-Identifier: BSD-2-Clause
/* shadowsync: the command users run.  Dispatches to a subcommand. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "command.h"
#include "shadowsync/shadowsync.h"

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
} ss_commands[] = {
	{ "topo", ss_cmd_topo,
	  "print the placement plan: shadow thread, trainers, replica memory" },
	{ "train", ss_cmd_train,
	  "train the CTR model as one rank, the replica kept in sync" },
	{ "launch", ss_cmd_launch,
	  "start N ranks of train on this machine, one combined summary" },
	{ "doctor", ss_cmd_doctor,
	  "check this machine for RDMA training: devices, GIDs, memlock" },
	{ "gen-data", ss_cmd_gen_data,
	  "write synthetic click data from a planted teacher model" },
	{ "eval", ss_cmd_eval,
	  "evaluate a saved model on a file: NE, AUC, calibration" },
	{ "predict", ss_cmd_predict,
	  "write a saved model's click probability for each example" },
	{ "export", ss_cmd_export,
	  "write a saved model's weights as NumPy files, with model.json" },
	{ "reshard", ss_cmd_reshard,
	  "re-divide sharded-table checkpoints for another number of ranks" },
	{ "shm-clean", ss_cmd_shm_clean,
	  "remove the shared memory that dead ranks left in /dev/shm" },
};

#define SS_NR_COMMANDS (int)(sizeof(ss_commands) / sizeof(ss_commands[0]))

static void ss_usage(FILE *out)
{
	fprintf(out,
		"usage: shadowsync COMMAND [OPTIONS]\n"
		"       shadowsync --version | --help\n"
		"\n"
		"ShadowSync trains click-through-rate models on many machines while a\n"
		"background shadow thread keeps the replicas in sync over RDMA.\n"
		"\n"
		"commands:\n");
	for (int i = 0; i < SS_NR_COMMANDS; i++)
		fprintf(out, "  %-10s %s\n", ss_commands[i].name,
			ss_commands[i].summary);
	fprintf(out,
		"\n"
		"Run 'shadowsync COMMAND --help' for the options of a command.\n"
		"Logging: SS_LOG=error|warn|info|debug (default warn), or train and topo's\n"
		"--verbose.\n");
}

int ss_cmd_fail(const char *prog, int code)
{
	ss_error_print(stderr, prog, code);
	return code == SS_EUSAGE ? SS_EXIT_USAGE : SS_EXIT_FAILURE;
}

/*
 * Standard input, output and error closed when we were started get
 * /dev/null: else the first file a command opens would take their
 * number, and `--data -` read it, or a message go into it.
 */
static void ss_std_fds(void)
{
	for (int fd = 0; fd <= 2; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
			int null = open("/dev/null", fd ? O_WRONLY : O_RDONLY);

			if (null >= 0 && null != fd) {
				dup2(null, fd);
				close(null);
			}
		}
}

int main(int argc, char **argv)
{
	ss_std_fds();
	if (argc < 2) {
		ss_usage(stderr);
		return SS_EXIT_USAGE;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") ||
	    !strcmp(argv[1], "help")) {
		ss_usage(stdout);
		return SS_EXIT_OK;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("shadowsync %s\n", SS_VERSION_STRING);
		return SS_EXIT_OK;
	}
	/* SS_LOG read now: a bad value is said by every command, not only
	 * by those that log something */
	(void)ss_log_level();
	/* each command says what was wrong with an option itself, naming
	 * the command and with a hint: not getopt's line first */
	opterr = 0;
	for (int i = 0; i < SS_NR_COMMANDS; i++)
		if (!strcmp(argv[1], ss_commands[i].name))
			return ss_commands[i].run(argc - 1, argv + 1);
	fprintf(stderr, "shadowsync: error: unknown command '%s'\n", argv[1]);
	fprintf(stderr,
		"shadowsync: hint: 'shadowsync --help' lists the commands\n");
	return SS_EXIT_USAGE;
}
