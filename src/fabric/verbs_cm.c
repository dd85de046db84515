// SPDX-License-Identifier: BSD-2-Clause
/*
 * Connections of the verbs backend, with librdmacm and queue pairs we move
 * through their states ourselves, so that the path MTU (the smaller of both
 * sides' active MTU), the outstanding READs (the smaller of both sides'
 * limits) and the GID are ours to set.
 *
 * Higher ranks connect to lower ones and retry until the timeout while the
 * lower one is not listening yet; lower ranks accept.  The connect request
 * carries our hello (see fabric_internal.h); a mismatched peer is rejected
 * with our hello as the reject's private data, so both sides can say what
 * differed.  Once connected, each side READs the other's region table.
 *
 * After the first connect the same path brings a failed peer back (a new
 * process of its rank): the higher rank of the pair connects again on the
 * fabric's backoff, the lower one accepts (a request from a peer it still
 * thought up means that peer restarted), then both read the other's new
 * table and exchange "ready" from the progress path, without blocking.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "verbs_internal.h"

#define SS_VERBS_RESOLVE_MS 2000
#define SS_VERBS_RETRY_NS 100000000u /* a refused connect is retried */
#define SS_VERBS_ATTEMPT_NS 8000000000ull /* see ss_cm_stalled */

static const char *const ss_gid_types[] = { "IB", "RoCE v1", "RoCE v2" };

static int ss_mtu_bytes(unsigned mtu)
{
	return mtu ? 128 << mtu : 0;
}

int ss__verbs_create_qp(struct ss_fabric *f, int p, struct rdma_cm_id *id)
{
	struct ss_verbs *v = f->backend;
	struct ss_verbs_peer *vp = &v->peers[p];
	struct ibv_qp_init_attr ia = {
		.send_cq = v->cq,
		.recv_cq = v->cq,
		.srq = v->srq,
		.cap = { .max_send_wr = v->sq_limit,
			 .max_send_sge = 1,
			 .max_inline_data = SS_VERBS_INLINE },
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_INIT };
	int mask;

	if (id->verbs != v->ctx)
		return ss_error_set(
			SS_ENODEVICE, "routed through another device",
			"give every rank an address on the same RDMA network",
			"peer %d (%s)", p, f->peers[p].addr);
	vp->qp = ibv_create_qp(v->pd, &ia);
	if (!vp->qp && errno == EINVAL) {
		ia.cap.max_inline_data = 0; /* the device has no inline */
		vp->qp = ibv_create_qp(v->pd, &ia);
	}
	if (!vp->qp)
		return ss_error_set(-errno, NULL, NULL,
				    "ibv_create_qp for peer %d on %s", p,
				    ss__verbs_where(v));
	v->max_inline = ia.cap.max_inline_data;
	if (rdma_init_qp_attr(id, &attr, &mask))
		return ss_error_set(-errno, NULL, NULL,
				    "rdma_init_qp_attr (INIT) for peer %d", p);
	attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
			       IBV_ACCESS_REMOTE_WRITE |
			       IBV_ACCESS_REMOTE_ATOMIC;
	if (ibv_modify_qp(vp->qp, &attr, mask))
		return ss_error_set(-errno, NULL, NULL,
				    "ibv_modify_qp to INIT for peer %d on %s",
				    p, ss__verbs_where(v));
	if (ss__verbs_qpn_add(v, vp->qp->qp_num, p) < 0)
		return ss_error_set(-ENOMEM, NULL, NULL, "QP map, peer %d", p);
	vp->id = id;
	id->context = (void *)(intptr_t)(p + 1);
	return 0;
}

/*
 * The GID: rdma_cm picks the entry of our address; where that entry is
 * RoCE v1 and the same address has a RoCE v2 entry, take v2, as the best
 * peers do.  --gid-index / SS_GID_INDEX overrides both.
 */
static int ss_pick_gid(struct ss_fabric *f, int cm_index)
{
	struct ss_verbs *v = f->backend;
	struct ibv_gid_entry cm, e;

	if (f->opts.gid_index >= 0)
		return f->opts.gid_index;
	if (v->env_gid >= 0)
		return v->env_gid;
	if (ibv_query_gid_ex(v->ctx, v->port, (uint32_t)cm_index, &cm, 0) ||
	    cm.gid_type != IBV_GID_TYPE_ROCE_V1)
		return cm_index;
	for (int i = 0; i < v->port_attr.gid_tbl_len; i++)
		if (ibv_query_gid_ex(v->ctx, v->port, (uint32_t)i, &e, 0) ==
			    0 &&
		    e.gid_type == IBV_GID_TYPE_ROCE_V2 &&
		    !memcmp(e.gid.raw, cm.gid.raw, sizeof(cm.gid.raw)))
			return i;
	return cm_index;
}

static void ss_log_gid(struct ss_fabric *f, int p, int index)
{
	struct ss_verbs *v = f->backend;
	struct ss_verbs_peer *vp = &v->peers[p];
	struct ibv_gid_entry e = { 0 };
	char text[INET6_ADDRSTRLEN] = "?";

	if (ibv_query_gid_ex(v->ctx, v->port, (uint32_t)index, &e, 0) == 0)
		inet_ntop(AF_INET6, e.gid.raw, text, sizeof(text));
	ss_log_info(
		"verbs: peer %d (%s) connected on %s, GID index %d (%s, %s), path MTU %d, %u outstanding READs, inline up to %u bytes",
		p, f->peers[p].addr, ss__verbs_where(v), index,
		e.gid_type < 3 ? ss_gid_types[e.gid_type] : "?", text,
		ss_mtu_bytes(vp->path_mtu), vp->rd_atom, v->max_inline);
}

