// SPDX-License-Identifier: BSD-2-Clause
/*
 * The verbs backend's endpoint and data path: the device of our address,
 * regions registered once, one-sided operations split at the device's
 * maximum message size and posted as lists with selective signaling, and
 * completions read with the classic ibv_poll_cq (rdma-core 44's rxe has
 * bugs in the extended CQ API).  Connections live in verbs_cm.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include "verbs_internal.h"

/* Signal one send WR in this many, so long operations free the queue. */
#define SS_VERBS_SIGNAL_EVERY 64
/* a READ list goes out in one ibv_post_send, one doorbell */
_Static_assert(SS_FABRIC_MAX_LIST <= SS_VERBS_SIGNAL_EVERY, "list too long");

const char *ss__verbs_where(const struct ss_verbs *v)
{
	static __thread char buf[96];

	snprintf(buf, sizeof(buf), "device %s port %u", v->dev_name, v->port);
	return buf;
}

bool ss__verbs_available(void)
{
	struct ibv_device **devs;
	bool active = false;
	int n = 0;

	devs = ibv_get_device_list(&n);
	for (int i = 0; i < n && !active; i++) {
		struct ibv_context *ctx = ibv_open_device(devs[i]);
		struct ibv_device_attr da;

		if (!ctx)
			continue;
		if (ibv_query_device(ctx, &da) == 0)
			for (uint8_t p = 1; p <= da.phys_port_cnt && !active;
			     p++) {
				struct ibv_port_attr pa;

				active = ibv_query_port(ctx, p, &pa) == 0 &&
					 pa.state == IBV_PORT_ACTIVE;
			}
		ibv_close_device(ctx);
	}
	if (devs)
		ibv_free_device_list(devs);
	return active;
}

/*
 * Split "host:port" or "[v6]:port" and resolve it.  Returns 0 or SS_EUSAGE
 * naming the address.
 */
int ss__verbs_resolve(const char *text, struct sockaddr_storage *out)
{
	char host[128];
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_flags = AI_NUMERICSERV },
			*res;
	int rc = ss__addr_host(text, host, sizeof(host));

	if (rc < 0)
		return ss_error_set(SS_EUSAGE,
				    rc == -EINVAL ? "not host:port" :
						    "host name too long",
				    NULL, "address '%s'", text);
	rc = getaddrinfo(host, strrchr(text, ':') + 1, &hints, &res);
	/* the name service failing is not a bad address (a usage error,
	 * which launch does not start again) */
	if (rc == EAI_AGAIN || rc == EAI_SYSTEM || rc == EAI_MEMORY)
		return ss_error_set(rc == EAI_MEMORY ? -ENOMEM : -EAGAIN,
				    gai_strerror(rc),
				    "the name service did not answer: try "
				    "again, or give an IP address",
				    "address '%s'", text);
	if (rc != 0)
		return ss_error_set(
			SS_EUSAGE, gai_strerror(rc),
			"give an IP address or a resolvable name, and a port number",
			"address '%s'", text);
	memcpy(out, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

int ss_fabric_device_of(const char *addr, char *name, size_t size)
{
	struct sockaddr_storage sa;
	struct rdma_cm_id *id = NULL;
	int rc = ss__verbs_resolve(addr, &sa);

	if (rc < 0)
		return rc;
	/* port 0: the rank's own may be taken by then, or be ours later */
	if (sa.ss_family == AF_INET)
		((struct sockaddr_in *)&sa)->sin_port = 0;
	else
		((struct sockaddr_in6 *)&sa)->sin6_port = 0;
	/* no event channel: synchronous, and a bind needs no events */
	if (rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP))
		return ss_error_set(-errno, NULL, "no RDMA on this host?",
				    "the RDMA device of %s: rdma_create_id",
				    addr);
	if (rdma_bind_addr(id, (struct sockaddr *)&sa))
		rc = ss_error_set(-errno, NULL,
				  "give an address of this host's RDMA netdev",
				  "the RDMA device of %s: rdma_bind_addr",
				  addr);
	else if (!id->verbs)
		rc = ss_error_set(SS_ENODEVICE,
				  "it is on no RDMA device's interface", NULL,
				  "the RDMA device of %s", addr);
	else
		snprintf(name, size, "%s",
			 ibv_get_device_name(id->verbs->device));
	rdma_destroy_id(id);
	return rc;
}

