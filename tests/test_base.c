// SPDX-License-Identifier: BSD-2-Clause
/* Status codes, failure details, logging, clocks and option parsing. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shadowsync/base.h"

Test(status, text_for_every_kind_of_code)
{
	cr_assert_str_eq(ss_strerror(0), "success");
	cr_assert_str_eq(ss_strerror(-ENOMEM), strerror(ENOMEM));
	cr_assert_str_eq(ss_strerror(SS_ENOCORES), "not enough cores");
	cr_assert_str_eq(ss_strerror(SS_EINTERNAL), "internal error (a bug)");
	cr_assert(strstr(ss_strerror(-5000), "unknown status -5000"));
	cr_assert(strstr(ss_strerror(7), "unknown status 7"));
	/* Every SS_E* code has a text of its own. */
	for (int c = SS_EUSAGE; c >= SS_EINTERNAL; c--)
		cr_assert_null(strstr(ss_strerror(c), "unknown"), "code %d", c);
}

Test(status, detail_is_recorded_and_printed)
{
	char buf[1024] = { 0 };
	FILE *out = fmemopen(buf, sizeof(buf) - 1, "w");

	cr_assert_eq(ss_error_set(-EACCES, NULL, "run as root", "open '%s'",
				  "/dev/x"),
		     -EACCES);
	cr_assert_eq(ss_last_error()->code, -EACCES);
	cr_assert_str_eq(ss_last_error()->what, "open '/dev/x'");
	cr_assert_str_eq(ss_last_error()->why, strerror(EACCES));
	cr_assert_eq(ss_error_prefix("rank %d", 3), -EACCES);
	cr_assert_str_eq(ss_last_error()->what, "rank 3: open '/dev/x'");
	ss_error_print(out, "prog", -EACCES);
	fclose(out);
	cr_assert(strstr(buf, "prog: error: rank 3: open '/dev/x': "), "%s",
		  buf);
	cr_assert(strstr(buf, "prog: hint: run as root\n"), "%s", buf);
}

Test(status, print_without_detail_uses_the_code)
{
	char buf[256] = { 0 };
	FILE *out = fmemopen(buf, sizeof(buf) - 1, "w");

	ss_error_clear();
	ss_error_print(out, "prog", SS_EPEER);
	fclose(out);
	cr_assert_str_eq(buf, "prog: error: peer failed\n");
}

static void *set_other_error(void *arg)
{
	(void)arg;
	ss_error_set(SS_EPEER, "gone", NULL, "peer 2");
	return NULL;
}

Test(status, detail_is_per_thread)
{
	pthread_t t;

	ss_error_set(SS_EPARSE, "bad", NULL, "line 1");
	pthread_create(&t, NULL, set_other_error, NULL);
	pthread_join(t, NULL);
	cr_assert_eq(ss_last_error()->code, SS_EPARSE);
	cr_assert_str_eq(ss_last_error()->what, "line 1");
}

Test(parse, integers)
{
	long v = 0;

	cr_assert_eq(ss_parse_long("--n", "42", 1, 100, &v), 0);
	cr_assert_eq(v, 42);
	cr_assert_eq(ss_parse_long("--n", "010", 1, 100, &v), 0);
	cr_assert_eq(v, 10, "decimal, not octal");
	cr_assert_eq(ss_parse_long("--n", "-5", -10, 100, &v), 0);
	cr_assert_eq(v, -5);
	cr_assert_eq(ss_parse_long("--n", "0x10", 1, 100, &v), SS_EUSAGE);
	cr_assert_str_eq(ss_last_error()->why, "not a decimal integer");
	cr_assert_eq(ss_parse_long("--n", " 7", 1, 100, &v), SS_EUSAGE);
	cr_assert_eq(ss_parse_long("--n", "+7", 1, 100, &v), SS_EUSAGE);
	cr_assert_eq(ss_parse_long("--n", "-", 1, 100, &v), SS_EUSAGE);
	cr_assert_eq(ss_parse_long("--n", "101", 1, 100, &v), SS_EUSAGE);
	cr_assert_str_eq(ss_last_error()->what, "--n '101'");
	cr_assert_str_eq(ss_last_error()->why, "out of range");
	cr_assert_str_eq(ss_last_error()->hint,
			 "give an integer from 1 to 100");
	cr_assert_eq(ss_parse_long("--n", "4x", 1, 100, &v), SS_EUSAGE);
	cr_assert_str_eq(ss_last_error()->why, "not a decimal integer");
	cr_assert_eq(ss_parse_long("--n", "", 1, 100, &v), SS_EUSAGE);
	cr_assert_eq(ss_parse_long("--n", "99999999999999999999", 1, 100, &v),
		     SS_EUSAGE);
	cr_assert_eq(v, -5, "a failed parse must not change the value");
}

