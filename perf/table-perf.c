// SPDX-License-Identifier: BSD-2-Clause
/*
 * table-perf: the table layer's lookup rate, rows fetched per second, the
 * way ss-perf read_bw measures the fabric's READ message rate, so that
 * perf/lookups can put the two side by side for the same row size and
 * list length (issue 13).
 *
 *   table-perf --bind 198.18.0.1          rank 0 looks up, rank 1 serves
 *
 * It runs both ranks itself (rank 1 in a child process), on one device
 * or over shm.  Rank 0's client keeps --depth lookups in flight, each of
 * --rows distinct rows that rank 1 owns (a trainer's batch: every row
 * remote, none repeated), and reposts each slot as soon as it is waited
 * for; the proxy sends them as READ lists of up to 64 rows.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shadowsync/shadowsync.h"
#include "shadowsync/table.h"

#define MAX_DEPTH 8
#define POOL (1u << 16) /* ids of rank 1's rows the lookups draw from */

struct opts {
	const char *bind;
	int port, rows, width, depth;
	double duration;
	enum ss_transport transport;
	bool json;
};

static const char prog[] = "table-perf";

static void usage(FILE *out)
{
	fprintf(out,
		"usage: table-perf [OPTIONS]\n"
		"\n"
		"Measure the table layer's lookups: rank 0 keeps --depth lookups of --rows\n"
		"distinct remote rows in flight against rank 1 (a child process), and\n"
		"reports rows fetched per second.\n"
		"\n"
		"  -b, --bind HOST        the RDMA netdev's address (default: $SS_RXE_ADDR,\n"
		"                         else 127.0.0.1 over shm)\n"
		"  -p, --port N           first port (default 18700; uses N to N+3)\n"
		"  -r, --rows N           rows per lookup (default 1024)\n"
		"  -w, --width F          floats per row (default 16: 64 bytes)\n"
		"  -t, --depth D          lookups in flight (default 2, at most %d)\n"
		"  -D, --duration S       seconds to measure (default 5)\n"
		"      --transport T      verbs, shm or auto (default auto)\n"
		"      --json             one JSON object\n"
		"  -h, --help             this help\n",
		MAX_DEPTH);
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "bind", required_argument, NULL, 'b' },
		{ "port", required_argument, NULL, 'p' },
		{ "rows", required_argument, NULL, 'r' },
		{ "width", required_argument, NULL, 'w' },
		{ "depth", required_argument, NULL, 't' },
		{ "duration", required_argument, NULL, 'D' },
		{ "transport", required_argument, NULL, 'T' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	long v;
	int c, rc = 0;

	memset(o, 0, sizeof(*o));
	o->bind = getenv("SS_RXE_ADDR");
	o->port = 18700;
	o->rows = 1024;
	o->width = 16;
	o->depth = 2;
	o->duration = 5;
	o->transport = SS_TRANSPORT_AUTO;
	while ((c = getopt_long(argc, argv, "b:p:r:w:t:D:h", longopts, NULL)) !=
	       -1) {
		switch (c) {
		case 'b':
			o->bind = optarg;
			break;
		case 'p':
			rc = ss_parse_long("--port", optarg, 1, 65000, &v);
			o->port = (int)v;
			break;
		case 'r':
			rc = ss_parse_long("--rows", optarg, 1, POOL / 2, &v);
			o->rows = (int)v;
			break;
		case 'w':
			rc = ss_parse_long("--width", optarg, 1, 4096, &v);
			o->width = (int)v;
			break;
		case 't':
			rc = ss_parse_long("--depth", optarg, 1, MAX_DEPTH, &v);
			o->depth = (int)v;
			break;
		case 'D':
			rc = ss_parse_double("--duration", optarg, 0.1, 3600,
					     &o->duration);
			break;
		case 'T':
			rc = ss_transport_parse("--transport", optarg,
						&o->transport);
			break;
		case 'j':
			o->json = true;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			return ss_error_set(SS_EUSAGE, "unknown option",
					    "table-perf --help lists them",
					    "%s", argv[optind - 1]);
		}
		if (rc < 0)
			return rc;
	}
	if (optind < argc)
		return ss_error_set(SS_EUSAGE, "unexpected argument", NULL,
				    "'%s'", argv[optind]);
	if (!o->bind)
		o->bind = "127.0.0.1";
	return 0;
}

static int open_rank(const struct opts *o, int rank, struct ss_table **tb)
{
	char buf[2][64];
	const char *addrs[2] = { buf[0], buf[1] };
	struct ss_table_options to;
	struct ss_fabric_options fo;

	for (int r = 0; r < 2; r++)
		snprintf(buf[r], sizeof(buf[r]), "%s:%d", o->bind, o->port + r);
	ss_table_options_init(&to);
	to.rows = 4 * POOL; /* rank 1 owns about half: the pool fits */
	to.width = o->width;
	to.max_rows = o->rows;
	to.depth = o->depth;
	to.cache_rows = 0;
	to.timeout_ms = 20000;
	ss_fabric_options_init(&fo);
	fo.transport = o->transport;
	fo.rank = rank;
	fo.world = 2;
	fo.addrs = addrs;
	fo.job_key = 0x54706572ull; /* "Tper" */
	fo.timeout_ms = 60000;
	return ss_table_open(tb, &to, &fo);
}