static int ss_verbs_reg(struct ss_verbs *v, void *ptr, size_t len, int access,
			struct ibv_mr **mr)
{
	uint64_t limit;
	int rc = ss_memlock_check(v->registered, len, ss__verbs_where(v),
				  &limit);

	if (rc < 0)
		return rc;
	*mr = ibv_reg_mr(v->pd, ptr, len, access | IBV_ACCESS_LOCAL_WRITE);
	if (!*mr)
		return ss_error_set(-errno, NULL,
				    "check 'ulimit -l' and free memory",
				    "ibv_reg_mr of %zu bytes on %s", len,
				    ss__verbs_where(v));
	v->registered += len;
	return 0;
}

static int ss_verbs_ibv_access(unsigned access)
{
	return (access & SS_ACCESS_REMOTE_READ ? IBV_ACCESS_REMOTE_READ : 0) |
	       (access & SS_ACCESS_REMOTE_WRITE ? IBV_ACCESS_REMOTE_WRITE : 0) |
	       (access & SS_ACCESS_REMOTE_ATOMIC ? IBV_ACCESS_REMOTE_ATOMIC :
						   0);
}

static int ss_verbs_alloc_mem(struct ss_verbs *v, size_t len, int access,
			      void **ptr, struct ibv_mr **mr)
{
	int rc = posix_memalign(ptr, (size_t)sysconf(_SC_PAGESIZE), len);

	if (rc)
		return ss_error_set(-rc, NULL, NULL, "allocating %zu bytes",
				    len);
	memset(*ptr, 0, len);
	rc = ss_verbs_reg(v, *ptr, len, access, mr);
	if (rc < 0) {
		free(*ptr);
		*ptr = NULL;
	}
	return rc;
}

/*
 * A region's memory: mapped (zeroed by the kernel, no page touched yet),
 * placed as the fabric's placement says, and only then registered, which
 * faults every page in under that placement and pins it there.
 */
