// SPDX-License-Identifier: BSD-2-Clause
/* Leveled logging to stderr, one write per line so threads never interleave. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shadowsync/base.h"

static const char *const ss_level_names[] = { "error", "warn", "info", "debug",
					      NULL };

/* -1 until the first use reads SS_LOG. */
static int ss_level = -1;
static char ss_tag[32];
static uint64_t ss_start_ns;
static pthread_once_t ss_log_once = PTHREAD_ONCE_INIT;

static void ss_log_init(void)
{
	const char *env = getenv("SS_LOG");
	enum ss_log_level level = SS_LOG_WARN;

	ss_start_ns = ss_now_ns();
	if (env && *env && ss_log_parse_level(env, &level) < 0)
		fprintf(stderr,
			"shadowsync: warning: SS_LOG='%s' is not one of error, warn, info, debug; using warn\n",
			env);
	/* An explicit ss_log_set_level() before the first line wins. */
	__atomic_compare_exchange_n(&ss_level, &(int){ -1 }, (int)level, false,
				    __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

enum ss_log_level ss_log_level(void)
{
	pthread_once(&ss_log_once, ss_log_init);
	return (enum ss_log_level)__atomic_load_n(&ss_level, __ATOMIC_RELAXED);
}

void ss_log_set_level(enum ss_log_level level)
{
	pthread_once(&ss_log_once, ss_log_init);
	__atomic_store_n(&ss_level, (int)level, __ATOMIC_RELAXED);
}

int ss_log_parse_level(const char *text, enum ss_log_level *level)
{
	int index;
	int rc = ss_parse_choice("SS_LOG", text, ss_level_names, &index);

	if (rc == 0)
		*level = (enum ss_log_level)index;
	return rc;
}

void ss_log_set_tag(const char *tag)
{
	snprintf(ss_tag, sizeof(ss_tag), "%s", tag ? tag : "");
}

void ss_log(enum ss_log_level level, const char *fmt, ...)
{
	char line[1024];
	size_t len;
	int n;
	va_list ap;

	if (level > ss_log_level())
		return;
	n = snprintf(line, sizeof(line), "[%9.3f %s%s%s] ",
		     (double)(ss_now_ns() - ss_start_ns) / 1e9,
		     ss_level_names[level], ss_tag[0] ? " " : "", ss_tag);
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
	va_end(ap);
	len = strlen(line);
	if (len == 0 || line[len - 1] != '\n')
		line[len++] = '\n';
	/* One write(2) per line: lines of concurrent threads do not mix. */
	if (write(STDERR_FILENO, line, len) < 0)
		return;
}
