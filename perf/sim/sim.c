// SPDX-License-Identifier: BSD-2-Clause
/*
 * ss-sim: one simulated ShadowSync job, its figures printed and appended
 * as a CSV row.  See perf/sim/README.md and docs/scale.md.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <simgrid/engine.h>

#include "sim.h"

struct sim sim;

static const char *const sim_algo_names[] = { "ma",	"bmuf", "easgd",
					      "gossip", "hma",	"none" };

static void usage(FILE *f)
{
	fprintf(f,
		"usage: ss-sim [OPTIONS]\n"
		"\n"
		"Simulate one ShadowSync job on SimGrid and print its examples/s,\n"
		"scaling efficiency against N x one node, rounds/s, sync gap,\n"
		"round latency and network use; --csv appends them as a row.\n"
		"\n"
		"  --platform P       hdr, ndr, roce (fat trees) or shm (one machine)\n"
		"  --nodes N          ranks (default 8; above 32 a multiple of 32)\n"
		"  --threads T        trainers a node (default 1; 0: rounds only,\n"
		"                     as sync-bench rounds)\n"
		"  --cores C          a host's cores (default T + 1; shm: 2)\n"
		"  --algo A           ma, bmuf, easgd, gossip, hma (hierarchical\n"
		"                     S-MA) or none (default ma)\n"
		"  --mode M           shadow (default) or foreground\n"
		"  --sync-every K     foreground: a round every K steps (10)\n"
		"  --group G          hma: ranks a group (default: the divisor of N\n"
		"                     nearest sqrt(N))\n"
		"  --shape S          model shape in the calibration file (demo)\n"
		"  --calibration F    measured figures (perf/sim/calibration)\n"
		"  --step-us X        a trainer step, overriding the calibration\n"
		"  --n-floats X       the dense part averaged (default: the shape's)\n"
		"  --tables T         local (default) or sharded: trainers READ each\n"
		"                     batch's rows from their owners a step ahead and\n"
		"                     WRITE the gradients to the owners' logs\n"
		"  --emb N            a row's floats (default: the shape's)\n"
		"  --step-sigma X     log-normal spread of step times (calibrated)\n"
		"  --slow-frac X      fraction of slow nodes (0)\n"
		"  --slow-factor X    their step time factor (2)\n"
		"  --lose R@T         power node R off at T simulated seconds\n"
		"  --detect-s X       time for survivors to mark it failed (2.5)\n"
		"  --round-timeout-ms N  a round's deadline (5000, as train)\n"
		"  --max-rounds-per-s X  cap the shadow, as train (default: none)\n"
		"  --time S           simulated seconds measured (default 2)\n"
		"  --rounds R         or until rank 0 has done R rounds and the\n"
		"                     trainers --min-steps K steps (12)\n"
		"  --seed S           step-time draws (1)\n"
		"  --csv FILE         append the figures as a CSV row\n"
		"  -v, --verbose      SimGrid's warnings and the node loss\n"
		"  -h, --help         this help\n");
}

static int sim_fail(const char *what, const char *value, const char *hint)
{
	fprintf(stderr, "ss-sim: %s '%s': %s\n", what, value, hint);
	return 2;
}

static int sim_number(const char *opt, const char *s, double lo, double hi,
		      double *out)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi)) {
		fprintf(stderr,
			"ss-sim: %s '%s': expected a number from %g to %g\n",
			opt, s, lo, hi);
		return -1;
	}
	*out = v;
	return 0;
}

/*
 * The calibration file: "step SHAPE THREADS STEP_US SIGMA N_FLOATS BATCH"
 * lines, measured by perf/sim/calibrate, and "memory COPY_GBS KERNEL_GBS",
 * "interference SHAPE X", "emb SHAPE N" (a table row's floats),
 * "msg-cpu-us X", "sched-slice-ms X".
 */
