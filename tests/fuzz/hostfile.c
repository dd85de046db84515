// SPDX-License-Identifier: BSD-2-Clause
/*
 * Host files, ss_hostfile_read().  The input: two bytes of default port,
 * then the file.  Against a reference reading of the format (one
 * host[:port] a line, '#' comments, blank lines, surrounding blanks, an
 * IPv6 address in brackets; the default port added where a line has
 * none):
 *  - accepted: the reference accepts it too and gives the same addresses,
 *    each "host:port" with no blank or control character in it;
 *  - refused: SS_EUSAGE naming the file, and, when the reason is a line,
 *    that line, where the reference found no fault in the lines before.
 */
#include <ctype.h>
#include <string.h>

#include "fuzz.h"
#include "shadowsync/fabric.h"

#define HOST_MAX 255 /* the reader's limit on a host name */

/* The reference: the addresses, or the first bad line (from 1). */
struct ref {
	char **addrs;
	int n, bad_line;
};

static void reference(const char *text, size_t size, int port, struct ref *r)
{
	size_t at = 0;
	int line = 0;

	memset(r, 0, sizeof(*r));
	r->addrs = calloc(size + 1, sizeof(char *));
	while (at < size && !r->bad_line) {
		const char *nl = memchr(text + at, '\n', size - at);
		size_t len = nl ? (size_t)(nl - (text + at)) : size - at;
		char *s = fuzz_cstr((const uint8_t *)text + at, len), *b = s,
		     *e, *colon;
		bool nul = memchr(text + at, '\0', len) != NULL;

		line++;
		at += len + (nl != NULL);
		if (nul) {
			r->bad_line = line;
		} else {
			if ((e = strchr(b, '#')))
				*e = '\0';
			while (isspace((unsigned char)*b))
				b++;
			e = b + strlen(b);
			while (e > b && isspace((unsigned char)e[-1]))
				*--e = '\0';
			/* a port after a name, an IPv4 address or
			 * [an IPv6 one]; a bare IPv6 address is bad */
			colon = strrchr(b, ':');
			if (b[0] == '[')
				colon = (e = strchr(b, ']')) && e[1] == ':' ?
						e + 1 :
						NULL;
			else if (colon && strchr(b, ':') != colon)
				r->bad_line = line;
			e = b + strlen(b);
			for (char *c = b; *c; c++)
				if (isspace((unsigned char)*c) ||
				    iscntrl((unsigned char)*c))
					r->bad_line = line;
			if ((size_t)((colon ? colon : e) - b) > HOST_MAX)
				r->bad_line = line;
			if (*b && !r->bad_line) {
				r->addrs[r->n] = malloc(strlen(b) + 16);
				if (colon)
					strcpy(r->addrs[r->n], b);
				else
					sprintf(r->addrs[r->n], "%s:%d", b,
						port);
				r->n++;
			}
		}
		free(s);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct fuzz_input in = { data, size };
	int port = (int)fuzz_take(&in, 2), n = -1, rc;
	const char *path = fuzz_file("hosts", in.data, in.size);
	char **addrs = (char **)1;
	struct ref ref;

	reference((const char *)in.data, in.size, port, &ref);
	rc = ss_hostfile_read(path, port, &addrs, &n);
	FUZZ_CHECK(rc == 0 || rc == SS_EUSAGE, "rc %d: %s", rc,
		   ss_last_error()->why);
	if (rc == 0) {
		FUZZ_CHECK(!ref.bad_line, "line %d is bad, yet accepted",
			   ref.bad_line);
		FUZZ_CHECK(n == ref.n, "%d addresses, want %d", n, ref.n);
		for (int i = 0; i < n; i++) {
			FUZZ_CHECK(!strcmp(addrs[i], ref.addrs[i]),
				   "address %d: '%s', want '%s'", i, addrs[i],
				   ref.addrs[i]);
			FUZZ_CHECK(strchr(addrs[i], ':'), "'%s'", addrs[i]);
		}
		ss_strings_free(&addrs, n);
	} else {
		const char *what = ss_last_error()->what, *at;
		int line;

		FUZZ_CHECK(addrs == NULL, "refused, yet a list returned");
		FUZZ_CHECK(strstr(what, path), "'%s' does not name the file",
			   what);
		at = strstr(what, path) + strlen(path);
		if (sscanf(at, ":%d", &line) == 1) {
			FUZZ_CHECK(!ref.bad_line || ref.bad_line >= line,
				   "refused at line %d, but line %d is bad",
				   line, ref.bad_line);
		} else {
			/* no hosts at all, or too many */
			FUZZ_CHECK(ref.n == 0 || ref.n > SS_FABRIC_MAX_PEERS,
				   "'%s' for %d good hosts", what, ref.n);
		}
	}
	for (int i = 0; i < ref.n; i++)
		free(ref.addrs[i]);
	free(ref.addrs);
	return 0;
}
