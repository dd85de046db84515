// SPDX-License-Identifier: BSD-2-Clause
/* Log loss, normalized entropy, AUC and calibration of click predictions. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "shadowsync/train.h"

struct ss_scored {
	float p, y;
};

static int ss_scored_cmp(const void *a, const void *b)
{
	float x = ((const struct ss_scored *)a)->p;
	float y = ((const struct ss_scored *)b)->p;

	return x < y ? -1 : x > y;
}

/* AUC from ranks: tied scores share their mean rank. */
static double ss_auc(const float *p, const float *y, size_t n,
		     struct ss_scored *s)
{
	double pos = 0, rank_sum = 0;

	for (size_t i = 0; i < n; i++) {
		s[i].p = p[i];
		s[i].y = y[i];
		pos += y[i];
	}
	qsort(s, n, sizeof(*s), ss_scored_cmp);
	for (size_t i = 0; i < n;) {
		size_t j = i;
		double tied_pos = 0;

		while (j < n && s[j].p == s[i].p)
			tied_pos += s[j++].y;
		/* ranks i+1 .. j, mean (i + 1 + j) / 2 */
		rank_sum += tied_pos * ((double)(i + 1 + j) / 2.0);
		i = j;
	}
	if (pos == 0 || pos == (double)n)
		return NAN;
	return (rank_sum - pos * (pos + 1) / 2) / (pos * ((double)n - pos));
}

double ss_normalized_entropy(double log_loss, double ctr)
{
	double h = ctr > 0 && ctr < 1 ?
			   -(ctr * log(ctr) + (1 - ctr) * log(1 - ctr)) :
			   0;

	return h > 0 ? log_loss / h : NAN;
}

int ss_metrics_compute(const float *p, const float *y, size_t n,
		       struct ss_metrics *m)
{
	double ll = 0, sum_p = 0, sum_y = 0;
	struct ss_scored *sorted;

	if (n == 0)
		return ss_error_set(-EINVAL, "no examples", NULL, "metrics");
	m->not_numbers = 0;
	for (size_t i = 0; i < n; i++) {
		double q = fmin(fmax(p[i], 1e-7), 1 - 1e-7);

		m->not_numbers += !isfinite(p[i]);
		ll -= y[i] ? log(q) : log(1 - q);
		sum_p += p[i];
		sum_y += y[i];
	}
	m->count = n;
	m->ctr = sum_y / (double)n;
	if (m->not_numbers) {
		/* fmin/fmax and the sort would pass NaN off as numbers */
		m->log_loss = m->ne = m->auc = m->calibration = NAN;
		return 0;
	}
	sorted = malloc(n * sizeof(*sorted));
	if (!sorted)
		return ss_error_set(-ENOMEM, NULL, NULL, "AUC of %zu examples",
				    n);
	m->log_loss = ll / (double)n;
	m->ne = ss_normalized_entropy(m->log_loss, m->ctr);
	m->calibration = sum_y > 0 ? sum_p / sum_y : NAN;
	m->auc = ss_auc(p, y, n, sorted);
	free(sorted);
	return 0;
}
