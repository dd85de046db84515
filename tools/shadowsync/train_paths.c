// SPDX-License-Identifier: BSD-2-Clause
/*
 * The files train reads and writes, checked before any training: a
 * missing --test file or an unwritable --save folder found only after an
 * hour of training loses the hour.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "train_cmd.h"

/* @path can be opened for reading; what it is in @st. */
static int ss_check_readable(const char *option, const char *path,
			     const char *hint, struct stat *st)
{
	/* O_NONBLOCK: a FIFO without a writer must not hold us here */
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK), rc = 0;

	if (fd < 0)
		return ss_error_set(-errno, NULL, hint, "%s '%s'", option,
				    path);
	if (fstat(fd, st) < 0)
		rc = ss_error_set(-errno, NULL, hint, "%s '%s'", option, path);
	close(fd);
	return rc;
}

/* @path is a regular file we can open for reading; its size in @st. */
static int ss_check_input(const char *option, const char *path, struct stat *st)
{
	int rc = strcmp(path, "-") == 0 ?
			 ss_error_set(SS_EUSAGE,
				      "standard input is read as --data only",
				      "give a file", "%s -", option) :
			 ss_check_readable(option, path, "check the path", st);

	if (rc < 0)
		return rc;
	if (S_ISDIR(st->st_mode))
		return ss_error_set(SS_EUSAGE, "it is a folder",
				    "give a file in the Criteo format",
				    "%s '%s'", option, path);
	if (!S_ISREG(st->st_mode))
		return ss_error_set(SS_EUSAGE, "not a regular file",
				    "give a file: train reads it by byte "
				    "ranges, which a pipe or device has not",
				    "%s '%s'", option, path);
	if (st->st_size == 0)
		return ss_error_set(SS_EUSAGE, "the file is empty",
				    "give a file with examples in it",
				    "%s '%s'", option, path);
	return 0;
}

/* The checkpoint @path will be written as PATH.tmp, then renamed: its
 * folder must be there and writable, and PATH must not be a folder. */
static int ss_check_output(const char *option, const char *path)
{
	char copy[4096];
	const char *dir;
	struct stat st;

	if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
		return ss_error_set(SS_EUSAGE, "it is a folder",
				    "give a file name, e.g. DIR/model.ckpt",
				    "%s '%s'", option, path);
	snprintf(copy, sizeof(copy), "%s", path);
	dir = dirname(copy);
	if (stat(dir, &st) < 0)
		return ss_error_set(-errno, "its folder is not there",
				    "create the folder first", "%s '%s'",
				    option, path);
	if (!S_ISDIR(st.st_mode))
		return ss_error_set(SS_EUSAGE, "its folder is not a folder",
				    "check the path", "%s '%s'", option, path);
	if (access(dir, W_OK | X_OK) < 0)
		return ss_error_set(-errno, "its folder is not writable",
				    "save where you may write", "%s '%s'",
				    option, path);
	return 0;
}

/* A checkpoint to read: a regular file (a FIFO would hold --load for
 * ever), that we may open; @missing_hint when it cannot be. */
static int ss_check_checkpoint(const char *option, const char *path,
			       const char *missing_hint)
{
	struct stat st;
	int rc = ss_check_readable(option, path, missing_hint, &st);

	if (rc == 0 && !S_ISREG(st.st_mode))
		rc = ss_error_set(SS_EUSAGE, "not a regular file",
				  "give a checkpoint file that --save wrote",
				  "%s '%s'", option, path);
	return rc;
}

/*
 * The held-out file's first example, read as the evaluation will read it:
 * a file of another format is refused now, not after the training.
 */
static int ss_check_test_format(const char *path, enum ss_bad_lines bad)
{
	struct ss_reader *r = NULL;
	struct ss_bags *bags = NULL; /* multi-hot lines read too */
	struct ss_example ex;
	int rc = ss_bags_create(&bags, 1);

	if (rc == 0)
		rc = ss_reader_open(&r, path, 0, 0, bad);
	if (rc == 0)
		rc = ss_reader_fill_bags(r, &ex, bags, 1);
	ss_bags_destroy(&bags);
	if (rc == 0)
		rc = ss_error_set(SS_EPARSE, "no examples in it",
				  "every line was malformed", "--test '%s'",
				  path);
	ss_reader_close(&r);
	return rc < 0 ? rc : 0;
}

