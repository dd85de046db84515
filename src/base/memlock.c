// SPDX-License-Identifier: BSD-2-Clause
/*
 * Whether this process may pin (register) more memory: RLIMIT_MEMLOCK,
 * unless the process has CAP_IPC_LOCK, which lets the kernel pin past it.
 * Shared by the verbs backend, before it registers, and by doctor.
 */
#include <errno.h>
#include <stdio.h>
#include <sys/resource.h>

#include "shadowsync/base.h"

static bool ss_has_cap_ipc_lock(void)
{
	unsigned long long caps = 0;
	char line[256];
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "CapEff: %llx", &caps) == 1)
			break;
	fclose(f);
	return caps & (1ull << 14); /* CAP_IPC_LOCK */
}

int ss_memlock_check(size_t registered, size_t len, const char *where,
		     uint64_t *limit)
{
	struct rlimit rl;

	*limit = UINT64_MAX;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 0;
	*limit = rl.rlim_cur;
	if (registered + len <= rl.rlim_cur || ss_has_cap_ipc_lock())
		return 0;
	return ss_error_set(
		-ENOMEM, "the locked-memory limit (ulimit -l) is too low",
		"raise it where the job starts: 'ulimit -l unlimited', '* - memlock unlimited' in /etc/security/limits.conf, LimitMEMLOCK=infinity (systemd), --ulimit memlock=-1 (docker); or give the process CAP_IPC_LOCK",
		"registering %zu bytes (%zu already) on %s with RLIMIT_MEMLOCK at %llu bytes",
		len, registered, where, (unsigned long long)rl.rlim_cur);
}
