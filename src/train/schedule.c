// SPDX-License-Identifier: BSD-2-Clause
/*
 * Learning-rate schedules: a linear warmup over the first examples, then
 * the rate held, or brought to 0 linearly or along a half cosine as the
 * run's data is trained.  The run's progress is its bytes of data, the
 * one total known before training (its examples are not).
 */
#include <math.h>

#include "shadowsync/train.h"

static const char *const ss_schedule_names[] = { "constant", "warmup-linear",
						 "cosine", NULL };

int ss_lr_schedule_parse(const char *option, const char *text,
			 enum ss_lr_schedule *schedule)
{
	int i, rc = ss_parse_choice(option, text, ss_schedule_names, &i);

	if (rc == 0)
		*schedule = (enum ss_lr_schedule)i;
	return rc;
}

const char *ss_lr_schedule_name(enum ss_lr_schedule schedule)
{
	return schedule <= SS_LR_COSINE ? ss_schedule_names[schedule] : "?";
}

float ss_lr_at(enum ss_lr_schedule schedule, float lr, uint64_t warmup,
	       uint64_t examples, double done)
{
	double f = done < 0 ? 0 : done > 1 ? 1 : done, k = 1;

	if (warmup && examples < warmup)
		k = (double)(examples + 1) / (double)warmup;
	if (schedule == SS_LR_WARMUP_LINEAR)
		k *= 1 - f;
	else if (schedule == SS_LR_COSINE)
		k *= 0.5 * (1 + cos(M_PI * f));
	return (float)(lr * k);
}
