// SPDX-License-Identifier: BSD-2-Clause
/*
 * train --metrics FILE: the file is in the Prometheus text exposition
 * format, agrees with the run's JSON summary, is replaced while training
 * without a FILE.tmp left behind, and a bad path is refused before
 * training.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd.h"
#include "ranks.h"

static char dir[] = "/tmp/ss-cmd-XXXXXX";

#define MODEL "--emb-dim 4 --bottom 13-16-4 --top 16-1 --hash-size 2000"

static void setup(void)
{
	strcpy(dir, "/tmp/ss-cmd-XXXXXX");
	cmd_data_dir(dir);
}

static void teardown(void)
{
	cmd_rm_dir(dir);
}

TestSuite(cmd_metrics, .init = setup, .fini = teardown, .timeout = 120);

/* ---- a checker of the exposition format ------------------------------ */

#define MAX_FAMILIES 128
#define MAX_SERIES 512

struct family {
	char name[128];
	char type[16];
	bool help, samples_done;
};

struct exposition {
	struct family fam[MAX_FAMILIES];
	int n_fam;
	char series[MAX_SERIES][256]; /* name{labels}, to find duplicates */
	int n_series;
	int samples;
	int line; /* the line being read, from 1 */
	char why[512]; /* what is wrong, when something is */
};

/* Say what is wrong, with the line, and return false. */
#define BAD(e, ...)                                                    \
	(snprintf((e)->why, sizeof((e)->why), "line %d: ", (e)->line), \
	 snprintf((e)->why + strlen((e)->why),                         \
		  sizeof((e)->why) - strlen((e)->why), __VA_ARGS__),   \
	 false)

/* [a-zA-Z_:][a-zA-Z0-9_:]*, the first @n bytes of @s */
static bool name_ok(const char *s, size_t n)
{
	if (n == 0 ||
	    !(isalpha((unsigned char)s[0]) || s[0] == '_' || s[0] == ':'))
		return false;
	for (size_t i = 1; i < n; i++)
		if (!(isalnum((unsigned char)s[i]) || s[i] == '_' ||
		      s[i] == ':'))
			return false;
	return true;
}

static struct family *family_of(struct exposition *e, const char *name,
				size_t n)
{
	for (int i = 0; i < e->n_fam; i++)
		if (strlen(e->fam[i].name) == n &&
		    memcmp(e->fam[i].name, name, n) == 0)
			return &e->fam[i];
	return NULL;
}

/* "# HELP name text" or "# TYPE name type"; other comments are allowed. */
static bool check_comment(struct exposition *e, const char *line)
{
	bool help = strncmp(line, "# HELP ", 7) == 0,
	     type = strncmp(line, "# TYPE ", 7) == 0;
	const char *name = line + 7, *end;
	struct family *f;

	if (!help && !type)
		return true;
	end = strchr(name, ' ');
	if (!end || !end[1])
		return BAD(e, "'%s': nothing after the name", line);
	if (!name_ok(name, (size_t)(end - name)))
		return BAD(e, "bad metric name in '%s'", line);
	f = family_of(e, name, (size_t)(end - name));
	if (!f) {
		if (e->n_fam == MAX_FAMILIES)
			return BAD(e, "too many families");
		f = &e->fam[e->n_fam++];
		snprintf(f->name, sizeof(f->name), "%.*s", (int)(end - name),
			 name);
	}
	if (f->samples_done || f->type[0])
		return BAD(e, "'%s' after the family's TYPE or samples", line);
	if (help) {
		if (f->help)
			return BAD(e, "a second HELP for %s", f->name);
		f->help = true;
		return true;
	}
	if (!f->help)
		return BAD(e, "TYPE before HELP for %s", f->name);
	snprintf(f->type, sizeof(f->type), "%s", end + 1);
	if (strcmp(f->type, "counter") && strcmp(f->type, "gauge"))
		return BAD(e, "type '%s' (counter or gauge here)", f->type);
	return true;
}

/*
 * label="value",...} after the '{': names as metric names but without
 * ':', values quoted with \\, \" and \n escapes; *@end past the '}'.
 */
