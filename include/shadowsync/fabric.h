/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * ShadowSync fabric layer: how a rank exposes memory to its peers and reads
 * and writes theirs, one-sided.
 *
 * Two backends behind one API:
 *  - verbs: RDMA over InfiniBand or RoCE (libibverbs + librdmacm), one RC
 *    queue pair per pair of ranks;
 *  - shm: processes of one host, regions in POSIX shared memory, READ and
 *    WRITE as copies, immediates queued after their data.
 *
 * Life of an endpoint:
 *   ss_fabric_open()        rank r of N, its address and its peers'
 *   ss_fabric_alloc()       every region, before connecting: the handshake
 *                           carries their descriptors
 *   ss_fabric_connect()     every pair once, either side may start first
 *   ss_fabric_read/write/write_imm() and ss_fabric_poll()
 *   ss_fabric_close()       both sides disconnect
 *
 * Regions are numbered in the order they are allocated, and the numbers
 * must mean the same on every rank: remote operations name the peer's
 * region by its number.  Every wait is bounded by the endpoint's timeout.
 *
 * Threads: an endpoint has no lock inside.  One thread at a time may call
 * the functions that take it (allocation, connection, the operations,
 * polling, progress, the peers' state, close): the thread that drives it,
 * or threads that hand it over under a lock of their own, as the sync
 * layer does (an endpoint given to ss_sync_create() or opened by
 * ss_table_open() is theirs until they are destroyed).  The exceptions
 * read what is fixed once set, from any thread at any time:
 * ss_fabric_rank(), ss_fabric_world(), ss_fabric_transport(),
 * ss_fabric_send_depth(), and ss_region_ptr(), ss_region_len() and
 * ss_region_index() of an allocated region.  Different endpoints are
 * independent, each in its own thread if need be.  The functions that take no endpoint (options, names,
 * parsers, the peer lists, ss_launcher_rank(),
 * ss_fabric_verbs_available()) may run in any thread at once.
 */
#ifndef SHADOWSYNC_FABRIC_H
#define SHADOWSYNC_FABRIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "shadowsync/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Ranks a job may have.  The handshake carries 32-bit ranks; what grows
 * with the world is a few words a peer (a bit a peer in a barrier's sets).
 */
#define SS_FABRIC_MAX_PEERS 65536
#define SS_FABRIC_MAX_REGIONS 16

enum ss_transport {
	SS_TRANSPORT_AUTO, /* verbs when a device is active, else shm */
	SS_TRANSPORT_VERBS,
	SS_TRANSPORT_SHM,
};

/* What peers may do to a region.  Local access is always allowed. */
enum ss_access {
	SS_ACCESS_LOCAL = 0,
	SS_ACCESS_REMOTE_READ = 1 << 0,
	SS_ACCESS_REMOTE_WRITE = 1 << 1,
	SS_ACCESS_REMOTE_ATOMIC = 1 << 2, /* 64-bit fetch-and-add */
};

/* Fill with ss_fabric_options_init() first (base.h, "Option structs"). */
struct ss_fabric_options {
	size_t size; /* sizeof the caller's struct, set by the init */
	enum ss_transport transport;
	int rank; /* this rank, 0 <= rank < world */
	int world; /* number of ranks */
	/* "host:port" of every rank; addrs[rank] is where this one listens */
	const char *const *addrs;
	uint64_t job_key; /* peers with another key are refused */
	uint64_t layout_hash; /* peers with another model layout are refused */
	unsigned timeout_ms; /* connecting, and every wait; 0 = 30000 */
	/* verbs only */
	const char *device; /* NULL: $SS_DEVICE, else first active port */
	int gid_index; /* -1: $SS_GID_INDEX, else chosen by rdma_cm */
	size_t max_message; /* split operations above this; 0: device's */
	/*
	 * Connect to the peers that answer, and mark the others failed
	 * (retried in the background, as a peer that fails later, until one
	 * comes): for a process that rejoins a running job, where a peer may
	 * be dead for good.  It gives up on those still missing 7 s after it
	 * began (the timeout, if shorter) once one peer is up, else waits
	 * the timeout; ss_fabric_connect() then fails only when no peer
	 * answered.  false: every peer, or -ETIMEDOUT.
	 */
	bool partial_connect;
};

/* ss_fabric_options_init() - defaults: auto transport, gid_index -1. */
#define ss_fabric_options_init(opts) \
	ss_fabric_options_init_size((opts), sizeof(*(opts)))
void ss_fabric_options_init_size(struct ss_fabric_options *opts, size_t size);

/*
 * ss_transport_parse() - "auto", "verbs" or "shm".  Returns 0 or SS_EUSAGE
 * with the accepted values in the detail.
 */
int ss_transport_parse(const char *option, const char *text,
		       enum ss_transport *transport);

/* ss_transport_name() - "auto", "verbs" or "shm". */
const char *ss_transport_name(enum ss_transport transport);

/*
 * ss_fabric_verbs_available() - whether an RDMA port is active on this
 * host, which is what SS_TRANSPORT_AUTO goes by.
 */
bool ss_fabric_verbs_available(void);

struct ss_fabric;
struct ss_region;

/*
 * ss_fabric_open() - create the endpoint of @opts->rank.
 *
 * With SS_TRANSPORT_AUTO picks verbs when an RDMA port is active, else shm,
 * and logs the choice.  Returns 0; SS_EUSAGE for bad options or addresses;
 * -EINVAL for @opts of a size this library does not know (base.h);
 * SS_ENODEVICE when verbs is asked for and no usable device is found;
 * -errno from the system, with a detail naming the call and a hint.
 */
int ss_fabric_open(struct ss_fabric **fabric,
		   const struct ss_fabric_options *opts);

/*
 * ss_fabric_close() - disconnect from every peer (waiting at most the
 * timeout for each to answer), release every region, clear the pointer.
 */
void ss_fabric_close(struct ss_fabric **fabric);

/* ss_fabric_transport() - the backend in use: verbs or shm. */
enum ss_transport ss_fabric_transport(const struct ss_fabric *fabric);

/*
 * ss_fabric_alloc() - allocate and register a region of @len bytes that
 * peers may access as @access says.  Page-aligned, length rounded up to the
 * page size, zeroed.  Only before ss_fabric_connect().
 *
 * Returns 0 and the region (owned by the fabric; see ss_region_ptr());
 * -ENOMEM when the memory lock limit is too low (the detail says how to
 * raise it) or memory is short; -EINVAL after connecting or past
 * SS_FABRIC_MAX_REGIONS; -errno from registration.
 */
int ss_fabric_alloc(struct ss_fabric *fabric, size_t len, unsigned access,
		    struct ss_region **region);

/*
 * ss_fabric_set_post_wait() - how long a WRITE with immediate waits for
 * room in the peer's queue of immediates over shm: @ms, at most the
 * fabric's timeout (the default).  With 0 it fails at once with -EAGAIN,
 * the peer still counted alive, for a thread that must never block (a
 * proxy that also applies and serves rows) to post it again later.  Over
 * verbs the NIC's own retry never holds a post, and this changes
 * nothing.  From the thread that posts.
 */
void ss_fabric_set_post_wait(struct ss_fabric *fabric, unsigned ms);

/*
 * ss_fabric_set_placement() - call @place(@ctx, ptr, len) on the memory of
 * every region allocated from now on, once it is mapped and before it is
 * touched or registered: a NUMA binding set there decides where every
 * page lands (registering pins pages where they are).  Before
 * ss_fabric_alloc().
 */
void ss_fabric_set_placement(struct ss_fabric *fabric,
			     void (*place)(void *ctx, void *ptr, size_t len),
			     void *ctx);

/* ss_region_ptr() - the region's memory in this process. */
void *ss_region_ptr(const struct ss_region *region);

/* ss_region_len() - its length (rounded up to the page size). */
size_t ss_region_len(const struct ss_region *region);

/* ss_region_index() - its number, the same on every rank. */
int ss_region_index(const struct ss_region *region);

/*
 * ss_fabric_connect() - connect to every peer and exchange handshakes.
 *
 * Lower ranks accept, higher ranks connect and retry until the timeout, so
 * ranks may start in any order; a rank restarted while the others run
 * connects the same way (see ss_fabric_peer_ok).  It returns once every peer has connected
 * to this rank too, so that operations may start at once on both sides.  A peer whose handshake differs (magic,
 * version, world size, job key, layout hash, region count) is refused and
 * the detail says what differed.  With @opts->partial_connect, the peers
 * missing once it gives up are failed instead, each with a warning, and
 * the rest connected.  Returns 0; -ETIMEDOUT naming the peers still missing
 * (with partial_connect: all of them); SS_EHANDSHAKE; -errno.
 */
int ss_fabric_connect(struct ss_fabric *fabric);

/* ss_fabric_rank() / ss_fabric_world() - as opened. */
int ss_fabric_rank(const struct ss_fabric *fabric);
int ss_fabric_world(const struct ss_fabric *fabric);

/*
 * ss_fabric_peer_ok() - false once a peer failed or disconnected, until it
 * is back.
 *
 * A failed peer is reported once (its rank and address), and retried in
 * the background by ss_fabric_poll() and ss_fabric_progress(), 500 ms
 * doubling to 5 s apart: a new process of that rank (same job key, layout
 * and regions) connects again with a fresh handshake, and the peer is back
 * (logged) with its new regions.  Nothing of the old connection survives:
 * its operations completed with SS_EPEER, its immediates are dropped.
 */
bool ss_fabric_peer_ok(const struct ss_fabric *fabric, int peer);

/*
 * ss_fabric_fail_peer() - mark @peer failed now, with @why in the report:
 * for a caller whose operations to it have stayed unanswered far longer
 * than a live peer takes (a host that died, or a link that is down,
 * answers nothing and sends no disconnect).  Its connection is torn down
 * (the peer, if it lives, finds its side failed too), what is in flight
 * to it completes with SS_EPEER, and it is retried in the background as
 * any failed peer.
 */
void ss_fabric_fail_peer(struct ss_fabric *fabric, int peer, const char *why);

/*
 * ss_fabric_peer_epoch() - how many times @peer has connected: 1 after
 * ss_fabric_connect(), one more each time it comes back; 0 before.  A
 * changed epoch means a new connection: another process, whose memory
 * holds nothing of the old one's, or the same one after a link was lost
 * or either side called ss_fabric_fail_peer() (both sides count it).
 */
uint32_t ss_fabric_peer_epoch(const struct ss_fabric *fabric, int peer);

/*
 * ss_fabric_progress() - the endpoint's slow background work now, without
 * waiting and without taking completions: notice failed peers, and retry
 * the failed ones whose backoff is due.  ss_fabric_poll() does it on its
 * own as it waits; call this when not polling for a while.
 */
void ss_fabric_progress(struct ss_fabric *fabric);

/*
 * ss_fabric_send_depth() - how many pieces (a READ list's rows, a long
 * operation's messages) may be in flight to one peer before posting to it
 * waits for earlier ones to complete; 0: no such limit (shm).  Fixed once
 * connected.  Over verbs 256, fewer in a job so large that the device's
 * completion queue cannot hold that many for every peer.
 */
uint32_t ss_fabric_send_depth(const struct ss_fabric *fabric);

/* ss_fabric_peer_len() - length of region @index at @peer (0 if none). */
size_t ss_fabric_peer_len(const struct ss_fabric *fabric, int peer, int index);

/*
 * One-sided operations.  Each moves @len bytes between @local at
 * @local_off and region @remote_index of @peer at @remote_off, of any length
 * (split at the device's maximum message size), and later yields exactly
 * one completion carrying @wr_id.  A WRITE_WITH_IMM also yields, at the
 * peer, a SS_OP_RECV_IMM completion with @imm once all its data is in place.
 *
 * Return 0 when posted; -EINVAL for a range outside either region, a bad
 * peer, or @imm == SS_IMM_RESERVED; SS_EPEER when the peer has failed;
 * -ETIMEDOUT when the send queue stayed full for the timeout; -errno from
 * posting.  A remote refusal (the region lacks the right) arrives as a
 * completion with SS_EREMOTE; over verbs the NIC also moves the queue pair
 * to the error state, so the peer is failed from then on (over shm not).
 */
int ss_fabric_read(struct ss_fabric *fabric, int peer, struct ss_region *local,
		   size_t local_off, int remote_index, size_t remote_off,
		   size_t len, uint64_t wr_id);
int ss_fabric_write(struct ss_fabric *fabric, int peer, struct ss_region *local,
		    size_t local_off, int remote_index, size_t remote_off,
		    size_t len, uint64_t wr_id);
/*
 * ss_fabric_read_list() - READ @n pieces of region @remote_index of @peer
 * into @local, posted together: over verbs one ibv_post_send of @n work
 * requests, one doorbell, of which only the last asks for a completion
 * (perftest's --post_list).  It completes once, as one READ with @wr_id,
 * when every piece is in; a failure fails the whole list.  @n is 1 to
 * SS_FABRIC_MAX_LIST; each piece at most the device's largest message.
 * Returns as ss_fabric_read().
 */
struct ss_fabric_piece {
	size_t local_off, remote_off, len;
};
#define SS_FABRIC_MAX_LIST 64
int ss_fabric_read_list(struct ss_fabric *fabric, int peer,
			struct ss_region *local, int remote_index,
			const struct ss_fabric_piece *pieces, int n,
			uint64_t wr_id);

/* The one immediate value the fabric keeps for itself. */
#define SS_IMM_RESERVED 0xffffffffu

int ss_fabric_write_imm(struct ss_fabric *fabric, int peer,
			struct ss_region *local, size_t local_off,
			int remote_index, size_t remote_off, size_t len,
			uint32_t imm, uint64_t wr_id);

/*
 * ss_fabric_fetch_add() - add @add to the 64-bit word at @remote_off of
 * region @remote_index of @peer, atomically against every other fetch-add
 * on it, and put the value it held before into the 8 bytes of @local at
 * @local_off.  Both offsets 8-byte aligned; the region needs
 * SS_ACCESS_REMOTE_ATOMIC.  @peer may be this rank: over verbs the add
 * then goes through the NIC too (a loopback queue pair), because a NIC's
 * atomics need not be atomic against the CPU's (IBV_ATOMIC_HCA).  So a
 * word that fetch-adds use must be touched by nothing else once
 * connected.  Some NICs put the old value in big-endian on little-endian
 * hosts (Connect-IB); a caller whose values stay below 2^32 can tell.
 * Returns as the other operations.
 */
int ss_fabric_fetch_add(struct ss_fabric *fabric, int peer,
			struct ss_region *local, size_t local_off,
			int remote_index, size_t remote_off, uint64_t add,
			uint64_t wr_id);

enum ss_op {
	SS_OP_READ,
	SS_OP_WRITE,
	SS_OP_WRITE_IMM,
	SS_OP_RECV_IMM, /* a peer's WRITE_WITH_IMM arrived */
	SS_OP_FETCH_ADD,
};

struct ss_completion {
	uint64_t wr_id; /* as posted; 0 for SS_OP_RECV_IMM */
	int peer;
	enum ss_op op;
	int status; /* 0, SS_EREMOTE, SS_EPEER */
	uint32_t imm; /* SS_OP_RECV_IMM only */
};

/*
 * ss_fabric_poll() - collect up to @max completions, waiting at most
 * @timeout_ms for the first (0: do not wait).
 *
 * Also notices failed peers (async events, disconnects, dead processes) and
 * marks them.  Returns the number of completions (> 0), 0 when @timeout_ms
 * is 0 and none is ready, -ETIMEDOUT when none came in time.
 */
int ss_fabric_poll(struct ss_fabric *fabric, struct ss_completion *out, int max,
		   unsigned timeout_ms);

/*
 * Who the peers are.
 *
 * ss_nodelist_expand() - Slurm's compact host list ("node[01-04,07],gpu5")
 * into @n host names (zero padding kept).  Free with ss_strings_free().
 * Returns 0, SS_EUSAGE naming the bad item, or -ENOMEM.
 */
int ss_nodelist_expand(const char *nodelist, char ***hosts, int *n);

/*
 * ss_hostfile_read() - one "host[:port]" a line ('#' comments, blank lines
 * skipped; @port when a line has none) into @n "host:port" strings.
 * Returns 0, -errno naming the file, or SS_EUSAGE naming file:line.
 */
int ss_hostfile_read(const char *path, int port, char ***addrs, int *n);

/* ss_strings_free() - free what the two above return; clears the pointer. */
void ss_strings_free(char ***list, int n);

/*
 * ss_launcher_rank() - this process's rank and the world size from the
 * launcher's environment: `shadowsync launch` (SS_RANK, SS_WORLD), Slurm
 * (SLURM_PROCID, SLURM_NTASKS), Open MPI (OMPI_COMM_WORLD_RANK, _SIZE),
 * PMI (PMI_RANK, PMI_SIZE) or torchrun (RANK, WORLD_SIZE), the first set
 * in that order, torchrun's first where it set TORCHELASTIC_RUN_ID (it
 * runs inside the others: srun torchrun); @source names which.
 * Returns 0, or SS_EUSAGE when none is set or they are malformed.
 */
int ss_launcher_rank(int *rank, int *world, const char **source);

/*
 * A job's ranks, found as `shadowsync train` finds them: the addresses
 * from @peers ("host[:port],..." in rank order; a host without a port
 * takes @port), else @hostfile (ss_hostfile_read), else the SS_PEERS that
 * `shadowsync launch` gave its ranks, else Slurm's node list
 * under srun, else, when the launcher says all its tasks run on this host
 * (torchrun's LOCAL_WORLD_SIZE, Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE),
 * 127.0.0.1:@port + r, else a world of one; this process's rank from
 * @rank, else the launcher (ss_launcher_rank), else 0.
 * Fill with ss_job_request_init() first (base.h, "Option structs").
 */
struct ss_job_request {
	size_t size; /* sizeof the caller's struct, set by the init */
	const char *peers; /* NULL: none */
	const char *hostfile; /* NULL: none */
	int port; /* default 7000 */
	int rank; /* -1 (default): the launcher's */
	/* what errors call @peers and @rank; NULL: "--peers", "--rank" */
	const char *peers_name, *rank_name;
};

#define ss_job_request_init(req) ss_job_request_init_size((req), sizeof(*(req)))
void ss_job_request_init_size(struct ss_job_request *req, size_t size);

struct ss_job;

/*
 * ss_job_find() - the job's addresses and this process's rank, as above.
 * Returns 0; SS_EUSAGE naming the entry, file line or variable at fault
 * (an empty entry, a launcher's task count other than the peers', a rank
 * not among them); -errno reading @hostfile; -EINVAL for @req of a size
 * this library does not know; -ENOMEM.  Any thread.
 */
int ss_job_find(struct ss_job **job, const struct ss_job_request *req);

/* ss_job_free() - release it; clears the pointer.  NULL is fine. */
void ss_job_free(struct ss_job **job);

/* ss_job_rank(), ss_job_world() - this process's rank, the ranks. */
int ss_job_rank(const struct ss_job *job);
int ss_job_world(const struct ss_job *job);

/*
 * ss_job_addrs_of() - world "host:port" strings, in rank order: what
 * ss_fabric_options.addrs takes; valid until ss_job_free().
 */
const char *const *ss_job_addrs_of(const struct ss_job *job);

/*
 * ss_job_source() - who gave the rank: @req->rank_name (the caller's
 * string: valid while it is), the launcher's name ("shadowsync launch",
 * "Slurm", "Open MPI", "PMI", "torchrun"), or NULL (a world of one or a
 * list without a rank: rank 0).
 */
const char *ss_job_source(const struct ss_job *job);

/*
 * Shared memory the shm backend leaves in /dev/shm.  Each rank's objects
 * are named after its address (/ss-ADDR-claim, -ctl, -r0, -r1, ...); the
 * claim object is locked while its owner lives, so what can be locked was
 * left by a rank that is gone (killed, crashed).
 */
struct ss_shm_leftover {
	char stem[128]; /* the address as it appears in the names */
	int32_t pid; /* the process that made them; 0 when unknown */
	uint64_t job_key; /* from its control object; 0 when it had none */
	int objects; /* how many */
	uint64_t bytes; /* memory they hold */
};

/*
 * ss_fabric_device_of() - the name of the RDMA device whose interface has
 * the address of @addr ("host:port"; the port is not bound), into @name of
 * @size bytes: the device a verbs endpoint at @addr uses, found before
 * opening one (to place threads near it).  Returns 0; SS_ENODEVICE when
 * no RDMA device has the address; SS_EUSAGE for a bad address; -errno
 * (no RDMA on the host).  Any thread.
 */
int ss_fabric_device_of(const char *addr, char *name, size_t size);

/*
 * ss_fabric_shm_clean() - find the leftovers of ranks that are gone: all
 * of them, or those of address @addr (NULL: any) and of job @job_key (0:
 * any); call @fn (may be NULL) with each, and remove them when @remove.
 * With @addr, also the leftovers that the same process (the pid of
 * @addr's control object) made at its other addresses, unless of another
 * job: a rank's tables' endpoint, at its port + the world size; @fn gets
 * them after @addr's.  The objects of a live rank are never touched.
 * Returns how many leftovers were found, or -errno.  Any thread; racing
 * cleaners are safe (each leftover is removed under its claim's lock).
 */
int ss_fabric_shm_clean(const char *addr, uint64_t job_key, bool remove,
			void (*fn)(void *ctx,
				   const struct ss_shm_leftover *leftover),
			void *ctx);

/*
 * ss_fabric_shm_claim() - take the address @addr (of rank @rank, for the
 * message) over shm for this process, as ss_fabric_open() does: a lock
 * the kernel drops when the holder ends.  A launcher claims all of its
 * ranks' addresses in rank order before it starts any, so that of two
 * jobs started together on the same addresses one runs and the other is
 * refused; it passes each claim to its rank as the descriptor named by
 * SS_SHM_CLAIM_FD (without FD_CLOEXEC), which ss_fabric_open() adopts.
 * Returns 0 and the descriptor in @claim_fd (close it to let go), or
 * -EADDRINUSE naming the live holder.  Any thread.
 */
int ss_fabric_shm_claim(const char *addr, int rank, int *claim_fd);

/*
 * ss_fabric_remove_names() - remove the /dev/shm names of every object the
 * open shm fabrics of this process made, leaving their mappings in place:
 * for a SIGTERM or SIGINT handler, so that a rank stopped by a signal
 * leaves nothing behind.  Async-signal-safe (unlink() only); any thread.
 * A fabric used after it cannot be found by restarted peers.
 */
void ss_fabric_remove_names(void);

/* ss_op_name() - "READ", "WRITE", "WRITE_WITH_IMM", "RECV_IMM", "FETCH_ADD". */
const char *ss_op_name(enum ss_op op);

#ifdef __cplusplus
}
#endif

#endif /* SHADOWSYNC_FABRIC_H */