/*
 * The most values an example of @path's first lines holds: 26 when every
 * field has one, more with multi-hot data (a malformed line: what came
 * before it, quietly; training names it, or skips it, as it is told).
 */
#define SS_VALUES_SAMPLE 4096

static int ss_values_per_example(const char *path)
{
	struct ss_reader *r = NULL;
	struct ss_bags *bags = NULL;
	struct ss_example *ex = malloc(256 * sizeof(*ex));
	int most = SS_SPARSE, got = 0;

	if (ex && ss_bags_create(&bags, 256) == 0 &&
	    ss_reader_open(&r, path, 0, 0, SS_BAD_LINES_FAIL) == 0)
		for (int seen = 0; seen < SS_VALUES_SAMPLE; seen += got) {
			got = ss_reader_fill_bags(r, ex, bags, 256);
			if (got <= 0)
				break;
			for (int i = 0; i < got; i++) {
				uint32_t *st = bags->start + i * SS_SPARSE;
				int n = (int)(st[SS_SPARSE] - st[0]);

				most = n > most ? n : most;
			}
		}
	ss_reader_close(&r);
	ss_bags_destroy(&bags);
	free(ex);
	return most;
}

/* Whether @path names the same file as @other (which exists). */
static bool ss_same_file(const char *path, const struct stat *other)
{
	struct stat st;

	return stat(path, &st) == 0 && st.st_dev == other->st_dev &&
	       st.st_ino == other->st_ino;
}

/* Whether @path is one of the --data files. */
static bool ss_is_data(const struct ss_train_cmd *c, const char *path)
{
	struct stat st;

	for (int i = 0; i < c->n_data; i++)
		if (stat(c->data_files[i], &st) == 0 && ss_same_file(path, &st))
			return true;
	return false;
}

/*
 * --data -: standard input, read once from its start (its trainers take
 * its batches in turn), its length unknown till its end: what needs
 * more is refused.
 */
static int ss_check_stdin(struct ss_train_cmd *c)
{
	const char *why = NULL, *hint = "give a file (a gzip file is read as "
					"it is)";
	char opt[64] = "";

	if (c->n_data > 1) {
		snprintf(opt, sizeof(opt), "other --data files");
		why = "standard input is the only data file";
	} else if (c->fabric.world > 1 || c->train.epochs > 1) {
		if (c->fabric.world > 1)
			snprintf(opt, sizeof(opt), "%d ranks", c->fabric.world);
		else
			snprintf(opt, sizeof(opt), "--epochs %d",
				 c->train.epochs);
		why = "standard input is read once, by one rank";
	} else if (c->resume) {
		snprintf(opt, sizeof(opt), "--resume");
		why = "standard input cannot be read again from where the run "
		      "stopped";
		hint = "resume runs on files; a checkpoint of a run on "
		       "standard input loads (--load) and evaluates (eval)";
	} else if (c->shuffle || c->split == 0 || c->chunk_given) {
		snprintf(opt, sizeof(opt), "%s",
			 c->shuffle	? "--shuffle" :
			 c->chunk_given ? "--chunk-size" :
					  "--data-split dynamic");
		why = "standard input is read in order, not by chunks";
	} else if (c->train.lr_schedule != SS_LR_CONSTANT) {
		snprintf(opt, sizeof(opt), "--lr-schedule %s",
			 ss_lr_schedule_name(c->train.lr_schedule));
		why = "the schedule needs the data's length, which standard "
		      "input does not tell before its end";
		hint = "give a file, or keep the rate constant (--warmup "
		       "works)";
	}
	if (why)
		return ss_error_set(SS_EUSAGE, why, hint, "--data - with %s",
				    opt);
	return 0;
}

/*
 * Gzip --data files are read by a fixed share a rank (static): a chunk
 * of one is reached by decompressing the file from its start, each
 * claim a pass.  The split gzip takes when none is given; dynamic, chunk
 * sizes and --shuffle (chunks) refused, naming the file.
 */