static int sim_calibrate(const char *path, const char *shape, struct sim_cfg *c,
			 bool have_step)
{
	char line[256], name[64];
	int lineno = 0, threads;
	bool found = false;
	double step_us, sigma, n, batch, a, b;
	FILE *f = fopen(path, "r");

	if (!f) {
		fprintf(stderr,
			"ss-sim: %s: %s (hint: perf/sim/calibrate "
			"writes it)\n",
			path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		lineno++;
		if (line[0] == '#' || line[strspn(line, " \t\n")] == 0)
			continue;
		if (sscanf(line, "step %63s %d %lf %lf %lf %lf", name, &threads,
			   &step_us, &sigma, &n, &batch) == 6) {
			if (strcmp(name, shape) == 0 &&
			    (threads == c->threads ||
			     (!c->threads && !found))) {
				if (!have_step)
					c->step_s = step_us * 1e-6;
				c->step_sigma = sigma;
				c->n_floats = n;
				c->batch = (int)batch;
				found = true;
			}
		} else if (sscanf(line, "memory %lf %lf", &a, &b) == 2) {
			c->copy_bps = a * 1e9;
			c->kernel_bps = b * 1e9;
		} else if (sscanf(line, "interference %63s %lf", name, &a) ==
			   2) {
			if (strcmp(name, shape) == 0)
				c->interference = a;
		} else if (sscanf(line, "emb %63s %lf", name, &a) == 2) {
			if (strcmp(name, shape) == 0)
				c->emb = (int)a;
		} else if (sscanf(line, "msg-cpu-us %lf", &a) == 1) {
			c->msg_cpu_s = a * 1e-6;
		} else if (sscanf(line, "sched-slice-ms %lf", &a) == 1) {
			c->sched_slice_s = a * 1e-3;
		} else {
			fprintf(stderr,
				"ss-sim: %s:%d: not a calibration line "
				"(step, memory, interference, emb, msg-cpu-us, sched-slice-ms)\n",
				path, lineno);
			fclose(f);
			return -1;
		}
	}
	fclose(f);
	if (!found) {
		fprintf(stderr,
			"ss-sim: %s: no step line for shape '%s' at %d "
			"threads (hint: perf/sim/calibrate --threads %d)\n",
			path, shape, c->threads, c->threads);
		return -1;
	}
	return 0;
}

static double sim_percentile(double q)
{
	double want = q * (double)sim.round_count, seen = 0;

	for (int b = 0; b < SIM_HIST; b++) {
		seen += sim.round_hist[b];
		if (seen >= want && sim.round_hist[b] > 0)
			return 1e-6 * pow(10, (b + 0.5) / 100);
	}
	return 0;
}

/* The figures of the run, printed and appended to @csv. */
static int sim_report(const char *csv, double wall_s)
{
	const struct sim_cfg *c = &sim.cfg;
	double steps = 0, rounds = 0, left = 0, eps, one, eff, gap, util,
	       msgs = 0, started = 0, all_bytes = 0, bytes_measured = 0,
	       table_bytes = 0;
	int alive = 0, slow = 0;
	FILE *f;
	struct stat st;
	bool header;

	for (int r = 0; r < c->nodes; r++) {
		const struct sim_node *nd = &sim.nodes[r];

		steps += nd->steps;
		bytes_measured += nd->bytes_measured;
		rounds += (double)nd->rounds;
		left += (double)nd->left_out;
		alive += !nd->lost;
		slow += nd->slow;
		msgs += (double)nd->msgs_sent;
		all_bytes += (double)nd->bytes_sent;
		started += (double)nd->started;
		table_bytes += nd->table_bytes;
	}
	eps = steps * c->batch / c->duration_s;
	/* one node alone: T trainers at the calibrated step, no sync (shm:
	 * on the machine's cores) */
	one = c->batch *
	      (c->plat.shared_host && c->cores < c->threads ? c->cores :
							      c->threads) /
	      c->step_s;
	eff = one > 0 ? eps / (c->nodes * one) : 0;
	gap = rounds > 0 && c->threads ? steps / c->threads / rounds : 0;
	util = bytes_measured / c->nodes / c->duration_s / c->plat.link_bps;
	printf("%s %s on %d %s nodes, %d trainer(s) a node, %.0f floats: "
	       "%.3f s simulated in %.1f s\n",
	       c->foreground ? "foreground" : "shadow", sim_algo_names[c->algo],
	       c->nodes, c->plat.name, c->threads, c->n_floats, c->duration_s,
	       wall_s);
	printf("  examples/s %.0f, efficiency %.3f of %d x one node (%.0f)\n",
	       eps, eff, c->nodes, one);
	printf("  rounds/s a node %.1f, sync gap %.2f steps, round p50 %.3g ms "
	       "p99 %.3g ms\n",
	       rounds / c->nodes / c->duration_s, gap,
	       sim_percentile(0.5) * 1e3, sim_percentile(0.99) * 1e3);
	printf("  link use %.3f, peers left out %.0f, nodes alive %d, slow %d\n",
	       util, left, alive, slow);
	printf("  a round: %.2f messages, %.0f bytes sent a node\n",
	       started > 0 ? msgs / started : 0,
	       started > 0 ? all_bytes / started : 0);
	if (c->tables_sharded)
		printf("  sharded tables: %.0f bytes a step a trainer (rows and "
		       "gradients, %d-float rows)\n",
		       steps > 0 ? table_bytes / steps : 0, c->emb);
	if (!csv)
		return 0;
	header = stat(csv, &st) != 0 || st.st_size == 0;
	f = fopen(csv, "a");
	if (!f) {
		fprintf(stderr, "ss-sim: %s: %s\n", csv, strerror(errno));
		return 1;
	}
	if (header)
		fprintf(f,
			"platform,nodes,threads,algo,mode,sync_every,group,"
			"n_floats,step_us,examples_per_s,efficiency,"
			"rounds_per_s,sync_gap,round_p50_ms,round_p99_ms,"
			"link_use,left_out,alive,sim_s,wall_s,msgs_per_round,"
			"bytes_per_round,slow,tables\n");
	fprintf(f,
		"%s,%d,%d,%s,%s,%d,%d,%.0f,%.2f,%.0f,%.4f,%.2f,%.3f,%.4g,"
		"%.4g,%.4f,%.0f,%d,%.3f,%.2f,%.3f,%.0f,%d,%s\n",
		c->plat.name, c->nodes, c->threads, sim_algo_names[c->algo],
		c->foreground ? "foreground" : "shadow", c->sync_every,
		c->group, c->n_floats, c->step_s * 1e6, eps, eff,
		rounds / c->nodes / c->duration_s, gap,
		sim_percentile(0.5) * 1e3, sim_percentile(0.99) * 1e3, util,
		left, alive, c->duration_s, wall_s,
		started > 0 ? msgs / started : 0,
		started > 0 ? all_bytes / started : 0, slow,
		c->tables_sharded ? "sharded" : "local");
	return fclose(f) == 0 ? 0 : 1;
}

static int sim_default_group(int n)
{
	int best = 1;

	for (int g = 1; g <= n; g++)
		if (n % g == 0 && fabs(g - sqrt(n)) < fabs(best - sqrt(n)))
			best = g;
	return best;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "platform", 1, 0, 'P' },
		{ "nodes", 1, 0, 'n' },
		{ "threads", 1, 0, 't' },
		{ "cores", 1, 0, 'C' },
		{ "algo", 1, 0, 'a' },
		{ "mode", 1, 0, 'm' },
		{ "sync-every", 1, 0, 'k' },
		{ "group", 1, 0, 'g' },
		{ "shape", 1, 0, 's' },
		{ "calibration", 1, 0, 'c' },
		{ "step-us", 1, 0, 'S' },
		{ "step-sigma", 1, 0, 'G' },
		{ "slow-frac", 1, 0, 'f' },
		{ "slow-factor", 1, 0, 'F' },
		{ "lose", 1, 0, 'L' },
		{ "detect-s", 1, 0, 'D' },
		{ "round-timeout-ms", 1, 0, 'T' },
		{ "time", 1, 0, 'd' },
		{ "seed", 1, 0, 'r' },
		{ "csv", 1, 0, 'o' },
		{ "max-rounds-per-s", 1, 0, 'R' },
		{ "n-floats", 1, 0, 'N' },
		{ "tables", 1, 0, 'B' },
		{ "emb", 1, 0, 'e' },
		{ "rounds", 1, 0, 'E' },
		{ "min-steps", 1, 0, 'M' },
		{ "verbose", 0, 0, 'v' },
		{ "help", 0, 0, 'h' },
		{ 0, 0, 0, 0 }
	};
	struct sim_cfg *c = &sim.cfg;
	const char *shape = "demo", *calib = "perf/sim/calibration",
		   *csv = NULL, *platform = "hdr", *mode = "shadow";
	double v, step_us = 0, sigma = -1, n_floats = 0, emb = 0;
	char platform_path[] = "/tmp/ss-sim-platform-XXXXXX";
	char *sg_argv[64];
	int sg_argc = 0, opt, fd, rc;
	struct timespec t0, t1;

	*c = (struct sim_cfg){ .nodes = 8,
			       .threads = 1,
			       .algo = SIM_MA,
			       .sync_every = 10,
			       .slow_factor = 2,
			       .lose_node = -1,
			       .min_steps = 12,
			       .detect_s = 2.5,
			       .round_timeout_s = 5,
			       .duration_s = 2,
			       .seed = 1,
			       .copy_bps = 10e9,
			       .kernel_bps = 10e9,
			       .msg_cpu_s = 1e-6,
			       .emb = 16 };
	/* --cfg=... and --log=... go to SimGrid, as in its own programs */
	sg_argv[sg_argc++] = argv[0];
	for (int i = 1, j = 1; i <= argc; i++) {
		if (i < argc && sg_argc < 60 &&
		    (strncmp(argv[i], "--cfg=", 6) == 0 ||
		     strncmp(argv[i], "--log=", 6) == 0))
			sg_argv[sg_argc++] = argv[i];
		else
			argv[j++] = i < argc ? argv[i] : NULL;
		if (i == argc)
			argc = j - 1;
	}
	while ((opt = getopt_long(argc, argv, "vh", longopts, NULL)) != -1) {
		switch (opt) {
		case 'P':
			platform = optarg;
			break;
		case 'n':
			if (sim_number("--nodes", optarg, 1, 65536, &v))
				return 2;
			c->nodes = (int)v;
			break;
		case 't':
			if (sim_number("--threads", optarg, 0, 256, &v))
				return 2;
			c->threads = (int)v;
			break;
		case 'C':
			if (sim_number("--cores", optarg, 1, 1024, &v))
				return 2;
			c->cores = (int)v;
			break;
		case 'a':
			c->algo = SIM_NONE + 1;
			for (int i = 0; i <= SIM_NONE; i++)
				if (strcmp(optarg, sim_algo_names[i]) == 0)
					c->algo = i;
			if (c->algo > SIM_NONE)
				return sim_fail("--algo", optarg,
						"expected ma, bmuf, easgd, "
						"gossip, hma or none");
			break;
		case 'm':
			mode = optarg;
			break;
		case 'k':
			if (sim_number("--sync-every", optarg, 1, 1e6, &v))
				return 2;
			c->sync_every = (int)v;
			break;
		case 'g':
			if (sim_number("--group", optarg, 1, 65536, &v))
				return 2;
			c->group = (int)v;
			break;
		case 's':
			shape = optarg;
			break;
		case 'c':
			calib = optarg;
			break;
		case 'S':
			if (sim_number("--step-us", optarg, 0.01, 1e9,
				       &step_us))
				return 2;
			break;
		case 'G':
			if (sim_number("--step-sigma", optarg, 0, 3, &sigma))
				return 2;
			break;
		case 'f':
			if (sim_number("--slow-frac", optarg, 0, 1,
				       &c->slow_frac))
				return 2;
			break;
		case 'F':
			if (sim_number("--slow-factor", optarg, 1, 1000,
				       &c->slow_factor))
				return 2;
			break;
		case 'L':
			if (sscanf(optarg, "%d@%lf", &c->lose_node,
				   &c->lose_at_s) != 2 ||
			    c->lose_node < 0 || c->lose_at_s < 0)
				return sim_fail("--lose", optarg,
						"expected RANK@SECONDS, "
						"e.g. 3@0.5");
			break;
		case 'D':
			if (sim_number("--detect-s", optarg, 0, 600,
				       &c->detect_s))
				return 2;
			break;
		case 'T':
			if (sim_number("--round-timeout-ms", optarg, 1, 6e5,
				       &v))
				return 2;
			c->round_timeout_s = v / 1e3;
			break;
		case 'd':
			if (sim_number("--time", optarg, 1e-3, 1e5,
				       &c->duration_s))
				return 2;
			break;
		case 'r':
			if (sim_number("--seed", optarg, 0, 4e9, &v))
				return 2;
			c->seed = (unsigned)v;
			break;
		case 'o':
			csv = optarg;
			break;
		case 'M':
			if (sim_number("--min-steps", optarg, 0, 1e9, &v))
				return 2;
			c->min_steps = (int)v;
			break;
		case 'E':
			if (sim_number("--rounds", optarg, 1, 1e9, &v))
				return 2;
			c->end_rounds = (int)v;
			break;
		case 'N':
			if (sim_number("--n-floats", optarg, 1, 1e12,
				       &n_floats))
				return 2;
			break;
		case 'R':
			if (sim_number("--max-rounds-per-s", optarg, 0, 1e9,
				       &c->max_rounds_per_s))
				return 2;
			break;
		case 'B':
			if (strcmp(optarg, "local") &&
			    strcmp(optarg, "sharded"))
				return sim_fail("--tables", optarg,
						"expected local or sharded");
			c->tables_sharded = strcmp(optarg, "sharded") == 0;
			break;
		case 'e':
			if (sim_number("--emb", optarg, 1, 65536, &emb))
				return 2;
			break;
		case 'v':
			c->verbose = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc)
		return sim_fail("argument", argv[optind],
				"ss-sim takes options "
				"only (--help)");
	if (sim_platform_by_name(platform, &c->plat))
		return sim_fail("--platform", platform,
				"expected hdr, ndr, roce or shm");
	if (strcmp(mode, "shadow") && strcmp(mode, "foreground"))
		return sim_fail("--mode", mode,
				"expected shadow or foreground");
	c->foreground = strcmp(mode, "foreground") == 0;
	if (!c->cores)
		c->cores = c->plat.shared_host ? 2 : c->threads + 1;
	if (c->algo == SIM_HMA) {
		if (!c->group)
			c->group = sim_default_group(c->nodes);
		if (c->nodes % c->group)
			return fprintf(stderr,
				       "ss-sim: --group %d does not "
				       "divide --nodes %d\n",
				       c->group, c->nodes),
			       2;
	}
	if (c->lose_node >= c->nodes ||
	    (c->lose_node >= 0 && c->plat.shared_host))
		return fprintf(stderr, "ss-sim: --lose %d: %s\n", c->lose_node,
			       c->plat.shared_host ?
				       "shm has one host for every rank" :
				       "no such node"),
		       2;
	if (sim_calibrate(calib, shape, c, step_us > 0))
		return 1;
	if (step_us > 0)
		c->step_s = step_us * 1e-6;
	if (sigma >= 0)
		c->step_sigma = sigma;
	if (n_floats > 0)
		c->n_floats = n_floats;
	if (emb > 0)
		c->emb = (int)emb;
	if (c->foreground && !c->threads)
		return fprintf(stderr, "ss-sim: --mode foreground needs "
				       "trainers (--threads 1 or more)\n"),
		       2;

	fd = mkstemp(platform_path);
	if (fd < 0)
		return perror("ss-sim: mkstemp"), 1;
	close(fd);
	rc = sim_write_platform(c, platform_path);
	if (rc) {
		unlink(platform_path);
		return 1;
	}
	sim.nodes = calloc((size_t)c->nodes, sizeof(*sim.nodes));
	if (!sim.nodes)
		return fprintf(stderr, "ss-sim: out of memory\n"), 1;

	/* ours first: SimGrid takes the last value of a setting */
	memmove(sg_argv + 3, sg_argv + 1,
		(size_t)(sg_argc - 1) * sizeof(char *));
	sg_argc += 2;
	sg_argv[1] = c->plat.shared_host || strcmp(c->plat.name, "roce") == 0 ?
			     "--cfg=network/model:CM02" :
			     "--cfg=network/model:IB";
	sg_argv[2] = c->verbose ? "--log=root.thresh:warning" :
				  "--log=root.thresh:critical";
	sg_argv[sg_argc] = NULL;
	simgrid_init(&sg_argc, sg_argv);
	simgrid_load_platform(platform_path);
	unlink(platform_path);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	sim_start_nodes();
	simgrid_run();
	clock_gettime(CLOCK_MONOTONIC, &t1);
	rc = sim_report(csv, (double)(t1.tv_sec - t0.tv_sec) +
				     (double)(t1.tv_nsec - t0.tv_nsec) / 1e9);
	free(sim.nodes);
	return rc;
}
