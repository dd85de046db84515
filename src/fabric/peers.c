// SPDX-License-Identifier: BSD-2-Clause
/*
 * Who the peers are: Slurm node lists, host files, and the rank and world
 * size that launchers (Slurm, Open MPI, PMI) put in the environment, so
 * that `srun shadowsync train ...` and `mpirun ... shadowsync train ...`
 * work without MPI being linked.
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fabric_internal.h"

void ss_strings_free(char ***list, int n)
{
	if (!list || !*list)
		return;
	for (int i = 0; i < n; i++)
		free((*list)[i]);
	free(*list);
	*list = NULL;
}

/* Append a copy of @s; -E2BIG past SS_FABRIC_MAX_PEERS, which the caller
 * reports, naming its list. */
static int ss_push(char ***list, int *n, int *cap, const char *s)
{
	if (*n == SS_FABRIC_MAX_PEERS)
		return -E2BIG;
	if (*n == *cap) {
		int c = *cap ? 2 * *cap : 16;
		char **l = realloc(*list, (size_t)c * sizeof(char *));

		if (!l)
			return -ENOMEM;
		*list = l;
		*cap = c;
	}
	(*list)[*n] = strdup(s);
	if (!(*list)[*n])
		return -ENOMEM;
	(*n)++;
	return 0;
}

/* The largest node number a range may name. */
#define SS_NODE_MAX 999999999L

static const char ss_too_many_hint[] =
	"a job has at most 65536 ranks (SS_FABRIC_MAX_PEERS)";

static const char ss_nodelist_hint[] =
	"write it as Slurm does: node[01-04,07] or rack[1-2]-node[01-04]";

/*
 * One "prefix[ranges]suffix" item (or a plain name), its brackets
 * balanced; the suffix may hold more bracket groups, expanded in turn
 * ("rack[1-2]-node[01-04]").
 */
static int ss_expand_item(const char *item, size_t len, char ***list, int *n,
			  int *cap)
{
	const char *open = memchr(item, '[', len), *close;
	char name[256], prefix[256], suffix[256], ranges[256], *save = NULL, *r;
	int rc = 0;

	if (len == 0 || len >= sizeof(name))
		return ss_error_set(SS_EUSAGE, "empty or too long name", NULL,
				    "node list item '%.*s'", (int)len, item);
	if (!open) {
		memcpy(name, item, len);
		name[len] = '\0';
		return ss_push(list, n, cap, name);
	}
	close = memchr(open, ']', len - (size_t)(open - item));
	if (!close)
		return ss_error_set(SS_EUSAGE, "unbalanced brackets",
				    ss_nodelist_hint, "node list item '%.*s'",
				    (int)len, item);
	snprintf(prefix, sizeof(prefix), "%.*s", (int)(open - item), item);
	snprintf(ranges, sizeof(ranges), "%.*s", (int)(close - open - 1),
		 open + 1);
	snprintf(suffix, sizeof(suffix), "%.*s",
		 (int)(len - (size_t)(close + 1 - item)), close + 1);
	if (strspn(ranges, ", ") == strlen(ranges))
		return ss_error_set(SS_EUSAGE, "nothing between the brackets",
				    ss_nodelist_hint, "node list item '%.*s'",
				    (int)len, item);
	for (r = strtok_r(ranges, ",", &save); r && rc == 0;
	     r = strtok_r(NULL, ",", &save)) {
		char *dash = strchr(r, '-'), *end;
		long lo, hi;
		int width = (int)(dash ? dash - r : (long)strlen(r)), k;

		/* digits only, each at most SS_NODE_MAX: no sign, no overflow */
		errno = 0;
		lo = strtol(r, &end, 10);
		hi = lo;
		if (!isdigit((unsigned char)*r) || end == r || errno ||
		    lo > SS_NODE_MAX || (dash ? end != dash : *end != '\0'))
			return ss_error_set(SS_EUSAGE, "not a number range",
					    "node numbers are 0 to 999999999",
					    "node list range '%s'", r);
		if (dash) {
			errno = 0;
			hi = strtol(dash + 1, &end, 10);
			if (!isdigit((unsigned char)dash[1]) ||
			    end == dash + 1 || *end || errno ||
			    hi > SS_NODE_MAX || hi < lo || hi - lo > 4096)
				return ss_error_set(
					SS_EUSAGE, "not a number range",
					"node numbers are 0 to 999999999, "
					"at most 4097 in a range",
					"node list range '%s'", r);
		}
		for (long v = lo; v <= hi && rc == 0; v++) {
			/* zero padding as written: node[01-04] is node01 */
			k = snprintf(name, sizeof(name), "%s%0*ld%s", prefix,
				     width, v, suffix);
			if (k >= (int)sizeof(name))
				return ss_error_set(SS_EUSAGE,
						    "a name longer than 255 "
						    "characters",
						    NULL,
						    "node list item '%.*s'",
						    (int)len, item);
			rc = strchr(suffix, '[') ?
				     ss_expand_item(name, (size_t)k, list, n,
						    cap) :
				     ss_push(list, n, cap, name);
		}
	}
	return rc;
}