static int ss_check_gzip_split(struct ss_train_cmd *c, const char *gzip)
{
	if (c->split == 0 || c->chunk_given || c->shuffle)
		return ss_error_set(
			SS_EUSAGE,
			"a chunk of a gzip file is reached by decompressing "
			"it from its start: each claim would be a pass",
			c->shuffle     ? "decompress it (gunzip), or drop "
					 "--shuffle" :
			c->chunk_given ? "decompress it (gunzip), or drop "
					 "--chunk-size" :
					 "decompress it (gunzip), or give "
					 "--data-split static (each rank "
					 "decompresses it to its share)",
			"%s with gzip file '%s'",
			c->shuffle     ? "--shuffle" :
			c->chunk_given ? "--chunk-size" :
			c->split_given ? "--data-split dynamic" :
					 "a resumed dynamic split",
			gzip);
	if (c->split < 0 && c->fabric.world > 1)
		ss_log_info("data: gzip file '%s': each rank reads its fixed "
			    "1/%d (--data-split static), decompressing it "
			    "from its start",
			    gzip, c->fabric.world);
	c->split = 1;
	return 0;
}

int ss_train_check_split(struct ss_train_cmd *c)
{
	return c->gzip ? ss_check_gzip_split(c, c->gzip) : 0;
}

int ss_train_check_paths(struct ss_train_cmd *c, struct stat *data)
{
	char buf[4096];
	struct stat test, st;
	const char *path, *why = NULL;
	uint64_t len;
	bool gz;
	int rc = 0;

	/* each file of the stream; @data the first's, the size all of them
	 * (a gzip file's uncompressed); standard input's is not known: 0 */
	c->data_size = 0;
	c->gzip = NULL;
	c->stdin_data = false;
	for (int i = 0; i < c->n_data; i++)
		c->stdin_data |= strcmp(c->data_files[i], "-") == 0;
	if (c->stdin_data)
		rc = ss_check_stdin(c);
	for (int i = 0; rc == 0 && !c->stdin_data && i < c->n_data; i++) {
		rc = ss_check_input("--data", c->data_files[i], i ? &st : data);
		if (rc == 0)
			rc = ss_data_size(c->data_files[i], &len, &gz);
		c->data_size += rc == 0 ? len : 0;
		if (rc == 0 && gz && !c->gzip)
			c->gzip = c->data_files[i];
	}

	/* they size the sharded tables' lookups, and nothing else */
	c->values =
		rc == 0 && !c->stdin_data && c->tables == SS_TABLES_SHARDED ?
			ss_values_per_example(c->data_files[0]) :
			SS_SPARSE;
	if (rc == 0 && c->test)
		rc = ss_check_input("--test", c->test, &test);
	if (rc == 0 && c->test)
		rc = ss_check_test_format(c->test, c->train.bad_lines);
	if (rc == 0 && c->load) {
		path = ss_checkpoint_path(c, c->load, false, buf, sizeof(buf));
		/* a rank's file missing: a job of fewer ranks saved it? */
		rc = ss_check_checkpoint(
			"--load", path,
			strstr(c->load, "{rank}") && c->fabric.rank > 0 &&
					access(path, F_OK) < 0 &&
					errno == ENOENT ?
				"each rank loads the file its rank saved: a "
				"job of fewer ranks saved fewer (re-divide "
				"them: shadowsync reshard --new-ranks N)" :
				"check the checkpoint's path");
	}
	if (rc == 0 && c->save) {
		path = ss_checkpoint_path(c, c->save, true, buf, sizeof(buf));
		if (path)
			rc = ss_check_output("--save", path);
		/* the save would replace the data it trained on, or the
		 * held-out file it then evaluates */
		if (rc == 0 && path && ss_is_data(c, path))
			why = "it is the --data file";
		else if (rc == 0 && path && c->test &&
			 ss_same_file(path, &test))
			why = "it is the --test file";
		/* nor may its temporary file (PATH.tmp) */
		if (rc == 0 && path && !why) {
			char tmp[sizeof(buf) + sizeof(SS_CHECKPOINT_TMP_SUFFIX)];

			if (ss_checkpoint_tmp_path(path, tmp, sizeof(tmp)) < 0)
				tmp[0] = '\0';
			if (ss_is_data(c, tmp))
				why = "its temporary file, PATH.tmp, is the "
				      "--data file";
			else if (c->test && ss_same_file(tmp, &test))
				why = "its temporary file, PATH.tmp, is the "
				      "--test file";
		}
		if (why)
			rc = ss_error_set(SS_EUSAGE, why,
					  "give the checkpoint a name of its "
					  "own",
					  "--save '%s'", path);
		/* someone's file there, or at PATH.tmp: the save would
		 * refuse it, once the training it was to keep is done */
		if (rc == 0 && path)
			rc = ss_checkpoint_save_check(path);
	}
	return rc;
}

