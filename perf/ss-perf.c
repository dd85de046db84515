// SPDX-License-Identifier: BSD-2-Clause
/*
 * ss-perf: bandwidth and latency of the ShadowSync fabric, measured the way
 * perftest measures the raw verbs (ib_read_bw, ib_write_bw, ib_read_lat,
 * ib_write_lat), so that perf/vs-perftest can put the two side by side.
 *
 *   server:  ss-perf write_bw --bind 198.18.0.1
 *   client:  ss-perf write_bw --bind 198.18.0.1 198.18.0.1
 *
 * Bandwidth tests keep --tx-depth operations in flight from the client;
 * read_lat times one READ at a time (a round trip, as ib_read_lat does);
 * write_lat is ib_write_lat's ping-pong of RDMA WRITEs, each side spinning
 * on the last byte of its buffer, reported as half the round trip;
 * write_imm_lat is the same ping-pong with WRITE_WITH_IMM and receive
 * completions, the signal the runtime itself uses (a trailing byte is not
 * a safe signal; it is only a way to measure).
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "shadowsync/shadowsync.h"

#define MAX_QPS 16
#define ALL_MAX_SIZE (1u << 23)

enum test { READ_BW, WRITE_BW, READ_LAT, WRITE_LAT, WRITE_IMM_LAT };
static const char *const test_names[] = { "read_bw",	   "write_bw",
					  "read_lat",	   "write_lat",
					  "write_imm_lat", NULL };
static const char *const test_titles[] = { "RDMA_Read BW", "RDMA_Write BW",
					   "RDMA_Read Latency",
					   "RDMA_Write Latency",
					   "RDMA_Write_with_imm Latency" };

static bool is_lat(enum test t)
{
	return t == READ_LAT || t == WRITE_LAT || t == WRITE_IMM_LAT;
}

struct opts {
	enum test test;
	const char *bind, *server, *device;
	int port, qps, tx_depth, gid_index, post_list;
	size_t size;
	bool all, gbits, json;
	long iters;
	double duration;
	enum ss_transport transport;
};

struct conn {
	struct ss_fabric *f;
	struct ss_region *buf, *scratch;
	int peer; /* the other side: the server is rank 0, the client 1 */
	double connect_ms;
};

static const char prog[] = "ss-perf";

/*
 * Timing as perftest does it: the cycle counter, calibrated once against
 * the monotonic clock, since in a guest whose clocksource is not the TSC
 * every clock_gettime is a system call that would weigh on the figures.
 */
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
static double ns_per_tick = 1;

static void calibrate(void)
{
	uint64_t t0 = ss_now_ns(), c0 = __rdtsc();

	ss_sleep_ns(50000000);
	ns_per_tick = (double)(ss_now_ns() - t0) / (double)(__rdtsc() - c0);
}

static uint64_t now_ns(void)
{
	return (uint64_t)((double)__rdtsc() * ns_per_tick);
}
#else
static void calibrate(void)
{
}

static uint64_t now_ns(void)
{
	return ss_now_ns();
}
#endif

static void usage(FILE *out)
{
	fprintf(out,
		"usage: ss-perf read_bw|write_bw|read_lat|write_lat|write_imm_lat [OPTIONS] [SERVER]\n"
		"\n"
		"Measure the ShadowSync fabric like perftest.  Start the server (no SERVER\n"
		"argument) first, then the client with the server's address.\n"
		"\n"
		"  -b, --bind HOST        this host's address on the RDMA network\n"
		"                         (default: $SS_RXE_ADDR)\n"
		"  -p, --port N           rdma_cm port of the server (default 18515); the\n"
		"                         client listens on N+1; connection k uses N+2k\n"
		"  -s, --size BYTES       message size (default 65536; latency: 2)\n"
		"  -a, --all              every size from 2 to 2^23\n"
		"  -n, --iters N          operations per size (default 5000; latency 1000)\n"
		"  -D, --duration S       run each size for S seconds instead\n"
		"  -q, --qp N             connections in parallel (default 1)\n"
		"  -t, --tx-depth N       operations in flight (default 128; latency 1)\n"
		"  -l, --post-list N      read_bw: post READs in lists of N, one doorbell\n"
		"                         and one completion a list (perftest's --post_list)\n"
		"  -d, --device NAME      RDMA device (must hold the --bind address)\n"
		"  -x, --gid-index N      GID index (default: chosen automatically)\n"
		"      --transport T      verbs, shm or auto (default verbs)\n"
		"      --report_gbits     bandwidth in Gb/s instead of MB/s\n"
		"      --json             print JSON with perftest's key names\n"
		"  -h, --help             this help\n");
}