/* Rank 1: serve its shard until rank 0 is done. */
static int serve(const struct opts *o)
{
	struct ss_table *tb = NULL;
	int rc = open_rank(o, 1, &tb);

	if (rc == 0)
		rc = ss_table_barrier(tb,
				      (unsigned)(o->duration * 1000) + 120000);
	ss_table_close(&tb);
	return rc;
}

/* Rank 0: keep --depth lookups in flight for --duration seconds. */
static int measure(const struct opts *o, struct ss_table *tb)
{
	static uint64_t pool[POOL];
	static const float *rows[POOL / 2];
	struct ss_table_stats st;
	uint64_t start, deadline, lookups = 0;
	unsigned n = 0, next = 0;
	double secs;
	int rc = 0;

	/* rank 1's rows, shuffled: each lookup a window of distinct ones */
	for (uint32_t r = 0; n < POOL; r++)
		if (ss_table_owner(tb, 0, r) == 1)
			pool[n++] = r;
	srand(7);
	for (unsigned i = POOL - 1; i > 0; i--) {
		unsigned j = (unsigned)rand() % (i + 1);
		uint64_t t = pool[i];

		pool[i] = pool[j];
		pool[j] = t;
	}
	start = ss_now_ns();
	deadline = start + (uint64_t)(o->duration * 1e9);
	for (int s = 0; s < o->depth && rc == 0; s++, next += (unsigned)o->rows)
		rc = ss_table_lookup(tb, 0, s, pool + next % (POOL - o->rows),
				     o->rows);
	for (int s = 0; rc == 0 && ss_now_ns() < deadline;
	     s = (s + 1) % o->depth, next += (unsigned)o->rows) {
		rc = ss_table_wait(tb, 0, s, rows);
		lookups++;
		if (rc == 0)
			rc = ss_table_lookup(tb, 0, s,
					     pool + next % (POOL - o->rows),
					     o->rows);
	}
	/* then the last --depth, so every lookup counted has landed */
	for (int s = 0; s < o->depth && rc == 0; s++, lookups++)
		rc = ss_table_wait(tb, 0, s, rows);
	secs = (double)(ss_now_ns() - start) / 1e9;
	if (rc < 0)
		return rc;
	ss_table_stats(tb, &st);
	if (st.rows_stale)
		return ss_error_set(-EIO, "rows came late or not at all", NULL,
				    "%llu of %llu rows",
				    (unsigned long long)st.rows_stale,
				    (unsigned long long)st.rows_fetched);
	if (o->json)
		printf("{\"transport\":\"%s\",\"row_bytes\":%d,\"rows_per_lookup\":%d,\"depth\":%d,\"lookups\":%llu,\"rows_fetched\":%llu,\"secs\":%.3f,\"rows_per_s\":%.1f,\"lookup_wait_share\":%.4f}\n",
		       ss_transport_name(
			       ss_fabric_transport(ss_table_fabric(tb))),
		       o->width * 4, o->rows, o->depth,
		       (unsigned long long)lookups,
		       (unsigned long long)st.rows_fetched, secs,
		       (double)st.rows_fetched / secs,
		       (double)st.lookup_wait_ns / 1e9 / secs);
	else
		printf("table-perf: %s, %d-byte rows, %d a lookup, %d in flight: %llu rows in %.2f s, %.3f M rows/s\n",
		       ss_transport_name(
			       ss_fabric_transport(ss_table_fabric(tb))),
		       o->width * 4, o->rows, o->depth,
		       (unsigned long long)st.rows_fetched, secs,
		       (double)st.rows_fetched / secs / 1e6);
	return 0;
}

int main(int argc, char **argv)
{
	struct ss_table *tb = NULL;
	struct opts o;
	int rc = parse(argc, argv, &o), status = 0;
	pid_t child;

	if (rc == 1)
		return 0; /* --help */
	if (rc < 0) {
		ss_error_print(stderr, prog, rc);
		return 2;
	}
	fflush(stdout);
	child = fork();
	if (child < 0) {
		perror("table-perf: fork");
		return 1;
	}
	if (child == 0) {
		rc = serve(&o);
		if (rc < 0)
			ss_error_print(stderr, "table-perf (rank 1)", rc);
		_exit(rc < 0 ? 1 : 0);
	}
	rc = open_rank(&o, 0, &tb);
	if (rc == 0)
		rc = measure(&o, tb);
	if (tb && ss_table_barrier(tb, 60000) < 0 && rc == 0)
		rc = ss_error_set(-ETIMEDOUT, "rank 1 did not finish", NULL,
				  "barrier");
	ss_table_close(&tb);
	if (rc < 0) {
		ss_error_print(stderr, prog, rc);
		kill(child, SIGTERM);
	}
	waitpid(child, &status, 0);
	if (rc == 0 && (!WIFEXITED(status) || WEXITSTATUS(status)))
		return 1;
	return rc < 0 ? 1 : 0;
}