int ss_train_nothing_trained(const struct ss_train_cmd *c,
			     const struct ss_train_result *res)
{
	/* stopped before its first batch: its checkpoint says so */
	if (ss_train_stop_signal())
		return 0;
	/* resumed from a run that had finished: there was nothing left */
	if (c->resume && !res->skipped) {
		ss_log_info("--resume: nothing was left to train (the run that "
			    "saved '%s' had finished)",
			    c->load);
		return 0;
	}
	/* One rank of several may find only bad lines in the chunks it got
	 * while the others train: it says so and ends with them. */
	if (c->fabric.world > 1) {
		if (res->skipped)
			ss_log_warn("--data '%s': all %" PRIu64
				    " lines this rank read were malformed",
				    c->train.data, res->skipped);
		return 0;
	}
	if (res->skipped)
		return ss_error_set(SS_EPARSE,
				    "every line is malformed, nothing trained",
				    "check the file's format (label, 13 "
				    "integers, 26 hex values, tab-separated)",
				    "--data '%s' (%" PRIu64 " lines skipped)",
				    c->train.data, res->skipped);
	return ss_error_set(SS_EPARSE, "no example in it, nothing trained",
			    "give a file with examples in it", "--data '%s'",
			    c->train.data);
}

int ss_train_check_shm_space(const struct ss_train_cmd *c)
{
	struct statvfs vfs;
	size_t need;
	unsigned long long have, holds;
	bool synced = c->sync.algo != SS_SYNC_NONE,
	     sharded = c->tables == SS_TABLES_SHARDED;
	char what[96];

	/* a rank alone keeps its regions in private memory (shm.c) */
	if (c->fabric.transport != SS_TRANSPORT_SHM || c->fabric.world < 2 ||
	    statvfs("/dev/shm", &vfs) < 0)
		return 0;
	need = ss_train_registered_bytes(&c->model, &c->train, c->values,
					 c->tables, &c->sync, c->fabric.world);
	have = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
	holds = (unsigned long long)vfs.f_blocks * vfs.f_frsize;
	snprintf(what, sizeof(what), "%s%s%s",
		 synced ? "its replica and the sync layer's regions" : "",
		 synced && sharded ? ", " : "", sharded ? "its shard" : "");
	if (need > have)
		return ss_error_set(
			-ENOSPC, "/dev/shm is too small",
			"free /dev/shm (shadowsync shm-clean), make the model "
			"smaller (--hash-size), or mount a larger /dev/shm "
			"(mount -o remount,size=...; docker run "
			"--shm-size=...)",
			"this rank's objects need %zu MiB in all (%s), "
			"/dev/shm has %llu MiB free",
			need >> 20, what, have >> 20);
	/* every rank of a job over shm is on this machine */
	if ((unsigned long long)need * (unsigned)c->fabric.world > holds)
		return ss_error_set(
			-ENOSPC, "/dev/shm is too small for the job",
			"make the model smaller (--hash-size), run fewer "
			"ranks, or mount a larger /dev/shm (mount -o "
			"remount,size=...; docker run --shm-size=...)",
			"the %d ranks' objects need %llu MiB in all (%zu MiB "
			"a rank: %s), /dev/shm holds %llu MiB",
			c->fabric.world,
			(unsigned long long)(need >> 20) *
				(unsigned)c->fabric.world,
			need >> 20, what, holds >> 20);
	return 0;
}