static int ss_verbs_alloc(struct ss_fabric *f, struct ss_region *r)
{
	struct ss_verbs *v = f->backend;
	void *p = mmap(NULL, r->len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int rc;

	if (p == MAP_FAILED)
		return ss_error_set(-errno, NULL, NULL, "mmap of %zu bytes",
				    r->len);
	if (f->place)
		f->place(f->place_ctx, p, r->len);
	rc = ss_verbs_reg(v, p, r->len, ss_verbs_ibv_access(r->access),
			  (struct ibv_mr **)&r->backend);
	if (rc < 0) {
		munmap(p, r->len);
		return rc;
	}
	r->ptr = p;
	return 0;
}

/*
 * The variable @name, if set and not empty, into *@value, checked against
 * [@min, @max]: 0 (unset leaves *@value), or SS_EUSAGE naming it.
 */
static int ss_verbs_env(const char *name, long min, long max, long *value)
{
	const char *env = getenv(name);

	return env && *env ? ss_parse_long(name, env, min, max, value) : 0;
}

static int ss_verbs_device(struct ss_fabric *f, struct ss_verbs *v)
{
	const char *want =
		f->opts.device ? f->opts.device : getenv("SS_DEVICE");
	const char *addr = f->addrs[f->opts.rank];
	long cqe, gid = -1, ack = SS_VERBS_ACK_TIMEOUT;
	int rc;

	if (!v->listen->verbs)
		return ss_error_set(
			SS_ENODEVICE, "it is on no RDMA device's interface",
			"listen on the IP of the RDMA netdev ('rdma link' shows each device's netdev, 'ip -br addr' its address)",
			"address %s", addr);
	v->ctx = v->listen->verbs;
	v->port = v->listen->port_num;
	snprintf(v->dev_name, sizeof(v->dev_name), "%s",
		 ibv_get_device_name(v->ctx->device));
	if (want && *want && strcmp(want, v->dev_name) != 0)
		return ss_error_set(
			SS_ENODEVICE, "wrong device",
			"give the address of that device's netdev, or drop --device/SS_DEVICE",
			"address %s is on %s, not on %s", addr, v->dev_name,
			want);
	if (ibv_query_device(v->ctx, &v->dev_attr) ||
	    ibv_query_port(v->ctx, v->port, &v->port_attr))
		return ss_error_set(-errno, NULL, NULL, "querying %s",
				    ss__verbs_where(v));
	cqe = v->dev_attr.max_cqe;
	/*
	 * SS_VERBS_MAX_CQE: a smaller CQ than the device's, to run a few
	 * ranks as a job too large for the device's CQ runs (fewer sends in
	 * flight a peer; tests/test_fabric.c).  It and the GID index and
	 * ACK timeout are checked here, where a bad one is named with the
	 * device's limit: not read as 0 or ignored where they are used.
	 */
	rc = ss_verbs_env("SS_VERBS_MAX_CQE", 1, cqe, &cqe);
	if (rc == 0)
		rc = ss_verbs_env("SS_GID_INDEX", 0,
				  v->port_attr.gid_tbl_len - 1, &gid);
	if (rc == 0)
		rc = ss_verbs_env("SS_ACK_TIMEOUT", 1, 31, &ack);
	if (rc < 0)
		return rc;
	v->dev_attr.max_cqe = (int)cqe;
	v->env_gid = (int)gid;
	v->ack_timeout = (uint8_t)ack;
	if (v->port_attr.state != IBV_PORT_ACTIVE)
		return ss_error_set(SS_ENODEVICE,
				    ibv_port_state_str(v->port_attr.state),
				    "check the link: ibv_devinfo, rdma link",
				    "%s", ss__verbs_where(v));
	return 0;
}

/*
 * Make @fd non-blocking: the progress path reads it with no timeout, so a
 * blocking one would hang a node on a quiet device.
 */
static int ss_nonblocking(int fd, const char *what, struct ss_verbs *v)
{
	int flags = fcntl(fd, F_GETFL);

	if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
		return ss_error_set(-errno, NULL, NULL,
				    "making %s of %s non-blocking", what,
				    ss__verbs_where(v));
	return 0;
}

static int ss_verbs_open(struct ss_fabric *f)
{
	struct ss_verbs *v = calloc(1, sizeof(*v));
	size_t table_len = ss__page_round(sizeof(struct ss__table));
	int cqe, rc;

	if (!v)
		return ss_error_set(-ENOMEM, NULL, NULL, "verbs fabric");
	f->backend = v;
	v->peers = calloc((size_t)f->opts.world, sizeof(*v->peers));
	if (!v->peers) {
		rc = ss_error_set(-ENOMEM, NULL, NULL, "verbs fabric");
		goto err;
	}
	rc = ss__verbs_resolve(f->addrs[f->opts.rank], &v->local_addr);
	if (rc < 0)
		goto err;
	v->channel = rdma_create_event_channel();
	if (!v->channel) {
		rc = ss_error_set(
			-errno, NULL,
			"no RDMA on this host? ranks on one machine run over "
			"--transport shm; else load the RDMA modules (modprobe "
			"rdma_ucm) and check /dev/infiniband",
			"verbs: rdma_create_event_channel");
		goto err;
	}
	if (rdma_create_id(v->channel, &v->listen, NULL, RDMA_PS_TCP)) {
		rc = ss_error_set(-errno, NULL, NULL, "rdma_create_id");
		goto err;
	}
	if (rdma_bind_addr(v->listen, (struct sockaddr *)&v->local_addr)) {
		rc = ss_error_set(
			-errno, NULL,
			errno == EADDRINUSE ?
				"another process uses this port: pick another" :
				"give an address of this host's RDMA netdev",
			"rdma_bind_addr to %s", f->addrs[f->opts.rank]);
		goto err;
	}
	rc = ss_verbs_device(f, v);
	if (rc < 0)
		goto err;
	v->rd_atom = (uint8_t)(v->dev_attr.max_qp_rd_atom <
					       v->dev_attr.max_qp_init_rd_atom ?
				       v->dev_attr.max_qp_rd_atom :
				       v->dev_attr.max_qp_init_rd_atom);
	if (v->rd_atom == 0)
		v->rd_atom = 1;
	v->max_message = v->port_attr.max_msg_sz < (1u << 30) ?
				 v->port_attr.max_msg_sz :
				 (1u << 30);
	if (f->opts.max_message && f->opts.max_message < v->max_message)
		v->max_message = f->opts.max_message;
	v->pd = ibv_alloc_pd(v->ctx);
	if (!v->pd) {
		rc = ss_error_set(-errno, NULL, NULL, "ibv_alloc_pd on %s",
				  ss__verbs_where(v));
		goto err;
	}
	rc = ss__verbs_srq_open(f);
	if (rc < 0)
		goto err;
	/*
	 * One CQ takes every QP's completions and the shared queue's: a
	 * full CQ overruns, and the device then fails it (every peer).  So
	 * what each peer may have in flight is what the device's CQ holds
	 * for all of them: 256 up to about 16000 ranks on a CQ of 4 M.  (A
	 * failed peer's flushes come at once, and are taken long before it
	 * reconnects, after at least 500 ms, and sends to it again.)
	 */
	v->sq_limit = ss__verbs_sq_limit(f->opts.world, v->dev_attr.max_cqe,
					 v->srq_depth);
	if (v->sq_limit < 2) {
		rc = ss_error_set(
			-ENOSPC, "its completion queue is too small",
			"run fewer ranks per job on this device",
			"verbs: %s holds %d completions a CQ: %d ranks need at least %d",
			ss__verbs_where(v), v->dev_attr.max_cqe, f->opts.world,
			2 * f->opts.world + (int)v->srq_depth + 16);
		goto err;
	}
	if (v->sq_limit < SS_VERBS_SQ_DEPTH)
		ss_log_info("verbs: %s holds %d completions a CQ: %u sends in "
			    "flight a peer for %d ranks (instead of %d)",
			    ss__verbs_where(v), v->dev_attr.max_cqe,
			    v->sq_limit, f->opts.world, SS_VERBS_SQ_DEPTH);
	v->signal_every = v->sq_limit < SS_VERBS_SIGNAL_EVERY ?
				  v->sq_limit :
				  SS_VERBS_SIGNAL_EVERY;
	f->send_depth = v->sq_limit;
	cqe = f->opts.world * (int)v->sq_limit + (int)v->srq_depth + 16;
	v->cq = ibv_create_cq(v->ctx, cqe, NULL, NULL, 0);
	if (!v->cq) {
		rc = ss_error_set(-errno, NULL, NULL,
				  "ibv_create_cq of %d entries on %s", cqe,
				  ss__verbs_where(v));
		goto err;
	}
	rc = ss_nonblocking(v->channel->fd, "the completion channel", v);
	if (rc == 0)
		rc = ss_nonblocking(v->ctx->async_fd, "the async event fd", v);
	if (rc < 0)
		goto err;
	rc = ss_verbs_alloc_mem(v, table_len, IBV_ACCESS_REMOTE_READ,
				(void **)&v->table, &v->table_mr);
	if (rc < 0)
		goto err;
	rc = ss_verbs_alloc_mem(v,
				ss__page_round((size_t)f->opts.world *
					       sizeof(struct ss__table)),
				0, (void **)&v->peer_tables,
				&v->peer_tables_mr);
	if (rc < 0)
		goto err;
	ss_log_info(
		"verbs: rank %d at %s on %s, active MTU %d, %u outstanding READs, messages split at %zu bytes, %u shared receives",
		f->opts.rank, f->addrs[f->opts.rank], ss__verbs_where(v),
		128 << v->port_attr.active_mtu, v->rd_atom, v->max_message,
		v->srq_depth);
	return 0;

err:
	f->ops->close(f);
	return rc;
}

static void ss_verbs_free_mem(struct ss_verbs *v, void *ptr, struct ibv_mr *mr)
{
	if (mr) {
		v->registered -= mr->length;
		ibv_dereg_mr(mr);
	}
	free(ptr);
}

static void ss_verbs_free_region(struct ss_fabric *f, struct ss_region *r)
{
	struct ss_verbs *v = f->backend;
	struct ibv_mr *mr = r->backend;

	if (mr) {
		v->registered -= mr->length;
		ibv_dereg_mr(mr);
	}
	if (r->ptr)
		munmap(r->ptr, r->len);
	r->ptr = NULL;
	r->backend = NULL;
}

void ss__verbs_peer_down(struct ss_fabric *f, int p, const char *why)
{
	struct ss_verbs *v = f->backend;
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };

	struct ss_verbs_peer *vp = &v->peers[p];

	ss__peer_fail(f, p, "%s", why);
	if (vp->qp)
		ibv_modify_qp(vp->qp, &attr, IBV_QP_STATE);
	/*
	 * Complete what is in flight now, with an error, rather than when
	 * (or if) the device flushes it; its flushes are then ignored.
	 */
	for (uint32_t seq = vp->head_seq; seq != vp->next_seq; seq++) {
		const struct ss_verbs_slot *slot =
			&vp->slots[seq % SS_VERBS_SQ_DEPTH];
		struct ss_completion c = { .wr_id = slot->wr_id,
					   .peer = p,
					   .op = (enum ss_op)slot->op,
					   .status = SS_EPEER };

		ss__backlog_push(f, &c);
	}
	vp->head_seq = vp->next_seq;
	vp->sq_used = 0;
}

