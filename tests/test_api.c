// SPDX-License-Identifier: BSD-2-Clause
/*
 * The library's surface: what libshadowsync.so exports (tests/exports, and
 * the library loaded as a program would), the version, and option structs
 * that can grow.
 */
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>
#include <unistd.h>

#include "base/options.h"
#include "cmd.h"
#include "shadowsync/shadowsync.h"

#define EXPORTS SS_SOURCE_DIR "/tests/exports"
#define INCLUDE SS_SOURCE_DIR "/include"

/* ---- exports ------------------------------------------------------------ */

Test(exports, the_library_exports_what_the_headers_declare, .timeout = 60)
{
	char out[8192];
	int rc = cmd_run(out, sizeof(out), "%s %s %s 2>&1", EXPORTS,
			 SS_SHARED_LIB, INCLUDE);

	cr_assert_eq(rc, 0, "%s", out);
	cr_assert(strstr(out, "nothing else"), "%s", out);
}

/*
 * The check can fail: a library that exports an internal, lacks every
 * public function but one, and has no version node is refused, and each
 * of the three is named.
 */
Test(exports, a_library_with_an_internal_and_missing_functions_fails,
     .timeout = 60)
{
	char dir[] = "/tmp/ss-exports-XXXXXX", out[16384];
	const char *lacks;
	int rc;

	cr_assert_not_null(mkdtemp(dir));
	rc = cmd_run(out, sizeof(out),
		     "cd %s && printf '%%s\\n' "
		     "'int ss__internal(void) { return 1; }' "
		     "'unsigned ss_version(void) { return 0; }' >bad.c && "
		     "cc -shared -fPIC bad.c -o libbad.so 2>&1 && "
		     "%s %s/libbad.so %s 2>&1",
		     dir, EXPORTS, dir, INCLUDE);
	cmd_rm_dir(dir);
	cr_assert_eq(rc, 1, "%s", out);
	cr_assert(strstr(out, "1 symbol(s) no public header declares"), "%s",
		  out);
	cr_assert(strstr(out, "  ss__internal\n"), "%s", out);
	cr_assert(strstr(out, "under no SHADOWSYNC_ version node"), "%s", out);
	lacks = strstr(out, "lacks"); /* the last list */
	cr_assert_not_null(lacks, "%s", out);
	cr_assert(strstr(lacks, "  ss_fabric_open\n"), "%s", out);
	cr_assert_null(strstr(lacks, "  ss_version\n"), "%s", out);
}

/* Its declared list holds the functions of every header, macros not. */
Test(exports, the_declared_list_has_every_header, .timeout = 60)
{
	char out[16384];
	static const char *const some[] = {
		"ss_strerror",	 "ss_topo_plan", "ss_fabric_open",
		"ss_sync_round", "ss_train",	 "ss_checkpoint_save",
		"ss_table_open", "ss_version",	 "ss_plan_request_init_size",
	};

	cr_assert_eq(
		cmd_run(out, sizeof(out), "%s --declared %s", EXPORTS, INCLUDE),
		0, "%s", out);
	for (size_t i = 0; i < sizeof(some) / sizeof(some[0]); i++) {
		char line[64];

		snprintf(line, sizeof(line), "\n%s\n", some[i]);
		cr_assert(strstr(out, line), "%s missing from:\n%s", some[i],
			  out);
	}
	cr_assert_null(strstr(out, "ss_fabric_options_init\n"), "a macro");
	cr_assert_null(strstr(out, "ss__"), "an internal");
}

/*
 * Loaded as a program would load it: the public names under their version
 * node, the internals and the ifunc's resolver not at all, and the dense
 * layer's ifunc resolved to a kernel that computes.
 */
