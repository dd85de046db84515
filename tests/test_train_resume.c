// SPDX-License-Identifier: BSD-2-Clause
/*
 * A stopped ss_train() and its resumption: what ss_train_left() says is
 * left is exactly what the stop left untrained.  With one trainer, where
 * training is deterministic, the run stopped and resumed ends on the
 * model of the run never stopped, bit for bit; with several, and with
 * chunks, every example is trained as many times as without the stop.
 * Stops come from another thread at a moment drawn at random: any batch
 * boundary must do.
 */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "models.h"
#include "shadowsync/shadowsync.h"

#define EXAMPLES 3001
#define MAX_LEFT 64

/* Stops @ctl once @progress has seen @after examples. */
struct stopper {
	struct ss_train_control *ctl;
	struct ss_train_progress *progress;
	uint64_t after;
};

static void *stopper_main(void *arg)
{
	struct stopper *s = arg;

	while (__atomic_load_n(&s->progress->examples, __ATOMIC_ACQUIRE) <
	       s->after)
		usleep(50);
	ss_train_stop(s->ctl);
	return NULL;
}

/*
 * A chunk claimer that stops the run at its claim number @at: the
 * trainer then ends after the first batch of that chunk, a stop at a
 * known place inside a range.
 */
struct claim_stop {
	struct ss_chunks chunks;
	struct ss_train_control *ctl;
	uint64_t claims, at;
};

static int claim_and_stop(void *ctx, uint64_t *begin, uint64_t *end)
{
	struct claim_stop *k = ctx;

	if (k->claims++ == k->at && k->ctl)
		ss_train_stop(k->ctl);
	return ss_chunks_next(&k->chunks, begin, end);
}

/*
 * Trains with @o (its progress set here), stopped after about @after
 * examples (or, with @o->range_ctx a struct claim_stop, at its claim),
 * then resumed from what was left; returns the examples of both calls,
 * *@first (unless NULL) those of the first.  @o->next_range, when set,
 * goes on from where it was.
 */
static uint64_t stop_and_resume(const struct ss_model_config *c, float *params,
				struct ss_train_options *o, uint64_t after,
				uint64_t *first)
{
	struct ss_train_progress progress = { 0 };
	struct ss_train_control *ctl;
	struct ss_train_range left[MAX_LEFT];
	struct ss_train_result res;
	struct stopper s = { .progress = &progress, .after = after };
	bool by_claim = o->next_range == claim_and_stop;
	pthread_t th;
	uint64_t examples;
	int n;

	cr_assert_eq(ss_train_control_create(&ctl), 0);
	s.ctl = ctl;
	o->progress = &progress;
	o->control = ctl;
	if (by_claim)
		((struct claim_stop *)o->range_ctx)->ctl = ctl;
	else
		cr_assert_eq(pthread_create(&th, NULL, stopper_main, &s), 0);
	cr_assert_eq(ss_train(c, params, o, &res), 0, "%s: %s",
		     ss_last_error()->what, ss_last_error()->why);
	if (!by_claim) {
		/* a run that ended before the stop leaves the stopper
		 * waiting */
		ss_train_stop(ctl);
		__atomic_store_n(&progress.examples, UINT64_MAX,
				 __ATOMIC_RELEASE);
		pthread_join(th, NULL);
	} else {
		((struct claim_stop *)o->range_ctx)->ctl = NULL;
	}
	examples = res.examples;
	if (first)
		*first = examples;
	n = ss_train_left(ctl, left, MAX_LEFT);
	cr_assert_leq(n, MAX_LEFT);
	ss_train_control_free(&ctl);

	o->control = NULL;
	o->progress = NULL;
	o->resume = left;
	o->n_resume = n;
	o->resuming = true;
	cr_assert_eq(ss_train(c, params, o, &res), 0, "%s: %s",
		     ss_last_error()->what, ss_last_error()->why);
	o->resume = NULL;
	o->n_resume = 0;
	o->resuming = false;
	return examples + res.examples;
}

static long file_size(const char *path)
{
	struct stat st;

	cr_assert_eq(stat(path, &st), 0);
	return (long)st.st_size;
}

/* @k planned as ten chunks of @path an epoch, three epochs, no stop. */
static void ten_chunks(struct claim_stop *k, const char *path)
{
	memset(k, 0, sizeof(*k));
	ss_chunks_plan(&k->chunks, (uint64_t)file_size(path), 1,
		       (file_size(path) + 9) / 10, 3);
	k->at = UINT64_MAX;
}

/*
 * One trainer: stopped at a random moment of three epochs, and inside
 * each of the chunks of three epochs of ten, the resumed run ends on the
 * model and Adagrad's state of the run never stopped.
 */
