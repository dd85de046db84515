// SPDX-License-Identifier: BSD-2-Clause
/* Status codes and the per-thread detail of the last failure. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shadowsync/base.h"

static const char *const ss_status_text[] = {
	[-(SS_EUSAGE + 1000)] = "invalid option or argument",
	[-(SS_EPARSE + 1000)] = "malformed input",
	[-(SS_ETOPO + 1000)] = "machine topology unavailable",
	[-(SS_ENOCORES + 1000)] = "not enough cores",
	[-(SS_ENODEVICE + 1000)] = "no such RDMA device",
	[-(SS_EHANDSHAKE + 1000)] = "peer handshake mismatch",
	[-(SS_EPEER + 1000)] = "peer failed",
	[-(SS_EREMOTE + 1000)] = "remote access error",
	[-(SS_ELAYOUT + 1000)] = "layout mismatch",
	[-(SS_EINTERNAL + 1000)] = "internal error (a bug)",
};

const char *ss_strerror(int code)
{
	static __thread char buf[64];
	const int nr = sizeof(ss_status_text) / sizeof(ss_status_text[0]);

	if (code == 0)
		return "success";
	if (code <= SS_EUSAGE && code > SS_EUSAGE - nr)
		return ss_status_text[SS_EUSAGE - code];
	if (code < 0 && code > SS_EUSAGE)
		return strerror_r(-code, buf, sizeof(buf));
	snprintf(buf, sizeof(buf), "unknown status %d", code);
	return buf;
}

static __thread struct ss_error ss_last;

int ss_error_set(int code, const char *why, const char *hint,
		 const char *what_fmt, ...)
{
	va_list ap;

	ss_last.code = code;
	va_start(ap, what_fmt);
	vsnprintf(ss_last.what, sizeof(ss_last.what), what_fmt, ap);
	va_end(ap);
	snprintf(ss_last.why, sizeof(ss_last.why), "%s",
		 why ? why : ss_strerror(code));
	snprintf(ss_last.hint, sizeof(ss_last.hint), "%s", hint ? hint : "");
	return code;
}

int ss_error_prefix(const char *fmt, ...)
{
	char prefix[sizeof(ss_last.what)], old[sizeof(ss_last.what)];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	memcpy(old, ss_last.what, sizeof(old));
	/* A "what" too long for the buffer is cut: it is for people. */
	if (snprintf(ss_last.what, sizeof(ss_last.what), "%s: %s", prefix,
		     old) >= (int)sizeof(ss_last.what))
		ss_last.what[sizeof(ss_last.what) - 2] = '.';
	return ss_last.code;
}

const struct ss_error *ss_last_error(void)
{
	return &ss_last;
}

void ss_error_clear(void)
{
	memset(&ss_last, 0, sizeof(ss_last));
}

/* @s with control bytes written as \xNN: a message quoting a line of a
 * binary file must not send escape sequences to the terminal. */
static void ss_put_printable(FILE *out, const char *s)
{
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch < 0x20 || ch == 0x7f)
			fprintf(out, "\\x%02x", ch);
		else
			putc(ch, out);
	}
}

static void ss_error_put(FILE *out, const char *prog, int code)
{
	if (ss_last.code != code || !ss_last.what[0]) {
		fprintf(out, "%s: error: %s\n", prog, ss_strerror(code));
		return;
	}
	fprintf(out, "%s: error: ", prog);
	ss_put_printable(out, ss_last.what);
	fputs(": ", out);
	ss_put_printable(out, ss_last.why);
	putc('\n', out);
	if (ss_last.hint[0]) {
		fprintf(out, "%s: hint: ", prog);
		ss_put_printable(out, ss_last.hint);
		putc('\n', out);
	}
}

void ss_error_print(FILE *out, const char *prog, int code)
{
	char *text = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);

	/*
	 * Composed first, then one write: on an unbuffered stderr each piece
	 * was a write of its own, and a rank that `launch` stopped while it
	 * wrote left half a line.
	 */
	if (!m) {
		ss_error_put(out, prog, code);
		return;
	}
	ss_error_put(m, prog, code);
	if (fclose(m) == 0)
		fwrite(text, 1, len, out);
	else
		ss_error_put(out, prog, code);
	free(text);
}