Test(parse, numbers)
{
	double v = 0;

	cr_assert_eq(ss_parse_double("--alpha", "0.25", 0, 1, &v), 0);
	cr_assert_float_eq(v, 0.25, 1e-12);
	cr_assert_eq(ss_parse_double("--alpha", "1.5", 0, 1, &v), SS_EUSAGE);
	cr_assert_eq(ss_parse_double("--alpha", "nan", 0, 1, &v), SS_EUSAGE);
	cr_assert_eq(ss_parse_double("--alpha", "0.5x", 0, 1, &v), SS_EUSAGE);
	cr_assert_str_eq(ss_last_error()->what, "--alpha '0.5x'");
}

Test(parse, choices)
{
	static const char *const words[] = { "ma", "easgd", "bmuf", NULL };
	int i = -1;

	cr_assert_eq(ss_parse_choice("--sync", "bmuf", words, &i), 0);
	cr_assert_eq(i, 2);
	cr_assert_eq(ss_parse_choice("--sync", "sgd", words, &i), SS_EUSAGE);
	cr_assert_str_eq(ss_last_error()->hint,
			 "accepted values: ma, easgd, bmuf");
	cr_assert_eq(i, 2);
}

/* Captures what ss_log writes to stderr while @fn runs. */
static void capture_stderr(void (*fn)(void), char *buf, size_t size)
{
	int fds[2], saved = dup(STDERR_FILENO);
	ssize_t n;

	cr_assert_eq(pipe(fds), 0);
	dup2(fds[1], STDERR_FILENO);
	close(fds[1]);
	fn();
	dup2(saved, STDERR_FILENO);
	close(saved);
	n = read(fds[0], buf, size - 1);
	buf[n > 0 ? n : 0] = '\0';
	close(fds[0]);
}

static void log_each_level(void)
{
	ss_log_set_tag("rank 1");
	ss_log_error("e%d", 1);
	ss_log_warn("w%d", 2);
	ss_log_info("i%d", 3);
	ss_log_debug("d%d", 4);
}

Test(log, level_from_environment)
{
	char buf[1024];

	/* Each test runs in a process of its own: SS_LOG is read once. */
	setenv("SS_LOG", "info", 1);
	cr_assert_eq(ss_log_level(), SS_LOG_INFO);
	capture_stderr(log_each_level, buf, sizeof(buf));
	cr_assert(strstr(buf, "error rank 1] e1\n"), "%s", buf);
	cr_assert(strstr(buf, "warn rank 1] w2\n"), "%s", buf);
	cr_assert(strstr(buf, "info rank 1] i3\n"), "%s", buf);
	cr_assert_null(strstr(buf, "d4"), "%s", buf);
}

Test(log, default_is_warn_and_verbose_overrides)
{
	char buf[1024];

	unsetenv("SS_LOG");
	cr_assert_eq(ss_log_level(), SS_LOG_WARN);
	capture_stderr(log_each_level, buf, sizeof(buf));
	cr_assert(strstr(buf, "w2"), "%s", buf);
	cr_assert_null(strstr(buf, "i3"), "%s", buf);
	ss_log_set_level(SS_LOG_DEBUG);
	capture_stderr(log_each_level, buf, sizeof(buf));
	cr_assert(strstr(buf, "d4"), "%s", buf);
}

Test(log, bad_environment_value_warns)
{
	char buf[1024];

	setenv("SS_LOG", "loud", 1);
	capture_stderr((void (*)(void))ss_log_level, buf, sizeof(buf));
	cr_assert(strstr(buf, "SS_LOG='loud'"), "%s", buf);
	cr_assert_eq(ss_log_level(), SS_LOG_WARN);
}

Test(log, parse_level)
{
	enum ss_log_level l;

	cr_assert_eq(ss_log_parse_level("debug", &l), 0);
	cr_assert_eq(l, SS_LOG_DEBUG);
	cr_assert_eq(ss_log_parse_level("verbose", &l), SS_EUSAGE);
}

Test(clock, monotonic_and_deadlines)
{
	uint64_t a = ss_now_ns(), b;

	ss_sleep_ns(2000000);
	b = ss_now_ns();
	cr_assert_geq(b - a, 2000000u);
	cr_assert(ss_deadline_passed(ss_deadline_ns(0)));
	cr_assert_not(ss_deadline_passed(ss_deadline_ns(60000)));
	cr_assert_gt(ss_now_s(), 0.0);
}

Test(json, strings_are_escaped)
{
	char buf[256] = { 0 };
	FILE *out = fmemopen(buf, sizeof(buf) - 1, "w");

	ss_json_string(out, "a\"b\\c\nd\x01");
	fputc(' ', out);
	ss_json_string(out, NULL);
	fclose(out);
	cr_assert_str_eq(buf, "\"a\\\"b\\\\c\\nd\\u0001\" null");
}