int ss_nodelist_expand(const char *nodelist, char ***hosts, int *n)
{
	int cap = 0, depth = 0, rc = 0;
	const char *start = nodelist, *p;

	*hosts = NULL;
	*n = 0;
	if (!nodelist || !*nodelist)
		return ss_error_set(SS_EUSAGE, "empty", NULL, "node list");
	/* Items are separated by commas outside brackets, which do not
	 * nest. */
	for (p = nodelist;; p++) {
		if (*p == '[')
			depth++;
		else if (*p == ']')
			depth--;
		if (depth < 0 || depth > 1 || (*p == '\0' && depth)) {
			rc = ss_error_set(
				SS_EUSAGE, "unbalanced or nested brackets",
				ss_nodelist_hint, "node list '%s'", nodelist);
			break;
		}
		if ((*p == ',' && depth == 0) || *p == '\0') {
			rc = ss_expand_item(start, (size_t)(p - start), hosts,
					    n, &cap);
			if (rc < 0 || *p == '\0')
				break;
			start = p + 1;
		}
	}
	if (rc == -E2BIG)
		rc = ss_error_set(SS_EUSAGE, "more than 65536 hosts",
				  ss_too_many_hint, "node list '%s'", nodelist);
	if (rc == 0 && *n == 0)
		rc = ss_error_set(SS_EUSAGE, "it names no host", NULL,
				  "node list '%s'", nodelist);
	if (rc < 0)
		ss_strings_free(hosts, *n);
	return rc;
}

/* The longest host name a host file may give (a DNS name is at most 253). */
#define SS_HOST_MAX 255

/* The first control character of @s but a tab, or NULL. */
static const char *ss_control_char(const char *s)
{
	for (; *s; s++)
		if (iscntrl((unsigned char)*s) && *s != '\t')
			return s;
	return NULL;
}

/* One line of a host file, comments and blanks stripped, into @addrs. */
static int ss_hostfile_line(const char *path, int lineno, char *s, int port,
			    char ***addrs, int *n, int *cap)
{
	const char *colon, *ctl, *bracket = strchr(s, ']');
	char *e, *addr;
	size_t host;
	int rc;

	if (strchr(s, '#'))
		*strchr(s, '#') = '\0';
	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	if (!*s)
		return 0;
	/* named by its byte: it is not printed to the terminal */
	ctl = ss_control_char(s);
	if (ctl)
		return ss_error_set(
			SS_EUSAGE, "a control character in the line",
			"give a text file, one host[:port] per line",
			"%s:%d: byte 0x%02x after '%.*s'", path, lineno,
			(unsigned char)*ctl, (int)(ctl - s), s);
	if (strpbrk(s, " \t"))
		return ss_error_set(SS_EUSAGE, "one host[:port] per line",
				    "an mpirun host file ('slots=') is another "
				    "file: give train the ranks' addresses",
				    "%s:%d: '%s'", path, lineno, s);
	/* a port after a host name, an IPv4 address or [an IPv6 one] */
	colon = strrchr(s, ':');
	if (s[0] == '[')
		colon = bracket && bracket[1] == ':' ? bracket + 1 : NULL;
	else if (colon && strchr(s, ':') != colon)
		return ss_error_set(SS_EUSAGE,
				    "an IPv6 address without brackets",
				    "write it [address] or [address]:port",
				    "%s:%d: '%s'", path, lineno, s);
	host = colon ? (size_t)(colon - s) : strlen(s);
	if (host > SS_HOST_MAX)
		return ss_error_set(SS_EUSAGE, "the host name is too long",
				    "host names are at most 255 characters",
				    "%s:%d: a host name of %zu characters "
				    "('%.24s...')",
				    path, lineno, host, s);
	if (colon)
		return ss_push(addrs, n, cap, s);
	if (asprintf(&addr, "%s:%d", s, port) < 0)
		return -ENOMEM;
	rc = ss_push(addrs, n, cap, addr);
	free(addr);
	return rc;
}

