// SPDX-License-Identifier: BSD-2-Clause
/*
 * Slurm node lists, ss_nodelist_expand().  The input is a node list.
 * Accepted: 1 to SS_FABRIC_MAX_PEERS host names, each non-empty, shorter
 * than 256 bytes, with no bracket or comma left in it; written back as a
 * plain comma-separated list, it expands to the same names.  Refused:
 * SS_EUSAGE naming the node list, no list returned.
 */
#include <errno.h>
#include <string.h>

#include "fuzz.h"
#include "shadowsync/fabric.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *list = fuzz_cstr(data, size), *joined, *p;
	char **hosts = (char **)1, **again = NULL;
	int n = -1, m = -1, rc;
	size_t len = 0;

	rc = ss_nodelist_expand(list, &hosts, &n);
	FUZZ_CHECK(rc == 0 || rc == SS_EUSAGE || rc == -ENOMEM, "rc %d", rc);
	if (rc < 0) {
		FUZZ_CHECK(hosts == NULL, "refused, yet a list returned");
		FUZZ_CHECK(strstr(ss_last_error()->what, "node list"),
			   "the error does not name the node list: '%s'",
			   ss_last_error()->what);
		free(list);
		return 0;
	}
	FUZZ_CHECK(n >= 1 && n <= SS_FABRIC_MAX_PEERS, "%d hosts", n);
	for (int i = 0; i < n; i++) {
		size_t hl = strlen(hosts[i]);

		FUZZ_CHECK(hl > 0 && hl < 256, "host %d: %zu bytes", i, hl);
		FUZZ_CHECK(!strpbrk(hosts[i], "[],"),
			   "host %d '%s' of '%s' keeps a bracket or a comma", i,
			   hosts[i], list);
		len += hl + 1;
	}

	/* the names written back as a plain list expand to themselves */
	joined = malloc(len);
	p = joined;
	for (int i = 0; i < n; i++)
		p += sprintf(p, "%s%s", i ? "," : "", hosts[i]);
	rc = ss_nodelist_expand(joined, &again, &m);
	FUZZ_CHECK(rc == 0, "'%s' expands to '%s', which is refused: %s", list,
		   joined, ss_last_error()->why);
	FUZZ_CHECK(m == n, "'%s': %d names, again %d", list, n, m);
	for (int i = 0; i < n; i++)
		FUZZ_CHECK(!strcmp(hosts[i], again[i]), "host %d: '%s', '%s'",
			   i, hosts[i], again[i]);
	ss_strings_free(&again, m);
	ss_strings_free(&hosts, n);
	FUZZ_CHECK(hosts == NULL, "free leaves the pointer");
	free(joined);
	free(list);
	return 0;
}
