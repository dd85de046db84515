// SPDX-License-Identifier: BSD-2-Clause
/*
 * Two Hogwild trainers on one replica, under ThreadSanitizer in `make
 * check`: their lock-free updates race by design and are annotated
 * (src/base/hogwild.h); anything else TSan finds fails the test.  Once
 * with SGD, once with Adagrad, whose shared accumulators race the same
 * way.
 */
#include <stdlib.h>
#include <unistd.h>

#include "models.h"
#include "scenario.h"
#include "shadowsync/shadowsync.h"

SCENARIO(train_threads, two_hogwild_trainers_on_one_replica)
{
	char path[] = "/tmp/ss-hogwild-XXXXXX";
	struct ss_model_config c;
	struct ss_train_options o;
	struct ss_train_result res;
	float *params;
	int rc;

	/* few rows: the trainers collide often */
	check(gen_file(path, 2000, 50) == 0, "gen");
	small_model(&c, 8, 64);
	params = malloc(ss_model_len(&c) * sizeof(float));
	check(params, "params");
	ss_model_init(&c, params, 1);
	ss_train_options_init(&o);
	o.threads = 2;
	o.batch = 16;
	o.data = path;
	rc = ss_train(&c, params, &o, &res);
	if (rc == 0) {
		o.optimizer = SS_OPT_ADAGRAD;
		o.lr = 0.02f;
		rc = ss_train(&c, params, &o, &res);
	}
	unlink(path);
	free(params);
	check(rc == 0, "%s: %s", ss_last_error()->what, ss_last_error()->why);
	check(res.examples == 2000, "%llu examples",
	      (unsigned long long)res.examples);
	return 0;
}
