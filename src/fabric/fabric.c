// SPDX-License-Identifier: BSD-2-Clause
/*
 * The fabric's common part: options, transport choice, argument checks,
 * completions and waiting.  The backends (verbs.c, shm.c) move the bytes.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "base/options.h"
#include "fabric_internal.h"

/* How long a wait for completions spins before it starts to sleep. */
#define SS_POLL_SPIN_NS 2000000u
/* Empty polls between two reads of the clock. */
#define SS_POLL_BATCH 1024u
/*
 * Polls that do not wait and find nothing, between two rounds of the slow
 * checks (connection and async events: system calls).  A caller keeping
 * many operations in flight polls like this between completions, and in
 * the soft-RoCE guest once per 1024 meant some 270 extra system calls per
 * 1000 READs of 64 KiB and 0 to 8 % less bandwidth (docs/perf.md).  Once
 * per 16384 still notices a disconnect within about 0.3 s there, a few ms
 * on a real host; error completions are seen at once either way, and a
 * waiting poll keeps the shorter cadence.
 */
#define SS_PROGRESS_EVERY (16 * SS_POLL_BATCH)
/* Reconnection attempts to a failed peer: 500 ms doubling to 5 s apart. */
#define SS_RETRY_FIRST_MS 500u
#define SS_RETRY_MAX_MS 5000u

static const char *const ss_transport_names[] = { "auto", "verbs", "shm",
						  NULL };

void ss_fabric_options_init_size(struct ss_fabric_options *opts, size_t size)
{
	struct ss_fabric_options o = { .size = sizeof(o),
				       .transport = SS_TRANSPORT_AUTO,
				       .gid_index = -1 };

	ss__options_out(opts, size, &o, sizeof(o));
}

int ss_transport_parse(const char *option, const char *text,
		       enum ss_transport *transport)
{
	int index;
	int rc = ss_parse_choice(option, text, ss_transport_names, &index);

	if (rc == 0)
		*transport = (enum ss_transport)index;
	return rc;
}

const char *ss_transport_name(enum ss_transport transport)
{
	return ss_transport_names[transport];
}

const char *ss_op_name(enum ss_op op)
{
	static const char *const names[] = { "READ", "WRITE", "WRITE_WITH_IMM",
					     "RECV_IMM", "FETCH_ADD" };

	return names[op];
}

bool ss_fabric_verbs_available(void)
{
	return ss__verbs_available();
}

size_t ss__page_round(size_t len)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (len ? len + page - 1 : page) / page * page;
}

int ss__addr_host(const char *addr, char *host, size_t size)
{
	const char *colon = strrchr(addr, ':');
	size_t len;

	if (!colon)
		return -EINVAL;
	len = (size_t)(colon - addr);
	if (addr[0] == '[' && len >= 2 && addr[len - 1] == ']') {
		addr++;
		len -= 2;
	}
	if (len >= size)
		return -ENAMETOOLONG;
	memcpy(host, addr, len);
	host[len] = '\0';
	return 0;
}

/* "host:port" or "[v6]:port", with a host and a decimal port 1-65535. */
static int ss_check_addr(int rank, const char *addr)
{
	const char *colon = addr ? strrchr(addr, ':') : NULL;
	const char *p = colon ? colon + 1 : NULL;
	long port = 0;

	if (!colon || colon == addr)
		return ss_error_set(SS_EUSAGE, "not host:port",
				    "write each peer as host:port",
				    "address of rank %d '%s'", rank,
				    addr ? addr : "");
	/* "fe80::2" would be host "fe80:" and port 2 */
	if (addr[0] != '[' && memchr(addr, ':', (size_t)(colon - addr)))
		return ss_error_set(SS_EUSAGE,
				    "an IPv6 address without brackets",
				    "write it [address]:port",
				    "address of rank %d '%s'", rank, addr);
	for (; p && *p && port <= 65535; p++) {
		if (*p < '0' || *p > '9')
			break;
		port = port * 10 + (*p - '0');
	}
	if (colon[1] == '\0' || *p || port < 1 || port > 65535)
		return ss_error_set(SS_EUSAGE, "the port is not 1 to 65535",
				    "write each peer as host:port, the port "
				    "a decimal number",
				    "address of rank %d '%s'", rank, addr);
	return 0;
}

