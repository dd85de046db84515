/* SPDX-License-Identifier: BSD-2-Clause */
/* Running the shadowsync command from tests: output, status, JSON. */
#ifndef SS_TEST_CMD_H
#define SS_TEST_CMD_H

#include <stddef.h>

/*
 * cmd_run() - run the shell command that @fmt formats; its standard
 * output (give 2>&1 for both) in @out, cut to @size; returns its exit
 * status.
 */
int cmd_run(char *out, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * CMD_TMPFS_DIR() - a mkdtemp template on tmpfs, for a test whose ranks
 * write files while others wait for them.  On this machine's disk, busy
 * with the tests' own data files, one fsync took 14 to 19 s, and writes
 * of other files waited behind it (launch's output, a checkpoint): what
 * a test watched appeared only after the job had ended.  What the disk
 * does is not what those tests test.
 */
#define CMD_TMPFS_DIR(name) "/dev/shm/shadowsync-test-" name "-XXXXXX"

/*
 * cmd_data_dir() - make a folder from @dir (a mkdtemp template) holding
 * train.txt (6000 generated examples) and test.txt (1000 of another
 * sample), 300 values per categorical feature.
 */
void cmd_data_dir(char *dir);

/* cmd_rm_dir() - remove a folder made for a test. */
void cmd_rm_dir(const char *dir);

/* cmd_json_number() - the number after "@key": in @json; NaN if absent. */
double cmd_json_number(const char *json, const char *key);

#endif /* SS_TEST_CMD_H */