int ss__verbs_qp_ready(struct ss_fabric *f, int p)
{
	struct ss_verbs *v = f->backend;
	struct ss_verbs_peer *vp = &v->peers[p];
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_RTR };
	int mask, gid = 0;

	vp->path_mtu = v->port_attr.active_mtu < vp->hello.mtu ?
			       v->port_attr.active_mtu :
			       vp->hello.mtu;
	vp->rd_atom =
		v->rd_atom < vp->hello.rd_atom ? v->rd_atom : vp->hello.rd_atom;
	if (vp->rd_atom == 0)
		vp->rd_atom = 1;
	if (rdma_init_qp_attr(vp->id, &attr, &mask))
		return ss_error_set(-errno, NULL, NULL,
				    "rdma_init_qp_attr (RTR) for peer %d", p);
	if (attr.path_mtu > vp->path_mtu)
		attr.path_mtu = vp->path_mtu;
	vp->path_mtu = attr.path_mtu;
	attr.max_dest_rd_atomic = vp->rd_atom;
	/*
	 * The longest RNR wait (491 ms) a sender takes before its next try:
	 * with rnr_retry_count 6, a peer that has not reposted receives for
	 * about 3 s fails the sender's operation instead of stalling it.
	 */
	attr.min_rnr_timer = 31;
	mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PATH_MTU |
		IBV_QP_MIN_RNR_TIMER;
	if (attr.ah_attr.is_global) {
		gid = ss_pick_gid(f, attr.ah_attr.grh.sgid_index);
		attr.ah_attr.grh.sgid_index = (uint8_t)gid;
	}
	if (ibv_modify_qp(vp->qp, &attr, mask))
		return ss_error_set(
			-errno, NULL,
			"check the GID index (--gid-index, SS_GID_INDEX; ibv_devinfo -v lists them) and the MTU of both sides",
			"ibv_modify_qp to RTR for peer %d (%s) on %s, GID index %d, MTU %d",
			p, f->peers[p].addr, ss__verbs_where(v), gid,
			ss_mtu_bytes(vp->path_mtu));
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_RTS;
	if (rdma_init_qp_attr(vp->id, &attr, &mask))
		return ss_error_set(-errno, NULL, NULL,
				    "rdma_init_qp_attr (RTS) for peer %d", p);
	attr.max_rd_atomic = vp->rd_atom;
	mask |= IBV_QP_MAX_QP_RD_ATOMIC;
	if (ibv_modify_qp(vp->qp, &attr, mask))
		return ss_error_set(
			-errno, NULL, NULL,
			"ibv_modify_qp to RTS for peer %d (%s) on %s", p,
			f->peers[p].addr, ss__verbs_where(v));
	ss_log_gid(f, p, gid);
	{
		struct ibv_qp_attr q;
		struct ibv_qp_init_attr qi;

		if (ibv_query_qp(vp->qp, &q, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT,
				 &qi) == 0)
			ss_log_debug(
				"verbs: peer %d: ACK timeout %u, retry count %u",
				p, q.timeout, q.retry_cnt);
	}
	return 0;
}

static void ss_hello_wire(struct ss_fabric *f, struct ss__hello *wire)
{
	struct ss_verbs *v = f->backend;
	struct ss__hello mine;

	ss__hello_make(f, &mine);
	mine.table_addr = (uint64_t)(uintptr_t)v->table;
	mine.table_rkey = v->table_mr->rkey;
	mine.mtu = (uint8_t)v->port_attr.active_mtu;
	mine.rd_atom = v->rd_atom;
	ss__hello_to_wire(&mine, wire);
}

static void ss_conn_param(struct ss_fabric *f, int p, const void *hello,
			  struct rdma_conn_param *param)
{
	struct ss_verbs *v = f->backend;
	uint8_t rd = v->peers[p].rd_atom ? v->peers[p].rd_atom : v->rd_atom;

	memset(param, 0, sizeof(*param));
	param->private_data = hello;
	param->private_data_len = sizeof(struct ss__hello);
	param->responder_resources = rd;
	param->initiator_depth = rd;
	/*
	 * 6, not 7: soft-RoCE (rxe_comp.c) takes a retry count of 7 as
	 * "retry for ever", so a powered-off host never failed an operation
	 * over rxe; 6 ends in a retry-exceeded completion after 7 tries on
	 * every device.
	 */
	param->retry_count = SS_VERBS_RETRY_COUNT;
	/*
	 * 7 would retry a receiver not ready for ever; 6 gives up after six
	 * RNR waits (the receiver's min_rnr_timer, 491 ms: about 3 s) and
	 * completes the operation with an error, so a peer that stopped
	 * posting receives cannot hold a sender.
	 */
	param->rnr_retry_count = 6;
	param->qp_num = v->peers[p].qp->qp_num;
}

/* Forget a half-made connection; an active side tries again later. */
static void ss_cm_reset(struct ss_fabric *f, int p)
{
	struct ss_verbs_peer *vp = &((struct ss_verbs *)f->backend)->peers[p];

	if (vp->qp) {
		ibv_destroy_qp(vp->qp);
		ss__verbs_srq_fill(f->backend);
	}
	if (vp->id)
		rdma_destroy_id(vp->id);
	vp->qp = NULL;
	vp->id = NULL;
	vp->state = SS_VP_IDLE;
	vp->retry_ns = ss_now_ns() + SS_VERBS_RETRY_NS;
	/* a new QP: nothing in flight, nothing exchanged yet */
	vp->sq_used = 0;
	vp->table_read = false;
	vp->ready_sent = false;
	vp->ready_seen = false;
	vp->disconnect_sent = false;
	vp->rejoin = SS_RJ_NONE;
}

/*
 * While connecting, the first fatal error ends ss_fabric_connect; after,
 * a failed attempt to bring a peer back is reported and retried.
 */