/* The endpoint cannot reach anyone any more: every peer is failed. */
static void ss_verbs_lose_every_peer(struct ss_fabric *f, const char *what)
{
	struct ss_verbs *v = f->backend;

	ss_log_error("verbs: %s on %s: every peer is lost", what,
		     ss__verbs_where(v));
	for (int p = 0; p < f->opts.world; p++)
		if (p != f->opts.rank && !f->peers[p].failed)
			ss__verbs_peer_down(f, p, what);
}

/*
 * Read async events: a fatal QP fails its peer; a CQ error, a port going
 * down or a fatal device fails them all.
 */
static void ss_verbs_async_events(struct ss_fabric *f)
{
	struct ss_verbs *v = f->backend;
	struct ibv_async_event ev;

	while (ibv_get_async_event(v->ctx, &ev) == 0) {
		const char *what = ibv_event_type_str(ev.event_type);

		switch (ev.event_type) {
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
			for (int p = 0; p < f->opts.world; p++)
				if (v->peers[p].qp == ev.element.qp)
					ss__verbs_peer_down(f, p, what);
			break;
		case IBV_EVENT_CQ_ERR: /* one CQ for every peer */
		case IBV_EVENT_PORT_ERR:
		case IBV_EVENT_DEVICE_FATAL:
			ss_verbs_lose_every_peer(f, what);
			break;
		default:
			ss_log_info("verbs: async event %s on %s", what,
				    ss__verbs_where(v));
			break;
		}
		ibv_ack_async_event(&ev);
	}
}