static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option longopts[] = {
		{ "bind", required_argument, NULL, 'b' },
		{ "port", required_argument, NULL, 'p' },
		{ "size", required_argument, NULL, 's' },
		{ "all", no_argument, NULL, 'a' },
		{ "iters", required_argument, NULL, 'n' },
		{ "duration", required_argument, NULL, 'D' },
		{ "qp", required_argument, NULL, 'q' },
		{ "tx-depth", required_argument, NULL, 't' },
		{ "post-list", required_argument, NULL, 'l' },
		{ "device", required_argument, NULL, 'd' },
		{ "gid-index", required_argument, NULL, 'x' },
		{ "transport", required_argument, NULL, 'T' },
		{ "report_gbits", no_argument, NULL, 'g' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	long v;
	int c, index, rc = 0;

	memset(o, 0, sizeof(*o));
	o->bind = getenv("SS_RXE_ADDR");
	o->port = 18515;
	o->qps = 1;
	o->gid_index = -1;
	o->post_list = 1;
	o->transport = SS_TRANSPORT_VERBS;
	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? SS_EUSAGE : 1;
	}
	rc = ss_parse_choice("test", argv[1], test_names, &index);
	if (rc < 0)
		return rc;
	o->test = (enum test)index;
	optind = 2;
	while ((c = getopt_long(argc, argv, "b:p:s:an:D:q:t:l:d:x:h", longopts,
				NULL)) != -1) {
		switch (c) {
		case 'b':
			o->bind = optarg;
			break;
		case 'p':
			rc = ss_parse_long("--port", optarg, 1, 65000, &v);
			o->port = (int)v;
			break;
		case 's':
			rc = ss_parse_long("--size", optarg, 1, 1L << 30, &v);
			o->size = (size_t)v;
			break;
		case 'a':
			o->all = true;
			break;
		case 'n':
			rc = ss_parse_long("--iters", optarg, 5, 100000000, &v);
			o->iters = v;
			break;
		case 'D':
			rc = ss_parse_double("--duration", optarg, 0.1, 3600,
					     &o->duration);
			break;
		case 'q':
			rc = ss_parse_long("--qp", optarg, 1, MAX_QPS, &v);
			o->qps = (int)v;
			break;
		case 't':
			rc = ss_parse_long("--tx-depth", optarg, 1, 1024, &v);
			o->tx_depth = (int)v;
			break;
		case 'l':
			rc = ss_parse_long("--post-list", optarg, 1,
					   SS_FABRIC_MAX_LIST, &v);
			o->post_list = (int)v;
			break;
		case 'd':
			o->device = optarg;
			break;
		case 'x':
			rc = ss_parse_long("--gid-index", optarg, 0, 255, &v);
			o->gid_index = (int)v;
			break;
		case 'T':
			rc = ss_transport_parse("--transport", optarg,
						&o->transport);
			break;
		case 'g':
			o->gbits = true;
			break;
		case 'j':
			o->json = true;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			return ss_error_set(SS_EUSAGE, "unknown option",
					    "ss-perf --help lists them", "%s",
					    argv[optind - 1]);
		}
		if (rc < 0)
			return rc;
	}
	if (optind < argc)
		o->server = argv[optind++];
	if (optind < argc)
		return ss_error_set(SS_EUSAGE, "unexpected argument", NULL,
				    "'%s'", argv[optind]);
	if (!o->bind)
		return ss_error_set(
			SS_EUSAGE, "no address to listen on",
			"give --bind HOST (the RDMA netdev's IP) or set SS_RXE_ADDR",
			"--bind");
	bool lat = is_lat(o->test);
	if (!o->size)
		o->size = lat ? 2 : 65536;
	if (!o->iters)
		o->iters = lat ? 1000 : 5000;
	if (!o->tx_depth)
		o->tx_depth = lat ? 1 : 128;
	if (o->post_list > 1 && o->test != READ_BW)
		return ss_error_set(SS_EUSAGE, "only with read_bw",
				    "READ lists are the table layer's lookups",
				    "--post-list");
	if (o->test == WRITE_LAT && o->all)
		return ss_error_set(SS_EUSAGE, "not with write_lat",
				    "run one --size at a time", "--all");
	return 0;
}