/*
 * Lines are read whole (getline), however long: a fixed buffer would cut
 * a long line in two and give its tail as another host.
 */
int ss_hostfile_read(const char *path, int port, char ***addrs, int *n)
{
	FILE *f = fopen(path, "r");
	char *line = NULL;
	size_t size = 0;
	ssize_t len;
	int cap = 0, lineno = 0, rc = 0;

	*addrs = NULL;
	*n = 0;
	if (!f)
		return ss_error_set(-errno, NULL, "check the --hostfile path",
				    "host file '%s'", path);
	while (rc == 0 && (len = getline(&line, &size, f)) >= 0) {
		lineno++;
		if (memchr(line, '\0', (size_t)len))
			rc = ss_error_set(SS_EUSAGE,
					  "a NUL byte in the line (a binary "
					  "file?)",
					  "give a text file, one host[:port] "
					  "per line",
					  "%s:%d", path, lineno);
		else
			rc = ss_hostfile_line(path, lineno, line, port, addrs,
					      n, &cap);
		if (rc == -E2BIG)
			rc = ss_error_set(SS_EUSAGE, "more than 65536 hosts",
					  ss_too_many_hint, "%s:%d", path,
					  lineno);
	}
	if (rc == 0 && ferror(f))
		rc = ss_error_set(-EIO, NULL, NULL, "reading host file '%s'",
				  path);
	free(line);
	fclose(f);
	if (rc == 0 && *n == 0)
		rc = ss_error_set(SS_EUSAGE, "no hosts in it",
				  "one host[:port] a line, in rank order",
				  "host file '%s'", path);
	if (rc < 0)
		ss_strings_free(addrs, *n);
	return rc;
}

int ss_launcher_rank(int *rank, int *world, const char **source)
{
	static const struct {
		const char *rank, *size, *name;
	} launchers[] = {
		/* shadowsync launch: inside an allocation, its ranks' own */
		{ "SS_RANK", "SS_WORLD", "shadowsync launch" },
		{ "SLURM_PROCID", "SLURM_NTASKS", "Slurm" },
		{ "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "Open MPI" },
		{ "PMI_RANK", "PMI_SIZE", "PMI" },
		{ "RANK", "WORLD_SIZE", "torchrun" },
	};

	size_t n = sizeof(launchers) / sizeof(launchers[0]);
	/* torchrun inside srun or mpirun: its workers' ranks are the job's */
	bool torchrun_in = getenv("TORCHELASTIC_RUN_ID") != NULL;

	for (size_t k = 0; k < n; k++) {
		size_t i = torchrun_in ? (k + n - 1) % n : k;
		const char *r = getenv(launchers[i].rank);
		const char *s = getenv(launchers[i].size);
		long rv, sv;

		if (!r || !s)
			continue;
		if (ss_parse_long(launchers[i].rank, r, 0,
				  SS_FABRIC_MAX_PEERS - 1, &rv) < 0 ||
		    ss_parse_long(launchers[i].size, s, 1, SS_FABRIC_MAX_PEERS,
				  &sv) < 0)
			return SS_EUSAGE;
		if (rv >= sv)
			return ss_error_set(SS_EUSAGE, "rank not below size",
					    NULL, "%s=%s, %s=%s",
					    launchers[i].rank, r,
					    launchers[i].size, s);
		*rank = (int)rv;
		*world = (int)sv;
		*source = launchers[i].name;
		return 0;
	}
	return ss_error_set(
		SS_EUSAGE, "no launcher environment",
		"give --rank, or start under shadowsync launch, srun, mpirun, a "
		"PMI launcher or torchrun",
		"rank");
}