static int ss_verbs_status(enum ibv_wc_status status)
{
	return status == IBV_WC_REM_ACCESS_ERR ? SS_EREMOTE : SS_EPEER;
}

/*
 * One receive back on the shared queue for the one a completion took.  A
 * full queue needs none (a destroyed QP's receives were refilled, and some
 * completed after all); a queue that cannot take one for another reason
 * would leave every peer's sends to RNR.
 */
static void ss_verbs_repost_recv(struct ss_fabric *f)
{
	int err = ss__verbs_srq_repost(f->backend);

	if (err < 0 && err != -ENOMEM) {
		char why[128];

		snprintf(why, sizeof(why), "ibv_post_srq_recv: %s",
			 strerror(-err));
		ss_verbs_lose_every_peer(f, why);
	}
}

/* A completion of a user operation; 1 when it goes to the caller. */
static int ss_verbs_op_done(struct ss_fabric *f, const struct ibv_wc *wc,
			    struct ss_completion *out)
{
	struct ss_verbs *v = f->backend;
	int p = SS_WR_PEER(wc->wr_id);
	struct ss_verbs_peer *vp = &v->peers[p];
	uint32_t seq = SS_WR_SEQ(wc->wr_id);
	struct ss_verbs_slot *slot = &vp->slots[seq % SS_VERBS_SQ_DEPTH];
	bool part = wc->wr_id & SS_WR_PART;

	if ((int32_t)(seq - vp->head_seq) < 0)
		return 0; /* the rest of an operation already reported */
	if (wc->status == IBV_WC_SUCCESS && part) {
		vp->sq_used -= v->signal_every;
		return 0;
	}
	vp->head_seq = seq + 1;
	out->wr_id = slot->wr_id;
	out->peer = p;
	out->op = (enum ss_op)slot->op;
	out->status = 0;
	out->imm = 0;
	if (wc->status == IBV_WC_SUCCESS) {
		vp->sq_used -= slot->n_wrs;
		return 1;
	}
	/* On error only wr_id, status, qp_num and vendor_err are valid. */
	out->status = ss_verbs_status(wc->status);
	if (wc->status != IBV_WC_WR_FLUSH_ERR)
		ss_log_warn(
			"verbs: %s to peer %d (%s) failed: %s (status %d, vendor_err 0x%x, QP 0x%x) on %s",
			ss_op_name(out->op), p, f->peers[p].addr,
			ibv_wc_status_str(wc->status), wc->status,
			wc->vendor_err, wc->qp_num, ss__verbs_where(v));
	/* The queue pair is in error: the operations after it fail too. */
	ss__verbs_peer_down(f, p, ibv_wc_status_str(wc->status));
	return 1;
}