static size_t max_size(const struct opts *o)
{
	return o->all && o->size < ALL_MAX_SIZE ? ALL_MAX_SIZE : o->size;
}

static int open_conn(const struct opts *o, int k, struct conn *c)
{
	char addr[2][160];
	const char *addrs[2] = { addr[0], addr[1] };
	struct ss_fabric_options fo;
	uint64_t t0;
	int rc;

	snprintf(addr[0], sizeof(addr[0]), "%s:%d",
		 o->server ? o->server : o->bind, o->port + 2 * k);
	snprintf(addr[1], sizeof(addr[1]), "%s:%d", o->bind,
		 o->port + 2 * k + 1);
	ss_fabric_options_init(&fo);
	fo.transport = o->transport;
	fo.rank = o->server ? 1 : 0;
	c->peer = 1 - fo.rank;
	fo.world = 2;
	fo.addrs = addrs;
	fo.job_key = 0x55706572ull; /* "Sper" */
	fo.layout_hash = max_size(o);
	fo.timeout_ms = 60000;
	fo.device = o->device;
	fo.gid_index = o->gid_index;
	rc = ss_fabric_open(&c->f, &fo);
	if (rc == 0)
		rc = ss_fabric_alloc(c->f, max_size(o),
				     SS_ACCESS_REMOTE_READ |
					     SS_ACCESS_REMOTE_WRITE,
				     &c->buf);
	if (rc == 0)
		rc = ss_fabric_alloc(c->f, max_size(o), SS_ACCESS_REMOTE_WRITE,
				     &c->scratch);
	t0 = now_ns();
	if (rc == 0)
		rc = ss_fabric_connect(c->f);
	c->connect_ms = (double)(now_ns() - t0) / 1e6;
	return rc;
}

/* Wait for one completion that must succeed. */
static int wait_one(struct conn *c, struct ss_completion *comp)
{
	int n = ss_fabric_poll(c->f, comp, 1, 30000);

	if (n < 0)
		return ss_error_set(n, "no completion", NULL, "waiting");
	if (comp->status)
		return ss_error_set(comp->status, NULL, NULL, "%s",
				    ss_op_name(comp->op));
	return 0;
}

/*
 * write_lat's ping-pong, either side: write @tag as the last byte, then
 * spin until the peer's write brings it into our scratch buffer.  The
 * completions of our own writes are reaped meanwhile; a RECV_IMM 0 is the
 * client's stop (returns 1).
 */
static int ping(struct conn *c, size_t size, uint8_t tag, bool send_first)
{
	uint8_t *in = ss_region_ptr(c->scratch), *out = ss_region_ptr(c->buf);
	struct ss_completion comp;
	uint64_t spins = 0, deadline = 0;
	int rc;

	if (send_first) {
		out[size - 1] = tag;
		rc = ss_fabric_write(c->f, c->peer, c->buf, 0, 1, 0, size, 0);
		if (rc < 0)
			return rc;
	}
	while (__atomic_load_n(&in[size - 1], __ATOMIC_ACQUIRE) != tag) {
		/*
		 * Spin on the byte, as ib_write_lat does, and reap our own
		 * completions (and the client's stop) only now and then:
		 * polling the CQ on every spin reads memory the device writes,
		 * which costs the peer's write its time to land.
		 */
		int n = ++spins % 64 ? 0 : ss_fabric_poll(c->f, &comp, 1, 0);

		if (n < 0)
			return n;
		if (n == 1 && comp.status)
			return ss_error_set(comp.status, NULL, NULL, "%s",
					    ss_op_name(comp.op));
		if (n == 1 && comp.op == SS_OP_RECV_IMM && comp.imm == 0)
			return 1;
		if (spins % 1000000 == 0) { /* every wait is bounded */
			if (!deadline)
				deadline = ss_deadline_ns(30000);
			else if (ss_deadline_passed(deadline))
				return ss_error_set(-ETIMEDOUT, "no answer",
						    NULL,
						    "write_lat ping-pong");
		}
	}
	if (!send_first) {
		out[size - 1] = tag;
		rc = ss_fabric_write(c->f, c->peer, c->buf, 0, 1, 0, size, 0);
		if (rc < 0)
			return rc;
	}
	return 0;
}

