// SPDX-License-Identifier: BSD-2-Clause
/*
 * A simulated node: T trainer actors, one shadow actor (shadow mode; in
 * the foreground the last trainer at the node's barrier runs the round),
 * and a NIC actor that answers one-sided READs without the node's CPU, as
 * an RDMA NIC does.  Writes are puts to the peer's inbox, whose permanent
 * receiver is its shadow: the transfer runs without the peer taking part,
 * and the shadow finds it there when it looks.
 *
 * With sharded tables (--tables sharded) each trainer also READs the rows
 * of its next batch from their owners before it computes this one (train's
 * --prefetch 1), waits for this batch's, and WRITEs the rows' gradients to
 * their owners' logs, which an applier actor on the owner steps (as
 * src/table/proxy.c does).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <simgrid/actor.h>
#include <simgrid/comm.h>
#include <simgrid/engine.h>
#include <simgrid/exec.h>
#include <simgrid/host.h>
#include <simgrid/mailbox.h>

#include "sim.h"

/* SimGrid's flops stand for CPU seconds: every host runs at 1 Gf/s. */
#define SIM_FLOPS 1e9
#define SIM_READ_REQ_BYTES 64

double sim_now(void)
{
	return simgrid_get_clock();
}

static double sim_uniform(struct sim_node *nd)
{
	/* xorshift64: reproducible with --seed, one stream a node */
	nd->rng ^= nd->rng << 13;
	nd->rng ^= nd->rng >> 7;
	nd->rng ^= nd->rng << 17;
	return ((double)(nd->rng >> 11) + 0.5) / 9007199254740992.0;
}

/*
 * A node's stream: splitmix64 of (seed, rank), so that neighbouring ranks'
 * xorshift streams do not start alike (seeds that differ in low bits
 * give xorshift64 the same first draws).
 */
static uint64_t sim_seed(unsigned seed, int rank)
{
	uint64_t z =
		((uint64_t)seed << 32 | (uint32_t)rank) + 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return z ? z : 1; /* xorshift's one bad state */
}

/* A log-normal factor of mean 1 and log-spread @sigma. */
static double sim_lognormal(struct sim_node *nd, double sigma)
{
	double u = sim_uniform(nd), v = sim_uniform(nd);
	double z = sqrt(-2 * log(u)) * cos(2 * M_PI * v);

	return sigma > 0 ? exp(sigma * z - sigma * sigma / 2) : 1.0;
}

bool sim_peer_failed(int peer)
{
	const struct sim_cfg *c = &sim.cfg;

	return sim.nodes[peer].lost && sim_now() >= c->lose_at_s + c->detect_s;
}

void sim_cpu(struct sim_node *nd, double seconds, bool kernel)
{
	if (seconds <= 0)
		return;
	nd->kernels_running += kernel;
	sg_actor_execute(seconds * SIM_FLOPS);
	nd->kernels_running -= kernel;
}

/*
 * Over shm with more threads than cores, a shadow's waiting poll yields
 * its core (sched_yield(), src/sync/messages.c) and takes no time from
 * the trainers; but a trainer does not yield, so a message is seen only
 * once its receiver (and before it, its sender) gets a core back at the
 * scheduler's next slice, with probability 1 - cores/threads.  Drawn as an
 * exponential of mean slice (1 - cores/threads), a wait for k peers lasts
 * as long as the last of k draws.  Without trainers the shadows yield to
 * each other at once: no delay, only their share of the cores.
 */
static double sim_sched_delay(struct sim_node *nd)
{
	const struct sim_cfg *c = &sim.cfg;
	int shadow = !c->foreground && c->algo != SIM_NONE;
	double threads = (double)c->nodes * (c->threads + shadow), mean;

	if (!c->plat.shared_host || !c->threads || threads <= c->cores ||
	    c->sched_slice_s <= 0)
		return 0;
	mean = c->sched_slice_s * (1 - c->cores / threads);
	return -mean * log(sim_uniform(nd));
}

static void sim_free_msg(void *m)
{
	free(m);
}