int ss__verbs_drain(struct ss_fabric *f, struct ss_completion *out, int max)
{
	struct ss_verbs *v = f->backend;
	struct ibv_wc wc[32];
	int n = 0;

	while (n < max) {
		int want = max - n < 32 ? max - n : 32;
		int got = ibv_poll_cq(v->cq, want, wc);

		if (got < 0) {
			/* the one CQ is broken: nothing more completes */
			ss_verbs_lose_every_peer(f, "ibv_poll_cq failed");
			break;
		}
		if (got == 0)
			break;
		for (int i = 0; i < got; i++) {
			bool recv = wc[i].wr_id & SS_WR_RECV;
			int p;

			/* a shared receive names its QP by number only */
			if (recv) {
				ss_verbs_repost_recv(f);
				p = ss__verbs_qpn_peer(v, wc[i].qp_num);
				if (p < 0)
					continue;
			} else {
				p = SS_WR_PEER(wc[i].wr_id);
			}
			/* Left by the QP of a connection since replaced. */
			if (!v->peers[p].qp ||
			    wc[i].qp_num != v->peers[p].qp->qp_num)
				continue;
			if (recv) {
				if (wc[i].status != IBV_WC_SUCCESS) {
					if (!f->peers[p].failed)
						ss__verbs_peer_down(
							f, p,
							ibv_wc_status_str(
								wc[i].status));
					continue;
				}
				if (be32toh(wc[i].imm_data) ==
				    SS_IMM_RESERVED) {
					/* the peer has finished connecting */
					v->peers[p].ready_seen = true;
					continue;
				}
				out[n].wr_id = 0;
				out[n].peer = p;
				out[n].op = SS_OP_RECV_IMM;
				out[n].status = 0;
				out[n].imm = be32toh(wc[i].imm_data);
				n++;
			} else if (wc[i].wr_id & SS_WR_TABLE) {
				/* connecting: seq 0 reads the peer's table,
				 * seq 1 tells it we are ready */
				bool ok = wc[i].status == IBV_WC_SUCCESS;

				v->peers[p].sq_used--;
				if (ok && SS_WR_SEQ(wc[i].wr_id) == 0)
					v->peers[p].table_read = true;
				else if (ok)
					v->peers[p].ready_sent = true;
				else
					ss__peer_fail(f, p,
						      "while connecting: %s",
						      ibv_wc_status_str(
							      wc[i].status));
			} else {
				n += ss_verbs_op_done(f, &wc[i], &out[n]);
			}
		}
	}
	return n;
}

/* Wait until @need send WRs fit; completions meanwhile go to the backlog. */
static int ss_verbs_wait_room(struct ss_fabric *f, int p, uint32_t need)
{
	struct ss_verbs *v = f->backend;
	uint64_t deadline = 0; /* read the clock only when we must wait */
	struct ss_completion c[16];

	while (v->peers[p].sq_used + need > v->sq_limit) {
		int n = ss__verbs_drain(f, c, 16);

		for (int i = 0; i < n; i++)
			if (ss__backlog_push(f, &c[i]) < 0)
				return -ENOMEM;
		if (f->peers[p].failed)
			return ss_error_set(SS_EPEER, "the peer has failed",
					    NULL, "peer %d (%s)", p,
					    f->peers[p].addr);
		if (!deadline)
			deadline = ss_deadline_ns(f->opts.timeout_ms);
		if (n == 0 && ss_deadline_passed(deadline))
			return ss_error_set(
				-ETIMEDOUT, "the send queue stayed full",
				"the peer or the link is stalled",
				"peer %d (%s) on %s", p, f->peers[p].addr,
				ss__verbs_where(v));
	}
	return 0;
}

/*
 * An operation failed while being posted.  With nothing of it posted, it
 * never happened: give its slot back, the caller gets @rc.  With part of it
 * posted, the queue pair's state is unknowable: the peer goes down, and the
 * operation completes with SS_EPEER like everything else in flight, so that
 * it is reported once, by its completion.
 */
static int ss_verbs_post_failed(struct ss_fabric *f, int p, uint32_t seq,
				uint32_t posted, int rc)
{
	struct ss_verbs_peer *vp = &((struct ss_verbs *)f->backend)->peers[p];

	if (posted == 0 && vp->next_seq == seq + 1 &&
	    vp->head_seq != vp->next_seq) {
		vp->next_seq = seq;
		return rc;
	}
	ss__verbs_peer_down(f, p, ss_strerror(rc));
	return 0;
}