static bool check_labels(struct exposition *e, const char *p, const char **end)
{
	for (;;) {
		const char *eq = strchr(p, '=');

		if (!eq)
			return BAD(e, "a label without '='");
		if (!name_ok(p, (size_t)(eq - p)) ||
		    memchr(p, ':', (size_t)(eq - p)))
			return BAD(e, "bad label name '%.*s'", (int)(eq - p),
				   p);
		if (eq[1] != '"')
			return BAD(e, "label value unquoted");
		for (p = eq + 2; *p && *p != '"'; p++)
			if (*p == '\\' && !strchr("\\\"n", *++p))
				return BAD(e, "bad escape in a label value");
		if (*p != '"')
			return BAD(e, "label value unterminated");
		if (*++p == '}') {
			*end = p + 1;
			return true;
		}
		if (*p != ',')
			return BAD(e, "'%c' between labels", *p);
		p++;
	}
}

/* A number as Go's strconv.ParseFloat reads it, or NaN, +Inf, -Inf. */
static bool value_ok(const char *v, double *out)
{
	char *end;

	*out = 0;
	if (!strcmp(v, "NaN") || !strcmp(v, "+Inf") || !strcmp(v, "-Inf"))
		return true;
	if (!*v || isspace((unsigned char)*v))
		return false;
	*out = strtod(v, &end);
	return *end == '\0' && !isnan(*out) && !isinf(*out);
}

static bool check_sample(struct exposition *e, const char *line, int rank)
{
	const char *p = line, *end;
	struct family *f;
	char rank_label[32];
	double v;
	size_t n;

	while (*p && name_ok(line, (size_t)(p - line) + 1))
		p++;
	n = (size_t)(p - line);
	if (!name_ok(line, n))
		return BAD(e, "bad metric name: '%s'", line);
	f = family_of(e, line, n);
	if (!f || !f->help || !f->type[0])
		return BAD(e, "'%.*s' has no HELP and TYPE before it", (int)n,
			   line);
	/* a family's samples come together */
	for (int i = 0; i < e->n_fam; i++)
		if (&e->fam[i] != f && e->fam[i].type[0])
			e->fam[i].samples_done = true;
	if (f->samples_done)
		return BAD(e, "%s's samples apart", f->name);
	end = p;
	if (*p == '{' && !check_labels(e, p + 1, &end))
		return false;
	snprintf(rank_label, sizeof(rank_label), "rank=\"%d\"", rank);
	if (!memmem(p, (size_t)(end - p), rank_label, strlen(rank_label)))
		return BAD(e, "no %s label: %s", rank_label, line);
	if (*end != ' ')
		return BAD(e, "no space before the value: %s", line);
	for (int i = 0; i < e->n_series; i++)
		if (strlen(e->series[i]) == (size_t)(end - line) &&
		    !strncmp(e->series[i], line, (size_t)(end - line)))
			return BAD(e, "the series twice: %s", line);
	if (e->n_series == MAX_SERIES)
		return BAD(e, "too many series");
	snprintf(e->series[e->n_series++], sizeof(e->series[0]), "%.*s",
		 (int)(end - line), line);
	if (!value_ok(end + 1, &v))
		return BAD(e, "value '%s' is not a number", end + 1);
	if (!strcmp(f->type, "counter") &&
	    (v < 0 || n < 7 || strncmp(line + n - 6, "_total", 6)))
		return BAD(e, "counter %s: negative, or not named *_total",
			   f->name);
	e->samples++;
	return true;
}

/*
 * exposition_error() - NULL when @text is valid Prometheus text format
 * (0.0.4) as this project writes it: every family has HELP and TYPE
 * (counter or gauge) before its samples, which come together, each
 * series once, names and labels well formed, values numbers, counters
 * named *_total and not negative, every sample labelled with @rank, the
 * text ends with a newline.  Else what is wrong, in @why.
 */