Test(exports, the_shared_library_resolves_its_ifunc, .timeout = 60)
{
	void *lib = dlopen(SS_SHARED_LIB, RTLD_NOW | RTLD_LOCAL);
	void (*forward)(const struct ss_dense *, const float *, float *, int);
	unsigned (*version)(void);
	float w[6] = { 1, 2, 3, -1, -2, -3 }, b[2] = { 0.5f, 0.5f };
	float x[3] = { 1, 1, 1 }, y[2] = { -1, -1 };
	struct ss_dense l = { .in = 3, .out = 2, .w = w, .b = b, .relu = true };

	cr_assert_not_null(lib, "%s", dlerror());
	version =
		(unsigned (*)(void))dlvsym(lib, "ss_version", "SHADOWSYNC_0.1");
	cr_assert_not_null(version, "ss_version@SHADOWSYNC_0.1");
	cr_assert_eq(version(), SS_VERSION);
	cr_assert_null(dlsym(lib, "ss__round_ma"), "an internal");
	cr_assert_null(dlsym(lib, "ss__options_in"), "an internal");
	cr_assert_null(dlsym(lib, "ss_dense_forward.resolver"));
	forward = (void (*)(const struct ss_dense *, const float *, float *,
			    int))dlsym(lib, "ss_dense_forward");
	cr_assert_not_null(forward);
	forward(&l, x, y, 1);
	cr_assert_float_eq(y[0], 6.5f, 1e-6f);
	cr_assert_float_eq(y[1], 0.0f, 1e-6f); /* -5.5 through the ReLU */
	dlclose(lib);
}

/* ---- version ------------------------------------------------------------ */

Test(version, the_macros_the_library_and_the_makefile_agree)
{
	char text[32];

	snprintf(text, sizeof(text), "%d.%d.%d", SS_VERSION_MAJOR,
		 SS_VERSION_MINOR, SS_VERSION_PATCH);
	cr_assert_str_eq(SS_VERSION_STRING, text);
	cr_assert_str_eq(SS_MAKE_VERSION, text, "the Makefile's VERSION");
	cr_assert_eq(SS_VERSION,
		     SS_VERSION_ENCODE(SS_VERSION_MAJOR, SS_VERSION_MINOR,
				       SS_VERSION_PATCH));
	cr_assert_eq(ss_version(), SS_VERSION);
	cr_assert(SS_VERSION_ENCODE(0, 2, 0) > SS_VERSION_ENCODE(0, 1, 9));
	cr_assert(SS_VERSION_ENCODE(1, 0, 0) > SS_VERSION_ENCODE(0, 255, 255));
}

/* ---- option structs that grow ------------------------------------------- */

/* Version 1 of a struct and the version 2 that adds a field to it. */
struct opts_v1 {
	size_t size;
	int a;
};

struct opts_v2 {
	size_t size;
	int a;
	double b; /* added in version 2, default 7 */
};

static void init_v2(void *opts, size_t size)
{
	struct opts_v2 o = { .size = sizeof(o), .a = 1, .b = 7 };

	ss__options_out(opts, size, &o, sizeof(o));
}

/* A version 2 library reads a version 1 caller's struct, and no more. */
Test(options, an_earlier_callers_struct_is_read_as_far_as_it_goes)
{
	struct {
		struct opts_v1 v1;
		int canary; /* where v2's b would be: never read */
	} old = { .canary = 99 };
	struct opts_v2 ours;

	init_v2(&old.v1, sizeof(old.v1));
	cr_assert_eq(old.v1.size, sizeof(struct opts_v1));
	cr_assert_eq(old.v1.a, 1);
	cr_assert_eq(old.canary, 99, "the init wrote past the caller's struct");
	old.v1.a = 3;
	init_v2(&ours, sizeof(ours));
	cr_assert_eq(ss__options_in(&ours, sizeof(ours), &old.v1,
				    sizeof(struct opts_v1), "opts"),
		     0);
	cr_assert_eq(ours.size, sizeof(ours));
	cr_assert_eq(ours.a, 3);
	cr_assert_eq(ours.b, 7, "the field it lacks keeps its default");
}

/* A version 1 library: a later caller's new fields, unset or set. */
Test(options, a_later_callers_new_fields_must_be_unset)
{
	struct opts_v2 later;
	struct opts_v1 ours;

	/* the version 1 init zeroes what it does not know */
	later.b = 5;
	ss__options_out(&later, sizeof(later),
			&(struct opts_v1){ .size = sizeof(ours), .a = 1 },
			sizeof(ours));
	cr_assert_eq(later.size, sizeof(later));
	cr_assert_eq(later.b, 0);
	later.a = 4;
	cr_assert_eq(ss__options_in(&ours, sizeof(ours), &later, sizeof(ours),
				    "opts"),
		     0);
	cr_assert_eq(ours.a, 4);
	cr_assert_eq(ours.size, sizeof(ours));
	later.b = 1;
	cr_assert_eq(ss__options_in(&ours, sizeof(ours), &later, sizeof(ours),
				    "opts"),
		     -EINVAL);
	cr_assert(strstr(ss_last_error()->why, "later shadowsync.h"), "%s",
		  ss_last_error()->why);
	cr_assert(strstr(ss_last_error()->what, "struct opts of size"), "%s",
		  ss_last_error()->what);
}