/*
 * A message to @box, @dst's inbox or NIC.  Data (@win: its sender's window) is in flight at most
 * SIM_WINDOW at a time from one sender, as a NIC streams its send queue:
 * a node's link carries a few flows, not N - 1, which would cost SimGrid's
 * bandwidth sharing N^2 flows an all-to-all phase for the same link time.
 * Without @win (a READ request) it goes and is forgotten.
 */
static void sim_put(struct sim_window *win, const struct sim_node *dst,
		    sg_mailbox_t box, int type, int from, uint32_t round,
		    double bytes, double wire_bytes, sg_mailbox_t reply_to)
{
	struct sim_msg *m;
	sg_comm_t comm;

	/* A powered-off host: the write retries and fails at the sender's
	 * NIC (the survivors learn it from --detect-s); nothing arrives. */
	if (dst->lost)
		return;
	m = malloc(sizeof(*m));
	if (!m) {
		fprintf(stderr, "ss-sim: out of memory\n");
		exit(1);
	}
	*m = (struct sim_msg){ type,
			       from,
			       round,
			       bytes,
			       sim_now() + sim_sched_delay(&sim.nodes[from]),
			       reply_to };
	if (!win) {
		sg_comm_detach(sg_mailbox_put_init(box, m, (long)wire_bytes),
			       sim_free_msg);
		return;
	}
	comm = win->comms[win->next];
	if (comm)
		sg_comm_wait(comm); /* a failure: the peer died with it */
	win->comms[win->next] = sg_mailbox_put_async(box, m, (long)wire_bytes);
	win->next = (win->next + 1) % SIM_WINDOW;
}

/* A message of @bytes that @sender's shadow or NIC put on its link. */
static void sim_count_sent(struct sim_node *sender, double bytes)
{
	sender->bytes_sent += (uint64_t)bytes;
	sender->msgs_sent++;
	if (sim_now() <= sim.cfg.duration_s)
		sender->bytes_measured += bytes;
}

/*
 * A WRITE_WITH_IMM of @bytes to @peer's inbox.  Posting costs the CPU
 * msg_cpu_s; over shm the poster also copies the bytes itself
 * (src/fabric/shm.c), so the copy is its CPU time and the wire is free.
 */
void sim_send(struct sim_node *nd, int peer, int type, double bytes)
{
	const struct sim_cfg *c = &sim.cfg;
	double cpu = c->msg_cpu_s;

	if (c->plat.shared_host)
		cpu += 2 * bytes / c->copy_bps;
	sim_cpu(nd, cpu, c->plat.shared_host);
	sim_put(&nd->sends, &sim.nodes[peer], sim.nodes[peer].inbox, type,
		nd->rank, nd->round, bytes, c->plat.shared_host ? 0 : bytes,
		NULL);
	sim_count_sent(nd, bytes);
}

/* A READ of @bytes from @peer: its NIC answers into our inbox. */
void sim_read(struct sim_node *nd, int peer, double bytes)
{
	const struct sim_cfg *c = &sim.cfg;

	if (c->plat.shared_host) { /* the reader copies, no NIC */
		sim_cpu(nd, c->msg_cpu_s + 2 * bytes / c->copy_bps, true);
		sim_put(&nd->sends, nd, nd->inbox, SIM_READ_REPLY, peer,
			nd->round, bytes, 0, NULL);
		sim_count_sent(&sim.nodes[peer], bytes); /* as its NIC */
		return;
	}
	sim_cpu(nd, c->msg_cpu_s, false);
	sim_put(NULL, &sim.nodes[peer], sim.nodes[peer].nic, SIM_READ_REQ,
		nd->rank, nd->round, bytes, SIM_READ_REQ_BYTES, NULL);
}

/* Sharded tables' traffic within the measured time: on the link, not in
 * a round's figures. */
static void sim_count_table(struct sim_node *sender, double bytes)
{
	if (sim_now() > sim.cfg.duration_s)
		return;
	sender->table_bytes += bytes;
	sender->bytes_measured += bytes;
}

/* A trainer's share of a batch's rows at each owner: batch x 26 rows
 * hashed evenly over the ranks. */
static double sim_rows_per_owner(void)
{
	return sim.cfg.batch * 26.0 / sim.cfg.nodes;
}