Test(resume, one_trainer_stopped_anywhere_ends_on_the_same_model,
     .timeout = 120)
{
	char path[] = "/tmp/ss-resume-XXXXXX";
	struct ss_model_config c;
	struct ss_train_options o;
	struct ss_train_result res;
	struct claim_stop k;
	size_t len;
	/* the runs never stopped: the file as it is, and by chunks */
	float *ref[2], *ref_acc[2], *params, *acc;

	cr_assert_eq(gen_file(path, EXAMPLES, 1000), 0);
	small_model(&c, 8, 500);
	len = ss_model_len(&c);
	params = malloc(len * sizeof(float));
	acc = malloc(len * sizeof(float));
	ss_train_options_init(&o);
	o.batch = 32;
	o.data = path;
	o.epochs = 3;
	for (int r = 0; r < 2; r++) {
		ref[r] = malloc(len * sizeof(float));
		ref_acc[r] = calloc(len, sizeof(float));
		ss_model_init(&c, ref[r], 3);
		o.adagrad_acc = ref_acc[r];
		ten_chunks(&k, path);
		o.next_range = r ? claim_and_stop : NULL;
		o.range_ctx = &k;
		cr_assert_eq(ss_train(&c, ref[r], &o, &res), 0);
		cr_assert_eq(res.examples, 3 * EXAMPLES);
	}

	srand((unsigned)time(NULL));
	for (int at = -3; at < 30; at++) {
		uint64_t after = (uint64_t)rand() % (3 * EXAMPLES), first;
		int r = at >= 0;

		ss_model_init(&c, params, 3);
		memset(acc, 0, len * sizeof(float));
		o.adagrad_acc = acc;
		ten_chunks(&k, path);
		k.at = (uint64_t)at;
		o.next_range = r ? claim_and_stop : NULL;
		cr_assert_eq(stop_and_resume(&c, params, &o, after, &first),
			     3 * EXAMPLES, "stopped after %llu, chunk %d",
			     (unsigned long long)after, at);
		if (r)
			cr_assert_lt(first, 3 * EXAMPLES, "chunk %d", at);
		cr_assert(memcmp(params, ref[r], len * sizeof(float)) == 0,
			  "the model differs (stopped after %llu examples, "
			  "chunk %d)",
			  (unsigned long long)first, at);
		cr_assert(memcmp(acc, ref_acc[r], len * sizeof(float)) == 0,
			  "Adagrad's state differs (stopped after %llu, "
			  "chunk %d)",
			  (unsigned long long)first, at);
	}
	unlink(path);
	for (int r = 0; r < 2; r++) {
		free(ref[r]);
		free(ref_acc[r]);
	}
	free(params);
	free(acc);
}

Test(resume, three_trainers_read_every_example_as_often_as_unstopped,
     .timeout = 120)
{
	char path[] = "/tmp/ss-resume-XXXXXX";
	struct ss_model_config c;
	struct ss_train_options o;
	float *params;

	cr_assert_eq(gen_file(path, EXAMPLES, 1000), 0);
	small_model(&c, 8, 500);
	params = malloc(ss_model_len(&c) * sizeof(float));
	ss_model_init(&c, params, 3);
	ss_train_options_init(&o);
	o.threads = 3;
	o.batch = 16;
	o.data = path;
	o.epochs = 2;
	srand((unsigned)time(NULL));
	for (int k = 0; k < 3; k++) {
		uint64_t after = (uint64_t)rand() % (2 * EXAMPLES);

		cr_assert_eq(stop_and_resume(&c, params, &o, after, NULL),
			     2 * EXAMPLES, "stopped after %llu",
			     (unsigned long long)after);
	}
	unlink(path);
	free(params);
}

/* Chunks: the open ones are left; the counter hands out the rest. */
Test(resume, chunks_open_at_the_stop_are_left_and_the_rest_claimed,
     .timeout = 120)
{
	char path[] = "/tmp/ss-resume-XXXXXX";
	struct ss_model_config c;
	struct ss_train_options o;
	struct ss_chunks chunks = { 0 };
	float *params;
	long size;

	cr_assert_eq(gen_file(path, EXAMPLES, 1000), 0);
	size = file_size(path);
	small_model(&c, 8, 500);
	params = malloc(ss_model_len(&c) * sizeof(float));
	ss_model_init(&c, params, 3);
	ss_train_options_init(&o);
	o.threads = 2;
	o.batch = 16;
	o.data = path;
	o.next_range = ss_chunks_next;
	o.range_ctx = &chunks;
	srand((unsigned)time(NULL));
	for (int k = 0; k < 3; k++) {
		uint64_t after = (uint64_t)rand() % (2 * EXAMPLES);

		memset(&chunks, 0, sizeof(chunks));
		ss_chunks_plan(&chunks, (uint64_t)size, 1, size / 10, 2);
		cr_assert_eq(stop_and_resume(&c, params, &o, after, NULL),
			     2 * EXAMPLES, "stopped after %llu",
			     (unsigned long long)after);
	}
	unlink(path);
	free(params);
}

/* Stopped before it began: nothing trained, everything left. */
Test(resume, a_control_stopped_first_leaves_every_pass)
{
	char path[] = "/tmp/ss-resume-XXXXXX";
	struct ss_model_config c;
	struct ss_train_options o;
	struct ss_train_result res;
	struct ss_train_control *ctl;
	struct ss_train_range left[MAX_LEFT];
	float *params;
	int n;

	cr_assert_eq(gen_file(path, EXAMPLES, 1000), 0);
	small_model(&c, 8, 500);
	params = malloc(ss_model_len(&c) * sizeof(float));
	ss_model_init(&c, params, 3);
	ss_train_options_init(&o);
	o.threads = 2;
	o.data = path;
	o.epochs = 3;
	cr_assert_eq(ss_train_control_create(&ctl), 0);
	o.control = ctl;
	ss_train_stop(ctl);
	cr_assert(ss_train_stopping(ctl));
	cr_assert_eq(ss_train(&c, params, &o, &res), 0);
	cr_assert_eq(res.examples, 0);
	n = ss_train_left(ctl, left, MAX_LEFT);
	cr_assert_eq(n, 2, "%d ranges", n);
	for (int i = 0; i < n; i++)
		cr_assert_eq(left[i].passes, 3);
	cr_assert_eq(left[0].begin, 0);
	cr_assert_eq(left[0].end, left[1].begin);
	cr_assert_eq(left[1].end, (uint64_t)file_size(path));
	cr_assert_eq(ss_train_left(ctl, left, 1), 2, "the count past max");
	ss_train_control_free(&ctl);
	cr_assert_null(ctl);
	unlink(path);
	free(params);
}