static uint8_t next_tag(uint8_t tag)
{
	return (uint8_t)(tag % 255 + 1); /* never 0, the buffer's start */
}

/* The server: serve ping-pongs until the client says stop (imm 0). */
static int serve(const struct opts *o, struct conn *c)
{
	struct ss_completion comp;

	if (o->test == WRITE_LAT) {
		for (uint8_t tag = 1;; tag = next_tag(tag)) {
			int rc = ping(c, o->size, tag, false);

			if (rc != 0)
				return rc < 0 ? rc : 0;
		}
	}

	for (;;) {
		int rc;

		/*
		 * In the bandwidth tests the server has nothing to do until
		 * the client says stop: stay off the CPUs, as perftest's
		 * server does (it blocks on its socket).
		 */
		if (!is_lat(o->test)) {
			rc = ss_fabric_poll(c->f, &comp, 1, 0);
			if (rc == 0) {
				ss_sleep_ns(5000000);
				continue;
			}
			if (rc < 0)
				return rc;
			if (comp.status)
				return ss_error_set(comp.status, NULL, NULL,
						    "%s", ss_op_name(comp.op));
		} else {
			rc = wait_one(c, &comp);
			if (rc < 0)
				return rc;
		}
		if (comp.op != SS_OP_RECV_IMM)
			continue;
		if (comp.imm == 0)
			return 0;
		if (o->test == WRITE_IMM_LAT) {
			rc = ss_fabric_write_imm(c->f, c->peer, c->buf, 0, 1, 0,
						 comp.imm, comp.imm, 0);
			if (rc < 0)
				return rc;
		}
	}
}

struct bw_result {
	long iters;
	double secs, peak_bps;
};

static int run_bw(const struct opts *o, struct conn *conns, size_t size,
		  struct bw_result *r)
{
	long posted = 0, done = 0, limit = o->duration > 0 ? -1 : o->iters;
	uint64_t start, deadline, window_start;
	long window_done = 0;
	struct ss_completion comp[32];
	struct ss_fabric_piece list[SS_FABRIC_MAX_LIST];
	long per_post = o->test == READ_BW ? o->post_list : 1;
	int k = 0;

	/* as perftest's lists: every READ of one from the same place */
	for (int i = 0; i < o->post_list; i++)
		list[i] = (struct ss_fabric_piece){ 0, 0, size };

