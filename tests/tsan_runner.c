// SPDX-License-Identifier: BSD-2-Clause
/*
 * Runs the SCENARIOs of a threaded test built for ThreadSanitizer, each in a
 * child process, and ends on "tsan: N passed, N failed, N skipped".
 * See tests/scenario.h for why Criterion cannot do it.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "scenario.h"

char ss_scenario_why[512];

static struct {
	const char *suite, *name;
	int (*fn)(void);
} ss_scenarios[256];
static int ss_nr_scenarios;

void ss_scenario_register(const char *suite, const char *name, int (*fn)(void))
{
	if (ss_nr_scenarios == 256)
		abort();
	ss_scenarios[ss_nr_scenarios].suite = suite;
	ss_scenarios[ss_nr_scenarios].name = name;
	ss_scenarios[ss_nr_scenarios].fn = fn;
	ss_nr_scenarios++;
}

int main(void)
{
	int passed = 0, failed = 0, skipped = 0;

	for (int i = 0; i < ss_nr_scenarios; i++) {
		int fds[2], status = 0;
		char why[512] = "";
		ssize_t n;
		pid_t pid;

		fflush(stdout);
		if (pipe(fds) < 0 || (pid = fork()) < 0) {
			perror("tsan_runner");
			return 1;
		}
		if (pid == 0) {
			int rc;

			close(fds[0]);
			rc = ss_scenarios[i].fn();
			if (write(fds[1], ss_scenario_why,
				  strlen(ss_scenario_why)) < 0)
				rc = -1;
			_exit(rc == 0 ? 0 : rc == SS_SCENARIO_SKIPPED ? 77 : 1);
		}
		close(fds[1]);
		n = read(fds[0], why, sizeof(why) - 1);
		why[n > 0 ? n : 0] = '\0';
		close(fds[0]);
		waitpid(pid, &status, 0);
		if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
			printf("[PASS] %s::%s\n", ss_scenarios[i].suite,
			       ss_scenarios[i].name);
			passed++;
		} else if (WIFEXITED(status) && WEXITSTATUS(status) == 77) {
			printf("[SKIP] %s::%s: %s\n", ss_scenarios[i].suite,
			       ss_scenarios[i].name, why);
			skipped++;
		} else {
			printf("[FAIL] %s::%s: %s%s\n", ss_scenarios[i].suite,
			       ss_scenarios[i].name,
			       WIFEXITED(status) && WEXITSTATUS(status) == 66 ?
				       "ThreadSanitizer report above " :
				       "",
			       why);
			failed++;
		}
	}
	printf("tsan: %d passed, %d failed, %d skipped\n", passed, failed,
	       skipped);
	return failed ? 1 : 0;
}