/* Ranks by address, then by rank: the same addresses side by side. */
static int ss_addr_order(const void *a, const void *b, void *addrs)
{
	int i = *(const int *)a, j = *(const int *)b;
	int c = strcmp(((char *const *)addrs)[i], ((char *const *)addrs)[j]);

	return c ? c : (i > j) - (i < j);
}

/*
 * Two ranks on one address would each take the other for itself.  Sorted,
 * not compared pairwise: 65536 ranks would be two billion comparisons.
 * Names the lowest rank that has a twin, and its lowest twin.
 */
static int ss_check_unique_addrs(const struct ss_fabric_options *o)
{
	int *by = malloc((size_t)o->world * sizeof(int)), first = -1, twin = -1;

	if (!by)
		return ss_error_set(-ENOMEM, NULL, NULL, "peer list of %d",
				    o->world);
	for (int i = 0; i < o->world; i++)
		by[i] = i;
	qsort_r(by, (size_t)o->world, sizeof(int), ss_addr_order,
		(void *)o->addrs);
	for (int k = 1; k < o->world; k++)
		if (!strcmp(o->addrs[by[k - 1]], o->addrs[by[k]]) &&
		    (first < 0 || by[k - 1] < first)) {
			first = by[k - 1];
			twin = by[k];
		}
	free(by);
	if (first >= 0)
		return ss_error_set(SS_EUSAGE,
				    "two ranks have the same address",
				    "give each rank its own host:port (a host "
				    "twice needs two ports)",
				    "ranks %d and %d at '%s'", first, twin,
				    o->addrs[first]);
	return 0;
}

static int ss_fabric_check_options(const struct ss_fabric_options *o)
{
	if (o->world < 1 || o->world > SS_FABRIC_MAX_PEERS)
		return ss_error_set(
			SS_EUSAGE, "out of range",
			"give 1 to 65536 ranks (SS_FABRIC_MAX_PEERS)",
			"world size %d", o->world);
	if (o->rank < 0 || o->rank >= o->world)
		return ss_error_set(SS_EUSAGE, "out of range", NULL,
				    "rank %d of %d", o->rank, o->world);
	if (!o->addrs)
		return ss_error_set(SS_EUSAGE, "no addresses given",
				    "give host:port for every rank",
				    "peer list");
	for (int i = 0; i < o->world; i++) {
		int rc = ss_check_addr(i, o->addrs[i]);

		if (rc < 0)
			return rc;
	}
	return ss_check_unique_addrs(o);
}

int ss_fabric_open(struct ss_fabric **out,
		   const struct ss_fabric_options *given)
{
	struct ss_fabric_options copy;
	const struct ss_fabric_options *opts = &copy;
	struct ss_fabric *f;
	int rc;

	*out = NULL;
	ss_fabric_options_init(&copy);
	/* the oldest: before partial_connect */
	rc = ss__options_in(&copy, sizeof(copy), given,
			    offsetof(struct ss_fabric_options, partial_connect),
			    "ss_fabric_options");
	if (rc == 0)
		rc = ss_fabric_check_options(opts);
	if (rc < 0)
		return rc;
	f = calloc(1, sizeof(*f));
	if (!f)
		return ss_error_set(-ENOMEM, NULL, NULL, "fabric");
	f->opts = *opts;
	if (!f->opts.timeout_ms)
		f->opts.timeout_ms = SS_DEFAULT_TIMEOUT_MS;
	f->post_wait_ms = f->opts.timeout_ms; /* 0 would mean: no wait */
	f->addrs = calloc((size_t)opts->world, sizeof(*f->addrs));
	f->peers = calloc((size_t)opts->world, sizeof(*f->peers));
	if (!f->addrs || !f->peers) {
		rc = ss_error_set(-ENOMEM, NULL, NULL, "fabric");
		goto err_alloc;
	}
	for (int i = 0; i < opts->world; i++) {
		f->addrs[i] = strdup(opts->addrs[i]);
		if (!f->addrs[i]) {
			rc = ss_error_set(-ENOMEM, NULL, NULL, "fabric");
			goto err_alloc;
		}
		snprintf(f->peers[i].addr, sizeof(f->peers[i].addr), "%s",
			 opts->addrs[i]);
	}
	f->opts.addrs = (const char *const *)f->addrs;

	switch (opts->transport) {
	case SS_TRANSPORT_VERBS:
		f->ops = &ss__verbs_ops;
		break;
	case SS_TRANSPORT_SHM:
		f->ops = &ss__shm_ops;
		break;
	case SS_TRANSPORT_AUTO:
		f->ops = ss__verbs_available() ? &ss__verbs_ops : &ss__shm_ops;
		ss_log_info("transport auto: %s (%s)", f->ops->name,
			    f->ops == &ss__verbs_ops ?
				    "an RDMA port is active" :
				    "no active RDMA port");
		break;
	}
	rc = f->ops->open(f);
	if (rc < 0)
		goto err_alloc;
	*out = f;
	return 0;

err_alloc:
	for (int i = 0; f->addrs && i < opts->world; i++)
		free(f->addrs[i]);
	free(f->addrs);
	free(f->peers);
	free(f);
	return rc;
}