/* READs of the next batch's rows from every other owner, into @box. */
static void sim_post_rows(struct sim_node *nd, sg_mailbox_t box)
{
	const struct sim_cfg *c = &sim.cfg;
	double bytes = sim_rows_per_owner() * c->emb * 4;

	for (int p = 0; p < c->nodes; p++) {
		if (p == nd->rank || sim_peer_failed(p))
			continue;
		if (c->plat.shared_host) { /* the reader copies */
			sim_cpu(nd, c->msg_cpu_s + 2 * bytes / c->copy_bps,
				false);
			sim_put(NULL, nd, box, SIM_ROWS, p, 0, bytes, 0, NULL);
			sim_count_table(&sim.nodes[p], bytes);
			continue;
		}
		sim_cpu(nd, c->msg_cpu_s, false);
		sim_put(NULL, &sim.nodes[p], sim.nodes[p].nic, SIM_ROWS,
			nd->rank, 0, bytes, SIM_READ_REQ_BYTES, box);
	}
}

/* This batch's rows: a reply from every live owner, or the deadline. */
static void sim_await_rows(struct sim_node *nd, sg_mailbox_t box)
{
	const struct sim_cfg *c = &sim.cfg;
	double deadline = sim_now() + c->round_timeout_s;
	int want = 0;

	for (int p = 0; p < c->nodes; p++)
		want += p != nd->rank && !sim_peer_failed(p);
	for (int got = 0; got < want; got++) {
		void *data;
		sg_comm_t comm = sg_mailbox_get_async(box, &data);

		if (sg_comm_wait_for(comm, deadline - sim_now()) != SG_OK)
			return; /* an owner died: train's lookup gives up too */
		free(data);
	}
}

/* The batch's row gradients (all distinct: an upper bound; an entry is
 * a 4-byte slot, 4 of padding and the row's floats) to their owners. */
static void sim_send_grads(struct sim_node *nd, struct sim_window *win)
{
	const struct sim_cfg *c = &sim.cfg;
	double bytes = sim_rows_per_owner() * (8.0 + c->emb * 4);

	for (int p = 0; p < c->nodes; p++) {
		if (p == nd->rank || sim_peer_failed(p))
			continue;
		sim_cpu(nd,
			c->msg_cpu_s + (c->plat.shared_host ?
						2 * bytes / c->copy_bps :
						0),
			false);
		sim_put(win, &sim.nodes[p], sim.nodes[p].log, SIM_GRADS,
			nd->rank, 0, bytes, c->plat.shared_host ? 0 : bytes,
			NULL);
		sim_count_table(nd, bytes);
	}
}

/* Count a message that came for a later round than ours, for then. */
static void sim_keep_early(struct sim_node *nd, const struct sim_msg *m)
{
	struct sim_early *e = &nd->early[m->type][m->round % 4];

	if (e->round != m->round) {
		e->round = m->round;
		e->count = 0;
	}
	e->count++;
}

static int sim_take_early(struct sim_node *nd, int type)
{
	struct sim_early *e = &nd->early[type][nd->round % 4];
	int n = 0;

	if (e->round == nd->round) {
		n = e->count;
		e->count = 0;
	}
	return n;
}

/*
 * Wait until @want messages of @type for this round have come, or until
 * @deadline; returns how many came.  Messages of older rounds are dropped
 * (their round left them out), later ones kept for their round.
 */
int sim_await(struct sim_node *nd, int type, int want, double deadline)
{
	int got = sim_take_early(nd, type);
	double seen = 0; /* when the last counted message is seen */

	while (got < want) {
		double left = deadline - sim_now();
		struct sim_msg *m;
		void *data;
		sg_comm_t comm;

		if (left <= 0)
			break;
		comm = sg_mailbox_get_async(nd->inbox, &data);
		if (sg_comm_wait_for(comm, left) != SG_OK)
			break;
		m = data;
		if (m->type == type && m->round == nd->round) {
			got++;
			if (m->ready_at > seen)
				seen = m->ready_at;
		} else if ((int32_t)(m->round - nd->round) >= 0) {
			sim_keep_early(nd, m);
		}
		free(m);
	}
	if (seen > sim_now())
		sg_actor_sleep_until(seen < deadline ? seen : deadline);
	if (sim_now() <= sim.cfg.duration_s)
		nd->left_out += (uint64_t)(want - got);
	return got;
}