	r->peak_bps = 0;
	start = window_start = now_ns();
	deadline = start + (uint64_t)(o->duration * 1e9);
	while (limit < 0 || done < limit) {
		bool more = limit < 0 ? now_ns() < deadline : posted < limit;

		while (more && posted - done < (long)o->tx_depth * o->qps) {
			struct conn *c = &conns[k];
			int rc = o->test == READ_BW && per_post > 1 ?
					 ss_fabric_read_list(
						 c->f, c->peer, c->scratch, 0,
						 list, o->post_list, 0) :
				 o->test == READ_BW ?
					 ss_fabric_read(c->f, c->peer,
							c->scratch, 0, 0, 0,
							size, 0) :
					 ss_fabric_write(c->f, c->peer, c->buf,
							 0, 1, 0, size, 0);

			if (rc < 0)
				return rc;
			k = (k + 1) % o->qps;
			posted += per_post;
			more = limit < 0 ? now_ns() < deadline : posted < limit;
		}
		if (done == posted)
			break;
		for (int q = 0; q < o->qps; q++) {
			int n = ss_fabric_poll(conns[q].f, comp, 32, 0);

			for (int i = 0; i < n; i++)
				if (comp[i].status)
					return ss_error_set(
						comp[i].status, NULL, NULL,
						"%s", ss_op_name(comp[i].op));
			if (n < 0)
				return n;
			done += n * per_post;
			window_done += n * per_post;
		}
		/* Peak: the best rate over a window of tx-depth operations. */
		if (window_done >= o->tx_depth) {
			uint64_t now = now_ns();
			double bps = (double)window_done * (double)size /
				     ((double)(now - window_start) / 1e9);

			if (bps > r->peak_bps)
				r->peak_bps = bps;
			window_start = now;
			window_done = 0;
		}
	}
	r->iters = done;
	r->secs = (double)(now_ns() - start) / 1e9;
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

struct lat_result {
	long iters;
	double min, max, typical, avg, stdev, p99, p999;
};

static int run_lat(const struct opts *o, struct conn *c, size_t size,
		   struct lat_result *r)
{
	long cap = o->duration > 0 ? 10000000 : o->iters;
	double *t = malloc((size_t)cap * sizeof(*t)), sum = 0, sq = 0;
	uint64_t deadline = now_ns() + (uint64_t)(o->duration * 1e9);
	struct ss_completion comp;
	uint8_t tag = 1;
	long n = 0;
	int rc = 0;