void ss_fabric_close(struct ss_fabric **fabric)
{
	struct ss_fabric *f;

	if (!fabric || !*fabric)
		return;
	f = *fabric;
	f->ops->close(f); /* disconnects and releases the regions */
	for (int i = 0; i < f->opts.world; i++)
		free(f->addrs[i]);
	free(f->addrs);
	free(f->peers);
	free(f->backlog);
	free(f);
	*fabric = NULL;
}

enum ss_transport ss_fabric_transport(const struct ss_fabric *fabric)
{
	return fabric->ops == &ss__verbs_ops ? SS_TRANSPORT_VERBS :
					       SS_TRANSPORT_SHM;
}

int ss_fabric_rank(const struct ss_fabric *fabric)
{
	return fabric->opts.rank;
}

int ss_fabric_world(const struct ss_fabric *fabric)
{
	return fabric->opts.world;
}

int ss_fabric_alloc(struct ss_fabric *f, size_t len, unsigned access,
		    struct ss_region **out)
{
	struct ss_region *r;
	int rc;

	*out = NULL;
	if (f->connected)
		return ss_error_set(-EINVAL, "already connected",
				    "allocate every region before connecting",
				    "region of %zu bytes", len);
	if (f->n_regions == SS_FABRIC_MAX_REGIONS)
		return ss_error_set(-EINVAL, "too many regions", NULL,
				    "region %d", f->n_regions);
	r = &f->regions[f->n_regions];
	memset(r, 0, sizeof(*r));
	r->fabric = f;
	r->index = f->n_regions;
	r->len = ss__page_round(len);
	r->access = access & (SS_ACCESS_REMOTE_READ | SS_ACCESS_REMOTE_WRITE |
			      SS_ACCESS_REMOTE_ATOMIC);
	rc = f->ops->alloc(f, r);
	if (rc < 0)
		return rc;
	f->n_regions++;
	*out = r;
	return 0;
}

void *ss_region_ptr(const struct ss_region *region)
{
	return region->ptr;
}

size_t ss_region_len(const struct ss_region *region)
{
	return region->len;
}

void ss_fabric_fail_peer(struct ss_fabric *f, int peer, const char *why)
{
	if (peer < 0 || peer >= f->opts.world || peer == f->opts.rank ||
	    f->peers[peer].failed)
		return;
	f->ops->fail_peer(f, peer, why);
}

void ss_fabric_set_placement(struct ss_fabric *f,
			     void (*place)(void *ctx, void *ptr, size_t len),
			     void *ctx)
{
	f->place = place;
	f->place_ctx = ctx;
}

int ss_region_index(const struct ss_region *region)
{
	return region->index;
}

int ss_fabric_connect(struct ss_fabric *f)
{
	int rc;

	if (f->connected)
		return 0;
	ss__self_regions(f);
	rc = f->ops->connect(f);
	if (rc < 0)
		return rc;
	for (int p = 0; p < f->opts.world; p++)
		f->peers[p].epoch = 1;
	f->connected = true;
	return 0;
}

/*
 * Our own regions as a peer's are described, for fetch-adds to ourselves;
 * the backend fills in what it needs (verbs: the rkeys).
 */