Test(options, a_size_no_library_shipped_is_refused)
{
	struct opts_v2 ours, given = { 0 };

	init_v2(&ours, sizeof(ours));
	cr_assert_eq(ss__options_in(&ours, sizeof(ours), &given, sizeof(ours),
				    "opts"),
		     -EINVAL);
	cr_assert(strstr(ss_last_error()->why, "size field is 0"), "%s",
		  ss_last_error()->why);
	cr_assert(strstr(ss_last_error()->hint, "opts_init()"), "%s",
		  ss_last_error()->hint);
	given.size = sizeof(given) - 4;
	cr_assert_eq(ss__options_in(&ours, sizeof(ours), &given, sizeof(ours),
				    "opts"),
		     -EINVAL);
	cr_assert(strstr(ss_last_error()->why, "not a size"), "%s",
		  ss_last_error()->why);
	/* an uninitialized struct's garbage: refused, nothing read past it */
	memset(&given, 0xa5, sizeof(given));
	cr_assert_eq(ss__options_in(&ours, sizeof(ours), &given, sizeof(ours),
				    "opts"),
		     -EINVAL);
	cr_assert(strstr(ss_last_error()->why, "not a size"), "%s",
		  ss_last_error()->why);
}

/* Whether the last failure is -EINVAL about struct @name. */
static void assert_refused(int rc, const char *name)
{
	char what[64];

	snprintf(what, sizeof(what), "struct %s of size", name);
	cr_assert_eq(rc, -EINVAL, "%s: %d", name, rc);
	cr_assert(strstr(ss_last_error()->what, what), "%s: %s", name,
		  ss_last_error()->what);
}

Test(options, every_init_sets_the_size)
{
	struct ss_fabric_options fo;
	struct ss_sync_options so;
	struct ss_train_options to;
	struct ss_table_options tb;
	struct ss_gen_options go;
	struct ss_plan_request pr;

	memset(&fo, 0xa5, sizeof(fo));
	ss_fabric_options_init(&fo);
	cr_assert_eq(fo.size, sizeof(fo));
	cr_assert_eq(fo.gid_index, -1);
	cr_assert_null(fo.device);
	ss_sync_options_init(&so, SS_SYNC_BMUF);
	cr_assert_eq(so.size, sizeof(so));
	cr_assert_eq(so.algo, SS_SYNC_BMUF);
	cr_assert(so.nesterov);
	ss_train_options_init(&to);
	cr_assert_eq(to.size, sizeof(to));
	cr_assert_eq(to.batch, 128);
	ss_table_options_init(&tb);
	cr_assert_eq(tb.size, sizeof(tb));
	cr_assert_eq(tb.rows, 1000);
	ss_gen_options_init(&go);
	cr_assert_eq(go.size, sizeof(go));
	cr_assert_eq(go.cardinality, 30);
	memset(&pr, 0xa5, sizeof(pr));
	ss_plan_request_init(&pr);
	cr_assert_eq(pr.size, sizeof(pr));
	cr_assert_eq(pr.trainers, 0);
	cr_assert(!pr.no_shadow);
}