/* The bytes WR @k of @op moves: a piece of a list, or a chunk of a range. */
static void ss_verbs_wr_range(const struct ss__op *op, size_t chunk, uint32_t k,
			      size_t *local_off, size_t *remote_off,
			      size_t *len)
{
	if (op->pieces) {
		*local_off = op->pieces[k].local_off;
		*remote_off = op->pieces[k].remote_off;
		*len = op->pieces[k].len;
		return;
	}
	*local_off = op->local_off + (size_t)k * chunk;
	*remote_off = op->remote_off + (size_t)k * chunk;
	*len = op->len - (size_t)k * chunk < chunk ?
		       op->len - (size_t)k * chunk :
		       chunk;
}

static int ss_verbs_post(struct ss_fabric *f, const struct ss__op *op)
{
	struct ss_verbs *v = f->backend;
	struct ss_verbs_peer *vp = &v->peers[op->peer];
	const struct ss__remote_region *rr =
		&f->peers[op->peer].regions[op->remote_index];
	struct ibv_mr *mr = op->local->backend;
	size_t chunk = v->max_message;
	uint32_t n_wrs = op->pieces ? (uint32_t)op->n_pieces :
			 op->len ? (uint32_t)((op->len + chunk - 1) / chunk) :
				   1;
	struct ibv_send_wr wrs[SS_VERBS_SIGNAL_EVERY], *bad;
	struct ibv_sge sges[SS_VERBS_SIGNAL_EVERY];
	struct ss_verbs_slot *slot;
	uint64_t wr_id;
	uint32_t seq, k = 0;
	int rc;

	if (vp->state != SS_VP_UP || !vp->qp)
		return ss__peer_fail(f, op->peer, "not connected");
	for (int i = 0; op->pieces && i < op->n_pieces; i++)
		if (op->pieces[i].len > chunk)
			return ss_error_set(
				-EINVAL,
				"a piece longer than the largest message",
				"split it, or READ it on its own",
				"READ list piece %d of %zu bytes (at most %zu on %s)",
				i, op->pieces[i].len, chunk,
				ss__verbs_where(v));
	/*
	 * Room first: the slot of a new operation is the one of the
	 * operation SQ_DEPTH before it, which must have completed.
	 */
	rc = ss_verbs_wait_room(f, op->peer, 1);
	if (rc < 0)
		return rc;
	seq = vp->next_seq++;
	wr_id = ((uint64_t)op->peer << 32) | seq;
	slot = &vp->slots[seq % SS_VERBS_SQ_DEPTH];
	slot->wr_id = op->wr_id;
	slot->op = (uint8_t)op->op;
	/* The final signaled WR frees the WRs since the last signaled one. */
	slot->n_wrs = (uint16_t)(n_wrs - (n_wrs - 1) / v->signal_every *
						 v->signal_every);
	while (k < n_wrs) {
		uint32_t batch = n_wrs - k < v->signal_every ? n_wrs - k :
							       v->signal_every;

		rc = ss_verbs_wait_room(f, op->peer, batch);
		if (rc < 0)
			return ss_verbs_post_failed(f, op->peer, seq, k, rc);
		for (uint32_t i = 0; i < batch; i++, k++) {
			size_t local_off, remote_off, len;
			bool last = k == n_wrs - 1;
			struct ibv_send_wr *wr = &wrs[i];

			ss_verbs_wr_range(op, chunk, k, &local_off, &remote_off,
					  &len);
			memset(wr, 0, sizeof(*wr));
			sges[i].addr =
				(uint64_t)(uintptr_t)op->local->ptr + local_off;
			sges[i].length = (uint32_t)len;
			sges[i].lkey = mr->lkey;
			wr->wr_id = wr_id;
			wr->sg_list = &sges[i];
			wr->num_sge = len ? 1 : 0;
			wr->next = i + 1 < batch ? &wrs[i + 1] : NULL;
			wr->wr.rdma.remote_addr = rr->addr + remote_off;
			wr->wr.rdma.rkey = rr->rkey;
			if (op->op == SS_OP_FETCH_ADD) {
				wr->opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
				wr->wr.atomic.remote_addr =
					rr->addr + op->remote_off;
				wr->wr.atomic.rkey = rr->rkey;
				wr->wr.atomic.compare_add = op->add;
			} else
				wr->opcode =
					op->op == SS_OP_READ ?
						IBV_WR_RDMA_READ :
					last && op->op == SS_OP_WRITE_IMM ?
						IBV_WR_RDMA_WRITE_WITH_IMM :
						IBV_WR_RDMA_WRITE;
			if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM)
				wr->imm_data = htobe32(op->imm);
			if (last) {
				wr->send_flags |= IBV_SEND_SIGNALED;
			} else if (i == batch - 1) {
				/* every SIGNAL_EVERY-th WR frees the queue */
				wr->send_flags |= IBV_SEND_SIGNALED;
				wr->wr_id |= SS_WR_PART;
			}
			if (op->op != SS_OP_READ && op->op != SS_OP_FETCH_ADD &&
			    len && len <= v->max_inline)
				wr->send_flags |= IBV_SEND_INLINE;
		}
		/* the return value is the error: errno need not be set */
		int err = ibv_post_send(vp->qp, wrs, &bad);

		if (err) {
			rc = ss_error_set(
				-err, NULL,
				"too many operations in flight, or the queue pair is in error",
				"ibv_post_send of %s to peer %d (%s) on %s",
				ss_op_name(op->op), op->peer,
				f->peers[op->peer].addr, ss__verbs_where(v));
			return ss_verbs_post_failed(f, op->peer, seq, k - batch,
						    rc);
		}
		vp->sq_used += batch;
	}
	return 0;
}