/* A round done from @t0 to now: counted when within the measured time;
 * rank 0's --rounds-th ends that time, once it spans --min-steps trainer
 * steps (for the examples/s). */
void sim_round_done(struct sim_node *nd, double t0)
{
	struct sim_cfg *c = &sim.cfg;

	if (sim_now() > c->duration_s)
		return;
	nd->rounds++;
	sim_record_round(sim_now() - t0);
	if (c->end_rounds && nd->rank == 0 &&
	    nd->rounds >= (uint64_t)c->end_rounds &&
	    sim_now() >= c->min_steps * c->step_s)
		c->duration_s = sim_now();
}

void sim_record_round(double seconds)
{
	/* 100 buckets a decade from 1 us: 2.3 % wide */
	int b = seconds <= 1e-6 ? 0 : (int)(log10(seconds / 1e-6) * 100);

	if (b >= SIM_HIST)
		b = SIM_HIST - 1;
	sim.round_hist[b]++;
	sim.round_count++;
}

/* The NIC: answers READ requests from the node's memory, no CPU. */
static void sim_nic(int argc, char **argv)
{
	struct sim_node *nd = &sim.nodes[atoi(argv[argc - 1])];

	for (;;) {
		struct sim_msg *m = sg_mailbox_get(nd->nic);
		bool rows = m->type == SIM_ROWS;

		sim_put(&nd->nic_sends, &sim.nodes[m->from],
			m->reply_to ? m->reply_to : sim.nodes[m->from].inbox,
			rows ? SIM_ROWS : SIM_READ_REPLY, nd->rank, m->round,
			m->bytes, m->bytes, NULL);
		if (rows)
			sim_count_table(nd, m->bytes);
		else
			sim_count_sent(nd, m->bytes);
		free(m);
	}
}

/* Sharded tables: the owner steps the rows whose gradients came (Adagrad
 * reads and writes the row and its sums, and reads the gradient). */
static void sim_applier(int argc, char **argv)
{
	struct sim_node *nd = &sim.nodes[atoi(argv[argc - 1])];

	sg_mailbox_set_receiver(sg_mailbox_get_name(nd->log));
	for (;;) {
		void *data;
		sg_comm_t comm = sg_mailbox_get_async(nd->log, &data);
		struct sim_msg *m;

		if (sg_comm_wait(comm) != SG_OK)
			continue; /* its trainer ended with it in flight */
		m = data;
		sim_cpu(nd, 5 * m->bytes / sim.cfg.kernel_bps, false);
		free(m);
	}
}

static void sim_shadow(int argc, char **argv)
{
	struct sim_node *nd = &sim.nodes[atoi(argv[argc - 1])];

	const struct sim_cfg *c = &sim.cfg;

	sg_mailbox_set_receiver(sg_mailbox_get_name(nd->inbox));
	while (sim_now() < c->duration_s) {
		double t0 = sim_now();

		sim_round(nd);
		sim_round_done(nd, t0);
		if (c->max_rounds_per_s > 0) /* train --max-rounds-per-s */
			sg_actor_sleep_until((double)nd->started /
					     c->max_rounds_per_s);
	}
}

static double sim_step_time(struct sim_node *nd)
{
	const struct sim_cfg *c = &sim.cfg;
	double t = c->step_s * sim_lognormal(nd, c->step_sigma);

	if (nd->slow)
		t *= c->slow_factor;
	if (nd->kernels_running)
		t *= 1 + c->interference;
	return t;
}

/*
 * The foreground: every K steps the node's trainers meet; the last to come
 * runs the round while the others wait at the barrier (actors do not
 * preempt each other, so the count needs no lock).  False once the job is
 * over.
 */
static bool sim_foreground_round(struct sim_node *nd)
{
	if (++nd->fg_arrived == sim.cfg.threads) {
		double t0 = sim_now();

		nd->fg_arrived = 0;
		sim_round(nd);
		sim_round_done(nd, t0);
		nd->stop = sim_now() >= sim.cfg.duration_s;
	}
	sg_barrier_wait(nd->barrier);
	return !nd->stop;
}