void ss__self_regions(struct ss_fabric *f)
{
	struct ss__peer *self = &f->peers[f->opts.rank];

	self->n_regions = f->n_regions;
	for (int i = 0; i < f->n_regions; i++) {
		self->regions[i].addr = (uint64_t)(uintptr_t)f->regions[i].ptr;
		self->regions[i].len = f->regions[i].len;
		self->regions[i].access = f->regions[i].access;
	}
}

uint32_t ss_fabric_peer_epoch(const struct ss_fabric *f, int peer)
{
	if (peer < 0 || peer >= f->opts.world)
		return 0;
	return f->peers[peer].epoch;
}

void ss_fabric_progress(struct ss_fabric *f)
{
	if (f->connected)
		f->ops->progress(f);
}

bool ss__retry_due(struct ss_fabric *f, int p)
{
	struct ss__peer *peer = &f->peers[p];
	uint64_t now = ss_now_ns();

	if (!peer->failed || now < peer->retry_ns)
		return false;
	peer->retry_ns = now + peer->retry_ms * 1000000ull;
	peer->retry_ms = peer->retry_ms * 2 < SS_RETRY_MAX_MS ?
				 peer->retry_ms * 2 :
				 SS_RETRY_MAX_MS;
	return true;
}

void ss__peer_back(struct ss_fabric *f, int p, const char *how)
{
	struct ss__peer *peer = &f->peers[p];

	peer->failed = false;
	peer->epoch++;
	ss_log_warn("peer %d (%s) is back: %s", p, peer->addr, how);
}

bool ss_fabric_peer_ok(const struct ss_fabric *f, int peer)
{
	return peer >= 0 && peer < f->opts.world && peer != f->opts.rank &&
	       f->peers[peer].connected && !f->peers[peer].failed;
}

uint32_t ss_fabric_send_depth(const struct ss_fabric *f)
{
	return f->send_depth;
}

size_t ss_fabric_peer_len(const struct ss_fabric *f, int peer, int index)
{
	if (peer < 0 || peer >= f->opts.world || index < 0 ||
	    index >= f->peers[peer].n_regions)
		return 0;
	return f->peers[peer].regions[index].len;
}

/* @peer marked failed, once: retried in the background (progress), never
 * on the data path.  Returns whether it was up till now. */
static bool ss_peer_mark_failed(struct ss_fabric *f, int peer)
{
	if (f->peers[peer].failed)
		return false;
	f->peers[peer].failed = true;
	f->peers[peer].retry_ms = SS_RETRY_FIRST_MS;
	f->peers[peer].retry_ns = ss_now_ns() + SS_RETRY_FIRST_MS * 1000000ull;
	return true;
}

int ss__peer_fail(struct ss_fabric *f, int peer, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (ss_peer_mark_failed(f, peer))
		ss_log_warn(
			"peer %d (%s) failed: %s; retrying in the background",
			peer, f->peers[peer].addr, why);
	return ss_error_set(SS_EPEER, why, NULL, "peer %d (%s)", peer,
			    f->peers[peer].addr);
}

int ss__peer_left(struct ss_fabric *f, int peer)
{
	if (ss_peer_mark_failed(f, peer))
		ss_log_info("peer %d (%s) left: it closed its endpoint (taken "
			    "back if it comes again)",
			    peer, f->peers[peer].addr);
	return ss_error_set(SS_EPEER, "it left: it closed its endpoint", NULL,
			    "peer %d (%s)", peer, f->peers[peer].addr);
}

int ss__backlog_push(struct ss_fabric *f, const struct ss_completion *c)
{
	if (f->backlog_count == f->backlog_cap) {
		int cap = f->backlog_cap ? 2 * f->backlog_cap : 64;
		struct ss_completion *b = malloc((size_t)cap * sizeof(*b));

		if (!b) { /* said here: most callers are error paths */
			ss_log_warn("fabric: out of memory: the completion of "
				    "%s wr_id %llu (peer %d) is lost; its "
				    "wait ends at its timeout",
				    ss_op_name(c->op),
				    (unsigned long long)c->wr_id, c->peer);
			return -ENOMEM;
		}
		for (int i = 0; i < f->backlog_count; i++)
			b[i] = f->backlog[(f->backlog_head + i) %
					  f->backlog_cap];
		free(f->backlog);
		f->backlog = b;
		f->backlog_head = 0;
		f->backlog_cap = cap;
	}
	f->backlog[(f->backlog_head + f->backlog_count) % f->backlog_cap] = *c;
	f->backlog_count++;
	return 0;
}