static int ss_verbs_poll(struct ss_fabric *f, struct ss_completion *out,
			 int max)
{
	return ss__verbs_drain(f, out, max);
}

/*
 * Connection and async events cost two system calls: not on every poll.
 * Failed peers are brought back from here too.
 */
static void ss_verbs_progress(struct ss_fabric *f)
{
	ss__verbs_cm_events(f);
	ss_verbs_async_events(f);
	ss__verbs_reconnect(f);
}

static void ss_verbs_close(struct ss_fabric *f)
{
	struct ss_verbs *v = f->backend;
	uint64_t deadline;
	bool waiting;

	if (!v)
		return;
	/* Both sides must disconnect, or the other's teardown stalls. */
	for (int p = 0; p < f->opts.world && v->peers; p++) {
		struct ss_verbs_peer *vp = &v->peers[p];

		if (vp->id && vp->state == SS_VP_UP && !vp->disconnect_sent) {
			rdma_disconnect(vp->id);
			vp->disconnect_sent = true;
		}
	}
	deadline = ss_deadline_ns(
		f->opts.timeout_ms < 5000 ? f->opts.timeout_ms : 5000);
	do {
		waiting = false;
		for (int p = 0; p < f->opts.world && v->peers; p++)
			if (v->peers[p].state == SS_VP_UP &&
			    v->peers[p].disconnect_sent)
				waiting = true;
		if (!waiting || !v->channel)
			break;
		ss__verbs_cm_events(f);
		ss_sleep_ns(1000000);
	} while (!ss_deadline_passed(deadline));
	for (int p = 0; p < f->opts.world && v->peers; p++) {
		if (v->peers[p].qp)
			ibv_destroy_qp(v->peers[p].qp);
		if (v->peers[p].id)
			rdma_destroy_id(v->peers[p].id);
	}
	if (v->loop_qp)
		ibv_destroy_qp(v->loop_qp);
	ss__verbs_srq_close(v);
	for (int i = 0; i < f->n_regions; i++)
		ss_verbs_free_region(f, &f->regions[i]);
	ss_verbs_free_mem(v, v->table, v->table_mr);
	ss_verbs_free_mem(v, v->peer_tables, v->peer_tables_mr);
	if (v->cq)
		ibv_destroy_cq(v->cq);
	if (v->pd)
		ibv_dealloc_pd(v->pd);
	if (v->listen)
		rdma_destroy_id(v->listen);
	if (v->channel)
		rdma_destroy_event_channel(v->channel);
	free(v->peers);
	free(v);
	f->backend = NULL;
}

const struct ss__fabric_ops ss__verbs_ops = {
	.name = "verbs",
	.open = ss_verbs_open,
	.alloc = ss_verbs_alloc,
	.free_region = ss_verbs_free_region,
	.connect = ss__verbs_connect,
	.post = ss_verbs_post,
	.poll = ss_verbs_poll,
	.progress = ss_verbs_progress,
	.fail_peer = ss__verbs_peer_down,
	.close = ss_verbs_close,
};