static void ss_cm_fail(struct ss_fabric *f, int rc)
{
	struct ss_verbs *v = f->backend;

	if (f->connected) {
		ss_log_warn("verbs: reconnecting: %s: %s (%s)",
			    ss_last_error()->what, ss_last_error()->why,
			    ss_strerror(rc));
		return;
	}
	if (!v->cm_fatal)
		v->cm_fatal = rc;
}

/*
 * The ACK timeout of the queue pair @id will make, set before rdma_cm
 * computes its attributes: 4.096 us x 2^t per try, SS_VERBS_ACK_TIMEOUT
 * (t = 17: 0.54 s) unless SS_ACK_TIMEOUT says; with SS_VERBS_RETRY_COUNT
 * (6) a host that died (no disconnect, no reply) fails the operation in
 * flight after 7 tries, 3.8 s.  Left to rdma_cm, RoCE's timeout came from
 * the route's packet life time, and over soft-RoCE operations to a
 * powered-off host never completed at all.
 */
static void ss_cm_ack_timeout(const struct ss_verbs *v, struct rdma_cm_id *id)
{
	uint8_t t = v->ack_timeout;

	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &t,
			    sizeof(t)))
		ss_log_warn(
			"verbs: cannot set the ACK timeout (%u): %s; a dead "
			"host may be noticed late",
			t, strerror(errno));
}

/*
 * An attempt of ours that has had no event for SS_VERBS_ATTEMPT_NS (one
 * that moves, address to route to connection, goes on): start again.  A CM message lost on the wire is sent again
 * only after the CM's response timeout (about 4 s by rdma_cm's default),
 * and a connection was once seen stuck "connecting" for the whole 30 s
 * connect timeout between two soft-RoCE guests at start; the accepting
 * side replaces an earlier attempt of the same peer with the new one.
 */
static bool ss_cm_stalled(struct ss_fabric *f, int p, uint64_t now)
{
	static const char *const states[] = { "", "resolving its address",
					      "resolving the route",
					      "connecting" };
	struct ss_verbs_peer *vp = &((struct ss_verbs *)f->backend)->peers[p];

	if (vp->state != SS_VP_ADDR && vp->state != SS_VP_ROUTE &&
	    vp->state != SS_VP_CONNECTING)
		return false;
	if (now - vp->attempt_ns < SS_VERBS_ATTEMPT_NS)
		return false;
	ss_log_info("verbs: peer %d (%s): still %s, no event for %.0f s: "
		    "trying again",
		    p, f->peers[p].addr, states[vp->state],
		    (double)(now - vp->attempt_ns) / 1e9);
	ss_cm_reset(f, p);
	vp->retry_ns = now; /* at once */
	return true;
}

static int ss_cm_start(struct ss_fabric *f, int p)
{
	struct ss_verbs *v = f->backend;
	struct ss_verbs_peer *vp = &v->peers[p];
	struct sockaddr_storage src = v->local_addr, dst;
	struct rdma_cm_id *id;
	int rc;

	if (!vp->resolved) {
		rc = ss__verbs_resolve(f->addrs[p], &vp->addr);
		if (rc < 0)
			return rc;
		vp->resolved = true;
	}
	dst = vp->addr;
	if (src.ss_family == AF_INET)
		((struct sockaddr_in *)&src)->sin_port = 0;
	else
		((struct sockaddr_in6 *)&src)->sin6_port = 0;
	if (rdma_create_id(v->channel, &id, (void *)(intptr_t)(p + 1),
			   RDMA_PS_TCP))
		return ss_error_set(-errno, NULL, NULL, "rdma_create_id");
	vp->id = id;
	vp->attempt_ns = ss_now_ns();
	ss_cm_ack_timeout(v, id);
	if (rdma_resolve_addr(id, (struct sockaddr *)&src,
			      (struct sockaddr *)&dst, SS_VERBS_RESOLVE_MS)) {
		ss_log_debug("verbs: rdma_resolve_addr to peer %d (%s): %s", p,
			     f->addrs[p], strerror(errno));
		ss_cm_reset(f, p);
		return 0;
	}
	vp->state = SS_VP_ADDR;
	return 0;
}

static int ss_cm_peer_of(struct rdma_cm_id *id)
{
	return (int)(intptr_t)id->context - 1;
}

