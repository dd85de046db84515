/* SPDX-License-Identifier: BSD-2-Clause */
/* The subcommands of the shadowsync command. */
#ifndef SS_COMMAND_H
#define SS_COMMAND_H

#include <getopt.h>

/* Exit statuses shared by every subcommand. */
enum {
	SS_EXIT_OK = 0,
	SS_EXIT_FAILURE = 1, /* the work failed */
	SS_EXIT_USAGE = 2, /* bad options: nothing was done */
};

/* Each returns the process's exit status. */
int ss_cmd_topo(int argc, char **argv);
int ss_cmd_gen_data(int argc, char **argv);
int ss_cmd_train(int argc, char **argv);
int ss_cmd_launch(int argc, char **argv);
int ss_cmd_doctor(int argc, char **argv);
int ss_cmd_reshard(int argc, char **argv);
int ss_cmd_shm_clean(int argc, char **argv);
int ss_cmd_eval(int argc, char **argv);
int ss_cmd_predict(int argc, char **argv);
int ss_cmd_export(int argc, char **argv);

/*
 * ss_cmd_fail() - print the last failure for the user and return the exit
 * status that goes with @code.
 */
int ss_cmd_fail(const char *prog, int code);

struct ss_model_config;

/* ss_cmd_unknown_option() - the error for the option getopt refused. */
int ss_cmd_unknown_option(const char *command, char **argv,
			  const struct option *options);

/* ss_cmd_no_more_args() - 0, or the error for an argument left over. */
int ss_cmd_no_more_args(int argc, char **argv);

/*
 * ss_cmd_model_option() - one of the model's options, @option being
 * "--emb-dim", "--hash-size", "--bottom", "--top", "--interaction",
 * "--pooling", "--cross-layers" or "--cross-rank".
 */
int ss_cmd_model_option(const char *option, const char *arg,
			struct ss_model_config *m);

/*
 * ss_cmd_model_top_spelling() - accept --top written the DLRM way, with the
 * top MLP's input first (367-512-256-1 for emb-dim 16): a first size equal
 * to that input is dropped and said so.  Call once every model option is
 * in.
 */
void ss_cmd_model_top_spelling(struct ss_model_config *m);

#endif /* SS_COMMAND_H */