/* Every call that takes an option struct refuses one never initialized. */
Test(options, every_call_refuses_a_struct_never_initialized)
{
	struct ss_fabric_options fo = { .world = 1 }, good_fo;
	struct ss_sync_options so = { .algo = SS_SYNC_MA };
	struct ss_train_options to = { .threads = 1 };
	struct ss_table_options tb = { .tables = 1 }, good_tb;
	struct ss_gen_options go = { .examples = 10 };
	struct ss_plan_request pr = { .trainers = 1 };
	struct ss_model_config config;
	struct ss_train_result result;
	struct ss_fabric *fabric = NULL;
	struct ss_sync *sync = NULL;
	struct ss_table *table = NULL;
	struct ss_topo *topo = NULL;
	struct ss_plan *plan = NULL;
	float params[4];
	FILE *null = fopen("/dev/null", "w");

	assert_refused(ss_fabric_open(&fabric, &fo), "ss_fabric_options");
	cr_assert_null(fabric);
	assert_refused(ss_sync_create(&sync, NULL, 4, &so), "ss_sync_options");
	cr_assert_null(sync);
	ss_model_config_init(&config);
	assert_refused(ss_train(&config, params, &to, &result),
		       "ss_train_options");
	cr_assert_eq(result.examples, 0);
	ss_fabric_options_init(&good_fo);
	assert_refused(ss_table_open(&table, &tb, &good_fo),
		       "ss_table_options");
	ss_table_options_init(&good_tb);
	assert_refused(ss_table_open(&table, &good_tb, &fo),
		       "ss_fabric_options");
	cr_assert_null(table);
	cr_assert_not_null(null);
	assert_refused(ss_gen_data(null, &go, NULL), "ss_gen_options");
	fclose(null);
	cr_assert_eq(ss_topo_open(&topo, "numa:1 core:2 pu:1"), 0);
	assert_refused(ss_topo_plan(topo, &pr, &plan), "ss_plan_request");
	cr_assert_null(plan);
	ss_topo_close(&topo);
}

/*
 * Through real calls: a program built against the headers before
 * ss_sync_options.hierarchical_from and ss_fabric_options.partial_connect
 * (and ss_table_options.fill) opens a fabric, a sync and sizes a table
 * with its shorter structs, the missing fields at their defaults.
 * Before, the sync and the fabric refused them as sizes they did not
 * know.
 */
Test(options, an_earlier_headers_structs_are_taken)
{
	char addr[32];
	const char *addrs[1] = { addr };
	struct ss_fabric_options fo;
	struct ss_sync_options so;
	struct ss_table_options to;
	struct ss_fabric *fabric = NULL;
	struct ss_sync *sync = NULL;

	snprintf(addr, sizeof(addr), "127.0.0.1:%d", 20000 + getpid() % 20000);
	ss_fabric_options_init_size(
		&fo, offsetof(struct ss_fabric_options, partial_connect));
	fo.transport = SS_TRANSPORT_SHM;
	fo.world = 1;
	fo.addrs = addrs;
	cr_assert_eq(ss_fabric_open(&fabric, &fo), 0, "%s: %s",
		     ss_last_error()->what, ss_last_error()->why);
	ss_sync_options_init_size(
		&so, offsetof(struct ss_sync_options, hierarchical_from),
		SS_SYNC_MA);
	cr_assert_eq(ss_sync_create(&sync, fabric, 4, &so), 0, "%s: %s",
		     ss_last_error()->what, ss_last_error()->why);
	ss_sync_destroy(&sync);
	ss_fabric_close(&fabric);
	ss_table_options_init_size(&to,
				   offsetof(struct ss_table_options, fill));
	to.tables = 1;
	to.rows = 100;
	to.width = 4;
	to.clients = 1;
	cr_assert_gt(ss_table_registered_bytes(&to, 2), 0, "%s: %s",
		     ss_last_error()->what, ss_last_error()->why);
}

/*
 * Through a real call: a program built against a later topo.h, whose
 * request has one more field, plans here as long as it leaves that field
 * unset.
 */
Test(options, a_plan_request_from_a_later_header)
{
	struct {
		struct ss_plan_request r;
		uint64_t later; /* a field this library does not have */
	} req;
	struct ss_topo *topo = NULL;
	struct ss_plan *plan = NULL;

	req.later = 0xffff;
	ss_plan_request_init_size(&req.r, sizeof(req));
	cr_assert_eq(req.r.size, sizeof(req));
	cr_assert_eq(req.later, 0, "the init leaves what it lacks unset");
	req.r.trainers = 2;
	cr_assert_eq(ss_topo_open(&topo, "numa:1 core:4 pu:1"), 0);
	cr_assert_eq(ss_topo_plan(topo, &req.r, &plan), 0, "%s: %s",
		     ss_last_error()->what, ss_last_error()->why);
	cr_assert_eq(plan->trainers, 2);
	ss_plan_free(&plan);
	req.later = 1;
	assert_refused(ss_topo_plan(topo, &req.r, &plan), "ss_plan_request");
	cr_assert(strstr(ss_last_error()->hint, "built with"), "%s",
		  ss_last_error()->hint);
	ss_topo_close(&topo);
}