static void sim_trainer(int argc, char **argv)
{
	struct sim_node *nd = &sim.nodes[atoi(argv[argc - 1])];
	const struct sim_cfg *c = &sim.cfg;
	struct sim_window grads = { 0 };
	sg_mailbox_t rows = NULL;
	long mine = 0;

	if (c->foreground) /* the round runs on one of us */
		sg_mailbox_set_receiver(sg_mailbox_get_name(nd->inbox));
	if (c->tables_sharded) { /* our own box for rows, filled unattended */
		char name[48];

		snprintf(name, sizeof(name), "rows-%s",
			 sg_actor_get_name(sg_actor_self()));
		rows = sg_mailbox_by_name(name);
		sg_mailbox_set_receiver(name);
		sim_post_rows(nd, rows);
	}
	for (;;) {
		double t0 = sim_now(), t1;

		if (!c->foreground && t0 >= c->duration_s)
			break;
		if (rows) { /* this batch's rows in; the next one's asked */
			sim_await_rows(nd, rows);
			sim_post_rows(nd, rows);
		}
		sim_cpu(nd, sim_step_time(nd), false);
		if (rows)
			sim_send_grads(nd, &grads);
		/* a step across the end counts for its part before it */
		t1 = sim_now();
		if (t1 <= c->duration_s)
			nd->steps += 1;
		else if (t0 < c->duration_s)
			nd->steps += (c->duration_s - t0) / (t1 - t0);
		if (c->foreground && ++mine % c->sync_every == 0 &&
		    !sim_foreground_round(nd))
			break;
	}
}

/* Powers the lost node's host off at its time, as a host that dies. */
static void sim_killer(int argc, char **argv)
{
	struct sim_node *nd = &sim.nodes[sim.cfg.lose_node];

	(void)argc;
	(void)argv;
	sg_actor_sleep_until(sim.cfg.lose_at_s);
	nd->lost = true;
	if (sim.cfg.verbose)
		fprintf(stderr, "ss-sim: node %d powered off at %.3f s\n",
			nd->rank, sim_now());
	sg_host_turn_off(nd->host);
}

static void sim_spawn(const char *what, int rank, sg_host_t host,
		      void (*code)(int, char **), bool daemon)
{
	char name[48], arg[16];
	const char *argv[] = { name, arg };
	sg_actor_t a;

	snprintf(name, sizeof(name), "%s-%d", what, rank);
	snprintf(arg, sizeof(arg), "%d", rank);
	a = sg_actor_init(name, host);
	sg_actor_start(a, code, 2, (char **)argv);
	if (daemon)
		sg_actor_daemonize(a);
}

void sim_start_nodes(void)
{
	const struct sim_cfg *c = &sim.cfg;
	sg_host_t *hosts = sg_host_list();

	for (int r = 0; r < c->nodes; r++) {
		struct sim_node *nd = &sim.nodes[r];
		char name[32];

		nd->rank = r;
		nd->host = c->plat.shared_host ? hosts[0] : hosts[r];
		snprintf(name, sizeof(name), "inbox-%d", r);
		nd->inbox = sg_mailbox_by_name(name);
		snprintf(name, sizeof(name), "nic-%d", r);
		nd->nic = sg_mailbox_by_name(name);
		snprintf(name, sizeof(name), "log-%d", r);
		nd->log = sg_mailbox_by_name(name);
		nd->rng = sim_seed(c->seed, r);
		nd->slow = sim_uniform(nd) < c->slow_frac;
		if (c->foreground)
			nd->barrier = sg_barrier_init((unsigned)c->threads);
		for (int t = 0; t < c->threads; t++) {
			char what[32];

			snprintf(what, sizeof(what), "trainer%d", t);
			sim_spawn(what, r, nd->host, sim_trainer, false);
		}
		if (c->tables_sharded)
			sim_spawn("applier", r, nd->host, sim_applier, true);
		if (!c->foreground && c->algo != SIM_NONE)
			sim_spawn("shadow", r, nd->host, sim_shadow, false);
		if (!c->plat.shared_host)
			sim_spawn("nic", r, nd->host, sim_nic, true);
	}
	if (c->lose_node >= 0)
		sim_spawn("killer", c->lose_node, hosts[0], sim_killer, true);
	free(hosts);
}
