/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Threaded test scenarios that run both under Criterion and under
 * ThreadSanitizer.
 *
 * Criterion cannot start under TSan (Snaipe/Criterion#274): BoxFort looks for
 * room for its shared arena by probing random addresses with mincore(2), and
 * TSan's shadow mappings make every probe look taken.  So a threaded test is
 * written once as a SCENARIO: in the normal and ASan builds it becomes a
 * Criterion Test(); built with -DSS_TSAN_RUNNER it registers itself with
 * tests/tsan_runner.c, which runs each scenario in a child process of its own
 * and counts a TSan report (exit status 66) as a failure.
 *
 * A scenario returns 0; check() and skip() return early from it.
 */
#ifndef SS_TEST_SCENARIO_H
#define SS_TEST_SCENARIO_H

#include <stdarg.h>
#include <stdio.h>

/* The reason of the last failed check() or skip(), printed by the runner. */
extern char ss_scenario_why[512];

#define SS_SCENARIO_SKIPPED 77

static inline __attribute__((format(printf, 4, 5))) void
ss_scenario_fail(const char *file, int line, const char *cond, const char *fmt,
		 ...)
{
	int n = snprintf(ss_scenario_why, sizeof(ss_scenario_why),
			 "%s:%d: check failed: %s: ", file, line, cond);
	va_list ap;

	va_start(ap, fmt);
	if (n > 0 && (size_t)n < sizeof(ss_scenario_why))
		vsnprintf(ss_scenario_why + n,
			  sizeof(ss_scenario_why) - (size_t)n, fmt, ap);
	va_end(ap);
}

#define check(cond, ...)                                            \
	do {                                                        \
		if (!(cond)) {                                      \
			ss_scenario_fail(__FILE__, __LINE__, #cond, \
					 __VA_ARGS__);              \
			return -1;                                  \
		}                                                   \
	} while (0)

#define skip(...)                                                  \
	do {                                                       \
		snprintf(ss_scenario_why, sizeof(ss_scenario_why), \
			 __VA_ARGS__);                             \
		return SS_SCENARIO_SKIPPED;                        \
	} while (0)

#ifdef SS_TSAN_RUNNER

void ss_scenario_register(const char *suite, const char *name, int (*fn)(void));

#define SCENARIO(suite, name)                                               \
	static int suite##_##name(void);                                    \
	__attribute__((constructor)) static void suite##_##name##_reg(void) \
	{                                                                   \
		ss_scenario_register(#suite, #name, suite##_##name);        \
	}                                                                   \
	static int suite##_##name(void)

#else

#include <criterion/criterion.h>

char ss_scenario_why[512];

#define SCENARIO(suite, name)                                \
	static int suite##_##name(void);                     \
	Test(suite, name)                                    \
	{                                                    \
		int rc_ = suite##_##name();                  \
		if (rc_ == SS_SCENARIO_SKIPPED)              \
			cr_skip_test("%s", ss_scenario_why); \
		cr_assert_eq(rc_, 0, "%s", ss_scenario_why); \
	}                                                    \
	static int suite##_##name(void)

#endif /* SS_TSAN_RUNNER */

#endif /* SS_TEST_SCENARIO_H */