static const char *exposition_error(const char *text, int rank, char *why,
				    size_t size)
{
	struct exposition *e = calloc(1, sizeof(*e));
	char *copy = strdup(text), *save = NULL, *line;
	bool ok = true;

	cr_assert(e && copy);
	if (!*text || text[strlen(text) - 1] != '\n')
		ok = BAD(e, "empty, or no newline at the end");
	for (line = strtok_r(copy, "\n", &save); ok && line;
	     line = strtok_r(NULL, "\n", &save)) {
		e->line++;
		ok = line[0] == '#' ? check_comment(e, line) :
				      check_sample(e, line, rank);
	}
	for (int i = 0; ok && i < e->n_fam; i++)
		if (!e->fam[i].type[0])
			ok = BAD(e, "%s has no TYPE", e->fam[i].name);
	snprintf(why, size, "%s", e->why);
	free(copy);
	free(e);
	return ok ? NULL : why;
}

static void check_exposition(const char *text, int rank)
{
	char why[512];

	cr_assert_null(exposition_error(text, rank, why, sizeof(why)), "%s\n%s",
		       why, text);
}

/*
 * prom_value() - the value of the sample @series ("name" or "name{...,"
 * up to the labels this file adds after rank and job_key); NaN if absent.
 */
static double prom_value(const char *text, const char *name, const char *extra)
{
	char pat[256];
	const char *at = text;

	snprintf(pat, sizeof(pat), "\n%s{", name);
	while ((at = strstr(at, pat))) {
		const char *close = strchr(at, '}');

		at += strlen(pat);
		if (!extra ||
		    (memmem(at, (size_t)(close - at), extra, strlen(extra))))
			return strtod(close + 2, NULL);
	}
	return NAN;
}

static char *read_text(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	size_t n;

	if (!f)
		return NULL;
	buf = malloc(1 << 17);
	cr_assert_not_null(buf);
	buf[0] = '\n'; /* so that prom_value finds the first sample too */
	n = fread(buf + 1, 1, (1 << 17) - 2, f);
	buf[n + 1] = '\0';
	fclose(f);
	return buf;
}

/* No FILE.tmp (nor any *.tmp) left in the folder. */
static void assert_no_tmp(const char *folder)
{
	DIR *d = opendir(folder);
	struct dirent *de;

	cr_assert_not_null(d);
	while ((de = readdir(d))) {
		size_t n = strlen(de->d_name);

		cr_assert(n < 4 || strcmp(de->d_name + n - 4, ".tmp"),
			  "'%s' left in %s", de->d_name, folder);
	}
	closedir(d);
}

/* ---- the tests --------------------------------------------------------- */

/*
 * The checker passes a good file, and refuses what Prometheus would and
 * what this project's files must not have.
 */
