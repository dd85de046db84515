// SPDX-License-Identifier: BSD-2-Clause
/* Monotonic time and deadlines. */
#include <errno.h>
#include <time.h>

#include "shadowsync/base.h"

uint64_t ss_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

double ss_now_s(void)
{
	return (double)ss_now_ns() / 1e9;
}

uint64_t ss_deadline_ns(uint64_t timeout_ms)
{
	return ss_now_ns() + timeout_ms * 1000000u;
}

bool ss_deadline_passed(uint64_t deadline)
{
	return ss_now_ns() >= deadline;
}

void ss_sleep_ns(uint64_t ns)
{
	struct timespec ts = { .tv_sec = (time_t)(ns / 1000000000u),
			       .tv_nsec = (long)(ns % 1000000000u) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}