	if (!t)
		return -ENOMEM;
	while (n < cap && (o->duration <= 0 || now_ns() < deadline)) {
		uint64_t t0 = now_ns();

		if (o->test == READ_LAT) {
			rc = ss_fabric_read(c->f, c->peer, c->scratch, 0, 0, 0,
					    size, 0);
			if (rc == 0)
				rc = wait_one(c, &comp);
		} else if (o->test == WRITE_LAT) {
			rc = ping(c, size, tag, true);
			tag = next_tag(tag);
			if (rc == 1)
				rc = -EPROTO; /* only the client stops */
		} else {
			rc = ss_fabric_write_imm(c->f, c->peer, c->buf, 0, 1, 0,
						 size, (uint32_t)size, 0);
			/* our own completion and the server's answer */
			for (int got = 0; rc == 0 && got < 2; got++)
				rc = wait_one(c, &comp);
		}
		if (rc < 0)
			break;
		t[n] = (double)(now_ns() - t0) / 1e3;
		if (o->test != READ_LAT)
			t[n] /= 2; /* one way, as ib_write_lat reports */
		sum += t[n];
		sq += t[n] * t[n];
		n++;
	}
	if (rc == 0 && n > 0) {
		qsort(t, (size_t)n, sizeof(*t), cmp_double);
		r->iters = n;
		r->min = t[0];
		r->max = t[n - 1];
		r->typical = t[n / 2];
		r->avg = sum / (double)n;
		r->stdev = sqrt(fmax(sq / (double)n - r->avg * r->avg, 0));
		r->p99 = t[(long)((double)(n - 1) * 0.99)];
		r->p999 = t[(long)((double)(n - 1) * 0.999)];
	}
	free(t);
	return rc;
}

static void header(const struct opts *o, const struct conn *c)
{
	bool lat = is_lat(o->test);
	const char *unit = o->gbits ? "Gb/sec" : "MB/sec";

	if (o->json)
		return;
	printf("---------------------------------------------------------------------------------------\n");
	printf("                    %s Test (ShadowSync fabric, %s)\n",
	       test_titles[o->test],
	       ss_transport_name(ss_fabric_transport(c->f)));
	printf(" Number of qps   : %d\t\tTX depth      : %d\n", o->qps,
	       o->tx_depth);
	if (o->post_list > 1)
		printf(" Post List       : %d\n", o->post_list);
	printf(" Connection set-up: %.2f ms\n", c->connect_ms);
	printf("---------------------------------------------------------------------------------------\n");
	if (lat)
		printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99%% percentile[usec]   99.9%% percentile[usec]\n");
	else
		printf(" #bytes     #iterations    BW peak[%s]    BW average[%s]   MsgRate[Mpps]\n",
		       unit, unit);
}

static double bw_unit(const struct opts *o, double bytes_per_s)
{
	return o->gbits ? bytes_per_s * 8 / 1e9 : bytes_per_s / 1048576.0;
}

static int client(const struct opts *o, struct conn *conns)
{
	size_t first = o->all ? 2 : o->size, last = max_size(o);
	bool lat = is_lat(o->test);
	bool comma = false;
	int rc = 0;

	header(o, &conns[0]);
	if (o->json) {
		printf("{\"test\":\"%s\",\"transport\":\"%s\",\"Number_of_qps\":%d,\"TX_depth\":%d,\"post_list\":%d,\"connect_ms\":%.3f,\"results\":[",
		       test_names[o->test],
		       ss_transport_name(ss_fabric_transport(conns[0].f)),
		       o->qps, o->tx_depth, o->post_list, conns[0].connect_ms);
	}
	for (size_t size = first; size <= last && rc == 0; size *= 2) {
		if (lat) {
			struct lat_result r = { 0 };

			rc = run_lat(o, &conns[0], size, &r);
			if (rc < 0)
				break;
			if (o->json)
				printf("%s{\"MsgSize\":%zu,\"n_iterations\":%ld,\"t_min\":%.2f,\"t_max\":%.2f,\"t_typical\":%.2f,\"t_avg\":%.2f,\"t_stdev\":%.2f,\"percentile_99\":%.2f,\"percentile_99.9\":%.2f}",
				       comma ? "," : "", size, r.iters, r.min,
				       r.max, r.typical, r.avg, r.stdev, r.p99,
				       r.p999);
			else
				printf(" %-6zu %-11ld    %-14.2f %-14.2f %-16.2f %-14.2f %-15.2f %-22.2f %.2f\n",
				       size, r.iters, r.min, r.max, r.typical,
				       r.avg, r.stdev, r.p99, r.p999);
		} else {
			struct bw_result r = { 0 };
			double avg;

			rc = run_bw(o, conns, size, &r);
			if (rc < 0)
				break;
			avg = (double)r.iters * (double)size / r.secs;
			if (r.peak_bps < avg)
				r.peak_bps = avg;
			if (o->json)
				printf("%s{\"MsgSize\":%zu,\"n_iterations\":%ld,\"BW_peak\":%.6f,\"BW_average\":%.6f,\"MsgRate\":%.6f}",
				       comma ? "," : "", size, r.iters,
				       bw_unit(o, r.peak_bps), bw_unit(o, avg),
				       (double)r.iters / r.secs / 1e6);
			else
				printf(" %-10zu %-14ld %-18.2f %-20.2f %.6f\n",
				       size, r.iters, bw_unit(o, r.peak_bps),
				       bw_unit(o, avg),
				       (double)r.iters / r.secs / 1e6);
		}
		comma = true;
		fflush(stdout);
		if (!o->all)
			break;
	}
	if (o->json)
		printf("]}\n");
	else
		printf("---------------------------------------------------------------------------------------\n");
	/* Tell every server to stop. */
	for (int k = 0; k < o->qps; k++) {
		struct ss_completion comp;

		if (ss_fabric_write_imm(conns[k].f, conns[k].peer, conns[k].buf,
					0, 1, 0, 0, 0, 0) == 0)
			wait_one(&conns[k], &comp);
	}
	return rc;
}

int main(int argc, char **argv)
{
	struct conn conns[MAX_QPS] = { 0 };
	struct opts o;
	int rc = parse(argc, argv, &o);

	if (rc == 1)
		return 0; /* --help */
	if (rc < 0) {
		ss_error_print(stderr, prog, rc);
		return 2;
	}
	calibrate();
	for (int k = 0; k < o.qps && rc == 0; k++)
		rc = open_conn(&o, k, &conns[k]);
	if (rc == 0 && o.server)
		rc = client(&o, conns);
	else if (rc == 0)
		for (int k = 0; k < o.qps && rc == 0; k++)
			rc = serve(&o, &conns[k]);
	if (rc < 0)
		ss_error_print(stderr, prog, rc);
	for (int k = 0; k < o.qps; k++)
		ss_fabric_close(&conns[k].f);
	return rc < 0 ? 1 : 0;
}