/* Whether @len bytes at @local_off and @remote_off fit both regions. */
static int ss_check_range(const struct ss_fabric *f, const struct ss__op *op,
			  size_t local_off, size_t remote_off, size_t len)
{
	const struct ss__remote_region *rr =
		&f->peers[op->peer].regions[op->remote_index];

	if (local_off > op->local->len || len > op->local->len - local_off)
		return ss_error_set(-EINVAL, "outside the local region", NULL,
				    "%s of %zu bytes at local offset %zu",
				    ss_op_name(op->op), len, local_off);
	if (remote_off > rr->len || len > rr->len - remote_off)
		return ss_error_set(
			-EINVAL, "outside the peer's region", NULL,
			"%s of %zu bytes at offset %zu of region %d (%" PRIu64
			" bytes) of peer %d",
			ss_op_name(op->op), len, remote_off, op->remote_index,
			rr->len, op->peer);
	return 0;
}

static int ss_post(struct ss_fabric *f, const struct ss__op *op)
{
	int rc = 0;

	if (!f->connected)
		return ss_error_set(-EINVAL, "not connected",
				    "call ss_fabric_connect first", "%s",
				    ss_op_name(op->op));
	if (op->peer < 0 || op->peer >= f->opts.world ||
	    (op->peer == f->opts.rank && op->op != SS_OP_FETCH_ADD))
		return ss_error_set(-EINVAL, "no such peer", NULL,
				    "%s to peer %d", ss_op_name(op->op),
				    op->peer);
	if (f->peers[op->peer].failed)
		return ss_error_set(SS_EPEER, "the peer has failed", NULL,
				    "%s to peer %d (%s)", ss_op_name(op->op),
				    op->peer, f->peers[op->peer].addr);
	if (!op->local || op->local->fabric != f)
		return ss_error_set(-EINVAL, "not a region of this endpoint",
				    NULL, "%s to peer %d", ss_op_name(op->op),
				    op->peer);
	if (op->remote_index < 0 ||
	    op->remote_index >= f->peers[op->peer].n_regions)
		return ss_error_set(-EINVAL, "no such region at the peer", NULL,
				    "%s to region %d of peer %d",
				    ss_op_name(op->op), op->remote_index,
				    op->peer);
	if (!op->pieces)
		rc = ss_check_range(f, op, op->local_off, op->remote_off,
				    op->len);
	for (int i = 0; op->pieces && i < op->n_pieces && rc == 0; i++)
		rc = ss_check_range(f, op, op->pieces[i].local_off,
				    op->pieces[i].remote_off,
				    op->pieces[i].len);
	return rc < 0 ? rc : f->ops->post(f, op);
}

int ss_fabric_read(struct ss_fabric *f, int peer, struct ss_region *local,
		   size_t local_off, int remote_index, size_t remote_off,
		   size_t len, uint64_t wr_id)
{
	struct ss__op op = { .op = SS_OP_READ,
			     .peer = peer,
			     .local = local,
			     .local_off = local_off,
			     .remote_index = remote_index,
			     .remote_off = remote_off,
			     .len = len,
			     .wr_id = wr_id };

	return ss_post(f, &op);
}

int ss_fabric_read_list(struct ss_fabric *f, int peer, struct ss_region *local,
			int remote_index, const struct ss_fabric_piece *pieces,
			int n, uint64_t wr_id)
{
	struct ss__op op = { .op = SS_OP_READ,
			     .peer = peer,
			     .local = local,
			     .remote_index = remote_index,
			     .wr_id = wr_id,
			     .pieces = pieces,
			     .n_pieces = n };

	if (!pieces || n < 1 || n > SS_FABRIC_MAX_LIST)
		return ss_error_set(
			-EINVAL, "no pieces, or too many", NULL,
			"READ list of %d pieces (1 to %d) to peer %d", n,
			SS_FABRIC_MAX_LIST, peer);
	return ss_post(f, &op);
}