/* The table READ, or "ready", to peer @p. */
static int ss_post_internal_one(struct ss_fabric *f, int p, bool ready)
{
	struct ss_verbs *v = f->backend;
	struct ss_verbs_peer *vp = &v->peers[p];
	struct ibv_sge sge = { .addr = (uint64_t)(uintptr_t)&v->peer_tables[p],
			       .length = sizeof(struct ss__table),
			       .lkey = v->peer_tables_mr->lkey };
	struct ibv_send_wr wr = { .wr_id = SS_WR_TABLE | (uint64_t)ready |
					   ((uint64_t)p << 32),
				  .sg_list = &sge,
				  .num_sge = ready ? 0 : 1,
				  .opcode = ready ? IBV_WR_RDMA_WRITE_WITH_IMM :
						    IBV_WR_RDMA_READ,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;

	int err;

	wr.wr.rdma.remote_addr = vp->hello.table_addr;
	wr.wr.rdma.rkey = vp->hello.table_rkey;
	wr.imm_data = htobe32(SS_IMM_RESERVED);
	err = ibv_post_send(vp->qp, &wr, &bad);
	if (err) /* the return value is the error, not errno */
		return ss_error_set(-err, NULL, NULL,
				    "posting to peer %d on %s while connecting",
				    p, ss__verbs_where(v));
	vp->sq_used++;
	return 0;
}

/*
 * A connection is up.  After the first connect it is a peer coming back:
 * read its new table (the rest in ss__verbs_reconnect).
 */
static void ss_cm_up(struct ss_fabric *f, int p)
{
	struct ss_verbs *v = f->backend;
	struct ss_verbs_peer *vp = &v->peers[p];

	vp->state = SS_VP_UP;
	f->peers[p].connected = true;
	if (!f->connected || !f->peers[p].failed || vp->rejoin != SS_RJ_NONE)
		return;
	vp->rejoin = SS_RJ_TABLE;
	vp->rejoin_deadline = ss_deadline_ns(f->opts.timeout_ms);
	if (ss_post_internal_one(f, p, false) < 0) {
		ss_cm_fail(f, ss_last_error()->code);
		ss_cm_reset(f, p);
	}
}

/* A connect request from a peer: check its hello, accept or refuse. */
static void ss_cm_request(struct ss_fabric *f, struct rdma_cm_id *id,
			  const void *data, size_t len)
{
	struct ss_verbs *v = f->backend;
	struct ss__hello mine, theirs, wire;
	struct rdma_conn_param param;
	char why[160];
	bool bad;
	int p, rc;

	ss_cm_ack_timeout(v, id);
	memset(&theirs, 0, sizeof(theirs));
	if (len >= sizeof(theirs))
		ss__hello_from_wire(data, &theirs);
	ss_hello_wire(f, &wire);
	ss__hello_from_wire(&wire, &mine);
	p = theirs.rank;
	bad = ss__hello_check(&mine, &theirs, -1, why, sizeof(why)) < 0;
	if (!bad && (p < f->opts.rank ||
		     (v->peers[p].state == SS_VP_UP && !f->connected))) {
		snprintf(
			why, sizeof(why),
			"rank %d must not connect to rank %d (only higher ranks connect, once)",
			p, f->opts.rank);
		bad = true;
	}
	if (bad) {
		snprintf(v->cm_refusal, sizeof(v->cm_refusal),
			 "refused a peer claiming rank %u: %s", theirs.rank,
			 why);
		ss_log_warn("verbs: %s", v->cm_refusal);
		rdma_reject(id, &wire, sizeof(wire));
		rdma_destroy_id(id);
		return;
	}
	/*
	 * One we gave up on, coming while we still connect the others:
	 * not now (accepted, it would be up with no table read and no
	 * "ready" sent, then disconnected as failed); refused without a
	 * hello, which it takes for "not ready", and tries again once we
	 * run, as a failed peer's comeback.
	 */
	if (!bad && !f->connected && v->peers[p].given_up) {
		ss_log_debug("verbs: peer %d (%s), given up on, asks to "
			     "connect while we still connect the others: "
			     "later",
			     p, f->peers[p].addr);
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		return;
	}
	/* Once running, only a new process of a rank connects again. */
	if (f->connected && v->peers[p].state == SS_VP_UP &&
	    !f->peers[p].failed)
		ss__verbs_peer_down(f, p, "a new process of it connects");
	if (v->peers[p].id) /* an earlier attempt, or the old connection */
		ss_cm_reset(f, p);
	v->peers[p].hello = theirs;
	rc = ss__verbs_create_qp(f, p, id);
	if (rc == 0)
		rc = ss__verbs_qp_ready(f, p);
	if (rc < 0) {
		ss_cm_fail(f, rc);
		rdma_reject(id, NULL, 0);
		v->peers[p].id = NULL;
		ss_cm_reset(f, p);
		rdma_destroy_id(id);
		return;
	}
	ss_conn_param(f, p, &wire, &param);
	if (rdma_accept(id, &param)) {
		ss_log_warn("verbs: rdma_accept for peer %d: %s", p,
			    strerror(errno));
		ss_cm_reset(f, p);
		return;
	}
	v->peers[p].state = SS_VP_CONNECTING;
}

/* The accepting peer answered: check its hello and finish our side. */
static void ss_cm_response(struct ss_fabric *f, int p, const void *data,
			   size_t len)
{
	struct ss_verbs *v = f->backend;
	struct ss_verbs_peer *vp = &v->peers[p];
	struct ss__hello mine, wire;
	char why[160];
	int rc;

	ss_hello_wire(f, &wire);
	ss__hello_from_wire(&wire, &mine);
	memset(&vp->hello, 0, sizeof(vp->hello));
	if (len >= sizeof(vp->hello))
		ss__hello_from_wire(data, &vp->hello);
	if (ss__hello_check(&mine, &vp->hello, p, why, sizeof(why)) < 0) {
		ss_cm_fail(
			f,
			ss_error_set(
				SS_EHANDSHAKE, why,
				"start every rank with the same job key, world size and model (and the same part of it synchronized)",
				"peer %d (%s)", p, f->peers[p].addr));
		rdma_disconnect(vp->id);
		vp->state = SS_VP_DOWN;
		return;
	}
	rc = ss__verbs_qp_ready(f, p);
	if (rc == 0 && rdma_establish(vp->id))
		rc = ss_error_set(-errno, NULL, NULL,
				  "rdma_establish with peer %d", p);
	if (rc < 0) {
		ss_cm_fail(f, rc);
		if (f->connected)
			ss_cm_reset(f, p);
		return;
	}
	ss_cm_up(f, p);
}

static void ss_cm_rejected(struct ss_fabric *f, int p, const void *data,
			   size_t len, int status)
{
	struct ss__hello mine, theirs, wire;
	char why[160];

	if (len >= sizeof(theirs)) {
		ss__hello_from_wire(data, &theirs);
		if (theirs.magic == SS_HELLO_MAGIC) {
			ss_hello_wire(f, &wire);
			ss__hello_from_wire(&wire, &mine);
			if (ss__hello_check(&mine, &theirs, p, why,
					    sizeof(why)) == 0)
				snprintf(why, sizeof(why),
					 "it refused our connection");
			ss_cm_fail(
				f,
				ss_error_set(
					SS_EHANDSHAKE, why,
					"start every rank with the same job key, world size and model (and the same part of it synchronized)",
					"peer %d (%s) refused us", p,
					f->peers[p].addr));
			ss_cm_reset(f, p);
			return;
		}
	}
	/* Nobody listening yet: try again until the timeout. */
	ss_log_debug(
		"verbs: peer %d (%s) not ready (reject status %d); retrying", p,
		f->peers[p].addr, status);
	ss_cm_reset(f, p);
}

static void ss_cm_event(struct ss_fabric *f, struct rdma_cm_event *ev)
{
	struct ss_verbs *v = f->backend;
	enum rdma_cm_event_type type = ev->event;
	struct rdma_cm_id *id = ev->id;
	int p = type == RDMA_CM_EVENT_CONNECT_REQUEST ? -1 : ss_cm_peer_of(id);
	uint8_t data[256];
	size_t len = ev->param.conn.private_data_len;
	int status = ev->status;

	if (len > sizeof(data))
		len = sizeof(data);
	if (ev->param.conn.private_data && len)
		memcpy(data, ev->param.conn.private_data, len);
	else
		len = 0;
	rdma_ack_cm_event(ev); /* before anything may destroy the id */
	ss_log_debug("verbs: %s for peer %d (status %d)", rdma_event_str(type),
		     p, status);
	if (p >= f->opts.world ||
	    (p < 0 && type != RDMA_CM_EVENT_CONNECT_REQUEST))
		return;
	if (p >= 0 && id != v->peers[p].id)
		return; /* of a connection since replaced */
	if (p >= 0) /* the attempt moves: ss_cm_stalled counts from here */
		v->peers[p].attempt_ns = ss_now_ns();

	switch (type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (rdma_resolve_route(id, SS_VERBS_RESOLVE_MS))
			ss_cm_reset(f, p);
		else
			v->peers[p].state = SS_VP_ROUTE;
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED: {
		struct rdma_conn_param param;
		struct ss__hello wire;
		int rc = ss__verbs_create_qp(f, p, id);

		if (rc < 0) {
			ss_cm_fail(f, rc);
			if (f->connected)
				ss_cm_reset(f, p);
			break;
		}
		ss_hello_wire(f, &wire);
		ss_conn_param(f, p, &wire, &param);
		if (rdma_connect(id, &param))
			ss_cm_reset(f, p);
		else
			v->peers[p].state = SS_VP_CONNECTING;
		break;
	}
	case RDMA_CM_EVENT_CONNECT_REQUEST:
		ss_cm_request(f, id, data, len);
		break;
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
		ss_cm_response(f, p, data, len);
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		ss_cm_up(f, p);
		break;
	case RDMA_CM_EVENT_REJECTED:
		ss_cm_rejected(f, p, data, len, status);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
	case RDMA_CM_EVENT_ROUTE_ERROR:
	case RDMA_CM_EVENT_UNREACHABLE:
	case RDMA_CM_EVENT_CONNECT_ERROR:
		if (v->peers[p].state == SS_VP_UP) {
			ss__verbs_peer_down(f, p, rdma_event_str(type));
		} else {
			ss_log_debug(
				"verbs: peer %d (%s): %s (status %d); retrying",
				p, f->peers[p].addr, rdma_event_str(type),
				status);
			ss_cm_reset(f, p);
		}
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (v->peers[p].state == SS_VP_UP &&
		    !v->peers[p].disconnect_sent)
			ss__verbs_peer_down(f, p, "it disconnected");
		if (!v->peers[p].disconnect_sent) {
			rdma_disconnect(id); /* so that its teardown ends */
			v->peers[p].disconnect_sent = true;
		}
		v->peers[p].state = SS_VP_DOWN;
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		ss__verbs_peer_down(f, p, "the device was removed");
		break;
	default:
		break;
	}
}

void ss__verbs_cm_events(struct ss_fabric *f)
{
	struct ss_verbs *v = f->backend;
	struct rdma_cm_event *ev;

	while (v->channel && rdma_get_cm_event(v->channel, &ev) == 0)
		ss_cm_event(f, ev);
}

/*
 * Post one internal operation to every peer (but those a partial connect
 * gave up on): a table READ or "ready".
 */
static int ss_post_internal(struct ss_fabric *f, bool ready)
{
	struct ss_verbs *v = f->backend;

	for (int p = 0; p < f->opts.world; p++) {
		int rc = p == f->opts.rank || v->peers[p].given_up ?
				 0 :
				 ss_post_internal_one(f, p, ready);

		if (rc < 0 && f->opts.partial_connect) {
			/* its queue pair failed since: a partial connect goes
			 * on without it */
			v->peers[p].given_up = true;
			ss__peer_fail(f, p, "%s", ss_last_error()->what);
			continue;
		}
		if (rc < 0)
			return rc;
	}
	return 0;
}

/*
 * Read every peer's region table, then tell each we are ready and wait
 * until each has told us: only then may operations start on both sides.
 */
static int ss_finish_connect(struct ss_fabric *f, uint64_t deadline)
{
	struct ss_verbs *v = f->backend;
	struct ss_completion c[16];
	bool ready_posted = false, done;
	int rc = ss_post_internal(f, false);

	if (rc < 0)
		return rc;
	for (;;) {
		int n = ss__verbs_drain(f, c, 16);

		for (int i = 0; i < n; i++)
			ss__backlog_push(f, &c[i]);
		if (n == 0) {
			/* a peer still connecting elsewhere may take seconds:
			 * not a core's worth of polling meanwhile */
			struct pollfd pfd = { .fd = v->channel->fd,
					      .events = POLLIN };

			poll(&pfd, 1, 1);
		}
		ss__verbs_cm_events(f);
		done = true;
		for (int p = 0; p < f->opts.world; p++) {
			struct ss_verbs_peer *vp = &v->peers[p];

			if (p == f->opts.rank || vp->given_up)
				continue;
			/*
			 * A peer that finished (its table read, "ready" both
			 * ways) and failed since, say by a first operation
			 * that the NIC refused, failed at run time: it is
			 * reported and retried like any later failure.
			 */
			if (f->peers[p].failed &&
			    !(vp->table_read && ready_posted &&
			      vp->ready_sent && vp->ready_seen)) {
				/* a partial connect goes on without it */
				if (f->opts.partial_connect) {
					vp->given_up = true;
					continue;
				}
				return ss_error_set(
					SS_EPEER, "it failed while connecting",
					NULL, "peer %d (%s)", p,
					f->peers[p].addr);
			}
			done &= vp->table_read &&
				(!ready_posted ||
				 (vp->ready_sent && vp->ready_seen));
		}
		if (done && ready_posted)
			break;
		if (done) {
			for (int p = 0; p < f->opts.world; p++)
				if (p != f->opts.rank &&
				    !v->peers[p].given_up &&
				    ss__table_read(&v->peer_tables[p],
						   f->n_regions,
						   &f->peers[p]) < 0)
					return ss_error_set(
						SS_EHANDSHAKE,
						"its region table is corrupt",
						NULL, "peer %d (%s)", p,
						f->peers[p].addr);
			rc = ss_post_internal(f, true);
			if (rc < 0)
				return rc;
			ready_posted = true;
		}
		if (ss_deadline_passed(deadline))
			return ss_error_set(
				-ETIMEDOUT, "a peer did not finish connecting",
				"see that rank's own messages",
				"verbs: connecting on %s", ss__verbs_where(v));
	}
	return 0;
}

/* Every peer up, but those a partial connect gave up on. */
static bool ss_all_up(struct ss_fabric *f)
{
	struct ss_verbs *v = f->backend;

	for (int p = 0; p < f->opts.world; p++)
		if (p != f->opts.rank && v->peers[p].state != SS_VP_UP &&
		    !v->peers[p].given_up)
			return false;
	return true;
}

/*
 * A partial connect leaves @p out: failed (retried by ss__verbs_reconnect
 * once connected, as any failed peer), skipped by the rest of the
 * connect.
 */
static void ss_give_up_on(struct ss_fabric *f, int p, const char *why)
{
	struct ss_verbs *v = f->backend;

	if (v->peers[p].state != SS_VP_UP)
		ss_cm_reset(f, p);
	v->peers[p].given_up = true;
	ss__peer_fail(f, p, "%s", why);
}

/* Whether a partial connect has a peer it did not give up on. */
static bool ss_any_left(struct ss_fabric *f)
{
	struct ss_verbs *v = f->backend;

	for (int p = 0; p < f->opts.world; p++)
		if (p != f->opts.rank && !v->peers[p].given_up)
			return true;
	return false;
}

/*
 * A partial connect at its timeout: give up on the peers not up and go
 * on with the others; false when none is up.
 */
static bool ss_give_up_on_missing(struct ss_fabric *f)
{
	struct ss_verbs *v = f->backend;
	char why[64];
	int up = 0;

	for (int p = 0; p < f->opts.world; p++)
		up += p != f->opts.rank && v->peers[p].state == SS_VP_UP;
	if (!f->opts.partial_connect || up == 0)
		return false;
	snprintf(why, sizeof(why),
		 "no answer within %u ms of our partial connect",
		 ss__partial_wait_ms(f->opts.timeout_ms));
	for (int p = 0; p < f->opts.world; p++)
		if (p != f->opts.rank && v->peers[p].state != SS_VP_UP &&
		    !v->peers[p].given_up)
			ss_give_up_on(f, p, why);
	return true;
}

static int ss_connect_timeout(struct ss_fabric *f)
{
	struct ss_verbs *v = f->backend;
	static const char *const states[] = { "no answer",
					      "resolving address",
					      "resolving route",
					      "connecting",
					      "up",
					      "disconnected" };
	char missing[200] = "";
	size_t len = 0;

	for (int p = 0; p < f->opts.world; p++)
		if (p != f->opts.rank && v->peers[p].state != SS_VP_UP &&
		    len < sizeof(missing))
			len += (size_t)snprintf(
				missing + len, sizeof(missing) - len,
				"%s%d (%s: %s)", len ? ", " : "", p,
				f->peers[p].addr, states[v->peers[p].state]);
	return ss_error_set(
		-ETIMEDOUT, v->cm_refusal[0] ? v->cm_refusal : "no answer",
		"start the ranks named, within the connect timeout, each with the same peer list; on RoCE, UDP port 4791 must pass between the hosts",
		"verbs: waiting %u ms on %s for peers %s", f->opts.timeout_ms,
		ss__verbs_where(v), missing);
}

/* The GID of our own address, RoCE v2 first: the loopback's destination. */
static int ss_own_gid(struct ss_fabric *f, union ibv_gid *gid)
{
	struct ss_verbs *v = f->backend;
	const struct sockaddr_in *in = (const void *)&v->local_addr;
	union ibv_gid want = { 0 };
	int best = -1;

	if (v->local_addr.ss_family == AF_INET) {
		want.raw[10] = want.raw[11] = 0xff; /* IPv4-mapped */
		memcpy(&want.raw[12], &in->sin_addr, 4);
	} else {
		memcpy(want.raw,
		       &((const struct sockaddr_in6 *)(const void *)&v
				 ->local_addr)
				->sin6_addr,
		       16);
	}
	for (int i = 0; i < v->port_attr.gid_tbl_len; i++) {
		struct ibv_gid_entry e;

		if (ibv_query_gid_ex(v->ctx, v->port, (uint32_t)i, &e, 0) ||
		    memcmp(e.gid.raw, want.raw, 16))
			continue;
		if (best < 0 || e.gid_type == IBV_GID_TYPE_ROCE_V2)
			best = i;
	}
	if (f->opts.gid_index >= 0)
		best = f->opts.gid_index;
	if (best < 0)
		best = 0;
	if (ibv_query_gid(v->ctx, v->port, best, gid))
		return ss_error_set(-errno, NULL, NULL,
				    "ibv_query_gid %d on %s", best,
				    ss__verbs_where(v));
	return best;
}

/* One loopback QP through INIT, RTR (to @dest) and RTS. */
static int ss_loopback_ready(struct ss_fabric *f, struct ibv_qp *qp,
			     uint32_t dest, int gid_index,
			     const union ibv_gid *gid)
{
	struct ss_verbs *v = f->backend;
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.port_num = v->port,
		.qp_access_flags =
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
			IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC,
	};

	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  IBV_QP_ACCESS_FLAGS))
		return -errno;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = v->port_attr.active_mtu;
	a.dest_qp_num = dest;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.dlid = v->port_attr.lid;
	a.ah_attr.port_num = v->port;
	if (v->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = *gid;
		a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
		a.ah_attr.grh.hop_limit = 1;
	}
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				  IBV_QP_MAX_DEST_RD_ATOMIC |
				  IBV_QP_MIN_RNR_TIMER))
		return -errno;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 6;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				  IBV_QP_MAX_QP_RD_ATOMIC))
		return -errno;
	return 0;
}

