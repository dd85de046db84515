// SPDX-License-Identifier: BSD-2-Clause
/*
 * The rank and world size from a launcher's environment,
 * ss_launcher_rank().  The input: a byte saying which launchers are
 * there (Slurm, Open MPI, PMI), then their variables' values, one a line.
 * The first launcher present decides (a malformed value is refused, not
 * passed over for the next); accepted: 0 <= rank < world <= the most
 * peers, plain decimal values read as written; refused: SS_EUSAGE naming
 * that launcher's variable (or the rank, with none).
 */
#include <string.h>

#include "fuzz.h"
#include "shadowsync/fabric.h"

static const char *const vars[3][3] = {
	{ "SLURM_PROCID", "SLURM_NTASKS", "Slurm" },
	{ "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI" },
	{ "PMI_RANK", "PMI_SIZE", "PMI" },
};

/* 0|[1-9][0-9]{0,8} */
static bool plain(const char *s)
{
	size_t n = strspn(s, "0123456789");

	return n > 0 && n <= 9 && s[n] == '\0' && (s[0] != '0' || n == 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_input in = { data, size };
	unsigned present = (unsigned)fuzz_take(&in, 1);
	char *text = fuzz_cstr(in.data, in.size), *save = NULL, *values[6];
	const char *source = NULL, *tok;
	int first = -1, rank = -1, world = -1, rc;

	for (int i = 0; i < 6; i++) {
		tok = strtok_r(i ? NULL : text, "\n", &save);
		values[i] = (char *)(tok ? tok : "");
	}
	for (int l = 0; l < 3; l++) {
		for (int v = 0; v < 2; v++) {
			/* bit l: the launcher is there; bit 3 + 2l + v: this
			 * variable of it is left out */
			if (present >> l & 1 &&
			    !(present >> (3 + 2 * l + v) & 1))
				setenv(vars[l][v], values[2 * l + v], 1);
			else
				unsetenv(vars[l][v]);
		}
		if (first < 0 && getenv(vars[l][0]) && getenv(vars[l][1]))
			first = l;
	}
	rc = ss_launcher_rank(&rank, &world, &source);
	FUZZ_CHECK(rc == 0 || rc == SS_EUSAGE, "rc %d", rc);
	if (first < 0) {
		FUZZ_CHECK(rc == SS_EUSAGE, "no launcher, yet rank %d of %d",
			   rank, world);
	} else if (rc == 0) {
		const char *r = getenv(vars[first][0]);
		const char *w = getenv(vars[first][1]);

		FUZZ_CHECK(!strcmp(source, vars[first][2]),
			   "from %s, but %s comes first", source,
			   vars[first][2]);
		FUZZ_CHECK(rank >= 0 && rank < world &&
				   world <= SS_FABRIC_MAX_PEERS,
			   "rank %d of %d", rank, world);
		FUZZ_CHECK(!plain(r) || !plain(w) ||
				   (rank == atoi(r) && world == atoi(w)),
			   "'%s' of '%s' read as %d of %d", r, w, rank, world);
	} else {
		const char *r = getenv(vars[first][0]);
		const char *w = getenv(vars[first][1]);

		FUZZ_CHECK(
			strstr(ss_last_error()->what, vars[first][0]) ||
				strstr(ss_last_error()->what, vars[first][1]),
			"'%s' names neither %s nor %s", ss_last_error()->what,
			vars[first][0], vars[first][1]);
		FUZZ_CHECK(!plain(r) || !plain(w) || atoi(r) >= atoi(w) ||
				   atoi(w) > SS_FABRIC_MAX_PEERS || atoi(w) < 1,
			   "%s=%s, %s=%s refused", vars[first][0], r,
			   vars[first][1], w);
	}
	for (int l = 0; l < 3; l++)
		for (int v = 0; v < 2; v++)
			unsetenv(vars[l][v]);
	free(text);
	return 0;
}