int ss_fabric_write(struct ss_fabric *f, int peer, struct ss_region *local,
		    size_t local_off, int remote_index, size_t remote_off,
		    size_t len, uint64_t wr_id)
{
	struct ss__op op = { .op = SS_OP_WRITE,
			     .peer = peer,
			     .local = local,
			     .local_off = local_off,
			     .remote_index = remote_index,
			     .remote_off = remote_off,
			     .len = len,
			     .wr_id = wr_id };

	return ss_post(f, &op);
}

int ss_fabric_fetch_add(struct ss_fabric *f, int peer, struct ss_region *local,
			size_t local_off, int remote_index, size_t remote_off,
			uint64_t add, uint64_t wr_id)
{
	struct ss__op op = { .op = SS_OP_FETCH_ADD,
			     .peer = peer,
			     .local = local,
			     .local_off = local_off,
			     .remote_index = remote_index,
			     .remote_off = remote_off,
			     .len = 8,
			     .wr_id = wr_id,
			     .add = add };

	if (local_off % 8 || remote_off % 8)
		return ss_error_set(-EINVAL, "not 8-byte aligned", NULL,
				    "FETCH_ADD at local offset %zu, remote "
				    "offset %zu",
				    local_off, remote_off);
	return ss_post(f, &op);
}

int ss_fabric_write_imm(struct ss_fabric *f, int peer, struct ss_region *local,
			size_t local_off, int remote_index, size_t remote_off,
			size_t len, uint32_t imm, uint64_t wr_id)
{
	struct ss__op op = { .op = SS_OP_WRITE_IMM,
			     .peer = peer,
			     .local = local,
			     .local_off = local_off,
			     .remote_index = remote_index,
			     .remote_off = remote_off,
			     .len = len,
			     .imm = imm,
			     .wr_id = wr_id };

	if (imm == SS_IMM_RESERVED)
		return ss_error_set(-EINVAL, "the value is reserved", NULL,
				    "immediate 0x%x", imm);
	return ss_post(f, &op);
}

void ss_fabric_set_post_wait(struct ss_fabric *f, unsigned ms)
{
	f->post_wait_ms = ms < f->opts.timeout_ms ? ms : f->opts.timeout_ms;
}

int ss_fabric_poll(struct ss_fabric *f, struct ss_completion *out, int max,
		   unsigned timeout_ms)
{
	uint64_t start = 0, deadline = 0, now, nap = 20000;
	unsigned spins = 0;
	int n = 0;

	if (max <= 0)
		return -EINVAL;
	for (;;) {
		while (n < max && f->backlog_count) {
			out[n++] = f->backlog[f->backlog_head];
			f->backlog_head =
				(f->backlog_head + 1) % f->backlog_cap;
			f->backlog_count--;
		}
		if (n < max)
			n += f->ops->poll(f, out + n, max - n);
		if (n > 0)
			return n;
		if (timeout_ms == 0) {
			if (++f->empty_polls % SS_PROGRESS_EVERY == 0)
				f->ops->progress(f);
			return 0;
		}
		/*
		 * The clock and the slow checks come once per SS_POLL_BATCH
		 * empty polls: in a virtual machine whose clocksource is not
		 * the TSC, every clock read is a system call, and reading it
		 * on each poll would double a small operation's latency.
		 */
		if (++spins % SS_POLL_BATCH)
			continue;
		f->ops->progress(f);
		now = ss_now_ns();
		if (!start) {
			start = now;
			deadline = now + timeout_ms * 1000000ull;
		}
		if (now >= deadline)
			return -ETIMEDOUT;
		/*
		 * Spin for latency, then stop burning the core: sleeps that
		 * double from 20 us to 1 ms, so a long wait costs little.
		 */
		if (now - start > SS_POLL_SPIN_NS) {
			ss_sleep_ns(nap);
			if (nap < 1000000)
				nap *= 2;
			spins = SS_POLL_BATCH - 1; /* check again after a nap */
		} else {
			/*
			 * While spinning, let a thread that shares this core
			 * (a trainer beside the shadow thread, when cores are
			 * fewer than threads) run; alone on the core this
			 * returns at once.
			 */
			sched_yield();
		}
	}
}