int ss__verbs_loopback(struct ss_fabric *f)
{
	struct ss_verbs *v = f->backend;
	int me = f->opts.rank, gid_index, rc;
	struct ss_verbs_peer *vp = &v->peers[me];
	struct ibv_qp_init_attr ia = {
		.send_cq = v->cq,
		.recv_cq = v->cq,
		.cap = { .max_send_wr = v->sq_limit,
			 .max_recv_wr = 1,
			 .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	union ibv_gid gid;

	gid_index = ss_own_gid(f, &gid);
	if (gid_index < 0)
		return gid_index;
	vp->qp = ibv_create_qp(v->pd, &ia);
	v->loop_qp = ibv_create_qp(v->pd, &ia);
	if (!vp->qp || !v->loop_qp)
		return ss_error_set(-errno, NULL, NULL,
				    "ibv_create_qp for the loopback on %s",
				    ss__verbs_where(v));
	rc = ss_loopback_ready(f, vp->qp, v->loop_qp->qp_num, gid_index, &gid);
	if (rc == 0)
		rc = ss_loopback_ready(f, v->loop_qp, vp->qp->qp_num, gid_index,
				       &gid);
	if (rc < 0)
		return ss_error_set(
			rc, NULL,
			"check the GID index (--gid-index, SS_GID_INDEX)",
			"the loopback queue pair (fetch-adds to ourselves) on %s, GID index %d",
			ss__verbs_where(v), gid_index);
	vp->state = SS_VP_UP;
	vp->rd_atom = 1;
	for (int i = 0; i < f->n_regions; i++)
		f->peers[me].regions[i].rkey =
			((struct ibv_mr *)f->regions[i].backend)->rkey;
	return 0;
}

int ss__verbs_connect(struct ss_fabric *f)
{
	int rc;
	struct ss_verbs *v = f->backend;
	uint64_t deadline = ss_deadline_ns(f->opts.timeout_ms),
		 partial = ss_deadline_ns(
			 ss__partial_wait_ms(f->opts.timeout_ms));
	struct ss__table *table = v->table;

	v->cm_fatal = 0;
	v->cm_refusal[0] = '\0';
	ss__table_make(f, NULL, table);
	for (int i = 0; i < f->n_regions; i++)
		table->entries[i].rkey =
			htobe32(((struct ibv_mr *)f->regions[i].backend)->rkey);
	if (f->opts.rank < f->opts.world - 1 &&
	    rdma_listen(v->listen, f->opts.world))
		return ss_error_set(-errno, NULL, NULL, "rdma_listen on %s",
				    f->addrs[f->opts.rank]);
	while (!ss_all_up(f)) {
		struct pollfd pfd = { .fd = v->channel->fd, .events = POLLIN };
		uint64_t now = ss_now_ns();

		for (int p = 0; p < f->opts.rank; p++) {
			int rc;

			ss_cm_stalled(f, p, now);
			if (v->peers[p].state != SS_VP_IDLE ||
			    v->peers[p].given_up || now < v->peers[p].retry_ns)
				continue;
			rc = ss_cm_start(f, p);
			if (rc < 0)
				return rc;
		}
		poll(&pfd, 1, 20);
		ss__verbs_cm_events(f);
		if (v->cm_fatal)
			return v->cm_fatal;
		for (int p = 0; p < f->opts.world; p++) {
			if (v->peers[p].state != SS_VP_DOWN)
				continue;
			/* a partial connect goes on without it */
			if (f->opts.partial_connect) {
				ss_give_up_on(f, p,
					      "it disconnected while we "
					      "connected");
				continue;
			}
			return ss_error_set(
				SS_EPEER, "it disconnected while connecting",
				"see that rank's own messages", "peer %d (%s)",
				p, f->peers[p].addr);
		}
		if (f->opts.partial_connect && ss_deadline_passed(partial) &&
		    ss_give_up_on_missing(f)) {
			/* the tables and "ready" of those up: time for them */
			deadline = ss_deadline_ns(f->opts.timeout_ms);
			break;
		}
		if (ss_deadline_passed(deadline))
			return ss_connect_timeout(f);
	}
	rc = ss_finish_connect(f, deadline);
	/* every peer given up on (each disconnected or failed on the way):
	 * no one to go on with */
	if (rc == 0 && f->opts.partial_connect && !ss_any_left(f))
		return ss_error_set(-ETIMEDOUT,
				    "every peer that answered disconnected or "
				    "failed while we connected",
				    "see their own messages",
				    "verbs: connecting on %s",
				    ss__verbs_where(v));
	return rc < 0 ? rc : ss__verbs_loopback(f);
}

/* A peer coming back: its table, then "ready" both ways, then it is up. */
static void ss_rejoin_step(struct ss_fabric *f, int p)
{
	struct ss_verbs *v = f->backend;
	struct ss_verbs_peer *vp = &v->peers[p];
	char how[96];

	if (vp->state != SS_VP_UP || ss_deadline_passed(vp->rejoin_deadline)) {
		ss_log_warn(
			"verbs: peer %d (%s) did not finish reconnecting (%s); retrying",
			p, f->peers[p].addr,
			vp->state != SS_VP_UP ? "disconnected" : "timed out");
		ss_cm_reset(f, p);
		return;
	}
	if (vp->rejoin == SS_RJ_TABLE && vp->table_read) {
		if (ss__table_read(&v->peer_tables[p], f->n_regions,
				   &f->peers[p]) < 0) {
			ss_log_warn(
				"verbs: peer %d (%s): its region table is corrupt",
				p, f->peers[p].addr);
			ss_cm_reset(f, p);
			return;
		}
		if (ss_post_internal_one(f, p, true) < 0) {
			ss_cm_fail(f, ss_last_error()->code);
			ss_cm_reset(f, p);
			return;
		}
		vp->rejoin = SS_RJ_READY;
	}
	if (vp->rejoin == SS_RJ_READY && vp->ready_sent && vp->ready_seen) {
		vp->rejoin = SS_RJ_NONE;
		snprintf(how, sizeof(how), "verbs: new connection, QP 0x%x",
			 vp->qp->qp_num);
		ss__peer_back(f, p, how);
	}
}

/*
 * Whether our port is up, looked at no more than every 50 ms (a failed
 * peer has the reconnection step run at every poll).  While it is down
 * nothing is sent to reconnect: a disconnect or a teardown sends a CM
 * message, and soft-RoCE puts its CM queue pair (QP1) in the error state
 * for good when it cannot send one, after which no connection to or from
 * this host is made again (rxe in Linux 6.1; perftest's rdma_cm mode
 * breaks the same way).  The port's own PORT_ERR event may come after
 * the error completions that failed the peers, so it is asked, and the
 * first step waits for the first retry (0.5 s) in any case.
 */
static bool ss_port_up(struct ss_verbs *v)
{
	uint64_t now = ss_now_ns();
	struct ibv_port_attr pa;

	if (now - v->port_seen_ns < 50 * 1000000ull)
		return !v->port_down;
	v->port_seen_ns = now;
	bool down = ibv_query_port(v->ctx, v->port, &pa) == 0 &&
		    pa.state != IBV_PORT_ACTIVE;
	if (v->port_down && !down)
		ss_log_info("verbs: %s is up again: reconnecting",
			    ss__verbs_where(v));
	v->port_down = down;
	return !down;
}

/*
 * Our loopback pair after an error completion (an operation to ourselves
 * that failed moves both QPs to the error state): back through RESET to
 * RTS, when the backoff says, so that fetch-adds to our own counter work
 * again (rank 0's chunk claims go through it).  No peer is involved.
 */
static void ss_loopback_reset(struct ss_fabric *f)
{
	struct ss_verbs *v = f->backend;
	struct ss_verbs_peer *vp = &v->peers[f->opts.rank];
	struct ibv_qp_attr reset = { .qp_state = IBV_QPS_RESET };
	union ibv_gid gid;
	int gid_index = ss_own_gid(f, &gid), rc = gid_index;

	if (rc >= 0 && (ibv_modify_qp(vp->qp, &reset, IBV_QP_STATE) ||
			ibv_modify_qp(v->loop_qp, &reset, IBV_QP_STATE)))
		rc = -errno;
	if (rc >= 0)
		rc = ss_loopback_ready(f, vp->qp, v->loop_qp->qp_num, gid_index,
				       &gid);
	if (rc >= 0)
		rc = ss_loopback_ready(f, v->loop_qp, vp->qp->qp_num, gid_index,
				       &gid);
	if (rc < 0) {
		ss_log_debug("verbs: resetting the loopback queue pairs: %s; "
			     "trying again",
			     ss_strerror(rc));
		return;
	}
	vp->state = SS_VP_UP;
	ss__peer_back(f, f->opts.rank, "its loopback queue pairs were reset");
}

void ss__verbs_reconnect(struct ss_fabric *f)
{
	struct ss_verbs *v = f->backend;

	if (!f->connected)
		return;
	if (f->peers[f->opts.rank].failed && ss__retry_due(f, f->opts.rank))
		ss_loopback_reset(f);
	for (int p = 0; p < f->opts.world; p++) {
		struct ss_verbs_peer *vp = &v->peers[p];

		if (p == f->opts.rank || !f->peers[p].failed)
			continue;
		if (!ss_port_up(v))
			return;
		if (vp->rejoin != SS_RJ_NONE) {
			ss_rejoin_step(f, p);
			continue;
		}
		if (p > f->opts.rank) {
			/*
			 * It connects to us.  Still up here but failed (an
			 * error completion): disconnect, so that it knows;
			 * not before the first retry is due (0.5 s), so that
			 * a link that went down has had its port marked down
			 * (its sends fail a moment before).
			 */
			if (vp->state == SS_VP_UP && vp->id &&
			    !vp->disconnect_sent &&
			    ss_now_ns() >= f->peers[p].retry_ns) {
				rdma_disconnect(vp->id);
				vp->disconnect_sent = true;
			}
			continue;
		}
		ss_cm_stalled(f, p, ss_now_ns());
		if (vp->state == SS_VP_ADDR || vp->state == SS_VP_ROUTE ||
		    vp->state == SS_VP_CONNECTING || !ss__retry_due(f, p))
			continue; /* an attempt in flight ends in an event */
		ss_log_debug("verbs: reconnecting to peer %d (%s)", p,
			     f->peers[p].addr);
		ss_cm_reset(f, p);
		if (ss_cm_start(f, p) < 0)
			ss_cm_fail(f, ss_last_error()->code);
	}
}