Test(cmd_metrics, the_checker_refuses_bad_files)
{
#define HEAD "# HELP a_total x\n# TYPE a_total counter\n"
	static const char *const bad[] = {
		"",
		HEAD "a_total{rank=\"0\"} 3", /* no newline at the end */
		"a_total{rank=\"0\"} 3\n", /* no HELP, no TYPE */
		"# HELP a_total x\na_total{rank=\"0\"} 3\n", /* no TYPE */
		"# TYPE a_total counter\n# HELP a_total x\n", /* out of order */
		"# HELP a_total x\n# TYPE a_total histo\n",
		HEAD "a_total{rank=\"0\"} three\n",
		HEAD "a_total{rank=\"0\"} -3\n", /* a negative counter */
		HEAD "a_total{rank=\"1\"} 3\n", /* another rank */
		HEAD "a_total 3\n", /* no rank */
		HEAD "a_total{rank=0} 3\n",
		HEAD "a_total{rank=\"0\",1x=\"y\"} 3\n",
		HEAD "a_total{rank=\"0\",a:b=\"y\"} 3\n",
		HEAD "a_total{rank=\"0\",x=\"\\q\"} 3\n",
		HEAD "a_total{rank=\"0\"} 3\na_total{rank=\"0\"} 4\n",
		"# HELP 1a x\n# TYPE 1a gauge\n1a{rank=\"0\"} 3\n",
		"# HELP a-b x\n# TYPE a-b gauge\n",
		"# HELP a x\n# TYPE a counter\na{rank=\"0\"} 3\n",
		HEAD "a_total{rank=\"0\",p=\"1\"} 3\n"
		     "# HELP b x\n# TYPE b gauge\nb{rank=\"0\"} 1\n"
		     "a_total{rank=\"0\",p=\"2\"} 3\n", /* samples apart */
	};
	char why[512];

	check_exposition(HEAD "a_total{rank=\"0\"} 3\n"
			      "# HELP b:c x \\\\ y\n# TYPE b:c gauge\n"
			      "b:c{rank=\"0\",w=\"a\\\"\\n\"} NaN\n"
			      "b:c{rank=\"0\",w=\"b\"} -1.5e-07\n"
			      "b:c{rank=\"0\",w=\"c\"} +Inf\n",
			 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_not_null(
			exposition_error(bad[i], 0, why, sizeof(why)),
			"passed:\n%s", bad[i]);
#undef HEAD
}

/*
 * One rank with a sync engine, tables replicated, held-out data: the
 * last file has the summary's figures.
 */
/*
 * --log-csv's file: its header, and a last row with the summary's
 * examples and training loss (@json).
 */
static void check_csv(const char *json)
{
	char path[256], line[512], last[512] = "";
	unsigned long long examples = 0;
	double secs, rate, loss = -1, ne, done;
	int rows = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/log.csv", dir);
	f = fopen(path, "r");
	cr_assert_not_null(f, "no %s", path);
	cr_assert_not_null(fgets(line, sizeof(line), f));
	cr_assert_str_eq(line, "seconds,examples,examples_per_s,train_loss,"
			       "train_ne,percent_done,rounds,rounds_per_s,"
			       "sync_gap,lookup_wait_s,test_ne,test_auc\n");
	while (fgets(line, sizeof(line), f)) {
		rows++;
		strcpy(last, line);
	}
	fclose(f);
	cr_assert_geq(rows, 1, "no rows");
	cr_assert_eq(sscanf(last, "%lf,%llu,%lf,%lf,%lf,%lf", &secs, &examples,
			    &rate, &loss, &ne, &done),
		     6, "%s", last);
	cr_assert_eq(done, 100, "the end's row: %s", last);
	cr_assert_eq(examples,
		     (unsigned long long)cmd_json_number(json, "examples"),
		     "%s", last);
	cr_assert_float_eq(loss, cmd_json_number(json, "train_log_loss"), 1e-5,
			   "%s", last);
}

Test(cmd_metrics, file_agrees_with_the_json_summary)
{
	char out[8192], path[256];
	char *text;
	int rc;

	snprintf(path, sizeof(path), "%s/prom/shadowsync.prom", dir);
	cr_assert_eq(
		cmd_run(out, sizeof(out),
			"mkdir %s/prom && %s train --data %s/train.txt "
			"--test %s/test.txt " MODEL
			" --threads 1 --progress 1 --json --metrics %s "
			"--save %s/m.ckpt --log-csv %s/log.csv 2>/dev/null",
			dir, SS_COMMAND, dir, dir, path, dir, dir),
		0, "%s", out);
	check_csv(out);
	text = read_text(path);
	cr_assert_not_null(text, "no %s", path);
	check_exposition(text + 1, 0);
	/* the final save, counted and timed */
	cr_assert_eq(prom_value(text, "shadowsync_checkpoints_total", NULL), 1,
		     "%s", text);
	cr_assert_gt(prom_value(text,
				"shadowsync_last_checkpoint_timestamp_seconds",
				NULL),
		     1.7e9, "%s", text);
	cr_assert_eq(prom_value(text, "shadowsync_examples_total", NULL),
		     cmd_json_number(out, "examples"), "%s\n%s", out, text);
	cr_assert_eq(prom_value(text, "shadowsync_examples_total", NULL), 6000);
	cr_assert_float_eq(prom_value(text, "shadowsync_train_loss", NULL),
			   cmd_json_number(out, "train_log_loss"), 1e-6);
	cr_assert_float_eq(
		prom_value(text, "shadowsync_examples_per_second", NULL),
		cmd_json_number(out, "examples_per_s"), 0.1);
	cr_assert_float_eq(prom_value(text, "shadowsync_train_seconds", NULL),
			   cmd_json_number(out, "seconds"), 1e-3);
	cr_assert_float_eq(prom_value(text, "shadowsync_test_ne", NULL),
			   cmd_json_number(out, "test_ne"), 1e-6);
	cr_assert_float_eq(prom_value(text, "shadowsync_test_auc", NULL),
			   cmd_json_number(out, "test_auc"), 1e-6);
	cr_assert_eq(prom_value(text, "shadowsync_sync_rounds_total", NULL),
		     cmd_json_number(out, "rounds"));
	cr_assert_eq(
		prom_value(text, "shadowsync_sync_peers_left_out_total", NULL),
		cmd_json_number(out, "peers_left_out"));
	cr_assert_eq(prom_value(text, "shadowsync_train_running", NULL), 0);
	cr_assert_eq(prom_value(text, "shadowsync_train_failed", NULL), 0);
	cr_assert_eq(prom_value(text, "shadowsync_train_info", "sync=\"ma\""),
		     1);
	cr_assert_gt(prom_value(text, "shadowsync_train_ne", NULL), 0);
	/* the figures a running job shows are all there */
	cr_assert(!isnan(
		prom_value(text, "shadowsync_sync_gap_iterations", NULL)));
	cr_assert(!isnan(prom_value(
		text, "shadowsync_sync_round_latency_p99_seconds", NULL)));
	cr_assert(!isnan(
		prom_value(text, "shadowsync_sync_bytes_sent_total", NULL)));
	free(text);
	/* Prometheus's own parser and linter too, where it is installed */
	rc = cmd_run(out, sizeof(out),
		     "command -v promtool >/dev/null || exit 77; "
		     "promtool check metrics < %s 2>&1",
		     path);
	if (rc == 77)
		cr_log_info("promtool not installed: its check skipped");
	else
		cr_assert_eq(rc, 0, "promtool check metrics: %s", out);
	snprintf(path, sizeof(path), "%s/prom", dir);
	assert_no_tmp(path);
}

/*
 * Two ranks over shm, tables sharded, {rank} in the name: a file each,
 * with the tables' figures of the summary.
 */
Test(cmd_metrics, each_rank_its_file_with_the_tables)
{
	char out[16384], path[256], *text, *json;
	int port = ranks_port_base(); /* and + 2, + 3: the tables */

	cr_assert_eq(
		cmd_run(out, sizeof(out),
			"P=127.0.0.1:%d,127.0.0.1:%d; "
			"%s train --data %s/train.txt " MODEL
			" --threads 1 --transport shm --peers $P --rank 1 --progress 0 --json --job-key 78"
			" --metrics '%s/m-{rank}.prom' > %s/r1 2>/dev/null & "
			"%s train --data %s/train.txt " MODEL
			" --threads 1 --transport shm --peers $P --rank 0 --progress 0 --json --job-key 78"
			" --metrics '%s/m-{rank}.prom' 2>/dev/null; "
			"r0=$?; wait $!; r1=$?; cat %s/r1; echo \"status $r0 $r1\"",
			port, port + 1, SS_COMMAND, dir, dir, dir, SS_COMMAND,
			dir, dir, dir),
		0);
	cr_assert(strstr(out, "status 0 0"), "%s", out);
	for (int r = 0; r < 2; r++) {
		char key[32];

		snprintf(key, sizeof(key), "\"rank\":%d,", r);
		json = strstr(out, key);
		cr_assert_not_null(json, "%s", out);
		snprintf(path, sizeof(path), "%s/m-%d.prom", dir, r);
		text = read_text(path);
		cr_assert_not_null(text, "no %s", path);
		check_exposition(text + 1, r);
		cr_assert(strstr(text, "job_key=\"78\""), "%s", text);
		cr_assert_eq(
			prom_value(text, "shadowsync_examples_total", NULL),
			cmd_json_number(json, "examples"), "%s", text);
		cr_assert_eq(prom_value(text, "shadowsync_world_size", NULL),
			     2);
		cr_assert_eq(
			prom_value(text, "shadowsync_data_chunks_total", NULL),
			cmd_json_number(json, "chunks"));
		cr_assert_eq(prom_value(text,
					"shadowsync_table_grads_pushed_total",
					NULL),
			     cmd_json_number(json, "grads_pushed"));
		cr_assert_eq(prom_value(text,
					"shadowsync_table_grads_applied_total",
					NULL),
			     cmd_json_number(json, "grads_applied"));
		cr_assert_eq(
			prom_value(text, "shadowsync_table_shard_bytes", NULL),
			cmd_json_number(json, "table_bytes"));
		cr_assert_eq(prom_value(text,
					"shadowsync_table_rows_stale_total",
					NULL),
			     cmd_json_number(json, "rows_stale"));
		cr_assert_eq(
			prom_value(text, "shadowsync_sync_rounds_total", NULL),
			cmd_json_number(json, "rounds"));
		cr_assert(!isnan(prom_value(
				  text, "shadowsync_sync_peer_left_out_total",
				  "peer=\"1\"")),
			  "%s", text);
		cr_assert(!isnan(prom_value(text, "shadowsync_table_rows_total",
					    "where=\"remote\"")),
			  "%s", text);
		free(text);
	}
	assert_no_tmp(dir);
}

/*
 * While training the file is replaced every --progress interval: one
 * with examples in it and the run still going appears (a long run,
 * stopped once seen).  A write that fails (the folder removed) is a
 * warning and training goes on; once the folder is back, the file is
 * written again.  SIGTERM leaves no FILE.tmp, and the file saying the
 * rank no longer runs (failed), with the last figures.
 */
Test(cmd_metrics, replaced_while_training, .timeout = 300)
{
	char out[8192], path[256], *text = NULL;
	bool seen = false;
	int gone;

	snprintf(path, sizeof(path), "%s/live/live.prom", dir);
	cr_assert_eq(
		cmd_run(out, sizeof(out),
			"mkdir %s/live && %s train --data %s/train.txt " MODEL
			" --threads 1 --sync none --epochs 10000"
			" --progress 1 --metrics %s >/dev/null 2>%s/log & "
			"echo $! > %s/pid",
			dir, SS_COMMAND, dir, path, dir, dir),
		0, "%s", out);
	/* up to 120 s for the first periodic write (about 1 s in) */
	for (int i = 0; i < 1200 && !seen; i++) {
		usleep(100000);
		free(text);
		text = read_text(path);
		seen = text &&
		       prom_value(text, "shadowsync_train_running", NULL) ==
			       1 &&
		       prom_value(text, "shadowsync_examples_total", NULL) > 0;
	}
	/* then the folder goes, and comes back (each up to 60 s) */
	gone = !seen ? -1 :
		       cmd_run(out, sizeof(out),
			       "D=%s; rm -r $D/live; for i in $(seq 600); do "
			       "grep -q 'training goes on' $D/log && break; "
			       "sleep 0.1; done; mkdir $D/live; "
			       "for i in $(seq 600); do [ -e %s ] && "
			       "grep -q 'written again' $D/log && break; "
			       "sleep 0.1; done; grep -c 'training goes on' "
			       "$D/log; [ -e %s ] && echo back",
			       dir, path, path);
	cmd_run(out + strlen(out), sizeof(out) - strlen(out),
		"P=$(cat %s/pid); kill $P; for i in $(seq 300); do "
		"kill -0 $P 2>/dev/null || break; sleep 0.1; done; cat %s/log",
		dir, dir);
	cr_assert(seen, "no file with examples while training: %s",
		  text ? text : "(none)");
	cr_assert_eq(gone, 0, "%s", out);
	cr_assert(strstr(out, "1\nback\n"), "said once, then back: %s", out);
	cr_assert(strstr(out, "--metrics: '"), "%s", out);
	check_exposition(text + 1, 0);
	cr_assert_eq(
		prom_value(text, "shadowsync_progress_interval_seconds", NULL),
		1);
	/* --sync none: no sync figures, no tables' */
	cr_assert(
		isnan(prom_value(text, "shadowsync_sync_rounds_total", NULL)));
	cr_assert(isnan(
		prom_value(text, "shadowsync_table_lookups_total", NULL)));
	free(text);
	/* stopped by SIGTERM: no longer "running", and its figures kept */
	text = read_text(path);
	cr_assert_not_null(text);
	check_exposition(text + 1, 0);
	cr_assert_eq(prom_value(text, "shadowsync_train_running", NULL), 0,
		     "%s", text);
	cr_assert_eq(prom_value(text, "shadowsync_train_failed", NULL), 1, "%s",
		     text);
	cr_assert_gt(prom_value(text, "shadowsync_examples_total", NULL), 0,
		     "%s", text);
	free(text);
	assert_no_tmp(dir);
	snprintf(path, sizeof(path), "%s/live", dir);
	assert_no_tmp(path);
}

/*
 * A run that fails after the file was first written ends it with
 * shadowsync_train_failed 1; a name without .prom is warned about.
 */
Test(cmd_metrics, a_failed_run_says_so)
{
	char out[8192], path[256], *text;

	snprintf(path, sizeof(path), "%s/m.txt", dir);
	cr_assert_eq(cmd_run(out, sizeof(out),
			     "%s train --data %s/train.txt " MODEL
			     " --threads 1 --load %s/train.txt --metrics %s "
			     "2>&1",
			     SS_COMMAND, dir, dir, path),
		     1, "%s", out);
	cr_assert(strstr(out, "error: --load"), "%s", out);
	cr_assert(strstr(out, "end in .prom"), "%s", out);
	text = read_text(path);
	cr_assert_not_null(text, "%s", out);
	check_exposition(text + 1, 0);
	cr_assert_eq(prom_value(text, "shadowsync_train_failed", NULL), 1);
	cr_assert_eq(prom_value(text, "shadowsync_train_running", NULL), 0);
	cr_assert_eq(prom_value(text, "shadowsync_examples_total", NULL), 0);
	free(text);
	assert_no_tmp(dir);
}

/* Bad paths: refused before training, the option and the path named. */
Test(cmd_metrics, bad_paths_are_refused_before_training)
{
	char out[8192];
	int port = ranks_port_base();
	static const struct {
		const char *path, *says;
	} bad[] = {
		{ "/nonexistent-ss/m.prom", "folder '/nonexistent-ss'" },
		{ "%s", "Is a directory" },
		{ "%s/train.txt/m.prom", "Not a directory" },
		{ "", "--metrics: empty" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char path[256];

		snprintf(path, sizeof(path), bad[i].path, dir);
		cr_assert_neq(cmd_run(out, sizeof(out),
				      "%s train --data %s/train.txt " MODEL
				      " --threads 1 --progress 1 --json "
				      "--metrics '%s' 2>&1",
				      SS_COMMAND, dir, path),
			      0, "%s", out);
		cr_assert(strstr(out, "error: --metrics"), "%s: %s", path, out);
		cr_assert(strstr(out, bad[i].says), "%s: %s", path, out);
		cr_assert(strstr(out, "hint: "), "%s: %s", path, out);
		/* nothing trained: no progress line, no summary */
		cr_assert(!strstr(out, "examples"), "%s: %s", path, out);
	}
	/* a folder this user may not write (root may write any) */
	if (geteuid() != 0) {
		cr_assert_neq(cmd_run(out, sizeof(out),
				      "mkdir %s/ro && chmod 555 %s/ro && "
				      "%s train --data %s/train.txt " MODEL
				      " --metrics %s/ro/m.prom 2>&1",
				      dir, dir, SS_COMMAND, dir, dir),
			      0, "%s", out);
		cr_assert(strstr(out, "Permission denied"), "%s", out);
	}
	/* two ranks of one host, one file: refused at once, by both */
	cr_assert_eq(
		cmd_run(out, sizeof(out),
			"%s train --data %s/train.txt " MODEL
			" --transport shm --peers 127.0.0.1:%d,127.0.0.1:%d"
			" --rank 1 --metrics %s/m.prom 2>&1",
			SS_COMMAND, dir, port, port + 1, dir),
		2, "%s", out);
	cr_assert(strstr(out, "put {rank} in the name"), "%s", out);
	assert_no_tmp(dir);
}
